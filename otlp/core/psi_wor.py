"""alpha* for drafts sampled without replacement, WithoutReplacement(q, n), in O(V log V + K n V).

psi(H) = p(H) - F(H), F(H) = P(all n draws without replacement lie in H) (GR eq. (4)), alpha* = 1 + min_H psi(H)
(GR Thm 3.1, after hu2025).

**Where the minimum lies (the prefix claim, proved below).** As for i.i.d. drafts (GR Lemma 6.3), the minimum is
attained on one of the V + 1 prefixes of the tokens sorted by decreasing q/p (:func:`otlp.core.psi.ratio_order`, any tie
order; GR App. S attributes this to hu2025 Thm 4 / §4.2.2, which we could not read, so the proof here is our own).

*Exchange inequality.* For a set A, i in A, j outside A (q_i, q_j > 0), with D_k(S) = F(S + k) - F(S):

    D_j(A) / q_j  >=  D_i(A - i) / q_i.                                                                     (*)

Proof. Draws without replacement from q are the order in which independent clocks E_a ~ Exp(q_a) ring. Put B = A - i,
a = q_i, b = q_j; fix every clock but E_i and E_j; T_m = the m-th ring of B (T_0 = 0, T_m = inf if |B| < m), Z = the
first ring outside B + i + j. D_i(B) = P(the first n rings lie in B + i and include i) = P(E_i < T_n,
max(E_i, T_{n-1}) < min(Z, E_j)); integrating E_i = s (density a e^{-as}) and E_j,

    D_i(B) / a = E int_0^inf I_i(s) ds,   I_i(s) = e^{-as} 1[s < T_n] 1[max(s, T_{n-1}) < Z] e^{-b max(s, T_{n-1})}.

With U_m the m-th ring of B + i, D_j(A) = P(E_j < U_n, max(E_j, U_{n-1}) < Z); integrating E_j = s,

    D_j(A) / b = E int_0^inf I_j(s) ds,   I_j(s) = e^{-bs} P_{E_i}(s < U_n, max(s, U_{n-1}) < Z).

Pointwise I_j >= I_i: where I_i(s) > 0 and s >= T_{n-1}, it is e^{-(a+b)s}, and E_i > s (probability e^{-as}) gives
U_{n-1} = T_{n-1} <= s < min(T_n, E_i) = U_n, s < Z: so I_j(s) >= e^{-bs} e^{-as}. Where s < T_{n-1} < Z, every E_i
gives U_n >= T_{n-1} > s and U_{n-1} <= T_{n-1} < Z: I_j(s) = e^{-bs} >= e^{-b T_{n-1}} >= I_i(s). []

*Prefix.* Let H minimise psi. Tokens with q = 0 are never drafted, so removing one from H changes psi by -p <= 0:
take H within {q > 0}. If H is not empty, let i in H have the least key q_i/p_i (+inf where p_i = 0) and j outside H
have key_j >= key_i (so q_j > 0). Minimality gives p_i <= D_i(H - i); by (*), D_j(H) >= q_j D_i(H - i) / q_i >=
q_j p_i / q_i >= p_j, so psi(H + j) = psi(H) + p_j - D_j(H) <= psi(H): H + j is a minimiser too. Adding every such j
gives a minimiser holding every token of key >= key_i and no other with q > 0: a prefix of the order (tokens with
q = 0, p > 0 sort below every key > 0, and p = q = 0 tokens change nothing). []

(For i.i.d. drafts (*) is (Q + q_j)^n - Q^n >= n Q^{n-1} q_j >= Q^n - (Q - q_i)^n.) The tests check the prefix
minimum against brute force over all 2^V subsets (V <= 10, n <= 4: random, heavy-tailed, ties, zeros, point masses).

**F on every prefix.** Draws without replacement are the order in which independent exponential clocks E_a ~
Exp(q_a) ring (the race behind Gumbel-top-n). The n draws lie in H exactly when the n-th clock of H rings before the
first clock outside H; with N_H(t) the number of clocks of H rung by t and r = q(V \\ H),

    F(H) = int_0^inf r e^{-r t} P(N_H(t) >= n) dt                (integrating the n-th ring's density by parts),

and N_H(t) is Poisson-binomial with success probabilities pi_a(t) = 1 - e^{-q_a t}. Along the prefixes of one order,
its law truncated at n (n numbers) and its tail P(N >= n) are updated in O(n) per token, all terms non-negative:
tail += pi_a P(N = n - 1). So at one t every prefix costs O(n V).

* n = 1: F = q(H). n = 2: the closed form F(H) = sum_{i in H} q_i (q(H) - q_i) / (1 - q_i), on the prefixes
  through running sums; exact to rounding. (The heaviest token's term is summed apart: its 1 - q_i is the sum of
  the other masses, so no cancellation.)
* n >= 3: no finite closed form is known (F(H) for |H| = n is the probability of the sample being the set H, a sum
  over n! orders), so the integral is taken by the **trapezoid rule in s = log t** with step h (default 1/8):
  t = e^s turns every factor e^{-lambda t} into a double-exponential of one fixed shape, shifted by -log lambda, so the
  integrand is analytic in a strip about the real line whatever the scales of q, and the trapezoid rule converges
  geometrically in 1/h (the double-exponential / sinc quadrature argument; Trefethen & Weideman, SIAM Rev. 2014,
  §5). The nodes run from where the integrand is below 1e-19 (t^{n+1}/n!, since P(N >= n) <= t^n / n!) to 50 / r
  for the smallest r that matters; a prefix whose 1 - F is at most r n / mu <= 1e-18 (mu = q(H) less its n - 1
  heaviest masses: E[n-th ring of H] <= n / mu) takes F = 1, and one with fewer than n tokens of q > 0 takes F = 0.
  K = (s_hi - s_lo) / h nodes: 150-200 on heavy-tailed rows at V = 32k-128k (benchmarks/wor.py). Subnormal masses
  can put t past 1e308; each node then travels as two finite factors of t.
  The error is estimated by the same sum on every other node (step 2h): ``error`` reports max |F_h - F_2h|, which
  bounds the step-h error wherever the rule converges geometrically (it is the 2h rule's error, and the h rule's
  is about its square). The tests hold it to 1e-13 against enumeration at V <= 10 and measure it at V = 128k.

So alpha* costs a sort, O(V log V), and K passes of O(n V) (``otlp_wor_prefix`` in ``otlp/backend/native/psi.c``, or a
numpy loop over the tokens where the kernels are not built).

**The optimal rule** for these drafts is :mod:`otlp.optimal.wor` (issue 45): the same order and the records of psi
cut its priority blocks (psi is submodular and, by the exchange argument above applied inside an interval
A <= S <= B, its constrained minima are prefixes too, GR Lemma 6.3's role), with a Luce choice inside each block in
place of the i.i.d. rule's class chain, on the draft's enumerated sets. This module stays the rule-free computation
of alpha* at any V, which the rule's tests hold it to.
"""

