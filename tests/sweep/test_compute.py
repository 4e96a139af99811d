"""The sweep's batched alpha* (candidates q/p > 1/n_max sorted, the rest collapsed) against brute force over all
subsets and otlp.optimal_acceptance, on the adversarial families (ties, zeros, point masses, p = q)."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.subsets import brute_force_min_psi
from otlp.sweep.compute import alpha_star_rows, feasibility, resolve_verifiers, top_k_draft
from tests.conftest import FAMILIES, random_pair


@pytest.mark.parametrize("family", FAMILIES)
def test_alpha_star_rows_equals_brute_force(family):  # noqa: ANN001
    rng = np.random.default_rng(11)
    for V in (1, 2, 5, 9):
        pairs = [random_pair(rng, V, family) for _ in range(6)]
        p, q = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
        ns = (1, 2, 3, 8)
        got = alpha_star_rows(p, q, ns)
        for b, n in enumerate(ns):
            for m in range(len(pairs)):
                want = 1.0 + brute_force_min_psi(p[m], otlp.IID(q[m], n))[0]
                assert abs(got[b, m] - want) < 1e-12, (family, V, n, m)


def test_alpha_star_rows_at_lm_sizes_and_under_permutation():
    from tests.sweep.conftest import lm_pairs

    rng = np.random.default_rng(12)
    p, q = lm_pairs(rng, 6, 3000)
    q[0, :1500] = 0.0  # ties at zero, as a draft top-k makes them
    q[0] /= q[0].sum()
    p[1, :10] = q[1, :10] = 0.01  # ratio ties among candidates: the stable route
    p[1] /= p[1].sum()
    q[1] /= q[1].sum()
    ns = (1, 2, 4, 8)
    got = alpha_star_rows(p, q, ns)
    for b, n in enumerate(ns):
        want = [otlp.optimal_acceptance(p[m], otlp.IID(q[m], n)) for m in range(6)]
        assert np.allclose(got[b], want, rtol=0, atol=1e-12)
    perm = rng.permutation(3000)  # token ids do not matter beyond ties
    assert np.allclose(alpha_star_rows(p[:, perm], q[:, perm], ns), got, rtol=0, atol=1e-13)
    # the threshold 1/n_max: sweeping n = 2 alone gives the same values as inside a sweep up to n = 8
    assert np.allclose(alpha_star_rows(p, q, (2,))[0], got[1], rtol=0, atol=1e-13)


def test_top_k_draft_keeps_lower_ids_on_ties_and_never_the_sparse_tail():
    q = np.array([[0.3, 0.2, 0.2, 0.2, 0.1]])
    assert np.allclose(top_k_draft(q, 2, sparse=False), [[0.6, 0.4, 0, 0, 0]])
    assert np.allclose(top_k_draft(q, 2, sparse=True), [[0, 0.5, 0.5, 0, 0]])  # column 0 is the tail token
    assert top_k_draft(q, 0, sparse=False) is q


def test_rule_feasibility_is_stated():
    rules = resolve_verifiers("all")
    assert "optimal" not in rules and "bv" not in rules and {"rrs", "kseq", "spechub"} <= set(rules)
    assert feasibility("rrs", 8, 152_000) is None  # closed form at any size
    assert feasibility("spechub", 4, 10) == "defined for n = 2 only"
    assert "enumerates W^n" in feasibility("rrs_wor", 2, 2000)
    assert feasibility("rrs_wor", 2, 100) is None
