"""The optimal skewed draft q^Gamma* of K-path block verification as an LP (papers/002 Thm 4.6, Eqs. 16-17).

Every valid K-path rule is "select one of the K i.i.d. drafted paths with a rule Gamma, then run single-path BV
with the draft law q^Gamma of the selected path" (Lemma 4.4), and the realisable q^Gamma are exactly the base
polytope B(psi) of psi(S) = 1 - (1 - q(S))^K on V^L (Lemma 4.5).  So the best K-path block efficiency is

    max_{r in B(psi)}  sum_{a_{1:i} in V^{<=L}} min_{0<=k<=i} p(a_{k+1:i} | a_{1:k}) r(a_{1:k})          (16)-(17)

(Eq. 17 as printed lacks the sum over T; notes/gbv.md §2.6).  As an LP over the nodes a of V^{<=L}
(node numbering of ``otlp.multistep.armodel``):

    variables  r(a) = q^Gamma(a), the prefix marginals;  m(a) = D(a) p(a), BV's budget mass (Eq. 83)
    max   sum_a m(a)
    s.t.  r(a) = sum_x r(a x)                   (internal a),   r(root) = 1
          m(root) = 1,  m(a x) <= p(x | a) m(a),  m(a) <= r(a)          (m = min_k p(a_{k+1:i}|a_{1:k}) r(a_{1:k}))
          q(a)^K <= r(a) <= psi({a})             (every node: the singleton caps and those of the complements)
          sum_{j<=t} r(P_sigma(j)) <= psi({P_sigma(1..t)})   t = 1..N, for each generated ranking sigma of V^L

The last family is generated: the most violated cap of a path law r is attained at an upper level set of r / q
(psi is a concave function of q(S): ``otlp.multistep.rankings.most_violated_prefix``), so each round adds ALL
prefixes of the current r / q order at once, as running sums s_t = s_{t-1} + r(P_sigma(t)) <= psi (N auxiliary
variables, 2N nonzeros), and stops when no cap is violated by more than ``tol``.  The first order is p / q; the
later ones come from in-out separation (``_in_out``: the order of a point between q and the LP's r).
For K = 1 the bounds alone force r = q (B(psi) = {q}) and the value is BV's (Thm 3.4).

Size: 2 |V^{<=L}| + R N variables and about 3 |V^{<=L}| + R N rows after R rounds (N = V^L paths).
Its optimum equals the antichain LP's (Thm 4.3, ``MultiPathLP``), which the tests check.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from otlp.core.errors import InputError
from otlp.lp.formulations.base import Formulation
from otlp.lp.ir import LinearModel, ModelSize
from otlp.multistep.armodel import ARModel, depth_offsets, node_last_tokens, node_parents, num_nodes
from otlp.multistep.efficiency import _check_pair, check_K


def psi(mass: np.ndarray | float, K: int) -> np.ndarray:
    """psi(S) = 1 - (1 - q(S))^K, the probability that one of K i.i.d. drafts lies in S."""
    return 1.0 - (1.0 - np.clip(np.asarray(mass, dtype=np.float64), 0.0, 1.0)) ** K


class SkewedDraftLP(Formulation):
    """Theorem 4.6's LP over the selected-path law r = q^Gamma in B(psi) (module docstring).

    Parameters
    ----------
    target, draft : ARModel with tables to depth >= L (target) and >= L - 1 (draft).
    L : block length; K : number of i.i.d. drafted paths.
    tol : the largest cap violation accepted by generation; max_rounds : generation rounds.

    ``solve()`` returns a Solution with ``primal["r"]`` and ``primal["m"]`` (both [num_nodes(V, L)]) and ``info``
    holding ``rounds``, ``orderings``, ``max_violation`` and ``converged``.
    """

    name = "SkewedDraftLP"
    kinds = ("linear",)

    def __init__(self, target: ARModel, draft: ARModel, L: int, K: int, tol: float = 1e-9, max_rounds: int = 100):
        _check_pair(target, draft, L)
        self.target, self.draft, self.L, self.K = target, draft, int(L), check_K(K)
        self.V = target.V
        self.tol, self.max_rounds = float(tol), int(max_rounds)
        self.n = num_nodes(self.V, self.L)
        self.leaf0 = int(depth_offsets(self.V, self.L)[self.L])  # first node of depth L
        self.q_prefix = draft.prefix_probabilities(self.L)  # [n]
        parents = node_parents(self.V, self.L)[1:]
        self.p_step = target.conditionals[parents, node_last_tokens(self.V, self.L)[1:]]  # p(x | a) of node a x
        q_leaf = self.q_prefix[self.leaf0:]
        self.support = np.flatnonzero(q_leaf > 0)  # paths the draft can produce: the ground set of psi
        p_leaf = target.prefix_probabilities(self.L)[self.leaf0:]
        self.orderings = [self.support[np.lexsort((self.support, -p_leaf[self.support] / q_leaf[self.support]))]]

    def size(self, kind: str | None = None, orderings: list[np.ndarray] | None = None) -> ModelSize:
        extra = sum(o.size for o in (self.orderings if orderings is None else orderings)) if self.K > 1 else 0
        n = self.n
        return ModelSize(2 * n + extra, (self.leaf0 + 2 * (n - 1)) + extra,
                         (n + self.leaf0) + 4 * (n - 1) + 2 * extra)

    def build(self, kind: str | None = None, orderings: list[np.ndarray] | None = None) -> LinearModel:
        """The LP with one running-sum family per ordering (default: the orderings generated so far)."""
        orderings = (self.orderings if orderings is None else orderings) if self.K > 1 else []
        n, V, K = self.n, self.V, self.K
        model = LinearModel(f"SkewedDraftLP(V={V}, L={self.L}, K={K})", sense="max")
        lower = np.clip(self.q_prefix, 0.0, 1.0) ** K
        upper = psi(self.q_prefix, K)
        lower[0] = upper[0] = 1.0
        r = model.add_block("r", n, lower=np.minimum(lower, upper), upper=upper)
        m_upper = np.full(n, np.inf)
        m_lower = np.zeros(n)
        m_lower[0] = m_upper[0] = 1.0
        m = model.add_block("m", n, lower=m_lower, upper=m_upper)
        model.set_objective("m", 1.0)
        internal = np.arange(self.leaf0)
        children = internal[:, None] * V + 1 + np.arange(V)  # [internal, V]
        model.add_rows("tree", np.repeat(np.arange(self.leaf0), V + 1),
                       r.offset + np.concatenate([internal[:, None], children], 1).ravel(),
                       np.tile(np.concatenate([[1.0], -np.ones(V)]), self.leaf0), 0.0, 0.0, count=self.leaf0)
        nodes, parents, rows = np.arange(1, n), node_parents(V, self.L)[1:], np.arange(n - 1)
        model.add_rows("chain", np.concatenate([rows, rows]), m.offset + np.concatenate([nodes, parents]),
                       np.concatenate([np.ones(n - 1), -self.p_step]), -np.inf, 0.0, count=n - 1)
        model.add_rows("budget", np.concatenate([rows, rows]),
                       np.concatenate([m.offset + nodes, r.offset + nodes]),
                       np.concatenate([np.ones(n - 1), -np.ones(n - 1)]), -np.inf, 0.0, count=n - 1)
        if orderings:
            sizes = np.array([o.size for o in orderings])
            total = int(sizes.sum())
            caps = np.concatenate([self._prefix_caps(o) for o in orderings])
            s = model.add_block("s", total, lower=-np.inf, upper=caps)
            first = np.concatenate([[0], np.cumsum(sizes)[:-1]])  # s of the first prefix of each family
            has_prev = np.ones(total, dtype=bool)
            has_prev[first] = False
            idx = np.arange(total)
            leaves = self.leaf0 + np.concatenate(orderings)
            prev = idx[has_prev]
            model.add_rows("ranking_caps", np.concatenate([idx, idx, prev]),
                           np.concatenate([s.offset + idx, r.offset + leaves, s.offset + prev - 1]),
                           np.concatenate([np.ones(total), -np.ones(total), -np.ones(prev.size)]), 0.0, 0.0,
                           count=total)
        return model

    def _prefix_caps(self, ordering: np.ndarray) -> np.ndarray:
        """psi of every prefix of ``ordering`` (paths), in the stable suffix form (no 1 - (1 - s)^K cancellation)."""
        from otlp.optimal.chains import power_gap

        qs = self.q_prefix[self.leaf0 + ordering]
        tail = np.cumsum(qs[::-1])[::-1] - qs
        rest = max(1.0 - self.q_prefix[self.leaf0:][self.support].sum(), 0.0)  # mass outside the ground set: 0
        return power_gap(rest + tail, np.cumsum(qs), self.K)

    def separate(self, r_leaves: np.ndarray) -> tuple[float, np.ndarray]:
        """(largest cap violation max_S [r(S) - psi(S)], the r / q order of the ground set that attains it)."""
        from otlp.multistep.rankings import most_violated_prefix

        q = self.q_prefix[self.leaf0:][self.support]
        value, order, _ = most_violated_prefix(r_leaves[self.support], q, self.K)
        return max(-value, 0.0), self.support[order]

    def _in_out(self, center: np.ndarray, r: np.ndarray, order: np.ndarray, alpha: float = 0.8,
                tries: int = 30) -> tuple[np.ndarray, np.ndarray]:
        """In-out separation (Ben-Ameur & Neto): cut at z = alpha c + (1 - alpha) r between a feasible centre c and
        the LP's point r; a cap violated at z is violated at r too (c(A) <= psi(A)), and cuts taken nearer the
        feasible set stop the zig-zag of plain separation (75 -> 30 rounds at V^L = 256, K = 2).  A feasible z
        becomes the new centre.  Returns (centre, the ranking whose family is added)."""
        from otlp.multistep.rankings import most_violated_prefix

        q = self.q_prefix[self.leaf0:][self.support]
        for _ in range(tries):
            z = alpha * center + (1.0 - alpha) * r
            value, z_order, _ = most_violated_prefix(z[self.support], q, self.K)
            if -value > self.tol:
                return center, self.support[z_order]
            center = z
        return center, order

    def solve(self, backend: str = "highs", *, time_limit: float | None = None,
              on_round: Callable[[int, float], None] | None = None, **options: object):
        """Solve by generation of ranking families (module docstring); status "time_limit" when stopped early
        by ``max_rounds`` or ``time_limit`` (seconds), leaving an upper bound on the optimum.
        ``on_round(rounds, violation)`` is called after each round (progress)."""
        start = time.perf_counter()
        rounds, converged, violation = 0, False, float("nan")
        seen = {o.tobytes() for o in self.orderings}
        center = np.zeros(self.n - self.leaf0)
        center[self.support] = self.q_prefix[self.leaf0:][self.support]  # q is in B(psi)
        while True:
            rounds += 1
            self.size().check(self.name)
            solution = _solve_linear(self.build(), backend, options)
            if not solution.optimal:
                break
            r = np.asarray(solution.primal["r"], dtype=np.float64)
            violation, order = self.separate(r[self.leaf0:])
            converged = violation <= self.tol or self.K == 1
            if on_round is not None:
                on_round(rounds, violation)
            if converged:
                break
            center, order = self._in_out(center, r[self.leaf0:], order)
            if order.tobytes() in seen:
                raise InputError(f"{self.name}: the generated ranking repeats with a cap violated by {violation:.2e}; "
                                 "the backend's feasibility tolerance is looser than tol")
            if rounds >= self.max_rounds or (time_limit is not None and time.perf_counter() - start > time_limit):
                solution.status = "time_limit"
                break
            seen.add(order.tobytes())
            self.orderings.append(order)
        solution.formulation = self.name
        solution.seconds["total"] = time.perf_counter() - start
        solution.info.update(rounds=rounds, orderings=len(self.orderings), converged=converged,
                             max_violation=violation)
        return solution


def _solve_linear(model: LinearModel, backend: str, options: dict):
    from otlp.lp.solvers import solve

    return solve(model, backend, **options)


__all__ = ["SkewedDraftLP", "psi"]
