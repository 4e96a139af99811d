"""GR Section 6's block convex programs on tiny instances, solved by scipy: the compact subset coefficients of
GR App. K and the softmax block log-weights of GR Thm 6.4 / 6.5.

Blocks (design note ``exact-ot-design.md`` §2): sort the tokens by decreasing q/p, psi_m = P_m - Q_m^n; the records
of psi (0, m*, V, the strict prefix minima in [1, m*], the suffix minima, ties included, in [m*, V]) cut the
positions into blocks G = (s, e], inner when e <= m*, else outer. A block's null mass is Q0 = Q_s, its targets t = p
on G except, on an outer block, t_{s+1} = p_{s+1} - (psi_e - psi_s) (the GR Thm 6.2 vertex). For U subset G with
1 <= |U| <= n, c_U is the mass of the tuples in (L + U)^n (L the positions <= s) whose part in G is exactly U
(:func:`subset_coefficients`), and the block's program (note §2 (ii)-(iii), GR eqs. (12), (15), App. K) is

    f(alpha) = sum_U c_U log(sigma + sum_{i in U} e^{alpha_i}) - t . alpha,

sigma = 1 on an inner block (the rejection slack), 0 on an outer one (then f is shift invariant and the block's last
token is the reference, alpha = 0). Its gradient is R - t with R_i = sum_{U ni i} c_U e^{alpha_i} / (sigma + w(U))
the row sums of the softmax rule, so a minimiser gives a rule whose rows meet t.

This is an independent solver route: the production rule (:mod:`otlp.optimal.chains`) is a water-filling class chain
per block with no weights at all; here each block's program is minimised by scipy's ``trust-exact`` with the analytic
gradient and Hessian, then polished by plain Newton steps. It is meant for the checks' sizes (V <= 6, n <= 3): the
subsets are enumerated one by one.
"""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import scipy.optimize

#: log-weight gap below a block's other weights given to a token with target 0 (its minimiser is -inf): e^-100 is
#: below float64 resolution relative to every other share of the block.
ZERO_TARGET_GAP = 100.0

#: Newton polish steps after trust-exact, and the scaled ||grad||_1 at which they stop.
POLISH_STEPS = 30
POLISH_TOL = 1e-16


def subset_coefficients(q_block: np.ndarray, null_mass: float, n: int, subsets: np.ndarray) -> np.ndarray:
    """GR App. K's compact coefficients c_U for ``subsets: int [M, u]`` (rows index ``q_block: float [k]``) ->
    ``float [M]``: the mass of the tuples in (L + U)^n whose part in the block is exactly U, with Q0 = ``null_mass``,

        c_U = sum_{j=|U|}^{n} n!/(n-j)! Q0^(n-j) [z^j] prod_{i in U} (e^{q_i z} - 1)

    (the positive composition sum of design note §2 (iv); the inclusion-exclusion form cancels when q << Q0).
    The same formula gives the outer c_U and the inner d_U.
    """
    q_block = np.asarray(q_block, dtype=np.float64)
    subsets = np.asarray(subsets, dtype=np.int64)
    out = np.empty(subsets.shape[0])
    for row, U in enumerate(subsets):
        poly = np.zeros(n + 1)  # [z^j] of the product so far, truncated at degree n
        poly[0] = 1.0
        for i in U:
            factor = np.array([0.0] + [q_block[i] ** m / factorial(m) for m in range(1, n + 1)])  # e^{q z} - 1
            poly = np.convolve(poly, factor)[: n + 1]
        out[row] = sum(factorial(n) / factorial(n - j) * null_mass ** (n - j) * poly[j]
                       for j in range(U.size, n + 1))
    return out


