"""Exact block efficiencies E[tau + 1] in closed form over the prefix tree V^{<=L} (papers/002; notes/gbv.md §3.6).

- token-wise SpS:  sum_{a_{1:i} in V^{<=L}} prod_{j<=i} min(p(a_j | a_{<j}), q(a_j | a_{<j})).
- BV with draft law r:  sum_{a_{1:i}} min_{0<=k<=i} p(a_{k+1:i} | a_{1:k}) r(a_{1:k})   (Eq. 83; Thm 3.4).
- GBV:  the BV formula with r = q^Gamma_g, the greedy skewed draft of Eqs. 22-23.
Every function walks the tree one depth at a time, vectorised over the nodes of that depth.
"""

from __future__ import annotations

import numpy as np

from otlp.core.errors import InputError
from otlp.multistep.armodel import ARModel, depth_offsets, num_nodes


def _check_pair(target: ARModel, draft: ARModel, L: int) -> None:
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
        raise InputError(f"L (the block length) must be an integer >= 1, got {L!r}")
    if target.V != draft.V:
        raise InputError(f"target has V={target.V} but draft has V={draft.V}; they must share the vocabulary")
    target.require_depth(L, "target")
    draft.require_depth(L - 1, "draft")


#: the multi-step rules certified and enumerated exactly (``otlp.multistep.enumeration``, ``certify``); here, in a
#: module without torch, so that ``otlp certify-block`` can check ``--rule`` before torch loads
RULES = ("sps", "bv", "gbv", "token_tree", "optimal")


def check_K(K: object) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise InputError(f"K (the number of drafted paths) must be an integer >= 1, got {K!r}")
    return int(K)


def sps_efficiency(target: ARModel, draft: ARModel, L: int) -> float:
    """E[tau + 1] of token-wise speculative sampling along one drafted block."""
    _check_pair(target, draft, L)
    V, off = target.V, depth_offsets(target.V, L)
    accepted = np.ones(1)  # P(the first i tokens are drafted and accepted, a_{1:i})  [nodes of depth i]
    total = 1.0
    for i in range(L):
        nodes = slice(off[i], off[i + 1])
        step = np.minimum(target.conditionals[nodes], draft.conditionals[nodes])  # [V^i, V]
        accepted = (accepted[:, None] * step).ravel()
        total += accepted.sum()
    del V
    return float(total)


def bv_budget_mass(target: ARModel, r_prefix: np.ndarray, L: int) -> np.ndarray:
    """D_BV(a_{1:i}) p(a_{1:i}) = min_{0<=k<=i} p(a_{k+1:i} | a_{1:k}) r(a_{1:k}) on every node  # [num_nodes(V, L)]

    (papers/002 Eqs. 61-64, 83), via m(a_{1:i+1}) = min(m(a_{1:i}) p(a_{i+1} | a_{1:i}), r(a_{1:i+1})).
    ``r_prefix`` is the draft law on prefixes, [num_nodes(V, L)].
    """
    off = depth_offsets(target.V, L)
    m = np.empty(num_nodes(target.V, L))
    m[0] = min(1.0, r_prefix[0])
    for i in range(L):
        parents = slice(off[i], off[i + 1])
        down = (m[parents, None] * target.conditionals[parents]).ravel()
        m[off[i + 1] : off[i + 2]] = np.minimum(down, r_prefix[off[i + 1] : off[i + 2]])
    return m


def bv_efficiency(target: ARModel, draft: ARModel, L: int) -> float:
    """E[tau + 1] of block verification = the single-path LP optimum (Thm 3.4)."""
    _check_pair(target, draft, L)
    return float(bv_budget_mass(target, draft.prefix_probabilities(L), L).sum())


def greedy_skewed_prefix(target: ARModel, draft: ARModel, L: int, K: int) -> np.ndarray:
    """q^Gamma_g(a_{1:i}) on every node of V^{<=L} (Eqs. 22-23).  # [num_nodes(V, L)]

    B(a_{1:i+1}) = B(a_{1:i}) + q(a_{1:i}) C_{a_{1:i}}(a_{i+1}), with C the q-mass of tokens of smaller
    (p/q, token id) at the node; q^Gamma(a_{1:i}) = (q(a_{1:i}) + B)^K - B^K.
    """
    _check_pair(target, draft, L)
    K = check_K(K)
    V, off = target.V, depth_offsets(target.V, L)
    q_rows, p_rows = draft.conditionals, target.conditionals
    Q = np.ones(1)
    Bm = np.zeros(1)
    out = np.empty(num_nodes(V, L))
    out[0] = 1.0
    for i in range(L):
        nodes = slice(off[i], off[i + 1])
        q, p = q_rows[nodes], p_rows[nodes]  # [V^i, V]
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
        order = np.argsort(score, axis=1, kind="stable")  # increasing (score, token id)
        q_sorted = np.take_along_axis(q, order, 1)
        below = np.empty_like(q)
        np.put_along_axis(below, order, np.cumsum(q_sorted, 1) - q_sorted, 1)  # C(x), exclusive
        Bm = (Bm[:, None] + Q[:, None] * below).ravel()
        Q = (Q[:, None] * q).ravel()
        out[off[i + 1] : off[i + 2]] = (Q + Bm) ** K - Bm**K
    return out


def gbv_efficiency(target: ARModel, draft: ARModel, L: int, K: int) -> float:
    """E[tau + 1] of greedy multi-path block verification: BV efficiency with the draft law q^Gamma_g."""
    return float(bv_budget_mass(target, greedy_skewed_prefix(target, draft, L, K), L).sum())
