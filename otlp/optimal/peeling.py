r"""Peeling tokens off a block: a chain of priority tokens ahead of a smaller softmax block (or of none).

Design note §7 idea 3 (voluntary priority inside a block). Take a group G = (s, e] with null mass N = Q_s and
total T = N + q(G). Give token j top priority in G: each draw of j independently "fires" with probability a_j,
and if any draw fires the rule outputs j. Draws of j that do not fire act as null for the rest G' = G \ {j},
which then sees the null mass N' = N + (1 - a_j) q_j and the total T' = T - a_j q_j. Two kinds of chain:

* **fire** (inner groups only): a tuple whose G-tokens are all unfired j-draws is left to G' as null, i.e.
  rejected. Then R_j = T^n - (T - a_j q_j)^n, and after peeling a set J (in any order) T'^n = T^n - p(J).
* **fallback** (inner and outer groups): such a tuple outputs j. Then

      R_j = [T^n - (T - a_j q_j)^n] + [(N + (1 - a_j) q_j)^n - N^n],

  monotone in a_j from (N + q_j)^n - N^n (a = 0: j has bottom priority) to T^n - (T - q_j)^n (a = 1: top
  priority). The capacity T^n - N^n drops by exactly R_j, so the remainder keeps the group's slack
  S = c(G) - t(G) (0 for an outer group, psi_s - psi_e for an inner one) and after peeling J its state solves

      (N' + L)^n - N'^n = t(G \ J) + S,    L = q(G \ J),

  again a function of the set J only. Each chain token needs 0 <= a_j <= 1, i.e. N' non-decreasing along the
  chain. With no fire and no remainder token, the last-peeled chain token present is output.

In both kinds every chain token gets R_j = t_j exactly (closed form), and the remainder is a block program of the
same kind (note §2 (ii)-(iii)) that must have a finite minimiser, i.e. strict Hall on its prefixes in q/p order
(Lemma 6.3: the extreme sets are prefixes): with psi'_m = P'_m - ((N' + Q'_m)^n - N'^n), inner remainders need
psi'_end < min_{m < end} psi'_m and are cut at their strict prefix-minimum records into sub-blocks; an outer
remainder (psi'_end = 0) needs psi'_m > 0 inside and stays one leaf.

We peel J = (top t positions of G, taken from the top down) then (bottom b positions, from the bottom up) and
search (b, t) for the largest feasible peel: complete peels (one token left) first, for blocks up to 128 tokens,
then every pair at once for blocks up to ALL_PAIRS_MAX tokens; what is left above ALL_PAIRS_MAX tokens becomes a
class chain (:mod:`.waterfill`). Every state of every candidate comes from one vectorised call, so a candidate
costs a few gathers. The fallback kind peels most of the large nearly balanced blocks (alpha* close to 1) that the
fire kind cannot touch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import comb

import numpy as np

from otlp.optimal.chains import power_gap

#: the remainder's Hall gap must exceed this fraction of t(G) (keeps peeled remainders well conditioned); for
#: the fallback kind on an inner group it is capped at half the group's slack, which the remainder keeps.
HALL_MARGIN = 1e-9
#: blocks up to this size check every (b, t) pair at once; larger ones try complete peels only (:func:`_search`).
ALL_PAIRS_MAX = 24
#: larger blocks up to this size try every complete peel (b + t = K - 1) in one call; beyond it the [K, K] call
#: costs more than the class chain that takes such a block otherwise.
COMPLETE_FIRST_MAX = 128


@dataclass(frozen=True)
class Peel:
    """A peeled block (indices are local to the block, in q/p order).

    chain : int [c], the peeled positions in priority order (rank 0 fires first).
    fire_mass : float [c], a_j q_j of each peeled position.
    fire : float [c], the fire probability a_j per draw.
    rows : float [c], the rule's row sums of the chain tokens (positive forms).
    leaves : list of (start, stop) local ranges of the remainder's sub-blocks (half-open, increasing).
    leaf_null : float [L], the null mass of each sub-block.
    fallback : the chain kind (module docstring): True when an unfired chain token is output if no remainder
        token is drafted, False when such a tuple is rejected.
    leaf_inner : whether the remainder's leaves may reject (False for an inner group peeled as balanced).
    leaf_slack : float [L], c(leaf) - t(leaf) of each sub-block (0 for outer ones), for peeling it again.
    """

    chain: np.ndarray
    fire_mass: np.ndarray
    fire: np.ndarray
    rows: np.ndarray
    leaves: list
    leaf_null: np.ndarray
    fallback: bool = False
    leaf_inner: bool = True
    leaf_slack: np.ndarray = None

    @property
    def largest_leaf(self) -> int:
        return max((b - a for a, b in self.leaves), default=0)


def _chain(b: int, t: int, K: int) -> np.ndarray:
    return np.concatenate([np.arange(K - 1, K - 1 - t, -1), np.arange(b)]).astype(np.int64)


def null_for_excess(E: np.ndarray, L: np.ndarray, n: int) -> np.ndarray:
    """The N >= 0 with (N + L)^n - N^n - L^n = E (a remainder of q-mass L > 0 whose capacity exceeds L^n by E);
    NaN where E < 0.

    Closed forms for n = 2 (linear) and n = 3 (the stable root of 3L N^2 + 3L^2 N - E). For n >= 4, in
    u = N / L: h(u) = (u + 1)^n - u^n = r := 1 + E / L^n, h convex increasing, with the upper bounds
    u <= (r - 1) / n (h(u) >= 1 + n u) and u <= (r / n)^(1/(n-1)) - 1/2 (h(u) >= n (u + 1/2)^(n-1), Jensen);
    Newton from the smaller bound decreases monotonically to the root (stopped when a step no longer shrinks u).
    """
    excess = np.asarray(E, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if n == 2:
            N = excess / (2.0 * L)
        elif n == 3:
            N = 2.0 * excess / (3.0 * L * L + np.sqrt(9.0 * L**4 + 12.0 * L * excess))
        else:
            r1 = np.maximum(excess / L**n, 0.0)  # r - 1 >= 0
            u = np.minimum(r1 / n, ((r1 + 1.0) / n) ** (1.0 / (n - 1)) - 0.5)
            u = np.where(np.isfinite(u), np.maximum(u, 0.0), 0.0)
            coef = [float(comb(n, j)) for j in range(n - 1, 0, -1)]  # C(n, n-1), ..., C(n, 1)
            for _ in range(60):
                # h(u) - 1 = u P(u), P(u) = sum_{j=1}^{n-1} C(n, j) u^(j-1) (positive form): P and P' by one Horner
                # pass over positive coefficients (no cancellation, no powers); f = u P - (r - 1), f' = P + u P'
                P, dP = coef[0], 0.0
                for c in coef[1:]:
                    dP = dP * u + P
                    P = P * u + c
                f = P * u - r1
                df = P + dP * u
                step = f / df
                moving = step > 2e-16 * u
                u = np.where(moving, u - step, u)
                if not moving.any():
                    break
            N = u * L
    return np.where((excess >= 0) & (L > 0), np.maximum(N, 0.0), np.nan)


def _excess(lo: np.ndarray, hi: np.ndarray, P: np.ndarray, Q: np.ndarray, Ps: np.ndarray, Qs: np.ndarray,
            e0: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(E, L) of the remainder [lo, hi) of a fallback chain: L = q([lo, hi)) and, with the capacity
    c(G) = (N0 + L0)^n - N0^n that the chain conserves, E = c(G) - t(outside) - L^n written as

        E = E0 + (L0^n - L^n) - t(outside),   E0 = (N0 + L0)^n - N0^n - L0^n,

    from sums over the peeled outside only (prefix sums P, Q from the bottom, suffix sums Ps, Qs from the top),
    so states stay exact at the rounding level of the peeled mass even when q(G) is close to 1."""
    L = Q[hi] - Q[lo]
    q_out = Q[lo] + Qs[hi]
    t_out = P[lo] + Ps[hi]
    return e0 + power_gap(L, q_out, n) - t_out, L