def block_terms(q_block: np.ndarray, null_mass: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every subset U of a block with 1 <= |U| <= n: ``(incidence bool [M, k], c float [M])``."""
    k = q_block.size
    rows, coef = [], []
    for u in range(1, min(n, k) + 1):
        subsets = np.array(list(itertools.combinations(range(k), u)), dtype=np.int64)
        incidence = np.zeros((subsets.shape[0], k), dtype=bool)
        np.put_along_axis(incidence, subsets, True, axis=1)
        rows.append(incidence)
        coef.append(subset_coefficients(q_block, null_mass, n, subsets))
    return np.concatenate(rows), np.concatenate(coef)


def program(incidence: np.ndarray, c: np.ndarray, t: np.ndarray, sigma: float, alpha: np.ndarray
            ) -> tuple[float, np.ndarray, np.ndarray]:
    """``(f, gradient [k], Hessian [k, k])`` of f(alpha) = sum_U c_U log(sigma + w(U)) - t . alpha (module
    docstring; ``incidence bool [M, k]``, ``c [M]``), log-sum-exp with the slack as a logit 0 when sigma = 1."""
    logits = np.where(incidence, alpha[None, :], -np.inf)  # [M, k]
    top = logits.max(1)
    if sigma > 0:
        top = np.maximum(top, 0.0)
    e = np.exp(logits - top[:, None])  # [M, k]
    z = e.sum(1) + (sigma * np.exp(-top) if sigma > 0 else 0.0)  # [M]
    s = e / z[:, None]  # [M, k]: e^{alpha_i} / (sigma + w(U))
    f = float(c @ (top + np.log(z)) - t @ alpha)
    rows = c @ s  # [k]
    hess = np.diag(rows) - (s * c[:, None]).T @ s
    return f, rows - t, hess


def block_program(q_block: np.ndarray, t: np.ndarray, null_mass: float, n: int, inner: bool) -> np.ndarray:
    """The minimiser alpha [k] of one block's program (module docstring), or a point where its gradient is at
    rounding level when the infimum is at infinity.

    Every term a singleton (n = 1 or k = 1): the program separates, alpha_i = log t_i / (c_i - t_i) inner (the
    closed form of an inner singleton), 0 outer (a lone token's softmax share is 1 whatever alpha). A token with
    q = 0 is in no term: alpha = 0 (its target is 0 under Hall's condition). A token with t = 0 would need -inf:
    it leaves the program (a term U holding it becomes the term U minus it; an empty one is dropped) and gets
    ``ZERO_TARGET_GAP`` below the block's other weights (and below the slack's 0 on an inner block).
    """
    q_block, t = np.asarray(q_block, dtype=np.float64), np.asarray(t, dtype=np.float64)
    k = q_block.size
    alpha = np.zeros(k)
    incidence, c = block_terms(q_block, null_mass, n)
    if n == 1 or k == 1:
        if inner:
            c_i = c[: k]  # the singleton terms, in token order
            with np.errstate(divide="ignore"):
                alpha = np.log(t) - np.log(np.maximum(c_i - t, 1e-300))
        return np.where(np.isfinite(alpha), alpha, np.where(alpha > 0, 0.0, -ZERO_TARGET_GAP))
    live = (q_block > 0) & (t > 0)
    keep = incidence[:, live]
    terms = keep.any(1) & (c > 0)
    incidence, c = keep[terms], c[terms] / max(float(t.sum()), 1e-300)  # scaled to mass 1 (same minimiser)
    t_live = t[live] / max(float(t.sum()), 1e-300)
    free = np.ones(t_live.size, dtype=bool)
    if not inner and free.size:
        free[-1] = False  # the reference token of an outer block: alpha = 0
    if free.any():
        x0 = _start(incidence, c, t_live, inner)
        alpha[live] = _minimise(incidence, c, t_live, 1.0 if inner else 0.0, free, np.where(free, x0, 0.0))
    if (~live).any():
        alpha[(q_block > 0) & ~live] = alpha[live].min(initial=0.0) - ZERO_TARGET_GAP
    return alpha


def _start(incidence: np.ndarray, c: np.ndarray, t: np.ndarray, inner: bool) -> np.ndarray:
    """alpha_i = log t_i / (mass_i - t_i) inner, log t_i / mass_i outer (mass_i = sum_{U ni i} c_U), in [-30, 30]."""
    mass = c @ incidence
    rest = mass - t if inner else mass
    return np.clip(np.log(t) - np.log(np.maximum(rest, 1e-300)), -30.0, 30.0)


def _minimise(incidence: np.ndarray, c: np.ndarray, t: np.ndarray, sigma: float, free: np.ndarray,
              alpha0: np.ndarray) -> np.ndarray:
    """Minimise over ``alpha[free]`` (the rest fixed at ``alpha0``): trust-exact, then Newton steps (least squares
    on a singular Hessian) while they shrink ||grad||_1. Returns the full alpha at the best point seen."""
    def full(x: np.ndarray) -> np.ndarray:
        a = alpha0.copy()
        a[free] = x
        return a

    def parts(x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        f, g, h = program(incidence, c, t, sigma, full(x))
        return f, g[free], h[np.ix_(free, free)]

    res = scipy.optimize.minimize(lambda x: parts(x)[:2], alpha0[free], jac=True, hess=lambda x: parts(x)[2],
                                  method="trust-exact", options={"gtol": 1e-14, "maxiter": 2000})
    best = res.x
    _, g, h = parts(best)
    best_norm = float(np.abs(g).sum())
    for _ in range(POLISH_STEPS):
        if best_norm <= POLISH_TOL:
            break
        trial = best + np.linalg.lstsq(h, -g, rcond=None)[0]
        _, g_new, h_new = parts(trial)
        norm = float(np.abs(g_new).sum())
        if not norm < best_norm:
            break
        best, g, h, best_norm = trial, g_new, h_new, norm
    return full(best)


def block_log_weights(p: np.ndarray, draft: object) -> tuple[np.ndarray, np.ndarray]:
    """Every token's block log-weight alpha_i and block index (blocks in increasing position, so a larger index has
    priority): ``(log_w float [V], block int [V])`` for ``draft = IID(q, n)`` (module docstring). The records of psi
    come from :func:`otlp.optimal.chains.records`, the weights from :func:`block_program`."""
    from otlp.core.distributions import check_distribution
    from otlp.optimal import chains

    p = check_distribution(p, "p")
    q = check_distribution(draft.q, "q", size=p.size)
    n = int(draft.n)
    pre = chains.prefix(p[None], q[None], n)
    cuts = np.flatnonzero(chains.records(pre)[0])  # [K + 1] prefix indices, 0 ... V
    order, ps, qs, psi = pre.order[0], pre.ps[0], pre.qs[0], pre.psi[0]
    m_star = int(pre.m_star[0])
    log_w, block = np.zeros(p.size), np.zeros(p.size, dtype=np.int64)
    for j, (s, e) in enumerate(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True)):
        inner = e <= m_star
        t = ps[s:e].copy()
        if not inner:
            t[0] = max(t[0] - (psi[e] - psi[s]), 0.0)
        log_w[order[s:e]] = block_program(qs[s:e], t, float(pre.prefix_q[0, s]), n, inner)
        block[order[s:e]] = j
    return log_w, block
