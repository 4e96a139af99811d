"""The exact optimal rule for i.i.d. drafts as one water-filling class chain per group, on ``[B, V]`` arrays.

One implementation for every caller: :class:`~otlp.optimal.OptimalTransport`, :func:`~otlp.optimal.solve_batch`
(numpy, float64) and the torch verifier ``otlp.verifiers.get("optimal")`` (torch, on the tensors' device, no host
synchronisation and no data-dependent shape). ``xp`` is ``numpy`` or ``torch`` (:mod:`.xp`).

This module is the reference, the definition of the rule: it calls no C. The host route (:mod:`.host`) runs the same
functions with the C kernels of :mod:`otlp.backend.native` where they are built (psi on the prefixes, the slot roots,
the served group, its window's chain, the pieces, the draw), each pinned to its namesake here by
tests/backend/test_native.py.

Quantities (design note ``exact-ot-design.md`` §2; GR Thm 3.1, Lemma 6.3, Thm 6.2), positions i = 0..V-1 of each
row in decreasing q/p order (stable), prefix index m = 0..V:

* psi_m = P_m - Q_m^n (suffix form 1 - (1 - Qbar_m)^n - Pbar_m where Q_m > 1/2), m* its first argmin,
  alpha* = 1 + psi_{m*};
* records (0, m*, V, the strict prefix minima of psi in [1, m*], the suffix minima, ties included, in [m*, V]) cut
  the positions into groups; a group (s, e] ending at or before m* is *inner* (may reject), else *outer*; a tuple is
  served by the group of its highest-positioned draw;
* targets t = p, except the first position of an outer group: t_s = p_s - (psi_e - psi_s);
* per position: H_i = Q_i the draft mass below it, L_i = q(C_i) the mass of its group from it to the top, r_i = t_i
  / q_i, gap_i = psi_i - psi_e (at a group's first position: its slack psi_s - psi_e when inner, 0 when outer);
* the class mass after the step at position i > s solves (:func:`slot_mass`)

      (H_i + y)^n - H_i^n - r_{i-1} y = gap_i,      y in [0, L_i]  (the largest root; convex in y);

  y_s = L_s; the class mass entering the step is ``before_i = y_{i+1} + q_i`` (y_e = 0), the slot fires each draw
  of the class with a_i = 1 - y_i / before_i, i.e. hazard lam_i = log(before_i / y_i) (infinite when y_i = 0);
* along a run of equal ratios the chain needs no root: where r_{i-2} = r_{i-1} (i >= s + 2), p_{i-1} = r_{i-1}
  q_{i-1} and psi_i = psi_{i-1} + p_{i-1} - (H_i^n - H_{i-1}^n) make step i's equation step (i - 1)'s in y + q_{i-1},
  so y_i = (y_{i-1} - q_{i-1})^+ (then a_{i-1} = 0; q_{i-1} > 0): in a tied run only its second position needs
  a root (used for n >= 3, where a root takes Newton steps; r is computed as 1 / (q/p) where t = p, so that the
  tokens whose sort keys q/p are equal floats form one run, as the sort sees them);
* the final acceptance of an inner group, from the telescoping sum of its slots
  (sum_i [(H_i + before_i)^n - (H_i + y_i)^n] = T^n - (N + before_s)^n): beta = 1 - slack / capacity with
  capacity = (N + before_s)^n - N^n, N = H_s; an outer group has beta = 1;
* the rule on a tuple (:func:`evaluate`): with the served group's draws by position d_1 >= ... >= d_c, piece k holds
  the top k draws with hazard h_k = Lambda(d_{k+1} + 1) - Lambda(d_k + 1) (Lambda(j) = sum of lam over the group's
  positions >= j; infinite if the piece holds a certain slot), fires with probability reach_k (1 - e^{-k h_k}),
  shared equally; what is left gives each draw beta / c and rejects 1 - beta;
* after a rejection the output is drawn from the residual (p - R)_+ outside H*, which is psi_e - psi_s on the first
  position of every outer group and 0 elsewhere (R = t exactly on outer groups): sum = 1 - alpha*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from math import comb, inf

import numpy as np

from otlp.core import xp as X
from otlp.core.psi import int_power, ratio_keys, sorted_psi

#: Newton steps of :func:`slot_mass` for n >= 3 when the caller cannot iterate to convergence (device code). From the
#: tighter of two upper bounds of the root (module docstring of :func:`slot_mass`) the iteration converges
#: monotonically and quadratically; tests/optimal/test_chains.py checks convergence to rounding on adversarial rows.
NEWTON_STEPS = 8


@dataclass(frozen=True)
class Prefix:
    """psi on the prefixes of each row's decreasing-q/p order, with what it is computed from (``[B, V]`` by
    position, ``[B, V + 1]`` by prefix index)."""

    n: int
    order: object
    ps: object
    qs: object
    prefix_q: object
    suffix_q: object
    psi: object
    m_star: object
    alpha: object


def normalised_rows(x):  # noqa: ANN001, ANN201
    """float64 rows times the reciprocals of their sums (a row that sums to 0 is left as is: the caller's validation
    refuses it), as a tensor on x's device: how the torch routes of :func:`otlp.optimal.sampler.verify` normalise
    their inputs."""
    import torch

    rows = x.to(dtype=torch.float64)
    total = rows.sum(-1, keepdim=True)
    inv = 1.0 / total.where(total > 0, total.new_ones(()))  # times the reciprocal, as the CPU route
    # in place on a converted copy (one [B, V] float64 array fewer to allocate), never on the caller's tensor (under
    # torch.compile, which allocates as it sees fit and cannot compare data pointers: a product)
    if torch.compiler.is_compiling() or rows.data_ptr() == x.data_ptr():
        return rows * inv
    return rows.mul_(inv)


def ratio_order(P, Q):  # noqa: ANN001, ANN201 - [B, V] arrays
    """``int64 [B, V]``: each row's positions by decreasing q/p (p = 0 < q first, p = q = 0 last, stable; the keys of
    :func:`otlp.core.psi.ratio_keys`)."""
    with X.errstate(P, divide="ignore", invalid="ignore"):
        return X.sort_descending(ratio_keys(P, Q))  # [B, V]


def prefix(P, Q, n: int, order=None) -> Prefix:  # noqa: ANN001 - [B, V] arrays
    """Sort every row of ``P, Q: float64 [B, V]`` by decreasing q/p (:func:`ratio_order`) and compute psi on the
    prefixes (GR Lemma 6.3, the suffix form where Q_m > 1/2), m* and alpha*. ``order``: the sort of an earlier
    ``prefix`` of the same rows (it does not depend on n), so that it is not redone."""
    order = ratio_order(P, Q) if order is None else order
    with X.errstate(P, divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        ps, qs = X.take(P, order), X.take(Q, order)  # [B, V]
        _, prefix_q, suffix_q, psi = sorted_psi(ps, qs, n)  # [B, V + 1]
        m_star = X.argmin_rows(psi)  # [B], first exact argmin
    return sorted_prefix(n, order, ps, qs, prefix_q, suffix_q, psi, m_star)


def sorted_prefix(n: int, order, ps, qs, prefix_q, suffix_q, psi, m_star) -> Prefix:  # noqa: ANN001
    """The :class:`Prefix` of psi on the prefixes of the ratio order, with alpha* = 1 + psi_{m*} (GR Thm 3.1)."""
    with X.errstate(psi, invalid="ignore"):
        alpha = 1.0 + X.take(psi, m_star[:, None])[:, 0]  # [B]
    return Prefix(n=n, order=order, ps=ps, qs=qs, prefix_q=prefix_q, suffix_q=suffix_q, psi=psi, m_star=m_star,
                  alpha=alpha)


def records(pre: Prefix):  # noqa: ANN201
    """``bool [B, V + 1]``: the prefix indices that cut the groups (0, m*, V, the strict prefix minima of psi in
    [1, m*] and its suffix minima, ties included, in [m*, V])."""
    xp = X.namespace(pre.psi)
    V = pre.ps.shape[-1]
    psi, ms = pre.psi, pre.m_star[:, None]
    idx = X.arange_like(psi, V + 1)[None, :]
    before_min = X.pad_first(X.cummin(psi[..., :V]), inf)  # min of psi before m
    after_min = X.pad_last(X.suffix_min(psi[..., 1:]), inf)  # min of psi after m
    inner = (psi < before_min) & (idx <= ms)
    outer = (psi <= after_min) & (idx >= ms)
    return xp.where(idx == ms, True, inner | outer | (idx == 0) | (idx == V))


def residual_cdf(pre: Prefix):  # noqa: ANN201
    """``[B, V]`` the cumulative residual mass over positions, F_j = min_{m > j} psi_m - psi_{m*} for j >= m*, else 0.

    The residual (p - R)_+ outside H* is psi_e - psi_s on the first position s of each outer group (s, e] and 0
    elsewhere; the next record after j is where the suffix minimum of psi after j is attained, so the sum telescopes.
    F is non-decreasing with F_{V-1} = -psi_{m*} = 1 - alpha*."""
    xp = X.namespace(pre.psi)
    V = pre.ps.shape[-1]
    pos = X.arange_like(pre.psi, V)[None, :]
    psi_min = X.take(pre.psi, pre.m_star[:, None])
    return xp.where(pos >= pre.m_star[:, None], X.maximum(X.suffix_min(pre.psi[..., 1:]) - psi_min, 0.0), 0.0)


@dataclass(frozen=True)
class Terms:
    """The class-chain quantities on a window of consecutive positions ``[B, W]`` (:func:`group_terms`); ``beta``,
    the group's final acceptance, is read at a group's first position (``first``) only."""

    first: object
    t: object
    ps: object
    qs: object
    H: object
    y: object
    before: object
    a: object
    lam: object
    certain: object
    beta: object


def group_terms(pre: Prefix, pos, start, end, steps: int | None = None, rows=None,  # noqa: ANN001
                roots=None) -> Terms:  # noqa: ANN001
    """The class chain at positions ``pos [B, W]`` (consecutive, the first column a group's first position; entries
    past V - 1 are clamped and meaningless), each in the group of positions ``start .. end - 1`` (``[B, W]`` or
    ``[B, 1]``). ``steps``: Newton steps of :func:`slot_mass` (None: to convergence, numpy only).

    ``rows int64 [1, T]`` (numpy only): ``pos, start, end`` are ``[1, T]``, the windows of several rows one after
    the other, entry k of row ``rows[0, k]`` (each window starting at its group's first position).

    ``roots``: a function with :func:`slot_mass`'s signature and values (default :func:`slot_mass`; the host route
    passes its C kernel, :func:`otlp.optimal.host.slot_mass`)."""
    xp = X.namespace(pre.psi)
    with X.errstate(pre.psi, divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        return _group_terms(xp, pre, pos, start, end, steps, rows, roots or slot_mass)


def _group_terms(xp, pre: Prefix, pos, start, end, steps: int | None, rows, roots) -> Terms:  # noqa: ANN001
    n, V = pre.n, pre.ps.shape[-1]
    if rows is None:
        take, m_star = X.take, pre.m_star[:, None]
    else:
        def take(x, idx):  # noqa: ANN001, ANN202 - x[rows, idx], through the flat index (several times faster)
            return x.ravel().take(rows * x.shape[-1] + idx)

        m_star = pre.m_star[rows]
    at = X.minimum(pos, V - 1)
    ps, qs, H = take(pre.ps, at), take(pre.qs, at), take(pre.prefix_q, at)
    psi, psi_s, psi_e = take(pre.psi, at), take(pre.psi, start), take(pre.psi, end)
    first = pos == start
    inner = end <= m_star
    t = xp.where(first & ~inner, X.maximum(ps - (psi_e - psi_s), 0.0), ps)  # GR Thm 6.2 vertex on outer groups
    L = take(pre.suffix_q, at) - take(pre.suffix_q, end)  # q(C_i), a difference of suffix sums from the top
    gap = X.maximum(xp.where(first, xp.where(inner, psi_s - psi_e, 0.0), psi - psi_e), 0.0)
    q_pos = qs > 0
    q_div = xp.where(q_pos, qs, 1.0)
    # r = t / q; as 1 / (q / p) where t = p, so that tokens tied in the sort key q / p (equal floats) get equal r and
    # take the tied-run closed form (p / q rounded can differ between them; 1 / (q / p) is within 1 ulp of it)
    r = xp.where(q_pos, xp.where(first & ~inner, t / q_div, 1.0 / (q_div / ps)), 0.0)
    r_below = X.pad_first(r[..., :-1], 0.0)  # the window starts at a group's first position, where it is unused
    if n <= 2:  # closed-form roots, cheaper than finding the tied runs
        y = xp.where(first, L, roots(H, L, xp.where(first, 0.0, r_below), gap, n, steps))
    else:  # tied runs (module docstring): y_i = (y_a - (H_i - H_a))^+ from the last position a solved for
        tied = _tied(r_below, q_pos, pos, start)
        y = _only_where(lambda *a: roots(*a, n, steps), ~tied & ~first, H, L, xp.where(first, 0.0, r_below), gap)
        y = xp.where(first, L, y)
        anchor = X.cummax(xp.where(tied, 0, X.arange_like(y, y.shape[-1]) + 0 * pos))  # [B, W] last solved entry
        y = xp.where(tied, X.minimum(X.maximum(X.take(y, anchor) - (H - X.take(H, anchor)), 0.0), L), y)
    before = xp.where(pos + 1 >= end, 0.0, X.pad_last(y[..., 1:], 0.0)) + qs  # class mass entering the step
    b_pos = before > 0
    a = xp.where(first | ~b_pos, 0.0, X.minimum(X.maximum(1.0 - y / xp.where(b_pos, before, 1.0), 0.0), 1.0))
    certain = (a >= 1.0) & ~first
    lam = xp.where(certain | first, 0.0, -xp.log1p(-xp.where(certain, 0.0, a)))
    capacity = _only_where(lambda *a: power_gap(*a, n), first, H, before)  # of the final class: at first positions
    c_pos = capacity > 0
    beta = xp.where(inner, xp.where(c_pos, X.minimum(X.maximum(1.0 - gap / xp.where(c_pos, capacity, 1.0), 0.0),
                                                      1.0), 0.0), 1.0)
    return Terms(first=first, t=t, ps=ps, qs=qs, H=H, y=y, before=before, a=a, lam=lam, certain=certain, beta=beta)


@dataclass(frozen=True)
class Chains:
    """Every group of every row as a class chain (``[B, V]`` by position unless said otherwise): the full rule,
    for :class:`~otlp.optimal.OptimalTransport` and :func:`~otlp.optimal.solve_batch`.

    position : position of each token (token order); start, end : the position's group is start .. end - 1;
    inner : the group may reject; lam_low, certain_low : the finite hazard and the number of certain slots of the
    group's slots at or below the position; beta : the group's final acceptance (at its first position);
    residual : the residual weight at each position (sums to 1 - alpha*); terms : the per-position chain.
    """

    pre: Prefix
    position: object
    start: object
    end: object
    inner: object
    lam_low: object
    certain_low: object
    beta: object
    residual: object
    terms: Terms


def build(P, Q, n: int, *, newton_steps: int | None = NEWTON_STEPS, pre: Prefix | None = None,  # noqa: ANN001
          roots=None) -> Chains:  # noqa: ANN001 - [B, V] arrays
    """The class chains of every group of every row of ``P, Q: float64 [B, V]`` (checked distributions), n >= 1;
    ``newton_steps`` as in :func:`slot_mass` (None: iterate until no entry moves, numpy only). ``pre``: the rows'
    :func:`prefix`, if the caller has it; ``roots``: as in :func:`group_terms`."""
    pre = prefix(P, Q, n) if pre is None else pre
    xp = X.namespace(P)
    V = P.shape[-1]
    rec = records(pre)
    pos = X.arange_like(P, V)[None, :]
    start = X.cummax(xp.where(rec[..., :V], pos, 0))  # [B, V]
    end = X.suffix_min(xp.where(rec[..., 1:], pos + 1, V))  # [B, V]
    terms = group_terms(pre, pos + 0 * start, start, end, newton_steps, roots=roots)
    lam_low = _within_group(terms.lam, start)
    certain_low = _within_group(xp.where(terms.certain, 1.0, 0.0), start)
    with X.errstate(terms.lam, invalid="ignore"):
        drop = X.take(pre.psi, end) - X.take(pre.psi, start)
        outer_first = terms.first & ~(end <= pre.m_star[:, None])
        residual = xp.where(outer_first, X.minimum(X.maximum(drop, 0.0), terms.ps), 0.0)
    return Chains(pre=pre, position=X.inverse_permutation(pre.order), start=start, end=end,
                  inner=end <= pre.m_star[:, None], lam_low=lam_low, certain_low=certain_low,
                  beta=X.take(terms.beta, start), residual=residual, terms=terms)


def _within_group(x, start):  # noqa: ANN001, ANN202
    """``[B, V]``: the sum of x over the positions of each one's group up to and including it."""
    C = X.pad_first(X.cumsum(x), 0.0)  # [B, V + 1]
    return C[..., 1:] - X.take(C, start)