from __future__ import annotations

import math

import numpy as np

from otlp.core.distributions import check_distribution, check_n
from otlp.core.drafts import WithoutReplacement
from otlp.core.errors import InputError
from otlp.core.psi import ratio_order

#: default trapezoid step in s = log t for n >= 3 (tests/core/test_psi_wor.py: h = 1/4 already gives ~1e-15 at V <= 10)
STEP = 0.125
#: the integrand's size below which nodes are left out, and the 1 - F below which a prefix takes F = 1
NEGLIGIBLE = 1e-19
#: a node t = e^s is passed as e^min(s, SPLIT) e^(s - min(s, SPLIT)): finite factors where t passes the float range
SPLIT = 600.0


def prefix_subset_probability(qs: np.ndarray, n: int, *, step: float = STEP) -> tuple[np.ndarray, float]:
    """F_m = P(all n draws without replacement from q lie in the first m tokens), m = 0..V, for ``qs [V]`` q in
    the prefix order. Returns ``(F [V + 1], error)``; ``error`` is 0 for n <= 2 (closed forms) and the trapezoid
    rule's estimate max_m |F_h - F_2h| for n >= 3 (module docstring)."""
    qs = np.asarray(qs, dtype=np.float64)
    r = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])  # [V + 1] q-mass at positions >= m (from the top)
    prefix = np.concatenate([[0.0], np.cumsum(qs)])  # [V + 1]
    if n == 1:
        return prefix, 0.0
    if n == 2:
        return _prefix_two(qs, prefix, r), 0.0
    if not step > 0:
        raise InputError(f"step must be positive, got {step!r}")
    # 1 - F_m <= r_m E[n-th ring of H_m] <= r_m n / mu_m, mu_m >= Q_m - (the n - 1 heaviest masses of q)
    heavy = np.sort(qs)[::-1][: n - 1].sum()
    mu = prefix - heavy  # [V + 1] lower bound on mu_m
    settled = (r == 0) | ((mu > 0) & (r * n <= NEGLIGIBLE * 10 * np.where(mu > 0, mu, 1.0)))
    count = np.concatenate([[0], np.cumsum(qs > 0)])  # [V + 1] tokens that can be drafted in each prefix
    open_r = r[~settled & (r > 0) & (count >= n)]
    if open_r.size == 0:
        F = np.where(settled & (count >= n), 1.0, 0.0)
        return F, 0.0
    s_lo = (math.log(NEGLIGIBLE) + math.lgamma(n + 1)) / (n + 1) - 1.0
    s_hi = math.log(50.0) - math.log(float(open_r.min()))  # in logs: 50 / r overflows for a subnormal r
    K = int(math.ceil((s_hi - s_lo) / step)) + 1
    s = s_lo + step * np.arange(K)
    tA = np.exp(np.minimum(s, SPLIT))  # [K] t = tA tB, each factor finite (t itself may pass 1e308)
    tB = np.exp(s - np.minimum(s, SPLIT))
    from otlp.backend import native  # the C kernel loads on first use, not with the core

    got = native.wor_prefix(qs, r, n, tA, tB, step)
    F, F2 = got if got is not None else _prefix_integral_numpy(qs, r, n, tA, tB, step)
    ok = count >= n  # fewer than n tokens to draw: F = 0 exactly
    F = np.where(ok, np.where(settled, 1.0, np.minimum(F, 1.0)), 0.0)
    F2 = np.where(ok, np.where(settled, 1.0, np.minimum(F2, 1.0)), 0.0)
    return F, float(np.max(np.abs(F - F2)))


