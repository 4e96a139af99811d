"""The loop's verifiers at one node, resolved by name with drafts from the loop's own draft sampler: output law p
(chi-square, level 1e-3 per test, 3 tests) and the closed-form acceptance of single-draft speculative sampling,
1 - TV(p, q) (binomial 5-sigma band)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otlp.decode.draft_sampling import sample_drafts
from otlp.decode.registry import resolve_verifier

from .toy_models import chi_square_p_value


@pytest.mark.parametrize(("name", "n"), [("sps", 1), ("rrs", 3), ("rrs_wor", 3)])
def test_output_law_is_p(name, n):
    resolved = resolve_verifier(name)
    rule, scheme = resolved.sample, resolved.scheme
    V, M = 8, 100000
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
    gen = torch.Generator().manual_seed(9)
    P = torch.tensor(p).expand(M, V).contiguous()
    Q = torch.tensor(q).expand(M, V).contiguous()
    drafts = sample_drafts(scheme, Q, n, gen)
    tokens, accepted = rule(P, Q, drafts, gen)
    assert chi_square_p_value(tokens.numpy(), p) > 1e-3
    hit = accepted >= 0
    assert torch.equal(tokens[hit], drafts[hit, accepted[hit]])
    if n == 1:
        alpha = np.minimum(p, q).sum()
        rate = hit.double().mean().item()
        assert abs(rate - alpha) < 5 * np.sqrt(alpha * (1 - alpha) / M)
