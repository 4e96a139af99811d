"""gbv.eq19-23: a skewed draft with the wrong exponent or the wrong ranking direction is caught by brute force."""

from __future__ import annotations

from otlp.multistep.efficiency import greedy_skewed_prefix
from otlp.theorems import build_registry

REGISTRY = build_registry()


def test_wrong_exponent_is_caught():
    def off_by_one(target, draft, L, K):  # K - 1 drafted paths
        return greedy_skewed_prefix(target, draft, L, max(K - 1, 1))

    result = REGISTRY["gbv.eq19-23"].run(instances=4, seed=0, impl={"greedy_skewed_prefix": off_by_one})
    assert result.status == "fail" and "brute force" in result.details


def test_plain_draft_law_is_caught():
    def plain(target, draft, L, K):  # q itself: what the skew is supposed to replace
        return draft.prefix_probabilities(L)

    result = REGISTRY["gbv.eq19-23"].run(instances=4, seed=0, impl={"greedy_skewed_prefix": plain})
    assert result.status == "fail"
