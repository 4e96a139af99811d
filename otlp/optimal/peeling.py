"""Peeling tokens off an inner block: a chain of "fire" tokens ahead of a smaller softmax block.

Design note §7 idea 3 (voluntary priority inside an inner block). Take an inner block G = (s, e] with null mass
Q0 = Q_s and let Qt = Q0 + q(G). Give token j top priority in G: each draw of j independently "fires" with
probability a_j, and if any draw fires the rule outputs j. Its row sum is

    R_j = Qt^n - (Qt - a_j q_j)^n,   so   R_j = p_j  <=>  a_j q_j = Qt - (Qt^n - p_j)^(1/n)      (a_j <= 1 needed)

(all n draws lie in positions <= e, at least one is a fired j). Draws of j that do not fire act as null for
the rest of the block: the remainder G' = G \\ {j} sees the null mass Q0' = Q0 + (1 - a_j) q_j and the total
Qt' = Qt - a_j q_j = (Qt^n - p_j)^(1/n). Repeating, after peeling a set J (in any order)

    Qt'^n = Qt^n - p(J),    Q0' = Q0 + sum_{j in J} (1 - a_j) q_j,

so the remainder's state depends on J only. The remainder is an inner block program again (note §2 (iii)) and it
has a finite minimiser iff Hall holds strictly on it: with the remainder's own prefix values (q/p order kept)

    psi'_m = P'_m - ((Q0' + Q'_m)^n - Q0'^n),   psi'_end < min_{m < end} psi'_m

(Lemma 6.3: the minimum of p(T) - (Q0' + q(T))^n over T is at a prefix). Its strict prefix-minimum records cut
it into sub-blocks (the note's records with null Q0' + Q'_s). Every such choice gives row sums exactly p on G, so
the plan stays optimal (note §2: inner blocks only need R = p and column sums <= q^n).

We peel J = (top t positions of G, taken from the top down) then (bottom b positions, from the bottom up) and
search (b, t) greedily for the largest feasible peel. Each candidate costs O(|G|) and candidates are checked in
vectorised batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

#: the remainder's Hall gap must exceed this fraction of p(G) (keeps peeled remainders well conditioned).
HALL_MARGIN = 1e-9
#: blocks up to this size check every (b, t) pair at once; larger ones search greedily.
ALL_PAIRS_MAX = 24


@dataclass(frozen=True)
class Peel:
    """A peeled inner block (indices are local to the block, in q/p order).

    chain : int [c], the peeled positions in firing order (priority order).
    fire_mass : float [c], a_j q_j of each peeled position.
    fire : float [c], the fire probability a_j per draw.
    rows : float [c], the rule's row sums of the chain tokens, Qt_(i-1)^n - Qt_i^n (positive form).
    leaves : list of (start, stop) local ranges of the remainder's sub-blocks (half-open, increasing).
    leaf_null : float [L], the null mass of each sub-block.
    """

    chain: np.ndarray
    fire_mass: np.ndarray
    fire: np.ndarray
    rows: np.ndarray
    leaves: list
    leaf_null: np.ndarray


def _power_gap(base: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """(base + x)^n - base^n as the positive sum sum_{j>=1} C(n, j) base^(n-j) x^j (no cancellation)."""
    out = n * base ** (n - 1) * x
    for j in range(2, n + 1):
        out = out + comb(n, j) * base ** (n - j) * x**j
    return out


def _chain(b: int, t: int, K: int) -> np.ndarray:
    return np.concatenate([np.arange(K - 1, K - 1 - t, -1), np.arange(b)]).astype(np.int64)


def _feasible(p: np.ndarray, q: np.ndarray, null_mass: float, n: int, bs: np.ndarray, ts: np.ndarray,
              P: np.ndarray, Q: np.ndarray, margin: float) -> np.ndarray:
    """Which candidates (b, t) (``int [C]`` each) give a remainder with strict Hall and fire probabilities <= 1."""
    K = p.size
    C = bs.size
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
    m = np.arange(K + 1)
    x = np.maximum(Q[None, :] - Q[bs][:, None], 0.0)  # [C, K + 1]
    psi = (P[None, :] - P[bs][:, None]) - _power_gap(null_new[:, None], x, n)
    inside = (m[None, :] >= bs[:, None]) & (m[None, :] < (K - ts)[:, None])  # m in [b, end)
    end_val = psi[np.arange(C), K - ts]
    lowest = np.where(inside, psi, np.inf).min(1)
    ok &= end_val < lowest - margin
    return ok


def peel_block(p: np.ndarray, q: np.ndarray, null_mass: float, n: int) -> Peel | None:
    """Peel as much of the inner block (``p, q: float [K]`` in q/p order) as Hall allows; None if nothing peels."""
    K = p.size
    if K < 2 or n < 2 or np.any(q <= 0):
        return None
    P = np.concatenate([[0.0], np.cumsum(p)])  # [K + 1]
    Q = np.concatenate([[0.0], np.cumsum(q)])
    margin = HALL_MARGIN * P[K]
    if K <= ALL_PAIRS_MAX:
        b, t = np.divmod(np.arange(K * K), K)
        keep = (b + t >= 1) & (b + t <= K - 1)
        b, t = b[keep], t[keep]
        ok = _feasible(p, q, null_mass, n, b, t, P, Q, margin)
        if not ok.any():
            return None
        score = np.where(ok, b + t, -1)
        i = int(np.argmax(score))
        b, t = int(b[i]), int(t[i])
    else:
        b, t = _greedy(p, q, null_mass, n, P, Q, margin)
        if b + t == 0:
            return None
    return _finish(p, q, null_mass, n, b, t, P, Q)


def _greedy(p, q, null_mass, n, P, Q, margin) -> tuple[int, int]:
    """Alternately grow t (top peels) and b (bottom peels) to the largest feasible value found by a vectorised
    geometric-then-linear scan (feasibility need not be monotone: any feasible pair is valid)."""
    K = p.size
    b = t = 0
    for _ in range(4):
        changed = False
        for side in ("t", "b"):
            room = K - 1 - b - t
            if room <= 0:
                break
            steps = np.unique(np.minimum(2 ** np.arange(int(np.log2(room)) + 2), room))
            for _refine in range(2):
                cand_b = np.full(steps.size, b) + (steps if side == "b" else 0)
                cand_t = np.full(steps.size, t) + (steps if side == "t" else 0)
                ok = _feasible(p, q, null_mass, n, cand_b, cand_t, P, Q, margin)
                if not ok.any():
                    break
                best = int(steps[np.flatnonzero(ok).max()])
                bigger = steps[steps > best]
                if side == "b":
                    b_new, t_new = b + best, t
                else:
                    b_new, t_new = b, t + best
                if bigger.size == 0:
                    b, t = b_new, t_new
                    changed = True
                    break
                # refine between best and the next (infeasible) step with a linear grid
                hi = int(bigger.min())
                b, t = b_new, t_new
                changed = True
                steps = np.unique(np.linspace(1, hi - best - 1, num=min(16, max(hi - best - 1, 1))).astype(np.int64))
                steps = steps[steps >= 1]
                if steps.size == 0:
                    break
        if not changed:
            break
    return b, t


def _finish(p, q, null_mass, n, b, t, P, Q) -> Peel:
    K = p.size
    chain = _chain(b, t, K)
    pc = p[chain]
    total = null_mass + Q[K]
    level = total**n - np.concatenate([[0.0], np.cumsum(pc)[:-1]])  # Qt^n before each peel
    prev = level ** (1.0 / n)
    fire_mass = np.minimum(-prev * np.expm1(np.log1p(-np.minimum(pc / level, 1.0)) / n), q[chain])
    fire = fire_mass / q[chain]
    rows = _power_gap(prev - fire_mass, fire_mass, n)  # R_j = Qt^n - (Qt - a q)^n, positive form
    null_new = null_mass + float((q[chain] - fire_mass).sum())
    mid = np.arange(b, K - t)
    pm, qm = p[mid], q[mid]
    Pm = np.concatenate([[0.0], np.cumsum(pm)])
    Qm = np.concatenate([[0.0], np.cumsum(qm)])
    psi = Pm - _power_gap(null_new, Qm, n)  # [|mid| + 1]
    prefix_min = np.minimum.accumulate(psi)
    rec = np.flatnonzero(psi[1:] < prefix_min[:-1]) + 1  # strict new prefix minima
    rec = np.unique(np.concatenate([[0], rec, [mid.size]]))
    leaves = [(b + int(rec[i]), b + int(rec[i + 1])) for i in range(rec.size - 1)]
    leaf_null = null_new + Qm[rec[:-1]]
    return Peel(chain=chain, fire_mass=fire_mass, fire=fire, rows=rows, leaves=leaves, leaf_null=leaf_null)
