"""Any :class:`FlowNetwork` as a :class:`LinearModel`, so every LP backend also solves the network formulations.

max  sum_{arcs out of s} f - sum_{arcs into s} f   s.t.  conservation at every node but s and t,  0 <= f <= cap.
Variable blocks are the network's arc groups, so the solution maps back the same way.
"""

from __future__ import annotations

import numpy as np

from otlp.lp.ir import FlowNetwork, LinearModel


def network_to_linear(net: FlowNetwork) -> LinearModel:
    model = LinearModel(net.name, sense="max")
    E = net.num_arcs
    # Blocks follow the arc groups (which must tile 0..E in order); a network without groups gets one block.
    groups = sorted(net.arc_blocks.items(), key=lambda kv: kv[1].start) or [("flow", slice(0, E))]
    for name, s in groups:
        model.add_block(name, s.stop - s.start, lower=0.0, upper=net.capacities[s])
    objective = (net.tails == net.source).astype(np.float64) - (net.heads == net.source)
    for name, s in groups:
        model.set_objective(name, objective[s])
    inner = np.ones(net.num_nodes, dtype=bool)
    inner[[net.source, net.sink]] = False
    row_of = np.full(net.num_nodes, -1, dtype=np.int64)
    row_of[inner] = np.arange(int(inner.sum()))
    arcs = np.arange(E, dtype=np.int64)
    out_rows, in_rows = row_of[net.tails], row_of[net.heads]
    keep_out, keep_in = out_rows >= 0, in_rows >= 0
    rows = np.concatenate([out_rows[keep_out], in_rows[keep_in]])
    cols = np.concatenate([arcs[keep_out], arcs[keep_in]])
    vals = np.concatenate([np.ones(keep_out.sum()), -np.ones(keep_in.sum())])
    model.add_rows("conservation", rows, cols, vals, 0.0, 0.0, count=int(inner.sum()))
    return model
