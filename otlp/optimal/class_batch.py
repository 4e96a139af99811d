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

from dataclasses import dataclass

import numpy as np

from otlp.optimal.blocks import BlockCuts
from otlp.optimal.solve import InstanceSolution
from otlp.optimal.waterfill import SegmentChains, class_chain_segments
from otlp.subsets import sorted_prefix_arrays


@dataclass(frozen=True)
class ClassChainBatch:
    """The class chains of every row of a batch, as ``[B, V]`` arrays by position (0-based, decreasing q/p) unless
    said otherwise; :meth:`instance` builds one row's :class:`InstanceSolution` (token order) on demand."""

    P: np.ndarray  # [B, V] token order
    Q: np.ndarray  # [B, V] token order
    n: int
    ps: np.ndarray  # [B, V] P by position
    order: np.ndarray  # [B, V]: token at each position
    psi: np.ndarray  # [B, V + 1]
    m_star: np.ndarray  # [B]
    rec: np.ndarray  # bool [B, V + 1]: prefix index is a record
    first: np.ndarray  # bool [B, V]: first position of its group
    inner: np.ndarray  # bool [B, V]: the position's group is inner
    t: np.ndarray  # [B, V] targets
    H: np.ndarray  # [B, V] null mass below the position
    seg: SegmentChains

    def instance(self, b: int) -> InstanceSolution:
        s = self.seg
        return _instance(self.P[b], self.Q[b], self.n, self.order[b], self.psi[b], int(self.m_star[b]), self.rec[b],
                         self.first[b], self.t[b], s.rows[b], s.fire[b], s.lam_above[b], s.certain_above[b],
                         s.beta[b], s.total[b], s.total_certain[b], np.abs(s.rows[b] - self.t[b]), self.H[b])


def class_chain_arrays(P: np.ndarray, Q: np.ndarray, n: int) -> ClassChainBatch:
    """The class chains of every group of every row of ``P, Q: [B, V]``, vectorised over the batch."""
    B, V = P.shape
    rows = np.arange(B)[:, None]
    order, psi, ps, qs, prefix_q = sorted_prefix_arrays(P, Q, n)  # [B, V], [B, V + 1], [B, V] x 2, [B, V + 1]
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
    psi_s = psi[rows, start]
    psi_e = psi[rows, end]
    # targets: inner p; outer p except t_{s+1} = p_{s+1} - (psi_e - psi_s)   (note §2 (ii), GR Thm 6.2)
    t = np.maximum(np.where(first & ~inner_pos, ps - (psi_e - psi_s), ps), 0.0)
    H = prefix_q[:, :V]  # [B, V]: null mass below
    # Hall gap of the top set from each position: psi_i - psi_e; at a group's first position its slack
    gap = np.maximum(np.where(first, np.where(inner_pos, psi_s - psi_e, 0.0), psi[:, :V] - psi_e), 0.0)
    seg = class_chain_segments(t, qs, H, gap, inner_pos, start, end, n)
    return ClassChainBatch(P=P, Q=Q, n=n, ps=ps, order=order, psi=psi, m_star=m_star, rec=rec, first=first,
                           inner=inner_pos, t=t, H=H, seg=seg)


def _instance(p, q, n, order, psi, m_star, rec, first, t, rows, a, lam_above, cert_above, beta, total, total_c,
              error_pos, H) -> InstanceSolution:  # noqa: ANN001 - internal, arrays of one row
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