def _prefix_integral_numpy(qs: np.ndarray, r: np.ndarray, n: int, tA: np.ndarray, tB: np.ndarray,
                           h: float) -> tuple[np.ndarray, np.ndarray]:
    """``otlp_wor_prefix`` in numpy: a loop over the tokens, each step on all K nodes at once."""
    V, K = qs.size, tA.size
    pmf = np.zeros((n, K))  # [n, K] P(N = j) at each node
    pmf[0] = 1.0
    tail = np.zeros(K)
    F, F2 = np.zeros(V + 1), np.zeros(V + 1)
    even = (np.arange(K) % 2 == 0) * 2.0
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        for a in range(V):
            x = (qs[a] * tA) * tB
            rung = np.where(x < 1e-5, x * (1.0 - 0.5 * x * (1.0 - x / 3.0)),
                            np.where(x < 0.5, -np.expm1(-x), np.where(x < 745.0, 1.0 - np.exp(-x), 1.0)))
            # (otlp_wor_prefix: the same forms, its own exponentials, and 0 past 708 rather than 745: below 3e-308)
            stay = np.where(x < 0.5, 1.0 - rung, np.where(x < 745.0, np.exp(-x), 0.0))
            tail = tail + rung * pmf[n - 1]
            pmf[1:] = pmf[1:] * stay + pmf[:-1] * rung
            pmf[0] = pmf[0] * stay
            y = (r[a + 1] * tA) * tB
            live = (y < 745.0) & (tail > 0)
            c = np.where(live, h * np.where(live, y, 0.0) * np.exp(-np.where(live, y, 0.0)) * tail, 0.0)  # [K]
            F[a + 1] = c.sum()
            F2[a + 1] = (c * even).sum()
    return F, F2


def _prefix_two(qs: np.ndarray, prefix: np.ndarray, r: np.ndarray) -> np.ndarray:
    """F_m at n = 2: sum_{i <= m} q_i (Q_m - q_i) / (1 - q_i), the heaviest token h apart (1 - q_h = the other
    masses' sum; every other q_i <= 1/2, so 1 - q_i >= 1/2 loses nothing)."""
    V = qs.size
    h = int(np.argmax(qs))
    others_total = float(prefix[h] + r[h + 1])  # 1 - q_h as the sum of the other masses
    light = np.where(np.arange(V) == h, 0.0, qs)  # [V]
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(light > 0, 1.0 / (1.0 - light), 0.0)  # 1 / (1 - q_i): one division a token
    a = light * d  # q_i / (1 - q_i)
    b = light * light * d
    A = np.concatenate([[0.0], np.cumsum(a)])  # [V + 1]
    Bs = np.concatenate([[0.0], np.cumsum(b)])
    F = prefix * A - Bs  # the light tokens' terms: sum q_i (Q_m - q_i) / (1 - q_i) >= 0
    m = np.arange(V + 1)
    rest = np.concatenate([[0.0], np.cumsum(light)])  # Q_m less q_h, summed without q_h (no cancellation)
    heavy = np.where((m > h) & (others_total > 0), qs[h] * np.minimum(rest / (others_total or 1.0), 1.0), 0.0)
    F = np.maximum(F, 0.0) + heavy
    F[0] = 0.0
    F[-1] = 1.0 if np.count_nonzero(qs) >= 2 else 0.0
    return np.minimum(F, 1.0)


