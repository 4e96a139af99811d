"""Damped Newton on the block convex programs, batched over blocks.

For a block G with terms (U, c_U) and targets t (design note §2 (ii)-(iii), GR Thm 6.4 / 6.5, App. K):

    f(alpha) = sum_U c_U * log(sigma + sum_{i in U} e^{alpha_i}) - t . alpha,

with sigma = 1 for an inner block (the "1 +" rejection slack) and sigma = 0 for an outer block (then alpha is
fixed at one reference token, the softmax being shift invariant). With s^U_i = e^{alpha_i} / (sigma + w(U)):

    gradient  g_i = R_i - t_i,        R_i = sum_{U ni i} c_U s^U_i            (the rule's row sums)
    Hessian   H = sum_U c_U (diag(s^U) - s^U s^U^T)

H is a (diagonally dominant) M-matrix: its row sums are sum_U c_U s^U_i * sigma / (sigma + w(U)) >= 0.
The note proves the minimiser is finite (Hall strict), so Newton converges quadratically; the step is capped at
4 in the max norm (very skewed q start far away) and an Armijo line search with a 1e-13 slack for rounding of f
keeps it monotone. We stop at ``||g||_1 <= tol`` or when ``||g||_1`` stalls at rounding level.

Two evaluators share the loop: :class:`PairwiseN2` (n = 2, dense k x k formulas, batched over padded blocks)
and :class:`SubsetTerms` (any n, one block, terms from :func:`otlp.optimal.coefficients.block_terms`).
"""

from __future__ import annotations

import numpy as np

#: log-weights are kept in this range so that e^{alpha} and its square stay finite in float64.
ALPHA_CLIP = 250.0
#: max-norm cap on one Newton step (design note §3).
STEP_CAP = 4.0
#: Newton decrement g.H^-1.g (relative to the block mass) below which the full step is taken without line search.
QUADRATIC_DECREMENT = 1e-4
#: blocks at least this large solve the Newton system by preconditioned CG instead of a dense factorisation.
CG_MIN_SIZE = 160
#: the all-ones shift of inner blocks (in :func:`newton`) is applied when it exceeds this many e-folds.
SHIFT_MIN = 1.0
#: statistics of the last pcg calls (iterations), for benchmarks.
CG_STATS: list[int] = []


