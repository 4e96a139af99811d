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

from otlp.optimal.chains import NEWTON_STEPS, power_gap, segmented_scan, slot_mass


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
    an outer group, for which beta is 1): :func:`class_chain_segments` on one segment in ratio order."""
    K = t.size
    order = np.argsort(t / q, kind="stable")  # [K]: ranks by increasing ratio
    ts, qs = t[order], q[order]
    H = null_mass + np.concatenate([[0.0], np.cumsum(qs)[:-1]])  # [K]
    L = np.cumsum(qs[::-1])[::-1]  # [K]: q(C_j), summed from the top
    gap = np.maximum(power_gap(H, L, n) - np.cumsum(ts[::-1])[::-1], 0.0)  # [K]: T^n - H_j^n - t(C_j)
    gap[0] = max(slack, 0.0)
    seg = class_chain_segments(ts[None], qs[None], H[None], gap[None], np.full((1, K), slack > 0),
                               np.zeros((1, K), dtype=np.int64), np.full((1, K), K), n)
    rank = np.empty(K, dtype=np.int64)
    rank[order] = np.arange(K)
    rows = np.empty(K)
    rows[order] = seg.rows[0]
    fire = np.empty(K)
    fire[order] = seg.fire[0]
    return ClassChain(rank=rank, lam_above=seg.lam_above[0, rank], certain_above=seg.certain_above[0, rank],
                      total=float(seg.total[0, 0]), total_certain=float(seg.total_certain[0, 0]),
                      beta=float(seg.beta[0, 0]), rows=rows, fire=fire)


@dataclass(frozen=True)
class SegmentChains:
    """:func:`class_chain_segments`' output, ``[B, V]`` by position; beta and the totals are read at a segment's
    first position only (elsewhere they hold other values: the totals are lam_above / certain_above there).
    fire : a_j; rows : R_j; lam_above / certain_above : the finite hazard and the number of certain slots above the
    position in its segment; total / total_certain : the same over the whole segment."""

    fire: np.ndarray
    rows: np.ndarray
    lam_above: np.ndarray
    certain_above: np.ndarray
    beta: np.ndarray
    total: np.ndarray
    total_certain: np.ndarray


def class_chain_segments(t: np.ndarray, q: np.ndarray, H: np.ndarray, gap: np.ndarray, inner: np.ndarray,
                         start: np.ndarray, end: np.ndarray, n: int) -> SegmentChains:
    """Class chains of many groups at once: ``[B, V]`` arrays whose rows are cut into segments (groups) of
    positions in increasing ratio t/q; per position its target t, draft mass q, H = the null mass below it, gap
    (the Hall gap of the top set from it; the group's slack at its first position), inner (the group may reject),
    start / end (the group's first position and one past its last). Module docstring for the equations."""
    B, V = t.shape
    idx = np.arange(V)[None, :]
    row = np.arange(B)[:, None]  # X[row, end] gathers along axis 1 (take_along_axis costs more per call)
    first = idx == start
    L = _in_segment_from(q, row, end)  # q(C_j), from the top
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(q > 0, t / np.where(q > 0, q, 1.0), 0.0)
    r_below = np.zeros((B, V))
    r_below[:, 1:] = r[:, :-1]
    # the class mass after each step
    y = np.where(first, L, slot_mass(H, L, np.where(first, 0.0, r_below), gap, n, NEWTON_STEPS))
    y_above = np.zeros((B, V))
    y_above[:, :-1] = y[:, 1:]
    before = np.where(idx + 1 == end, 0.0, y_above) + q  # class mass entering the step at this position
    x = np.where(first, 0.0, np.minimum(np.maximum(before - y, 0.0), before))  # slot length
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(before > 0, x / np.where(before > 0, before, 1.0), 0.0)
        slot = power_gap(H + y, x, n)  # the tuple mass a slot serves
        share = np.where(before > 0, slot / np.where(before > 0, before, 1.0), 0.0)  # per unit of class mass
    share = np.where(first, 0.0, share)
    # per group (at its first position): capacity of the final class (N + y_0)^n - N^n, and beta
    capacity = power_gap(H, before, n)
    # t(G) - its slots, at each group's first position, summed within the group (a difference of row-wide suffix sums
    # put ~1e-16 absolute rounding on it, i.e. ~1e-8 relative on the beta of a group of capacity ~1e-8)
    starts = np.flatnonzero(first)  # row-major; every row starts a group, so no group crosses a row
    left = np.zeros((B, V))
    left.flat[starts] = np.add.reduceat((t - np.where(first, 0.0, slot)).ravel(), starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(capacity > 0, np.clip(left / np.where(capacity > 0, capacity, 1.0), 0.0, 1.0), 0.0)
    beta = np.where(inner, beta, 1.0)
    final = np.where(first & (before > 0), beta * capacity / np.where(before > 0, before, 1.0), 0.0)
    # a member fires in the slots at or below its position with its current mass, so R_i = q_i (S_i + F_i final)
    # with S_i = share_i + (1 - a_i) S_{i-1} and F_i = prod (1 - a) over the group's positions <= i
    S, F = segmented_scan(share, np.where(first, 1.0, 1.0 - a), first)
    rows = q * (S + F * final[row, start])
    # hazards from the top of each group: Lambda(j + 1) = sum over the group's slots above position j; at a group's
    # first position that is every slot of the group (the first position has none), i.e. the totals
    certain = (a >= 1.0) & ~first  # slots that fire for sure (infinite hazard), counted apart
    lam = np.where(certain | first, 0.0, -np.log1p(-np.where(certain, 0.0, a)))
    lam_above = _in_segment_from(lam, row, end, shift=1)
    certain_above = _in_segment_from(certain.astype(np.float64), row, end, shift=1) if certain.any() else 0.0 * lam
    return SegmentChains(fire=a, rows=rows, beta=beta, lam_above=lam_above, certain_above=certain_above,
                         total=lam_above, total_certain=certain_above)


def _in_segment_from(x: np.ndarray, row: np.ndarray, end: np.ndarray, shift: int = 0) -> np.ndarray:
    """``[B, V]``: the sum of x over the positions from each one (shift = 1: after each one) to the end of its
    segment (``end``: one past its last position), as a difference of suffix sums from the top of the row."""
    B, V = x.shape
    suffix = np.zeros((B, V + 1))
    np.cumsum(x[:, ::-1], axis=1, out=suffix[:, -2::-1])
    return suffix[:, shift : V + shift] - suffix[row, end]
