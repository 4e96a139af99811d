"""The optimal K-path block verifier's sampler (papers/002 Lemma 4.4 + Thm 4.6; ``otlp.multistep.optimal_rule``).

One decode step with K i.i.d. drafted blocks and a precomputed rule (``OptimalKPathRule.tensors()``):
1. draw u ~ U(0, 1) independently of the drafts: it picks one greedy ranking of the mixture;
2. select the highest-ranked drafted path under that ranking (identical paths are interchangeable);
3. run block verification on it with the draft law q^Gamma(. | a_{1:i}) of the rule (``otlp.multistep.bv``).
Everything is batched over B steps on the tensors' device, with no host synchronisation.
Randomness: three uniforms per step, from a generator or passed as ``uniforms [B, 3]`` (as engines pass them):
``[:, 0]`` the ranking u of step 1 (it must be independent of the drafts and of BV's draws), ``[:, 1]`` BV's tau
coin and ``[:, 2]`` the correction's uniform (``otlp.multistep.bv``); the generator path draws them in this order.
"""

from __future__ import annotations

import torch

from otlp.core.errors import InputError
from otlp.multistep.armodel import prefix_nodes
from otlp.multistep.bv import BlockOutput, block_verification_law, check_block_uniforms, sample_block_output


def path_ranks(drafts: torch.Tensor, rule: object, u: torch.Tensor) -> torch.Tensor:
    """Rank (higher = preferred) of each drafted path in the ranking drawn at u.

    drafts int64 [B, K, L], u float64 [B] -> int64 [B, K].  The ranking is ``searchsorted(breaks, u)``; a path's
    rank on it is the last run of its run-length encoding that starts at or before that ranking.
    """
    V, L = rule.V, rule.L
    weights = V ** torch.arange(L - 1, -1, -1, device=drafts.device)  # base-V digits, first token most significant
    leaf = (drafts * weights).sum(-1)  # [B, K]
    ground = rule.ground[leaf].clamp(min=0)  # paths of draft probability 0 are never drafted
    M = rule.breaks.numel()
    j = torch.searchsorted(rule.breaks, u.contiguous(), right=True) - 1  # [B]
    idx = torch.searchsorted(rule.keys, (ground * M + j[:, None]).contiguous(), right=True) - 1  # [B, K]
    return rule.ranks[idx]


def optimal_block_law(drafts: torch.Tensor, p_paths: torch.Tensor, rule: object, u: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rule's selection at u and BV's exact law on the selected path.

    drafts [B, K, L], p_paths [B, K, L+1, V], u [B] -> (selected [B], tau_probs [B, L+1], corrections [B, L+1, V]).
    """
    B = drafts.shape[0]
    rows = torch.arange(B, device=drafts.device)
    selected = path_ranks(drafts, rule, u).argmax(-1)  # [B]; ties only between identical paths
    path, p_path = drafts[rows, selected], p_paths[rows, selected]  # [B, L], [B, L+1, V]
    nodes = prefix_nodes(path[:, :-1], rule.V)  # [B, L]: a_{1:i}, i = 0..L-1
    r_path = rule.r_conditionals[nodes].to(p_path.dtype)  # [B, L, V]
    tau_probs, corrections = block_verification_law(path, p_path, r_path)
    return selected, tau_probs, corrections


def optimal_block(drafts: torch.Tensor, p_paths: torch.Tensor, rule: object,
                  generator: torch.Generator | None = None, *, uniforms: torch.Tensor | None = None) -> BlockOutput:
    """The optimal K-path rule on B independent steps.

    drafts: int64 [B, K, L] (i.i.d. paths from the draft the rule was built for); p_paths: [B, K, L+1, V] target
    conditionals along each path; rule: ``OptimalKPathRule.tensors()`` on the same device.
    Returns BlockOutput(path_index, tau, correction); deterministic under a seeded ``generator``, or a function of
    ``uniforms [B, 3]`` (the ranking's, tau's and the correction's: module docstring) when given.
    """
    if drafts.dim() != 3 or drafts.dtype != torch.int64:
        raise InputError(f"drafts must be int64 of shape [B, K, L], got {drafts.dtype} {tuple(drafts.shape)}")
    B, K, L = drafts.shape
    if (L, K) != (rule.L, rule.K) or tuple(p_paths.shape) != (B, K, L + 1, rule.V):
        raise InputError(f"the rule was built for K = {rule.K}, L = {rule.L}, V = {rule.V}; got drafts "
                         f"{tuple(drafts.shape)} and p_paths {tuple(p_paths.shape)} (expected [B, K, L+1, V])")
    uniforms = check_block_uniforms(uniforms, B, 3, drafts)
    u = (torch.rand(B, generator=generator, dtype=torch.float64, device=drafts.device) if uniforms is None
         else uniforms[:, 0].to(torch.float64))
    selected, tau_probs, corrections = optimal_block_law(drafts, p_paths, rule, u)
    tau, y = sample_block_output(tau_probs, corrections, generator, None if uniforms is None else uniforms[:, 1:])
    return BlockOutput(selected, tau, y)


__all__ = ["optimal_block", "optimal_block_law", "path_ranks"]
