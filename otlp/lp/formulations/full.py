"""The full OTLP (SpecTr eq. (1); GR eq. (1)): the best coupling of the target p and the draft law P_draft.

    max_{C >= 0}  sum_i sum_{omega : i in set(omega)} C[i, omega]
    s.t.          sum_omega C[i, omega] = p(i)              for every token i            (row group "p")
                  sum_i     C[i, omega] = P_draft(omega)    for every support tuple      (row group "draft")

Columns are the tuples of positive probability only (a zero column forces C = 0 there). The optimal value is
alpha*, and C*[i, omega] / P_draft(omega) is an optimal verification rule pi(i | omega).

One p-row is redundant (both marginals sum to 1) and is left out: the row of the largest p(i). In floating point
sum_i p(i) and sum_omega P_draft(omega) differ by rounding, which can make the system with every row inconsistent
(infeasible in exact rational arithmetic, and a needless risk for float solvers; canonical-decomposition note
§2.1); the dropped row then holds up to that rounding.

Kinds: "linear" (the LP above, V * M variables) and "transport" (``min <cost, C>`` over couplings of p and P_draft
with ``cost = 1[i not in set(omega)]``, value ``1 - <cost, C*>``, for network-simplex OT solvers).
"""

from __future__ import annotations

import numpy as np

from otlp.core.errors import InputError
from otlp.lp.formulations.relaxed import DraftFormulation
from otlp.lp.ir import LinearModel, ModelSize, TransportProblem


class FullOTLP(DraftFormulation):
    """The full OTLP coupling LP: ``V * M`` variables ``C[i, omega]`` over tokens x support tuples.

    Examples
    --------
    >>> import otlp
    >>> f = otlp.lp.formulations.FullOTLP([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    >>> round(f.solve(backend="highs").value, 12)
    0.85
    """

    name = "FullOTLP"
    kinds = ("linear", "transport")

    def size(self, kind: str | None = None) -> ModelSize:
        kind = kind or self.kinds[0]
        M, _ = self._counts()
        if kind == "linear":
            return ModelSize(self.V * M, self.V - 1 + M, (2 * self.V - 1) * M)
        if kind == "transport":
            # the dense cost matrix [V, M] plus the solver's plan of the same shape
            return ModelSize(self.V * M, self.V + M, 2 * self.V * M)
        raise InputError(f"{self.name} builds kinds {self.kinds}, not {kind!r}")

    def cost(self) -> np.ndarray:
        """``float [V, M]``: 1 where token i is not in set(omega), 0 where it is."""
        return (~self.incidence()).astype(np.float64)

    def build(self, kind: str | None = None) -> LinearModel | TransportProblem:
        kind = kind or self.kinds[0]
        if kind == "transport":
            return TransportProblem(self.name, self.p.copy(), self.probs.copy(), self.cost(),
                                    value_offset=1.0, value_scale=-1.0)
        if kind != "linear":
            raise InputError(f"{self.name} builds kinds {self.kinds}, not {kind!r}")
        V, M = self.V, self.probs.size
        model = LinearModel(self.name, sense="max")
        C = model.add_block("C", (V, M), lower=0.0)  # C[i, m] at offset + i * M + m
        model.set_objective("C", self.incidence().astype(np.float64))
        index = C.offset + np.arange(V * M, dtype=np.int64).reshape(V, M)  # [V, M]
        kept = np.delete(np.arange(V), int(np.argmax(self.p)))  # the redundant p-row is dropped (module doc)
        rows = np.repeat(np.arange(kept.size), M)
        model.add_rows("p", rows, index[kept].reshape(-1), 1.0, self.p[kept], self.p[kept], count=kept.size)
        model.add_rows("draft", np.tile(np.arange(M), V), index.reshape(-1), 1.0, self.probs, self.probs, count=M)
        return model

    def plan(self, solution) -> np.ndarray:  # noqa: ANN001
        """The coupling ``C [V, M]`` from a solution (linear or transport kind)."""
        return np.asarray(solution.primal["C"]).reshape(self.V, self.probs.size)

    def verification_rule(self, solution) -> np.ndarray:  # noqa: ANN001
        """pi(i | omega) = C*[i, omega] / P_draft(omega), ``[V, M]`` (each column a law over tokens)."""
        return self.plan(solution) / self.probs[None, :]
