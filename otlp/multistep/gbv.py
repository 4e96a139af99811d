"""Greedy multi-path block verification (GBV; papers/002 §5, Algorithm 1 with explicit indexing, notes/gbv.md §3.5).

K i.i.d. blocks are drafted from q; one target call scores all of them.  GBV
1. ranks paths by the tree ranking of Def. 5.2 with the score pi_{a_{1:i}}(x) = p(x | a_{1:i}) / q(x | a_{1:i})
   (Eq. 21), ties broken by token id, and selects the lexicographically LARGEST drafted path;
2. computes the skewed draft q^Gamma(. | a_{1:i}) of the selected path in closed form (Eqs. 22-23);
3. runs block verification on the selected path with (p, q^Gamma)  (otlp.multistep.bv).
For K = 1 it is exactly BV.  It uses only on-path values (information-restricted).
"""

from __future__ import annotations

import torch

from otlp.core.errors import InputError
from otlp.multistep.bv import (
    BlockOutput,
    block_verification_law,
    check_block_inputs,
    check_block_uniforms,
    sample_block_output,
)


def ratio_scores(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """GBV score pi(x) = p(x) / q(x) (Eq. 21); q(x) = 0 gives +inf (such a token is never drafted).  [..., V]"""
    return torch.where(q > 0, p / torch.where(q > 0, q, torch.ones_like(q)), torch.full_like(p, float("inf")))


def select_greedy_path(drafts: torch.Tensor, p_paths: torch.Tensor, q_paths: torch.Tensor) -> torch.Tensor:
    """Index of the highest-ranked drafted path under the tree ranking (Def. 5.2, Alg. 1 lines 1-3).

    drafts [B, K, L], p_paths [B, K, L+1, V], q_paths [B, K, L, V] -> int64 [B].
    Two paths are compared at their FIRST token divergence j, with the scores of the two tokens computed from
    ONE copy of the shared-context vectors (the current best's), key (p/q, token id) increasing; identical
    paths are interchangeable (the lower index is kept).  This avoids comparing float tuples computed in
    different batch rows (notes/gbv.md §7.4).
    """
    B, K, L = drafts.shape
    rows = torch.arange(B, device=drafts.device)
    best = torch.zeros(B, dtype=torch.int64, device=drafts.device)
    for k in range(1, K):  # K - 1 pairwise comparisons, vectorised over the batch
        a, c = drafts[rows, best], drafts[:, k]  # [B, L]
        differ = a != c  # [B, L]
        j = differ.to(torch.int8).argmax(-1)  # [B], first divergence (0 if none)
        p_j = p_paths[rows, best, j]  # [B, V]
        q_j = q_paths[rows, best, j]  # [B, V]
        score = ratio_scores(p_j, q_j)  # [B, V]
        x_a, x_c = a[rows, j], c[rows, j]
        s_a, s_c = score[rows, x_a], score[rows, x_c]
        wins = differ.any(-1) & ((s_c > s_a) | ((s_c == s_a) & (x_c > x_a)))
        best = torch.where(wins, torch.full_like(best, k), best)
    return best


def _power_gap_factor(u: torch.Tensor, d: torch.Tensor, K: int) -> torch.Tensor:
    """G(u, d) = sum_{m=0..K-1} (u + d)^m u^(K-1-m), so that (u + d)^K - u^K = d G(u, d) (notes/gbv.md §3.4)."""
    total = torch.zeros_like(u)
    for m in range(K):
        total = total + (u + d) ** m * u ** (K - 1 - m)
    return total


def greedy_skewed_draft(path: torch.Tensor, p_path: torch.Tensor, q_path: torch.Tensor, K: int) -> torch.Tensor:
    """The law q^Gamma(. | a_{1:i}), i = 0..L-1, of the GBV-selected path along that path (Eqs. 14, 22-23).

    path [B, L], p_path [B, L+1, V], q_path [B, L, V] -> [B, L, V].
    With C_i(x) the q-mass of tokens ranked below x at node a_{1:i} (an exclusive cumsum in the score order),
    Q_i = q(a_{1:i}), B_i = sum_{j<i} Q_j C_j(a_{j+1}) and F_i = B_i + Q_i, the stable form is
        q^Gamma(x | a_{1:i}) = q(x | a_{1:i}) G((B_i + Q_i C_i(x)) / F_i, Q_i q(x | a_{1:i}) / F_i)
                               / G(B_i / F_i, Q_i / F_i).
    """
    score = ratio_scores(p_path[:, :-1], q_path)  # [B, L, V]
    order = torch.sort(score, dim=-1, stable=True).indices  # increasing (score, token id)
    q_sorted = q_path.gather(-1, order)  # [B, L, V]
    below_sorted = q_sorted.cumsum(-1) - q_sorted  # exclusive cumsum, in score order
    below = torch.empty_like(below_sorted).scatter_(-1, order, below_sorted)  # C_i(x), token order  [B, L, V]
    tok = path.unsqueeze(-1)  # [B, L, 1]
    q_tok = q_path.gather(-1, tok).squeeze(-1)  # [B, L]
    below_tok = below.gather(-1, tok).squeeze(-1)  # [B, L]
    ones = torch.ones_like(q_tok[:, :1])
    Q = torch.cumprod(torch.cat([ones, q_tok[:, :-1]], -1), -1)  # [B, L]: q(a_{1:i}), i = 0..L-1
    Bmass = (Q * below_tok).cumsum(-1) - Q * below_tok  # [B, L]: B(a_{1:i}) (exclusive)
    F = (Bmass + Q)[..., None]  # [B, L, 1]
    Qn, Bn = Q[..., None] / F, Bmass[..., None] / F  # all in [0, 1]: no cancellation, no overflow
    numer = _power_gap_factor(Bn + Qn * below, Qn * q_path, K)  # [B, L, V]
    denom = _power_gap_factor(Bn, Qn, K)  # [B, L, 1]
    return q_path * numer / denom


def gbv_law(
    drafts: torch.Tensor, p_paths: torch.Tensor, q_paths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact law of GBV's output given the K drafted blocks.

    drafts [B, K, L], p_paths [B, K, L+1, V], q_paths [B, K, L, V]
    -> (selected [B], tau_probs [B, L+1], corrections [B, L+1, V]) as in ``block_verification_law``.
    """
    B, K, _ = drafts.shape
    rows = torch.arange(B, device=drafts.device)
    selected = select_greedy_path(drafts, p_paths, q_paths)  # [B]
    path, p_path, q_path = drafts[rows, selected], p_paths[rows, selected], q_paths[rows, selected]
    q_gamma = greedy_skewed_draft(path, p_path, q_path, K)  # [B, L, V]
    tau_probs, corrections = block_verification_law(path, p_path, q_gamma)
    return selected, tau_probs, corrections


def check_multipath_inputs(drafts: torch.Tensor, p_paths: torch.Tensor, q_paths: torch.Tensor) -> None:
    """drafts [B, K, L], p_paths [B, K, L+1, V], q_paths [B, K, L, V]."""
    if drafts.dim() != 3:
        raise InputError(f"drafts must have shape [B, K, L], got {tuple(drafts.shape)}")
    check_block_inputs(drafts, p_paths, q_paths)


def gbv(
    drafts: torch.Tensor,
    p_paths: torch.Tensor,
    q_paths: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    uniforms: torch.Tensor | None = None,
) -> BlockOutput:
    """Greedy multi-path block verification of B independent steps with K i.i.d. drafted blocks each.

    drafts: int64 [B, K, L] (i.i.d. paths from q; duplicates allowed and required for exactness);
    p_paths: [B, K, L+1, V] target conditionals along each path; q_paths: [B, K, L, V] draft conditionals.
    Returns BlockOutput(path_index, tau, correction); deterministic under a seeded ``generator``, or a function of
    ``uniforms [B, 2]`` when given: the selection is deterministic given the drafts, so BV's two uniforms (tau's
    coin, the correction's; ``otlp.multistep.bv``) are all the rule draws.
    """
    check_multipath_inputs(drafts, p_paths, q_paths)
    uniforms = check_block_uniforms(uniforms, drafts.shape[0], 2, drafts)
    selected, tau_probs, corrections = gbv_law(drafts, p_paths, q_paths)
    tau, y = sample_block_output(tau_probs, corrections, generator, uniforms)
    return BlockOutput(selected, tau, y)
