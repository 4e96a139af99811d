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
sets, not the ordered tuples (the choice reads a tuple's set only: n! fewer rows); per Newton step a few passes
over them and a dense solve in the number of elements: for small V^n, as the LP route, but without its
V x |support| program (benchmarks/wor.py: 53-1,700x faster than the LP at V = 20-300, n = 2-4). :func:`set_plan`
solves many rows at once (a row's blocks, and the rows, share no element: their Newton systems are independent),
which :class:`SupportBatch` uses for a sampler's rows. It is the reference: written once for numpy arrays and for
tensors (a fixed number of Newton steps, no host sync: :func:`capped_plan`, the device sampler's plan), with the
host's C kernel (:func:`host_plan`, ``otlp/backend/native/wor_plan.c``) pinned to it by tests.
"""

from __future__ import annotations

from functools import cached_property
from math import inf

import numpy as np

from otlp.core import xp as X
from otlp.core.drafts import WithoutReplacement, combinations, mass_ranks, set_probabilities
from otlp.core.psi import ratio_keys
from otlp.lp.formulations.completion import residual_law
from otlp.optimal.generic import LinearProgramRule, relaxed_lp_plan

#: a block's Luce weights are accepted when every element's expected choice is within this of its target.
TOLERANCE = 1e-12
#: Newton steps per block before the block gives up (and the rule takes the relaxed LP).
MAX_STEPS = 200
#: backtracking halvings of a Newton step on the host (down to a step size of 2e-12)
HOST_TRIALS = 40
#: the fixed Newton steps and step sizes tried (1, 1/2) of :func:`set_plan` on tensors: on 960 rows of close drafts
#: filtered to their top 4-50 tokens (sigma 0.5-2, n = 2-4, p = softmax(5 z)) 12 full steps alone converged every
#: row, 8 steps 953 (the host takes at most 10 steps there, with backtracking); each try is one more evaluation of
#: every set's choice, each step one more Hessian (the route's kernel launches)
DEVICE_STEPS = 12
DEVICE_TRIALS = 2


def set_plan(p, q, sets, probs, *, steps: int | None = None, trials: int | None = None,  # noqa: ANN001, ANN201
             kernel: bool = False):
    """The rule's plan (module docstring) for rows ``p, q [B, E]`` on the drafted sets ``sets int [U, n]`` (distinct
    ids, the same for every row) of masses ``probs [B, U]``: ``(alpha [B], choice [B, U, n], residual [B])``, with
    ``choice`` the probability that each set's slot is taken and ``residual`` the largest gap between an element's
    expected choice and its target (inf where a row's Newton steps did not reach ``TOLERANCE``: that row has no plan).

    Per row, on the decreasing-q/p order: psi_m = P_m - F_m (F_m the mass of the sets within the first m positions),
    m* its first argmin, the outer groups' cuts m* = c_0 < c_1 < ... < c_k = E (suffix minima of psi, ties included,
    as :func:`.chains.records`), the targets x* and the blocks: a set is served by the block of its lowest-ratio draw.
    The Luce weights of every block of every row are solved together (a row's blocks share no element, so its
    Hessian is block diagonal; one backtracking step size a row).

    numpy arrays: up to ``steps`` Newton steps (default ``MAX_STEPS``), each backtracking until it descends, stopping
    when every row is done. Tensors (one device, float64): the same equations with static shapes and no host sync,
    for a sampler on an accelerator: exactly ``steps`` Newton steps (default ``DEVICE_STEPS``), each trying
    ``trials`` step sizes 1, 1/2, ... (default ``DEVICE_TRIALS``), a row that is done or finds no descent staying
    put; a singular system steps 0 (``torch.linalg.solve_ex``). ``kernel=True`` (tensors, Triton: a CUDA device, or
    the CPU under ``TRITON_INTERPRET=1``) takes those steps in one Triton program per row instead
    (:mod:`.wor_triton`, from this setup; the same plan to rounding)."""
    xp = X.namespace(p)
    host = X.is_numpy(p)
    steps = (MAX_STEPS if host else DEVICE_STEPS) if steps is None else steps
    trials = (HOST_TRIALS if host else DEVICE_TRIALS) if trials is None else trials
    B, E = p.shape
    U, n = sets.shape
    rows = X.arange_like(p, B)[:, None]
    order = X.sort_descending(ratio_keys(p, q))  # [B, E] decreasing q/p, stable (as psi.ratio_order)
    pos = X.inverse_permutation(order)  # [B, E] each element's position
    at = pos[:, sets.T]  # [B, n, U] (slot-major: a reduction over a set's slots adds whole rows)
    top = at.max(1) if host else at.amax(1)  # [B, U] the lowest-ratio draw's position
    F = X.padded_cumsum(X.bincount(rows * E + top, probs, B * E).reshape(B, E))  # [B, E + 1]
    psi = X.padded_cumsum(X.take(p, order)) - F  # [B, E + 1]
    m_star = X.argmin_rows(psi)  # [B]
    m = X.arange_like(p, E + 1)
    after = X.suffix_min(psi)  # [B, E + 1] min of psi at m and after
    cut = (m >= m_star[:, None]) & (psi <= after)  # [B, E + 1] (E is always one)
    nxt = X.suffix_min(xp.where(cut, m, E))  # [B, E + 1] the first cut at or after m
    nxt = X.concat([nxt[:, 1:], X.full(nxt, (B, 1), E)], 1)  # the first cut after m
    start = cut[:, :E]  # [B, E] positions that open an outer group (s, e]: x* = p_s - (psi_e - psi_s) there
    drop = xp.where(start, X.take(psi, nxt[:, :E]) - psi[:, :E], 0.0)
    target = X.maximum(X.take(p, order) - drop, 0.0)  # [B, E] by position
    block = xp.where(m[:E] < m_star[:, None], 0, X.cumsum(cut[:, :E]))  # [B, E]
    alpha_star = 1.0 + X.take(psi, m_star[:, None])[:, 0]  # [B]
    # elements: the E tokens, then the reject option R (the inner block's, target 1 - alpha*)
    goal = X.concat([X.take(target, pos), X.maximum(1.0 - alpha_star, 0.0)[:, None]], 1)  # [B, G]
    elem_block = X.concat([X.take(block, pos), X.full(block, (B, 1), 0)], 1)  # [B, G] 0: the inner block
    served = X.take(block, top)  # [B, U] the block that serves each set
    # [B, n + 1, U] arrays: a set's slots, then R
    S, G = n + 1, E + 1
    elem = X.concat([xp.broadcast_to(sets.T[None], (B, n, U)), X.full(sets, (B, 1, U), E)], 1)  # [B, S, U]
    live = X.concat([(X.take(block, at.reshape(B, -1)).reshape(B, n, U) == served[:, None, :])
                     & (X.take(goal, elem[:, :n].reshape(B, -1)).reshape(B, n, U) > 0),
                     ((served == 0) & (goal[:, E:] > 0))[:, None, :]], 1)  # [B, S, U] the members
    flat = (rows[:, :, None] * G + elem).reshape(-1)  # [B S U] into [B * G]
    reach = X.bincount(flat, xp.where(live, probs[:, None, :], 0.0), B * G).reshape(B, G)  # P(j among the members)
    present = reach > 0  # [B, G] the elements the Newton steps solve for
    any_live = live.any(1, keepdims=True) if host else live.any(1, keepdim=True)  # [B, 1, U]
    failed = ((probs > 0) & ~any_live[:, 0]).any(1)  # a set with nothing to choose
    # the gauge: in each row's block, its present element of largest goal (the first on ties) keeps theta
    nb = int(elem_block.max()) + 1 if host else G  # (a static bound on a device)
    cell = rows * nb + elem_block  # [B, G] each element's (row, block)
    key = xp.where(present, goal, -1.0)
    best = X.scatter_extreme(cell, key, B * nb, largest=True)
    ids = xp.where(present & (key == best[cell]), X.arange_like(p, G), G)
    fixed = ~present | (X.arange_like(p, G) == X.scatter_extreme(cell, ids, B * nb, largest=False)[cell])  # [B, G]
    theta = xp.log(X.maximum(goal, 1e-300) / X.maximum(reach, 1e-300))  # the start: y_j near goal_j alone
    if kernel:
        from otlp.optimal import wor_triton

        choice, residual = wor_triton.newton(theta, goal, fixed, present, sets, live, probs, failed, steps=steps,
                                             trials=trials, tolerance=TOLERANCE)  # [B, U, n], [B]
        return (probs[:, :, None] * choice).sum((1, 2)), choice, residual

    def expected(theta):  # noqa: ANN001, ANN202 - (choice [B, S, U], y [B, G], objective [B])
        logits = xp.where(live, theta.reshape(-1)[flat].reshape(B, S, U), -inf)
        peak = xp.where(any_live, logits.max(1, keepdims=True) if host else logits.amax(1, keepdim=True), 0.0)
        e = xp.exp(logits - peak)  # (peak: 0 for a set of mass 0 with no member, no nan)
        total = xp.where(any_live, e.sum(1, keepdims=True) if host else e.sum(1, keepdim=True), 1.0)
        choice = e / total
        y = X.bincount(flat, probs[:, None, :] * choice, B * G).reshape(B, G)
        return choice, y, (probs * (peak + xp.log(total))[:, 0]).sum(1) - (chosen * theta).sum(1)

    def gap(y):  # noqa: ANN001, ANN202 - [B] the largest |y - goal| over the present elements
        return X.max_rows(xp.where(present, xp.abs(y - goal), 0.0))

    pair = (flat.reshape(B, S, 1, U) * G + elem[:, None]).reshape(B * S, -1)  # [B S, S U] (j, l) into [B G G]
    chosen = xp.where(present, goal, 0.0)  # [B, G] the objective's linear term
    choice, y, f = expected(theta)
    residual = gap(y)
    diag = X.arange_like(p, G)
    pinned = fixed[:, :, None] | fixed[:, None, :]  # [B, G, G] the fixed coordinates' rows and columns
    eye = diag[:, None] == diag[None, :]
    for _ in range(steps):
        done = residual <= TOLERANCE
        if host and (done | failed).all():
            break
        grad = xp.where(fixed, 0.0, y - goal)  # [B, G]
        # the Hessian sum_S P(S) (diag(pi) - pi pi^T) on the members, one slot against all
        wc = probs[:, None, :] * choice  # [B, S, U] (0 off the members: pi is 0 there)
        H = -sum(X.bincount(pair[a::S], wc[:, a, None] * choice, B * G * G) for a in range(S)).reshape(B, G, G)
        H[:, diag, diag] += y
        H = xp.where(pinned, eye, H)  # fixed coordinates: step 0
        step = _newton_step(H, grad)
        searching = ~(done | failed)
        step = xp.where(searching[:, None], X.minimum(X.maximum(step, -30.0), 30.0), 0.0)  # (a first step stays finite)
        t = X.full(p, (B,), 1.0)
        slope = (grad * step).sum(1)
        new = (choice, y, f, residual)
        for _ in range(trials):  # backtracking on the convex objective, or on the residual once f is down to rounding
            if host and not searching.any():
                break
            c2, y2, f2 = expected(theta + t[:, None] * step)
            g2 = gap(y2)
            ok = (f2 <= f + 1e-4 * t * slope) | (g2 < residual)
            take = searching & (ok | (t <= 2e-12)) if host else searching & ok  # (host: the last size tried, as ok)
            new = tuple(xp.where(take.reshape((B,) + (1,) * (a.ndim - 1)), b2, a)
                        for a, b2 in zip(new, (c2, y2, f2, g2), strict=True))
            theta = xp.where(take[:, None], theta + t[:, None] * step, theta)
            searching = searching & ~take
            t = xp.where(searching, t * 0.5, t)
        choice, y, f, residual = new
    residual = xp.where(failed | (residual > TOLERANCE), inf, residual)
    choice = xp.where(live[:, :n], choice[:, :n], 0.0)
    choice = choice.transpose(0, 2, 1) if host else choice.transpose(1, 2)  # [B, U, n]
    return (probs[:, :, None] * choice).sum((1, 2)), choice, residual


def host_plan(p: np.ndarray, q: np.ndarray, sets: np.ndarray, probs: np.ndarray):  # noqa: ANN201
    """:func:`set_plan` on numpy rows (the same ``(alpha, choice, residual)``) by its C kernel,
    ``otlp_wor_plan`` in ``otlp/backend/native/wor_plan.c``, each row on its own, where the kernels are built (the
    same optimum to the Newton tolerance: tests/backend/test_native.py), else by :func:`set_plan`; the one place the
    host chooses. In numpy a small plan is a few hundred array calls (0.5 ms at k = 10, n = 2), in C a few
    microseconds."""
    from otlp.backend import native  # (loaded on first use)

    got = native.wor_plan(p, q, sets, probs, MAX_STEPS, TOLERANCE)
    if got is None:
        return set_plan(p, q, sets, probs)
    choice, residual = got
    return (probs[:, :, None] * choice).sum((1, 2)), choice, residual


def host_set_probabilities(q: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """:func:`otlp.core.drafts.set_probabilities` on numpy rows by its C kernel where built (bit for bit:
    tests/backend/test_native.py), else the reference."""
    from otlp.backend import native

    got = native.set_probabilities(q, *mass_ranks(q), sets)
    return set_probabilities(q, sets) if got is None else got


def _newton_step(H, grad):  # noqa: ANN001, ANN202 - [B, G, G], [B, G] -> [B, G]
    """Solve H step = -grad per row: numpy's solve, by least squares where a row is singular; torch's ``solve_ex``
    (no host sync), step 0 where a row is singular."""
    if X.is_numpy(H):
        try:  # positive definite on the free coordinates when every element shares a set with another
            return np.linalg.solve(H, -grad[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:
            return np.stack([np.linalg.lstsq(H[b], -grad[b], rcond=1e-15)[0] for b in range(H.shape[0])])
    import torch

    step, info = torch.linalg.solve_ex(H, -grad[:, :, None])
    return torch.where((info == 0)[:, None], step[:, :, 0].nan_to_num(0.0, 0.0, 0.0), 0.0)


def capped_plan(p, q, sets, *, steps: int | None = None, trials: int | None = None,  # noqa: ANN001, ANN201
                kernel: bool = False):
    """:func:`set_plan` on rows ``p, q [B, E]`` (numpy or tensors; each row one instance: its draft's support and
    OTHER) for the sets ``sets [U, n]`` of every n of the E elements: ``(choice [B, U, n], accepted [B, E],
    residual [B])``, each element's accepted mass x_i = sum_S P(S) choice capped at p_i, by scaling its choices
    by min(1, p_i / x_i). Capped, any choice is a rule whose output law is p (GR eq. (3): the residual (p - x)
    completes it): a row whose Newton steps did not converge (``residual`` inf; the rows' fixed steps on a device)
    keeps that law and accepts less than alpha*; a converged row moves by rounding only. What the sampler reads on
    a device, with static shapes (``kernel``: :func:`set_plan`'s Newton steps in its Triton kernel)."""
    xp = X.namespace(p)
    probs = set_probabilities(q, sets)  # [B, U]
    _, choice, residual = set_plan(p, q, sets, probs, steps=steps, trials=trials, kernel=kernel)
    x = accepted_mass(sets, probs, choice, p.shape[1])  # [B, E]
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = xp.where(x > p, p / xp.where(x > 0, x, 1.0), 1.0)  # [B, E]
    choice = choice * scale[:, sets]  # [B, U, n] each slot's element's scale
    return choice, X.minimum(x, p), residual


def accepted_mass(sets, probs, choice, E: int):  # noqa: ANN001, ANN201
    """x_i = sum_S P(S) choice(S, i), each element's accepted mass, ``[B, E]`` for ``sets [U, n]`` of the E elements,
    ``probs [B, U]`` and ``choice [B, U, n]`` (numpy arrays or tensors)."""
    B = probs.shape[0]
    at = X.arange_like(probs, B)[:, None, None] * E + sets[None]  # [B, U, n] into [B * E]
    return X.bincount(at, probs[:, :, None] * choice, B * E).reshape(B, E)


class WithoutReplacementRule(LinearProgramRule):
    """The exact optimal rule for ``WithoutReplacement(q, n)`` on its drafted sets (module docstring): the rule reads
    a tuple's set only, so it is planned on the C(k, n) sets (:meth:`otlp.core.drafts.WithoutReplacement.set_support`,
    n! fewer rows than the ordered tuples) by :func:`set_plan`, or by the relaxed LP on the same sets where a block's
    Newton steps stall (``route`` says which), then the LP route's completion and checks
    (:class:`.generic.LinearProgramRule`: ``alpha``, ``alpha_upper``, ``rule``)."""

    def _support(self, draft):  # noqa: ANN001, ANN202
        return draft.set_support()

    def _canonical(self, omegas: np.ndarray):  # noqa: ANN202 - a tuple's set, and each slot's place in it
        return np.sort(omegas, axis=1), np.argsort(np.argsort(omegas, axis=1, kind="stable"), axis=1)

    def _plan(self, draft, sets: np.ndarray, probs: np.ndarray):  # noqa: ANN001, ANN202
        alpha, choice, residual = host_plan(self.p[None], draft.q[None], sets, probs[None])
        if not np.isfinite(residual[0]):
            self.newton_residual = None  # (route stays the class's "lp")
            return relaxed_lp_plan(self.p, sets, probs)
        self.newton_residual = float(residual[0])
        self.route = "luce"
        return float(alpha[0]), probs[:, None] * choice[0], np.arange(choice[0].size).reshape(choice[0].shape)


class SupportRule:
    """The rule for ``p [V]`` and ``WithoutReplacement(q, n)`` (valid distributions) solved on the draft's support
    (module docstring): :class:`WithoutReplacementRule` on the k tokens of q > 0 and OTHER, read back on all V tokens.
    Offers what :class:`otlp.optimal.OptimalTransport` reads of a rule: ``p, n, V, route, alpha, alpha_upper, h_star,
    residual [V], acceptance(), rule(omegas)``; :class:`SupportBatch` solves many rows' instances together."""

    def __init__(self, p: np.ndarray, q: np.ndarray, n: int):
        self.p, self.n, self.V = p, n, p.size
        on = q > 0
        self.live = np.flatnonzero(on)  # [k] the support, in token order
        self._off = off = np.flatnonzero(~on)
        self._outside = outside = float(p[off].sum())
        p1, q1 = p[self.live], q[self.live]
        if outside > 0:  # OTHER, never drafted: its only mass is the residual's
            p1, q1 = np.append(p1, outside), np.append(q1, 0.0)
        self.inner = WithoutReplacementRule(p1, WithoutReplacement(q1, n))
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


#: :class:`SupportBatch` solves at most this many entries (instances x sets x (n + 1), and instances x elements^2 for
#: the Hessians) in one :func:`host_plan` call: the numpy route's temporaries of 2 MB (measured on that route at
#: k = 20, n = 4, B = 64: 2^22 entries took 387 ms a call and 2^18 234 ms)
BATCH_ENTRIES = 1 << 18


class SupportBatch:
    """:class:`SupportRule` for many rows at once, each given on its support: ``live int [R, k]`` the k tokens of
    q > 0 of each row (a draft filtered to its top k), ``p1, q1 float64 [R, k + 1]`` the normalised masses there and,
    last, OTHER's (the target's mass off the support; q = 0), n drafts a row. The rows' distinct instances are
    planned in chunks by :func:`host_plan` (the C kernel, each row's Newton steps on its own; else one batch of
    numpy Newton steps, :func:`set_plan`), a row whose Newton steps stall by :class:`SupportRule` (the relaxed LP).
    The same plan, so the same rule, as :class:`SupportRule` on each row, to the Newton residual
    (tests/optimal/test_wor.py).
    ``accept(drafts)`` and ``residual(r)`` read it; :meth:`from_rows` builds it from whole rows."""

    def __init__(self, live: np.ndarray, p1: np.ndarray, q1: np.ndarray, n: int):
        R, k = live.shape
        self.live = live = np.ascontiguousarray(live, dtype=np.int64)
        self.n = n
        key = np.concatenate([live.view(np.float64), p1, q1], 1)  # rows with the same instance share a solve
        _, first, self._instance = np.unique(key.view(np.dtype((np.void, key.shape[1] * 8))).ravel(),
                                             return_index=True, return_inverse=True)
        p1, q1 = p1[first], q1[first]  # [I, k + 1] the distinct instances
        self.sets = combinations(k, n)  # [U, n] local ids
        U, G = self.sets.shape[0], k + 2
        self.choice = np.empty((first.size, U, n))  # [I, U, n]
        self._accepted = np.empty((first.size, k + 1))  # [I, k + 1] each element's accepted mass
        self._fallback: dict[int, SupportRule] = {}
        chunk = max(1, BATCH_ENTRIES // max(U * (n + 1), G * G))
        for lo in range(0, first.size, chunk):
            sl = slice(lo, lo + chunk)
            probs = host_set_probabilities(q1[sl], self.sets)  # [c, U]
            _, choice, residual = host_plan(p1[sl], q1[sl], self.sets, probs)
            self.choice[sl] = choice
            self._accepted[sl] = accepted_mass(self.sets, probs, choice, k + 1)
            for i in np.flatnonzero(~np.isfinite(residual)) + lo:  # (rare) a stalled row takes the relaxed LP
                self._fallback[int(i)] = SupportRule(p1[i], q1[i], n)
        self._p1 = p1
        self._codes = self.sets @ (k ** np.arange(n - 1, -1, -1, dtype=np.int64))  # [U] increasing

    @classmethod
    def from_rows(cls, P: np.ndarray, Q: np.ndarray, n: int) -> SupportBatch:
        """From normalised rows ``P, Q float64 [R, V]`` whose draft laws have the same number of tokens of q > 0."""
        on = Q > 0  # [R, V]
        live = np.nonzero(on)[1].reshape(P.shape[0], -1)  # [R, k] in token order
        rows = np.arange(P.shape[0])[:, None]
        outside = np.where(on, 0.0, P).sum(1, keepdims=True)  # [R, 1]
        return cls(live, np.concatenate([P[rows, live], outside], 1),
                   np.concatenate([Q[rows, live], np.zeros_like(outside)], 1), n)

    def accept(self, drafts: np.ndarray) -> np.ndarray:
        """``[R, n]`` P(accept slot j) for each row's distinct drafts ``[R, n]`` of q > 0, by slot."""
        R, n = drafts.shape
        k = self.live.shape[1]
        local = (self.live[:, None, :] == drafts[:, :, None]).argmax(2)  # [R, n] each draft's place in the support
        at = np.searchsorted(self._codes, np.sort(local, axis=1) @ (k ** np.arange(n - 1, -1, -1, dtype=np.int64)))
        place = np.argsort(np.argsort(local, axis=1, kind="stable"), axis=1)  # [R, n] each slot's place in its set
        out = np.take_along_axis(self.choice[self._instance, at], place, axis=1)
        for r in np.flatnonzero(np.isin(self._instance, list(self._fallback))):
            out[r] = self._fallback[int(self._instance[r])].rule(local[r][None])[0][0]
        return out

    def residual(self, r: int) -> np.ndarray:
        """``[k + 1]`` row r's residual law on its support and OTHER (GR eq. (3): (p - R)_+ normalised), as
        :attr:`SupportRule.residual` there; OTHER's share is spread over the tokens of q = 0 in proportion to p."""
        i = int(self._instance[r])
        if i in self._fallback:
            return self._fallback[i].residual  # (its instance's V: the k tokens and OTHER)
        return residual_law(np.maximum(self._p1[i] - self._accepted[i], 0.0), self._p1[i])
