"""NetworkX max flow: float capacities (or exact rationals), the reference route for small networks.

A :class:`~otlp.lp.ir.FlowNetwork` becomes a ``networkx.DiGraph`` (an arc with infinite capacity gets
no ``capacity`` attribute, which networkx reads as infinite; a parallel arc goes through a fresh middle node, since a
DiGraph holds one arc per ordered pair). The flow algorithm returns its residual network ``R``; the flow on each arc
and a minimum cut (the nodes reachable from s through arcs with residual capacity above ``cut_tol``) are read from
that one ``R``, so the cut certifies the flow of the same run (max-flow min-cut).

``exact=True`` converts every finite capacity to the ``fractions.Fraction`` equal to the float, so the flow, the
value and the cut are exact rationals for the network as given (slow: for tiny graphs).
"""

from __future__ import annotations

import time
from collections import deque
from fractions import Fraction

import numpy as np

from otlp.core.errors import InputError, MissingDependencyError
from otlp.lp.ir import FlowNetwork
from otlp.lp.solution import Solution

CAPABILITIES = frozenset({"network"})

#: networkx flow algorithms selectable by name.
FLOW_FUNCS = ("preflow_push", "edmonds_karp", "shortest_augmenting_path", "dinitz", "boykov_kolmogorov")


def _networkx():
    try:
        import networkx as nx
    except ImportError:  # pragma: no cover - networkx is a core dependency
        raise MissingDependencyError("networkx", "the networkx backend") from None
    return nx


def check_network(net: FlowNetwork) -> None:
    """Refuse a malformed network with a clear message (negative or NaN capacity, bad node ids)."""
    caps = np.asarray(net.capacities, dtype=np.float64)
    if caps.shape != net.tails.shape or caps.shape != net.heads.shape:
        raise InputError(f"network {net.name!r}: tails, heads and capacities must have one entry per arc")
    if np.isnan(caps).any() or (caps < 0).any():
        raise InputError(f"network {net.name!r}: capacities must be >= 0 (inf allowed), got min {np.nanmin(caps)!r}"
                         f"{' and NaN' if np.isnan(caps).any() else ''}")
    for what, ids in (("tails", net.tails), ("heads", net.heads)):
        if ids.size and (ids.min() < 0 or ids.max() >= net.num_nodes):
            raise InputError(f"network {net.name!r}: {what} must lie in [0, {net.num_nodes}), got "
                             f"[{ids.min()}, {ids.max()}]")
    if not (0 <= net.source < net.num_nodes and 0 <= net.sink < net.num_nodes) or net.source == net.sink:
        raise InputError(f"network {net.name!r}: source and sink must be distinct nodes, got {net.source}, {net.sink}")


def solve_network(net: FlowNetwork, *, flow_func: str = "edmonds_karp", exact: bool = False,
                  cut_tol: float | None = None) -> Solution:
    """Max flow and min cut of ``net`` with networkx.

    Parameters
    ----------
    flow_func : one of :data:`FLOW_FUNCS`. The default, Edmonds-Karp, needs O(V E) augmentations whatever the
        capacities, so it also terminates cleanly on float capacities; networkx's preflow-push can fail on them
        (``min() arg is an empty sequence`` when rounding leaves an excess at a node with no residual arc).
    exact : solve with ``Fraction`` capacities (exact; the value is a ``Fraction``).
    cut_tol : residual capacity at or below which an arc counts as saturated when reading the cut (float mode;
        default ``1e-12 * max(1, largest finite capacity)``). Exact mode uses 0.
    """
    nx = _networkx()
    from networkx.algorithms import flow as nxflow

    check_network(net)
    if flow_func not in FLOW_FUNCS:
        raise InputError(f"unknown networkx flow_func {flow_func!r}; expected one of {', '.join(FLOW_FUNCS)}")
    start = time.perf_counter()
    caps = np.asarray(net.capacities, dtype=np.float64)
    finite = np.isfinite(caps)
    if cut_tol is None:
        cut_tol = 1e-12 * max(1.0, float(caps[finite].max(initial=0.0)))
    conv = Fraction if exact else float
    G = nx.DiGraph()
    G.add_nodes_from(range(net.num_nodes))
    # arc k runs u -> v, or u -> mid -> v through a fresh node when (u, v) is already taken (parallel arcs)
    first_leg: list[tuple[int, int]] = []
    next_node = net.num_nodes
    for u, v, c, fin in zip(net.tails.tolist(), net.heads.tolist(), caps.tolist(), finite.tolist(), strict=True):
        attrs = {"capacity": conv(c)} if fin else {}
        if u == v:
            first_leg.append((-1, -1))  # a self-loop carries no s-t flow
            continue
        if G.has_edge(u, v):
            mid, next_node = next_node, next_node + 1
            G.add_edge(u, mid, **attrs)
            G.add_edge(mid, v, **attrs)
            first_leg.append((u, mid))
        else:
            G.add_edge(u, v, **attrs)
            first_leg.append((u, v))
    build = time.perf_counter() - start
    start = time.perf_counter()
    try:
        R = getattr(nxflow, flow_func)(G, net.source, net.sink)
    except nx.NetworkXUnbounded:
        seconds = {"build": build, "solve": time.perf_counter() - start}
        return Solution(float("inf"), "unbounded", {}, None, seconds, "networkx", model=net)
    solve = time.perf_counter() - start
    zero = Fraction(0) if exact else 0.0
    # R leaves out arcs of capacity 0 (and self-loops): they carry no flow
    flow = np.array([max(R[u][v]["flow"], zero) if u >= 0 and R.has_edge(u, v) else zero for u, v in first_leg],
                    dtype=object if exact else np.float64)  # [E]
    # min cut: nodes reachable from s through arcs with residual capacity > tol (exactly > 0 in exact mode)
    tol = zero if exact else cut_tol
    seen = {net.source}
    queue = deque([net.source])
    while queue:
        u = queue.popleft()
        for v, attr in R[u].items():
            if v not in seen and attr["capacity"] - attr["flow"] > tol:
                seen.add(v)
                queue.append(v)
    source_side = np.zeros(net.num_nodes, dtype=bool)
    source_side[[v for v in seen if v < net.num_nodes]] = True
    value = R.graph["flow_value"]
    primal = {name: flow[s] for name, s in net.arc_blocks.items()} if net.arc_blocks else {"flow": flow}
    status = "optimal" if not source_side[net.sink] else "error"
    info = {"flow_func": flow_func, "exact": exact, "cut_tol": tol}
    return Solution(Fraction(value) if exact else float(value), status, primal, {"source_side": source_side},
                    {"build": build, "solve": solve}, "networkx", model=net, info=info)
