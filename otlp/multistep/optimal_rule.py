"""The optimal K-path block verifier for table models: Thm 4.6's q^Gamma* realised as a sampler (papers/002 §4).

Every valid K-path rule is "select one drafted path with a rule Gamma, then run single-path BV with the draft law
q^Gamma of the selected path" (Lemma 4.4); the realisable q^Gamma are the base polytope B(psi) of
psi(S) = 1 - (1 - q(S))^K (Lemma 4.5), whose vertices are the greedy rankings (Eq. 19, Edmonds).  So:

1. solve Thm 4.6 for q^Gamma* (``otlp.lp.formulations.SkewedDraftLP``), its value is the antichain-LP optimum;
2. write q^Gamma* as a mixture of at most N = V^L greedy rankings (``otlp.multistep.rankings.decompose``); the
   LP's solution may violate a cap by its tolerance (<= 1e-9), which the decomposition absorbs by splitting at
   the violated set (a larger violation is first removed by the smallest mix with q);
3. at each step draw a ranking from the mixture independently of the drafts and select the highest-ranked drafted
   path (``otlp.multistep.optimal_block``);
4. run BV on it with draft law r = the mixture's own selection law (Eq. 19 vertices averaged; equal to q^Gamma*
   up to roundoff), so the output has the target's law exactly whatever the LP's accuracy.

Precomputation cost (one core): the LP is solved by generating ranking families, each round one HiGHS solve of
an LP with 2 |V^{<=L}| + (rounds) N variables; rounds grow with N and are the bottleneck (1 to 10 rounds for
N <= 27, 20 to 80 for N = 256, about 1 s to 70 s there; see docs/MULTISTEP.md).  The decomposition is
O(N log N) per level of its tree (0.3 s at N = 10^4, K = 3).  Paths beyond ``MAX_PATHS`` are refused before any
work with ``ModelTooLargeError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.multistep.armodel import ARModel, all_paths, depth_offsets, num_nodes, prefix_nodes
from otlp.multistep.efficiency import _check_pair, bv_budget_mass, check_K
from otlp.multistep.rankings import RankingMixture, base_violation, decompose, project_into_base

MAX_PATHS = 20_000  # V^L above this is refused: the LP's ranking families are dense in the paths
#: A cap violation of the LP's q^Gamma up to this is left to the decomposition (it splits at the violated sets, the
#: mixture's law moves by about the violation); above it the point is first mixed with q into B(psi).
MIX_ABOVE = 1e-8


@dataclass
class OptimalKPathRule:
    """The precomputed optimal K-path rule of (target, draft, L, K).

    leaf_law: float64 [V^L], the law q^Gamma of the selected path (base-V path order), exactly the mixture's;
    r_prefix: float64 [num_nodes(V, L)], its prefix marginals; r_conditionals: [num_nodes(V, L - 1), V], the
    conditionals q^Gamma(. | a_{1:i}) that BV uses (q's where q^Gamma(a_{1:i}) = 0: never reached);
    ground: int64 [V^L] -> index of the path in the mixture's ground set (-1 where q(path) = 0, never drafted);
    mixture: the rankings; lp_value: the LP optimum; block_efficiency: BV's efficiency with r (Eq. 83);
    info: rounds, seconds, delta (the mix with q), num_rankings.
    """

    V: int
    L: int
    K: int
    leaf_law: np.ndarray
    r_prefix: np.ndarray
    r_conditionals: np.ndarray
    ground: np.ndarray
    mixture: RankingMixture
    lp_value: float
    block_efficiency: float
    info: dict = field(default_factory=dict)

    def tensors(self, device: torch.device | str | None = None) -> RuleTensors:
        """What the torch sampler needs, on ``device``."""
        def t(x: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(x, device=device)

        m = self.mixture
        return RuleTensors(self.V, self.L, self.K, t(m.breaks), t(m.keys), t(m.ranks), t(self.ground),
                           t(self.r_conditionals))

    def output_law(self, target: ARModel) -> np.ndarray:
        """Exact R(a_{1:i}) on V^{<=L+1} (R[root] = 0): sum over paths of the selection law times BV's law with
        draft r on that path (``otlp.multistep.bv.block_verification_law``).  # [num_nodes(V, L + 1)]"""
        from otlp.multistep.bv import block_verification_law

        V, L = self.V, self.L
        paths = all_paths(V, L)
        live = np.flatnonzero(self.leaf_law > 0)
        tokens = torch.as_tensor(paths[live])  # [N', L]
        nodes = prefix_nodes(tokens, V)  # [N', L+1]
        p_path = target.on_path(tokens, L + 1)  # [N', L+1, V]
        r_path = torch.as_tensor(self.r_conditionals)[nodes[:, :L]]  # [N', L, V]
        tau_probs, corrections = block_verification_law(tokens, p_path, r_path)
        out = nodes[..., None] * V + 1 + torch.arange(V)  # [N', L+1, V]
        mass = torch.as_tensor(self.leaf_law[live])[:, None, None] * tau_probs[..., None] * corrections
        R = torch.zeros(num_nodes(V, L + 1), dtype=torch.float64)
        R.index_add_(0, out.reshape(-1), mass.reshape(-1))
        return R.numpy()


@dataclass
class RuleTensors:
    """The rule on a device: breaks [M], keys [nnz], ranks [nnz] (the mixture, ``RankingMixture``),
    ground [V^L] (path -> ground-set id), r_conditionals [num_nodes(V, L - 1), V]."""

    V: int
    L: int
    K: int
    breaks: torch.Tensor
    keys: torch.Tensor
    ranks: torch.Tensor
    ground: torch.Tensor
    r_conditionals: torch.Tensor


def check_size(V: int, L: int) -> None:
    """Refuse V^L > MAX_PATHS before any allocation, naming the size."""
    N = V**L
    if N > MAX_PATHS:
        raise ModelTooLargeError(f"the optimal K-path rule over V^L = {V}^{L} = {N:,} paths (limit {MAX_PATHS:,}; "
                                 "its ranking encoding takes up to 16 N^2 bytes)", 16 * N**2, 16 * MAX_PATHS**2,
                                 hint="use a smaller V or L")


def optimal_k_path_rule(target: ARModel, draft: ARModel, L: int, K: int, *, backend: str = "highs",
                        time_limit: float | None = 60.0, tol: float = 1e-9,
                        on_round: Callable[[int, float], None] | None = None) -> OptimalKPathRule:
    """Precompute the optimal K-path rule (module docstring); ``on_round(rounds, violation)`` reports the LP's
    progress.

    Raises ModelTooLargeError above MAX_PATHS paths and InputError when the LP does not reach ``tol`` within
    ``time_limit`` seconds (the rule would then not be optimal).

    Examples
    --------
    >>> import numpy as np
    >>> from otlp.multistep import random_pair, bv_efficiency
    >>> target, draft = random_pair(2, 2, np.random.default_rng(0))
    >>> rule = optimal_k_path_rule(target, draft, 2, 1)
    >>> abs(rule.block_efficiency - bv_efficiency(target, draft, 2)) < 1e-12     # K = 1: BV
    True
    """
    from otlp.lp.formulations.skewed_draft import SkewedDraftLP

    _check_pair(target, draft, L)
    K = check_K(K)
    V, L = target.V, int(L)
    check_size(V, L)
    start = time.perf_counter()
    lp = SkewedDraftLP(target, draft, L, K, tol=tol)
    sol = lp.solve(backend, time_limit=time_limit, on_round=on_round)
    if not sol.optimal or not sol.info.get("converged"):
        raise InputError(f"the Thm 4.6 LP (V={V}, L={L}, K={K}) did not converge: status {sol.status}, "
                         f"{sol.info.get('rounds')} rounds, cap violation {sol.info.get('max_violation')}; "
                         "raise time_limit or use a smaller V^L")
    solved = time.perf_counter()
    q_leaf = draft.prefix_probabilities(L)[depth_offsets(V, L)[L]:]  # [V^L]
    support = np.flatnonzero(q_leaf > 0)
    r_leaf = np.asarray(sol.primal["r"], dtype=np.float64)[lp.leaf0:]
    if K == 1:  # B(psi) = {q}: one ranking, law q exactly (no roundoff from the vertex formula either)
        x, delta = q_leaf[support] / q_leaf[support].sum(), 0.0
    else:
        x = np.maximum(r_leaf[support], 0.0)
        x, delta = x / x.sum(), 0.0
        if base_violation(x, q_leaf[support], K) > MIX_ABOVE:
            x, delta = project_into_base(x, q_leaf[support], K)
    mixture = decompose(x, q_leaf[support], K)
    leaf_law = np.zeros(V**L)
    leaf_law[support] = x if K == 1 else mixture.law
    if K == 1:
        mixture.law = leaf_law[support].copy()
    ground = np.full(V**L, -1, dtype=np.int64)
    ground[support] = np.arange(support.size)
    r_prefix = _prefix_marginals(leaf_law, V, L)
    r_cond = _conditionals(r_prefix, draft, V, L)
    eff = float(bv_budget_mass(target, r_prefix, L).sum())
    info = {"rounds": sol.info.get("rounds"), "lp_seconds": solved - start,
            "decomposition_seconds": time.perf_counter() - solved, "delta": delta,
            "num_rankings": mixture.num_rankings, "tree_depth": mixture.depth, "paths": int(support.size)}
    return OptimalKPathRule(V, L, K, leaf_law, r_prefix, r_cond, ground, mixture, float(sol.value), eff, info)


def _prefix_marginals(leaf_law: np.ndarray, V: int, L: int) -> np.ndarray:
    """r(a_{1:i}) on V^{<=L} from r on V^L, one depth at a time.  # [num_nodes(V, L)]"""
    off = depth_offsets(V, L)
    out = np.empty(num_nodes(V, L))
    cur = leaf_law
    out[off[L]:] = cur
    for i in range(L - 1, -1, -1):
        cur = cur.reshape(-1, V).sum(1)
        out[off[i]:off[i + 1]] = cur
    return out


def _conditionals(r_prefix: np.ndarray, draft: ARModel, V: int, L: int) -> np.ndarray:
    """q^Gamma(x | a) = r(a x) / r(a) for the internal nodes a (q(. | a) where r(a) = 0).  # [num_nodes(V, L-1), V]"""
    inner = int(depth_offsets(V, L)[L])
    children = r_prefix[1:].reshape(inner, V)
    mass = children.sum(1, keepdims=True)
    safe = np.divide(children, mass, out=np.zeros_like(children), where=mass > 0)
    return np.where(mass > 0, safe, draft.conditionals[:inner])


__all__ = ["MAX_PATHS", "OptimalKPathRule", "RuleTensors", "check_size", "optimal_k_path_rule"]
