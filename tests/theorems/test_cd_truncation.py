"""CD truncated alphabet (Section 4) and App. G.1 truncated LP: the checks pass (float and exact), the recorded
counterexamples to the printed statements reproduce, and injected broken implementations are caught."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from otlp.theorems import build_registry
from otlp.theorems.cd_truncation import (
    appendix_i_reading_law,
    g1_law,
    g1_law_brute,
    g1_law_printed,
    g1_truncated_lp,
    truncated_alphabet_conditional,
)
from otlp.verifiers.importance import ImportanceSampling, solve_omega1_weights

REGISTRY = build_registry()
NAMES = ("cd.truncated_alphabet", "cd.truncated_lp_g1")


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_source_statement_and_counterexample(name):
    check = REGISTRY[name]
    assert check.source and check.statement and check.printed and check.counterexample and check.exact_supported


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("exact", [False, True])
def test_check_passes(name, exact):
    result = REGISTRY[name].run(instances=15 if not exact else 5, seed=3, exact=exact)
    assert result.status == "pass", result
    assert result.instances == (15 if not exact else 5) and result.exact == exact


# -- the printed statements fail -------------------------------------------------------------------------------------
def test_printed_eq196_is_not_a_law_and_the_corrected_one_is():
    q = [Fraction(1, 2), Fraction(1, 2)]
    assert g1_law_printed(q, [0], [[0]]) == [Fraction(3, 4), Fraction(1, 2)]  # mass 5/4
    assert g1_law(q, [0], [[0]]) == [Fraction(3, 4), Fraction(1, 4)] == g1_law_brute(q, [0], [[0]])
    rng = np.random.default_rng(0)
    for _ in range(5):  # whenever q(Omega_1) q(Omega_2) > 0 the printed mass exceeds 1
        w = rng.integers(1, 9, size=5)
        qf = [Fraction(int(x), int(w.sum())) for x in w]
        printed = g1_law_printed(qf, [1, 3], [[0, Fraction(1, 3)], [Fraction(2, 3), 0]])
        assert sum(printed) == 1 + (qf[1] + qf[3]) * (1 - qf[1] - qf[3]) > 1


def test_appendix_i_reading_is_not_exact_but_section4_is():
    p, q, omega0 = np.array([0.5, 0.5]), np.array([0.25, 0.75]), np.array([True, False])
    out = appendix_i_reading_law(p, q, omega0)
    np.testing.assert_allclose(out, [0.21875, 0.78125], atol=1e-12)  # recorded in the check's counterexample
    assert out.sum() == pytest.approx(1.0)
    from otlp.core.drafts import IID

    omegas = np.array([[a, b] for a in range(2) for b in range(2)])
    law, _ = truncated_alphabet_conditional(p, IID(q, 2), omega0, ImportanceSampling(s=2), omegas)
    np.testing.assert_allclose(np.array([q[a] * q[b] for a, b in omegas]) @ law, p, atol=1e-12)


def test_g1_lp_at_s_zero_is_one_minus_tv():
    p = [Fraction(1, 5), Fraction(3, 5), Fraction(1, 5)]
    q = [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]
    value, _ = g1_truncated_lp(p, q, [], exact=True)
    assert value == sum(min(a, b) for a, b in zip(p, q, strict=True)) == Fraction(13, 20)


# -- injected bugs ----------------------------------------------------------------------------------------------------
def _run(name, **impl):
    return REGISTRY[name].run(instances=15, seed=0, impl=impl)


def test_alphabet_without_truncating_the_target_is_caught():
    def untruncated(p, draft, omega0, verifier, omegas):  # inner IS against p itself, then the same p_a mixing
        law, acc = verifier.conditional(np.asarray(p), draft, omegas)
        mask = np.asarray(omega0)
        rest = float(np.asarray(p)[~mask].sum())
        outside = np.where(mask, 0.0, p)
        if rest > 0:
            law = (1 - rest) * law + rest * (outside / rest)[None, :]
        return law, (1 - rest) * acc

    assert _run("cd.truncated_alphabet", truncated_alphabet=untruncated).status == "fail"


def test_alphabet_without_the_p_a_coin_is_caught():
    def no_coin(p, draft, omega0, verifier, omegas):  # always keep Y: outputs p~, not p
        mask = np.asarray(omega0)
        p_tilde = np.where(mask, p, 0.0) / np.asarray(p)[mask].sum()
        return verifier.conditional(p_tilde, draft, omegas)

    result = _run("cd.truncated_alphabet", truncated_alphabet=no_coin)
    assert result.status == "fail" and "output law" in result.details


def test_alphabet_with_a_broken_inner_verifier_is_caught():
    class WrongTarget(ImportanceSampling):  # step 2 tests the selected draft against its own law p_I (restricted
        # to supp p) instead of the target: it accepts (almost) every selected draft, so the output is not p
        def conditional(self, p, draft, omegas):
            own = np.where(p > 0, self.plans(p, draft)[1], 0.0)
            return super().conditional(own / own.sum() if own.sum() > 0 else p, draft, omegas)

    result = _run("cd.truncated_alphabet", is_verifier=lambda s: WrongTarget(s=s))
    assert result.status == "fail" and "output law" in result.details


def test_g1_with_suboptimal_or_flipped_weights_is_caught():
    def flipped(*args):  # pick the other token of every Omega_1 pair: feasible (W + W^T = 1) but not optimal
        W = 1.0 - solve_omega1_weights(*args)
        return W * (1.0 - np.eye(W.shape[-1]))

    assert _run("cd.truncated_lp_g1", omega1_weights=flipped).status == "fail"

    def out_of_box(*args):
        return 1.5 * solve_omega1_weights(*args)

    result = _run("cd.truncated_lp_g1", omega1_weights=out_of_box)
    assert result.status == "fail"
