"""Issue 17's non-i.i.d. reproducers, each checked against an independent route (brute force over 2^V subsets or
the relaxed LP), and subnormal masses that must not leak numpy warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import otlp
from otlp.core.subsets import brute_force_min_psi
from otlp.optimal import OptimalTransport

WOR2_P = [0.562638868923451, 1.3419e-319, 0.43736113107654895]
WOR2_Q = [2.9169e-319, 7.49275e-319, 1.0]
WOR3_P = [0.01103830658737787, 0.1422777662477993, 0.0001878045956743722, 0.3321273690868385, 0.12409973136703552,
          0.3902690221152743]
WOR3_Q = [0.01103830658737787, 0.3902690221152743, 0.0001878045956743722, 0.1422777662477993, 0.12409973136703552,
          0.3321273690868385]


def test_without_replacement_n2_closed_form_does_not_overflow():
    # 1 - q_heaviest is subnormal: 1 / (1 - q_i) overflowed and alpha* came out 1.0; the truth is 0.71757...
    draft = otlp.WithoutReplacement(WOR2_Q, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alpha = otlp.optimal_acceptance(WOR2_P, draft)
    assert alpha == pytest.approx(0.7175731921698881, abs=1e-15)
    # independent route: the base class's enumeration of P(omega in H^2) over all 2^3 subsets
    masks = ((np.arange(8)[:, None] >> np.arange(3)) & 1).astype(bool)
    enumerated = otlp.core.drafts.DraftScheme.subset_probability(draft, masks)
    assert np.allclose(draft.subset_probability(masks), enumerated, rtol=0, atol=1e-15)


def test_without_replacement_n3_lp_route_never_fails_on_a_valid_instance():
    # HiGHS' interior point ended with "model_status Unknown" here; the route falls back to dual simplex
    draft = otlp.WithoutReplacement(WOR3_Q, 3)
    ot = OptimalTransport(WOR3_P, draft)
    truth = 1.0 + brute_force_min_psi(np.array(WOR3_P), draft)[0]
    assert ot.alpha <= 1.0 and ot.alpha == pytest.approx(truth, abs=1e-9)
    omegas, probs = draft.support()
    law = probs @ ot.slices(omegas)
    assert np.abs(law - np.array(WOR3_P)).max() < 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_lp_route_alpha_is_feasible_and_certified(seed):
    # the LP route reported HiGHS' objective, up to 9e-11 above alpha* (even above 1); it now reports the value of
    # its repaired, feasible plan: never above 1 and never above the rule's own acceptance
    rng = np.random.default_rng(seed)
    V = int(rng.integers(3, 7))
    q = rng.dirichlet(np.full(V, 0.3))
    p = q[rng.permutation(V)] if seed % 2 else rng.dirichlet(np.full(V, 0.3))
    draft = otlp.WithoutReplacement(q, 2) if seed % 3 else otlp.Independent([q, rng.dirichlet(np.ones(V))])
    ot = OptimalTransport(p, draft)
    assert ot.alpha <= 1.0
    assert ot.alpha <= ot.acceptance() + 1e-15
    assert ot.alpha == pytest.approx(otlp.optimal_acceptance(p, draft), abs=1e-9)


SUBNORMALS = (5e-324, 1e-320, 1e-310, 2.2e-308)


def _with_subnormals(rng: np.random.Generator, V: int) -> np.ndarray:
    x = rng.dirichlet(np.ones(V))
    idx = rng.choice(V, size=int(rng.integers(1, V)), replace=False)
    x[idx] = rng.choice(SUBNORMALS, size=idx.size)
    return x / x.sum()


@pytest.mark.parametrize("seed", range(40))
def test_subnormal_masses_leak_no_warning(seed):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(2, 6))
    p, q = _with_subnormals(rng, V), _with_subnormals(rng, V)
    drafts = [otlp.IID(q, 2), otlp.Greedy(q, 2), otlp.SpecHub(q) if np.count_nonzero(q) > 1 else otlp.IID(q, 1)]
    if np.count_nonzero(q) >= 2:
        drafts.append(otlp.WithoutReplacement(q, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for draft in drafts:
            alpha = otlp.optimal_acceptance(p, draft)
            assert alpha == pytest.approx(1.0 + brute_force_min_psi(p, draft)[0], abs=1e-12)
            omegas, probs = draft.support()
            assert np.all((probs >= 0) & (probs <= 1)) and probs.sum() == pytest.approx(1.0, abs=1e-12)
        from otlp.verifiers.base import accept_probability

        assert np.all(accept_probability(p, np.full(V, 1e-320)) <= 1.0)


def test_spechub_with_a_subnormal_second_token_leaks_no_warning() -> None:
    """The hub rule divided q by Z = q(others) ~ 5e-324 over every token, the hub's included (overflow warning);
    its closed-form acceptance still equals the enumerated one."""
    from otlp.verifiers import get
    from otlp.verifiers.exact import acceptance as enumerated_acceptance

    p = np.array([0.3, 0.3, 0.4])
    q = np.array([1.0, 5e-324, 0.0])
    v = get("spechub")
    draft = v.make_draft(q, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        closed = v.acceptance(p, draft)
        law = v.output_law(p, draft)
    assert abs(closed - enumerated_acceptance(v, p, draft)) < 1e-12 and np.abs(law - p).max() < 1e-12
