"""The max-flow network of the relaxed OTLP (GR §5.2) and the bipartite builder it shares with GR Thm 5.1.

Network Omega (GR §5.2, papers/000):

    s --p(i)--> i --inf--> omega --P_draft(omega)--> t      for i in V, omega in supp(P_draft), i in set(omega)

``V + |support| + 2`` nodes. The flow on the arc ``i -> omega`` is ``S[i, omega]`` of the relaxed OTLP (GR eq. (2)),
and the max-flow value is alpha* = 1 + min_H psi(H) (GR Thm 3.1). A min cut reads back a minimiser of psi: a token
on the source side forces every tuple containing it onto the source side (the infinite arcs), so the cut with
token sink side T costs ``p(T) + 1 - P_draft(omega in T^n) = 1 + psi(T)``; hence ``H* = tokens on the sink side``.

:func:`bipartite_network` builds the same network restricted to a set of tokens on the left and a set of tuples on
the right, with arcs ``i -> omega`` for ``i in set(omega)`` among the left tokens. It is reused by
:mod:`otlp.lp.formulations.outer_inner` (GR Thm 5.1) and is meant for ``RelaxedOTLP`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from otlp.core.distributions import check_distribution
from otlp.core.drafts import DraftScheme, as_draft
from otlp.core.errors import InputError
from otlp.lp.formulations.base import Formulation
from otlp.lp.formulations.incidence import incidence_pairs
from otlp.lp.ir import FlowNetwork, ModelSize

#: Arc groups of every network built here, in arc order: s -> i, i -> omega (S[i, omega]), omega -> t.
ARC_GROUPS = ("source", "S", "sink")


@dataclass(frozen=True)
class BipartiteNetwork:
    """A :class:`FlowNetwork` ``s -> tokens -> tuples -> t`` and the map from its arcs back to ``S[i, omega]``.

    Node layout: ``0`` is s, ``1 .. L`` the left tokens, ``L + 1 .. L + M`` the tuples, ``L + M + 1`` is t.
    Arc ``k`` of group ``"S"`` carries ``S[arc_token[k], arc_tuple[k]]``.
    """

    network: FlowNetwork
    V: int
    tokens: np.ndarray  # [L] int64, token id of each left node
    omegas: np.ndarray  # [M, n] int64, the tuple of each right node
    probs: np.ndarray  # [M] float64, P_draft of each right node
    arc_token: np.ndarray  # [K] int64, token id of each "S" arc
    arc_tuple: np.ndarray  # [K] int64, row of ``omegas`` of each "S" arc

    def plan(self, flow_S: np.ndarray, dense: bool = True) -> np.ndarray | sp.csr_matrix:
        """The relaxed-OTLP plan ``S [V, M]`` (columns follow ``omegas``) from the flows on the "S" arcs ``[K]``."""
        S = sp.csr_matrix((np.asarray(flow_S, dtype=np.float64), (self.arc_token, self.arc_tuple)),
                          shape=(self.V, self.omegas.shape[0]))
        return S.toarray() if dense else S

    def sink_side_tokens(self, source_side: np.ndarray) -> np.ndarray:
        """``bool [V]``: the left tokens on the sink side of a cut (``source_side: bool [num_nodes]``)."""
        mask = np.zeros(self.V, dtype=bool)
        mask[self.tokens] = ~np.asarray(source_side, dtype=bool)[1: 1 + self.tokens.size]
        return mask


def incidence_arcs(omegas: np.ndarray, left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(i, m)`` with ``i in set(omegas[m])`` and ``left[i]``, each once (set(omega) is distinct tokens).

    ``omegas: int [M, n]``, ``left: bool [V]`` -> ``(tokens [K], tuple_rows [K])`` sorted by token, then tuple.
    """
    tok, row = incidence_pairs(omegas, left.size)
    keep = left[tok]
    tok, row = tok[keep], row[keep]
    order = np.lexsort((row, tok))
    return tok[order], row[order]


def bipartite_network(name: str, p: np.ndarray, left: np.ndarray, omegas: np.ndarray,
                      probs: np.ndarray) -> BipartiteNetwork:
    """The network ``s -> i (cap p(i)) -> omega (cap inf) -> t (cap probs)`` for the tokens ``left: bool [V]``
    and the tuples ``omegas: int [M, n]`` with masses ``probs [M]``; arcs ``i -> omega`` for ``i in set(omega)``
    with ``left[i]``.

    GR §5.2 with left = every token and the tuples = the support; GR Thm 5.1's outer and inner networks otherwise.
    """
    left = np.asarray(left, dtype=bool)
    omegas = np.asarray(omegas, dtype=np.int64)  # [M, n]
    arc_token, arc_tuple = incidence_arcs(omegas, left)
    return assemble_network(name, p, np.flatnonzero(left), omegas, probs, arc_token, arc_tuple)


