"""The water-filling class chain: a closed-form optimal rule for a whole group, any size, any n.

For a group G (tokens sorted by increasing ratio r_i = t_i / q_i, local ranks 0..K-1, K-1 on top), null mass N,
T = N + q(G), targets t with Hall's condition (every top set C_j = {j..K-1} has gap_j = T^n - H_j^n - t(C_j) >= 0,
H_j = N + q(ranks < j)):

* going down from the top, the *class* C_j (all members at the same remaining ratio) owns one priority slot:
  every draw of a class member fires with the same probability a_j, and a fired slot outputs one of the fired
  class draws uniformly at random; the slot is as long as it takes the class's remaining ratio to fall to
  r_{j-1}, then token j-1 joins the class;
* if nothing fired, one drafted draw of G is output uniformly at random with probability beta (beta = 1 for an
  outer group), else the tuple is rejected.

Peeling a slot of length x off the class C keeps every Hall gap of a set containing C exactly, and while C has
the highest ratios every binding set contains it, so feasibility is never lost. The class mass y_j after step j
solves one scalar equation, independent of the other steps,

    (H_j + y)^n - H_j^n - r_{j-1} y = gap_j,      y in [0, q(C_j)]  (convex in y, unique root),

then x_j = y_{j+1} + q_j - y_j and a_j = x_j / (y_{j+1} + q_j). By exchangeability a member's share of a slot
is its current mass over the class mass, which gives the row sums. On a tuple whose group draws have ranks
d_1 >= ... >= d_c, piece k (slots (d_{k+1}, d_k], d_{c+1} = 0) holds the top k draws with hazard
h_k = Lambda(d_{k+1} + 1) - Lambda(d_k + 1), Lambda(j) = sum_{j' >= j} -log(1 - a_j'): it fires with probability
reach_k (1 - e^{-k h_k}), shared equally by those k draws (evaluated in :func:`otlp.optimal.rule.evaluate_rule`).

It needs no Newton and no subset terms, so the solver uses it where those fail: leaves whose subset terms would
not fit in memory (n >= 3 on large vocabularies) and blocks whose Newton cannot reach machine precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otlp.optimal.peeling import _power_gap


@dataclass(frozen=True)
class ClassChain:
    """The class chain of one group, every array in the caller's token order (``[K]``).

    rank : the token's rank by increasing ratio t/q (stable); lam_above : Lambda(rank + 1), the finite hazard of
    the slots above the token, and certain_above the number of those slots with a = 1 (infinite hazard);
    total, total_certain : the same over every slot; beta : the final acceptance;
    rows : the rule's row sums (slot accounting); fire : a_j of the slot at each token's rank (0 for rank 0).
    """

    rank: np.ndarray
    lam_above: np.ndarray
    certain_above: np.ndarray
    total: float
    total_certain: float
    beta: float
    rows: np.ndarray
    fire: np.ndarray


def class_chain(t: np.ndarray, q: np.ndarray, null_mass: float, n: int, slack: float) -> ClassChain:
    """The water-filling class chain of a group (``t, q: float [K]``, q > 0; ``slack`` = c(G) - t(G) >= 0, 0 for
    an outer group, for which beta is 1)."""
    K = t.size
    r_all = t / q
    order = np.argsort(r_all, kind="stable")  # [K]: ranks by increasing ratio
    ts, qs, r = t[order], q[order], r_all[order]
    Qc = np.concatenate([[0.0], np.cumsum(qs)])  # [K + 1]
    top_t = np.concatenate([np.cumsum(ts[::-1])[::-1], [0.0]])  # [K + 1]: t(C_j)
    top_q = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])  # [K + 1]: q(C_j), summed from the top
    H = null_mass + Qc[:-1]  # [K]
    L = top_q[:-1]  # [K]
    gap = np.maximum(_power_gap(H, L, n) - top_t[:-1], 0.0)  # [K]: T^n - H_j^n - t(C_j)
    gap[0] = max(slack, 0.0)
    r_below = np.concatenate([[0.0], r[:-1]])  # r_{j-1}
    y = slot_mass(H, L, r_below, gap, n)
    y[0] = L[0]  # no slot for the whole group
    before = np.concatenate([y[1:], [0.0]]) + qs  # class mass entering step j: y_{j+1} + q_j
    x = np.clip(before - y, 0.0, before)  # slot length
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(before > 0, x / before, 0.0)
    a[0] = 0.0
    x[0] = 0.0
    slot = _power_gap(H + y, x, n)  # [K]: the tuple mass a slot serves
    share = np.where(before > 0, slot / np.where(before > 0, before, 1.0), 0.0)  # per unit of current class mass
    share[0] = 0.0
    capacity = float(_power_gap(np.array(null_mass), np.array(before[0]), n))  # the final class, nothing fired
    left = float(top_t[0] - slot.sum())  # t(G) minus what the slots served
    beta = min(max(left / capacity, 0.0), 1.0) if capacity > 0 else 0.0
    if slack == 0:
        beta = 1.0
    # a member of rank i fires in the slots j <= i with current mass q_i prod_{j < j' <= i} (1 - a_j'), so
    # R_i = q_i (S_i + F_i * final) with S_i = share_i + (1 - a_i) S_{i-1} and F_i = prod_{j' <= i} (1 - a_j')
    first = np.zeros((1, K), dtype=bool)
    first[0, 0] = True
    S, F = segmented_scan(share[None], (1.0 - a)[None], first)
    acc, reach = S[0], F[0]
    final = beta * capacity / before[0] if before[0] > 0 else 0.0
    rows_sorted = qs * (acc + reach * final)
    certain = a >= 1.0  # [K]: slots that fire for sure (infinite hazard), counted apart from the finite hazard
    lam = -np.log1p(-np.where(certain, 0.0, a))  # [K] finite hazard of slot j
    Lam = np.concatenate([np.cumsum(lam[::-1])[::-1], [0.0]])  # [K + 1]: Lambda(j), finite part
    Cnt = np.concatenate([np.cumsum(certain[::-1])[::-1], [0]]).astype(np.float64)  # [K + 1]: certain slots >= j
    rank = np.empty(K, dtype=np.int64)
    rank[order] = np.arange(K)
    rows = np.empty(K)
    rows[order] = rows_sorted
    fire = np.empty(K)
    fire[order] = a
    top = 1 if K > 1 else 0
    return ClassChain(rank=rank, lam_above=Lam[rank + 1], certain_above=Cnt[rank + 1], total=float(Lam[top]),
                      total_certain=float(Cnt[top]), beta=float(beta), rows=rows, fire=fire)


def slot_mass(H: np.ndarray, L: np.ndarray, r_below: np.ndarray, gap: np.ndarray, n: int) -> np.ndarray:
    """The class mass y after each step (arrays of any common shape): the root in [0, L] of the convex
    g(y) = (H + y)^n - H^n - r_below y - gap (g(0) <= 0 <= g(L)), by Newton from y = L kept in a shrinking bracket
    (bisection when a step leaves it). An entry stops when its step is at the rounding of y or g is zero within its
    own rounding; only the entries still moving are iterated."""
    shape = np.shape(L)
    H, L, r_below, gap = (np.broadcast_to(x, shape).ravel() for x in (H, L, r_below, gap))
    y = L.copy()
    act = np.arange(y.size)  # entries still moving
    h, l_, rb, gp, yy = H, L, r_below, gap, y.copy()
    lo, hi = np.zeros_like(yy), l_.copy()
    for _ in range(200):
        g = _power_gap(h, yy, n) - rb * yy - gp
        dg = n * (h + yy) ** (n - 1) - rb
        lo = np.where(g <= 0, np.maximum(lo, yy), lo)
        hi = np.where(g >= 0, np.minimum(hi, yy), hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = yy - g / np.where(dg > 0, dg, 1.0)
        new = np.where((dg > 0) & (new >= lo) & (new <= hi), new, 0.5 * (lo + hi))
        done = ((np.abs(new - yy) <= 4.5e-16 * yy + 1e-17 * l_)
                | (np.abs(g) <= 1e-15 * (_power_gap(h, yy, n) + rb * yy + gp)))
        y[act] = new
        if done.all():
            break
        keep = ~done
        act, h, l_, rb, gp, yy, lo, hi = act[keep], h[keep], l_[keep], rb[keep], gp[keep], new[keep], lo[keep], hi[keep]
    return y.reshape(shape)


def segmented_scan(share: np.ndarray, keep: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """S_i = share_i + keep_i S_{i-1} and F_i = keep_i F_{i-1} within segments (``first`` marks a segment's first
    element, where S = share and F = keep), along axis 1, by Hillis-Steele doubling: log2(V) vectorised steps of
    the associative map (k2, s2) o (k1, s1) = (k2 k1, s2 + k2 s1), products of numbers in [0, 1] only."""
    S, F = share.copy(), keep.copy()
    seg = np.cumsum(first, axis=1)  # [B, V] segment index
    V = share.shape[1]
    d = 1
    while d < V:
        same = np.zeros_like(first)
        same[:, d:] = seg[:, d:] == seg[:, :-d]  # the element d back is in the same segment
        S_prev = np.zeros_like(S)
        F_prev = np.ones_like(F)
        S_prev[:, d:] = S[:, :-d]
        F_prev[:, d:] = F[:, :-d]
        S = np.where(same, S + F * S_prev, S)
        F = np.where(same, F * F_prev, F)
        d *= 2
    return S, F
