"""Damped Newton on the block convex programs, batched over blocks.

For a block G with terms (U, c_U) and targets t (design note §2 (ii)-(iii), GR Thm 6.4 / 6.5, App. K):

    f(alpha) = sum_U c_U * log(sigma + sum_{i in U} e^{alpha_i}) - t . alpha,

with sigma = 1 for an inner block (the "1 +" rejection slack) and sigma = 0 for an outer block (then alpha is
fixed at one reference token, the softmax being shift invariant). With s^U_i = e^{alpha_i} / (sigma + w(U)):

    gradient  g_i = R_i - t_i,        R_i = sum_{U ni i} c_U s^U_i            (the rule's row sums)
    Hessian   H = sum_U c_U (diag(s^U) - s^U s^U^T)

H is a (diagonally dominant) M-matrix: its row sums are sum_U c_U s^U_i * sigma / (sigma + w(U)) >= 0.
The note proves the minimiser is finite (Hall strict), so Newton converges quadratically; the step is capped in
the max norm (very skewed q start far away; an adaptive trust region) and a line search keeps f monotone: the
full step is certified from the gradient at the trial point (needed next anyway) where possible, else by Armijo
backtracking on f with a 1e-13 slack for its rounding (see :func:`newton`). We stop at ``||g||_1 <= tol`` or
when ``||g||_1`` stalls at rounding level.

Two evaluators share the loop: :class:`PairwiseN2` (n = 2, dense k x k formulas, batched over padded blocks)
and :class:`SubsetTerms` (any n, one block, terms from :func:`otlp.optimal.coefficients.block_terms`).
"""

from __future__ import annotations

import math

import numpy as np

#: log-weights are kept in this range so that e^{alpha} and its square stay finite in float64.
ALPHA_CLIP = 250.0
#: full Newton steps in the quadratic region may go up to this bound (e^{2 alpha} and e^{-2 alpha} stay normal).
ALPHA_LIMIT = 350.0
#: max-norm cap on one Newton step (design note §3); per block it doubles up to STEP_CAP_MAX (see :func:`newton`).
STEP_CAP = 4.0
STEP_CAP_MAX = 64.0
#: sufficient-decrease constant of the line search (Armijo on f, or its certificate phi'(1) <= ARMIJO phi'(0)).
ARMIJO = 1e-4
#: Newton decrement g.H^-1.g (relative to the block mass) below which the full step is taken without line search.
QUADRATIC_DECREMENT = 1e-4
#: blocks at least this large solve the Newton system by preconditioned CG instead of a dense factorisation.
CG_MIN_SIZE = 160
#: the all-ones shift of inner blocks (in :func:`newton`) is applied when it exceeds this many e-folds.
SHIFT_MIN = 1.0
#: an inner block whose slack S is below tol / 4 is shifted to a rejected mass of at least this fraction of
#: sum_U d_U only (Newton takes the last e-folds with a well-conditioned Hessian).
UNBOUNDED_FLOOR = 1e-10
#: tokens whose terms carry less than this fraction of the block's mass do not set the step length.
MINOR = 2.0**-20


