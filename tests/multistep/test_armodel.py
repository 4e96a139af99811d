"""ARModel tables: validation, node numbering, prefix laws, sampling, and the generators."""

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from otlp.core.errors import InputError
from otlp.multistep import ARModel, markov_ar_model, random_ar_model, tempered
from otlp.multistep.armodel import all_paths, depth_offsets, num_nodes, prefix_nodes


def test_prefix_probabilities_are_chain_rule_products():
    rng = np.random.default_rng(0)
    m = random_ar_model(3, 3, rng)
    P = m.prefix_probabilities(3)
    off = depth_offsets(3, 3)
    for i in range(4):
        assert P[off[i]: off[i + 1]].sum() == pytest.approx(1.0, abs=1e-12)
    path = [2, 0, 1]
    node, expected = 0, 1.0
    for x in path:
        expected *= m.conditionals[node, x]
        node = node * 3 + 1 + x
    assert P[node] == pytest.approx(expected, rel=1e-14)
    assert int(prefix_nodes(torch.tensor([path]), 3)[0, -1]) == node


def test_sampled_paths_follow_the_joint_law():
    # Pearson chi-square at level 1e-6 (false-failure rate 1e-6, fixed seed)
    m = random_ar_model(2, 2, np.random.default_rng(1))
    paths = m.sample_paths(3, (50_000,), torch.Generator().manual_seed(0))
    codes = (paths * torch.tensor([4, 2, 1])).sum(-1).numpy()
    observed = np.bincount(codes, minlength=8)
    expected = 50_000 * m.prefix_probabilities(3)[depth_offsets(2, 3)[3]:]
    assert chi2.sf(((observed - expected) ** 2 / expected).sum(), 7) > 1e-6
    assert np.array_equal(all_paths(2, 3)[codes[:5]], paths[:5].numpy())


def test_markov_and_tempered_models():
    T = np.array([[0.9, 0.1], [0.3, 0.7]])
    m = markov_ar_model(np.array([0.5, 0.5]), T, depth=3)
    assert m.depth == 3 and np.allclose(m.conditionals[4], T[1])  # node 4 = prefix (0, 1): last token 1
    hot = tempered(m, 2.0)
    assert np.allclose(hot.conditionals.sum(1), 1.0)
    assert hot.conditionals[1, 0] < m.conditionals[1, 0]  # flatter


def test_bad_tables_are_refused():
    with pytest.raises(InputError, match="rows"):
        ARModel(np.full((4, 2), 0.5), 2)
    with pytest.raises(InputError, match="sums"):
        ARModel(np.full((3, 2), 0.4), 2)
    with pytest.raises(InputError, match="V must"):
        ARModel(np.ones((1, 1)), 1)
    with pytest.raises(InputError, match="depth"):
        random_ar_model(2, 1, np.random.default_rng(0)).prefix_probabilities(3)
    assert num_nodes(2, 3) == 15
