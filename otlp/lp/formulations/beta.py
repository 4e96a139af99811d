"""The canonical-decomposition beta program (khisti2025multi Thm 1 / eq. (2)-(4); GR eq. (19), Thm 4.1).

In the project's letters (p = target, q = draft; the paper swaps them), importance-weighted selection picks a
token i in set(omega) with probability beta(i | omega); single-draft speculative sampling against p then accepts
with probability sum_i min(p(i), p_I(i)), where p_I(i) = sum_omega beta(i | omega) P_draft(omega) is the law of
the selected token. The best beta reaches alpha*:

    max_beta  sum_i min( p(i), sum_omega beta(i | omega) P_draft(omega) )
    s.t.      sum_i beta(i | omega) = 1 for every omega,   beta(i | omega) = 0 unless i in set(omega).

Linearised with t_i (canonical-decomposition note §2.2), an LP in (beta, t):

    max sum_i t_i   s.t.  t_i <= p(i) (bound),   t_i - sum_omega beta(i | omega) P_draft(omega) <= 0 (group "law"),
                          sum_i beta(i | omega) = 1 (group "simplex"),   0 <= beta <= 1,  t >= 0.

The model states it with the columns scaled by P_draft(omega): variables ``joint[i, omega] = beta(i | omega)
P_draft(omega)`` (the joint law of the drafted tuple and the selected token), rows ``sum_i joint = P_draft(omega)``
and ``t_i <= sum_omega joint``. Same LP, same value, but a 0/1 matrix: with beta itself the columns have norm
P_draft(omega), often far below the solvers' 1e-7 dual tolerance, and HiGHS stops about 1e-9 short of the optimum
(observed for IID n = 3). :meth:`BetaProgram.beta` divides back.

GR Thm 4.1 gives an optimal beta from any relaxed-OTLP optimum S*:
beta(i | omega) = S*[i, omega] / sum_j S*[j, omega] where that column is non-zero, else uniform on set(omega).
"""

from __future__ import annotations

import numpy as np

from otlp.core.errors import InputError
from otlp.lp.formulations.relaxed import DraftFormulation, RelaxedOTLP
from otlp.lp.ir import LinearModel, ModelSize


class BetaProgram(DraftFormulation):
    """The beta program as an LP (kind "linear"), plus the map S* -> beta* of GR Thm 4.1.

    Examples
    --------
    >>> import otlp
    >>> bp = otlp.lp.formulations.BetaProgram([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    >>> round(bp.solve(backend="highs").value, 12)
    0.85
    >>> round(bp.acceptance(bp.optimal_beta()), 12)
    0.85
    """

    name = "BetaProgram"
    kinds = ("linear",)

    def size(self, kind: str | None = None) -> ModelSize:
        if (kind or "linear") != "linear":
            raise InputError(f"{self.name} builds kinds {self.kinds}, not {kind!r}")
        M, K = self._counts()
        return ModelSize(K + self.V, M + self.V, 2 * K + self.V)

    def build(self, kind: str | None = None) -> LinearModel:
        if (kind or "linear") != "linear":
            raise InputError(f"{self.name} builds kinds {self.kinds}, not {kind!r}")
        tokens, cols = self.pairs
        K, V, M = tokens.size, self.V, self.probs.size
        model = LinearModel(self.name, sense="max")
        joint = model.add_block("joint", K, lower=0.0, upper=self.probs[cols])  # beta(tokens[k] | omega) P(omega)
        t = model.add_block("t", V, lower=0.0, upper=self.p)  # t_i <= p(i)
        model.set_objective("t", 1.0)
        pairs = joint.offset + np.arange(K)
        model.add_rows("simplex", cols, pairs, 1.0, self.probs, self.probs, count=M)  # sum_i beta(i | omega) = 1
        rows = np.concatenate([np.arange(V), tokens])
        variables = np.concatenate([t.offset + np.arange(V), pairs])
        values = np.concatenate([np.ones(V), -np.ones(K)])
        model.add_rows("law", rows, variables, values, -np.inf, 0.0, count=V)  # t_i <= p_I(i)
        return model

    # -- beta as a matrix, its output law and acceptance ----------------------------------------------------
    def beta(self, solution) -> np.ndarray:  # noqa: ANN001
        """beta(i | omega) = joint[i, omega] / P_draft(omega) as a matrix ``[V, M]`` from a solution of this
        program (object dtype, exact, for rational solutions)."""
        joint = self.dense(solution.primal["joint"])
        if joint.dtype == object:
            from fractions import Fraction

            return joint / np.array([Fraction(float(v)) for v in self.probs], dtype=object)[None, :]
        return joint / self.probs[None, :]

    def output_law(self, beta: np.ndarray) -> np.ndarray:
        """p_I(i) = sum_omega beta(i | omega) P_draft(omega), ``[V]``, for ``beta [V, M]``."""
        return np.asarray(beta, dtype=np.float64) @ self.probs

    def acceptance(self, beta: np.ndarray) -> float:
        """sum_i min(p(i), p_I(i)): the acceptance of importance selection followed by speculative sampling."""
        return float(np.minimum(self.p, self.output_law(beta)).sum())

    def beta_from_plan(self, S: np.ndarray) -> np.ndarray:
        """GR Thm 4.1: beta(i | omega) = S[i, omega] / sum_j S[j, omega] on non-zero columns, else uniform on
        set(omega). ``S [V, M]`` (a relaxed-OTLP optimum) -> ``beta [V, M]``."""
        S = np.asarray(S, dtype=np.float64)
        inc = self.incidence().astype(np.float64)  # [V, M]
        uniform = inc / inc.sum(axis=0, keepdims=True)
        mass = S.sum(axis=0, keepdims=True)  # [1, M]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(mass > 0, S / np.where(mass > 0, mass, 1.0), uniform)

    def optimal_beta(self, relaxed_solution=None, backend: str = "highs") -> np.ndarray:  # noqa: ANN001
        """An optimal beta ``[V, M]`` by GR Thm 4.1, from ``relaxed_solution`` (a RelaxedOTLP solution on the same
        p and draft) or by solving the relaxed OTLP with ``backend``."""
        relaxed = RelaxedOTLP(self.p, self.draft)
        relaxed._support, relaxed._pairs = self._get_support(), self.pairs  # same columns
        if relaxed_solution is None:
            relaxed_solution = relaxed.solve(backend=backend)
        return self.beta_from_plan(relaxed.plan(relaxed_solution))
