"""The loop's reference verifiers at one node: output law p (chi-square, level 1e-3 per test, 3 tests) and the
closed-form acceptance of single-draft speculative sampling, 1 - TV(p, q) (binomial 5-sigma band)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otlp.decode._verifiers import (
    recursive_rejection_sampling,
    recursive_rejection_sampling_without_replacement,
    speculative_sampling,
)
from otlp.decode.draft_sampling import sample_drafts

from .toy_models import chi_square_p_value


@pytest.mark.parametrize(("rule", "scheme", "n"), [(speculative_sampling, "iid", 1),
                                                   (recursive_rejection_sampling, "iid", 3),
                                                   (recursive_rejection_sampling_without_replacement,
                                                    "without_replacement", 3)])
def test_output_law_is_p(rule, scheme, n):
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
