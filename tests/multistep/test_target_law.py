"""Output law of every multi-step rule, by exact enumeration (issue 6, "done means": >= 500 random instances).

For each rule, (accepted prefix, correction token, continuation sampled from the target) must have exactly
the target's (L+1)-token law (papers/002 Def. 3.1 target-matching), and the enumerated E[tau + 1] must equal
the rule's closed form (an independent route: a tree recursion that never enumerates draft tuples).
"""

import numpy as np
import pytest
import torch

from otlp.multistep import (
    RULES,
    bv_efficiency,
    efficiency_from_law,
    gbv_efficiency,
    output_law,
    random_pair,
    sps_efficiency,
    target_matching_error,
)
from otlp.multistep.armodel import num_nodes, prefix_nodes
from otlp.multistep.bv import block_verification_law, block_weights
from otlp.multistep.enumeration import enumerate_drafts
from otlp.multistep.gbv import select_greedy_path

INSTANCES = 520


def _instances(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        V = int(rng.integers(2, 4))
        L = int(rng.integers(1, 4)) if V == 2 else int(rng.integers(1, 3))
        K = int(rng.integers(1, 4)) if V**L <= 9 else 2
        concentration = float(rng.choice([0.3, 1.0, 3.0]))
        closeness = float(rng.choice([0.0, 0.5, 0.9]))
        target, draft = random_pair(V, L, rng, concentration, closeness)
        yield V, L, K, target, draft


def _closed_form(rule, target, draft, L, K):
    if rule == "sps":
        return sps_efficiency(target, draft, L)
    if rule == "bv":
        return bv_efficiency(target, draft, L)
    if rule == "gbv":
        return gbv_efficiency(target, draft, L, K)
    return None  # the token tree has no closed form; its law comes from its own recursion


def test_output_law_matches_target_on_random_instances():
    worst = dict.fromkeys(RULES, 0.0)
    count = 0
    for V, L, K, target, draft in _instances(seed=20261123, count=INSTANCES):
        count += 1
        for rule in RULES:
            R = output_law(rule, target, draft, L, K)
            assert R[0] == 0.0 and np.all(R >= -1e-15)
            assert abs(R.sum() - 1.0) < 1e-12
            worst[rule] = max(worst[rule], target_matching_error(R, target, L))
            closed = _closed_form(rule, target, draft, L, K)
            if closed is not None:
                assert efficiency_from_law(R, V, L) == pytest.approx(closed, abs=1e-12)
    assert count >= 500
    for rule, err in worst.items():
        assert err < 1e-12, f"{rule}: target-matching error {err}"


def _literal_eq4_law(drafts, p_path, q_path):
    """BV with the paper's Eq. 4 as PRINTED (unweighted residual sums in h_i); notes/gbv.md §3.2 says it is wrong."""
    w = block_weights(drafts, p_path, q_path)  # [B, L+1]
    L = drafts.shape[-1]
    U = (p_path[:, :L] - q_path).clamp(min=0).sum(-1)  # unweighted
    h = torch.cat([U / (1 - w[:, :L] + U), w[:, L:]], -1)
    keep = torch.flip(torch.cumprod(torch.flip(1 - h, [-1]), -1), [-1])
    tau_probs = h * torch.cat([keep[:, 1:], torch.ones_like(keep[:, :1])], -1)
    residual = (w[:, :L, None] * p_path[:, :L] - q_path).clamp(min=0)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp(min=1e-300), p_path[:, :L])
    return tau_probs, torch.cat([residual, p_path[:, L:]], 1)


def _single_path_law(law, target, draft, L):
    tokens, probs = enumerate_drafts(draft, L, 1)
    tokens = tokens[:, 0]
    tau_probs, corrections = law(tokens, target.on_path(tokens, L + 1), draft.on_path(tokens, L))
    out = prefix_nodes(tokens, target.V)[..., None] * target.V + 1 + torch.arange(target.V)  # [M, L+1, V]
    R = torch.zeros(num_nodes(target.V, L + 1), dtype=torch.float64)
    R.index_add_(0, out.reshape(-1), (probs[:, None, None] * tau_probs[..., None] * corrections).reshape(-1))
    return R.numpy()


def test_target_matching_check_detects_wrong_rules():
    # The check must be able to fail.  (1) The paper's Eq. 4 as printed (unweighted sums) is not target-matching;
    # the corrected weighted form, run through the same enumeration code, is.
    rng = np.random.default_rng(7)
    worst_literal = 0.0
    for _ in range(20):
        target, draft = random_pair(2, 3, rng)
        assert target_matching_error(_single_path_law(block_verification_law, target, draft, 3), target, 3) < 1e-12
        worst_literal = max(worst_literal, target_matching_error(_single_path_law(_literal_eq4_law, target, draft, 3),
                                                                 target, 3))
    assert worst_literal > 1e-2
    # (2) GBV's selected path with BV on the ORIGINAL q instead of q^Gamma (notes/gbv.md §7.2) breaks the law.
    target, draft = random_pair(2, 2, rng, concentration=0.5)
    tokens, probs = enumerate_drafts(draft, 2, 3)
    p_paths, q_paths = target.on_path(tokens, 3), draft.on_path(tokens, 2)
    rows = torch.arange(tokens.shape[0])
    k0 = select_greedy_path(tokens, p_paths, q_paths)
    tau_probs, corrections = block_verification_law(tokens[rows, k0], p_paths[rows, k0], q_paths[rows, k0])
    out = prefix_nodes(tokens[rows, k0], 2)[..., None] * 2 + 1 + torch.arange(2)
    R = torch.zeros(num_nodes(2, 3), dtype=torch.float64)
    R.index_add_(0, out.reshape(-1), (probs[:, None, None] * tau_probs[..., None] * corrections).reshape(-1))
    assert target_matching_error(R.numpy(), target, 2) > 1e-2


def test_equal_models_accept_everything():
    rng = np.random.default_rng(11)
    target, _ = random_pair(3, 2, rng)
    for rule in ("sps", "bv", "token_tree"):
        R = output_law(rule, target, target, 2, 1 if rule in ("sps", "bv") else 2)
        assert efficiency_from_law(R, 3, 2) == pytest.approx(3.0, abs=1e-12)  # L + 1: every block accepted
    # GBV is a heuristic: with q = p its skewed draft q^Gamma != p, so it loses (notes/gbv.md §7.9)
    assert efficiency_from_law(output_law("gbv", target, target, 2, 2), 3, 2) < 3.0 - 1e-3