class PairwiseN2:
    """n = 2 block programs for ``nb`` padded blocks at once.

    Terms: singletons d_i = 2 Q0 q_i + q_i^2 and pairs e_ij = 2 q_i q_j (design note §2 (iv) for n = 2).
    ``q, targets, mask: [nb, K]``, ``null_mass, sigma: [nb]``. Padded slots have q = t = 0 and alpha = 0.
    The pair terms are never stored: every [nb, K, K] pass is a kernel of (sigma + w_i + w_j) with its diagonal
    (j = i, not a pair) zeroed, contracted with q by one batched BLAS matrix-vector product. The kernel of
    :meth:`gradient` is reused by the next :meth:`hessian` call with the same alpha array object (which must not
    be modified in place in between).
    """

    def __init__(self, q: np.ndarray, null_mass: np.ndarray, targets: np.ndarray, sigma: np.ndarray):
        self.t = targets  # [nb, K]
        self.sigma = sigma  # [nb]
        self.q = q  # [nb, K]
        self.d = 2.0 * null_mass[:, None] * q + q * q  # [nb, K]
        pair_mass = 2.0 * q * (q.sum(-1, keepdims=True) - q)  # [nb, K]: sum_{j != i} e_ij
        self.mass = self.d + pair_mass  # [nb, K]: total mass of the terms containing i
        self.total = self.d.sum(-1) + 0.5 * pair_mass.sum(-1)  # [nb]: sum_U d_U
        self._q_col = q[:, :, None]  # [nb, K, 1]
        self._sigma_col = sigma[:, None]  # [nb, 1]
        self._sigma_d = self._sigma_col * self.d  # [nb, K]
        self._inner = bool(np.any(sigma > 0))
        self.rejected = np.zeros(q.shape[0])  # [nb]
        self._cache = None

    def _kernel(self, w: np.ndarray, sw: np.ndarray) -> np.ndarray:
        """sigma + w_i + w_j as a fresh [nb, K, K] array (one pass)."""
        return w[:, :, None] + sw[:, None, :]

    def value(self, alpha: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """f = sum_i d_i log(sigma + w_i) + sum_{i<j} e_ij log(sigma + w_i + w_j) - t . alpha, per block ``[nb]``
        (or only for the blocks ``rows``, with ``alpha`` given for those blocks)."""
        q_col, d, q, t, sig = self._q_col, self.d, self.q, self.t, self._sigma_col
        if rows is not None:
            q_col, d, q, t, sig = q_col[rows], d[rows], q[rows], t[rows], sig[rows]
        nb, K = alpha.shape
        w = np.exp(alpha)  # [nb, K]
        sw = sig + w  # [nb, K]
        log_k = np.log(w[:, :, None] + sw[:, None, :])  # [nb, K, K]
        log_k.reshape(nb, K * K)[:, :: K + 1] = 0.0  # j = i is not a pair
        pair = np.matmul(log_k, q_col)[..., 0]  # [nb, K]: sum_{j != i} q_j log(sigma + w_i + w_j)
        return (d * np.log(sw) + q * pair - t * alpha).sum(-1)

    def row_sums(self, alpha: np.ndarray) -> np.ndarray:
        return self._rows(alpha)

    def gradient(self, alpha: np.ndarray) -> np.ndarray:
        return self._rows(alpha) - self.t

    def _rows(self, alpha: np.ndarray) -> np.ndarray:
        """R_i = w_i (d_i / (sigma + w_i) + 2 q_i sum_{j != i} q_j / (sigma + w_i + w_j)).

        The pair sum is one batched matrix-vector product with the reciprocal kernel (diagonal zeroed); the kernel
        is kept for :meth:`hessian` at the same alpha. Cost: two elementwise passes over [nb, K, K] and one matvec.
        """
        nb, K = alpha.shape
        w = np.exp(alpha)  # [nb, K]
        sw = self._sigma_col + w  # [nb, K]
        kernel = self._kernel(w, sw)  # [nb, K, K]
        np.reciprocal(kernel, out=kernel)
        kernel.reshape(nb, K * K)[:, :: K + 1] = 0.0  # j = i is not a pair
        qk = self.q * np.matmul(kernel, self._q_col)[..., 0]  # [nb, K]: q_i sum_{j != i} q_j / (sigma + w_i + w_j)
        ds = self.d / sw  # [nb, K]
        self._cache = (alpha, w, sw, kernel)
        if self._inner:  # rejected mass sum_U d_U sigma / (sigma + w(U)), a sum of positive terms (no cancellation)
            self.rejected = self.sigma * (ds.sum(-1) + qk.sum(-1))  # [nb]
        qk += qk
        qk += ds
        qk *= w
        return qk

    def hessian(self, alpha: np.ndarray) -> np.ndarray:
        """H_ij = -2 (w_i q_i)(w_j q_j) / (sigma + w_i + w_j)^2 (i != j); the diagonal makes rows sum to
        sum_U c_U s^U_i sigma / (sigma + w(U)): H_ii = d_i sigma w_i / (sigma + w_i)^2 + 2 w_i q_i sum_{j != i}
        q_j (sigma + w_j) / (sigma + w_i + w_j)^2 (a sum of positive terms). Reuses (and overwrites) the kernel of
        :meth:`gradient` at the same alpha: the result is that buffer."""
        sq, u, diag = self.hessian_parts(alpha)
        nb, K = u.shape
        sq *= (-2.0 * u)[:, :, None]
        sq *= u[:, None, :]
        sq.reshape(nb, K * K)[:, :: K + 1] = diag
        return sq

    def hessian_parts(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """H = diag(D) - 2 (u u^T) * S with S_ij = 1 / (sigma + w_i + w_j)^2 (zero diagonal), u = w q: returns
        ``(S [nb, K, K], u [nb, K], D [nb, K])``, all fresh (S is the kernel of :meth:`gradient`). A matrix-free
        H d costs one pass over S, and H itself two more."""
        cached = self._cache
        if cached is None or cached[0] is not alpha:
            self.gradient(alpha)
            cached = self._cache
        _, w, sw, kernel = cached
        self._cache = None
        sq = np.square(kernel, out=kernel)  # [nb, K, K]: 1 / (sigma + w_i + w_j)^2, zero diagonal
        u = w * self.q  # [nb, K]
        rest = np.matmul(sq, (self.q * sw)[:, :, None])[..., 0]  # [nb, K]
        diag = self._sigma_d * (w / sw) / sw + 2.0 * u * rest  # [nb, K]
        return sq, u, diag

    def full(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        g = self.gradient(alpha)
        return self.value(alpha), g, self.hessian(alpha)


class SubsetTerms:
    """One block's program with explicit subset terms (any n). Arrays carry a leading batch axis of size 1.

    Per term U only the scalars W_U = sigma + w(U), c_U / W_U and c_U / W_U^2 are formed; every token and pair
    statistic is a ``bincount`` of them over precomputed flat indices:

        R_i = w_i sum_{U ni i} c_U / W_U,     H_ij = -w_i w_j sum_{U ni i, j} c_U / W_U^2   (i != j),
        H_ii = sigma w_i sum_{U ni i} c_U / W_U^2 + sum_{j != i} |H_ij|   (rows sum to the rejection part; positive
        terms only, so no 1 - s cancellation at large weights).

    As with :class:`PairwiseN2`, work at one alpha is reused by the next call with the same array object
    (gradient -> hessian, gradient -> value): alpha arrays must not be modified in place in between.
    """

    def __init__(self, terms: list[tuple[np.ndarray, np.ndarray]], targets: np.ndarray, sigma: float):
        k = self.k = targets.size
        self.t = targets[None, :]  # [1, k]
        self.sigma = float(sigma)
        self.terms = []
        mass = np.zeros(k)
        for idx, coef in terms:
            a, b = np.triu_indices(idx.shape[1], 1)
            members = np.ascontiguousarray(idx.T)  # [u, M]: bins of R and of the rejection part of the diagonal
            pairs = members[a] * k + members[b]  # [u(u-1)/2, M]: bins i k + j (i < j) of the off-diagonal
            self.terms.append((members, pairs, coef))
            for col in members:
                mass += np.bincount(col, coef, k)
        self.mass = mass[None]  # [1, k]
        self.total = np.array([sum(float(coef.sum()) for *_, coef in self.terms)])
        self._cache = None  # (alpha, w, [(W, c / W) per term group]) of the last row_sums
        self._w_cache = None  # (alpha, [W per term group]) of the last evaluation

    def _weights(self, alpha: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """w = e^alpha and, per term group, W_U = sigma + w(U) [M] (kept for the next call at the same alpha)."""
        cached, self._w_cache = self._w_cache, None
        if cached is not None and cached[0] is alpha:  # (each cached evaluation is reused once)
            return cached[1], cached[2]
        w = np.exp(alpha[0])
        out = []
        for members, _pairs, _coef in self.terms:
            W = np.take(w, members[0])
            for col in members[1:]:
                W += np.take(w, col)
            if self.sigma:
                W += self.sigma
            out.append(W)
        self._w_cache = (alpha, w, out)
        return w, out

    def value(self, alpha: np.ndarray) -> np.ndarray:
        _, Ws = self._weights(alpha)
        f = -(self.t[0] @ alpha[0])
        for (_members, _pairs, coef), W in zip(self.terms, Ws, strict=True):
            f += coef @ np.log(W)
        return np.array([f])

    def row_sums(self, alpha: np.ndarray) -> np.ndarray:
        w, Ws = self._weights(alpha)
        R = np.zeros(self.k)
        rejected = 0.0
        groups = []
        for (members, _pairs, coef), W in zip(self.terms, Ws, strict=True):
            r = coef / W  # [M]: c_U / W_U
            rejected += r.sum()
            for col in members:
                R += np.bincount(col, r, self.k)
            groups.append((W, r))
        self.rejected = np.array([self.sigma * rejected])
        self._cache = (alpha, w, groups)
        return (w * R)[None]

    def gradient(self, alpha: np.ndarray) -> np.ndarray:
        """g = R - t; the per-term weights are kept for :meth:`hessian` at the same alpha."""
        return self.row_sums(alpha) - self.t

    def hessian(self, alpha: np.ndarray) -> np.ndarray:
        cached = self._cache
        if cached is None or cached[0] is not alpha:
            self.row_sums(alpha)
            cached = self._cache
        self._cache = None
        _, w, groups = cached
        k = self.k
        rej = np.zeros(k)  # sum_{U ni i} c_U / W_U^2
        off = np.zeros(k * k)  # sum_{U ni i, j} c_U / W_U^2, i < j
        for (members, pairs, _coef), (W, r) in zip(self.terms, groups, strict=True):
            v = r / W  # [M]: c_U / W_U^2
            for col in members:
                rej += np.bincount(col, v, k)
            for col in pairs:
                off += np.bincount(col, v, k * k)
        off = off.reshape(k, k)
        H = off + off.T  # [k, k] (zero diagonal)
        H *= w[:, None]
        H *= w[None, :]
        diag = self.sigma * w * rej + H.sum(1)
        np.negative(H, out=H)
        H.reshape(-1)[:: k + 1] = diag
        return H[None]

    def full(self, alpha: np.ndarray, with_value: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        g = self.gradient(alpha)
        f = self.value(alpha) if with_value else np.array([np.nan])
        return f, g, self.hessian(alpha)


def initial_alpha(mass: np.ndarray, targets: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Inner: alpha_i = log t_i / (mass_i - t_i), exact if token i met no competitor (design note §3).
    Outer: alpha_i = log t_i / mass_i, the share of its tuples token i must win (``inner: bool [nb]``)."""
    with np.errstate(divide="ignore"):
        rest = np.where(np.asarray(inner)[..., None], mass - targets, mass)
        alpha = np.log(targets) - np.log(np.maximum(rest, 1e-300))
    return np.clip(np.where(targets > 0, alpha, -30.0), -30.0, 30.0)


def newton(evaluator, alpha: np.ndarray, free: np.ndarray, tol: np.ndarray, stall_level: np.ndarray,
           max_iter: int = 100) -> tuple[np.ndarray, np.ndarray, int]:
    """Minimise the batched block programs. ``alpha, free: [nb, K]`` (free = variables Newton may move).

    A block stops when ``||g||_1 <= tol`` or when ``||g||_1`` stayed below ``stall_level`` (both ``[nb]``)
    without halving for 3 iterations (rounding floor reached; iterations above the stall level, e.g. the damped
    ones far from the minimiser, do not count). Returns ``(alpha [nb, K], gradient_norm [nb], iterations)``.

    Step control, per block (design note §3):

    * Newton step s = -H^-1 g, scaled to max-norm ``cap`` (a trust region: the start can be far off when q is
      very skewed). Tokens whose terms carry less than MINOR of the block's mass (far out on an exponential
      tail, weakly coupled to the rest) do not set that length: their components are clipped to [-cap, cap]
      one by one (if the clipped step is still a descent direction). ``cap`` starts at STEP_CAP, doubles (up
      to STEP_CAP_MAX) after a limited step that still ends descending steeply (phi'(1) <= phi'(0) / 2) and
      falls back to STEP_CAP after one that overshoots or is shortened.
    * Line search on phi(lam) = f(alpha + lam s), convex, phi'(0) = g.s < 0. The gradient at the full step is
      the next iterate's gradient anyway, and phi'(1) = g(alpha + s).s. The full step is taken without
      evaluating f in the quadratic region (Newton decrement <= QUADRATIC_DECREMENT of the block's mass, s not
      limited; f's rounding would blur the Armijo test there) or when phi'(1) <= ARMIJO phi'(0), which
      certifies the Armijo decrease (phi(1) - phi(0) <= phi'(1) by convexity). Otherwise Armijo backtracking on
      f with a 1e-13 slack for the rounding of f.
    * Inner blocks with a tiny slack S = sum_U d_U - sum t (= psi_s - psi_e) need all weights ~ 1/S. Along the
      all-ones shift c the rejected mass rho(c) = sum_U d_U / (1 + e^c w(U)) >= e^-c rho(0) and f' = S - rho(c),
      so c = log(rho / S) decreases f (f' <= 0 all the way) and removes the e-fold-per-iteration crawl that
      plain Newton makes on this exponential tail; applied when c > SHIFT_MIN. A slack S <= tol / 4 (S <= 0 by
      rounding when the block takes all the mass) leaves no minimiser that matters (f decreases along the
      shift for ever): such a block is shifted to rho = max(tol / 4, UNBOUNDED_FLOOR sum_U d_U) only (further
      down, the Hessian's smallest eigenvalue ~ rho drowns in the rounding of its rows) and never widens its cap.
    """
    if alpha.shape[0] == 1:
        return _newton_one(evaluator, alpha, free, float(tol[0]), float(stall_level[0]), max_iter)
    nb, K = alpha.shape
    alpha = np.clip(alpha, -ALPHA_CLIP, ALPHA_CLIP)  # [nb, K] (a copy: never modified in place below)
    best_alpha = alpha
    best_g = np.full(nb, np.inf)
    stall = np.zeros(nb, dtype=np.int64)
    done = np.zeros(nb, dtype=bool)
    pinned = None if free.all() else np.nonzero(~free)  # (block, slot) of the fixed variables (and padding)
    scale = np.maximum((evaluator.t * free).sum(-1), 1e-300)  # [nb] block mass
    minor = free & (evaluator.mass <= MINOR * scale[:, None])  # [nb, K]
    minor = minor if minor.any() else None
    cap = np.full(nb, STEP_CAP)
    inner = np.broadcast_to(np.asarray(evaluator.sigma) > 0, (nb,))  # [nb]
    any_inner = bool(inner.any())
    unbounded = np.zeros(nb, dtype=bool)
    if any_inner:
        total = evaluator.total  # [nb]
        slack = total - evaluator.t.sum(-1)  # [nb]: S
        unbounded = inner & (slack <= 0.25 * tol)
        reject_target = np.where(unbounded, np.maximum(0.25 * tol, UNBOUNDED_FLOOR * total), slack)  # [nb]
        shift_level = np.where(inner, np.exp(SHIFT_MIN) * reject_target, np.inf)  # [nb]
    g = evaluator.gradient(alpha)  # [nb, K], always the gradient at alpha (and the evaluator's cache)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        if any_inner:  # weights far too small overall (tiny slack): shift them up in one go
            far = (evaluator.rejected > shift_level) & ~done  # [nb]
            if far.any():  # (not where alpha already solves the block)
                far &= np.abs(g if pinned is None else np.where(free, g, 0.0)).sum(-1) > tol
            if far.any():
                shift = np.log(np.where(far, evaluator.rejected, 1.0) / np.where(far, reject_target, 1.0))  # [nb]
                alpha = np.clip(alpha + np.minimum(shift, ALPHA_CLIP)[:, None] * free, -ALPHA_CLIP, ALPHA_CLIP)
                g = evaluator.gradient(alpha)
        if pinned is not None:
            g[pinned] = 0.0
        gn = np.abs(g).sum(-1)  # [nb]
        stall = np.where((gn < 0.5 * best_g) | (gn > stall_level), 0, stall + 1)
        best_alpha = np.where((gn < best_g)[:, None], alpha, best_alpha)
        best_g = np.minimum(best_g, gn)
        done |= (best_g <= tol) | ((stall >= 3) & (best_g <= stall_level))
        if done.all():
            break
        step = _newton_step(evaluator, alpha, g, pinned, np.minimum(0.1, gn / scale))  # [nb, K]
        step[done] = 0.0
        if not np.isfinite(step).all():
            step = np.where(np.isfinite(step), step, 0.0)
        big = np.abs(step if minor is None else np.where(minor, 0.0, step)).max(-1)  # [nb]
        capped = big > cap
        if capped.any():
            step *= np.minimum(1.0, cap / np.maximum(big, 1e-300))[:, None]
        limited = capped  # [nb]: the step is not the Newton step
        if minor is not None:
            outside = np.abs(step).max(-1) > cap  # [nb]: minor components beyond cap
            if outside.any():
                clipped = np.clip(step, -cap[:, None], cap[:, None])
                descent = (g * clipped).sum(-1) < 0.0
                shorten = np.minimum(1.0, cap / np.maximum(np.abs(step).max(-1), 1e-300))[:, None]
                step = np.where(descent[:, None], clipped, step * shorten)
                capped = capped | (outside & ~descent)
                limited = capped | outside
        slope = (g * step).sum(-1)  # [nb]: phi'(0)
        accepted = done | (~limited & (-slope <= QUADRATIC_DECREMENT * scale))
        trial = alpha + step
        bound = np.where(accepted, ALPHA_LIMIT, ALPHA_CLIP)  # [nb]
        at_clip = np.abs(trial).max(-1) > bound
        if at_clip.any():  # keep alpha in range (the step is then no Newton step)
            trial = np.clip(trial, -bound[:, None], bound[:, None])
            step = trial - alpha
            slope = (g * step).sum(-1)
            limited = limited | at_clip
            accepted &= ~at_clip
        g_trial = evaluator.gradient(trial)
        if not accepted.all():
            if pinned is not None:
                g_trial[pinned] = 0.0
            end_slope = (g_trial * step).sum(-1)  # [nb]: phi'(1)
            accepted |= end_slope <= ARMIJO * slope
            grow = limited & (end_slope <= 0.5 * slope) & ~unbounded
            shrink = limited & (end_slope > 0.0)
            if not accepted.all():  # Armijo backtracking on f (only for these blocks where the evaluator allows)
                test = np.flatnonzero(~accepted)  # [m]
                f = _values(evaluator, alpha, test)
                f_slack = 1e-13 * (1.0 + np.abs(f))
                lam = np.ones(nb)
                ok = np.zeros(test.size, dtype=bool)
                trial = trial.copy()  # (the blocks already accepted keep their trial point)
                for _ in range(60):
                    ok |= _values(evaluator, trial, test) <= f + ARMIJO * lam[test] * slope[test] + f_slack
                    if ok.all():
                        break
                    lam[test[~ok]] *= 0.5
                    trial[test] = np.clip(alpha[test] + lam[test, None] * step[test], -ALPHA_CLIP, ALPHA_CLIP)
                shortened = lam < 1.0
                if shortened.any():
                    g_trial = evaluator.gradient(trial)
                    shrink |= shortened
            if grow.any() or shrink.any():
                cap = np.where(shrink, STEP_CAP, np.where(grow, np.minimum(2.0 * cap, STEP_CAP_MAX), cap))
        alpha, g = trial, g_trial
    else:  # max_iter reached: account for the last point too
        if pinned is not None:
            g[pinned] = 0.0
        gn = np.abs(g).sum(-1)
        best_alpha = np.where((gn < best_g)[:, None], alpha, best_alpha)
        best_g = np.minimum(best_g, gn)
    return best_alpha, best_g, it


def _values(evaluator, alpha: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """f of the blocks ``rows`` only (``[m]``): evaluated for those blocks alone where the evaluator allows."""
    if isinstance(evaluator, PairwiseN2) and rows.size < alpha.shape[0]:
        return evaluator.value(alpha[rows], rows)
    return evaluator.value(alpha)[rows]


def _newton_one(evaluator, alpha: np.ndarray, free: np.ndarray, tol: float, stall_level: float,
                max_iter: int) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`newton` for a single block (``alpha, free: [1, K]``): the same iteration, with the per-block
    bookkeeping in Python scalars (a small block's iteration is dominated by per-call overhead)."""
    alpha = np.clip(alpha, -ALPHA_CLIP, ALPHA_CLIP)  # [1, K]
    best_alpha = alpha
    best_g = np.inf
    stall = 0
    pinned = None if free.all() else np.nonzero(~free)
    scale = max(float((evaluator.t * free).sum()), 1e-300)  # block mass
    minor = free & (evaluator.mass <= MINOR * scale)  # [1, K]
    minor = minor if minor.any() else None
    cap = STEP_CAP
    inner = float(np.asarray(evaluator.sigma).reshape(-1)[0]) > 0.0
    unbounded = False
    if inner:  # the all-ones shift (see newton)
        total = float(evaluator.total[0])
        reject_target = total - float(evaluator.t.sum())  # S
        unbounded = reject_target <= 0.25 * tol
        if unbounded:
            reject_target = max(0.25 * tol, UNBOUNDED_FLOOR * total)
        shift_level = math.exp(SHIFT_MIN) * reject_target
        shift_mask = 1.0 if pinned is None else free.astype(float)
    g = evaluator.gradient(alpha)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        if inner and float(evaluator.rejected[0]) > shift_level:
            if float(np.abs(g if pinned is None else np.where(free, g, 0.0)).sum()) > tol:
                shift = min(math.log(float(evaluator.rejected[0]) / reject_target), ALPHA_CLIP)
                alpha = np.clip(alpha + shift * shift_mask, -ALPHA_CLIP, ALPHA_CLIP)
                g = evaluator.gradient(alpha)
        if pinned is not None:
            g[pinned] = 0.0
        gn = float(np.abs(g).sum())
        stall = 0 if gn < 0.5 * best_g or gn > stall_level else stall + 1
        if gn < best_g:
            best_alpha, best_g = alpha, gn
        if best_g <= tol or (stall >= 3 and best_g <= stall_level):
            break
        step = _newton_step(evaluator, alpha, g, pinned, np.array([min(0.1, gn / scale)]))  # [1, K]
        big = float(np.abs(step if minor is None else np.where(minor, 0.0, step)).max())
        if not math.isfinite(big):
            step = np.where(np.isfinite(step), step, 0.0)
            big = float(np.abs(step if minor is None else np.where(minor, 0.0, step)).max())
        capped = big > cap
        if capped:
            step *= cap / big
        limited = capped
        if minor is not None:
            top = float(np.abs(step).max())
            if top > cap:
                clipped = np.clip(step, -cap, cap)
                if float(np.vdot(g, clipped)) < 0.0:
                    step = clipped
                else:
                    step *= cap / top
                    capped = True
                limited = True
        slope = float(np.vdot(g, step))
        accepted = not limited and -slope <= QUADRATIC_DECREMENT * scale
        trial = alpha + step
        bound = ALPHA_LIMIT if accepted else ALPHA_CLIP
        if float(np.abs(trial).max()) > bound:
            trial = np.clip(trial, -bound, bound)
            step = trial - alpha
            slope = float(np.vdot(g, step))
            limited, accepted = True, False
        g_trial = evaluator.gradient(trial)
        if not accepted:
            if pinned is not None:
                g_trial[pinned] = 0.0
            end_slope = float(np.vdot(g_trial, step))
            grow = limited and end_slope <= 0.5 * slope and not unbounded
            shrink = limited and end_slope > 0.0
            if end_slope > ARMIJO * slope:  # Armijo backtracking on f, only here
                f = float(evaluator.value(alpha)[0])
                f_slack = 1e-13 * (1.0 + abs(f))
                lam = 1.0
                for _ in range(60):
                    if float(evaluator.value(trial)[0]) <= f + ARMIJO * lam * slope + f_slack:
                        break
                    lam *= 0.5
                    trial = np.clip(alpha + lam * step, -ALPHA_CLIP, ALPHA_CLIP)
                if lam < 1.0:
                    g_trial = evaluator.gradient(trial)
                    shrink = True
            if shrink:
                cap = STEP_CAP
            elif grow:
                cap = min(2.0 * cap, STEP_CAP_MAX)
        alpha, g = trial, g_trial
    else:  # max_iter reached: account for the last point too
        if pinned is not None:
            g[pinned] = 0.0
        gn = float(np.abs(g).sum())
        if gn < best_g:
            best_alpha, best_g = alpha, gn
    return best_alpha, np.array([best_g]), it


def _newton_step(evaluator, alpha: np.ndarray, g: np.ndarray, pinned: tuple | None,
                 forcing: np.ndarray) -> np.ndarray:
    """s = -H^-1 g with the fixed variables' rows and columns of H replaced by the identity (their g is 0, so is
    their step). Large n = 2 blocks: matrix-free PCG on H = diag(D) - 2 (u u^T) * S (no pass to assemble H)."""
    nb, K = g.shape
    if K >= CG_MIN_SIZE and hasattr(evaluator, "hessian_parts"):
        S, u, diag = evaluator.hessian_parts(alpha)
        if pinned is not None:
            u[pinned] = 0.0
            diag[pinned] = 1.0

        def matvec(d: np.ndarray) -> np.ndarray:  # H d
            return diag * d - 2.0 * u * np.matmul(S, (u * d)[:, :, None])[..., 0]

        return _pcg(matvec, diag, -g, forcing)
    H = evaluator.hessian(alpha)  # [nb, K, K], ours to modify
    if pinned is not None:
        b, i = pinned
        H[b, i, :] = 0.0
        H[b, :, i] = 0.0
        H[b, i, i] = 1.0
    if nb == 1:
        return _solve_one(H, -g, float(forcing[0]))
    return _solve(H, -g, forcing)


def _solve(H: np.ndarray, rhs: np.ndarray, forcing: np.ndarray) -> np.ndarray:
    """Solve the SPD systems ``H [nb, K, K] x = rhs [nb, K]``.

    Large blocks (K >= CG_MIN_SIZE): Jacobi-preconditioned conjugate gradients to the relative residual
    ``forcing [nb]`` (inexact Newton; the forcing term shrinks with ||g|| so convergence stays superlinear).
    H is a diagonally dominant M-matrix plus a near rank-one coupling, so the Jacobi-scaled spectrum is
    clustered. Small blocks: batched LU (numpy's gufunc, one call). A block whose solution is not a descent
    direction (x . rhs <= 0 or not finite: H not numerically PD, e.g. diagonal underflow at huge alpha) gets the
    least-squares step instead.
    """
    if H.shape[-1] >= CG_MIN_SIZE:
        return pcg(H, rhs, forcing)
    try:
        x = np.linalg.solve(H, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:  # an exactly singular block
        x = np.full_like(rhs, np.nan)
    bad = ~((x * rhs).sum(-1) > 0.0)  # [nb] (NaN compares False)
    if bad.any():
        for b in np.flatnonzero(bad & (rhs != 0.0).any(-1)):
            try:
                x[b] = np.linalg.lstsq(H[b], rhs[b], rcond=None)[0]
            except np.linalg.LinAlgError:  # non-finite H
                x[b] = 0.0
    return x


def _solve_one(H: np.ndarray, rhs: np.ndarray, forcing: float) -> np.ndarray:
    """:func:`_solve` for one block (``H [1, K, K], rhs [1, K]``) with less per-call overhead."""
    if H.shape[-1] >= CG_MIN_SIZE:
        return pcg(H, rhs, np.array([forcing]))
    try:
        x = np.linalg.solve(H[0], rhs[0])  # [K]
    except np.linalg.LinAlgError:  # an exactly singular H
        x = None
    if x is None or not float(x @ rhs[0]) > 0.0:  # not a descent direction (or NaN): least squares
        if not rhs.any():
            return np.zeros_like(rhs)
        try:
            x = np.linalg.lstsq(H[0], rhs[0], rcond=None)[0]
        except np.linalg.LinAlgError:  # non-finite H
            x = np.zeros(rhs.shape[1])
    return x[None]


def pcg(H: np.ndarray, rhs: np.ndarray, forcing: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Batched Jacobi-preconditioned CG for SPD ``H [nb, K, K] x = rhs [nb, K]`` to ``||r|| <= forcing ||rhs||``;
    H d is one batched BLAS product."""
    nb, K = rhs.shape
    return _pcg(lambda d: np.matmul(H, d[:, :, None])[..., 0], H.reshape(nb, K * K)[:, :: K + 1], rhs, forcing,
                max_iter)


def _pcg(matvec, diag: np.ndarray, rhs: np.ndarray, forcing: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """CG behind :func:`pcg`: ``matvec(d [nb, K]) = H d``, Jacobi preconditioner ``diag [nb, K]`` = diag(H).
    Blocks that reached their goal keep x (their step length is set to 0)."""
    nb, K = rhs.shape
    max_iter = K if max_iter is None else max_iter
    inv_diag = 1.0 / np.maximum(diag, 1e-300)  # [nb, K]
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = inv_diag * r
    d = z.copy()
    rz = (r * z).sum(-1)  # [nb]
    goal = forcing * forcing * (rhs * rhs).sum(-1)  # [nb]
    for _ in range(max_iter):
        active = (r * r).sum(-1) > goal
        if not active.any():
            break
        Hd = matvec(d)  # [nb, K]
        dHd = (d * Hd).sum(-1)
        step = np.where(active & (dHd > 0), rz / np.where(dHd > 0, dHd, 1.0), 0.0)[:, None]  # [nb, 1]
        x += step * d
        r -= step * Hd
        z = inv_diag * r
        rz_new = (r * z).sum(-1)
        beta = np.where(active & (rz > 0), rz_new / np.where(rz > 0, rz, 1.0), 0.0)[:, None]
        d = z + beta * d
        rz = rz_new
    return x
