"""The exact token-tree recursion with any node rule (otlp.optimal.tree_law): it reproduces the independent RRS
tree law of otlp.multistep.token_tree_output_law, single-path SpS at K = 1, and 1 + alpha* at L = 1."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.drafts import IID
from otlp.multistep import efficiency_from_law, random_pair, sps_efficiency, token_tree_output_law
from otlp.optimal.tree_law import RULES, tree_efficiency, tree_reach
from otlp.verifiers import get


class _RRS:
    def __init__(self, p, q, m):
        self.p, self.draft = p, IID(q, m)

    def slices(self, omegas):
        return get("rrs").conditional(self.p, self.draft, omegas)[0]


@pytest.mark.parametrize("L, K", [(2, 2), (2, 3), (3, 2), (3, 3)])
def test_rrs_at_every_node_is_the_token_tree_law(L, K):
    rng = np.random.default_rng(10 * L + K)
    for _ in range(2):
        target, draft = random_pair(3, L, rng, concentration=1.0, closeness=0.5)
        expected = efficiency_from_law(token_tree_output_law(target, draft, L, K), 3, L)
        assert tree_efficiency(target, draft, L, K, _RRS) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_optimal_rules_one_path_and_one_depth(rule):
    rng = np.random.default_rng(4)
    target, draft = random_pair(3, 3, rng, concentration=1.0, closeness=0.5)
    assert tree_efficiency(target, draft, 3, 1, rule) == pytest.approx(sps_efficiency(target, draft, 3), abs=1e-12)
    for K in (2, 3):
        alpha = otlp.optimal_acceptance(target.conditionals[0], IID(draft.conditionals[0], K))
        assert tree_efficiency(target, draft, 1, K, rule) == pytest.approx(1.0 + alpha, abs=1e-9)
        reach = tree_reach(target, draft, 2, K, rule)
        assert reach[1:4, 1:].sum() == pytest.approx(alpha, abs=1e-9)  # depth 1: the root's acceptance
        # E[paths continuing from the root] is the root rule's objective: the path-aware rule's is the largest
        paths = float((reach[1:4] * np.arange(K + 1)).sum())
        if rule == "paths":
            chains = float((tree_reach(target, draft, 2, K, "class_chains")[1:4] * np.arange(K + 1)).sum())
            assert paths >= chains - 1e-9
