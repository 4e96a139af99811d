"""The sequential band of black-box certify (``otlp.certification.stats``) against independent routes: the KL
bounds against scipy's root finder, tv_upper against a brute-force maximum over all 2^M events, the band's coverage
and the null false-alarm rate on simulated multinomial counts (no sampler involved)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import brentq

from otlp.certification.stats import (
    band,
    kl_bernoulli,
    kl_lower,
    kl_upper,
    log_events,
    look_sizes,
    proportion_interval,
    radius,
)


def test_kl_bounds_match_a_root_finder_and_never_fall_inside() -> None:
    rng = np.random.default_rng(0)
    for x in (1e-10, 1e-6, 1e-3, 0.1, 3.0):
        s = np.concatenate([rng.random(40), [0.0, 1e-9, 0.5, 1 - 1e-9, 1.0]])
        up, lo = kl_upper(s, x), kl_lower(s, x)
        for si, u, low in zip(s, up, lo, strict=True):
            f = lambda t, si=si, x=x: float(kl_bernoulli(np.array(si), np.array(t))) - x  # noqa: E731
            ref = 1.0 if si >= 1 or f(1 - 1e-15) < 0 else brentq(f, si, 1 - 1e-15, xtol=1e-18, rtol=1e-15)
            assert ref - 1e-15 <= u <= ref + 1e-9 * max(ref - si, 1e-12) + 1e-15  # up to the last ulp
            ref_lo = 0.0 if si <= 0 or f(1e-15) < 0 else brentq(f, 1e-15, si, xtol=1e-18, rtol=1e-15)
            assert ref_lo - 1e-9 * max(si - ref_lo, 1e-12) - 1e-15 <= low <= ref_lo + 1e-15


def test_tv_upper_dominates_every_event_and_is_tight() -> None:
    """tv_upper (fractional knapsack + concave search) >= max over all 2^M events of U(hat(A)) - p0(A), and within
    a few per cent of it (the fractional relaxation); tv_lower <= the plug-in TV."""
    rng = np.random.default_rng(1)
    for M in (2, 3, 5, 9):
        masks = np.array(list(itertools.product((0, 1), repeat=M)), dtype=bool)
        for _ in range(15):
            p0, P = rng.dirichlet(np.ones(M)), rng.dirichlet(np.ones(M))
            N = int(rng.integers(10, 100_000))
            c = rng.multinomial(N, P)
            b = band(c, p0, 2, 0.05)
            hat = c / N
            best = float((kl_upper(masks.astype(float) @ hat, b.radius) - masks.astype(float) @ p0).max())
            assert best - 1e-12 <= b.tv_upper <= best * 1.05  # the fractional relaxation: 1.6% at most seen
            assert b.tv_lower <= b.tv <= b.tv_upper


def test_band_covers_the_true_tv_and_rejects_only_at_its_level() -> None:
    """On simulated counts, over the looks of one run: the interval [tv_lower, tv_upper] holds the true TV at every
    look in all but a fraction <= delta of runs; under the null, the rejection rate is <= delta."""
    rng = np.random.default_rng(2)
    delta, runs, M = 0.2, 150, 4
    misses = alarms = 0
    sizes = look_sizes(200, 2.0, 10_000)
    for r in range(runs):
        p0 = rng.dirichlet(np.ones(M))
        P = p0 if r % 2 == 0 else rng.dirichlet(np.ones(M))
        true_tv = 0.5 * float(np.abs(P - p0).sum())
        counts, done, missed, alarmed = np.zeros(M), 0, False, False
        for k, n in enumerate(sizes, start=1):
            counts += rng.multinomial(n - done, P)
            done = n
            b = band(counts, p0, k, delta)
            missed |= not (b.tv_lower <= true_tv <= b.tv_upper + 1e-15)
            alarmed |= b.rejects
        misses += missed
        alarms += alarmed and r % 2 == 0
    # Binomial(150, 0.2) > 55 and Binomial(75, 0.2) > 33 both have probability < 1e-6
    assert misses <= 55 and alarms <= 33


def test_a_clear_bias_is_rejected_with_a_small_anytime_p_value() -> None:
    p0 = np.array([0.5, 0.3, 0.2])
    b = band(np.array([4000, 3000, 3000]), p0, 1, 1e-3)
    assert b.rejects and b.tv_lower > 0.05 and math.exp(b.log_p) < 1e-10
    impossible = band(np.array([10, 0, 1]), np.array([0.5, 0.5, 0.0]), 3, 1e-3)  # a count on a p0 = 0 cell
    assert impossible.rejects and impossible.log_p == -math.inf


def test_helpers() -> None:
    assert log_events(1) == 0 and log_events(2) == pytest.approx(math.log(2))
    assert log_events(64) == pytest.approx(64 * math.log(2), rel=1e-12)
    assert radius(3, 1000, 1, 1e-3) == pytest.approx((math.log(6) + math.log(math.pi**2 / 6e-3)) / 1000)
    sizes = look_sizes(1000, 1.5, 10_000, 4)
    assert sizes[-1] == 10_000 and all(s % 4 == 0 for s in sizes) and sizes == sorted(set(sizes))
    lo, hi = proportion_interval(800, 1000, 1, 1e-3)
    assert lo < 0.8 < hi and hi - lo < 0.15
