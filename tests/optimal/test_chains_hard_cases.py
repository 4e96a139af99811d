"""The class chains (otlp.optimal.chains, the rule of OptimalTransport) on hard cases, against brute force: groups of
tens of tokens in every family, psi flat to 1e-13 across large groups, the decode loop's own V = 2000 pairs at n = 4,
and the root finder of the slot masses over 12 decades of scale."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.optimal import OptimalTransport

from .instances import FAMILIES, draw
from .test_exact_enumeration import TOL, enumerate_rule


def test_larger_groups_are_exact_by_enumeration() -> None:
    """V = 12..60 (n = 2) and 12..25 (n = 3), every family: law = p and acceptance = alpha* by enumeration, alpha*
    against the independent subset minimum of otlp.optimal_acceptance."""
    rng = np.random.default_rng(41)
    for family in sorted(FAMILIES):
        for trial in range(4):
            n = 3 if trial % 2 else 2
            V = int(rng.integers(12, 26 if n == 3 else 61))
            p, q = draw(family, rng, V, n)
            ot = OptimalTransport.from_arrays(p, q, n)
            law, acceptance = enumerate_rule(ot, otlp.IID(q, n))
            where = f"{family} trial {trial} V={V} n={n}"
            assert ot.success and np.abs(law - p).sum() < TOL and abs(acceptance - ot.alpha) < TOL, where
            assert abs(ot.alpha - otlp.optimal_acceptance(p, otlp.IID(q, n))) < TOL, where


def test_near_tie_groups_are_exact() -> None:
    """psi flat to 1e-13 across groups of tens of tokens (softmax weights there would leave float64): the class
    chains need no weights, and the rule is exact by enumeration."""
    rng = np.random.default_rng(123)
    for _ in range(30):
        V = int(rng.integers(20, 61))
        p, q = FAMILIES["near_ties"](rng, V, 2)
        ot = OptimalTransport.from_arrays(p, q, 2)
        law, acceptance = enumerate_rule(ot, otlp.IID(q, 2))
        assert ot.success and np.abs(law - p).sum() < TOL and abs(acceptance - ot.alpha) < TOL


def test_decode_distribution_at_n4() -> None:
    """The embedded n-gram pair at real contexts (V = 2000, n = 4; groups of ~2000 tokens): rows meet their targets
    to 1e-12 and every sampled tuple's accept + reject probabilities sum to 1."""
    from otlp.decode.ngram import embedded_models

    models = embedded_models()
    rng = np.random.default_rng(43)
    worst = 0.0
    for _ in range(6):
        context = rng.integers(0, models.target.vocab_size, size=(1, models.target.context_size))
        p = models.target.probabilities(context)[0]
        q = models.draft.probabilities(context[:, -models.draft.context_size :])[0]
        ot = OptimalTransport.from_arrays(p, q, 4)
        assert ot.success
        worst = max(worst, ot.row_error)
        accept, reject = ot.rule(rng.choice(p.size, size=(500, 4), p=q))
        np.testing.assert_allclose(accept.sum(1) + reject, 1.0, atol=1e-12)
    assert worst <= 1e-12


@pytest.mark.parametrize("n", [2, 3, 4])
def test_slot_mass_recovers_a_known_root(n: int) -> None:
    """slot_mass solves (H + y)^n - H^n - r y = gap on [0, L]: build gap from a chosen root y* (with r below the
    slope n H^(n-1) at 0, y* is the only root in [0, L]) over 12 decades of scale; n = 2 is the closed form, n >= 3
    the Newton from an upper bound."""
    from otlp.optimal.chains import NEWTON_STEPS, power_gap, slot_mass

    rng = np.random.default_rng([41, n])
    size = 4000
    H = rng.random(size) * 10.0 ** rng.integers(-12, 1, size)
    y_star = rng.random(size) * 10.0 ** rng.integers(-12, 1, size)
    L = y_star * (1.0 + rng.random(size))  # the root lies inside [0, L]
    r = rng.random(size) * n * H ** (n - 1)  # g'(0) = n H^(n-1) - r >= 0: g < 0 on (0, y*), > 0 after
    gap = power_gap(H, y_star, n) - r * y_star
    for steps in (None, NEWTON_STEPS):  # the numpy default and the device route's fixed count
        y = slot_mass(H, L, r, gap, n, steps)
        assert np.all((y >= 0) & (y <= L))
        assert np.max(np.abs(y - y_star) / y_star) < 1e-12