def row_sums(ch: Chains) -> np.ndarray:
    """The rule's row sums R by position (numpy): a member of a class fires in the slots at or below its position
    with its current mass, so R_i = q_i (S_i + F_i final) with S_i = share_i + (1 - a_i) S_{i-1} (share = the tuple
    mass of slot i per unit of class mass entering it), F_i = prod (1 - a) over the group's positions <= i, and
    final = beta capacity / before_s the final class's mass per unit."""
    tm, n = ch.terms, ch.pre.n
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(tm.first, 0.0, np.clip(tm.before - tm.y, 0.0, tm.before))
        b_pos = tm.before > 0
        share = np.where(tm.first | ~b_pos, 0.0, power_gap(tm.H + tm.y, x, n) / np.where(b_pos, tm.before, 1.0))
        final = np.where(tm.first & b_pos, tm.beta * power_gap(tm.H, tm.before, n) / np.where(b_pos, tm.before, 1.0),
                         0.0)
    S, F = segmented_scan(share, np.where(tm.first, 1.0, 1.0 - tm.a), tm.first)
    return tm.qs * (S + F * np.take_along_axis(final, ch.start, axis=-1))


def segmented_scan(share: np.ndarray, keep: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """S_i = share_i + keep_i S_{i-1} and F_i = keep_i F_{i-1} within segments (``first`` marks a segment's first
    element, where S = share and F = keep), along axis 1, by Hillis-Steele doubling of the affine maps
    x -> b_i + k_i x (k_i = 0 at a segment's first element, so nothing crosses a boundary); the steps stop once
    they span the longest segment. ``[V, B]`` layout inside, so a step's shifted operands are contiguous."""
    B, V = share.shape
    bounds = first.copy()
    bounds[:, 0] = True
    starts = np.flatnonzero(bounds)
    longest = max(int(np.diff(starts).max(initial=0)), B * V - int(starts[-1]))
    K = np.where(bounds, 0.0, keep).T.copy()
    S, F = share.T.copy(), np.where(bounds, keep, 0.0).T.copy()
    tmp = np.empty_like(K)
    d = 1
    while d < longest:
        np.multiply(K[d:], S[:-d], out=tmp[d:])
        S[d:] += tmp[d:]
        np.multiply(K[d:], F[:-d], out=tmp[d:])
        F[d:] += tmp[d:]
        np.multiply(K[d:], K[:-d], out=tmp[d:])
        K[d:] = tmp[d:]
        d *= 2
    return S.T, F.T


#: above this n, :func:`power_gap` takes its logarithmic form (the binomial coefficients of the expansion overflow
#: float64 near n = 1030; up to here the expansion is exact to rounding with no cancellation).
POWER_GAP_EXPANSION_MAX = 64


def power_gap(base, x, n: int):  # noqa: ANN001, ANN201
    """(base + x)^n - base^n for base, x >= 0 (the tuple mass of a block above a null mass), on floats, numpy arrays
    or tensors of a common shape, any n >= 1: the positive sum sum_{j>=1} C(n, j) base^(n-j) x^j by Horner in x (no
    cancellation) up to ``POWER_GAP_EXPANSION_MAX``, above it (base + x)^n (1 - e^(-n log1p(x / base))) (both factors
    in [0, 1] for masses; x^n where base = 0)."""
    if n == 1:
        return x + 0.0 * base
    if n == 2:
        return x * (2.0 * base + x)
    if n > POWER_GAP_EXPANSION_MAX:
        return _power_gap_log(base, x, n)
    acc = x + n * base  # the j = n and j = n - 1 coefficients
    powers = _descending_powers(base, n)  # base^(n-1) .. base: products (chains.c forms the same)
    for j in range(n - 2, 0, -1):
        acc = acc * x + comb(n, j) * powers[j - 1]
    return acc * x


def _power_gap_log(base, x, n: int):  # noqa: ANN001, ANN202
    if isinstance(base, float) and isinstance(x, float):
        return (base + x) ** n * -math.expm1(-n * math.log1p(x / base)) if base > 0 else x**n
    arr = base if not isinstance(base, float) else x
    xp = X.namespace(arr)
    pos = base > 0
    with X.errstate(arr, divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        ratio = x / xp.where(pos, base, 1.0)
        return xp.where(pos, (base + x) ** n * -xp.expm1(-n * xp.log1p(ratio)), x**n)


def slot_mass(H, L, r_below, gap, n: int, steps: int | None = None):  # noqa: ANN001, ANN201
    """The largest root y in [0, L] of the convex g(y) = (H + y)^n - H^n - r_below y - gap (g(0) <= 0 <= g(L)).

    n = 1: g(y) = (1 - r) y - gap, y = gap / (1 - r) for r < 1, else L (r = 1 and gap = 0: every y is a root; a
    non-singleton group at n = 1 holds only tokens with p = q). n = 2: g(y) = y^2 + b y - gap with b = 2H - r_below,
    closed form in its stable branch: y = 2 gap / (b + sqrt(b^2 + 4 gap)) for b >= 0, (sqrt(b^2 + 4 gap) - b) / 2
    for b < 0.
    n >= 3: Newton from the smaller of two upper bounds of the root, which then decreases monotonically to it:
    y_A, the root of the quadratic lower bound y (n H^(n-1) - r + C(n, 2) H^(n-2) y) <= g(y) + gap (every further
    term of the expansion is positive; accurate when y << H), and y_B = u_B - H with u_B = max((2 c+)^(1/n),
    (2 r)^(1/(n-1))), c = gap + H^n - r H (u = H + y solves u^n = r u + c <= 2 max(r u, c+); within 2^(1/(n-1)) of
    the root when y >~ H). ``steps``: at most this many Newton steps (None: ``NEWTON_STEPS`` on torch tensors, at
    most 200 on numpy arrays); on numpy arrays each entry also stops once it no longer moves (:func:`_newton_numpy`).
    """
    xp = X.namespace(H)
    gap = X.maximum(gap, 0.0)
    if n == 1:
        below = r_below < 1.0
        return X.minimum(X.maximum(xp.where(below, gap / xp.where(below, 1.0 - r_below, 1.0), L), 0.0), L)
    if n == 2:
        b = 2.0 * H - r_below
        root = xp.sqrt(b * b + 4.0 * gap)
        den = b + root
        y = xp.where(b >= 0, 2.0 * gap / xp.where(den > 0, den, 1.0), 0.5 * (root - b))
        return X.minimum(X.maximum(y, 0.0), L)
    # upper bound A: y (b + D1 y) = gap with b = n H^(n-1) - r, D1 = C(n, 2) H^(n-2)
    powers = _descending_powers(H, n) if n <= POWER_GAP_EXPANSION_MAX else None
    Hn2 = powers[1] if powers is not None else int_power(H, n - 2)
    b = n * Hn2 * H - r_below
    D1 = comb(n, 2) * Hn2
    root = xp.sqrt(b * b + 4.0 * D1 * gap)
    den = b + root
    d_pos = D1 > 0
    y_a = xp.where(b >= 0, xp.where(den > 0, 2.0 * gap / xp.where(den > 0, den, 1.0), 0.0),
                   xp.where(d_pos, (root - b) / xp.where(d_pos, 2.0 * D1, 1.0), inf))
    # upper bound B, in u = H + y
    c = X.maximum(gap + Hn2 * H * H - r_below * H, 0.0)
    u_b = X.maximum((2.0 * c) ** (1.0 / n), (2.0 * X.maximum(r_below, 0.0)) ** (1.0 / (n - 1)))
    y = X.maximum(X.minimum(X.minimum(y_a, u_b - H), L), 0.0)
    if X.is_numpy(y) and y.size:
        return _newton_numpy(y, H, L, r_below, gap, n, steps, powers)
    terms = _horner_terms(powers, n)
    neg_gap = -gap
    for _ in range(NEWTON_STEPS if steps is None else steps):  # device code: no data-dependent stop
        y = _newton_step(y, H, L, r_below, neg_gap, n, terms)
    return y


def _descending_powers(H, n: int) -> list:  # noqa: ANN001
    """``[H^(n-1), H^(n-2), ..., H]`` (entry j is H^(n-1-j)), each from the one after it by one multiplication
    (numpy's ** with an integer exponent above 2 calls pow per entry): the powers that :func:`slot_mass`'s bounds
    (H^(n-2)) and its Newton coefficients (:func:`_horner_terms`) read, n >= 2."""
    powers = [H]
    for _ in range(n - 2):
        powers.append(powers[-1] * H)
    return powers[::-1]


def _horner_terms(powers: list | None, n: int) -> tuple[list, list]:
    """The per-entry coefficients of :func:`_newton_step`'s polynomials, computed once per root from
    :func:`_descending_powers` of H: ``(c, d)`` with D(y) = ((H + y)^n - H^n) / y = sum_j c_j y^j,
    c_j = C(n, j + 1) H^(n-1-j) (j = 0..n-2; c_{n-1} = 1), and y D'(y) = sum_{j>=1} d_j y^j,
    d_j = j C(n, j + 1) H^(n-1-j) (j = 1..n-2; d_0 = 0, d_{n-1} = n - 1). Empty above ``POWER_GAP_EXPANSION_MAX``
    (``powers`` None; closed forms there)."""
    if powers is None:
        return [], []
    coef = [comb(n, j + 1) for j in range(n)]  # C(n, j + 1): a few integers
    return [coef[j] * powers[j] for j in range(n - 1)], [0.0] + [j * coef[j] * powers[j] for j in range(1, n - 1)]


def _newton_step(y, H, L, r_below, neg_gap, n: int, terms: tuple[list, list]):  # noqa: ANN001, ANN202
    """One Newton step of g(y) = (H + y)^n - H^n - r_below y - gap (``neg_gap`` = -gap) from an upper bound of its
    largest root, kept in [0, L]: g = y (D(y) - r_below) - gap and g' = D - r_below + y D'(y), each polynomial by
    Horner in y on the coefficients of :func:`_horner_terms` (no cancellation; one ``addcmul`` kernel per degree on
    torch); above ``POWER_GAP_EXPANSION_MAX`` g and g' in closed form."""
    xp = X.namespace(y)
    if n > POWER_GAP_EXPANSION_MAX:  # the expansion's coefficients overflow
        g, dg = power_gap(H, y, n) - r_below * y + neg_gap, n * (H + y) ** (n - 1) - r_below
    else:
        c, d = terms
        D = y + c[n - 2]  # c_{n-1} = 1
        for j in range(n - 3, -1, -1):
            D = X.mul_add(D, y, c[j])
        shift = (n - 1) * y + d[n - 2]  # d_{n-1} = n - 1 (n >= 3 here)
        for j in range(n - 3, 0, -1):
            shift = X.mul_add(shift, y, d[j])
        Dr = D - r_below
        g, dg = X.mul_add(Dr, y, neg_gap), Dr + shift * y
    ok = dg > 0
    return xp.where(ok, X.minimum(X.maximum(y - g / xp.where(ok, dg, 1.0), 0.0), L), y)


def _tied(r_below, q_pos, pos, start):  # noqa: ANN001, ANN202
    """The positions i >= s + 2 whose two positions below share one ratio, r_{i-2} = r_{i-1}, with q_{i-1} > 0: their
    slot mass follows from the one below (module docstring)."""
    same = r_below == X.pad_first(r_below[..., :-1], -1.0)
    return same & X.pad_first(q_pos[..., :-1], False) & (pos >= start + 2)


def _only_where(fn, mask, *args):  # noqa: ANN001, ANN202
    """``fn(*args)`` (elementwise) where ``mask`` holds, elsewhere 0 on numpy arrays, where only those entries are
    computed; on tensors everywhere (static shapes on the device)."""
    if not X.is_numpy(args[0]):
        return fn(*args)
    shape = np.broadcast_shapes(mask.shape, *(np.shape(x) for x in args))
    out = np.zeros(shape)
    out[mask] = fn(*(np.broadcast_to(x, shape)[mask] for x in args))
    return out


def _newton_numpy(y, H, L, r_below, gap, n: int, steps: int | None, powers):  # noqa: ANN001, ANN202 - numpy
    """:func:`slot_mass`'s Newton iteration on numpy arrays, each entry until its step moves it by at most 4.5e-16
    of itself (about 2 ulp; it then keeps that step's value and stops) or ``steps`` steps (None: at most 200), as
    ``otlp_slot_mass`` (otlp/backend/native/chains.c) iterates each entry: the entries still moving are gathered into
    smaller arrays once they are fewer than half, so the many that converge in two or three steps stop costing; until
    then the stopped ones are carried along unchanged. ``powers``: :func:`_descending_powers` of H (None above
    ``POWER_GAP_EXPANSION_MAX``), as the bounds read them."""
    shape = y.shape
    y = y.reshape(-1).copy()
    H, L, r_below, gap = (np.broadcast_to(x, shape).reshape(-1) for x in (H, L, r_below, gap))
    live = None  # the entries of y still iterating (None: all)
    cur, sub = y, (H, L, r_below, -gap)
    stopped = None  # entries of cur that stopped at an earlier step (None: none)
    terms = _horner_terms(None if powers is None else [np.broadcast_to(x, shape).reshape(-1) for x in powers], n)
    limit = 200 if steps is None else steps
    for _ in range(limit):
        new = _newton_step(cur, *sub, n, terms)
        if stopped is not None:
            np.copyto(new, cur, where=stopped)
        moved = np.abs(new - cur) > 4.5e-16 * cur
        if live is None:
            y = new
        else:
            y[live] = new
        if not moved.any():
            break
        if 2 * np.count_nonzero(moved) < moved.size:  # gather the moving entries
            live = np.flatnonzero(moved) if live is None else live[moved]
            cur, sub = new[moved], tuple(x[moved] for x in sub)
            terms = tuple([x[moved] if np.ndim(x) else x for x in part] for part in terms)
            stopped = None
        else:
            cur, stopped = new, ~moved
    return y.reshape(shape)


def evaluate(ch: Chains, w):  # noqa: ANN001, ANN201
    """The full rule on one drafted tuple per row: ``w int64 [B, n]`` -> ``(accept [B, n], reject [B])``; a repeated
    token's draws are summed on its first slot."""
    xp = X.namespace(ch.lam_low)
    with X.errstate(ch.lam_low, divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        pos = X.take(ch.position, w)  # [B, n]
        top = X.take(pos, X.argmax_rows(pos)[:, None])  # [B, 1]
        s = X.take(ch.start, top)
        return _pieces(xp, w, pos, pos >= s, X.take(ch.lam_low, pos), X.take(ch.certain_low, pos),
                       X.take(ch.beta, s)[:, 0])


def tuple_rule(pre: Prefix, w, *, window: int | str | None = None, steps: int | None = NEWTON_STEPS,  # noqa: ANN001, ANN201
               group: tuple | None = None, roots=None):
    """The rule on one drafted tuple per row from the prefix structure alone: ``w int64 [B, n]`` -> ``(accept [B, n],
    reject [B])``, computing the class chain of the served group only on its positions up to the top draw (the
    slots above it never matter: piece k's hazard spans (d_{k+1}, d_k]).

    ``window``: how many positions from the group's first one to compute, at least max(top - s) + 2 over the rows.
    None: V, a static shape for device code; ``"auto"`` (numpy only): each row its own top - s + 2 positions, all
    rows' windows in one flat array (:func:`window_hazards`: a row whose top draw lies deep in a large group does not
    widen the others). ``steps``: Newton steps at n >= 3 (None: until no entry moves, numpy only). ``group``: the
    caller's :func:`served_group` of these tuples, if it has it; ``roots``: as in :func:`group_terms`."""
    xp = X.namespace(pre.psi)
    V = pre.ps.shape[-1]
    with X.errstate(pre.psi, divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        pos, top, s, e = served_group(pre, w) if group is None else group
        if window == "auto":
            cum, cum_c, beta = window_hazards(pre, pos, top, s, e, steps, roots)
            return _pieces(np, w, pos, pos >= s, cum, cum_c, beta)
        W = V if window is None else window
        win = s + X.arange_like(pre.psi, W)[None, :]  # [B, W]
        tm = group_terms(pre, win, s, e, steps, roots=roots)
        live = (win <= top) & (win < e)  # the slots that can matter
        cum = X.cumsum(xp.where(live, tm.lam, 0.0))
        cum_c = X.cumsum(xp.where(live & tm.certain, 1.0, 0.0))
        off = X.minimum(X.maximum(pos - s, 0), W - 1)
        return _pieces(xp, w, pos, pos >= s, X.take(cum, off), X.take(cum_c, off), tm.beta[:, 0])


def served_group(pre: Prefix, w):  # noqa: ANN001, ANN201
    """Positions of the draws ``[B, n]``, the top one ``[B, 1]`` and its group's first / one-past-last positions
    ``s, e [B, 1]``: s = the last record <= top, e = the first record > top (:func:`records`), found without the
    records of the whole row:

    * top < m* (an inner group): the records <= top are the strict prefix minima of psi, so s is the first argmin
      of psi over [0, top] and e the first m > top with psi_m < psi_s (one is <= m*, since psi_m* < psi_s);
    * top >= m* (an outer group): e is the first argmin of psi over (top, V] (each psi before it in (top, e) is
      above a later one: no suffix minimum), and s the last m <= top with psi_m <= psi_e (the psi after it up to
      top are above psi_e, so not suffix minima, and it is one; m* qualifies, so s >= m*)."""
    xp = X.namespace(pre.psi)
    V = pre.ps.shape[-1]
    psi = pre.psi
    pos = X.take(X.inverse_permutation(pre.order), w)  # [B, n]
    top = X.take(pos, X.argmax_rows(pos)[:, None])  # [B, 1]
    idx = X.arange_like(psi, V + 1)[None, :]
    after = idx > top  # [B, V + 1]
    s_in = X.argmin_rows(xp.where(after, inf, psi))[:, None]
    e_in = X.first_true(after & (psi < X.take(psi, s_in)))[:, None]
    e_out = X.argmin_rows(xp.where(after, psi, inf))[:, None]
    s_out = X.max_rows(xp.where(~after & (psi <= X.take(psi, e_out)), idx, 0))[:, None]
    inner = top < pre.m_star[:, None]
    return pos, top, xp.where(inner, s_in, s_out), xp.where(inner, e_in, e_out)


def needed_window(pre: Prefix, w) -> int:
    """The smallest ``window`` :func:`tuple_rule` needs for these tuples (a host integer: for CPU callers)."""
    _, top, s, _ = served_group(pre, w)
    return int((top - s).max()) + 2


def window_hazards(pre: Prefix, pos, top, s, e, steps: int | None, roots=None):  # noqa: ANN001, ANN201 - numpy
    """:func:`tuple_rule` with ``window="auto"`` up to its pieces: the served groups' chains on their own windows
    s .. top + 1 (``[B, 1]`` each; the top draw's slot and the class mass above it): ``(cum, cum_c)`` ``[B, n]``, the
    running sums over the window of the hazards and of the certain slots where the slot can matter, read at the draws
    (``pos [B, n]``, offset pos - s clamped to the window), and ``beta [B]``. By :func:`group_terms` on the
    T = sum_b (top_b - s_b + 2) positions of all rows in one ``[1, T]`` array, then running sums on a ``[B, W]``
    array; ``roots`` as there."""
    B = s.shape[0]
    width = (top - s)[:, 0] + 2  # [B]
    W = int(width.max())
    first = np.cumsum(width) - width  # [B] where each row's window starts in the flat array
    rows = np.repeat(np.arange(B), width)  # [T]
    k = np.arange(rows.size) - first[rows]  # [T] offset in the row's window
    start, end = s[:, 0][rows][None, :], e[:, 0][rows][None, :]  # [1, T] each entry's group
    win = start + k[None, :]  # [1, T] positions
    tm = group_terms(pre, win, start, end, steps, rows=rows[None, :], roots=roots)
    live = (win <= top[:, 0][rows][None, :]) & (win < end)  # [1, T] the slots that can matter
    flat = rows * W + k  # [T] each entry's place in a [B, W] array (a 1-D scatter, several times faster than 2-D)
    lam, certain = np.zeros(B * W), np.zeros(B * W)
    lam[flat] = np.where(live, tm.lam, 0.0)[0]
    certain[flat] = (live & tm.certain)[0]
    off = np.minimum(np.maximum(pos - s, 0), W - 1)
    return (X.take(X.cumsum(lam.reshape(B, W)), off), X.take(X.cumsum(certain.reshape(B, W)), off),
            tm.beta[0, first])


def _pieces(xp, w, pos, in_group, cum, cum_c, beta):  # noqa: ANN001, ANN202
    """Accept / reject from the cumulative hazards at the draws: with the served group's draws by position
    d_1 >= ... >= d_c, piece k has hazard h_k = Lambda_low(d_k) - Lambda_low(d_{k+1}) (Lambda_low(d_{c+1}) = 0;
    infinite when the piece holds a certain slot) and fires with probability reach_k (1 - e^{-k h_k}), shared by
    its k draws; what is left gives each draw beta / c and rejects 1 - beta."""
    B, n = w.shape
    key = xp.where(in_group, pos, -1)
    by_pos = X.stable_descending(key)  # [B, n]: the group's draws by position, descending, then the rest
    c = in_group.sum(-1)  # [B]
    ks = X.arange_like(key, n)[None, :]
    valid = ks < c[:, None]
    more = ks + 1 < c[:, None]
    at, at_c = X.take(cum, by_pos), X.take(cum_c, by_pos)
    nxt = xp.where(more, X.pad_last(at[..., 1:], 0.0), 0.0)
    nxt_c = xp.where(more, X.pad_last(at_c[..., 1:], 0.0), 0.0)
    h = xp.where(valid, X.maximum(at - nxt, 0.0), 0.0)
    h = xp.where(valid & (at_c - nxt_c > 0), inf, h)  # [B, n]
    per = xp.zeros_like(h)  # [B, n] by sorted slot
    log_reach = xp.zeros_like(h[..., 0])  # [B]
    for k in range(1, n + 1):  # the n pieces, not tokens
        hk = h[..., k - 1]
        fired = xp.exp(log_reach) * -xp.expm1(-k * hk)  # [B]
        per = per + xp.where(ks < k, (fired / k)[:, None], 0.0)
        log_reach = log_reach - k * hk
    left = xp.exp(log_reach)  # [B]
    per = xp.where(valid, per + (left * beta / X.maximum(c, 1))[:, None], 0.0)
    slot = X.scatter_rows(per, by_pos)  # [B, n] by draft slot
    same = w[:, :, None] == w[:, None, :]  # [B, n, n]
    first_occ = X.first_true(same) == ks  # slot k holds the first occurrence of its token
    accept = xp.where(first_occ, (xp.where(same, slot[:, None, :], 0.0)).sum(-1), 0.0)
    return accept, left * (1.0 - beta)


def sample(pre: Prefix, accept, reject, w, u):  # noqa: ANN001, ANN201
    """One output token per row: draft slot k with probability accept[:, k], else (reject) a draw from the residual
    by inverse CDF over positions (:func:`residual_cdf`). ``u [B, 2]`` uniforms in [0, 1) -> ``(tokens [B],
    accepted_index [B])`` (-1: drawn from the residual). A row with no residual mass (alpha* = 1) never rejects: its
    reject probability is rounding, and the draw falls back to the drafts.

    The residual draw needs no CDF array: F_j = min_{m > j} psi_m - psi_m* <= v (or j < m*) exactly when j < M, the
    last prefix index with psi_M - psi_m* <= v, so the position drawn with v = u (1 - alpha*) is min(M, V - 1) (the
    same comparisons as a search of F, so the same token)."""
    xp = X.namespace(accept)
    B, n = accept.shape
    V = pre.ps.shape[-1]
    psi_min = X.take(pre.psi, pre.m_star[:, None])  # [B, 1]
    total = X.maximum(-psi_min, 0.0)  # [B, 1] = F_{V-1} = 1 - alpha* (psi_V = 0)
    weights = X.pad_last(accept, 0.0) + xp.where(X.arange_like(accept, n + 1)[None, :] == n,
                                                 xp.where(total > 0, reject[:, None], 0.0), 0.0)  # [B, n + 1]
    cw = X.cumsum(weights)
    slot = X.minimum(X.searchsorted_rows(cw, u[:, :1] * cw[:, -1:]), n)  # [B]; n: reject
    slot = xp.where(weights.sum(-1) > 0, slot, 0)
    drawn = X.minimum(residual_index(pre, u[:, 1:]), V - 1)  # [B] position
    residual_token = X.take(pre.order, drawn[:, None])[:, 0]
    accepted = slot < n
    chosen = X.take(w, X.minimum(slot, n - 1)[:, None])[:, 0]
    tokens = xp.where(accepted, chosen, residual_token)
    return tokens, xp.where(accepted, slot, -1)


def single_draft(P, Q, w, u):  # noqa: ANN001, ANN201 - [B, V] arrays
    """The rule for one draft (n = 1) without the ratio order: ``P, Q [B, V]`` (normalised), ``w [B, 1]``, ``u [B, 2]``
    -> ``(tokens [B], accepted_index [B])`` as :func:`sample`.

    At n = 1 psi_m = P_m - Q_m is least after the tokens with q > p and alpha* = sum_x min(p_x, q_x) (SpecTr eq. 1,
    the maximal coupling), which forces P(accept | draft x) = min(1, p_x / q_x) (``u[:, 0] q_x < p_x``); a rejection
    draws the class chains' residual, psi_e - psi_s = p - q on each token after m*: (p - q)_+ / (1 - alpha*), here
    by inverse CDF in token order with ``u[:, 1]``. The law of :func:`sample` at n = 1, with no sort."""
    xp = X.namespace(P)
    px, qx = X.take(P, w)[:, 0], X.take(Q, w)[:, 0]  # [B]
    accepted = u[:, 0] * qx < px  # [B]
    drawn = X.inverse_cdf(X.positive_part(P, Q), u[:, 1:])  # [B] by the residual's running mass
    return xp.where(accepted, w[:, 0], drawn), xp.where(accepted, 0, -1)


def residual_threshold(pre: Prefix, u):  # noqa: ANN001, ANN201
    """``(psi_min, v)``, each ``[B, 1]``: psi at m* and the residual draw's threshold v = u (1 - alpha*) for uniforms
    ``u [B, 1]`` (1 - alpha* = -psi_m*, kept >= 0)."""
    psi_min = X.take(pre.psi, pre.m_star[:, None])  # [B, 1]
    return psi_min, u * X.maximum(-psi_min, 0.0)


def residual_index(pre: Prefix, u):  # noqa: ANN001, ANN201
    """``[B]`` the last prefix index M with psi_M - psi_m* <= v (:func:`residual_threshold`) for uniforms
    ``u [B, 1]``: the residual draw of :func:`sample` is position min(M, V - 1)."""
    xp = X.namespace(pre.psi)
    V = pre.ps.shape[-1]
    psi_min, v = residual_threshold(pre, u)
    below = (pre.psi - psi_min) <= v  # [B, V + 1]
    return X.max_rows(xp.where(below, X.arange_like(below, V + 1)[None, :], 0))
