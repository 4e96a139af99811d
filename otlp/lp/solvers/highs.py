"""The ``highs`` backend: a :class:`LinearModel` passed to HiGHS through ``highspy`` directly.

The CSR matrix goes into a ``HighsLp`` (row-wise) and ``Highs.passModel``; no modelling layer, so building costs
one copy of the arrays. HiGHS's row duals already follow :mod:`otlp.lp.solution`'s convention (``c - A^T y`` are the
reduced costs, positive multipliers on binding upper rows of a ``max``), so they are returned as they are.

Options: ``time_limit`` (seconds), ``solver`` ("simplex", "ipm", "pdlp", "choose"), ``presolve`` ("on"/"off"),
and ``highs_options`` (a dict of any further HiGHS option names and values, over ``DEFAULT_OPTIONS``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from otlp.core.errors import InputError, MissingDependencyError
from otlp.lp.ir import LinearModel
from otlp.lp.solution import Solution

CAPABILITIES = frozenset({"linear"})
NAME = "highs"


def highspy_module():  # noqa: ANN201
    """Import ``highspy`` or raise a clear :class:`MissingDependencyError`."""
    try:
        import highspy
    except ImportError:
        raise MissingDependencyError("highspy", "the 'highs' backend") from None
    return highspy


def to_highs_lp(model: LinearModel):  # noqa: ANN201 - returns highspy.HighsLp
    """The model as a ``highspy.HighsLp`` (row-wise CSR, 32-bit indices)."""
    highspy = highspy_module()
    A = model.A
    if A.nnz >= 2**31:
        raise InputError(f"model {model.name!r} has {A.nnz:,} nonzeros, over HiGHS's 32-bit index limit")
    lp = highspy.HighsLp()
    lp.num_col_ = model.num_variables
    lp.num_row_ = model.num_constraints
    lp.col_cost_ = model.objective
    lp.col_lower_ = model.lower
    lp.col_upper_ = model.upper
    lp.row_lower_ = model.row_lower
    lp.row_upper_ = model.row_upper
    lp.offset_ = float(model.constant)
    lp.sense_ = highspy.ObjSense.kMaximize if model.sense == "max" else highspy.ObjSense.kMinimize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = model.num_variables
    lp.a_matrix_.num_row_ = model.num_constraints
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(np.float64)
    return lp


_OPTION_NAMES = {"time_limit", "solver", "presolve", "highs_options"}
#: HiGHS's default feasibility tolerances are absolute 1e-7; OTLP data (P_draft of one tuple) is often smaller,
#: and with the defaults HiGHS can stop at a basis 1e-9..1e-7 off the optimum. Tighter, since models are small.
DEFAULT_OPTIONS: dict[str, Any] = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def run(model: LinearModel, *, time_limit: float | None = None, solver: str | None = None,
        presolve: str | None = None, highs_options: dict[str, Any] | None = None):  # noqa: ANN201
    """Pass ``model`` to a fresh ``Highs`` and run it. Returns ``(highs, status, seconds)``: the solver object (for
    its solution and basis), otlp's status word and ``{"build": ..., "solve": ...}``."""
    highspy = highspy_module()
    start = time.perf_counter()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    options: dict[str, Any] = dict(DEFAULT_OPTIONS)
    options.update(highs_options or {})
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    if solver is not None:
        options["solver"] = str(solver)
    if presolve is not None:
        options["presolve"] = str(presolve)
    for key, value in options.items():
        if h.setOptionValue(key, value) != highspy.HighsStatus.kOk:
            raise InputError(f"HiGHS rejected option {key}={value!r}")
    if h.passModel(to_highs_lp(model)) == highspy.HighsStatus.kError:
        raise InputError(f"HiGHS rejected model {model.name!r} ({model.size()})")
    built = time.perf_counter()
    h.run()
    solved = time.perf_counter()
    return h, _status(h), {"build": built - start, "solve": solved - built}


def _status(h) -> str:  # noqa: ANN001
    import highspy

    s = h.getModelStatus()
    M = highspy.HighsModelStatus
    if s == M.kOptimal:
        return "optimal"
    if s == M.kInfeasible:
        return "infeasible"
    if s in (M.kUnbounded, M.kUnboundedOrInfeasible):
        return "unbounded"
    if s == M.kTimeLimit:
        return "time_limit"
    return "error"


def solve_linear(model: LinearModel, **options: Any) -> Solution:
    """Solve ``model`` with HiGHS; primal by block, row duals by row group (otlp's convention)."""
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise InputError(f"unknown option(s) for the highs backend: {sorted(unknown)}; "
                         f"expected some of {sorted(_OPTION_NAMES)}")
    h, status, seconds = run(model, **options)
    info = h.getInfo()
    if status != "optimal":
        return Solution(float("nan"), status, {}, None, seconds, NAME, model=model,
                        info={"highs_status": h.modelStatusToString(h.getModelStatus())})
    sol = h.getSolution()
    x = np.asarray(sol.col_value, dtype=np.float64)
    y = np.asarray(sol.row_dual, dtype=np.float64)
    return Solution(
        float(info.objective_function_value), status, model.split(x),
        model.split_rows(y) if sol.dual_valid else None, seconds, NAME, model=model,
        info={"iterations": int(info.simplex_iteration_count)},
    )
