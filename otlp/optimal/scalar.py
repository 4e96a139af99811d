"""Class chains of one small (p, q, n) in plain Python floats: the single-pair fast path for V <= SCALAR_MAX_V.

The rule of :func:`otlp.optimal.chains.build` (every group of the psi records a water-filling class chain), its
quantities computed position by position with Python floats instead of ``[1, V]`` arrays, by the same formulas in the
same order, and at n >= 3 the slot roots of every group in one call of the reference's own root,
:func:`otlp.optimal.chains.slot_mass` (through :func:`otlp.optimal.host.slot_mass`; its closed forms at n <= 2 are
written here on floats, a float operation at a time, where an array call would cost more), so that the chains are the
array route's bit for bit (the row sums and hazards, which the arrays accumulate in another order, to rounding;
tests/optimal/test_scalar.py). Below about a hundred tokens the arrays' cost is their per-call overhead (some
hundred array operations of about a microsecond each, whatever V is), while the loops here cost about 1 us per
position; past V = 128 the arrays win (:func:`takes`, benchmarks/transport_build.py).

Quantities (design note §2, :mod:`.chains`), positions i = 0..V-1 in decreasing q/p order, prefix index m:

* psi_m = P_m - Q_m^n (suffix form 1 - (1 - Qbar_m)^n - Pbar_m where Q_m > 1/2; the two forms of
  :func:`otlp.core.psi.prefix_psi`, called on floats), m* its first argmin, alpha* = 1 + psi_{m*}; records cut
  the positions into groups (inner: strict prefix minima up to m*; outer: suffix minima from m*, ties included);
* per group (s, e] (positions s..e-1): targets t (p; the outer group's first position t_s = p_s - (psi_e - psi_s)),
  H_i = Q_i the null mass below position i, gap_i = psi_i - psi_e (the group's slack at s: psi_s - psi_e when
  inner, 0 when outer), the class mass y_i after each step (:func:`otlp.optimal.chains.slot_mass`), slot
  lengths x_i, fire probabilities a_i, row sums R_i, beta and the hazards Lambda above each position.

The lists here are by position; OptimalTransport builds the array form (:func:`otlp.optimal.host.build`) on first
use for everything but the single slice.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from math import expm1, inf, log1p, sqrt

import numpy as np

from otlp.core.psi import psi_head, psi_tail
from otlp.optimal import host
from otlp.optimal.chains import NEWTON_STEPS, power_gap  # power_gap: (base + x)^n - base^n, on floats as on arrays

#: the largest vocabulary the scalar path takes (:func:`takes`).
SCALAR_MAX_V = 128


def takes(V: int, n: int) -> bool:
    """Whether :class:`~otlp.optimal.OptimalTransport` builds a pair of V tokens and n drafts here rather than on
    arrays (:func:`.host.build`): V <= ``SCALAR_MAX_V``, whatever n. Measured by benchmarks/transport_build.py (build
    and one slice, heavy-tailed pairs): the arrays cost 0.22-0.4 ms whatever V is (their per-call overhead), the
    scalar loops about 1 us a position plus, at n >= 3, one call for the slot roots. With the kernels the scalar path
    took 0.18-0.48x the arrays' time at V <= 32, 0.41-0.67x at V = 64, 0.61-1.06x at V = 128 and 0.95-1.8x at V = 256
    for n = 1 .. 8; without them 0.18-0.68x, 0.46-0.79x, 0.68-1.09x and 1.03-1.54x."""
    return V <= SCALAR_MAX_V


@dataclass(frozen=True)
class ScalarChains:
    """One pair's class chains, lists by position (0-based, decreasing q/p) unless said otherwise.

    order : token at each position; position : position of each token (token order);
    psi : [V + 1] on prefixes; m_star : first argmin of psi;
    starts, ends : [K] each group's first position and one past its last; inner : [K] the group may reject;
    group_of : the group of each position; t : targets; H : null mass below; rows : R_i; fire : a_i;
    lam_above, certain_above : finite hazard and number of certain slots above the position in its group;
    beta, total, total_certain : [K] per group.
    """

    n: int
    order: list
    position: list
    psi: list
    m_star: int
    starts: list
    ends: list
    inner: list
    group_of: list
    t: list
    H: list
    rows: list
    fire: list
    lam_above: list
    certain_above: list
    beta: list
    total: list
    total_certain: list

    @property
    def alpha(self) -> float:
        """alpha* = 1 + psi_{m*} (GR Thm 3.1)."""
        return 1.0 + self.psi[self.m_star]


def _psi(ps: list, qs: list, n: int) -> tuple[list, list, list]:
    """psi on the prefixes (GR Lemma 6.3; :func:`otlp.core.psi.psi_head` / :func:`otlp.core.psi.psi_tail`, the forms of
    :func:`otlp.core.psi.prefix_psi`, on Python floats and the same sequential sums, so the same bits as
    :func:`.chains.prefix`), the prefix sums Q_m of q and its sums from the top, each ``[V + 1]``."""
    V = len(ps)
    Pp, Pq = list(accumulate(ps, initial=0.0)), list(accumulate(qs, initial=0.0))  # sequential sums, as np.cumsum
    Sp = list(accumulate(reversed(ps), initial=0.0))[::-1]  # [V + 1]: mass of the positions >= m, from the top
    Sq = list(accumulate(reversed(qs), initial=0.0))[::-1]
    cut = bisect_right(Pq, 0.5, 1, V)  # the prefixes 1 <= m < cut have Q_m <= 1/2 (Q_m is non-decreasing)
    head = [psi_head(a, b, n) for a, b in zip(Pp[1:cut], Pq[1:cut], strict=True)]
    tail = [psi_tail(math, sp, min(sq, 1.0), n) for sp, sq in zip(Sp[cut:V], Sq[cut:V], strict=True)]
    return [0.0, *head, *tail, 0.0], Pq, Sq


def _records(psi: list, m_star: int) -> list:
    """Prefix indices cutting the groups (design note §2): 0, m*, V, the strict prefix minima in [1, m*] and the
    suffix minima (ties included) in [m*, V]."""
    V = len(psi) - 1
    rec = {0, m_star, V}
    low = psi[0]
    for m in range(1, m_star + 1):
        if psi[m] < low:
            rec.add(m)
            low = psi[m]
    low = inf
    for m in range(V, m_star - 1, -1):
        if psi[m] <= low:
            rec.add(m)
            low = psi[m]
    return sorted(rec)


def scalar_chains(p: list, q: list, n: int) -> ScalarChains:
    """The class chains of every group of ``(p, q)`` (checked distributions as Python lists of length V): the
    quantities of :func:`.chains.group_terms` position by position (the same formulas in the same order, so the same
    bits), with the slot roots of all groups solved in one call of the reference's :func:`.chains.slot_mass` (through
    :func:`.host.slot_mass`: its C kernel where built) with ``NEWTON_STEPS``, as :func:`.host.build` solves them."""
    V = len(p)
    ratio = [(qi / pi if pi > 0 else (inf if qi > 0 else -1.0)) for pi, qi in zip(p, q, strict=True)]
    order = sorted(range(V), key=ratio.__getitem__, reverse=True)  # decreasing q/p, stable (as argsort of -ratio)
    position = [0] * V
    for i, token in enumerate(order):
        position[token] = i
    ps = [p[i] for i in order]
    qs = [q[i] for i in order]
    psi, H, Sq = _psi(ps, qs, n)
    m_star = min(range(V + 1), key=psi.__getitem__)  # first exact argmin
    rec = _records(psi, m_star)
    starts, ends = rec[:-1], rec[1:]
    t = list(ps)
    # the chains' inputs by position (chains._group_terms): L = q(C_i), gap, r = t / q (1 / (q / p) where t = p, so
    # that tokens tied in the sort key get equal r); the positions whose slot mass is a root, and the tied runs'
    y, L, gap, r = [0.0] * V, [0.0] * V, [0.0] * V, [0.0] * V
    tied, need = [False] * V, []
    for s, e in zip(starts, ends, strict=True):
        inner_g = e <= m_star
        psi_s, psi_e = psi[s], psi[e]
        if not inner_g:  # GR Thm 6.2 vertex: the outer group's first token gives up psi_e - psi_s
            t[s] = max(ps[s] - (psi_e - psi_s), 0.0)
        if e == s + 1:  # a singleton group (most of them): no slot; its slack only
            gap[s] = max(psi_s - psi_e, 0.0) if inner_g else 0.0
            continue
        for i in range(s, e):
            first = i == s
            L[i] = Sq[i] - Sq[e]
            gap[i] = max((psi_s - psi_e if inner_g else 0.0) if first else psi[i] - psi_e, 0.0)
            qi = qs[i]
            if qi > 0:
                r[i] = t[i] / qi if first and not inner_g else (1.0 / (qi / ps[i]) if ps[i] > 0 else 0.0)
            if first:
                y[i] = L[i]
            elif n >= 3 and i >= s + 2 and r[i - 1] == r[i - 2] and qs[i - 1] > 0:  # chains._tied
                tied[i] = True
            else:
                need.append(i)
    if need and n <= 2:  # the closed forms: a few float operations each, below the cost of one array call
        for i in need:
            y[i] = _closed_root(H[i], L[i], r[i - 1], gap[i], n)
    elif need:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            roots = host.slot_mass(np.array([H[i] for i in need]), np.array([L[i] for i in need]),
                                   np.array([r[i - 1] for i in need]), np.array([gap[i] for i in need]), n,
                                   NEWTON_STEPS)
        for i, root in zip(need, roots.tolist(), strict=True):
            y[i] = root
    rows, fire, lam_above, certain_above = [0.0] * V, [0.0] * V, [0.0] * V, [0] * V
    group_of = [0] * V
    inner, betas, totals, certains = [], [], [], []
    for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
        inner_g = e <= m_star
        inner.append(inner_g)
        K = e - s
        if K == 1:  # a singleton group (most of them): no slot; the final class is the token, beta of its capacity
            group_of[s] = g
            capacity = power_gap(H[s], qs[s], n)
            beta = _beta(gap[s], capacity) if inner_g else 1.0
            rows[s] = qs[s] * (beta * capacity / qs[s]) if qs[s] > 0 else 0.0  # q * final, as the numpy route
            betas.append(beta)
            totals.append(0.0)
            certains.append(0)
            continue
        group_of[s:e] = [g] * K
        anchor = s
        for i in range(s + 1, e):  # tied runs: y_i = (y_a - (H_i - H_a))^+ from the last position a solved
            if tied[i]:
                y[i] = min(max(y[anchor] - (H[i] - H[anchor]), 0.0), L[i])
            else:
                anchor = i
        # slots: x = (class mass entering the step) - (after it), a = 1 - y / entering, shares per unit of class mass
        a = [0.0] * K
        share = [0.0] * K
        for k in range(1, K):
            i = s + k
            before = (y[i + 1] if k + 1 < K else 0.0) + qs[i]
            if before > 0:
                a[k] = min(max(1.0 - y[i] / before, 0.0), 1.0)
                x = min(max(before - y[i], 0.0), before)
                share[k] = power_gap(H[i] + y[i], x, n) / before
        before0 = y[s + 1] + qs[s]
        capacity = power_gap(H[s], before0, n)
        beta = _beta(gap[s], capacity) if inner_g else 1.0
        final = beta * capacity / before0 if before0 > 0 else 0.0
        # R_i = q_i (S_i + F_i final): S_i = share_i + (1 - a_i) S_{i-1}, F_i = prod (1 - a) over positions <= i
        S, F = 0.0, 1.0
        for k in range(K):
            if k:
                keep = 1.0 - a[k]
                S = share[k] + keep * S
                F = keep * F
            rows[s + k] = qs[s + k] * (S + F * final)
        fire[s:e] = a
        # hazards from the top: Lambda above each position; a = 1 slots (infinite hazard) counted apart
        lam, certain = 0.0, 0
        for k in range(K - 1, -1, -1):
            lam_above[s + k], certain_above[s + k] = lam, certain
            if k:
                if a[k] >= 1.0:
                    certain += 1
                else:
                    lam -= log1p(-a[k])
        betas.append(beta)
        totals.append(lam)
        certains.append(certain)
    return ScalarChains(n=n, order=order, position=position, psi=psi, m_star=m_star, starts=starts, ends=ends,
                        inner=inner, group_of=group_of, t=t, H=H[:V], rows=rows, fire=fire, lam_above=lam_above,
                        certain_above=certain_above, beta=betas, total=totals, total_certain=certains)


def _closed_root(H: float, L: float, r_below: float, gap: float, n: int) -> float:
    """:func:`.chains.slot_mass` at n = 1 and 2 on one entry, in its operations (so its bits): n = 1, y = gap / (1 - r)
    for r < 1, else L; n = 2, the stable branch of the root of y^2 + b y - gap with b = 2H - r; clamped to [0, L]."""
    gap = max(gap, 0.0)
    if n == 1:
        return min(max(gap / (1.0 - r_below) if r_below < 1.0 else L, 0.0), L)
    b = 2.0 * H - r_below
    root = sqrt(b * b + 4.0 * gap)
    den = b + root
    y = 2.0 * gap / (den if den > 0 else 1.0) if b >= 0 else 0.5 * (root - b)
    return min(max(y, 0.0), L)


def _beta(slack: float, capacity: float) -> float:
    """An inner group's final acceptance 1 - slack / capacity (its slots telescope; :mod:`otlp.optimal.chains`)."""
    return min(max(1.0 - slack / capacity, 0.0), 1.0) if capacity > 0 else 0.0


