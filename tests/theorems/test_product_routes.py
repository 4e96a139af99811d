"""GR Thm 3.1 / 4.1 also exercise the product's formulations (RelaxedOTLP, BetaProgram) and its ``exact`` backend:
in exact mode a value off by 1e-15 (far below the float tolerance) is a hard failure."""

from __future__ import annotations

from fractions import Fraction

from otlp.theorems import build_registry
from otlp.theorems.adapters import beta_program_solve, relaxed_otlp_solve

REGISTRY = build_registry()
TINY = Fraction(1, 10**15)


def test_exact_backend_off_by_a_rational_epsilon_is_caught():
    def nudged(p, draft, exact):
        value, omegas, probs = relaxed_otlp_solve(p, draft, exact)
        return (value + TINY if exact else value), omegas, probs

    result = REGISTRY["gr.thm3.1"].run(instances=3, seed=2, exact=True, impl={"relaxed_otlp": nudged})
    assert result.status == "fail" and "exact equality fails" in result.details
    assert REGISTRY["gr.thm3.1"].run(instances=3, seed=2, impl={"relaxed_otlp": nudged}).status == "pass"


def test_beta_program_returning_floats_in_exact_mode_is_caught():
    def floats(p, draft, exact):
        value, acceptance, omegas, probs = beta_program_solve(p, draft, exact)
        return float(value), acceptance, omegas, probs

    result = REGISTRY["gr.thm4.1"].run(instances=3, seed=2, exact=True, impl={"beta_program": floats})
    assert result.status == "fail" and "not a Fraction" in result.details


def test_suboptimal_beta_program_is_caught_in_float_mode():
    def low(p, draft, exact):
        value, acceptance, omegas, probs = beta_program_solve(p, draft, exact)
        return value, acceptance - 1e-4, omegas, probs

    result = REGISTRY["gr.thm4.1"].run(instances=4, seed=0, impl={"beta_program": low})
    assert result.status == "fail" and "optimal_beta" in result.details
