"""POT's exact network simplex (``ot.emd``) on a :class:`~otlp.lp.ir.TransportProblem`.

``min_C <cost, C>`` over couplings of ``a [V]`` and ``b [M]``; the formulation's value is
``value_offset + value_scale * <cost, C*>`` (FullOTLP: ``1 - min E[1(i not in set(omega))] = alpha*``, SpecTr eq. (1),
GR eq. (1)). The plan comes back as ``primal["C"]``; the dual potentials ``u [V]``, ``v [M]`` (``u_i + v_j <= cost_ij``,
``<a, u> + <b, v> = <cost, C*>``) as ``info["u"]``, ``info["v"]``.

For :meth:`Solution.certificate` the problem is also written as a :class:`LinearModel` (block "C", row groups "a"
and "b", objective ``value_scale * cost`` plus the constant ``value_offset``, maximised when ``value_scale < 0``)
and the potentials become its row duals ``value_scale * (u, v)``, so the generic certificate re-checks the marginals,
the objective and the duality gap without POT.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from otlp.core.errors import InputError, MissingDependencyError
from otlp.lp.ir import MEMORY_LIMIT_BYTES, LinearModel, ModelSize, TransportProblem
from otlp.lp.solution import Solution

CAPABILITIES = frozenset({"transport"})

#: ot.emd result codes -> Solution status
_STATUS = {0: "infeasible", 1: "optimal", 2: "unbounded", 3: "time_limit"}


def _ot():
    try:
        import ot
    except ImportError:
        raise MissingDependencyError("POT", "the pot backend (ot.emd)", extra="solvers") from None
    return ot


def check_transport(problem: TransportProblem, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a [V], b [M], cost [V, M])`` as float64, or a clear :class:`InputError`."""
    a = np.asarray(problem.a, dtype=np.float64).reshape(-1)
    b = np.asarray(problem.b, dtype=np.float64).reshape(-1)
    cost = np.asarray(problem.cost, dtype=np.float64)
    if cost.shape != (a.size, b.size):
        raise InputError(f"transport problem {problem.name!r}: cost must have shape [{a.size}, {b.size}] "
                         f"(len(a), len(b)), got {cost.shape}")
    for name, x in (("a", a), ("b", b), ("cost", cost)):
        if not np.isfinite(x).all():
            raise InputError(f"transport problem {problem.name!r}: {name} must be finite")
    if (a < 0).any() or (b < 0).any():
        raise InputError(f"transport problem {problem.name!r}: the marginals a and b must be >= 0")
    if abs(a.sum() - b.sum()) > tol * max(1.0, a.sum()):
        raise InputError(f"transport problem {problem.name!r}: the marginals must have equal mass, "
                         f"got sum(a) = {a.sum():.17g}, sum(b) = {b.sum():.17g}")
    return a, b, cost


def transport_as_linear(problem: TransportProblem) -> LinearModel:
    """The transport problem as an LP over ``C [V, M]`` with the formulation's objective (for certificates)."""
    a, b, cost = check_transport(problem)
    V, M = cost.shape
    model = LinearModel(problem.name, sense="max" if problem.value_scale < 0 else "min",
                        constant=float(problem.value_offset))
    block = model.add_block("C", (V, M), lower=0.0)
    model.set_objective("C", problem.value_scale * cost)
    cells = np.arange(V * M, dtype=np.int64).reshape(V, M) + block.offset
    model.add_rows("a", np.repeat(np.arange(V), M), cells.reshape(-1), 1.0, a, a, count=V)
    model.add_rows("b", np.tile(np.arange(M), V), cells.reshape(-1), 1.0, b, b, count=M)
    return model


def solve_transport(problem: TransportProblem, *, num_iter_max: int = 10_000_000, certify: bool = True,
                    memory_limit: float = MEMORY_LIMIT_BYTES) -> Solution:
    """Solve with ``ot.emd``. ``certify=False`` skips building the LP copy used by :meth:`Solution.certificate`
    (it is also skipped, with ``info["certificate"]`` saying so, when that copy would exceed ``memory_limit``)."""
    ot = _ot()
    a, b, cost = check_transport(problem)
    start = time.perf_counter()
    b_balanced = b * (a.sum() / b.sum()) if b.sum() > 0 else b  # ot.emd wants equal sums to float precision
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan, log = ot.emd(a, b_balanced, np.ascontiguousarray(cost), numItermax=int(num_iter_max), log=True)
    solve = time.perf_counter() - start
    status = _STATUS.get(int(log.get("result_code", 1)), "error")
    transport_cost = float(np.sum(cost * plan))
    value = float(problem.value_offset + problem.value_scale * transport_cost)
    u = np.asarray(log["u"], dtype=np.float64)
    v = np.asarray(log["v"], dtype=np.float64)
    info = {"u": u, "v": v, "transport_cost": transport_cost, "warning": log.get("warning"),
            "warnings": [str(w.message) for w in caught]}
    model, dual = None, None
    size = ModelSize(cost.size, sum(cost.shape), 2 * cost.size)
    if certify and size.bytes <= memory_limit:
        model = transport_as_linear(problem)
        dual = {"a": problem.value_scale * u, "b": problem.value_scale * v}
    else:
        info["certificate"] = "skipped" if not certify else f"skipped: the LP copy would need {size.bytes:,} bytes"
    return Solution(value, status, {"C": np.asarray(plan, dtype=np.float64)}, dual, {"build": 0.0, "solve": solve},
                    "pot", model=model, info=info)
