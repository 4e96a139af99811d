"""otlp.optimal.newton against independent routes: the block objective written term by term, finite
differences, dense solves for the CG, and the single-block fast path against the batched loop."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from otlp.optimal.coefficients import block_terms
from otlp.optimal.newton import PairwiseN2, SubsetTerms, initial_alpha, newton, pcg


def _objective(q: np.ndarray, null: float, t: np.ndarray, sigma: float, n: int, alpha: np.ndarray) -> float:
    """f(alpha) = sum_U c_U log(sigma + w(U)) - t.alpha, one term at a time (c_U from the positive sum)."""
    w = np.exp(alpha)
    f = -float(t @ alpha)
    for idx, coef in block_terms(q, null, n):
        for members, c in zip(idx, coef, strict=True):
            f += c * np.log(sigma + w[list(members)].sum())
    return f


def _block(rng: np.random.Generator, k: int) -> tuple[np.ndarray, float, np.ndarray]:
    q = rng.dirichlet(np.ones(k)) * 0.5
    return q, 0.3, rng.dirichlet(np.ones(k)) * 0.2


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_evaluators_match_the_objective_term_by_term(n: int, sigma: float) -> None:
    """value = the term-by-term sum; gradient and Hessian = central differences of it (SubsetTerms, and
    PairwiseN2 for n = 2); rejected mass = sum_U c_U sigma / (sigma + w(U))."""
    rng = np.random.default_rng(n)
    k, h = 5, 1e-5
    q, null, t = _block(rng, k)
    alpha = rng.normal(size=k)
    evs = [SubsetTerms(block_terms(q, null, n), t, sigma)]
    if n == 2:
        evs.append(PairwiseN2(q[None], np.array([null]), t[None], np.array([sigma])))
    f = _objective(q, null, t, sigma, n, alpha)
    eye = np.eye(k)
    grad = np.array([(_objective(q, null, t, sigma, n, alpha + h * e) - _objective(q, null, t, sigma, n, alpha - h * e))
                     / (2 * h) for e in eye])
    w = np.exp(alpha)
    rejected = sum(sigma * (coef / (sigma + w[idx].sum(1))).sum() for idx, coef in block_terms(q, null, n))
    for ev in evs:
        np.testing.assert_allclose(ev.value(alpha[None])[0], f, rtol=1e-13)
        g = ev.gradient(alpha[None])[0]
        np.testing.assert_allclose(g, grad, atol=1e-9)
        np.testing.assert_allclose(ev.rejected[0], rejected, rtol=1e-12, atol=1e-300)
        H = ev.hessian(alpha[None])[0].copy()
        fd = np.array([(ev.gradient((alpha + h * e)[None])[0] - ev.gradient((alpha - h * e)[None])[0]) / (2 * h)
                       for e in eye])
        np.testing.assert_allclose(H, fd, atol=1e-9)
        np.testing.assert_allclose(H, H.T, atol=1e-16)


def test_pairwise_padding_and_batching() -> None:
    """A padded batch of two blocks gives each block's own row sums, value (also for a subset of the blocks)
    and Hessian."""
    rng = np.random.default_rng(3)
    (q1, n1, t1), (q2, n2, t2) = _block(rng, 4), _block(rng, 6)
    a1, a2 = rng.normal(size=4), rng.normal(size=6)
    q = np.zeros((2, 6))
    t = np.zeros((2, 6))
    alpha = np.zeros((2, 6))
    q[0, :4], t[0, :4], alpha[0, :4] = q1, t1, a1
    q[1], t[1], alpha[1] = q2, t2, a2
    sigma = np.array([1.0, 0.0])
    batch = PairwiseN2(q, np.array([n1, n2]), t, sigma)
    rows, f, H = batch.row_sums(alpha), batch.value(alpha), batch.hessian(alpha)
    for b, (qq, nn, tt, aa) in enumerate([(q1, n1, t1, a1), (q2, n2, t2, a2)]):
        one = PairwiseN2(qq[None], np.array([nn]), tt[None], sigma[b : b + 1])
        k = qq.size
        np.testing.assert_allclose(rows[b, :k], one.row_sums(aa[None])[0], rtol=1e-14)
        np.testing.assert_allclose(f[b], one.value(aa[None])[0], rtol=1e-14)
        np.testing.assert_allclose(H[b, :k, :k], one.hessian(aa[None])[0], rtol=1e-13, atol=1e-300)
    assert np.all(rows[0, 4:] == 0.0)
    np.testing.assert_allclose(batch.value(alpha[1:], np.array([1])), f[1:], rtol=1e-14)


def test_pcg_matches_a_dense_solve() -> None:
    """Batched Jacobi-PCG (BLAS matvec) to a tiny forcing term = the dense solution, per block."""
    rng = np.random.default_rng(4)
    nb, K = 3, 40
    A = rng.normal(size=(nb, K, K))
    H = A @ A.transpose(0, 2, 1) / K + np.eye(K)[None] * rng.uniform(0.5, 2.0, size=(nb, 1, 1))
    rhs = rng.normal(size=(nb, K))
    x = pcg(H, rhs, np.full(nb, 1e-14))
    np.testing.assert_allclose(x, np.linalg.solve(H, rhs[..., None])[..., 0], rtol=1e-10, atol=1e-12)


def _inner_block(rng: np.random.Generator, k: int, slack: float) -> tuple[PairwiseN2, np.ndarray]:
    """An inner n = 2 block whose targets are the row sums of the rule at random weights, minus ``slack``
    spread over the tokens (slack 0: the block takes all of its mass, no finite minimiser)."""
    q = rng.dirichlet(np.ones(k) * 0.5) * 0.8
    q = np.maximum(q, 1e-6)
    null = np.array([0.0])
    probe = PairwiseN2(q[None], null, np.zeros((1, k)), np.array([0.0]))
    t = probe.row_sums(rng.normal(size=(1, k)) * 2.0)  # an outer (sigma = 0) rule: sum t = total
    t = t * (1.0 - slack / t.sum())
    return PairwiseN2(q[None], null, t, np.array([1.0])), t


@pytest.mark.parametrize("slack", [0.0, 1e-12, 1e-6, 1e-2])
def test_newton_reaches_the_tolerance_with_tiny_or_no_slack(slack: float) -> None:
    """Inner blocks with slack S from 0 (no finite minimiser: the all-ones shift and the last e-folds) to
    comfortable: Newton stops at ||R - t||_1 <= tol, the returned norm is the true one, and the weights are
    finite."""
    rng = np.random.default_rng(int(slack * 1e12) % 1000)
    for k in (3, 12, 40):
        ev, t = _inner_block(rng, k, slack)
        tol = np.array([4e-17 * k * t.sum()])
        alpha0 = initial_alpha(ev.mass, t, np.array([True]))
        alpha, gn, its = newton(ev, alpha0, np.ones((1, k), dtype=bool), tol, 1e-13 * t.sum(1))
        true = np.abs(ev.row_sums(alpha) - t).sum()
        assert gn[0] <= tol[0] or gn[0] <= 1e-13 * t.sum()
        assert true == pytest.approx(gn[0], abs=1e-30)
        assert np.all(np.isfinite(alpha)) and its < 40


def test_single_block_path_matches_the_batched_loop() -> None:
    """newton() on one block (scalar bookkeeping) and on the same block inside a batch (array bookkeeping)
    take the same steps: same iteration count, same weights, same gradient norm; outer blocks pin a token."""
    rng = np.random.default_rng(6)
    for k, sigma, skewed in itertools.product((2, 5, 17), (0.0, 1.0), (False, True)):
        q, null, _ = _block(rng, k)
        if skewed:  # one dominant token, the others 1e-8..1e-4: capped steps, clipped minor tokens, backtracking
            q = np.concatenate([[0.6], 10.0 ** rng.uniform(-8, -4, k - 1)])
        # feasible targets: the rule's row sums at random weights
        probe = PairwiseN2(q[None], np.array([null]), np.zeros((1, k)), np.array([sigma]))
        t = probe.row_sums(rng.normal(size=(1, k)) * (6.0 if skewed else 1.0))[0]
        ev1 = PairwiseN2(q[None], np.array([null]), t[None], np.array([sigma]))
        ev2 = PairwiseN2(np.repeat(q[None], 2, 0), np.array([null, null]), np.repeat(t[None], 2, 0),
                         np.array([sigma, sigma]))
        free = np.ones((1, k), dtype=bool)
        alpha0 = initial_alpha(ev1.mass, t[None], np.array([sigma > 0]))
        if sigma == 0.0:
            free[0, -1] = False
            alpha0 = alpha0 - alpha0[0, -1]
        tol = np.array([4e-17 * k * t.sum()])
        stall = np.array([1e-13 * t.sum()])
        a1, g1, i1 = newton(ev1, alpha0, free, tol, stall)
        a2, g2, i2 = newton(ev2, np.repeat(alpha0, 2, 0), np.repeat(free, 2, 0), np.repeat(tol, 2),
                            np.repeat(stall, 2))
        assert i1 == i2
        np.testing.assert_allclose(a2, np.repeat(a1, 2, 0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g2, np.repeat(g1, 2), rtol=1e-6, atol=1e-18)
        assert g1[0] <= tol[0] or g1[0] <= stall[0]
