"""The ``cvxpy`` backend: a :class:`LinearModel` stated in CVXPY and solved by a solver CVXPY drives.

The solver is the first of ``PREFERRED_SOLVERS`` that is installed (HiGHS gives a vertex, so values match the
other backends to ~1e-12; Clarabel is an interior-point method run with tightened tolerances), unless
``solver=`` names one; with none installed CVXPY picks. Rows are grouped into equalities, ``<=`` and ``>=``
constraints; their duals are mapped to :mod:`otlp.lp.solution`'s convention (one multiplier per row, positive on a
binding upper side of a ``max``).

Options: ``solver`` (a CVXPY solver name), ``time_limit`` (seconds, passed to HiGHS or Clarabel), and
``solver_options`` (a dict handed to ``Problem.solve``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from otlp.core.errors import InputError, MissingDependencyError
from otlp.lp.ir import LinearModel
from otlp.lp.solution import Solution

CAPABILITIES = frozenset({"linear"})
NAME = "cvxpy"
PREFERRED_SOLVERS = ("HIGHS", "CLARABEL")
#: tolerances so values agree across backends to ~1e-9
_SOLVER_TOLERANCES = {
    "CLARABEL": {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10},
    # absolute 1e-7 by default, above the mass of many single tuples (see otlp.lp.solvers.highs.DEFAULT_OPTIONS)
    "HIGHS": {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
}
_OPTION_NAMES = {"solver", "time_limit", "solver_options"}


def cvxpy_module():  # noqa: ANN201
    """Import ``cvxpy`` or raise a clear :class:`MissingDependencyError`."""
    try:
        import cvxpy
    except ImportError:
        raise MissingDependencyError("cvxpy", "the 'cvxpy' backend", extra="solvers") from None
    return cvxpy


def choose_solver(cp, solver: str | None = None) -> str | None:  # noqa: ANN001
    """The solver to use: ``solver`` if given (checked), else the first installed of ``PREFERRED_SOLVERS``."""
    installed = set(cp.installed_solvers())
    if solver is not None:
        name = str(solver).upper()
        if name not in installed:
            raise InputError(f"CVXPY solver {solver!r} is not installed; installed: {', '.join(sorted(installed))}")
        return name
    return next((s for s in PREFERRED_SOLVERS if s in installed), None)


def solve_linear(model: LinearModel, **options: Any) -> Solution:
    """Solve ``model`` through CVXPY; primal by block, row duals by row group."""
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise InputError(f"unknown option(s) for the cvxpy backend: {sorted(unknown)}; "
                         f"expected some of {sorted(_OPTION_NAMES)}")
    cp = cvxpy_module()
    start = time.perf_counter()
    solver = choose_solver(cp, options.get("solver"))
    A = model.A
    rl, ru = model.row_lower, model.row_upper
    lb, ub = model.lower, model.upper
    eq = np.isfinite(rl) & np.isfinite(ru) & (rl == ru)  # [M]
    up = np.isfinite(ru) & ~eq
    lo = np.isfinite(rl) & ~eq
    x = cp.Variable(model.num_variables)
    groups: list[tuple[str, np.ndarray, Any]] = []  # (kind, row indices, constraint)
    for kind, mask in (("eq", eq), ("up", up), ("lo", lo)):
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            continue
        expr = A[rows] @ x
        con = {"eq": lambda e, r: e == ru[r], "up": lambda e, r: e <= ru[r], "lo": lambda e, r: e >= rl[r]}[kind](
            expr, rows)
        groups.append((kind, rows, con))
    bounds = []
    if np.isfinite(lb).any():
        j = np.flatnonzero(np.isfinite(lb))
        bounds.append(x[j] >= lb[j])
    if np.isfinite(ub).any():
        j = np.flatnonzero(np.isfinite(ub))
        bounds.append(x[j] <= ub[j])
    c = model.objective
    objective = cp.Maximize(c @ x) if model.sense == "max" else cp.Minimize(c @ x)
    problem = cp.Problem(objective, [g[2] for g in groups] + bounds)
    kwargs: dict[str, Any] = dict(_SOLVER_TOLERANCES.get(solver, {})) if solver else {}
    if options.get("time_limit") is not None:
        if solver == "HIGHS":
            kwargs["time_limit"] = float(options["time_limit"])
        elif solver == "CLARABEL":
            kwargs["time_limit"] = float(options["time_limit"])
    kwargs.update(options.get("solver_options") or {})
    built = time.perf_counter()
    try:
        problem.solve(solver=solver, **kwargs)
    except cp.error.SolverError as exc:
        seconds = {"build": built - start, "solve": time.perf_counter() - built}
        return Solution(float("nan"), "error", {}, None, seconds, NAME, model=model, info={"error": str(exc)})
    solved = time.perf_counter()
    seconds = {"build": built - start, "solve": solved - built}
    status = _status(cp, problem.status)
    info = {"solver": problem.solver_stats.solver_name if problem.solver_stats else solver}
    if status != "optimal":
        return Solution(float("nan"), status, {}, None, seconds, NAME, model=model, info=info)
    xv = np.asarray(x.value, dtype=np.float64)
    dual = _row_duals(model, groups)
    return Solution(float(c @ xv) + model.constant, status, model.split(xv),
                    None if dual is None else model.split_rows(dual), seconds, NAME, model=model, info=info)


def _row_duals(model: LinearModel, groups: list) -> np.ndarray | None:
    """CVXPY reports ``>= 0`` multipliers for ``<=`` and ``>=`` constraints and the Lagrange multiplier of the
    minimisation form for equalities; map them to one signed multiplier per row (otlp's convention)."""
    y = np.zeros(model.num_constraints)
    sign = 1.0 if model.sense == "max" else -1.0
    for kind, rows, con in groups:
        value = con.dual_value
        if value is None:
            return None
        value = np.asarray(value, dtype=np.float64).reshape(-1)
        if kind == "up":
            y[rows] = sign * value
        elif kind == "lo":
            y[rows] = -sign * value
        else:
            y[rows] = sign * value
    return y


def _status(cp, status: str) -> str:  # noqa: ANN001
    if status == cp.OPTIMAL:
        return "optimal"
    if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return "infeasible"
    if status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
        return "unbounded"
    if status == getattr(cp, "USER_LIMIT", "user_limit"):
        return "time_limit"
    return "error"