def _prefix_sums(x: np.ndarray) -> np.ndarray:
    """``[K]`` -> ``[K + 1]``: the sums of the first m entries, m = 0..K."""
    out = np.zeros(x.size + 1)
    np.cumsum(x, out=out[1:])
    return out


def _group_sums(t: np.ndarray, q: np.ndarray, null_mass: float, n: int) -> tuple:
    Ps = np.zeros(t.size + 1)  # [K + 1]: t of positions >= m, summed from the top
    np.cumsum(t[::-1], out=Ps[-2::-1])
    Qs = np.zeros(q.size + 1)
    np.cumsum(q[::-1], out=Qs[-2::-1])
    N0, L0 = float(null_mass), float(Qs[0])
    e0 = sum(comb(n, j) * N0 ** (n - j) * L0**j for j in range(1, n))  # (N0 + L0)^n - N0^n - L0^n
    return Ps, Qs, e0


# -- the fire kind (inner groups) ----------------------------------------------------------------------------
def _fire_feasible(p: np.ndarray, q: np.ndarray, null_mass: float, n: int, bs: np.ndarray, ts: np.ndarray,
                   P: np.ndarray, Q: np.ndarray, margin: float) -> np.ndarray:
    """Which candidates (b, t) (``int [C]`` each) give a remainder with strict Hall and fire probabilities <= 1."""
    K = p.size
    total = null_mass + Q[K]
    total_n = total**n
    idx = np.arange(K)
    in_chain = (idx[None, :] >= K - ts[:, None]) | (idx[None, :] < bs[:, None])
    # p mass peeled before each chain element (exclusive): top part is a suffix sum, bottom part adds p(top)
    top_before = P[K] - P[idx + 1]  # [K]: mass of positions above idx
    ptop = P[K] - P[K - ts]  # [C]
    before = np.where(idx[None, :] >= K - ts[:, None], top_before[None, :], ptop[:, None] + P[idx][None, :])
    with np.errstate(invalid="ignore", divide="ignore"):
        level = total_n - before  # Qt^n before peeling the element
        frac = np.where(in_chain, p[None, :] / np.where(level > 0, level, 1.0), 0.0)
        prev = np.where(level > 0, level, 0.0) ** (1.0 / n)
        fire_mass = -prev * np.expm1(np.log1p(-np.minimum(frac, 1.0)) / n)
    ok = ~(in_chain & ((fire_mass > q[None, :]) | (frac >= 1.0) | (level <= 0))).any(1)
    # remainder (b, K - t]: total after peeling, null Q0' = Qt' - q(mid)
    pj = ptop + P[bs]
    rest_n = total_n - pj
    mid_q = Q[K - ts] - Q[bs]
    with np.errstate(invalid="ignore"):
        null_new = np.maximum(rest_n, 0.0) ** (1.0 / n) - mid_q  # [C]
    ok &= (K - ts - bs >= 1) & (null_new >= null_mass * (1 - 1e-12))
    null_new = np.maximum(null_new, 0.0)
    return ok & _remainder_hall(P, Q, n, bs, K - ts, null_new, margin, inner=True)


