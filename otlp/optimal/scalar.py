"""Class chains of one small (p, q, n) in plain Python floats: the single-pair fast path for V <= SCALAR_MAX_V.

The same rule as :func:`otlp.optimal.chains.build` (every group of the psi records a water-filling
class chain), computed position by position with Python floats instead of ``[1, V]`` numpy
arrays. Below a few hundred tokens the numpy path's cost is its per-call overhead (some hundred array operations of
about a microsecond each, whatever V is), while the scalar loops cost about 1.5 us per position (most groups are
single tokens, which skip the slot loops); somewhere past V = 256 the array path wins.

Quantities (design note §2, :mod:`.chains`), positions i = 0..V-1 in decreasing q/p order, prefix index m:

* psi_m = P_m - Q_m^n (suffix form 1 - (1 - Qbar_m)^n - Pbar_m where Q_m > 1/2; the two forms of
  :func:`otlp.core.psi.prefix_psi`, called on floats), m* its first argmin, alpha* = 1 + psi_{m*}; records cut
  the positions into groups (inner: strict prefix minima up to m*; outer: suffix minima from m*, ties included);
* per group (s, e] (positions s..e-1): targets t (p; the outer group's first position t_s = p_s - (psi_e - psi_s)),
  H_i = Q_i the null mass below position i, gap_i = psi_i - psi_e (the group's slack at s: psi_s - psi_e when
  inner, 0 when outer), the class mass y_i after each step (:func:`otlp.optimal.chains.slot_mass`), slot
  lengths x_i, fire probabilities a_i, row sums R_i, beta and the hazards Lambda above each position.

The lists here are by position; OptimalTransport builds the array form (:func:`otlp.optimal.chains.build`) on first
use for everything but the single slice.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from math import expm1, inf, log1p, sqrt

from otlp.core.psi import psi_head, psi_tail
from otlp.optimal.chains import power_gap  # (base + x)^n - base^n; on floats as on arrays

#: the largest vocabulary that takes the scalar path by default (module docstring: the two routes cross near V = 300).
SCALAR_MAX_V = 256


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


def slot_mass(H: float, L: float, r_below: float, gap: float, n: int) -> float:
    """The root y in [0, L] of g(y) = (H + y)^n - H^n - r_below y - gap (scalar twin of
    :func:`otlp.optimal.chains.slot_mass`: the stable closed form for n = 2, else bracketed Newton from y = L with
    the same stopping rule)."""
    if n == 2:
        b = 2.0 * H - r_below
        root = sqrt(b * b + 4.0 * max(gap, 0.0))
        if b >= 0:
            y = 2.0 * gap / (b + root if b + root > 0 else 1.0)
        else:
            y = 0.5 * (root - b)
        return min(max(y, 0.0), L)
    y, lo, hi = L, 0.0, L
    for _ in range(200):
        pg = power_gap(H, y, n)
        g = pg - r_below * y - gap
        dg = n * (H + y) ** (n - 1) - r_below
        if g <= 0:
            lo = max(lo, y)
        if g >= 0:
            hi = min(hi, y)
        new = y - g / dg if dg > 0 else lo - 1.0
        if not lo <= new <= hi:
            new = 0.5 * (lo + hi)
        done = abs(new - y) <= 4.5e-16 * y + 1e-17 * L or abs(g) <= 1e-15 * (pg + r_below * y + gap)
        y = new
        if done:
            break
    return y


def _psi(ps: list, qs: list, n: int) -> tuple[list, list]:
    """psi on the prefixes (GR Lemma 6.3; :func:`otlp.core.psi.psi_head` / :func:`otlp.core.psi.psi_tail`, the forms of
    :func:`otlp.core.psi.prefix_psi`, on Python floats and the same sequential sums, so the same bits as
    :func:`.chains.prefix`) and the prefix sums Q_m of q, both ``[V + 1]``."""
    V = len(ps)
    Pp, Pq = list(accumulate(ps, initial=0.0)), list(accumulate(qs, initial=0.0))  # sequential sums, as np.cumsum
    Sp = list(accumulate(reversed(ps), initial=0.0))[::-1]  # [V + 1]: mass of the positions >= m, from the top
    Sq = list(accumulate(reversed(qs), initial=0.0))[::-1]
    cut = bisect_right(Pq, 0.5, 1, V)  # the prefixes 1 <= m < cut have Q_m <= 1/2 (Q_m is non-decreasing)
    head = [psi_head(a, b, n) for a, b in zip(Pp[1:cut], Pq[1:cut], strict=True)]
    tail = [psi_tail(math, sp, min(sq, 1.0), n) for sp, sq in zip(Sp[cut:V], Sq[cut:V], strict=True)]
    return [0.0, *head, *tail, 0.0], Pq


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
    """The class chains of every group of ``(p, q)`` (checked distributions as Python lists of length V)."""
    V = len(p)
    ratio = [(qi / pi if pi > 0 else (inf if qi > 0 else -1.0)) for pi, qi in zip(p, q, strict=True)]
    order = sorted(range(V), key=ratio.__getitem__, reverse=True)  # decreasing q/p, stable (as argsort of -ratio)
    position = [0] * V
    for i, token in enumerate(order):
        position[token] = i
    ps = [p[i] for i in order]
    qs = [q[i] for i in order]
    psi, H = _psi(ps, qs, n)
    m_star = min(range(V + 1), key=psi.__getitem__)  # first exact argmin
    rec = _records(psi, m_star)
    t = list(ps)
    rows, fire, lam_above, certain_above = [0.0] * V, [0.0] * V, [0.0] * V, [0] * V
    group_of = [0] * V
    starts, ends, inner, betas, totals, certains = rec[:-1], rec[1:], [], [], [], []
    for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
        inner_g = e <= m_star
        psi_e = psi[e]
        if not inner_g:  # GR Thm 6.2 vertex: the outer group's first token gives up psi_e - psi_s
            t[s] = max(ps[s] - (psi_e - psi[s]), 0.0)
        K = e - s
        inner.append(inner_g)
        if K == 1:  # a singleton group (most of them): no slot; the final class is the token, beta of its capacity
            group_of[s] = g
            capacity = power_gap(H[s], qs[s], n)
            beta = _beta(max(psi[s] - psi_e, 0.0), capacity) if inner_g else 1.0
            rows[s] = qs[s] * (beta * capacity / qs[s]) if qs[s] > 0 else 0.0  # q * final, as the numpy route
            betas.append(beta)
            totals.append(0.0)
            certains.append(0)
            continue
        group_of[s:e] = [g] * K
        # class mass y after each step, from the top: y_s = L_s = q(G); below it the root of one scalar equation
        L = [0.0] * K
        acc = 0.0
        for k in range(K - 1, -1, -1):
            acc += qs[s + k]
            L[k] = acc
        y = [0.0] * K
        y[0] = L[0]
        for k in range(1, K):
            i = s + k
            q_below = qs[i - 1]
            r_below = t[i - 1] / q_below if q_below > 0 else 0.0
            y[k] = slot_mass(H[i], L[k], r_below, max(psi[i] - psi_e, 0.0), n)
        # slots: x = (class mass entering the step) - (after it), a = x / entering, shares per unit of class mass
        a = [0.0] * K
        share = [0.0] * K
        for k in range(1, K):
            i = s + k
            before = (y[k + 1] if k + 1 < K else 0.0) + qs[i]
            if before > 0:
                x = min(max(before - y[k], 0.0), before)
                a[k] = x / before
                slot = power_gap(H[i] + y[k], x, n)
                share[k] = slot / before
        before0 = y[1] + qs[s]
        capacity = power_gap(H[s], before0, n)
        if inner_g:
            beta = _beta(max(psi[s] - psi_e, 0.0), capacity)
        else:
            beta = 1.0
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
