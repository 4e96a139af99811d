"""The sweep's batched alpha* (tokens bucketed by q/p, only the buckets that can hold the minimum sorted one by one)
against brute force over all subsets and otlp.optimal_acceptance, on the adversarial families (ties, zeros, point
masses, p = q) and on rows that stress the buckets (edges, +inf and huge ratios, any bucket width)."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.subsets import brute_force_min_psi
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


def _edge_rows(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows that stress the buckets: ratios exactly on bucket edges (powers of two, p = q), p = 0 < q (ratio +inf),
    p = 1e-300 (ratios beyond the last bucket), q truncated to a top-k (q = 0), p = q = 0, and LM-shaped rows."""
    from tests.sweep.conftest import lm_pairs

    p, q = lm_pairs(rng, 8, V)
    q[0] = p[0] * np.exp2(rng.integers(-4, 4, V))
    q[1] = p[1]
    q[1, : V // 3] *= 2.0
    p[2, rng.random(V) < 0.2] = 0.0
    p[3, rng.random(V) < 0.2] = 1e-300
    q[4, np.argsort(-q[4])[12:]] = 0.0
    zero = rng.random(V) < 0.5
    p[5, zero] = q[5, zero] = 0.0
    p[6] = np.round(p[6] * 40) + 1
    q[6] = np.round(q[6] * 40) + 1
    return p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("bits, max_buckets", [(6, 4096), (0, 4096), (2, 3), (1, 1), (12, 64)])
def test_alpha_star_rows_is_exact_for_any_bucketing(bits, max_buckets, monkeypatch):  # noqa: ANN001
    # the buckets only decide which tokens are sorted one by one: coarse buckets (most refined), one bucket (its
    # upper edge +inf), clipped ranges and fine buckets must all give the sorted prefix's minimum
    import otlp.sweep.compute as compute

    monkeypatch.setattr(compute, "BUCKET_BITS", bits)
    monkeypatch.setattr(compute, "MAX_BUCKETS", max_buckets)
    rng = np.random.default_rng(13)
    for V in (7, 600):
        p, q = _edge_rows(rng, V)
        for ns in ((1, 2, 4, 8), (3,), (5, 16)):
            got = compute.alpha_star_rows(p, q, ns)
            for b, n in enumerate(ns):
                want = [otlp.optimal_acceptance(p[m], otlp.IID(q[m], n)) for m in range(len(p))]
                assert np.allclose(got[b], want, rtol=0, atol=1e-12), (bits, max_buckets, V, n)


def test_top_k_draft_keeps_lower_ids_on_ties_and_never_the_sparse_tail():
    q = np.array([[0.3, 0.2, 0.2, 0.2, 0.1]])
    assert np.allclose(top_k_draft(q, 2, sparse=False), [[0.6, 0.4, 0, 0, 0]])
    assert np.allclose(top_k_draft(q, 2, sparse=True), [[0, 0.5, 0.5, 0, 0]])  # column 0 is the tail token
    assert top_k_draft(q, 0, sparse=False) is q


def test_rule_feasibility_is_stated():
    rules = resolve_verifiers("all")
    assert {"optimal", "optimal_paths", "bv"}.isdisjoint(rules) and {"rrs", "kseq", "spechub"} <= set(rules)
    assert feasibility("rrs", 8, 152_000) is None  # closed form at any size
    assert feasibility("spechub", 4, 10) == "defined for n = 2 only"
    assert feasibility("rrs_wor", 2, 152_000) is None  # closed form at n <= 2 (otlp/verifiers/rrs_wor_acceptance.py)
    assert "enumerates W^n" in feasibility("rrs_wor", 3, 2000)
    assert feasibility("rrs_wor", 3, 20) is None
