"""The exact backend: rational LU against sympy, exact optima of hand-built LPs, the repair pivots on degenerate
OTLP instances (alpha* = 1, where sum p and sum P_draft differ by float rounding), refusal above the size limit."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy

from otlp import IID, SpecHub, WithoutReplacement
from otlp.core.errors import ModelTooLargeError
from otlp.lp.formulations import FullOTLP, RelaxedOTLP
from otlp.lp.solvers import solve
from otlp.lp.solvers.exact import RationalLU, SingularBasisError
from tests.lp.formulations.lp_instances import zoo_max, zoo_min
from tests.lp.solvers.backend_checks import check_hand_built_lps, check_statuses, check_unknown_option


def test_hand_built_lps():
    check_hand_built_lps("exact")


def test_hand_built_optima_are_exact_rationals():
    s = solve(zoo_max(), "exact")
    assert s.value == Fraction(41, 4)
    assert list(s.primal["x"]) == [Fraction(5, 2)] and list(s.primal["z"]) == [Fraction(1, 4)]
    s = solve(zoo_min(), "exact")
    assert s.value == Fraction(5, 4)
    assert list(s.dual["cover"]) == [Fraction(3, 2)] and list(s.dual["tilt"]) == [Fraction(-1, 2)]
    cert = s.certificate()
    assert cert.exact and cert.gap == 0 and cert.ok


def test_statuses():
    check_statuses("exact")


def test_unknown_option():
    check_unknown_option("exact")


@pytest.mark.parametrize("seed", range(5))
def test_rational_lu_matches_sympy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    dense = rng.integers(-3, 4, size=(n, n)) * (rng.random((n, n)) < 0.5) + np.diag(rng.integers(1, 4, size=n) * 5)
    rows = [{j: Fraction(int(v)) for j, v in enumerate(r) if v} for r in dense]
    b = [Fraction(int(v), int(d)) for v, d in zip(rng.integers(-9, 10, n), rng.integers(1, 7, n), strict=True)]
    x = RationalLU(rows).solve(b)
    expected = sympy.Matrix(dense.tolist()).LUsolve(sympy.Matrix([sympy.Rational(v.numerator, v.denominator)
                                                                  for v in b]))
    assert [sympy.Rational(v.numerator, v.denominator) for v in x] == list(expected)


def test_rational_lu_detects_singular():
    with pytest.raises(SingularBasisError):
        RationalLU([{0: Fraction(1), 1: Fraction(1)}, {0: Fraction(2), 1: Fraction(2)}])


@pytest.mark.parametrize(("draft", "alpha"), [(SpecHub([0.5, 0.3, 0.2]), 1),
                                             (WithoutReplacement([0.5, 0.3, 0.2], 2), 1),
                                             (IID([0.5, 0.3, 0.2], 2), Fraction(85, 100))])
def test_worked_example_exactly(draft, alpha):
    """p = (.1, .6, .3), q = (.5, .3, .2) (SpecHub paper's example): alpha* = 1 for SpecHub and WithoutReplacement,
    0.85 for IID n = 2. At alpha* = 1 every p-row and P_draft-row is tight, which float rounding of the two sums
    makes inconsistent; the exact optimum is then 1 up to that rounding of the data (|value - 1| < 1e-15)."""
    p = [0.1, 0.6, 0.3]
    for formulation in (FullOTLP, RelaxedOTLP):
        s = formulation(p, draft).solve(backend="exact")
        cert = s.certificate()
        assert cert.exact and cert.ok and cert.gap == 0 and cert.primal_violation == 0
        assert abs(s.value - alpha) < Fraction(1, 10**15)


def test_repair_pivots_do_happen():
    """On the SpecHub example the HiGHS basis is off in exact arithmetic and needs exact pivots (so the repair path
    is exercised, not just present)."""
    p, draft = [0.1, 0.6, 0.3], SpecHub([0.5, 0.3, 0.2])
    pivots = [f(p, draft).solve(backend="exact").info["exact_pivots"] for f in (FullOTLP, RelaxedOTLP)]
    assert sum(pivots) >= 1


def test_refuses_models_above_the_limit():
    p = np.full(30, 1 / 30)
    f = RelaxedOTLP(p, IID(p, 3))  # 81,000 pair variables
    with pytest.raises(ModelTooLargeError, match="variables"):
        f.solve(backend="exact")
