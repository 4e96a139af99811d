"""Greedy-ranking vertices of B(psi) and the decomposition of a point of B(psi) into them (papers/002 §4-5).

Ground set: the N paths P of V^L that the draft can produce (q(P) > 0).  psi(S) = 1 - (1 - q(S))^K is the
probability that one of K i.i.d. drafts lies in S; a path law r is realisable by some selection rule Gamma iff
r lies in the base polytope B(psi) = {r : r(S) <= psi(S) for all S, r(all) = 1} (Lemma 4.5, notes/gbv.md §2.5).

- Greedy vertex (Eq. 19, notes §2.7): a ranking (top first) that always selects the highest-ranked drafted path
  has the law  g(P) = (b(P) + q(P))^K - b(P)^K,  b(P) = q-mass ranked strictly below P, computed in the
  factored form d G(u, d) = (u + d)^K - u^K (notes §3.4) so that no difference of K-th powers cancels.
- Decomposition ("move away from a vertex"): for x in B(psi) with the tight sets of x as a chain, take the
  vertex y of a ranking consistent with that chain and the largest eps with x + eps (x - y) in B(psi).  Then
      x = 1 / (1 + eps) (x + eps (x - y)) + eps / (1 + eps) y,
  and x + eps (x - y) has one more tight set A.  For K >= 2 and q > 0, psi(S) = f(q(S)) with f strictly concave,
  so two tight sets S, T satisfy f(q(S)) + f(q(T)) = f(q(S u T)) + f(q(S n T)), which forces S c T or T c S:
  the tight sets of any point form a chain, every new tight set refines it, and the face splits into the product
  of the two minors on A (ranked above) and its complement in the block.  Recursing on blocks gives a binary
  tree with N leaves, i.e. at most N - 1 heads coins and at most N distinct rankings (Caratheodory: <= N + 1).
  The largest eps is found by Dinkelbach/Newton on the concave h(eps) = min_A [g(A) - x(A) - eps d(A)], each
  evaluation one sort (the minimiser of f(q(A)) - z(A) over A is an upper level set of z / q, since f is
  concave: min_A [f(q(A)) - z(A)] = min_lambda [c(lambda) + sum_P min(0, lambda q(P) - z(P))]).

Sampling the mixture: one uniform u drives every coin of the tree (a comonotone coupling: node b is reached on
[lo_b, 1), uses its own ranking on [lo_b, lo_b + a_b (1 - lo_b)) and hands the rest to both children).  A path's
rank is then piecewise constant in u with one piece per ancestor, stored run-length encoded (``RankingMixture``).

Cost: one sort of the block per visit and per Newton step (a few each), so O(N log N) times the depth of the
tree: about 0.3 s for N = 10^4, K = 3 on one core, but O(N^2 log N) when every move peels one path off a big block
(3 s for N = 3000, K = 8 on an interior point).  Memory O(sum_P depth(P)) for the run-length encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otlp.core.errors import InputError
from otlp.optimal.chains import power_gap  # (u + d)^K - u^K without cancellation


def vertex_values(q_ranked: np.ndarray, K: int, below: float = 0.0) -> np.ndarray:
    """Eq. 19: the law of the selected path under one ranking, in ranking order (top first).  # [n]

    q_ranked: q of the ranked paths, top first; ``below`` the q-mass ranked under all of them (a block's b0).
    """
    under = np.cumsum(q_ranked[::-1])[::-1] - q_ranked  # mass of the block ranked strictly below each path
    return power_gap(below + under, q_ranked, K)


def most_violated_prefix(z: np.ndarray, q: np.ndarray, K: int, below: float = 0.0
                         ) -> tuple[float, np.ndarray, np.ndarray]:
    """min over proper non-empty A of [g(A) - z(A)], g(A) = (b0 + q(B))^K - (b0 + q(B \\ A))^K (the minor of psi
    on a block B with mass b0 below it), over the upper level sets of z / q (which contain a minimiser).

    z, q: [n] on the block (q > 0).  Returns (value, order, slack) with ``order`` the paths sorted by decreasing
    z / q (ties by index) and ``slack[t - 1]`` = g - z of the prefix of length t, t = 1..n.
    """
    order = np.lexsort((np.arange(z.size), -z / q))
    qs, zs = q[order], z[order]
    tail = np.cumsum(qs[::-1])[::-1] - qs  # q(B \ A_t), A_t = first t paths of the order
    slack = power_gap(below + tail, np.cumsum(qs), K) - np.cumsum(zs)  # [n]
    if z.size < 2:
        return 0.0, order, slack
    return float(slack[:-1].min()), order, slack


def _cap(A: np.ndarray, q: np.ndarray, K: int, below: float) -> float:
    """g(A) for a boolean mask A of the block."""
    return float(power_gap(below + q[~A].sum(), q[A].sum(), K))


@dataclass
class _Node:
    paths: np.ndarray  # ground-set indices of the block, int64 [n]
    below: float  # q-mass ranked below the block
    start: int  # the block's first global position (0 = top of the full ranking)
    lo: float  # u at which the node is reached


@dataclass
class RankingMixture:
    """A law over rankings of the ground set (top = highest), sampled with one uniform u (module docstring).

    breaks: float64 [M], sorted, breaks[0] = 0: ranking j is used for u in [breaks[j], breaks[j+1]) (M <= N).
    keys: int64 [nnz], sorted: path * M + j for every piece of every path's rank (a piece starts at break j);
    ranks: int64 [nnz]: the path's rank (N - 1 = top) on that piece.
    law: float64 [N]: the exact selection law of the mixture (sum of the heads-weighted Eq. 19 vertices).
    depth: the deepest root-to-leaf chain of the decomposition tree.
    """

    breaks: np.ndarray
    keys: np.ndarray
    ranks: np.ndarray
    law: np.ndarray
    depth: int

    @property
    def num_rankings(self) -> int:
        return int(self.breaks.size)

    @property
    def weights(self) -> np.ndarray:
        """Probability of each ranking.  # [M]"""
        return np.diff(np.append(self.breaks, 1.0))

    def rank_table(self, max_entries: int = 10**7) -> np.ndarray:
        """The ranks as a dense table [M, N] (row j = ranking j; N - 1 = top); for small N (tests)."""
        M, N = self.num_rankings, self.law.size
        if M * N > max_entries:
            raise InputError(f"a dense rank table of {M} x {N} entries exceeds {max_entries:,}")
        table = np.empty((M, N), dtype=np.int64)
        path, piece = np.divmod(self.keys, M)
        ends = np.append(piece[1:], M)
        ends[np.append(path[1:] != path[:-1], True)] = M
        for p, a, b, r in zip(path, piece, ends, self.ranks, strict=True):
            table[a:b, p] = r
        return table

    def ranks_at(self, paths: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The rank of ``paths`` (any shape, ground-set ids) in the ranking drawn at ``u`` (broadcast)."""
        j = np.searchsorted(self.breaks, u, side="right") - 1
        idx = np.searchsorted(self.keys, paths * self.num_rankings + j, side="right") - 1
        return self.ranks[idx]


def decompose(x: np.ndarray, q: np.ndarray, K: int, tol: float = 1e-15, max_newton: int = 200) -> RankingMixture:
    """Write x in B(psi) (psi(S) = 1 - (1 - q(S))^K on the ground set, q > 0) as a mixture of <= N greedy
    rankings (module docstring).  ``x`` must be in B(psi) up to roundoff (see ``project_into_base``); the
    returned ``law`` is the mixture's own law, equal to x up to the roundoff of the recursion.
    """
    x = np.asarray(x, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    N = x.size
    if q.shape != (N,) or N == 0 or np.any(q <= 0):
        raise InputError("decompose needs x and q of one shape [N >= 1] with q > 0 on the ground set")
    law = np.zeros(N)
    path_ids: list[np.ndarray] = []
    piece_lo: list[np.ndarray] = []
    piece_rank: list[np.ndarray] = []
    stack = [(_Node(np.arange(N), 0.0, 0, 0.0), x.copy(), 1, False)]
    depth = 0
    while stack:
        node, xb, level, moved = stack.pop()
        depth = max(depth, level)
        qb = q[node.paths]
        n = node.paths.size
        _, order, slack = most_violated_prefix(xb, qb, K, node.below)
        cuts = np.flatnonzero(slack[:-1] <= tol) + 1  # tight sets: prefixes of the x / q order (module doc)
        if moved and not cuts.size and n > 1:  # after a move the new tight set is the minimiser (roundoff-proof)
            cuts = np.array([int(np.argmin(slack[:-1])) + 1])
        if cuts.size:  # the face is a product: rank the pieces in this order, each by its own mixture
            bounds = np.concatenate([[0], cuts, [n]])
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                piece = order[a:b]
                stack.append((_Node(node.paths[piece], node.below + qb[order[b:]].sum(), node.start + int(a),
                                    node.lo), xb[piece], level + 1, False))
            continue
        # no tight set inside the block: move away from the vertex of the x / q order (consistent with the chain)
        ranked = qb[order]
        y = np.empty(n)
        y[order] = vertex_values(ranked, K, node.below)
        d = xb - y
        eps = np.inf
        if n > 1 and np.abs(d).max() > tol and d.max() > 0:
            up = d > 0
            eps = (_cap(up, qb, K, node.below) - xb[up].sum()) / d[up].sum()
            for _ in range(max_newton):  # Dinkelbach on h(eps) = min_A [g(A) - x(A) - eps d(A)]
                value, zorder, zslack = most_violated_prefix(xb + eps * d, qb, K, node.below)
                if value >= -tol:
                    break
                A = np.zeros(n, dtype=bool)
                A[zorder[: int(np.argmin(zslack[:-1])) + 1]] = True
                step = max((_cap(A, qb, K, node.below) - xb[A].sum()) / d[A].sum(), 0.0)
                if not step < eps:
                    break
                eps = step
        heads = eps / (1.0 + eps) if np.isfinite(eps) else 1.0
        lo = node.lo + heads * (1.0 - node.lo) if heads < 1.0 else 1.0  # where the rest of the block is reached
        if lo > node.lo:  # this ranking's u-interval [node.lo, lo) has positive width in float64
            law[node.paths[order]] += (lo - node.lo) * vertex_values(ranked, K, node.below)
            path_ids.append(node.paths[order])
            piece_lo.append(np.full(n, node.lo))
            piece_rank.append(N - 1 - (node.start + np.arange(n)))
        if lo < 1.0:  # x + eps (x - y) has a new tight set: the next visit splits the block there
            stack.append((_Node(node.paths, node.below, node.start, lo), xb + eps * d, level + 1, True))
    ids = np.concatenate(path_ids)
    los = np.concatenate(piece_lo)
    rks = np.concatenate(piece_rank)
    breaks = np.unique(los)
    keys = ids * breaks.size + np.searchsorted(breaks, los)
    order = np.argsort(keys, kind="stable")
    return RankingMixture(breaks, keys[order], rks[order], law, depth)


def base_violation(x: np.ndarray, q: np.ndarray, K: int) -> float:
    """max_S [x(S) - psi(S)] over the ground set (>= 0 up to roundoff means x in P(psi)); 0 for S = all."""
    value, _, _ = most_violated_prefix(x, q, K)
    return max(-value, 0.0)


def project_into_base(x: np.ndarray, q: np.ndarray, K: int, tol: float = 1e-14, max_steps: int = 200
                      ) -> tuple[np.ndarray, float]:
    """(x', delta): x' = (1 - delta) x + delta q with the smallest delta >= 0 putting x' in P(psi) (x first clipped
    at 0 and normalised).  q is in the relative interior of B(psi) for K >= 2, so delta is small when x is
    nearly feasible (an LP solution: delta ~ its feasibility tolerance).  Dinkelbach on delta, one sort each."""
    x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
    x = x / x.sum()
    delta = 0.0
    for _ in range(max_steps):
        z = (1.0 - delta) * x + delta * q
        value, order, slack = most_violated_prefix(z, q, K)
        if value >= -tol:
            return z, delta
        t = int(np.argmin(slack[:-1])) + 1
        A = order[:t]
        xa, qa = x[A].sum(), q[A].sum()
        cap = float(power_gap(q.sum() - qa, qa, K))
        # (1 - delta) x(A) + delta q(A) <= cap  <=>  delta >= (x(A) - cap) / (x(A) - q(A))
        new = (xa - cap) / (xa - qa) if xa > qa else 1.0
        delta = min(max(new, delta + 1e-16), 1.0)
    raise InputError(f"project_into_base did not reach P(psi) in {max_steps} steps")  # pragma: no cover


__all__ = ["RankingMixture", "base_violation", "decompose", "most_violated_prefix",
           "project_into_base", "vertex_values"]
