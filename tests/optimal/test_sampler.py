"""The vectorised samplers reproduce the rule: seeded chi-square tests.

Each test compares counts with their exact expectation (from ``slice``/enumeration) by a chi-square statistic
and fails only when its p-value is below 1e-6, so the false-failure rate per assertion is 1e-6 (the seeds are
fixed, so in practice the outcome is deterministic).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

import otlp
from otlp.optimal import OptimalTransport, solve_batch

from .instances import FAMILIES

ALPHA = 1e-6


def _chi_square_ok(counts: np.ndarray, probs: np.ndarray) -> bool:
    expected = probs * counts.sum()
    keep = expected > 0
    assert np.all(counts[~keep] == 0), "a token with probability 0 was sampled"
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    return scipy.stats.chi2.sf(stat, max(int(keep.sum()) - 1, 1)) > ALPHA


def test_sample_reproduces_target_law() -> None:
    """Draft omega ~ IID(q, n), output ~ ot.sample: the output tokens follow p."""
    rng = np.random.default_rng(2024)
    for V, n in [(6, 2), (5, 3), (12, 2)]:
        p, q = FAMILIES["heavy"](rng, V)
        ot = OptimalTransport(p, otlp.IID(q, n))
        omegas = otlp.IID(q, n).sample(200_000, rng)
        out = ot.sample(omegas, rng)
        assert _chi_square_ok(np.bincount(out, minlength=V), p)


def test_sample_reproduces_each_slice() -> None:
    rng = np.random.default_rng(77)
    p, q = FAMILIES["dirichlet"](rng, 7)
    ot = OptimalTransport(p, otlp.IID(q, 3))
    for omega in ([0, 1, 2], [3, 3, 5], [6, 6, 6]):
        out = ot.sample(np.tile(omega, (50_000, 1)), rng)
        assert _chi_square_ok(np.bincount(out, minlength=7), ot.slice(omega))


def test_batch_sample_reproduces_slices() -> None:
    rng = np.random.default_rng(5)
    B, V = 4, 8
    P = np.stack([FAMILIES["heavy"](rng, V)[0] for _ in range(B)])
    Q = np.stack([FAMILIES["dirichlet"](rng, V)[1] for _ in range(B)])
    batch = solve_batch(P, Q, 2)
    omegas = np.array([[0, 1], [2, 2], [3, 7], [5, 4]])
    slices = batch.slices(omegas)
    big = np.stack([batch.sample(omegas, rng) for _ in range(5_000)])  # [R, B]: 5000 draws per row
    for b in range(B):
        assert _chi_square_ok(np.bincount(big[:, b], minlength=V), slices[b])


def test_lp_route_sample_reproduces_target_law() -> None:
    """Non-i.i.d. drafts (the LP route) with alpha* < 1, so rejected tuples draw from the residual: the output
    tokens follow p. (Before, a rejection raised AttributeError: the residual CDF was only built on the block route.)"""
    rng = np.random.default_rng(2026)
    p = np.array([0.7, 0.2, 0.1])
    for draft in (otlp.Independent([[0.1, 0.1, 0.8], [0.2, 0.1, 0.7]]), otlp.WithoutReplacement([0.1, 0.2, 0.7], 2)):
        ot = OptimalTransport(p, draft)
        assert ot.route in ("luce", "lp") and ot.alpha < 0.99
        omegas = draft.sample(200_000, rng)
        out = ot.sample(omegas, rng)
        assert _chi_square_ok(np.bincount(out, minlength=3), p)