class PairwiseN2:
    """n = 2 block programs for ``nb`` padded blocks at once.

    Terms: singletons d_i = 2 Q0 q_i + q_i^2 and pairs e_ij = 2 q_i q_j (design note §2 (iv) for n = 2).
    ``q, targets, mask: [nb, K]``, ``null_mass, sigma: [nb]``. Padded slots have q = t = 0 and alpha = 0.
    """

    def __init__(self, q: np.ndarray, null_mass: np.ndarray, targets: np.ndarray, sigma: np.ndarray):
        self.t = targets  # [nb, K]
        self.sigma = sigma  # [nb]
        self.q = q  # [nb, K]
        self.d = 2.0 * null_mass[:, None] * q + q * q  # [nb, K]
        E = 2.0 * q[:, :, None] * q[:, None, :]  # [nb, K, K]
        idx = np.arange(q.shape[1])
        E[:, idx, idx] = 0.0
        self.E = E
        self.mass = self.d + E.sum(-1)  # [nb, K]: total mass of the terms containing i
        self.total = self.d.sum(-1) + 0.5 * E.sum((-1, -2))  # [nb]: sum_U d_U

    def value(self, alpha: np.ndarray) -> np.ndarray:
        w = np.exp(alpha)  # [nb, K]
        sig = self.sigma[:, None]
        single = self.d * np.log(sig + w)
        pair = self.E * np.log(sig[:, :, None] + w[:, :, None] + w[:, None, :])  # [nb, K, K]
        return single.sum(-1) + 0.5 * pair.sum((-1, -2)) - (self.t * alpha).sum(-1)

    def row_sums(self, alpha: np.ndarray) -> np.ndarray:
        return self._rows(alpha)

    def gradient(self, alpha: np.ndarray) -> np.ndarray:
        return self._rows(alpha) - self.t

    def _rows(self, alpha: np.ndarray) -> np.ndarray:
        """g = R - t, with R_i = w_i (d_i / (sigma + w_i) + 2 q_i sum_{j != i} q_j / (sigma + w_i + w_j)).

        The pair sum is one batched matrix-vector product with the reciprocal kernel; the kernel is kept for
        :meth:`hessian` at the same alpha. Cost: two elementwise passes over [nb, K, K] and one matvec.
        """
        w = np.exp(alpha)  # [nb, K]
        sw = self.sigma[:, None] + w  # [nb, K]
        kernel = w[:, :, None] + sw[:, None, :]  # [nb, K, K]: sigma + w_i + w_j
        np.reciprocal(kernel, out=kernel)
        kq = np.matmul(kernel, self.q[:, :, None])[..., 0]  # [nb, K]: sum_j q_j / (sigma + w_i + w_j)
        diag_k = np.einsum("bii->bi", kernel)  # [nb, K]: 1 / (sigma + 2 w_i), the excluded j = i term
        pair = 2.0 * self.q * (kq - self.q * diag_k)  # [nb, K]
        self._cache = (alpha, w, sw, kernel)
        # rejected mass sum_U d_U sigma / (sigma + w(U)), a sum of positive terms (no cancellation)
        self.rejected = self.sigma * ((self.d / sw).sum(-1) + (self.q * (kq - self.q * diag_k)).sum(-1))  # [nb]
        return w * (self.d / sw + pair)

    def hessian(self, alpha: np.ndarray) -> np.ndarray:
        """H_ij = -2 (w_i q_i)(w_j q_j) / (sigma + w_i + w_j)^2 (i != j); the diagonal makes rows sum to
        sum_U c_U s^U_i sigma / (sigma + w(U)): H_ii = d_i sigma w_i / (sigma + w_i)^2 + 2 w_i q_i sum_{j != i}
        q_j (sigma + w_j) / (sigma + w_i + w_j)^2. Reuses (and overwrites) the kernel of :meth:`gradient`."""
        cached = getattr(self, "_cache", None)
        if cached is None or cached[0] is not alpha:
            self.gradient(alpha)
        _, w, sw, kernel = self._cache
        self._cache = None
        K = w.shape[1]
        sq = np.square(kernel, out=kernel)  # [nb, K, K]: 1 / (sigma + w_i + w_j)^2
        diag_sq = np.einsum("bii->bi", sq).copy()  # [nb, K]
        qs = self.q * sw  # [nb, K]
        rest = np.matmul(sq, qs[:, :, None])[..., 0] - qs * diag_sq  # [nb, K]
        diag = self.d * self.sigma[:, None] * w / (sw * sw) + 2.0 * w * self.q * rest
        u = w * self.q  # [nb, K]
        sq *= u[:, :, None]
        sq *= (-2.0 * u)[:, None, :]
        idx = np.arange(K)
        sq[:, idx, idx] = diag
        return sq

    def full(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        g = self.gradient(alpha)
        return self.value(alpha), g, self.hessian(alpha)


class SubsetTerms:
    """One block's program with explicit subset terms (any n). Arrays carry a leading batch axis of size 1."""

    def __init__(self, terms: list[tuple[np.ndarray, np.ndarray]], targets: np.ndarray, sigma: float):
        self.k = targets.size
        self.t = targets[None, :]  # [1, k]
        self.sigma = float(sigma)
        self.terms = []
        k = self.k
        for idx, coef in terms:
            u = idx.shape[1]
            a, b = np.triu_indices(u, 1)
            pair_flat = (idx[:, a] * k + idx[:, b]).ravel()  # [M * u(u-1)/2]
            self.terms.append((idx, idx.ravel(), coef, a, b, pair_flat))
        self.mass = sum(np.bincount(flat, np.repeat(coef, idx.shape[1]), k) for idx, flat, coef, *_ in self.terms)[None]
        self.total = np.array([sum(float(coef.sum()) for _idx, _flat, coef, *_ in self.terms)])

    def value(self, alpha: np.ndarray) -> np.ndarray:
        w = np.exp(alpha[0])
        f = -(self.t[0] * alpha[0]).sum()
        for idx, _flat, coef, *_ in self.terms:
            f += coef @ np.log(self.sigma + w[idx].sum(1))
        return np.array([f])

    def row_sums(self, alpha: np.ndarray) -> np.ndarray:
        w = np.exp(alpha[0])
        R = np.zeros(self.k)
        for idx, flat, coef, *_ in self.terms:
            wu = w[idx]  # [M, u]
            R += np.bincount(flat, (coef[:, None] * wu / (self.sigma + wu.sum(1))[:, None]).ravel(), self.k)
        return R[None]

    def gradient(self, alpha: np.ndarray) -> np.ndarray:
        """g = R - t; the Hessian at the same alpha is assembled in the same pass and kept for :meth:`hessian`."""
        _, g, H = self.full(alpha, with_value=False)
        self._cache = (alpha, H)
        return g

    def hessian(self, alpha: np.ndarray) -> np.ndarray:
        cached = getattr(self, "_cache", None)
        self._cache = None
        if cached is not None and cached[0] is alpha:
            return cached[1]
        return self.full(alpha, with_value=False)[2]

    def full(self, alpha: np.ndarray, with_value: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = self.k
        w = np.exp(alpha[0])
        f = -(self.t[0] * alpha[0]).sum()
        R = np.zeros(k)
        rejected = 0.0
        diag = np.zeros(k)
        off = np.zeros(k * k)
        for idx, flat, coef, a, b, pair_flat in self.terms:
            wu = w[idx]  # [M, u]
            W = self.sigma + wu.sum(1)  # [M]
            rejected += self.sigma * (coef / W).sum()
            if with_value:
                f += coef @ np.log(W)
            s = wu / W[:, None]  # [M, u]
            cs = coef[:, None] * s
            R += np.bincount(flat, cs.ravel(), k)
            diag += np.bincount(flat, (cs * (1.0 - s)).ravel(), k)
            if a.size:
                off += np.bincount(pair_flat, (-cs[:, a] * s[:, b]).ravel(), k * k)
        H = off.reshape(k, k)
        H = H + H.T
        H[np.arange(k), np.arange(k)] = diag
        self.rejected = np.array([rejected])
        return np.array([f]), (R - self.t[0])[None], H[None]


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

    A block stops when ``||g||_1 <= tol`` or when ``||g||_1 <= stall_level`` (both ``[nb]``) and it has not
    halved in 3 iterations (rounding floor reached). Returns ``(alpha [nb, K], gradient_norm [nb], iterations)``.
    """
    nb, K = alpha.shape
    alpha = alpha.copy()
    best_alpha = alpha.copy()
    best_g = np.full(nb, np.inf)
    stall = np.zeros(nb, dtype=np.int64)
    done = np.zeros(nb, dtype=bool)
    fixed = ~free
    pinned = free[:, :, None] & free[:, None, :]  # [nb, K, K]
    eye = np.eye(K)[None] * fixed[:, :, None]
    scale = np.maximum(np.where(free, evaluator.t, 0.0).sum(-1), 1e-300)  # [nb] block mass
    # Inner blocks with a tiny slack S = sum_U d_U - sum t (= psi_s - psi_e) need all weights ~ 1/S. Along the
    # all-ones shift c the rejected mass rho(c) = sum_U d_U / (1 + e^c w(U)) >= e^-c rho(0) and f' = S - rho(c),
    # so c = log(rho / S) decreases f (f' <= 0 all the way) and removes the e-fold-per-iteration crawl that plain
    # Newton makes on this exponential tail. Only applied when it is large (c > SHIFT_MIN).
    inner = np.atleast_1d(np.asarray(evaluator.sigma) > 0)  # [nb]
    reject_target = evaluator.total - evaluator.t.sum(-1)  # [nb]: S
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        g = evaluator.gradient(alpha)
        if inner.any():  # weights far too small overall (tiny slack): shift them up in one go (see below)
            with np.errstate(divide="ignore", invalid="ignore"):
                shift = np.where(inner & (reject_target > 0), np.log(evaluator.rejected / reject_target), 0.0)
            shift = np.where(np.isfinite(shift) & (shift > SHIFT_MIN) & ~done, np.minimum(shift, ALPHA_CLIP), 0.0)
            if shift.any():
                alpha = np.clip(alpha + shift[:, None] * free, -ALPHA_CLIP, ALPHA_CLIP)
                g = evaluator.gradient(alpha)
        g = np.where(free, g, 0.0)
        gn = np.abs(g).sum(-1)  # [nb]
        improved = gn < best_g
        stall = np.where(gn < 0.5 * best_g, 0, stall + 1)
        best_alpha[improved] = alpha[improved]
        best_g = np.minimum(best_g, gn)
        done |= (best_g <= tol) | ((stall >= 3) & (best_g <= stall_level))
        if done.all():
            break
        H = evaluator.hessian(alpha)
        H = np.where(pinned, H, 0.0) + eye
        step = _solve(H, -g, np.minimum(0.1, gn / scale))  # [nb, K]
        step[done] = 0.0
        step = np.where(np.isfinite(step), step, 0.0)
        big = np.abs(step).max(-1)
        step *= np.minimum(1.0, STEP_CAP / np.maximum(big, 1e-300))[:, None]
        slope = (g * step).sum(-1)  # [nb], <= 0
        lam = np.ones(nb)
        # quadratic region (small Newton decrement relative to the block's mass, step not capped): take the
        # full step without evaluating f, whose rounding would blur the Armijo test there anyway
        accepted = done | ((big <= STEP_CAP) & (-slope <= QUADRATIC_DECREMENT * scale))
        trial = alpha + step
        if not accepted.all():  # Armijo backtracking; f is only evaluated here
            f = evaluator.value(alpha)
            slack = 1e-13 * (1.0 + np.abs(f))
            for _ in range(60):
                trial = np.clip(trial, -ALPHA_CLIP, ALPHA_CLIP)
                ft = evaluator.value(trial)
                accepted |= ft <= f + 1e-4 * lam * slope + slack
                lam = np.where(accepted, lam, 0.5 * lam)
                trial = alpha + lam[:, None] * step
                if accepted.all():
                    break
        alpha = trial
    return best_alpha, best_g, it


def _solve(H: np.ndarray, rhs: np.ndarray, forcing: np.ndarray) -> np.ndarray:
    """Solve the SPD systems ``H [nb, K, K] x = rhs [nb, K]``.

    Large blocks (K >= CG_MIN_SIZE): Jacobi-preconditioned conjugate gradients to the relative residual
    ``forcing [nb]`` (inexact Newton; the forcing term shrinks with ||g|| so convergence stays superlinear).
    H is a diagonally dominant M-matrix plus a near rank-one coupling, so the Jacobi-scaled spectrum is
    clustered. Small blocks: batched LU (numpy's gufunc; far less call overhead than scipy's Cholesky).
    """
    if H.shape[-1] >= CG_MIN_SIZE:
        return pcg(H, rhs, forcing)
    if H.shape[0] == 1:  # one block: a Hessian that is not numerically PD (diagonal underflow at huge alpha)
        try:  # gets the least-squares step, as the Cholesky route did
            np.linalg.cholesky(H[0])
        except np.linalg.LinAlgError:
            return np.linalg.lstsq(H[0], rhs[0], rcond=None)[0][None]
    try:
        return np.linalg.solve(H, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.stack([np.linalg.lstsq(h, r, rcond=None)[0] for h, r in zip(H, rhs, strict=True)])


def pcg(H: np.ndarray, rhs: np.ndarray, forcing: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Batched Jacobi-preconditioned CG for SPD ``H [nb, K, K] x = rhs [nb, K]`` to ``||r|| <= forcing ||rhs||``."""
    nb, K = rhs.shape
    max_iter = K if max_iter is None else max_iter
    inv_diag = 1.0 / np.maximum(np.einsum("bii->bi", H), 1e-300)  # [nb, K]
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = inv_diag * r
    d = z.copy()
    rz = (r * z).sum(-1)
    goal = (forcing * np.sqrt((rhs * rhs).sum(-1))) ** 2  # [nb]
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - recorded below
        active = (r * r).sum(-1) > goal
        if not active.any():
            break
        Hd = np.einsum("bij,bj->bi", H, d)
        dHd = (d * Hd).sum(-1)
        step = np.where(active, rz / np.where(dHd > 0, dHd, 1.0), 0.0)
        x += step[:, None] * d
        r -= step[:, None] * Hd
        z = inv_diag * r
        rz_new = (r * z).sum(-1)
        d = z + np.where(active, rz_new / np.where(rz > 0, rz, 1.0), 0.0)[:, None] * d
        rz = rz_new
    CG_STATS.append(it)
    return x
