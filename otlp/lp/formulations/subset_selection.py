"""Subset selection: alpha* = 1 + min_H psi(H), psi(H) = p(H) - P_draft(omega in H^n) (GR eq. (4), Thm 3.1).

Methods (``SubsetSelection(p, draft).solve(method=...)``):

* ``"sorted_prefix"`` -- the best prefix of the tokens sorted by decreasing q/p (hu2025; GR Lemma 6.3 with A = {}, B =
  V), O(V log V). Valid for ``IID`` (proved) and ``WithoutReplacement`` (GR App. S citing hu2025 Thm 4; proved in
  :mod:`otlp.core.psi_wor`, whose F on every prefix this route takes; no counterexample in 20,000 random instances with
  V <= 8, n <= 3 either, and the tests check seeded batches against brute force). **Not valid for Independent drafts**
  although SPEC.md's table says so: no single q/p order exists, and the natural one (the mean of the q_k over p)
  misses the minimum, e.g. p = (.75, .1, 0, .15), q1 = (0, .2, .8, 0), q2 = (.75, 0, 0, .25): min psi = -0.05 at H =
  {2, 3}, every prefix gives >= 0 (tests/lp/formulations/test_subset_selection.py). Refused for Independent (n >= 2,
  distinct q_k), Greedy, SpecHub and Joint.
* ``"brute_force"`` -- all 2^V subsets (V <= 20).
* ``"mincut"`` -- one s-t min cut. For IID / Independent with n = 2 the submodular QPBO of GR App. D on V + 2 nodes.
  GR writes rho(x) = sum_i p(i) x_i **+** sum_ij q1(i) q2(j) x_i x_j; the sign of the quadratic term is a typo
  (note P13): psi(H) = p(H) - q1(H) q2(H), so the pair terms are -q1(i) q2(j) x_i x_j, which is what makes it
  submodular. Using sum_j q2(j) = 1 it is graph-representable as
      psi(H) = sum_i (p(i) - q1(i)) x_i + sum_{i != j} q1(i) q2(j) x_i (1 - x_j),     x = 1_H,
  i.e. arcs i -> j of capacity q1(i) q2(j), unary terms on s -> i / i -> t, H = the source side. For every other
  scheme (and n = 1, 3, ...) the tuple network Omega of GR §5.2, whose min cut has H* on the sink side
  (:mod:`otlp.lp.formulations.maxflow`). Any network backend (``ortools``, ``networkx``) solves the cut.
* ``"submodular"`` -- Fujishige-Wolfe minimum-norm point over the base polytope B(psi) (Fujishige 1980, Wolfe 1976;
  Chakrabarty-Jain-Kothari 2014), with psi evaluated by the scheme (closed forms where they exist). It stops with a
  **certificate**: the minimum-norm iterate x in B(psi) gives min psi >= x^-(V) = sum_i min(x_i, 0) (Edmonds), and the
  best level set of x is the minimiser, so ``psi(H) - x^-(V)`` is a proven gap.

psi is submodular for **every** draft scheme, not only independent ones (GR Thm C.1 proves the independent case):
P_draft(omega in H^n) = sum_omega P_draft(omega) 1[set(omega) subset of H], and each 1[T subset of H] is supermodular
(1[T in A or B] + 1[T in A and B] >= 1[T in A] + 1[T in B]), so P(H^n) is supermodular and psi = p(H) - P(H^n) is
submodular. (The tests also check the lattice inequality exhaustively on random Joint tables.) The Wolfe route
therefore never has to refuse a draft scheme; its certificate would expose a non-submodular function.

``"auto"``: sorted prefix for IID / WithoutReplacement, QPBO min cut for Independent with n = 2, the closed form
of :func:`otlp.core.subsets.min_psi` (checked by a certificate-free recomputation) for Greedy / SpecHub being modular
after forcing, and Wolfe otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from otlp.core.distributions import check_distribution
from otlp.core.drafts import IID, DraftScheme, Greedy, Independent, SpecHub, WithoutReplacement, as_draft
from otlp.core.errors import InputError
from otlp.lp.formulations.base import Formulation
from otlp.lp.formulations.maxflow import network_size, relaxed_network, support_size_bound
from otlp.lp.ir import MEMORY_LIMIT_BYTES, FlowNetwork, ModelSize
from otlp.lp.solution import Certificate, Solution

METHODS = ("auto", "sorted_prefix", "brute_force", "mincut", "submodular", "closed_form")


@dataclass
class SubsetSolution(Solution):
    """A :class:`Solution` of subset selection: ``value`` = min psi, :attr:`alpha` = 1 + value, :attr:`h_star` the
    minimiser (``primal["H"]``, bool [V]). ``info["lower_bound"]``, where the method gives one, is a proven lower
    bound on min psi (max flow, or x^-(V) of the Wolfe iterate); :meth:`certificate` re-checks both."""

    p: np.ndarray | None = None
    draft: DraftScheme | None = None

    @property
    def alpha(self) -> float:
        return 1.0 + float(self.value)

    @property
    def h_star(self) -> np.ndarray:
        return self.primal["H"]

    def certificate(self, tol: float = 1e-9) -> Certificate:
        """psi(H) recomputed from the draft scheme; the lower bound recomputed from its own evidence (the Wolfe
        vertices from their orders and weights; the cut network's flow re-checked by the network certificate)."""
        from otlp.core.psi import psi

        primal = float(psi(self.p, self.draft, self.h_star))
        violation = abs(primal - float(self.value))
        lower, dual_violation = None, None
        if "wolfe_orders" in self.info:
            x = _combination(self.p, self.draft, self.info["wolfe_orders"], self.info["wolfe_weights"])
            lower = float(np.minimum(x, 0.0).sum())
            dual_violation = 0.0
        elif "network_solution" in self.info:
            net_cert = self.info["network_solution"].certificate(tol)
            lower = float(net_cert.primal_value) + self.info["cut_constant"]
            dual_violation = float(net_cert.primal_violation)
        gap = None if lower is None else primal - lower
        return Certificate(primal, lower, gap, violation, dual_violation, False, tol)


def _greedy_vertex(p: np.ndarray, draft: DraftScheme, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edmonds' greedy vertex of B(psi) for ``order [V]``: ``x[order[k]] = psi(S_k+1) - psi(S_k)``; also returns
    psi on the prefixes ``[V + 1]`` (the level sets of any x sorted by ``order``)."""
    V = p.size
    prefix = np.arange(V + 1)[:, None] > np.arange(V)[None, :]  # [V + 1, V]: row k = first k positions
    masks = prefix[:, np.argsort(order)]  # column j looks up the position of token j in order
    values = masks.astype(np.float64) @ p - draft.subset_probability(masks)  # [V + 1]
    values[0] = 0.0  # psi(empty) = 0 exactly
    x = np.empty(V)
    x[order] = np.diff(values)
    return x, values


def _combination(p: np.ndarray, draft: DraftScheme, orders: np.ndarray, weights: np.ndarray) -> np.ndarray:
    vertices = np.stack([_greedy_vertex(p, draft, o)[0] for o in orders])  # [k, V]
    return weights @ vertices


def _affine_minimiser(points: np.ndarray) -> np.ndarray:
    """Weights mu (sum 1) of the min-norm point of the affine hull of ``points [k, V]`` (KKT system, lstsq)."""
    k = points.shape[0]
    kkt = np.zeros((k + 1, k + 1))
    kkt[:k, :k] = points @ points.T
    kkt[:k, k] = kkt[k, :k] = 1.0
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
    mu = sol[:k]
    return mu / mu.sum()


def wolfe_min_psi(p: np.ndarray, draft: DraftScheme, tol: float = 1e-12,
                  max_iter: int = 10_000) -> tuple[float, np.ndarray, float, dict]:
    """Fujishige-Wolfe minimum-norm point for min psi. Returns ``(value, mask, lower_bound, info)`` with
    ``value - lower_bound <= tol`` on success (``info["converged"]``); ``info`` keeps the greedy orders and
    weights of the final iterate (its certificate)."""
    V = p.size
    orders = [np.arange(V)]
    vertex, values = _greedy_vertex(p, draft, orders[0])
    points = vertex[None, :]  # [k, V]
    lam = np.ones(1)
    x = vertex
    best, best_mask, lower = 0.0, np.zeros(V, dtype=bool), -np.inf
    tiny = 1e-15
    converged = False
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 - reported below
        order = np.argsort(x, kind="stable")
        q, values = _greedy_vertex(p, draft, order)  # linear minimiser over B(psi) and psi on x's level sets
        k = int(np.argmin(values))
        if values[k] < best:
            best = float(values[k])
            best_mask = np.zeros(V, dtype=bool)
            best_mask[order[:k]] = True
        lower = float(np.minimum(x, 0.0).sum())
        if best - lower <= tol:
            converged = True
            break
        if x @ x - x @ q <= tiny * max(1.0, x @ x):  # Wolfe's major-cycle test: x is (numerically) the min-norm point
            break
        points = np.vstack([points, q])
        lam = np.append(lam, 0.0)
        orders.append(order)
        for _ in range(points.shape[0] + 1):  # minor cycles: at most one point dropped each time
            mu = _affine_minimiser(points)
            if np.all(mu > tiny):
                lam = mu
                break
            shrink = (mu <= tiny) & (lam - mu > 0)
            theta = float(np.min(lam[shrink] / (lam[shrink] - mu[shrink]))) if shrink.any() else 1.0
            lam = theta * mu + (1.0 - theta) * lam
            keep = lam > tiny
            points, lam = points[keep], lam[keep] / lam[keep].sum()
            orders = [o for o, kept in zip(orders, keep, strict=True) if kept]
        x = lam @ points
    info = {"converged": converged, "iterations": iterations, "wolfe_orders": np.stack(orders),
            "wolfe_weights": lam.copy(), "gap": best - lower}
    return best, best_mask, lower, info


def qpbo_network(p: np.ndarray, q1: np.ndarray, q2: np.ndarray | None) -> tuple[FlowNetwork, float]:
    """The QPBO cut network of GR App. D (sign corrected) for psi(H) = p(H) - q1(H) q2(H), or p(H) - q1(H) when
    ``q2`` is None (n = 1: no pair arcs).

    Nodes: 0 = s, 1..V = tokens, V + 1 = t; x_i = 1 (i in H) <=> token on the source side. Returns the network and
    the constant c with ``psi(H) = c + cut(H)`` for every H.
    """
    V = p.size
    theta = p - q1  # unary coefficient after the pair terms were written as q1(i) q2(j) x_i (1 - x_j)
    tokens = np.arange(V, dtype=np.int64)
    ii, jj = np.meshgrid(tokens, tokens, indexing="ij")
    weight = np.outer(q1, q2) if q2 is not None else np.zeros((V, V))  # [V, V], q1(i) q2(j)
    pair = (ii != jj) & (weight > 0)
    src = theta < 0  # theta x = theta + |theta| (1 - x): pay |theta| when i is on the sink side
    tails = np.concatenate([np.zeros(int(src.sum()), dtype=np.int64), 1 + tokens[~src], 1 + ii[pair]])
    heads = np.concatenate([1 + tokens[src], np.full(int((~src).sum()), V + 1, dtype=np.int64), 1 + jj[pair]])
    caps = np.concatenate([-theta[src], theta[~src], weight[pair]])
    a, b = int(src.sum()), int((~src).sum())
    net = FlowNetwork("SubsetSelection QPBO", V + 2, tails, heads, caps, 0, V + 1,
                      arc_blocks={"source": slice(0, a), "sink": slice(a, a + b), "pairs": slice(a + b, caps.size)})
    return net, float(theta[src].sum())


def _qpbo_drafts(draft: DraftScheme) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(q1, q2) when psi = p(H) - q1(H) q2(H) ((q1, None) for n = 1: psi = p(H) - q1(H)), else None."""
    if isinstance(draft, IID) and draft.n <= 2:
        return draft.q, (draft.q if draft.n == 2 else None)
    if isinstance(draft, Independent) and draft.n <= 2:
        return draft.qs[0], (draft.qs[1] if draft.n == 2 else None)
    return None


class SubsetSelection(Formulation):
    """min_H psi(H) (GR eq. (4)); see the module docstring for the methods and where each one is valid.

    ``solve(method=...)`` runs a method directly; ``solve(backend="ortools" | "networkx")`` solves the min-cut form
    with that network backend. The result is a :class:`SubsetSolution`: ``value`` = min psi, ``alpha`` = alpha*,
    ``h_star`` the minimiser.

    Examples
    --------
    >>> import otlp
    >>> from otlp.lp.formulations.subset_selection import SubsetSelection
    >>> sol = SubsetSelection([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2)).solve()
    >>> round(sol.alpha, 12), sol.h_star.tolist()
    (0.85, [True, False, False])
    """

    name = "SubsetSelection"
    kinds = ("network",)

    def __init__(self, p: object, draft: DraftScheme, method: str = "auto"):
        self.draft = as_draft(draft)
        self.p = check_distribution(p, "p", size=self.draft.V)
        if method not in METHODS:
            raise InputError(f"unknown subset-selection method {method!r}; expected one of {', '.join(METHODS)}")
        self.method = method
        self._cut: tuple[FlowNetwork, float, str] | None = None

    def resolve(self, method: str | None = None) -> str:
        """The concrete method "auto" stands for with this draft scheme."""
        method = method or self.method
        if method != "auto":
            return method
        d = self.draft
        if isinstance(d, (IID, WithoutReplacement)) or (isinstance(d, Independent) and d.n == 1):
            return "sorted_prefix"
        if isinstance(d, Independent) and d.n == 2:
            return "mincut"
        if isinstance(d, (Greedy, SpecHub)):
            return "closed_form"
        return "submodular"

    # -- the min-cut form (for network backends) -------------------------------------------------------------
    def kind_for(self, backend: str) -> str:
        from otlp.lp.solvers import capabilities

        if "network" not in capabilities(backend):
            raise InputError(f"SubsetSelection reads H* from a min cut, which backend {backend!r} does not return; "
                             "use a network backend (ortools, networkx) or solve(method=...)")
        return "network"

    def size(self, kind: str | None = None) -> ModelSize:
        V = self.draft.V
        if _qpbo_drafts(self.draft) is not None:
            return ModelSize(V * V + V, V + 2, 2 * (V * V + V))
        return network_size(V, support_size_bound(self.draft), self.draft.n)

    def build(self, kind: str | None = None) -> FlowNetwork:
        if self._cut is None:
            pair = _qpbo_drafts(self.draft)
            if pair is not None:
                net, constant = qpbo_network(self.p, *pair)
                self._cut = (net, constant, "qpbo")
            else:
                self._cut = (relaxed_network(self.p, self.draft, "SubsetSelection Omega").network, -1.0, "omega")
        return self._cut[0]

    # -- solve -------------------------------------------------------------------------------------------------
    def solve(self, backend: str | None = None, *, method: str | None = None,
              memory_limit: float = MEMORY_LIMIT_BYTES, tol: float = 1e-12, **options: object) -> SubsetSolution:
        """min psi by ``method`` (default: the constructor's), or by the min cut on ``backend`` when one is given."""
        if method is not None and method not in METHODS:
            raise InputError(f"unknown subset-selection method {method!r}; expected one of {', '.join(METHODS)}")
        method = "mincut" if backend is not None else self.resolve(method)
        start = time.perf_counter()
        if method == "mincut":
            return self._solve_mincut(backend, memory_limit, **options)
        p, d = self.p, self.draft
        info: dict = {}
        if method == "sorted_prefix":
            value, mask = self._sorted_prefix()
        elif method == "brute_force":
            from otlp.core.psi import brute_force_min_psi

            value, mask = brute_force_min_psi(p, d)
            info["lower_bound"] = value  # exhaustive
        elif method == "closed_form":
            if not isinstance(d, (Greedy, SpecHub)):
                raise InputError("method 'closed_form' is for Greedy and SpecHub drafts (psi is modular once the "
                                 f"forced tokens are in H); got {type(d).__name__}")
            from otlp.core.psi import closed_form_min_psi

            value, mask = closed_form_min_psi(p, d)
        else:  # submodular
            value, mask, lower, wolfe = wolfe_min_psi(p, d, tol=tol, **options)
            info.update(wolfe)
            info["lower_bound"] = lower
        seconds = {"build": 0.0, "solve": time.perf_counter() - start}
        status = "optimal" if info.get("converged", True) else "time_limit"
        return SubsetSolution(float(value), status, {"H": np.asarray(mask, dtype=bool)}, None, seconds, method,
                              self.name, info=info, p=p, draft=d)

    def _sorted_prefix(self) -> tuple[float, np.ndarray]:
        from otlp.core.psi import sorted_prefix_psi

        d, p = self.draft, self.p
        if isinstance(d, Independent) and d.n == 1:
            d = IID(d.qs[0], 1)
        if isinstance(d, IID):
            order, values = sorted_prefix_psi(p, d.q, d.n)
        elif isinstance(d, WithoutReplacement):  # F on every prefix in O(n V) per quadrature node (otlp.core.psi_wor)
            from otlp.core.psi_wor import wor_prefix_psi

            order, values, _ = wor_prefix_psi(p, d.q, d.n)
        else:
            raise InputError(
                f"the sorted-prefix rule is proved for IID drafts (and holds for WithoutReplacement), not for "
                f"{type(d).__name__} drafts: for Independent drafts no single q/p order works (see "
                "otlp.lp.formulations.subset_selection); use method 'mincut' (n = 2), 'submodular' or 'brute_force'")
        m = int(np.argmin(values))
        mask = np.zeros(d.V, dtype=bool)
        mask[order[:m]] = True
        return float(values[m]), mask

    def _solve_mincut(self, backend: str | None, memory_limit: float, **options: object) -> SubsetSolution:
        from otlp.lp.solvers import solve as solve_model

        if backend is None:
            backend = "ortools"
            try:
                import ortools.graph.python.max_flow  # noqa: F401
            except ImportError:
                backend = "networkx"
        self.kind_for(backend)
        self.size().check(self.name, memory_limit)
        start = time.perf_counter()
        net = self.build()
        build = time.perf_counter() - start
        _, constant, form = self._cut
        sol = solve_model(net, backend, **options)
        seconds = {"build": build + sol.seconds.get("build", 0.0), "solve": sol.seconds.get("solve", 0.0)}
        info = {"network_solution": sol, "cut_constant": constant, "form": form}
        if not sol.optimal:
            return SubsetSolution(float("nan"), sol.status, {"H": np.zeros(self.draft.V, dtype=bool)}, None,
                                  seconds, backend, self.name, net, info=info, p=self.p, draft=self.draft)
        side = np.asarray(sol.dual["source_side"], dtype=bool)
        V = self.draft.V
        mask = side[1: V + 1].copy() if form == "qpbo" else ~side[1: V + 1]
        value = constant + float(sol.value)  # min cut = max flow (within sol.value_bound)
        info["lower_bound"] = value
        return SubsetSolution(value, "optimal", {"H": mask}, None, seconds, backend, self.name, net,
                              sol.value_bound, info, p=self.p, draft=self.draft)
