"""Exact output laws by enumeration of every drafted K-tuple of blocks (small V, L, K only).

The output of a multi-step rule is a sequence (a_{1:tau}, Y) in V^{<=L+1} minus the root; its law is
R(a_{1:i}).  Target-matching (papers/002 Def. 3.1, Lemma A.3): appending L - tau tokens sampled from the target
gives exactly the target's (L+1)-token law, i.e.
    sum_{i=0..L} R(a_{1:i+1}) p(a_{1:L+1}) / p(a_{1:i+1}) = p(a_{1:L+1})   for every a_{1:L+1}.
"""

from __future__ import annotations

import numpy as np
import torch

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.multistep.armodel import ARModel, all_paths, depth_offsets, node_depths, num_nodes, prefix_nodes
from otlp.multistep.bv import block_verification_law
from otlp.multistep.efficiency import RULES, _check_pair, check_K
from otlp.multistep.gbv import gbv_law
from otlp.multistep.token_wise import sps_path_law, token_tree_output_law

MAX_TUPLES = 2_000_000


def enumerate_drafts(draft: ARModel, L: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every K-tuple of blocks with its probability prod_k q(a^(k)_{1:L}).

    -> (tokens int64 [M, K, L], probs float64 [M]) with M = V^(L K); refused above MAX_TUPLES.
    """
    V = draft.V
    M = V ** (L * K)
    if M > MAX_TUPLES:
        raise ModelTooLargeError(f"enumerating V^(L*K) = {V}^{L * K} draft tuples", M * K * L * 8, MAX_TUPLES * 8,
                                 hint="use a smaller V, L or K")
    paths = all_paths(V, L)  # [V^L, L]
    leaf_probs = draft.prefix_probabilities(L)[depth_offsets(V, L)[L] :]  # [V^L], same order as paths
    ids = np.stack(np.unravel_index(np.arange(M), (V**L,) * K), axis=1)  # [M, K]
    tokens = torch.as_tensor(paths[ids])  # [M, K, L]
    probs = torch.as_tensor(np.prod(leaf_probs[ids], axis=1))  # [M]
    return tokens, probs


def output_law(rule: str, target: ARModel, draft: ARModel, L: int, K: int = 1) -> np.ndarray:
    """R(a_{1:i}) on V^{<=L+1} (R[root] = 0) for ``rule`` in RULES.  # [num_nodes(V, L + 1)]

    "sps" and "bv" verify the first drafted path (their law does not depend on K); "gbv" enumerates the
    K-tuples and runs the exact GBV law on each; "token_tree" uses its forward recursion; "optimal" builds the
    optimal K-path rule (an LP solve) and sums its selection law times BV's law per path.
    """
    _check_pair(target, draft, L)
    K = check_K(K)
    if rule not in RULES:
        raise InputError(f"unknown multi-step rule {rule!r}; expected one of {RULES}")
    if rule == "token_tree":
        return token_tree_output_law(target, draft, L, K)
    if rule == "optimal":
        from otlp.multistep.optimal_rule import optimal_k_path_rule

        return optimal_k_path_rule(target, draft, L, K).output_law(target)
    tokens, probs = enumerate_drafts(draft, L, K if rule == "gbv" else 1)
    # A tuple the draft cannot produce carries no mass; its conditional law may be 0/0 (a drafted token with
    # q = 0, e.g. BV's weight p/q), and 0 * NaN = NaN, so such tuples are dropped, not multiplied by 0.
    drawn = probs > 0
    tokens, probs = tokens[drawn], probs[drawn]  # [M', K, L], [M']
    p_paths = target.on_path(tokens, L + 1)  # [M, K, L+1, V]
    q_paths = draft.on_path(tokens, L)  # [M, K, L, V]
    M = tokens.shape[0]
    if rule == "gbv":
        selected, tau_probs, corrections = gbv_law(tokens, p_paths, q_paths)
    else:
        selected = torch.zeros(M, dtype=torch.int64)
        law = sps_path_law if rule == "sps" else block_verification_law
        tau_probs, corrections = law(tokens[:, 0], p_paths[:, 0], q_paths[:, 0])
    path = tokens[torch.arange(M), selected]  # [M, L]
    nodes = prefix_nodes(path, target.V)  # [M, L+1]: node of a_{1:tau} for tau = 0..L
    V = target.V
    out_nodes = nodes[..., None] * V + 1 + torch.arange(V)  # [M, L+1, V]: node of (a_{1:tau}, Y)
    mass = probs[:, None, None] * tau_probs[..., None] * corrections  # [M, L+1, V]
    R = torch.zeros(num_nodes(V, L + 1), dtype=torch.float64)
    R.index_add_(0, out_nodes.reshape(-1), mass.reshape(-1))
    return R.numpy()


def extended_law(R: np.ndarray, target: ARModel, L: int) -> np.ndarray:
    """Law of (a_{1:tau}, Y, Z) with Z ~ p(. | a_{1:tau}, Y) for L - tau tokens.  # [V^(L+1)], base-V order"""
    V = target.V
    off = depth_offsets(V, L + 1)
    P = target.prefix_probabilities(L + 1)  # [num_nodes(V, L+1)]
    ratio = np.divide(R, P, out=np.zeros_like(R), where=P > 0)
    acc = ratio[0:1] * 0.0
    for i in range(L + 1):  # acc(a_{1:i+1}) = acc(a_{1:i}) + R / p at a_{1:i+1}
        acc = np.repeat(acc, V) + ratio[off[i + 1] : off[i + 2]]
    return acc * P[off[L + 1] :]


def target_matching_error(R: np.ndarray, target: ARModel, L: int) -> float:
    """max_{a_{1:L+1}} |P(extended output = a_{1:L+1}) - p(a_{1:L+1})|; 0 for a valid rule."""
    P = target.prefix_probabilities(L + 1)
    return float(np.max(np.abs(extended_law(R, target, L) - P[depth_offsets(target.V, L + 1)[L + 1] :])))


def efficiency_from_law(R: np.ndarray, V: int, L: int) -> float:
    """E[tau + 1] = E[length of the output] = sum_i i R(a_{1:i})."""
    return float((node_depths(V, L + 1) * R).sum())
