"""The cvxpy backend: hand-built LPs (value, duals, certificate) against scipy's linprog, statuses, errors.
The OTLP formulations through cvxpy are checked against brute force in tests/lp/formulations/test_agreement.py."""

from __future__ import annotations

from tests.lp.solvers.backend_checks import (
    check_hand_built_lps,
    check_missing_dependency,
    check_statuses,
    check_unknown_option,
)


def test_hand_built_lps():
    check_hand_built_lps("cvxpy")


def test_statuses():
    check_statuses("cvxpy")


def test_unknown_option():
    check_unknown_option("cvxpy")


def test_missing_dependency(monkeypatch):
    check_missing_dependency("cvxpy", "cvxpy", monkeypatch)


def test_clarabel_route_reaches_alpha_star():
    """The interior-point route (Clarabel, tightened tolerances) also reaches alpha* to 1e-9 on OTLP instances."""
    import cvxpy
    import pytest

    from otlp.core.subsets import brute_force_min_psi
    from otlp.lp.formulations import RelaxedOTLP
    from tests.lp.formulations.lp_instances import instances

    if "CLARABEL" not in cvxpy.installed_solvers():
        pytest.fail("CLARABEL is a dependency of cvxpy and should be installed")
    for name, p, draft in instances(per_scheme=1, seed=7):
        solution = RelaxedOTLP(p, draft).solve(backend="cvxpy", solver="CLARABEL")
        assert solution.info["solver"] == "CLARABEL"
        assert abs(solution.value - 1 - brute_force_min_psi(p, draft)[0]) <= 1e-9, name
        assert solution.certificate(tol=1e-9).ok, name


def test_unknown_solver_name():
    import pytest

    from otlp.core.errors import InputError
    from otlp.lp.solvers import solve
    from tests.lp.formulations.lp_instances import zoo_min

    with pytest.raises(InputError, match="not installed"):
        solve(zoo_min(), "cvxpy", solver="NO_SUCH_SOLVER")