def _remainder_hall(P: np.ndarray, Q: np.ndarray, n: int, lo: np.ndarray, hi: np.ndarray, null: np.ndarray,
                    margin: float, inner: bool) -> np.ndarray:
    """Strict Hall on the remainders [lo, hi) with null masses ``null`` (all ``[C]``): psi'_hi is below every
    psi'_m, m in [lo, hi) for an inner remainder, m in (lo, hi) for an outer one, by more than ``margin``.
    One-token remainders (complete peels) need only psi'_hi: below psi'_lo = 0 if inner, any finite value if outer."""
    if (hi - lo == 1).all():
        with np.errstate(invalid="ignore", over="ignore"):
            end_val = (P[hi] - P[lo]) - power_gap(null, np.maximum(Q[hi] - Q[lo], 0.0), n)  # [C]
        return np.isfinite(end_val) & (end_val < -margin) if inner else np.isfinite(end_val)
    C = lo.size
    K = P.size - 1
    m = np.arange(K + 1)
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.maximum(Q[None, :] - Q[lo][:, None], 0.0)  # [C, K + 1]
        psi = (P[None, :] - P[lo][:, None]) - power_gap(null[:, None], x, n)
    first = lo if inner else lo + 1
    inside = (m[None, :] >= first[:, None]) & (m[None, :] < hi[:, None])
    end_val = psi[np.arange(C), hi]
    lowest = np.where(inside, psi, np.inf).min(1)
    return np.isfinite(end_val) & (end_val < lowest - margin)