def assemble_network(name: str, p: np.ndarray, tokens: np.ndarray, omegas: np.ndarray, probs: np.ndarray,
                     arc_token: np.ndarray, arc_tuple: np.ndarray) -> BipartiteNetwork:
    """The :class:`BipartiteNetwork` with left nodes ``tokens [L]`` (capacities ``p[tokens]``), right nodes
    ``omegas [M, n]`` (capacities ``probs [M]``) and the middle arcs ``arc_token[k] -> omegas[arc_tuple[k]]``
    (capacity inf), in the given order. Every arc token must be among ``tokens``."""
    p = np.asarray(p, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.int64)
    arc_token = np.asarray(arc_token, dtype=np.int64)
    arc_tuple = np.asarray(arc_tuple, dtype=np.int64)
    V = p.size
    L, M, K = tokens.size, omegas.shape[0], arc_token.size
    node_of_token = np.full(V, -1, dtype=np.int64)
    node_of_token[tokens] = 1 + np.arange(L)
    if K and (node_of_token[arc_token] < 0).any():
        raise InputError(f"network {name!r}: a middle arc leaves a token that is not a left node")
    source, sink = 0, L + M + 1
    tails = np.concatenate([np.zeros(L, dtype=np.int64), node_of_token[arc_token], L + 1 + np.arange(M)])
    heads = np.concatenate([1 + np.arange(L), L + 1 + arc_tuple, np.full(M, sink, dtype=np.int64)])
    caps = np.concatenate([p[tokens], np.full(K, np.inf), probs])
    net = FlowNetwork(
        name=name, num_nodes=L + M + 2, tails=tails.astype(np.int64), heads=heads.astype(np.int64),
        capacities=caps, source=source, sink=sink,
        arc_blocks={"source": slice(0, L), "S": slice(L, L + K), "sink": slice(L + K, L + K + M)},
        node_blocks={"source": slice(0, 1), "tokens": slice(1, L + 1), "tuples": slice(L + 1, L + M + 1),
                     "sink": slice(L + M + 1, L + M + 2)},
    )
    return BipartiteNetwork(net, V, tokens, omegas, probs, arc_token, arc_tuple)


def relaxed_network(p: np.ndarray, draft: DraftScheme, name: str = "MaxFlowNetwork") -> BipartiteNetwork:
    """Omega of GR §5.2 for ``(p, draft)``: every token on the left, the support of P_draft on the right."""
    draft = as_draft(draft)
    p = check_distribution(p, "p", size=draft.V)
    omegas, probs = draft.support()
    return bipartite_network(name, p, np.ones(draft.V, dtype=bool), omegas, probs)


def support_size_bound(draft: DraftScheme) -> int:
    """An upper bound on |supp(P_draft)| known without enumerating V^n (the exact count for sparse schemes)."""
    if type(draft).support is not DraftScheme.support:  # Greedy, SpecHub: O(V) tuples, listed cheaply
        return int(draft.support()[1].size)
    return draft.num_tuples()


def network_size(num_tokens: int, num_tuples: int, n: int) -> ModelSize:
    """Size of a bipartite network with at most ``n`` arcs per tuple: arcs as variables, nodes as rows."""
    arcs = num_tokens + (n + 1) * num_tuples
    return ModelSize(arcs, num_tokens + num_tuples + 2, 2 * arcs)


class MaxFlowNetwork(Formulation):
    """The relaxed OTLP as a max flow (GR §5.2): value alpha*, flows on the "S" arcs = ``S[i, omega]``.

    Any backend that takes networks (``ortools``, ``networkx``) or LPs (through ``network_lp``) solves it. After
    :meth:`solve`, ``solution.info["h_star"]`` holds the minimiser of psi read from the min cut (where the backend
    returns one) and :meth:`plan` maps the flows back to ``S [V, M]`` over ``self.omegas``.

    Examples
    --------
    >>> import otlp
    >>> from otlp.lp.formulations.maxflow import MaxFlowNetwork
    >>> sol = MaxFlowNetwork([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2)).solve(backend="networkx")
    >>> round(sol.value, 12)
    0.85
    """

    name = "MaxFlowNetwork"
    kinds = ("network",)

    def __init__(self, p: object, draft: DraftScheme):
        self.draft = as_draft(draft)
        self.p = check_distribution(p, "p", size=self.draft.V)
        self._built: BipartiteNetwork | None = None

    def size(self, kind: str | None = None) -> ModelSize:
        return network_size(self.draft.V, support_size_bound(self.draft), self.draft.n)

    def build(self, kind: str | None = None) -> FlowNetwork:
        self._built = relaxed_network(self.p, self.draft, self.name)
        return self._built.network

    @property
    def bipartite(self) -> BipartiteNetwork:
        """The built network with its arc map (built on first use)."""
        if self._built is None:
            self.build()
        return self._built

    @property
    def omegas(self) -> np.ndarray:
        """The tuples of the right nodes (the support of P_draft), ``int [M, n]``."""
        return self.bipartite.omegas

    def plan(self, solution, dense: bool = True) -> np.ndarray | sp.csr_matrix:  # noqa: ANN001
        """``S [V, M]`` from a solution of this network (columns follow :attr:`omegas`)."""
        return self.bipartite.plan(solution.primal["S"], dense=dense)

    def finish(self, solution):  # noqa: ANN001, ANN201
        if solution.dual and "source_side" in solution.dual:
            solution.info["h_star"] = self.bipartite.sink_side_tokens(solution.dual["source_side"])
        return solution
