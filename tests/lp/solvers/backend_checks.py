"""Checks every LP backend passes (imported by test_highs / test_cvxpy / test_pulp / test_exact)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from scipy.optimize import linprog

from otlp.core.errors import InputError, MissingDependencyError
from otlp.lp.ir import LinearModel
from otlp.lp.solvers import solve
from tests.lp.formulations.lp_instances import ZOO_MAX_VALUE, infeasible_model, unbounded_model, zoo_max, zoo_min


def linprog_value(model: LinearModel) -> float:
    """Independent reference: scipy's linprog on the same data (its own HiGHS build, its own model path)."""
    A = model.A.toarray()
    rl, ru = model.row_lower, model.row_upper
    eq = rl == ru
    up, lo = np.isfinite(ru) & ~eq, np.isfinite(rl) & ~eq
    sign = -1.0 if model.sense == "max" else 1.0
    res = linprog(sign * model.objective, A_ub=np.vstack([A[up], -A[lo]]), b_ub=np.concatenate([ru[up], -rl[lo]]),
                  A_eq=A[eq], b_eq=ru[eq], bounds=list(zip(model.lower, model.upper, strict=True)), method="highs")
    assert res.status == 0
    return sign * res.fun


def check_hand_built_lps(backend: str) -> None:
    for make, value, duals in ((zoo_max, ZOO_MAX_VALUE, {"total": 2.0, "balance": -0.5}),
                               (zoo_min, 1.25, {"cover": 1.5, "tilt": -0.5})):
        model = make()
        solution = solve(model, backend)
        assert solution.status == "optimal" and solution.backend == backend
        assert float(solution.value) == pytest.approx(value, abs=1e-12)
        assert float(solution.value) == pytest.approx(linprog_value(model), abs=1e-9)
        for row, y in duals.items():  # unique duals of these LPs (nondegenerate optima)
            assert float(solution.dual[row][0]) == pytest.approx(y, abs=1e-9)
        cert = solution.certificate(tol=1e-9)
        assert cert.ok, str(cert)
        assert solution.seconds["solve"] >= 0 and solution.seconds["build"] >= 0


def check_statuses(backend: str) -> None:
    assert solve(infeasible_model(), backend).status == "infeasible"
    assert solve(unbounded_model(), backend).status in ("unbounded", "infeasible_or_unbounded")


def check_unknown_option(backend: str) -> None:
    with pytest.raises(InputError, match="unknown option"):
        solve(zoo_min(), backend, no_such_option=1)


def check_missing_dependency(backend: str, package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the package unimportable, the backend says which package to install (no ImportError traceback)."""
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` raise ImportError
    with pytest.raises(MissingDependencyError, match=package):
        solve(zoo_min(), backend)
