"""The relaxed OTLP (GR eq. (2), hu2025towards) and its residual completion to a full coupling (GR eq. (3)).

    max_{S >= 0}  sum_i sum_omega S[i, omega]
    s.t.          sum_omega S[i, omega] <= p(i)               for every token i          (row group "p")
                  sum_i     S[i, omega] <= P_draft(omega)     for every tuple omega      (row group "draft")
                  S[i, omega] = 0 unless i in set(omega)

Variables exist only for the incidence pairs (i, omega) with omega in the draft's support and i in set(omega),
at most n * |support| of them. The optimal value is alpha* (GR Thm 3.1).

The same problem is the max-flow network of GR §5.2: s -> i (capacity p(i)) -> omega (capacity inf) ->
t (capacity P_draft(omega)); the flow on the middle arcs is S. The "network" kind is built by
:func:`otlp.lp.formulations.maxflow.assemble_network`, with arc groups "source", "S", "sink", so a flow, or the LP of
the network, maps back to S the same way as the linear kind.

This module also holds :class:`DraftFormulation`, the state the OTLP formulations share (validated p, the support
tuples and their incidence pairs, :func:`otlp.lp.formulations.incidence.incidence_pairs`).
"""

from __future__ import annotations

import numpy as np

from otlp.core.distributions import check_distribution
from otlp.core.drafts import DraftScheme, as_draft
from otlp.core.errors import InputError
from otlp.lp.formulations.base import Formulation
from otlp.lp.formulations.completion import residual_completion
from otlp.lp.formulations.incidence import incidence_pairs
from otlp.lp.formulations.maxflow import assemble_network
from otlp.lp.ir import FlowNetwork, LinearModel, ModelSize

#: Below this many tuples V^n the support is enumerated to count a model's size exactly; above it,
#: :func:`support_size` returns the bound V^n (so a refusal never enumerates a huge table first).
EXACT_COUNT_TUPLES = 1_000_000


def support_size(draft: DraftScheme) -> tuple[int, bool]:
    """(number of support tuples, exact?) without enumerating more than ``EXACT_COUNT_TUPLES`` tuples.

    Schemes with a sparse support (Greedy, SpecHub) list it directly; others are enumerated when V^n is small,
    else V^n is returned as an upper bound.
    """
    sparse = type(draft).support is not DraftScheme.support
    if sparse or draft.num_tuples() <= EXACT_COUNT_TUPLES:
        return int(draft.support()[1].size), True
    return draft.num_tuples(), False