def wor_prefix_psi(p: object, q: object, n: int, *, step: float = STEP) -> tuple[np.ndarray, np.ndarray, float]:
    """psi on the prefixes of the decreasing-q/p order for ``WithoutReplacement(q, n)``: ``(order [V], psi [V + 1],
    error)`` with psi_m = P_m - F_m, written 1 - F_m - Pbar_m from the top where F_m > 1/2 (psi_0 = psi_V = 0), and
    ``error`` the bound of :func:`prefix_subset_probability` on |F - F_exact|."""
    order, psi, error, _, _ = _prefix_psi(*_checked(p, q, n), step)
    return order, psi, error


def _checked(p: object, q: object, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    q = check_distribution(q, "q")
    n = check_n(n)
    p = check_distribution(p, "p", size=q.size)
    if np.count_nonzero(q) < n:
        raise InputError(f"WithoutReplacement(q, n={n}) needs at least n tokens with q > 0, q has "
                         f"{np.count_nonzero(q)}")
    return p, q, n


def _prefix_psi(p: np.ndarray, q: np.ndarray, n: int, step: float, *, curve: bool = True):  # noqa: ANN202
    """:func:`wor_prefix_psi` on checked arrays (building a ``WithoutReplacement`` to check them costs more than
    the n <= 2 route itself: its constructor sorts q): ``(order, psi or None, error, min psi, its first argmin)``;
    ``curve=False`` may leave psi out. At n <= 2 after the sort one C pass (``otlp_wor_closed_psi``, the same bits as
    :func:`sorted_prefix_psi`: tests/core/test_psi_wor.py) where the kernels are built."""
    order = ratio_order(p, q)
    if n <= 2:
        from otlp.backend import native  # the C kernel loads on first use, not with the core

        got = native.wor_closed_psi(p, q, order, n, curve=curve)
        if got is not None:
            psi, best, at = got
            return order, psi, 0.0, best, at
    psi, error = sorted_prefix_psi(p, q, order, n, step)
    m = int(np.argmin(psi))
    return order, psi, error, float(psi[m]), m


def sorted_prefix_psi(p: np.ndarray, q: np.ndarray, order: np.ndarray, n: int,
                      step: float = STEP) -> tuple[np.ndarray, float]:
    """psi on the prefixes of ``order`` (the decreasing-q/p order of ``p, q [V]``) and the quadrature's error bound:
    the reference, in numpy."""
    ps, qs = p[order], q[order]
    F, error = prefix_subset_probability(qs, n, step=step)
    P = np.concatenate([[0.0], np.cumsum(ps)])
    Pbar = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])
    psi = np.where(F > 0.5, (1.0 - F) - Pbar, P - F)
    psi[0] = psi[-1] = 0.0
    return psi, error


def wor_min_psi(p: object, draft: WithoutReplacement, *, step: float = STEP) -> tuple[float, np.ndarray]:
    """min_H psi(H) over the prefixes of the decreasing-q/p order and a minimiser ``mask bool [V]`` (the first
    exact argmin; module docstring for why the prefixes suffice)."""
    p = check_distribution(p, "p", size=draft.V)
    order, _, _, best, m = _prefix_psi(p, draft.q, draft.n, step, curve=False)
    mask = np.zeros(draft.V, dtype=bool)
    mask[order[:m]] = True
    return best, mask


def wor_optimal_acceptance(p: object, q: object, n: int, *, step: float = STEP) -> float:
    """alpha* = 1 + min_H psi(H) for ``WithoutReplacement(q, n)`` (GR Thm 3.1), clipped to [0, 1]."""
    _, _, _, best, _ = _prefix_psi(*_checked(p, q, n), step, curve=False)
    return min(max(1.0 + best, 0.0), 1.0)
