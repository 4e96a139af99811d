"""One simulated decode step on explicit models: draft K blocks, gather on-path tables, verify (torch, batched)."""

from __future__ import annotations

import torch

from otlp.core.errors import InputError
from otlp.multistep.armodel import ARModel, prefix_nodes
from otlp.multistep.bv import BlockOutput, bv
from otlp.multistep.efficiency import _check_pair, check_K
from otlp.multistep.gbv import gbv
from otlp.multistep.token_wise import sps_path, token_tree

SAMPLERS = {"sps": sps_path, "bv": bv, "gbv": gbv, "token_tree": token_tree}
SINGLE_PATH = ("sps", "bv")


def draft_and_verify(
    rule: str, target: ARModel, draft: ARModel, L: int, K: int, size: int, generator: torch.Generator | None
) -> tuple[BlockOutput, torch.Tensor]:
    """Run ``size`` independent steps of ``rule`` ("sps", "bv", "gbv", "token_tree", "optimal") from the empty
    context ("optimal" first precomputes its rule: an LP solve).

    Single-path rules draft one block; the multi-path rules draft K i.i.d. blocks.  Returns the verifier's
    BlockOutput and the output's node index in V^{<=L+1} (the node of (a_{1:tau}, Y)), int64 [size].
    """
    _check_pair(target, draft, L)
    K = check_K(K)
    if rule not in SAMPLERS and rule != "optimal":
        raise InputError(f"unknown multi-step rule {rule!r}; expected one of {(*SAMPLERS, 'optimal')}")
    paths = 1 if rule in SINGLE_PATH else K
    tokens = draft.sample_paths(L, (size, paths), generator)  # [size, paths, L]
    p_paths = target.on_path(tokens, L + 1)  # [size, paths, L+1, V]
    q_paths = draft.on_path(tokens, L)  # [size, paths, L, V]
    if rule == "optimal":
        from otlp.multistep.optimal_block import optimal_block
        from otlp.multistep.optimal_rule import optimal_k_path_rule

        out = optimal_block(tokens, p_paths, optimal_k_path_rule(target, draft, L, K).tensors(), generator)
    elif rule in SINGLE_PATH:
        out = SAMPLERS[rule](tokens[:, 0], p_paths[:, 0], q_paths[:, 0], generator)
    else:
        out = SAMPLERS[rule](tokens, p_paths, q_paths, generator)
    rows = torch.arange(size)
    nodes = prefix_nodes(tokens[rows, out.path_index], target.V)  # [size, L+1]
    prefix = nodes.gather(1, out.tau[:, None]).squeeze(1)  # node of a_{1:tau}
    return out, prefix * target.V + 1 + out.correction