def scalar_rule(chains: ScalarChains, omega: list) -> tuple[list, float]:
    """The class-chain rule on one drafted tuple ``omega`` (token ids; scalar twin of
    :func:`otlp.optimal.chains.evaluate`). Returns ``(accept [n], reject)``, a
    repeated token's draws summed on its first slot.

    The group G of the highest-positioned draw serves the tuple. With G's draws by rank d_1 >= ... >= d_c, piece k
    holds the top k draws with hazard h_k = Lambda(d_{k+1} + 1) - Lambda(d_k + 1) (infinite if it holds a certain
    slot) and fires with probability reach_k (1 - e^{-k h_k}), shared equally; what is left gives each draw
    beta / c and rejects with probability 1 - beta."""
    pos = [chains.position[w] for w in omega]
    g = chains.group_of[max(pos)]
    s, e = chains.starts[g], chains.ends[g]
    draws = sorted((k for k in range(len(omega)) if s <= pos[k] < e), key=lambda k: -pos[k])  # stable on ties
    c = len(draws)
    lam, cert = chains.lam_above, chains.certain_above
    per = [0.0] * c
    log_reach = 0.0
    for k in range(1, c + 1):
        here = pos[draws[k - 1]]
        if k < c:  # the next draw down
            below = pos[draws[k]]
            h_fin, h_cert = lam[below] - lam[here], cert[below] - cert[here]
        else:
            h_fin, h_cert = chains.total[g] - lam[here], chains.total_certain[g] - cert[here]
        h = inf if h_cert > 0 else max(h_fin, 0.0)
        fired = math.exp(log_reach) * -expm1(-k * h)
        for j in range(k):
            per[j] += fired / k
        log_reach -= k * h
    left = math.exp(log_reach)
    beta = chains.beta[g]
    accept = [0.0] * len(omega)
    for j, k in enumerate(draws):
        slot = per[j] + left * beta / c
        accept[omega.index(omega[k])] += slot  # the token's first slot
    return accept, left * (1.0 - beta)