class DraftFormulation(Formulation):
    """Shared state of the OTLP formulations: the target ``p [V]``, the draft scheme, and its support.

    The support ``(omegas [M, n], probs [M])`` (tuples of positive probability, draft order) is computed once,
    on first use. Columns of every matrix below follow that order.
    """

    def __init__(self, p: object, draft: DraftScheme):
        self.draft = as_draft(draft)
        self.p = check_distribution(p, "p", size=self.draft.V)  # [V]
        self.V, self.n = self.draft.V, self.draft.n
        self._support: tuple[np.ndarray, np.ndarray] | None = None
        self._pairs: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def omegas(self) -> np.ndarray:
        """Support tuples, ``int [M, n]``."""
        return self._get_support()[0]

    @property
    def probs(self) -> np.ndarray:
        """P_draft of the support tuples, ``float [M]``."""
        return self._get_support()[1]

    @property
    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Incidence pairs ``(tokens [K], columns [K])`` with tokens[k] in set(omegas[columns[k]])."""
        if self._pairs is None:
            self._pairs = incidence_pairs(self.omegas, self.V)
        return self._pairs

    def _get_support(self) -> tuple[np.ndarray, np.ndarray]:
        if self._support is None:
            self._support = self.draft.support()
        return self._support

    def _counts(self) -> tuple[int, int]:
        """(M support tuples, K incidence pairs), exact when cheap, else upper bounds (M <= V^n, K <= n M)."""
        M, exact = support_size(self.draft)
        if not exact:
            return M, self.n * M
        return M, int(self.pairs[0].size)

    def incidence(self) -> np.ndarray:
        """``bool [V, M]``: token i appears in tuple m."""
        inc = np.zeros((self.V, self.probs.size), dtype=bool)
        tokens, cols = self.pairs
        inc[tokens, cols] = True
        return inc

    def dense(self, values: np.ndarray) -> np.ndarray:
        """Values on the incidence pairs ``[K]`` -> the matrix ``[V, M]`` (zero off the pairs; dtype kept)."""
        values = np.asarray(values).reshape(-1)
        tokens, cols = self.pairs
        out = np.zeros((self.V, self.probs.size), dtype=values.dtype)
        out[tokens, cols] = values
        return out


class RelaxedOTLP(DraftFormulation):
    """The relaxed OTLP of GR eq. (2): kinds "linear" (an LP on the incidence pairs) and "network" (GR §5.2).

    Examples
    --------
    >>> import otlp
    >>> f = otlp.lp.formulations.RelaxedOTLP([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    >>> round(f.solve(backend="highs").value, 12)
    0.85
    """

    name = "RelaxedOTLP"
    kinds = ("linear", "network")

    def size(self, kind: str | None = None) -> ModelSize:
        kind = kind or self.kinds[0]
        M, K = self._counts()
        if kind == "linear":
            return ModelSize(K, self.V + M, 2 * K)
        if kind == "network":
            return ModelSize(self.V + K + M, self.V + M + 2, 2 * (self.V + K + M))
        raise InputError(f"{self.name} builds kinds {self.kinds}, not {kind!r}")

    def build(self, kind: str | None = None) -> LinearModel | FlowNetwork:
        kind = kind or self.kinds[0]
        tokens, cols = self.pairs
        if kind == "network":
            return assemble_network(self.name, self.p, np.arange(self.V), self.omegas, self.probs, tokens, cols).network
        if kind != "linear":
            raise InputError(f"{self.name} builds kinds {self.kinds}, not {kind!r}")
        K = tokens.size
        model = LinearModel(self.name, sense="max")
        S = model.add_block("S", K, lower=0.0)
        model.set_objective("S", 1.0)
        pairs = S.offset + np.arange(K)
        model.add_rows("p", tokens, pairs, 1.0, -np.inf, self.p, count=self.V)  # GR eq. (2), row sums <= p
        model.add_rows("draft", cols, pairs, 1.0, -np.inf, self.probs, count=self.probs.size)  # column sums <= P
        return model

    # -- mapping a solution back ---------------------------------------------------------------------------
    def plan(self, solution) -> np.ndarray:  # noqa: ANN001
        """S as a matrix ``[V, M]`` over (token, support tuple), from a solution of either kind."""
        return self.dense(solution.primal["S"])

    def residuals(self, solution) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
        """``(p_res [V], draft_res [M])``: p(i) - sum_omega S[i, omega] and P_draft(omega) - sum_i S[i, omega]."""
        S = self.plan(solution)
        return self.p - S.sum(axis=1), self.probs - S.sum(axis=0)

    def complete(self, solution) -> np.ndarray:  # noqa: ANN001
        """The residual completion of GR eq. (3): an optimal coupling ``C [V, M]`` of the full OTLP,

            C[i, omega] = S*[i, omega] + p_res(i) * P_res(omega) / sum_j p_res(j),

        where sum_j p_res(j) = sum_omega P_res(omega) = 1 - alpha*. When alpha* = 1 the residuals vanish and C = S*.
        Computed by :func:`otlp.lp.formulations.completion.residual_completion` on the incidence pairs: a plan off by
        the solver's tolerance is first made feasible (negatives clipped, columns above P_draft and rows above p
        scaled down), and a column left short while sum_j p_res(j) = 0 (rounding, a tuple too light to carry flow)
        is filled in proportion to p. Every column of C sums to P_draft(omega) (each slice ``C[:, m] / P(omega_m)``
        is a distribution) and every row to p(i), up to rounding.
        """
        tokens, cols = self.pairs
        S, w, draft_res = residual_completion(self.p, self.probs, solution.primal["S"], tokens, cols)  # [K], [V], [M]
        return self.dense(S) + np.outer(w, draft_res)  # [V, M]
