"""Many (p, q) pairs at once with every group a water-filling class chain (:mod:`.waterfill`), fully vectorised.

The class chain's slot lengths are independent scalar equations, one per position, so the records of psi, the
targets, the slots, the hazards and the rows of every group of every row are computed on ``[B, V]`` arrays with
no Python loop over groups or tokens: the per-pair overhead of the peel search and of Newton disappears. This is
the batched path of :func:`otlp.optimal.solve_batch`; the rule differs from the single path's (both are exact
optimal rules, the optimal plan not being unique).

Positions are 0-based here (position i holds the (i + 1)-th token of the decreasing q/p order); within a group the
ratio t/q increases with the position, so the class chain's ranks are the positions (ties and ulp-level inversions
give empty slots, clamped; the rows are re-derived from the slots and checked).
"""

from __future__ import annotations

import numpy as np

from otlp.optimal.blocks import BlockCuts
from otlp.optimal.peeling import _power_gap
from otlp.optimal.solve import InstanceSolution
from otlp.optimal.waterfill import segmented_scan, slot_mass


def _psi_rows(ps: np.ndarray, qs: np.ndarray, n: int) -> np.ndarray:
    """psi on the prefixes of every row (``[B, V]`` sorted) -> ``[B, V + 1]``, as ``otlp.subsets.sorted_prefix_psi``
    (suffix form where Q_m > 1/2)."""
    B = ps.shape[0]
    zeros = np.zeros((B, 1))
    prefix_p = np.concatenate([zeros, np.cumsum(ps, axis=1)], axis=1)
    prefix_q = np.concatenate([zeros, np.cumsum(qs, axis=1)], axis=1)
    suffix_p = np.concatenate([np.cumsum(ps[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)
    suffix_q = np.concatenate([np.cumsum(qs[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)
    head = prefix_p - prefix_q**n
    with np.errstate(divide="ignore"):
        tail = -np.expm1(n * np.log1p(-np.minimum(suffix_q, 1.0))) - suffix_p
    out = np.where(prefix_q > 0.5, tail, head)
    out[:, 0] = 0.0
    out[:, -1] = 0.0
    return out


def class_chain_batch(P: np.ndarray, Q: np.ndarray, n: int) -> list[InstanceSolution]:
    """Solve every row of ``P, Q: [B, V]`` with one class chain per group; one :class:`InstanceSolution` per row."""
    B, V = P.shape
    rows = np.arange(B)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(P > 0, Q / np.where(P > 0, P, 1.0), np.where(Q > 0, np.inf, -1.0))
    order = np.argsort(-ratio, axis=1, kind="stable")  # [B, V] as otlp.subsets.ratio_order, row by row
    ps, qs = P[rows, order], Q[rows, order]  # [B, V]
    psi = _psi_rows(ps, qs, n)  # [B, V + 1]
    m_star = np.argmin(psi, axis=1)  # [B], first exact argmin
    m = np.arange(V + 1)[None, :]
    prefix_min = np.minimum.accumulate(psi, axis=1)
    inner_rec = np.zeros((B, V + 1), dtype=bool)
    inner_rec[:, 1:] = (psi[:, 1:] < prefix_min[:, :-1]) & (m[:, 1:] <= m_star[:, None])
    suffix_min_after = np.concatenate([np.minimum.accumulate(psi[:, ::-1], axis=1)[:, ::-1][:, 1:],
                                       np.full((B, 1), np.inf)], axis=1)
    outer_rec = (psi <= suffix_min_after) & (m >= m_star[:, None])
    rec = inner_rec | outer_rec
    rec[:, 0] = rec[:, V] = True
    rec[rows[:, 0], m_star] = True  # [B, V + 1]
    # per position i (0-based, prefix index i before it): its group's start s and end e (prefix indices)
    idx = np.arange(V)[None, :]
    start = np.maximum.accumulate(np.where(rec[:, :V], np.arange(V)[None, :], 0), axis=1)  # [B, V]
    ends = np.where(rec[:, 1:], np.arange(1, V + 1)[None, :], V + 1)
    end = np.minimum.accumulate(ends[:, ::-1], axis=1)[:, ::-1]  # [B, V]
    first = idx == start
    inner_pos = end <= m_star[:, None]  # [B, V]: the position's group is inner
    psi_s = np.take_along_axis(psi, start, axis=1)
    psi_e = np.take_along_axis(psi, end, axis=1)
    # targets: inner p; outer p except t_{s+1} = p_{s+1} - (psi_e - psi_s)   (note §2 (ii), GR Thm 6.2)
    t = np.maximum(np.where(first & ~inner_pos, ps - (psi_e - psi_s), ps), 0.0)
    zeros = np.zeros((B, 1))
    Qpre = np.concatenate([zeros, np.cumsum(qs, axis=1)], axis=1)  # [B, V + 1]
    Qsuf = np.concatenate([np.cumsum(qs[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)
    Tsuf = np.concatenate([np.cumsum(t[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)
    H = Qpre[:, :V]  # [B, V]: null mass below the position's class C_j
    L = Qsuf[:, :V] - np.take_along_axis(Qsuf, end, axis=1)  # q(C_j), from the top
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(qs > 0, t / np.where(qs > 0, qs, 1.0), 0.0)
    r_below = np.where(first, 0.0, np.concatenate([zeros, r[:, :-1]], axis=1))
    gap = np.where(first, np.where(inner_pos, psi_s - psi_e, 0.0), psi[:, :V] - psi_e)
    gap = np.maximum(gap, 0.0)
    y = slot_mass(H, L, r_below, gap, n)  # class mass after each step (waterfill.slot_mass)
    y = np.where(first, L, y)
    last = np.zeros((B, V), dtype=bool)
    last[:, :-1] = end[:, :-1] == idx[:, :-1] + 1
    last[:, -1] = True
    y_above = np.where(last, 0.0, np.concatenate([y[:, 1:], zeros], axis=1))
    before = y_above + qs  # class mass entering the step at this position
    x = np.where(first, 0.0, np.clip(before - y, 0.0, before))
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(before > 0, x / np.where(before > 0, before, 1.0), 0.0)
        slot = _power_gap(H + y, x, n)
        share = np.where(before > 0, slot / np.where(before > 0, before, 1.0), 0.0)
    share = np.where(first, 0.0, share)
    # per group (at its first position): capacity of the final class, beta
    capacity = _power_gap(H, before, n)  # meaningful at first positions: (N + y_0)^n - N^n
    slot_cum = np.concatenate([zeros, np.cumsum(np.where(first, 0.0, slot), axis=1)], axis=1)
    served = np.take_along_axis(slot_cum, end, axis=1) - slot_cum[:, :V]  # slots of the group at/above i
    left = (Tsuf[:, :V] - np.take_along_axis(Tsuf, end, axis=1)) - served  # at first positions: t(G) - slots
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(capacity > 0, np.clip(left / np.where(capacity > 0, capacity, 1.0), 0.0, 1.0), 0.0)
    beta = np.where(inner_pos, beta, 1.0)
    final = np.where(first, np.where(before > 0, beta * capacity / np.where(before > 0, before, 1.0), 0.0), 0.0)
    final_g = np.take_along_axis(final, start, axis=1)
    S, F = segmented_scan(share, np.where(first, 1.0, 1.0 - a), first)
    row_sums = qs * (S + F * final_g)
    # hazards from the top of each group: Lambda(j + 1) = sum over the group's slots above position j
    certain = (a >= 1.0) & ~first
    lam = np.where(certain | first, 0.0, -np.log1p(-np.where(certain, 0.0, a)))
    RC = np.concatenate([np.cumsum(lam[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)  # [B, V + 1]
    CC = np.concatenate([np.cumsum(certain[:, ::-1], axis=1)[:, ::-1], zeros], axis=1).astype(np.float64)
    lam_above = RC[:, 1:] - np.take_along_axis(RC, end, axis=1)
    cert_above = CC[:, 1:] - np.take_along_axis(CC, end, axis=1)
    s1 = np.minimum(start + 1, end)  # Lambda(1) of the group = slots above its first position
    total = np.take_along_axis(RC, s1, axis=1) - np.take_along_axis(RC, end, axis=1)
    total_c = np.take_along_axis(CC, s1, axis=1) - np.take_along_axis(CC, end, axis=1)
    error_pos = np.abs(row_sums - t)
    return [_instance(P[b], Q[b], n, order[b], psi[b], int(m_star[b]), rec[b], first[b], inner_pos[b], t[b],
                      row_sums[b], a[b], lam_above[b], cert_above[b], beta[b], total[b], total_c[b], error_pos[b],
                      H[b]) for b in range(B)]


def _instance(p, q, n, order, psi, m_star, rec, first, inner_pos, t, rows, a, lam_above, cert_above, beta, total,
              total_c, error_pos, H) -> InstanceSolution:  # noqa: ANN001 - internal, arrays of one row
    V = p.size
    records = np.flatnonzero(rec).astype(np.int64)  # [K + 1]
    K = records.size - 1
    starts = records[:-1]
    cuts = BlockCuts(order=order, psi=psi, m_star=m_star, records=records, inner=records[1:] <= m_star)
    group_pos = np.cumsum(first) - 1  # [V]
    position = np.empty(V, dtype=np.int64)
    position[order] = np.arange(1, V + 1)
    inv = np.empty(V, dtype=np.int64)
    inv[order] = np.arange(V)  # token -> position (0-based)

    def tok(x: np.ndarray) -> np.ndarray:
        return x[inv]

    chain_error = np.bincount(group_pos, error_pos, K)
    return InstanceSolution(
        p=p, q=q, n=n, cuts=cuts, position=position, block_of_position=np.concatenate([[-1], group_pos]),
        null_mass=H[starts], targets=tok(t), log_weight=np.full(V, -np.inf), row_sums=tok(rows),
        leaf_of_token=np.full(V, -1, dtype=np.int64), leaf_null=H[starts], leaf_inner=cuts.inner.copy(),
        leaf_group=np.arange(K), leaf_tokens={}, fire=tok(a), peel_rank=np.full(V, -1, dtype=np.int64),
        chain_error=chain_error, chain_node=np.full(V, -1, dtype=np.int64), path=tok(group_pos)[:, None],
        node_fallback=np.zeros(K, dtype=bool), node_depth=np.zeros(K, dtype=np.int64),
        class_rank=tok(np.arange(V) - starts[group_pos]), class_lam=tok(lam_above), class_certain=tok(cert_above),
        node_class=np.ones(K, dtype=bool), node_beta=beta[starts], node_hazard=total[starts],
        node_certain=total_c[starts], gradient_norm=np.zeros(K), iterations=np.zeros(K, dtype=np.int64),
    )
