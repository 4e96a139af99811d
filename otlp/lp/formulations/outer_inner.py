"""The outer and inner networks of the complementary-slackness split (GR §5.3, Thm 5.1, eq. (6)).

Given a minimiser H* of psi, S >= 0 is optimal for the relaxed OTLP (GR eq. (2)) iff

    (6a, outer)  sum_{omega not in H*^n} S[i, omega] <= p(i)           for i not in H*
                 sum_{i not in H*}       S[i, omega]  = P_draft(omega)  for omega not in H*^n
    (6b, inner)  sum_{omega in H*^n}     S[i, omega]  = p(i)           for i in H*
                 sum_{i in H*}           S[i, omega] <= P_draft(omega)  for omega in H*^n
    (6c)         S[i, omega] = 0 for i in H*, omega not in H*^n, and for i not in set(omega).

Both systems are bipartite max flows (GR Lemma F.1): the outer network is Omega (GR §5.2) restricted to the tokens
V \\ H* and the tuples outside H*^n, the inner one to H* and the tuples in H*^n. They share nothing, so each is
solved on its own; their flows together are an optimal S of value ``(1 - P(H*^n)) + p(H*) = 1 + psi(H*) = alpha*``.
A wrong H* (not a minimiser) shows up as an unsaturated side: the outer tuples or the inner tokens.

Residual completion to the OT (GR eq. (8), with eq. (7): p_res = 0 on H*, P_res = 0 off H*^n):

    C[i, omega] = S[i, omega]                                        if i in set(omega)
                = P_res(omega) * p_res(i) / sum_j p_res(j)           if i not in H*, omega in H*^n
                = 0                                                  otherwise,

a coupling of p and P_draft with acceptance alpha* (``sum_j p_res(j) = 1 - alpha*``; nothing to add when alpha* = 1).

Eq. (8) is GR eq. (3), ``C = S + p_res P_res^T / sum_j p_res(j)``, with the zeros of eq. (7) put in by hand. They hold
for an exact optimum only: a solver leaves each tuple's column short of P_draft(omega) by up to its quantum (OR-Tools
rounds capacities down to multiples of ``2^-51``; float max flows and LPs lose rounding errors), which the CS check of
:meth:`OuterInnerNetworks.solve` rightly accepts (an absolute 1e-9: no relative tolerance can hold a tuple lighter
than the quantum, which a scaled solver cannot saturate at all). Eq. (8) taken literally then drops that shortfall,
and the slice of a light tuple sums to ``1 - shortfall / P_draft(omega)``, down to 0. So :func:`residual_completion`
applies eq. (3) to the computed plan with its computed residuals: every column of C then sums to P_draft(omega)
exactly, every row to p(i), and on an exact optimum it is eq. (8) (the residuals vanish where eq. (7) says).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from otlp.core.distributions import check_distribution
from otlp.core.drafts import DraftScheme, as_draft
from otlp.core.errors import InputError
from otlp.lp.formulations.base import Formulation
from otlp.lp.formulations.completion import residual_completion
from otlp.lp.formulations.maxflow import (
    BipartiteNetwork,
    assemble_network,
    bipartite_network,
    network_size,
    support_size_bound,
)
from otlp.lp.ir import MEMORY_LIMIT_BYTES, FlowNetwork, ModelSize
from otlp.lp.solution import Solution


def as_subset(h: object, V: int) -> np.ndarray:
    """A subset of the vocabulary as ``bool [V]``, from a mask or a list of token ids."""
    arr = np.asarray(h)
    if arr.dtype == bool:
        if arr.shape != (V,):
            raise InputError(f"h_star as a mask must have shape [{V}], got {arr.shape}")
        return arr.copy()
    if arr.size == 0:
        return np.zeros(V, dtype=bool)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"h_star must be a bool mask [V] or a list of token ids, got {arr.dtype} {arr.shape}")
    if arr.min() < 0 or arr.max() >= V:
        raise InputError(f"h_star token ids must lie in [0, {V}), got [{arr.min()}, {arr.max()}]")
    mask = np.zeros(V, dtype=bool)
    mask[arr] = True
    return mask


@dataclass(frozen=True)
class _Split:
    """The two halves of GR Thm 5.1 and the map of their "S" arcs onto the support (outer arcs first)."""

    outer: BipartiteNetwork
    inner: BipartiteNetwork
    omegas: np.ndarray  # [M, n] int64, the support of P_draft
    probs: np.ndarray  # [M] float64
    out_rows: np.ndarray  # [M_out], support rows of the outer tuples (omega not in H*^n)
    in_rows: np.ndarray  # [M_in], support rows of the inner tuples
    arc_token: np.ndarray  # [K], token of each "S" arc of the union
    arc_tuple: np.ndarray  # [K], support row of each "S" arc of the union


class OuterInnerNetworks(Formulation):
    """GR Thm 5.1: the outer and inner max-flow networks for a minimiser ``h_star`` of psi (computed by
    :func:`otlp.core.subsets.min_psi` when not given), solved separately and combined.

    :meth:`build` returns the two networks side by side as one :class:`FlowNetwork` (shared s and t; its max flow is
    the sum of the two), so the combined solution has a model to certify; :meth:`solve` solves
    :meth:`networks` one at a time with the backend and merges the flows and cuts into a solution of that union.
    ``solution.info`` holds the two separate solutions ("outer", "inner"), ``h_star``, and whether each side the
    CS system fixes was saturated ("cs_outer", "cs_inner"); if not, h_star was not a minimiser and the status is
    "infeasible" (the system (6) has no solution for it).

    The union is built only by :meth:`build` and :meth:`solve` (the certificate needs it); :meth:`networks`,
    :attr:`omegas`, :meth:`plan`, :meth:`coupling` and :meth:`slice` work from the two halves.

    Examples
    --------
    >>> import otlp
    >>> from otlp.lp.formulations.outer_inner import OuterInnerNetworks
    >>> model = OuterInnerNetworks([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    >>> round(model.solve(backend="networkx").value, 12)
    0.85
    """

    name = "OuterInnerNetworks"
    kinds = ("network",)

    def __init__(self, p: object, draft: DraftScheme, h_star: object | None = None):
        self.draft = as_draft(draft)
        self.p = check_distribution(p, "p", size=self.draft.V)
        if h_star is None:
            from otlp.core.subsets import min_psi

            _, h_star = min_psi(self.p, self.draft)
        self.h_star = as_subset(h_star, self.draft.V)
        self._split: _Split | None = None
        self._union: BipartiteNetwork | None = None

    # -- size and build -------------------------------------------------------------------------------------
    def size(self, kind: str | None = None) -> ModelSize:
        return network_size(self.draft.V, support_size_bound(self.draft), self.draft.n)

    def _halves(self) -> _Split:
        if self._split is None:
            omegas, probs = self.draft.support()  # [M, n], [M]
            inner_tuple = self.h_star[omegas].all(axis=1)  # [M]
            out_rows, in_rows = np.flatnonzero(~inner_tuple), np.flatnonzero(inner_tuple)
            outer = bipartite_network("outer", self.p, ~self.h_star, omegas[out_rows], probs[out_rows])
            inner = bipartite_network("inner", self.p, self.h_star, omegas[in_rows], probs[in_rows])
            # the "S" arcs of the union: outer first, then inner, tuples as rows of the support
            arc_token = np.concatenate([outer.arc_token, inner.arc_token])  # [K]
            arc_tuple = np.concatenate([out_rows[outer.arc_tuple], in_rows[inner.arc_tuple]])  # [K]
            self._split = _Split(outer, inner, omegas, probs, out_rows, in_rows, arc_token, arc_tuple)
        return self._split

    def _combined(self) -> BipartiteNetwork:
        """The union over all tokens and the whole support (middle arcs outer first, then inner), built once."""
        if self._union is None:
            h = self._halves()
            self._union = assemble_network(self.name, self.p, np.arange(self.draft.V), h.omegas, h.probs,
                                           h.arc_token, h.arc_tuple)
        return self._union

    def networks(self) -> tuple[BipartiteNetwork, BipartiteNetwork]:
        """The outer and the inner network (GR Thm 5.1), each with its map back to ``S``."""
        h = self._halves()
        return h.outer, h.inner

    def build(self, kind: str | None = None) -> FlowNetwork:
        return self._combined().network

    @property
    def omegas(self) -> np.ndarray:
        """The columns of :meth:`plan` and :meth:`coupling`: the support of P_draft, ``int [M, n]``."""
        return self._halves().omegas

    # -- solve ----------------------------------------------------------------------------------------------
    def solve(self, backend: str = "highs", *, memory_limit: float = MEMORY_LIMIT_BYTES,
              tol: float = 1e-9, **options: object) -> Solution:
        """Solve the outer and the inner network separately with ``backend`` and combine them (see the class).

        The CS check allows each saturated side an absolute shortfall of ``tol + value_bound`` (solver rounding);
        :meth:`coupling` and :meth:`slice` complete what is left by GR eq. (3) (see :func:`residual_completion`).
        """
        from otlp.lp.solvers import solve as solve_model

        self.kind_for(backend)
        self.size().check(self.name, memory_limit)
        start = time.perf_counter()
        halves = self._halves()
        union = self._combined()  # the model of the merged solution (its certificate)
        build = time.perf_counter() - start
        outer, inner, out_rows, in_rows = halves.outer, halves.inner, halves.out_rows, halves.in_rows
        parts = {}
        for label, part in (("outer", outer), ("inner", inner)):
            if part.network.num_arcs == 0:  # nothing on this side (H* empty or everything)
                parts[label] = _empty_solution(part.network, backend)
            else:
                parts[label] = solve_model(part.network, backend, **options)
        sol_out, sol_in = parts["outer"], parts["inner"]
        statuses = {sol_out.status, sol_in.status}
        V, M = self.draft.V, halves.omegas.shape[0]
        seconds = {"build": build + sol_out.seconds.get("build", 0.0) + sol_in.seconds.get("build", 0.0),
                   "solve": sol_out.seconds.get("solve", 0.0) + sol_in.seconds.get("solve", 0.0)}
        info = {"outer": sol_out, "inner": sol_in, "h_star": self.h_star.copy()}
        if statuses != {"optimal"}:
            status = next(s for s in (sol_out.status, sol_in.status) if s != "optimal")
            return Solution(float("nan"), status, {}, None, seconds, backend, self.name, union.network, info=info)
        # merge: token i is left node i of the union, tuple row m is right node m (support order)
        source = np.zeros(V)
        source[outer.tokens] = _flows(sol_out, "source")
        source[inner.tokens] = _flows(sol_in, "source")
        sink = np.zeros(M)
        sink[out_rows] = _flows(sol_out, "sink")
        sink[in_rows] = _flows(sol_in, "sink")
        middle = np.concatenate([_flows(sol_out, "S"), _flows(sol_in, "S")])
        primal = {"source": source, "S": middle, "sink": sink}
        dual = None
        if all(sol.dual and "source_side" in sol.dual for sol in (sol_out, sol_in)):  # cuts (network backends)
            side = np.zeros(union.network.num_nodes, dtype=bool)
            side[0] = True
            for part, sol, rows in ((outer, sol_out, out_rows), (inner, sol_in, in_rows)):
                s_side = np.asarray(sol.dual["source_side"], dtype=bool)
                L = part.tokens.size
                side[1 + part.tokens] = s_side[1: 1 + L]
                side[1 + V + rows] = s_side[1 + L: 1 + L + rows.size]
            dual = {"source_side": side}
        bound = sol_out.value_bound + sol_in.value_bound
        slack = tol + bound
        outer_probs, inner_p = outer.probs, self.p[inner.tokens]
        info["cs_outer"] = bool(np.all(np.abs(sink[out_rows] - outer_probs) <= slack))  # (6a) equalities
        info["cs_inner"] = bool(np.all(np.abs(source[inner.tokens] - inner_p) <= slack))  # (6b) equalities
        status = "optimal"
        if not (info["cs_outer"] and info["cs_inner"]):
            status = "infeasible"
            info["message"] = ("h_star is not a minimiser of psi: the complementary-slackness system of GR Thm 5.1 "
                               "has no solution for it (a side it fixes is not saturated)")
        value = float(sol_out.value) + float(sol_in.value)
        return Solution(value, status, primal, dual, seconds, backend, self.name, union.network, bound, info)

    # -- maps back ------------------------------------------------------------------------------------------
    def plan(self, solution: Solution) -> np.ndarray:
        """The combined relaxed-OTLP plan ``S [V, M]`` (columns = :attr:`omegas`), the flows as solved."""
        h = self._halves()
        flow = _flows(solution, "S")  # [K]
        return sp.csr_matrix((flow, (h.arc_token, h.arc_tuple)), shape=(self.draft.V, h.omegas.shape[0])).toarray()

    def _completion(self, solution: Solution) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = self._halves()
        return residual_completion(self.p, h.probs, _flows(solution, "S"), h.arc_token, h.arc_tuple)

    def coupling(self, solution: Solution) -> np.ndarray:
        """The OT plan ``C [V, M]`` of GR eq. (8) (eq. (3) with the computed residuals, :func:`residual_completion`)
        from the combined solution; every column sums to P_draft(omega), every row to p(i)."""
        h = self._halves()
        S, w, d_res = self._completion(solution)
        C = sp.csr_matrix((S, (h.arc_token, h.arc_tuple)), shape=(self.draft.V, h.omegas.shape[0])).toarray()
        C += np.outer(w, d_res)  # [V, M]
        return C

    def slice(self, solution: Solution, omega: object) -> np.ndarray:
        """pi(. given omega) = C[:, omega] / P_draft(omega), ``[V]``, for a drafted tuple of positive mass: column
        omega of :meth:`coupling` (the same values), computed without the ``[V, M]`` plan."""
        h = self._halves()
        w_ = np.asarray(omega, dtype=np.int64).reshape(-1)
        hit = np.flatnonzero((h.omegas == w_[None, :]).all(axis=1)) if w_.size == h.omegas.shape[1] else []
        if len(hit) == 0:
            raise InputError(f"tuple {tuple(w_.tolist())} has no mass under the draft scheme; no slice to give")
        m = int(hit[0])
        S, w, d_res = self._completion(solution)
        arcs = np.flatnonzero(h.arc_tuple == m)  # [<= n], the pairs (i, omega) with i in set(omega)
        column = np.zeros(self.draft.V)
        column[h.arc_token[arcs]] = S[arcs]
        column += w * d_res[m]  # [V]
        return column / h.probs[m]


def _flows(sol: Solution, group: str) -> np.ndarray:
    return np.asarray(sol.primal.get(group, np.zeros(0)), dtype=np.float64)


def _empty_solution(net: FlowNetwork, backend: str) -> Solution:
    side = np.zeros(net.num_nodes, dtype=bool)
    side[net.source] = True
    primal = {name: np.zeros(s.stop - s.start) for name, s in net.arc_blocks.items()}
    return Solution(0.0, "optimal", primal, {"source_side": side}, {"build": 0.0, "solve": 0.0}, backend,
                    model=net)
