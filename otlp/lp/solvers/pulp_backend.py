"""The ``pulp`` backend: a :class:`LinearModel` stated in PuLP and solved by CBC (``PULP_CBC_CMD``).

For users who already live in PuLP. Each row becomes one PuLP constraint (two for a ranged row), so building is
a Python loop over rows: fine for the small models this backend is meant for, and the reason it is the slowest
to build in ``benchmarks/backends.py``. CBC's row duals are mapped to :mod:`otlp.lp.solution`'s convention.

Precision: PuLP reads CBC's text solution, printed with ``%15.8g`` (8 significant digits; coin-or/Cbc#622), which
is not enough for alpha* to 1e-9. So CBC is also asked to ``-saveSolution`` (a binary file of doubles: objective,
row activities, row duals, column values, reduced costs), and the primal and duals are read from there at full
precision. If that file is missing or does not match the model, the 8-digit values are used and
``info["precision"]`` says so.

Options: ``time_limit`` (seconds), ``solver`` (a PuLP solver object to use instead of CBC), ``msg`` (CBC log).
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from typing import Any

import numpy as np

from otlp.core.errors import InputError, MissingDependencyError
from otlp.lp.ir import LinearModel
from otlp.lp.solution import Solution

CAPABILITIES = frozenset({"linear"})
NAME = "pulp"
_OPTION_NAMES = {"time_limit", "solver", "msg"}
#: CBC's feasibility tolerances default to 1e-7, above the mass of many single tuples; tighter, as in the highs
#: backend (see otlp.lp.solvers.highs.DEFAULT_OPTIONS).
CBC_TOLERANCES = ("primalTolerance 1e-10", "dualTolerance 1e-10")


def pulp_module():  # noqa: ANN201
    """Import ``pulp`` or raise a clear :class:`MissingDependencyError`."""
    try:
        import pulp
    except ImportError:
        raise MissingDependencyError("pulp", "the 'pulp' backend", extra="solvers") from None
    return pulp


def _bound(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def to_pulp(model: LinearModel):  # noqa: ANN201
    """``(problem, variables, constraints)``: the model in PuLP; ``constraints[r]`` lists ``(constraint, side)``
    for row r, side +1 for a ``<=``/``==`` row and -1 for a ``>=`` row."""
    pulp = pulp_module()
    sense = pulp.LpMaximize if model.sense == "max" else pulp.LpMinimize
    problem = pulp.LpProblem(model.name.replace(" ", "_") or "model", sense)
    lb, ub = model.lower, model.upper
    width = len(str(max(model.num_variables - 1, 0)))  # zero-padded names: PuLP sorts columns by name
    new_variable = getattr(problem, "add_variable", None) or pulp.LpVariable  # PuLP >= 3.3 prefers add_variable
    x = [new_variable(f"x{j:0{width}d}", _bound(lb[j]), _bound(ub[j])) for j in range(model.num_variables)]
    c = model.objective
    nz = np.flatnonzero(c)
    problem += pulp.LpAffineExpression([(x[j], float(c[j])) for j in nz]) + float(model.constant)
    A = model.A
    rl, ru = model.row_lower, model.row_upper
    constraints: list[list[tuple[Any, int]]] = []
    for r in range(model.num_constraints):
        cols = A.indices[A.indptr[r]: A.indptr[r + 1]]
        vals = A.data[A.indptr[r]: A.indptr[r + 1]]
        expr = pulp.LpAffineExpression([(x[j], float(v)) for j, v in zip(cols, vals, strict=True)])
        row: list[tuple[Any, int]] = []
        if np.isfinite(rl[r]) and np.isfinite(ru[r]) and rl[r] == ru[r]:
            row.append((pulp.LpConstraint(expr, pulp.LpConstraintEQ, f"r{r}", float(ru[r])), 1))
        else:
            if np.isfinite(ru[r]):
                row.append((pulp.LpConstraint(expr, pulp.LpConstraintLE, f"r{r}u", float(ru[r])), 1))
            if np.isfinite(rl[r]):
                row.append((pulp.LpConstraint(expr, pulp.LpConstraintGE, f"r{r}l", float(rl[r])), -1))
        for con, _ in row:
            problem += con
        constraints.append(row)
    return problem, x, constraints


def solve_linear(model: LinearModel, **options: Any) -> Solution:
    """Solve ``model`` with CBC through PuLP; primal by block, row duals by row group."""
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise InputError(f"unknown option(s) for the pulp backend: {sorted(unknown)}; "
                         f"expected some of {sorted(_OPTION_NAMES)}")
    pulp = pulp_module()
    start = time.perf_counter()
    problem, x, constraints = to_pulp(model)
    solver = options.get("solver")
    save_path = None
    if solver is None:
        limit = options.get("time_limit")
        handle, save_path = tempfile.mkstemp(suffix=".cbcsol")
        os.close(handle)
        with warnings.catch_warnings():  # PuLP 3.x flags the bundled CBC as deprecated for 4.0; it is what we use
            warnings.simplefilter("ignore", DeprecationWarning)
            solver = pulp.PULP_CBC_CMD(msg=bool(options.get("msg", False)),
                                       timeLimit=None if limit is None else float(limit),
                                       options=[*CBC_TOLERANCES, "initialSolve", f"saveSolution {save_path}"])
    built = time.perf_counter()
    try:
        problem.solve(solver)
        solved = time.perf_counter()
        binary = _read_saved_solution(save_path) if save_path else None
    except pulp.PulpSolverError as exc:
        seconds = {"build": built - start, "solve": time.perf_counter() - built}
        return Solution(float("nan"), "error", {}, None, seconds, NAME, model=model, info={"error": str(exc)})
    finally:
        if save_path and os.path.exists(save_path):
            os.remove(save_path)
    seconds = {"build": built - start, "solve": solved - built}
    status = {1: "optimal", -1: "infeasible", -2: "unbounded", 0: "time_limit"}.get(problem.status, "error")
    if status == "optimal" and problem.sol_status != pulp.LpSolutionOptimal:
        status = "time_limit" if problem.sol_status == pulp.LpSolutionIntegerFeasible else "error"
    info: dict[str, Any] = {"solver": type(solver).__name__}
    if status != "optimal":
        return Solution(float("nan"), status, {}, None, seconds, NAME, model=model, info=info)
    columns = problem.variables()  # the MPS column order
    rows = [con for row in constraints for con, _ in row]  # the MPS row order
    index = {id(v): j for j, v in enumerate(x)}
    if binary is not None and binary[0].size == len(rows) and binary[2].size == len(columns):
        row_dual, col_value = binary[1], binary[2]
        xv = _default_values(model)
        xv[[index[id(v)] for v in columns]] = col_value
        pi = dict(zip((id(c) for c in rows), row_dual.tolist(), strict=True))
        info["precision"] = "double (CBC saveSolution)"
    else:
        xv = np.array([v.varValue if v.varValue is not None else d for v, d in zip(x, _default_values(model),
                                                                               strict=True)], dtype=np.float64)
        pi = {id(c): c.pi for c in rows}
        info["precision"] = "8 significant digits (CBC text solution)"
    y = np.zeros(model.num_constraints)
    has_duals = all(v is not None for v in pi.values())
    if has_duals:
        for r, row in enumerate(constraints):
            y[r] = sum(float(pi[id(con)]) for con, _ in row)  # CBC's sign is otlp's, for max and min alike
    value = float(model.objective @ xv) + model.constant
    return Solution(value, status, model.split(xv), model.split_rows(y) if has_duals else None, seconds, NAME,
                    model=model, info=info)


def _default_values(model: LinearModel) -> np.ndarray:
    """Values for variables CBC never saw (empty column, zero cost): any point of the box; the one nearest 0."""
    return np.clip(np.zeros(model.num_variables), model.lower, model.upper)


def _read_saved_solution(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """CBC's ``-saveSolution`` file: int32 rows, int32 columns, then doubles objective, row activities [rows],
    row duals [rows], column values [cols], reduced costs [cols]. Returns ``(activities, duals, values)``."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if len(data) < 8:
        return None
    rows, cols = (int(v) for v in np.frombuffer(data[:8], dtype=np.int32))
    doubles = np.frombuffer(data[8:], dtype=np.float64)
    if rows < 0 or cols < 0 or doubles.size != 1 + 2 * rows + 2 * cols:
        return None
    return doubles[1: 1 + rows], doubles[1 + rows: 1 + 2 * rows], doubles[1 + 2 * rows: 1 + 2 * rows + cols]
