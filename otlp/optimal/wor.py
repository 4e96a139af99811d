"""The exact optimal rule for drafts sampled without replacement: priority blocks, Luce choice inside each (issue 45).

For ``WithoutReplacement(q, n)`` no class chain fits the tuple law (the i.i.d. chain's closed forms need the law
below a position to depend on its mass only). This rule is built instead from the polymatroid view of the relaxed
OTLP (GR eq. (2)), on the enumerated support, without a linear program:

* **Feasible acceptances.** A rule sends each tuple omega, of set S, to one of its tokens or rejects it. The vectors
  x (x_i: the mass accepted as token i) it can reach are those with x(A) <= G(A) = P(S meets A) for every set A
  (Gale's supply-demand theorem on the bipartite graph of tuples and tokens); G is a coverage function, so this is
  a polymatroid, and alpha* = max x(V) with x <= p besides (GR Thm 3.1: 1 + min_H psi(H)).
* **The target.** On the decreasing-q/p order, with psi_m = P_m - F_m (F_m = P(omega within the first m tokens),
  :mod:`otlp.core.psi_wor` proves the minimum lies on a prefix) and m* its first argmin: x*_i = p_i, except at the
  first position s of each outer group (s, e] (positions after m*, cut at the suffix minima of psi, ties included,
  as :func:`.chains.records`), where x* = p_s - (psi_e - psi_s). Its total is 1 + psi_{m*} = alpha*.
* **The reject option as one more element R** in every tuple's set, with target 1 - alpha*: z = (x*, 1 - alpha*)
  is then a base of the polymatroid G'(A) = P((S + R) meets A). A base is reached by a mixture of priority orders
  (greedy vertices), and where z lies on faces of the base polytope (its tight sets), every order of the mixture
  ranks each tight set before the rest.
* **The blocks.** Its tight sets here are the outer groups, from the last (lowest ratios) up, then H* = the first m*
  positions with R: a tuple is served by the outer group that holds its lowest-ratio draw, which accepts one of the
  tuple's draws in it; a tuple within H* goes to the inner block, which accepts one of its draws or rejects.
* **Luce choice inside a block.** In the relative interior of a block's base polytope every point is the marginal of
  a Luce (Plackett-Luce) choice: element j of the tuple's members in the block is taken with probability
  e^{theta_j} / sum_{k in members} e^{theta_k}. theta maximises the concave
  sum_j z_j theta_j - sum_omega P(omega) log sum_{k in members(omega)} e^{theta_k}, whose stationarity is exactly
  "every element's expected choice equals its target" (the Luce model's likelihood equations, Hunter 2004, Ann.
  Statist. 32: the maximum exists when the target is interior). Solved here by Newton's method to
  ``TOLERANCE``; elements of target 0 are never chosen. This program plays the part of GR App. S's Step 3 (a convex
  program for the inner coupling, which the paper leaves open for these drafts).

**On the draft's support** (:class:`SupportRule`, the rule :class:`otlp.optimal.OptimalTransport` takes). A draft
only ever draws tokens of q > 0, so the instance is solved on those k tokens plus one token OTHER holding the
target's mass off them (q = 0 there), and read back on all V tokens. This is exact, not a truncation: no tuple covers
a token of q = 0, so its acceptance is 0 in every plan and its only mass is the residual's, (p - R)_+ = p on it
(GR eq. (3)); OTHER's residual share is spread over those tokens in proportion to p. With the support's
C(k, n) sets (:meth:`otlp.core.drafts.WithoutReplacement.set_support`), a draft filtered to its top-k tokens gets
the rule at any V.

The plan S[omega, k] = P(omega) P(choose omega_k) then goes through the LP route's completion
(:class:`.generic.LinearProgramRule`, GR eq. (3)), so every slice is a distribution and the output law is p to
rounding whatever the solver left; the acceptance is alpha* to the Newton residual (reported, and checked against
1 + min psi by the tests). That the blocks have no further tight sets, so that the weights exist and Newton
converges, is evidence, not a proof: every one of the 177 instances of tests/optimal/test_wor.py (every family of
tests/optimal/instances.py, ties, zeros, point masses and alpha* = 1 among them; V <= 8, n <= 4) converges to
1e-12 in a few Newton steps. A block that would not (targets on a face of its polytope, where the weights run off
to infinity) makes the rule take the relaxed LP: never a wrong answer. Cost: the rule is planned on the drafted
sets, not the ordered tuples (the choice reads a tuple's set only: n! fewer rows); per Newton step one pass over
them and a dense solve in a block's size: for small V^n, as the LP route, but without its
V x |support| program (benchmarks/wor.py: 53-1,700x faster than the LP at V = 20-300, n = 2-4).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from otlp.core.drafts import WithoutReplacement
from otlp.core.psi import ratio_order
from otlp.optimal.generic import LinearProgramRule, relaxed_lp_plan

#: a block's Luce weights are accepted when every element's expected choice is within this of its target.
TOLERANCE = 1e-12
#: Newton steps per block before the block gives up (and the rule takes the relaxed LP).
MAX_STEPS = 200


def groups(p: np.ndarray, order: np.ndarray, top: np.ndarray, probs: np.ndarray):  # noqa: ANN201
    """The rule's blocks from the tuples' lowest-ratio positions ``top [M]`` (positions in the decreasing-q/p order
    ``order``, :func:`otlp.core.psi.ratio_order`): ``(psi [V + 1], m_star, cuts)`` with psi_m = P_m - F_m, F_m the
    mass of the tuples within the first m positions, m* its first argmin and ``cuts`` the outer groups' ends
    m* = c_0 < c_1 < ... < c_k = V (suffix minima of psi, ties included)."""
    V = p.size
    F = np.concatenate([[0.0], np.cumsum(np.bincount(top, probs, V))])  # [V + 1]
    P = np.concatenate([[0.0], np.cumsum(p[order])])
    psi = P - F
    m_star = int(np.argmin(psi))
    after = np.minimum.accumulate(psi[::-1])[::-1]  # [V + 1] min of psi at m and after
    cuts = [m for m in range(m_star, V + 1) if psi[m] <= after[m]]  # (V is always one)
    return psi, m_star, cuts


def _set_plan(p: np.ndarray, q: np.ndarray, omegas: np.ndarray, probs: np.ndarray):  # noqa: ANN202
    """The rule's plan (module docstring) on the drafted sets ``omegas [U, n]`` (distinct tokens per row) of masses
    ``probs [U]``: ``(alpha, choice [U, n], residual)`` with ``choice`` the probability that each set's slot is taken
    and ``residual`` the largest gap between a block's expected choices and its targets; None where a block's Newton
    steps did not reach ``TOLERANCE``."""
    U, n = omegas.shape
    V = p.size
    pos = np.empty(V, dtype=np.int64)
    order = ratio_order(p, q)
    pos[order] = np.arange(V)
    at = pos[omegas]  # [U, n] positions
    top = at.max(1)  # [U] the lowest-ratio draw's position
    psi, m_star, cuts = groups(p, order, top, probs)
    target = p.copy()
    for s, e in zip(cuts[:-1], cuts[1:], strict=True):
        target[order[s]] -= psi[e] - psi[s]
    target = np.maximum(target, 0.0)
    out = np.zeros((U, n))
    worst = 0.0
    # blocks: [lo, hi) positions; the inner one [0, m*) with the reject option R
    blocks = [(s, e, False) for s, e in zip(cuts[:-1], cuts[1:], strict=True)] + [(0, m_star, True)]
    for lo, hi, inner in blocks:
        rows = np.flatnonzero((top >= lo) & (top < hi))  # the tuples this block serves
        if rows.size == 0 or hi == lo:
            continue
        member = (at[rows] >= lo) & (at[rows] < hi) & (target[omegas[rows]] > 0)  # [T, n] choosable draws
        got = _luce(omegas[rows], member, probs[rows], target, 1.0 + psi[m_star] if inner else None)
        if got is None:
            return None
        out[rows], residual = got  # [T, n]
        worst = max(worst, residual)
    return float(probs @ out.sum(1)), out, worst


def _luce(w: np.ndarray, member: np.ndarray, probs: np.ndarray, target: np.ndarray, alpha: float | None):  # noqa: ANN202
    """Luce weights for one block by Newton's method: ``(choice [T, n], residual)``, the probability that each
    tuple's slot is taken (rows sum to 1, or to 1 - P(reject) in the inner block, ``alpha`` given: alpha*), or None
    without convergence or where some tuple has nothing to choose."""
    T, n = w.shape
    if T == 0:
        return np.zeros((0, n)), 0.0
    elements, local = np.unique(np.where(member, w, -1), return_inverse=True)
    local = local.reshape(T, n) - (elements[0] == -1)  # [T, n] index of each slot's element (-1: not a member)
    elements = elements[elements >= 0]
    goal = target[elements]
    if alpha is not None:  # the reject option: one more element, in every tuple, target 1 - alpha*
        local = np.concatenate([local, np.full((T, 1), elements.size)], axis=1)
        goal = np.concatenate([goal, [max(1.0 - alpha, 0.0)]])
        if goal[-1] <= 0.0:
            local[:, -1] = -1  # alpha* = 1: never reject
    k = goal.size
    live = local >= 0  # [T, w]
    if k == 0 or not live.any(axis=1).all():
        return None
    safe = np.where(live, local, 0)
    reach = np.bincount(safe[live], np.broadcast_to(probs[:, None], live.shape)[live], k)  # P(j among members)
    theta = np.log(np.maximum(goal, 1e-300) / np.maximum(reach, 1e-300))  # the start: y_j near goal_j alone

    def expected(theta):  # noqa: ANN001, ANN202 - (choice [T, w], y [k], objective)
        logits = np.where(live, theta[safe], -np.inf)
        top = logits.max(1, keepdims=True)
        e = np.exp(logits - top)
        total = e.sum(1, keepdims=True)
        choice = e / total
        y = np.bincount(safe[live], (probs[:, None] * choice)[live], k)
        return choice, y, float(probs @ (top[:, 0] + np.log(total[:, 0])) - goal @ theta)

    choice, y, f = expected(theta)
    for _ in range(MAX_STEPS):
        grad = y - goal
        if np.abs(grad).max() <= TOLERANCE:
            break
        # the Hessian sum_omega P(omega) (diag(pi) - pi pi^T) on the members, one slot against all ([T, w] arrays)
        wc = probs[:, None] * choice  # [T, w] (0 off the members: pi is 0 there)
        H = np.zeros(k * k)
        for a in range(live.shape[1]):
            H -= np.bincount((safe[:, a, None] * k + safe).ravel(), (wc[:, a, None] * choice).ravel(), k * k)
        H = H.reshape(k, k)
        H[np.diag_indices(k)] += y
        free = np.arange(k) != int(np.argmax(goal))  # the gauge: the heaviest element's theta stays
        step = np.zeros(k)
        try:  # positive definite on the free coordinates when every element shares a tuple with another
            step[free] = np.linalg.solve(H[np.ix_(free, free)], -grad[free])
        except np.linalg.LinAlgError:
            step[free] = np.linalg.lstsq(H[np.ix_(free, free)], -grad[free], rcond=1e-15)[0]
        step = np.clip(step, -30.0, 30.0)  # (a first step from far off stays finite)
        t = 1.0
        while t > 1e-12:  # backtracking on the convex objective, or on the residual once f is down to rounding
            c2, y2, f2 = expected(theta + t * step)
            if f2 <= f + 1e-4 * t * float(grad @ step) or np.abs(y2 - goal).max() < np.abs(grad).max():
                break
            t *= 0.5
        theta, choice, y, f = theta + t * step, c2, y2, f2
    residual = float(np.abs(y - goal).max())
    if residual > TOLERANCE:
        return None
    return np.where(live[:, :n], choice[:, :n], 0.0), residual


class WithoutReplacementRule(LinearProgramRule):
    """The exact optimal rule for ``WithoutReplacement(q, n)`` on its drafted sets (module docstring): the rule reads
    a tuple's set only, so it is planned on the C(k, n) sets (:meth:`otlp.core.drafts.WithoutReplacement.set_support`,
    n! fewer rows than the ordered tuples) by :func:`_set_plan`, or by the relaxed LP on the same sets where a block's
    Newton steps stall (``route`` says which), then the LP route's completion and checks
    (:class:`.generic.LinearProgramRule`: ``alpha``, ``alpha_upper``, ``rule``)."""

    def _support(self, draft):  # noqa: ANN001, ANN202
        return draft.set_support()

    def _canonical(self, omegas: np.ndarray):  # noqa: ANN202 - a tuple's set, and each slot's place in it
        return np.sort(omegas, axis=1), np.argsort(np.argsort(omegas, axis=1, kind="stable"), axis=1)

    def _plan(self, draft, sets: np.ndarray, probs: np.ndarray):  # noqa: ANN001, ANN202
        got = _set_plan(self.p, draft.q, sets, probs)
        if got is None:
            self.newton_residual = None  # (route stays the class's "lp")
            return relaxed_lp_plan(self.p, sets, probs)
        alpha, choice, self.newton_residual = got
        self.route = "luce"
        return alpha, probs[:, None] * choice, np.arange(choice.size).reshape(choice.shape)


class SupportRule:
    """The rule for ``p [V]`` and ``WithoutReplacement(q, n)`` (valid distributions) solved on the draft's support
    (module docstring): :class:`WithoutReplacementRule` on the k tokens of q > 0 and OTHER, read back on all V tokens.
    Offers what :class:`otlp.optimal.OptimalTransport` reads of a rule: ``p, n, V, route, alpha, alpha_upper, h_star,
    residual [V], acceptance(), rule(omegas)``. ``cache``: a dict the caller keeps across rows; rows whose support
    instance (the tokens, their p and q, the mass off them, n) is the same share one inner rule."""

    def __init__(self, p: np.ndarray, q: np.ndarray, n: int, cache: dict | None = None):
        self.p, self.n, self.V = p, n, p.size
        on = q > 0
        self.live = np.flatnonzero(on)  # [k] the support, in token order
        self._off = off = np.flatnonzero(~on)
        self._outside = outside = float(p[off].sum())
        p1, q1 = p[self.live], q[self.live]
        if outside > 0:  # OTHER, never drafted: its only mass is the residual's
            p1, q1 = np.append(p1, outside), np.append(q1, 0.0)
        key = (self.live.tobytes(), p1.tobytes(), q1.tobytes(), n)  # O(k) bytes
        self.inner = cache.get(key) if cache is not None else None
        if self.inner is None:
            self.inner = WithoutReplacementRule(p1, WithoutReplacement(q1, n))
            if cache is not None:
                cache[key] = self.inner
        self.route, self.alpha = self.inner.route, self.inner.alpha

    @cached_property
    def residual(self) -> np.ndarray:
        """``[V]`` the inner rule's residual on the support, OTHER's share spread over the tokens of q = 0 in
        proportion to p (on first use: a sampler reads it only for a rejected row)."""
        k = self.live.size
        own = self.inner.residual  # [k (+ 1)]
        out = np.zeros(self.V)  # [V]
        out[self.live] = own[:k]
        if self._outside > 0:
            out[self._off] = own[k] * self.p[self._off] / self._outside
        return out

    @property
    def alpha_upper(self) -> float:
        return self.inner.alpha_upper  # (computed on first use)

    @property
    def h_star(self) -> np.ndarray | None:
        h = self.inner.h_star
        return None if h is None else self.live[h[h < self.live.size]]  # (OTHER, of q = 0, never lowers psi)

    def acceptance(self) -> float:
        return self.inner.acceptance()

    def rule(self, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`.generic.LinearProgramRule.rule` on tuples of the full vocabulary ``omegas [M, n]``: a token off
        the support goes to an index the inner rule never drew, so its tuple takes the "never produced" branch."""
        k = self.live.size
        at = np.minimum(np.searchsorted(self.live, omegas), k - 1)  # [M, n]
        local = np.where(self.live[at] == omegas, at, k + 1)  # k + 1: past OTHER too
        return self.inner.rule(local)
