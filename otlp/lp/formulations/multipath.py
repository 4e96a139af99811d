"""The multi-path block-verification LP over node budgets (papers/002 Thm 3.3 for K = 1, Thm 4.3 for K >= 1).

Variables D(a_{1:i}) on every prefix a_{1:i} in V^{<=L} (node numbering of ``otlp.multistep.armodel``);
D(empty) = 1 and D(a_{1:L+1}) = 0 are fixed, the latter leaving only D(a_{1:L}) >= 0.

    max   sum_{a_{1:i} in V^{<=L}} D(a_{1:i}) p(a_{1:i})                        (= E[tau + 1], block efficiency)
    s.t.  D(a_{1:i+1}) <= D(a_{1:i})                                             (8)/(11): chain, target-matching
          sum_{a in T} D(a) p(a) <= psi(T) = 1 - (1 - sum_{a in T} q(a))^K     (12): every antichain T of V^{<=L}

For K = 1 the singleton caps D(a) p(a) <= q(a) (9) imply every antichain cap (psi is modular), so only they
are emitted.  For K >= 2 the antichains are enumerated for tiny trees (their number is doubly exponential:
a(0) = 2, a(d) = 1 + a(d-1)^V) and generated otherwise: start from the singletons, solve, and add the most
violated antichains found by :func:`most_violated_antichains` until none is violated by more than ``tol``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from otlp.core.errors import InputError
from otlp.lp.formulations.base import Formulation
from otlp.lp.ir import LinearModel, ModelSize
from otlp.multistep.armodel import ARModel, depth_offsets, node_parents, num_nodes
from otlp.multistep.efficiency import _check_pair, check_K

MODES = ("auto", "enumerate", "generate")


def psi(mass: np.ndarray | float, K: int) -> np.ndarray | float:
    """psi(T) = 1 - (1 - q(T))^K: the probability that one of K i.i.d. drafts passes through T (papers/002 §4)."""
    return 1.0 - (1.0 - np.clip(mass, 0.0, 1.0)) ** K


def count_antichains(V: int, L: int) -> int:
    """Non-empty antichains of V^{<=L} other than {root}: a(L-1)^V - 1 with a(0) = 2, a(d) = 1 + a(d-1)^V."""
    a = 2
    for _ in range(L - 1):
        a = 1 + a**V
    return a**V - 1


def enumerate_antichains(V: int, L: int, limit: int = 200_000) -> list[np.ndarray]:
    """Every non-empty antichain of V^{<=L} \\ {root}, as arrays of node indices (refused above ``limit``)."""
    total = count_antichains(V, L)
    if total > limit:
        raise InputError(
            f"V={V}, L={L} has {total:,} antichains, over the enumeration limit {limit:,}; "
            "use antichains='generate' (constraint generation)"
        )
    off = depth_offsets(V, L)

    def subtree(node: int, depth: int) -> list[tuple[int, ...]]:  # antichains of the subtree, empty included
        if depth == L:
            return [(), (node,)]
        combos: list[tuple[int, ...]] = [()]
        for x in range(V):
            child = subtree(node * V + 1 + x, depth + 1)
            combos = [a + b for a in combos for b in child]
        return combos + [(node,)]

    del off
    out: list[tuple[int, ...]] = [()]
    for x in range(V):
        child = subtree(1 + x, 1)
        out = [a + b for a in out for b in child]
    return [np.array(t, dtype=np.int64) for t in out if t]


def max_weight_antichain(weights: np.ndarray, V: int, L: int) -> tuple[float, np.ndarray]:
    """argmax_T sum_{a in T} weights(a) over antichains T of V^{<=L} \\ {root} (empty allowed).

    A dynamic program over the prefix tree: best(a) = max(0, w(a), sum_x best(a x)), bottom-up one depth at a
    time; the antichain is read back top-down.  weights: [num_nodes] (the root's entry is ignored).
    """
    off = depth_offsets(V, L)
    best = np.zeros(num_nodes(V, L))
    take = np.zeros(num_nodes(V, L), dtype=bool)  # the node itself is in the antichain
    d = slice(off[L], off[L + 1])
    best[d] = np.maximum(weights[d], 0.0)
    take[d] = weights[d] > 0
    for i in range(L - 1, 0, -1):
        d = slice(off[i], off[i + 1])
        below = best[off[i + 1] : off[i + 2]].reshape(-1, V).sum(1)
        take[d] = (weights[d] > below) & (weights[d] > 0)
        best[d] = np.maximum(np.maximum(weights[d], below), 0.0)
    chosen = []
    expand = np.ones(V, dtype=bool)  # the root's children are always examined
    for i in range(1, L + 1):
        nodes = np.arange(off[i], off[i + 1])[expand]
        chosen.append(nodes[take[nodes]])
        if i < L:
            grow = np.zeros(off[i + 1] - off[i], dtype=bool)
            grow[nodes[~take[nodes] & (best[nodes] > 0)] - off[i]] = True
            expand = np.repeat(grow, V)
    T = np.concatenate(chosen)
    return float(weights[T].sum()), T


def most_violated_antichains(
    mass: np.ndarray, q_prefix: np.ndarray, V: int, L: int, K: int, tol: float = 1e-12
) -> list[tuple[float, np.ndarray]]:
    """The separation routine: antichains T maximising mass(T) - psi(q(T)), with mass = D p.

    psi is concave in s = q(T), so psi(s) = min_lambda (lambda s + c(lambda)) over its tangents, and
    max_T [mass(T) - psi(q(T))] = max_lambda [max_T (mass(T) - lambda q(T)) - c(lambda)].  The inner problem
    is a max-weight antichain (a tree DP); its optimum h(lambda) is convex and piecewise linear, and every
    piece is found by Eisner-Severance bisection on lambda in [0, K] = psi'([1, 0]).  Some piece's antichain
    attains the outer maximum, so the best candidate is the exact most violated antichain whenever some
    violation is positive (the empty antichain, value 0, may mask negative "violations").
    Returns [(violation, nodes)] over the distinct non-empty candidates, most violated first.
    """
    found: dict[bytes, np.ndarray] = {}

    def solve_at(lam: float) -> tuple[float, float, np.ndarray]:
        _, T = max_weight_antichain(mass - lam * q_prefix, V, L)
        found.setdefault(np.sort(T).tobytes(), T)
        return float(mass[T].sum()), float(q_prefix[T].sum()), T

    def explore(lo: tuple[float, float], hi: tuple[float, float], depth: int) -> None:
        (x1, s1), (x2, s2) = lo, hi
        if depth > 60 or abs(s1 - s2) <= tol:
            return
        lam = (x1 - x2) / (s1 - s2)  # where the two lines meet
        x, s, _ = solve_at(lam)
        if x - lam * s <= x1 - lam * s1 + tol:
            return
        explore(lo, (x, s), depth + 1)
        explore((x, s), hi, depth + 1)

    x0, s0, _ = solve_at(0.0)
    xK, sK, _ = solve_at(float(K))
    explore((x0, s0), (xK, sK), 0)
    out = [(float(mass[T].sum() - psi(q_prefix[T].sum(), K)), T) for T in found.values() if T.size]
    out.sort(key=lambda t: -t[0])
    return out


class MultiPathLP(Formulation):
    """The (antichain) multi-path LP for K drafted blocks of length L; its optimum is the best block efficiency
    of any valid K-path verification rule (papers/002 Thm 4.3), BV's for K = 1 (Thm 3.4).

    Parameters
    ----------
    target, draft : ARModel with tables to depth >= L (target) and >= L-1 (draft).
    L : block length; K : number of i.i.d. drafted paths.
    antichains : "auto" (singletons for K = 1, enumeration up to ``max_enumerated`` antichains, else
        generation), "enumerate" or "generate".
    tol : the largest antichain-cap violation accepted by constraint generation.
    """

    name = "MultiPathLP"
    kinds = ("linear",)

    def __init__(self, target: ARModel, draft: ARModel, L: int, K: int, antichains: str = "auto",
                 max_enumerated: int = 20_000, tol: float = 1e-9, max_rounds: int = 500):
        _check_pair(target, draft, L)
        if antichains not in MODES:
            raise InputError(f"antichains must be one of {MODES}, got {antichains!r}")
        self.target, self.draft, self.L, self.K = target, draft, int(L), check_K(K)
        self.V = target.V
        self.tol, self.max_rounds = float(tol), int(max_rounds)
        n = num_nodes(self.V, self.L)
        self.p_prefix = target.prefix_probabilities(self.L)  # [n]
        self.q_prefix = draft.prefix_probabilities(self.L)  # [n]
        self.singletons = [np.array([a], dtype=np.int64) for a in range(1, n)]
        if antichains == "auto":
            if self.K == 1:
                antichains = "singletons"
            else:
                antichains = "enumerate" if count_antichains(self.V, self.L) <= max_enumerated else "generate"
        self.mode = antichains
        self._enumerated = enumerate_antichains(self.V, self.L, limit=10 * max_enumerated + 10**5) \
            if antichains == "enumerate" else None

    def initial_antichains(self) -> list[np.ndarray]:
        return self._enumerated if self._enumerated is not None else self.singletons

    def size(self, kind: str | None = None, antichains: list[np.ndarray] | None = None) -> ModelSize:
        rows = self.initial_antichains() if antichains is None else antichains
        n = num_nodes(self.V, self.L)
        return ModelSize(n, (n - 1) + len(rows), 2 * (n - 1) + int(sum(t.size for t in rows)))

    def build(self, kind: str | None = None, antichains: list[np.ndarray] | None = None) -> LinearModel:
        """The LP with the chain rows and one cap row per antichain (default: the mode's initial set)."""
        rows = self.initial_antichains() if antichains is None else antichains
        n = num_nodes(self.V, self.L)
        model = LinearModel(f"MultiPathLP(V={self.V}, L={self.L}, K={self.K})", sense="max")
        lower, upper = np.zeros(n), np.ones(n)
        lower[0] = 1.0  # D(empty) = 1
        D = model.add_block("D", n, lower=lower, upper=upper)
        model.set_objective("D", self.p_prefix)
        child = np.arange(1, n)
        parent = node_parents(self.V, self.L)[1:]
        r = np.arange(n - 1)
        model.add_rows("chain", np.concatenate([r, r]), D.offset + np.concatenate([child, parent]),
                       np.concatenate([np.ones(n - 1), -np.ones(n - 1)]), -np.inf, 0.0, count=n - 1)
        lengths = np.array([t.size for t in rows], dtype=np.int64)
        cols = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        caps = np.array([psi(self.q_prefix[t].sum(), self.K) for t in rows])
        model.add_rows("antichain", np.repeat(np.arange(len(rows)), lengths), D.offset + cols,
                       self.p_prefix[cols], -np.inf, caps, count=len(rows))
        return model

    def separate(self, D: np.ndarray) -> list[tuple[float, np.ndarray]]:
        """Most violated antichain caps for node budgets D [num_nodes] (see :func:`most_violated_antichains`)."""
        return most_violated_antichains(D * self.p_prefix, self.q_prefix, self.V, self.L, self.K)

    def solve(self, backend: str = "highs", *, time_limit: float | None = None,
              on_round: Callable[[int, float], None] | None = None, **options: object):
        """Solve; with antichains="generate", by constraint generation (``on_round(rounds, violation)`` after each
        round: progress).  Returns an ``otlp.lp.solution.Solution``
        whose ``primal["D"]`` are the node budgets and ``info`` holds ``antichain_rows``, ``rounds``,
        ``max_violation`` (the largest antichain-cap violation over ALL antichains, found by separation) and
        ``converged``.  Generation stopped by ``max_rounds`` or ``time_limit`` (seconds) leaves an upper bound
        on the optimum with status "time_limit"."""
        rows = list(self.initial_antichains())
        self.size(antichains=rows).check(self.name)
        seen = {np.sort(t).tobytes() for t in rows}
        start = time.perf_counter()
        rounds, converged, violation = 0, False, float("nan")
        while True:
            rounds += 1
            solution = _solve_linear(self.build(antichains=rows), backend, options)
            if not solution.optimal:
                break
            cuts = self.separate(np.asarray(solution.primal["D"], dtype=np.float64))
            violation = max(cuts[0][0], 0.0) if cuts else 0.0
            new = [T for v, T in cuts if v > self.tol and np.sort(T).tobytes() not in seen]
            converged = violation <= self.tol
            if on_round is not None:
                on_round(rounds, violation)
            if converged or self.mode != "generate" or not new:
                break
            if rounds >= self.max_rounds or (time_limit is not None and time.perf_counter() - start > time_limit):
                solution.status = "time_limit"
                break
            for T in new:
                seen.add(np.sort(T).tobytes())
            rows.extend(new)
        solution.formulation = self.name
        solution.seconds["total"] = time.perf_counter() - start
        solution.info.update(mode=self.mode, antichain_rows=len(rows), rounds=rounds, converged=converged,
                             max_violation=violation)
        return solution


def _solve_linear(model: LinearModel, backend: str, options: dict):
    """Hand the IR to ``otlp.lp.solvers.solve`` (any LP backend: highs, cvxpy, pulp, exact)."""
    from otlp.lp.solvers import solve

    return solve(model, backend, **options)