def peel_block(p: np.ndarray, q: np.ndarray, null_mass: float, n: int) -> Peel | None:
    """Fire-peel as much of the inner block (``p, q: float [K]`` in q/p order) as Hall allows; None if nothing."""
    K = p.size
    if K < 2 or K > COMPLETE_FIRST_MAX or n < 2 or q.min() <= 0:
        return None
    P, Q = _prefix_sums(p), _prefix_sums(q)  # [K + 1]
    margin = HALL_MARGIN * P[K]
    b, t = _search(K, lambda bs, ts: _fire_feasible(p, q, null_mass, n, bs, ts, P, Q, margin))
    if b + t == 0:
        return None
    return _finish_fire(p, q, null_mass, n, b, t, P, Q)


# -- the fallback kind (inner and outer groups) -----------------------------------------------------------------
class _FallbackSearch:
    """Feasibility of fallback chains (b, t) for one group; the candidate-independent part is built once.

    A chain (b, t) peels the top t positions K-1, K-2, ... (remainders [0, m), m = K, ..., hi = K - t) and then the
    bottom b positions 0, 1, ... (remainders [i, hi), i = 0, ..., b). Every state (the null mass of a remainder
    [i, m)) is computed once, for all m in 1..K and i in 0..K (``states [K, K + 1]``, one call of
    :func:`null_for_excess`); ``bad_above[m]`` says whether any top position >= m would need a_j outside [0, 1]
    and ``first_bad[m - 1]`` is the first bottom position that would, below the end m.
    """

    def __init__(self, t: np.ndarray, q: np.ndarray, null_mass: float, n: int, slack: float, P: np.ndarray,
                 Q: np.ndarray, margin: float):
        K = t.size
        self.n, self.slack, self.P, self.Q, self.margin, self.K = n, slack, P, Q, margin, K
        tol, slop = 1e-12, 1e-15 * (null_mass + Q[K])  # states carry absolute rounding of order eps * T, T = N + q(G)
        self.y_low, self.y_high = -tol * q - slop, q * (1 + tol) + slop  # [K]: allowed (1 - a_j) q_j, with slack
        self.Ps, self.Qs, self.e0 = _group_sums(t, q, null_mass, n)
        idx = np.arange(K + 1)
        with np.errstate(invalid="ignore"):
            states = null_for_excess(*self._excess(idx[None, :], idx[1:, None]), n)  # [K, K + 1]: state of [i, m)
        states[K - 1, 0] = null_mass  # [0, K): nothing peeled yet
        n_top = np.concatenate([[np.nan], states[:, 0]])  # [K + 1]: state of [0, m)
        self.n_top, self.states = n_top, states
        bad_top = ~self._good(n_top[:-1] - n_top[1:])  # [K]: top element i, y = (1 - a_i) q_i (NaN -> bad)
        self.bad_above = np.concatenate([np.logical_or.accumulate(bad_top[::-1])[::-1], [False]])  # [K + 1]
        good = self._good(states[:, 1:] - states[:, :-1])  # [K, K]: bottom element i below end m
        self.first_bad = np.where(good.all(1), K, np.argmin(good, axis=1))  # [K]: bottom elements i < this are good

    def _excess(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _excess(lo, hi, self.P, self.Q, self.Ps, self.Qs, self.e0, self.n)

    def _good(self, y: np.ndarray) -> np.ndarray:
        """0 <= a_j <= 1 for y = (1 - a_j) q_j along the last axis (positions), within the rounding slack."""
        return (y >= self.y_low) & (y <= self.y_high)

    def __call__(self, bs: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Which candidates (b, t) give 0 <= a_j <= 1 along the chain and a remainder with strict Hall."""
        hi = self.K - ts  # [C]: the remainder is [b, hi)
        ok = (hi - bs >= 1) & ~self.bad_above[hi] & (bs <= self.first_bad[hi - 1])
        null_end = self.states[hi - 1, bs]
        ok &= np.isfinite(null_end)
        return ok & _remainder_hall(self.P, self.Q, self.n, bs, hi, np.where(np.isfinite(null_end), null_end, 0.0),
                                    self.margin, inner=self.slack > 0)

    def chain_states(self, b: int, top: int) -> np.ndarray:
        """The null masses along the chain (b, top): before each chain element and after the last, ``[c + 1]``."""
        hi = self.K - top
        return np.concatenate([self.n_top[self.K : hi : -1], self.states[hi - 1, : b + 1]])


def peel_fallback(t: np.ndarray, q: np.ndarray, null_mass: float, n: int, slack: float) -> Peel | None:
    """Fallback-peel a group (``t, q: float [K]`` in q/p order, targets t; ``slack`` = c(G) - t(G), 0 for an
    outer group) as far as the chain and the remainder's Hall allow; None if nothing peels."""
    K = t.size
    if K < 2 or K > COMPLETE_FIRST_MAX or n < 2 or q.min() <= 0 or slack < 0:
        return None
    P, Q = _prefix_sums(t), _prefix_sums(q)  # [K + 1]
    margin = HALL_MARGIN * P[K] if slack == 0 else min(HALL_MARGIN * P[K], 0.5 * slack)
    search = _FallbackSearch(t, q, null_mass, n, slack, P, Q, margin)
    b, top = _search(K, search)
    if b + top == 0:
        return None
    return _finish_fallback(t, q, n, slack, b, top, Q, search)


# -- the (b, t) search ----------------------------------------------------------------------------------------
def _search(K: int, feasible: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[int, int]:
    """The (b, t) with the most peeled positions: a complete peel (b + t = K - 1, one token left; the smallest b
    first) for K <= COMPLETE_FIRST_MAX, else for K <= ALL_PAIRS_MAX the best of every pair (most peeled, then the
    smallest b); (0, 0) if none. Complete peels are checked first because they are the most common outcome and
    their Hall test is O(1) per candidate. A partial peel of a large block is not searched for: such a block becomes
    a class chain (:mod:`.waterfill`), which costs less than the search (heavy-tailed (100, 2): p95 2.49 -> 1.12 ms;
    decode (1000, 2): max 22.8 -> 1.8 ms, best of 3 per pair)."""
    if K <= COMPLETE_FIRST_MAX:
        b = np.arange(K, dtype=np.int64)
        ok = feasible(b, K - 1 - b)
        if ok.any():
            i = int(np.argmax(ok))
            return int(b[i]), int(K - 1 - b[i])
    if K <= ALL_PAIRS_MAX:
        b, t = np.divmod(np.arange(K * K), K)
        keep = (b + t >= 1) & (b + t < K - 1)  # the complete peels failed above
        b, t = b[keep], t[keep]
        if b.size == 0:
            return 0, 0
        ok = feasible(b, t)
        if not ok.any():
            return 0, 0
        i = int(np.argmax(np.where(ok, b + t, -1)))
        return int(b[i]), int(t[i])
    return 0, 0


# -- building the chain and the remainder's leaves ------------------------------------------------------------
def _leaves(t: np.ndarray, q: np.ndarray, n: int, b: int, hi: int, null_new: float, inner: bool) -> tuple:
    """Sub-blocks of the remainder [b, hi): strict prefix-minimum records for an inner one, one leaf otherwise."""
    if not inner:
        return [(b, hi)], np.array([null_new]), np.zeros(1)
    if hi - b == 1:  # one token left (a complete peel): one leaf, slack c - t of that token
        return [(b, hi)], np.array([null_new]), np.array([max(power_gap(null_new, q[b], n) - t[b], 0.0)])
    Pm, Qm = _prefix_sums(t[b:hi]), _prefix_sums(q[b:hi])  # [hi - b + 1]
    psi = Pm - power_gap(null_new, Qm, n)  # [hi - b + 1]
    prefix_min = np.minimum.accumulate(psi)
    rec = np.flatnonzero(psi[1:] < prefix_min[:-1]) + 1  # strict new prefix minima
    rec = np.unique(np.concatenate([[0], rec, [hi - b]]))
    leaves = [(b + int(rec[i]), b + int(rec[i + 1])) for i in range(rec.size - 1)]
    return leaves, null_new + Qm[rec[:-1]], np.maximum(psi[rec[:-1]] - psi[rec[1:]], 0.0)


def _finish_fire(p, q, null_mass, n, b, t, P, Q) -> Peel:
    K = p.size
    chain = _chain(b, t, K)
    pc = p[chain]
    total = null_mass + Q[K]
    level = total**n - np.concatenate([[0.0], np.cumsum(pc)[:-1]])  # Qt^n before each peel
    prev = level ** (1.0 / n)
    fire_mass = np.minimum(-prev * np.expm1(np.log1p(-np.minimum(pc / level, 1.0)) / n), q[chain])
    fire = fire_mass / q[chain]
    rows = power_gap(prev - fire_mass, fire_mass, n)  # R_j = Qt^n - (Qt - a q)^n, positive form
    null_new = null_mass + float((q[chain] - fire_mass).sum())
    leaves, leaf_null, leaf_slack = _leaves(p, q, n, b, K - t, null_new, inner=True)
    return Peel(chain=chain, fire_mass=fire_mass, fire=fire, rows=rows, leaves=leaves, leaf_null=leaf_null,
                leaf_slack=leaf_slack)


def _finish_fallback(t, q, n, slack, b, top, Q, search: _FallbackSearch) -> Peel:
    """States along the chain (each a function of the peeled set), then a_j and R_j from consecutive states."""
    K = t.size
    chain = _chain(b, top, K)
    hi = K - top
    # the remainder before each chain element is [0, m), m = K..hi + 1, for the top part and [i, hi), i < b, below
    states = search.chain_states(b, top)  # [c + 1], states[0] = null_mass
    qc = q[chain]
    unfired = np.minimum(np.maximum(np.diff(states), 0.0), qc)  # (1 - a_j) q_j (np.clip costs more)
    fire_mass = qc - unfired
    before = states[:-1]
    total_before = before + np.concatenate([Q[K:hi:-1], Q[hi] - Q[:b]])  # T = N + L
    rows = power_gap(total_before - fire_mass, fire_mass, n) + power_gap(before, unfired, n)
    leaves, leaf_null, leaf_slack = _leaves(t, q, n, b, hi, float(states[-1]), inner=slack > 0)
    return Peel(chain=chain, fire_mass=fire_mass, fire=fire_mass / qc, rows=rows, leaves=leaves,
                leaf_null=leaf_null, fallback=True, leaf_inner=slack > 0, leaf_slack=leaf_slack)


#: an inner group whose slack c(G) - p(G) is at most this (absolute) may be peeled as if balanced (outer).
BALANCED_SLACK = 1e-14


def peel_group(t: np.ndarray, q: np.ndarray, null_mass: float, n: int, slack: float, inner: bool) -> Peel | None:
    """The best peel of a group (``t, q: float [K]`` in q/p order): outer groups take the fallback kind; inner
    groups of at most ALL_PAIRS_MAX tokens also try the fire kind unless the fallback chain already left no leaf
    above one token. The smallest largest leaf wins, then the longer chain, then the fire kind. None if nothing
    peels.

    An inner group with slack S <= BALANCED_SLACK (alpha* = 1 up to rounding) is also tried as balanced: its
    remainder then never rejects, the rows overshoot p by at most S in total (far below the 1e-12 exactness), and
    the Hall test no longer sits at the rounding level of S, where it fails at random.
    """
    fallback = peel_fallback(t, q, null_mass, n, slack if inner else 0.0)
    if not inner or (fallback is not None and fallback.largest_leaf <= 1):
        return fallback
    balanced = peel_fallback(t, q, null_mass, n, 0.0) if slack <= BALANCED_SLACK else None
    # the fire kind only on small groups: above ALL_PAIRS_MAX its complete-peel check ([K, K] arrays) costs more
    # than the class chain such a group gets otherwise, and it succeeds on few of them (11 of 73 inner groups of
    # 25..128 tokens whose fallback chain was not complete, heavy + decode grid; heavy (100, 2), K = 92: check
    # 0.39 ms, class chain 0.25 ms)
    fire = peel_block(t, q, null_mass, n) if t.size <= ALL_PAIRS_MAX else None
    options = [o for o in (fire, fallback, balanced) if o is not None]
    if not options:
        return None
    return min(options, key=lambda o: (o.largest_leaf, -o.chain.size))
