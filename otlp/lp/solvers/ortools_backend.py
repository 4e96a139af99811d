"""OR-Tools max flow (``SimpleMaxFlow``): int64 capacities, so the network is scaled, rounded down and the
rounding error on the value is bounded and reported.

Scaling (``s`` a power of two, so ``s * c`` and ``F / s`` are exact in float64):

* finite capacity ``c`` -> ``floor(s * c)``; an infinite one -> ``big = sum of the finite scaled capacities + 1``,
  larger than every cut made of finite arcs, so a min cut of value ``< big`` never uses an infinite arc, and a max
  flow ``>= big`` means the true max flow is unbounded;
* by default ``s = 2^k``, the largest power of two with ``s * (sum of finite capacities) <= 2^52``: every integer the
  solver sees is below 2^53 (exact in float64, far below int64 overflow), and the quantum ``1 / s`` is as fine as
  that allows (2^-51 for the OTLP networks, whose finite capacities sum to 2). ``scale=2.0**40`` etc. overrides it.

Rounding bound (reported as ``value_bound``). With ``F`` the true max flow and ``F' = F_int / s`` the returned value:
rounded capacities never exceed the true ones, so the returned flow is feasible and ``F' <= F``; and ``F`` is at most
the true capacity of the returned min cut ``C'``, each of whose arcs lost less than ``1 / s`` (exactly 0 where
``s * c`` is an integer), so ``F <= F' + n_frac / s`` with ``n_frac`` the number of arcs of ``C'`` whose scaled
capacity was fractional. Hence ``0 <= F - F' <= value_bound = n_frac / s``: a proof, not an estimate.
"""

from __future__ import annotations

import math
import time

import numpy as np

from otlp.core.errors import InputError, MissingDependencyError
from otlp.lp.ir import FlowNetwork
from otlp.lp.solution import Solution
from otlp.lp.solvers.networkx_backend import check_network

CAPABILITIES = frozenset({"network"})

#: Largest integer a scaled capacity sum may reach (exact in float64; int64 holds 2^63 - 1).
MAX_SCALED_TOTAL = 2.0**52


def _max_flow_module():
    try:
        from ortools.graph.python import max_flow
    except ImportError:
        raise MissingDependencyError("ortools", "the ortools backend", extra="solvers") from None
    return max_flow


def default_scale(capacities: np.ndarray) -> float:
    """The largest power of two ``s`` with ``s * sum(finite capacities) <= 2^52`` (``2^52`` if they sum to < 1)."""
    caps = np.asarray(capacities, dtype=np.float64)
    total = float(caps[np.isfinite(caps)].sum())
    if total <= 0:
        return MAX_SCALED_TOTAL
    return math.ldexp(1.0, math.floor(math.log2(MAX_SCALED_TOTAL / total)))


def scale_capacities(capacities: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray, int]:
    """``(int64 capacities [E], fractional [E] bool, big)``: ``floor(scale * c)``, infinite arcs set to ``big``."""
    caps = np.asarray(capacities, dtype=np.float64)
    finite = np.isfinite(caps)
    scaled = np.where(finite, caps, 0.0) * scale  # exact: scale is a power of two
    ints = np.floor(scaled)
    total = float(ints.sum())
    if total + 1 > 2.0**62:
        raise InputError(f"ortools: capacities times scale {scale:g} sum to {total:.3g}, over the int64 range; "
                         "use a smaller scale")
    big = int(total) + 1
    out = ints.astype(np.int64)
    out[~finite] = big
    return out, finite & (ints != scaled), big


def solve_network(net: FlowNetwork, *, scale: float | None = None) -> Solution:
    """Max flow and a min cut of ``net`` with OR-Tools ``SimpleMaxFlow`` on scaled integer capacities.

    ``scale`` must be a power of two (exactness of the scaling); default :func:`default_scale`. The returned
    ``Solution.value_bound`` is the proven bound ``|value - true max flow| <= value_bound`` (module docstring).
    """
    max_flow = _max_flow_module()
    check_network(net)
    start = time.perf_counter()
    s = default_scale(net.capacities) if scale is None else float(scale)
    if not (np.isfinite(s) and s > 0 and math.frexp(s)[0] == 0.5):
        raise InputError(f"ortools scale must be a positive power of two (exact scaling), got {scale!r}")
    caps, fractional, big = scale_capacities(net.capacities, s)
    smf = max_flow.SimpleMaxFlow()
    arcs = (smf.add_arcs_with_capacity(net.tails.astype(np.int32), net.heads.astype(np.int32), caps)
            if net.num_arcs else np.zeros(0, dtype=np.int64))
    build = time.perf_counter() - start
    start = time.perf_counter()
    if not ((net.tails == net.source).any() and (net.heads == net.sink).any()):
        # no arc leaves s or none enters t (OR-Tools then knows no such node): the max flow is 0, and the nodes
        # reachable from s through arcs of positive capacity are the source side of a zero cut
        seconds = {"build": build, "solve": time.perf_counter() - start}
        primal = {name: np.zeros(sl.stop - sl.start) for name, sl in net.arc_blocks.items()} if net.arc_blocks \
            else {"flow": np.zeros(net.num_arcs)}
        return Solution(0.0, "optimal", primal, {"source_side": _reachable(net)}, seconds, "ortools", model=net,
                        info={"scale": s})
    status = smf.solve(int(net.source), int(net.sink))
    solve = time.perf_counter() - start
    seconds = {"build": build, "solve": solve}
    if status != max_flow.SimpleMaxFlow.OPTIMAL:
        word = "error" if status != max_flow.SimpleMaxFlow.POSSIBLE_OVERFLOW else "error (possible int64 overflow)"
        return Solution(float("nan"), "error", {}, None, seconds, "ortools", model=net,
                        info={"scale": s, "ortools_status": str(status), "message": word})
    value_int = int(smf.optimal_flow())
    if value_int >= big:  # the min cut needs an infinite arc: no finite max flow
        return Solution(float("inf"), "unbounded", {}, None, seconds, "ortools", model=net, info={"scale": s})
    flow = smf.flows(arcs).astype(np.float64) / s  # [E], exact (integers below 2^53, s a power of two)
    source_side = np.zeros(net.num_nodes, dtype=bool)
    source_side[np.asarray(smf.get_source_side_min_cut(), dtype=np.int64)] = True
    crossing = source_side[net.tails] & ~source_side[net.heads]
    n_frac = int(np.count_nonzero(crossing & fractional))
    primal = {name: flow[sl] for name, sl in net.arc_blocks.items()} if net.arc_blocks else {"flow": flow}
    info = {"scale": s, "value_int": value_int, "cut_arcs": int(crossing.sum()), "rounded_cut_arcs": n_frac}
    return Solution(value_int / s, "optimal", primal, {"source_side": source_side}, seconds, "ortools", model=net,
                    value_bound=n_frac / s, info=info)


def _reachable(net: FlowNetwork) -> np.ndarray:
    """``bool [num_nodes]``: the nodes reachable from the source through arcs of positive capacity."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    keep = np.asarray(net.capacities) > 0
    graph = csr_matrix((np.ones(int(keep.sum())), (net.tails[keep], net.heads[keep])),
                       shape=(net.num_nodes, net.num_nodes))
    side = np.zeros(net.num_nodes, dtype=bool)
    side[breadth_first_order(graph, net.source, directed=True, return_predecessors=False)] = True
    return side
