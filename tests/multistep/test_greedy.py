"""The GBV selection rule and its skewed draft q^Gamma against brute force (papers/002 Def. 5.2, Eqs. 19, 22-23).

Brute force ranks every path of V^L by its tuple O(a) = ((p/q, token) at each position) with Python's tuple
order, and gets q^Gamma by enumerating every K-tuple of drafts; neither route shares code with the library.
"""

import itertools

import numpy as np
import pytest
import torch

from otlp.multistep import greedy_skewed_prefix, random_pair
from otlp.multistep.armodel import all_paths, depth_offsets, prefix_nodes
from otlp.multistep.gbv import greedy_skewed_draft, select_greedy_path


def _rank_key(path, target, draft):
    node, key = 0, []
    for x in path:
        p, q = target.conditionals[node, x], draft.conditionals[node, x]
        key.append((p / q, int(x)))
        node = node * target.V + 1 + int(x)
    return tuple(key)


def _brute_force(target, draft, L, K):
    V = target.V
    paths = [tuple(int(t) for t in row) for row in all_paths(V, L)]
    leaf = draft.prefix_probabilities(L)[depth_offsets(V, L)[L]:]
    keys = [_rank_key(a, target, draft) for a in paths]
    law = np.zeros(len(paths))
    for combo in itertools.product(range(len(paths)), repeat=K):
        best = max(range(K), key=lambda k: keys[combo[k]])  # first maximal index on ties (identical paths)
        law[combo[best]] += np.prod(leaf[list(combo)])
    # Eq. 19 (corrected: q(P_j) inside the sums), paths in increasing rank
    order = sorted(range(len(paths)), key=lambda r: keys[r])
    eq19 = np.zeros(len(paths))
    cum = 0.0
    for r in order:
        eq19[r] = (cum + leaf[r]) ** K - cum**K
        cum += leaf[r]
    return law, eq19


@pytest.mark.parametrize("V,L,K", [(2, 1, 3), (2, 2, 2), (2, 2, 3), (3, 2, 2), (2, 3, 2), (3, 1, 4)])
def test_skewed_draft_closed_form_equals_brute_force(V, L, K):
    rng = np.random.default_rng(100 * V + 10 * L + K)
    for _ in range(3):
        target, draft = random_pair(V, L, rng, concentration=0.7)
        law, eq19 = _brute_force(target, draft, L, K)
        closed = greedy_skewed_prefix(target, draft, L, K)
        off = depth_offsets(V, L)
        np.testing.assert_allclose(closed[off[L]:], law, atol=1e-13)
        np.testing.assert_allclose(eq19, law, atol=1e-13)
        # prefix marginals (Eq. 13): each node's value is the sum over its children
        for i in range(L):
            d = slice(off[i], off[i + 1])
            child_sums = closed[off[i + 1]: off[i + 2]].reshape(-1, V).sum(1)
            np.testing.assert_allclose(child_sums, closed[d], atol=1e-13)


def test_selection_equals_lexicographic_max():
    rng = np.random.default_rng(5)
    V, L, K = 3, 2, 4
    target, draft = random_pair(V, L, rng)
    tokens = draft.sample_paths(L, (3000, K), torch.Generator().manual_seed(1))  # [B, K, L]
    selected = select_greedy_path(tokens, target.on_path(tokens, L + 1), draft.on_path(tokens, L))
    for b in range(tokens.shape[0]):
        keys = [_rank_key(tokens[b, k].tolist(), target, draft) for k in range(K)]
        assert int(selected[b]) == max(range(K), key=lambda k: keys[k])


def test_on_path_skewed_conditionals_match_prefix_law():
    # greedy_skewed_draft (stable G form, torch, along a path) == ratios of the closed form on prefixes (Eq. 14)
    rng = np.random.default_rng(9)
    for V, L, K in [(2, 3, 3), (3, 2, 4), (4, 2, 2)]:
        target, draft = random_pair(V, L, rng)
        prefix = torch.as_tensor(greedy_skewed_prefix(target, draft, L, K))
        paths = torch.as_tensor(all_paths(V, L))  # [V^L, L]
        qg = greedy_skewed_draft(paths, target.on_path(paths, L + 1), draft.on_path(paths, L), K)  # [M, L, V]
        nodes = prefix_nodes(paths, V)[:, :L]  # [M, L]
        expected = prefix[nodes[..., None] * V + 1 + torch.arange(V)] / prefix[nodes][..., None]
        np.testing.assert_allclose(qg.numpy(), expected.numpy(), atol=1e-12)
        np.testing.assert_allclose(qg.sum(-1).numpy(), 1.0, atol=1e-12)


def test_skewed_draft_is_stable_deep_in_a_large_vocabulary():
    # notes/gbv.md §3.4: the naive difference of K-th powers underflows to 0 / NaN at V=1000, L=8; the G form must not
    V, L, K = 1000, 8, 3
    g = torch.Generator().manual_seed(0)
    p = torch.distributions.Dirichlet(torch.full((V,), 0.1, dtype=torch.float64)).sample((1, L + 1))
    q = torch.distributions.Dirichlet(torch.full((V,), 0.1, dtype=torch.float64)).sample((1, L))
    path = torch.multinomial(q[0], 1, generator=g).T  # [1, L]
    qg = greedy_skewed_draft(path, p, q, K)
    assert torch.isfinite(qg).all()
    assert (qg.gather(-1, path[..., None]) > 0).all()
    np.testing.assert_allclose(qg.sum(-1).numpy(), 1.0, atol=1e-10)


def test_k1_skewed_draft_is_the_draft():
    rng = np.random.default_rng(2)
    target, draft = random_pair(3, 2, rng)
    np.testing.assert_allclose(greedy_skewed_prefix(target, draft, 2, 1), draft.prefix_probabilities(2), atol=1e-15)
