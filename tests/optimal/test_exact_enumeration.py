"""Exactness of otlp.optimal by brute-force enumeration over V^n (design note §5; issue 3 "Done means").

For every instance: the output law sum_omega P(omega) pi(. | omega) equals p, and the acceptance
sum_omega P(omega) pi(set(omega) | omega) equals alpha*, both to 1e-12 in L1; alpha* itself is checked against
an independent route, the minimum of psi over all 2^V subsets (GR Thm 3.1), not the sorted prefix the solver uses.
11 families x n in 1..4 x 45 seeded instances = 1980 instances here (V <= 8, V^n <= 4096), of the class chains
OptimalTransport builds (by the scalar path at these V, otlp.optimal.scalar; its single slices are compared with the
array chains' ``slices``).
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.subsets import brute_force_min_psi
from otlp.optimal import OptimalTransport, solve_batch

from .instances import FAMILIES, draw

TOL = 1e-12


def enumerate_rule(ot: OptimalTransport, draft) -> tuple[np.ndarray, float]:
    """(output law [V], acceptance) of the rule under the draft law, by enumeration of V^n."""
    omegas, probs = draft.enumerate()
    slices = ot.slices(omegas)  # [V^n, V]
    law = probs @ slices
    in_set = np.zeros_like(slices, dtype=bool)
    rows = np.arange(omegas.shape[0])
    for k in range(omegas.shape[1]):
        in_set[rows, omegas[:, k]] = True
    acceptance = float(probs @ np.where(in_set, slices, 0.0).sum(1))
    return law, acceptance


def check_exact(p: np.ndarray, q: np.ndarray, n: int, **kwargs) -> OptimalTransport:
    ot = OptimalTransport(p, otlp.IID(q, n), **kwargs)
    draft = otlp.IID(ot.q, n)
    law, acceptance = enumerate_rule(ot, draft)
    omegas = draft.enumerate()[0]
    slices = ot.slices(omegas)
    assert np.abs(slices.sum(1) - 1.0).max() < TOL, "a slice does not sum to 1"
    # the single slice (the scalar path's own evaluation for class chains at small V, a second implementation of
    # the array chains that evaluate ``slices``) is the same rule, to rounding
    for i in np.linspace(0, omegas.shape[0] - 1, min(omegas.shape[0], 24)).astype(int):
        np.testing.assert_allclose(ot.slice(omegas[i]), slices[i], rtol=0, atol=TOL)
    assert np.abs(law - p).sum() < TOL, f"output law off by {np.abs(law - p).sum():.3g} in L1"
    best, _ = brute_force_min_psi(p, draft)
    assert abs(ot.alpha - (1.0 + best)) < TOL, f"alpha* {ot.alpha} vs brute force {1 + best}"
    assert abs(acceptance - ot.alpha) < TOL, f"acceptance {acceptance} vs alpha* {ot.alpha}"
    assert ot.success
    return ot


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_law_and_acceptance_exact(family: str, n: int) -> None:
    rng = np.random.default_rng([sorted(FAMILIES).index(family), n])
    for trial in range(45):
        V = int(rng.integers(2, 9))
        while V**n > 4096:
            V -= 1
        p, q = draw(family, rng, V, n)
        try:
            check_exact(p, q, n)
        except AssertionError as exc:
            raise AssertionError(f"{family} trial {trial} V={V} n={n}\np={p.tolist()}\nq={q.tolist()}\n{exc}") from exc


def test_heavy_tailed_larger_blocks() -> None:
    """Heavy-tailed at (10, 4), (10, 3), (30, 2), (60, 2): bigger blocks than the V <= 8 sweep."""
    rng = np.random.default_rng(7)
    for V, n, count in [(10, 4, 4), (10, 3, 10), (30, 2, 10), (60, 2, 5)]:
        for _ in range(count):
            p, q = FAMILIES["heavy"](rng, V)
            ot = OptimalTransport(p, otlp.IID(q, n))
            law, acceptance = enumerate_rule(ot, otlp.IID(q, n))
            assert np.abs(law - p).sum() < TOL
            assert abs(acceptance - ot.alpha) < TOL
            assert abs(ot.alpha - otlp.optimal_acceptance(p, otlp.IID(q, n))) < TOL


@pytest.mark.parametrize("n", [2, 3])
def test_top_k_truncation(n: int) -> None:
    """GR App. N: q is cut to its top-k tokens and renormalised, p is not; the law is still p and the
    acceptance is alpha* of (p, IID(q_topk, n)); tokens outside the top-k are served only by the residual."""
    rng = np.random.default_rng(11 + n)
    for _ in range(40):
        V = int(rng.integers(3, 9))
        k = int(rng.integers(1, V))
        p, q = FAMILIES["heavy"](rng, V)
        ot = check_exact(p, q, n, top_k=k)
        assert np.count_nonzero(ot.q) <= k
        outside = ot.q == 0
        assert np.all(np.isin(np.flatnonzero(outside), ot.h_star, invert=True))


def test_n1_is_classic_speculative_sampling() -> None:
    """n = 1: accept x with probability min(1, p(x)/q(x)), else draw from (p - q)_+ normalised (leviathan2023)."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        V = int(rng.integers(2, 12))
        p, q = FAMILIES["zeros"](rng, V)
        ot = OptimalTransport(p, otlp.IID(q, 1))
        residual = np.maximum(p - q, 0.0)
        residual = residual / residual.sum() if residual.sum() > 0 else residual
        assert abs(ot.alpha - np.minimum(p, q).sum()) < TOL
        for x in np.flatnonzero(q > 0):
            accept = min(1.0, p[x] / q[x])
            expected = (1.0 - accept) * residual
            expected[x] += accept
            np.testing.assert_allclose(ot.slice([x]), expected, atol=TOL)


def test_alpha_star_equals_one_means_no_rejection() -> None:
    """p = q: alpha* = 1 and every slice of a drafted tuple is supported on set(omega)."""
    rng = np.random.default_rng(5)
    for n in (2, 3):
        p = rng.dirichlet(np.ones(6))
        ot = OptimalTransport(p, otlp.IID(p, n))
        assert ot.alpha == 1.0 and ot.h_star.size == 0
        omegas, _ = otlp.IID(p, n).enumerate()
        accept, reject = ot.rule(omegas)
        assert np.all(reject == 0.0)
        np.testing.assert_allclose(accept.sum(1), 1.0, atol=1e-14)


def test_batch_top_k_is_each_row_truncated() -> None:
    """solve_batch(top_k=k) truncates each row of q as OptimalTransport(top_k=k) does (ties: lower id first)."""
    rng = np.random.default_rng(29)
    V, B, n, k = 7, 30, 3, 3
    p = rng.dirichlet(np.full(V, 0.5), size=B)
    q = rng.dirichlet(np.full(V, 0.5), size=B)
    q[:5] = np.round(q[:5], 1)  # ties at the k-th entry
    q[:5] /= q[:5].sum(1, keepdims=True)
    batch = solve_batch(p, q, n, top_k=k)
    for b in range(B):
        ot = OptimalTransport.from_arrays(p[b], q[b], n, top_k=k)
        assert abs(batch.alpha[b] - ot.alpha) < 1e-12
        assert np.count_nonzero(ot.q) <= k
