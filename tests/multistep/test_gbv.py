"""GBV sampler (otlp.multistep.gbv) and the multi-draft token tree: law, K = 1 == BV, determinism, bad input."""

import numpy as np
import pytest
import torch

from otlp.core.errors import InputError
from otlp.multistep import bv_efficiency, gbv_efficiency, random_pair, token_tree
from otlp.multistep.bv import block_verification_law, bv
from otlp.multistep.gbv import gbv, gbv_law
from tests.multistep.stats import ALPHA, sampled_law_pvalue


@pytest.mark.parametrize("rule,K", [("gbv", 2), ("gbv", 4), ("token_tree", 3)])
def test_sampled_outputs_follow_the_exact_law(rule, K):
    target, draft = random_pair(2, 3, np.random.default_rng(K))
    assert sampled_law_pvalue(rule, target, draft, 3, K) > ALPHA


def test_gbv_with_one_path_is_bv():
    rng = np.random.default_rng(1)
    for _ in range(10):
        target, draft = random_pair(3, 3, rng)
        assert gbv_efficiency(target, draft, 3, 1) == pytest.approx(bv_efficiency(target, draft, 3), abs=1e-14)
    tokens = draft.sample_paths(3, (500, 1), torch.Generator().manual_seed(0))
    p, q = target.on_path(tokens, 4), draft.on_path(tokens, 3)
    _, tau_g, corr_g = gbv_law(tokens, p, q)
    tau_b, corr_b = block_verification_law(tokens[:, 0], p[:, 0], q[:, 0])
    np.testing.assert_allclose(tau_g.numpy(), tau_b.numpy(), atol=1e-14)
    np.testing.assert_allclose(corr_g.numpy(), corr_b.numpy(), atol=1e-14)
    a = gbv(tokens, p, q, torch.Generator().manual_seed(7))
    b = bv(tokens[:, 0], p[:, 0], q[:, 0], torch.Generator().manual_seed(7))
    assert torch.equal(a.tau, b.tau) and torch.equal(a.correction, b.correction)


def test_seeded_generator_is_deterministic_and_outputs_are_prefixes():
    target, draft = random_pair(3, 3, np.random.default_rng(2))
    tokens = draft.sample_paths(3, (256, 3), torch.Generator().manual_seed(0))
    p, q = target.on_path(tokens, 4), draft.on_path(tokens, 3)
    for rule in (gbv, token_tree):
        a = rule(tokens, p, q, torch.Generator().manual_seed(5))
        b = rule(tokens, p, q, torch.Generator().manual_seed(5))
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)
        assert int(a.path_index.min()) >= 0 and int(a.path_index.max()) < 3
        assert int(a.tau.min()) >= 0 and int(a.tau.max()) <= 3


def test_bad_shapes_are_refused():
    target, draft = random_pair(2, 2, np.random.default_rng(4))
    tokens = draft.sample_paths(2, (8, 2), None)
    p, q = target.on_path(tokens, 3), draft.on_path(tokens, 2)
    with pytest.raises(InputError, match=r"\[B, K, L\]"):
        gbv(tokens[:, 0], p[:, 0], q[:, 0])
    with pytest.raises(InputError, match="q_path"):
        token_tree(tokens, p, q[..., :1, :])
