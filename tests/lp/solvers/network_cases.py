"""Random flow networks with a reference max flow from scipy (an independent implementation)."""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from otlp.lp.ir import FlowNetwork


def random_network(rng: np.random.Generator, num_nodes: int = 8, num_arcs: int = 20, max_cap: int = 9,
                   inf_share: float = 0.1, divisor: float = 1.0) -> FlowNetwork:
    """Distinct arcs (no parallel pairs) with capacities ``integer / divisor`` (some infinite), s = 0, t = N - 1."""
    pairs = [(u, v) for u in range(num_nodes) for v in range(num_nodes) if u != v and v != 0 and u != num_nodes - 1]
    pick = rng.choice(len(pairs), size=min(num_arcs, len(pairs)), replace=False)
    tails = np.array([pairs[k][0] for k in pick], dtype=np.int64)
    heads = np.array([pairs[k][1] for k in pick], dtype=np.int64)
    caps = rng.integers(0, max_cap + 1, size=pick.size).astype(np.float64) / divisor
    caps[(rng.random(pick.size) < inf_share) & (tails != 0) & (heads != num_nodes - 1)] = np.inf
    return FlowNetwork("random", num_nodes, tails, heads, caps, 0, num_nodes - 1,
                       arc_blocks={"flow": slice(0, pick.size)})


def scipy_max_flow(net: FlowNetwork, divisor: float = 1.0) -> float:
    """Max flow of a network with capacities ``integer / divisor`` (inf -> sum of the finite ones + 1)."""
    caps = net.capacities * divisor
    finite = np.isfinite(caps)
    ints = np.where(finite, np.round(np.where(finite, caps, 0.0)), caps[finite].sum() + 1).astype(np.int64)
    graph = csr_matrix((ints.astype(np.int32), (net.tails, net.heads)), shape=(net.num_nodes, net.num_nodes))
    return maximum_flow(graph, net.source, net.sink).flow_value / divisor
