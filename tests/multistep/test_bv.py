"""Block verification sampler (otlp.multistep.bv) and token-wise SpS along a path: law, determinism, bad input."""

import numpy as np
import pytest
import torch

from otlp.core.errors import InputError
from otlp.multistep import random_pair, sps_path
from otlp.multistep.bv import BlockOutput, block_verification_law, block_weights, bv
from tests.multistep.stats import ALPHA, sampled_law_pvalue


def _batch(V=3, L=3, B=64, seed=0):
    rng = np.random.default_rng(seed)
    target, draft = random_pair(V, L, rng)
    tokens = draft.sample_paths(L, (B,), torch.Generator().manual_seed(seed))
    return target, draft, tokens, target.on_path(tokens, L + 1), draft.on_path(tokens, L)


@pytest.mark.parametrize("rule", ["bv", "sps"])
def test_sampled_outputs_follow_the_exact_law(rule):
    target, draft = random_pair(3, 2, np.random.default_rng(42))
    assert sampled_law_pvalue(rule, target, draft, 2, 1) > ALPHA


def test_weights_follow_the_recursion():
    # Eq. 3: w_i = min(1, w_{i-1} p/q), checked against a plain loop
    _, _, tokens, p, q = _batch()
    w = block_weights(tokens, p, q)
    for b in range(tokens.shape[0]):
        cur = 1.0
        for i in range(tokens.shape[1]):
            x = int(tokens[b, i])
            cur = min(1.0, cur * float(p[b, i, x] / q[b, i, x]))
            assert float(w[b, i + 1]) == pytest.approx(cur, rel=1e-12)


def test_law_rows_are_distributions_and_acceptance_is_w():
    # P(tau >= i | block) = w_i (Sun et al. Lemma 4, papers/002 Eq. 60)
    _, _, tokens, p, q = _batch(B=256)
    tau_probs, corrections = block_verification_law(tokens, p, q)
    np.testing.assert_allclose(tau_probs.sum(-1).numpy(), 1.0, atol=1e-12)
    np.testing.assert_allclose(corrections.sum(-1).numpy(), 1.0, atol=1e-12)
    at_least = torch.flip(torch.cumsum(torch.flip(tau_probs, [-1]), -1), [-1])
    np.testing.assert_allclose(at_least[:, -1].numpy(), block_weights(tokens, p, q)[:, -1].numpy(), atol=1e-12)


def test_seeded_generator_is_deterministic():
    _, _, tokens, p, q = _batch()
    a = bv(tokens, p, q, torch.Generator().manual_seed(3))
    b = bv(tokens, p, q, torch.Generator().manual_seed(3))
    assert isinstance(a, BlockOutput)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    assert a.tau.shape == (64,) and a.tau.dtype == torch.int64
    assert int(a.tau.min()) >= 0 and int(a.tau.max()) <= 3
    s = sps_path(tokens, p, q, torch.Generator().manual_seed(3))
    assert torch.equal(s.path_index, torch.zeros_like(s.tau))


def test_bad_shapes_are_refused():
    _, _, tokens, p, q = _batch()
    with pytest.raises(InputError, match="p_path"):
        bv(tokens, p[:, :-1], q)
    with pytest.raises(InputError, match="q_path"):
        bv(tokens, p, q[:, :-1])
    with pytest.raises(InputError, match="int64"):
        bv(tokens.to(torch.int32), p, q)
