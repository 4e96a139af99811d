"""Path-aware OTLP (issue 18): among the acceptance-optimal rules, the one that keeps the most drafted paths alive.

Lexicographic program over the relaxed OTLP's incidence pairs (GR eq. (2); S[i, omega] = P(omega) pi(i | omega) for
i in set(omega)):

    stage 1:  alpha* = max sum S                       (RelaxedOTLP; or given)
    stage 2:  max_{S >= 0}  sum_{(i, omega)} count_i(omega) S[i, omega]        E[drafted paths that continue]
              s.t.  sum_omega S[i, omega] <= p(i)           for every token i          (row group "p")
                    sum_i     S[i, omega] <= P(omega)       for every support tuple    (row group "draft")
                    sum       S           >= alpha* - tol                              (row group "acceptance")

count_i(omega) is the number of drafts of omega equal to i: when the verifier outputs a drafted token i, the
count_i(omega) paths through it continue to the next depth of the token tree. The residual completion of GR eq. (3)
(:meth:`RelaxedOTLP.complete`) turns S into a full coupling with law p; at acceptance alpha* no rejected tuple's
residual draw can land on one of its drafts (that would accept more than alpha*), so the completion adds no paths.

``tol`` (default ``TOLERANCE`` = 1e-9) is the acceptance the second stage may give up: a float solver's stage-1
value is itself accurate to about that much, and a zero tolerance would make stage 2 infeasible by rounding. What
spending tol can buy is tol times the dual multiplier of the acceptance row; tests/optimal/test_path_aware.py
compares the value with the multiset route (which holds the acceptance by an equality) to 1e-7.

For i.i.d. drafts the program is symmetric under permutations of the drafts, so its optimum is also reached by
symmetric rules (average any optimal plan over the n! orders); :mod:`otlp.optimal.paths` solves that multiset
form and the tests check that both agree.
"""

from __future__ import annotations

import numpy as np

from otlp.core.drafts import DraftScheme
from otlp.lp.formulations.relaxed import RelaxedOTLP
from otlp.lp.ir import LinearModel, ModelSize

#: default acceptance the second stage may give up (module docstring)
TOLERANCE = 1e-9


def tuple_counts(omegas: np.ndarray, tokens: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``count_i(omega)`` on incidence pairs: ``omegas int [M, n]``, pairs ``(tokens [K], columns [K])`` -> ``float
    [K]``, the number of drafts of ``omegas[columns[k]]`` equal to ``tokens[k]``."""
    return (np.asarray(omegas)[columns] == np.asarray(tokens)[:, None]).sum(axis=1).astype(np.float64)


class PathAwareOTLP(RelaxedOTLP):
    """The lexicographic program of the module docstring: acceptance alpha* first, then E[continuing paths].

    Parameters
    ----------
    p : target distribution [V]; draft : any enumerable draft scheme (``otlp.IID(q, n)`` for the i.i.d. case).
    alpha : the acceptance to hold (default: stage 1 solves :class:`RelaxedOTLP` with the same backend).
    tol : acceptance the second stage may give up (``TOLERANCE``).

    ``solve()`` returns the stage-2 Solution: ``value`` = E[continuing paths], ``info["alpha"]`` the held
    acceptance, ``info["acceptance"]`` the plan's own; ``plan`` / ``complete`` as for :class:`RelaxedOTLP`.

    Examples
    --------
    >>> import otlp
    >>> f = PathAwareOTLP([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    >>> s = f.solve()
    >>> round(s.info["alpha"], 9), round(s.value, 6)
    (0.85, 1.08)
    """

    name = "PathAwareOTLP"
    kinds = ("linear",)

    def __init__(self, p: object, draft: DraftScheme, *, alpha: float | None = None, tol: float = TOLERANCE):
        super().__init__(p, draft)
        self.alpha = None if alpha is None else float(alpha)
        self.tol = float(tol)

    def size(self, kind: str | None = None) -> ModelSize:
        M, K = self._counts()
        return ModelSize(K, self.V + M + 1, 3 * K)

    def counts(self) -> np.ndarray:
        """``float [K]``: count_i(omega) on the incidence pairs."""
        tokens, cols = self.pairs
        return tuple_counts(self.omegas, tokens, cols)

    def build(self, kind: str | None = None) -> LinearModel:
        if self.alpha is None:
            raise ValueError("build() needs alpha: pass it, or call solve(), which computes it first")
        tokens, cols = self.pairs
        K = tokens.size
        model = LinearModel(self.name, sense="max")
        S = model.add_block("S", K, lower=0.0)
        model.set_objective("S", self.counts())
        pairs = S.offset + np.arange(K)
        model.add_rows("p", tokens, pairs, 1.0, -np.inf, self.p, count=self.V)
        model.add_rows("draft", cols, pairs, 1.0, -np.inf, self.probs, count=self.probs.size)
        model.add_rows("acceptance", np.zeros(K, dtype=np.int64), pairs, 1.0, self.alpha - self.tol, np.inf, count=1)
        return model

    def solve(self, backend: str = "highs", **options: object):
        """Stage 1 (alpha*, unless given) then stage 2, both with ``backend``."""
        if self.alpha is None:
            first = RelaxedOTLP(self.p, self.draft).solve(backend, **options)
            if not first.optimal:
                return first
            self.alpha = float(first.value)
        solution = super().solve(backend, **options)
        if solution.optimal:
            solution.info["alpha"] = self.alpha
            solution.info["acceptance"] = float(np.sum(np.asarray(solution.primal["S"], dtype=np.float64)))
        return solution


__all__ = ["TOLERANCE", "PathAwareOTLP", "tuple_counts"]
