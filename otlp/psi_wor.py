"""alpha* for drafts sampled without replacement, WithoutReplacement(q, n), in O(V log V + K n V).

psi(H) = p(H) - F(H), F(H) = P(all n draws without replacement lie in H) (GR eq. (4)), alpha* = 1 + min_H psi(H)
(GR Thm 3.1, hu2025 Thm 3.1).

**Where the minimum lies (the prefix claim).** As for i.i.d. drafts (GR Lemma 6.3), we take the minimum over the
V + 1 prefixes of the tokens sorted by decreasing q/p (:func:`otlp.psi.ratio_order`; GR App. S says this follows
hu2025 Thm 4 / §4.2.2, which we could not read). Status: **proved for n <= 2, checked for n >= 3.** The brute
force over all 2^V subsets agrees on every instance tried (tests/test_psi_wor.py: random, heavy-tailed, ties, zeros,
point masses, V <= 10, n <= 4; and 20,000 instances with V <= 8 noted in :mod:`otlp.formulations.subset_selection`).
What a proof needs, by the exchange argument of the i.i.d. case: for A a set, i in A and j not in A,

    [F(A + j) - F(A)] / q_j  >=  [F(A) - F(A - i)] / q_i                                                   (*)

(the gain of F per unit of draft mass from a token outside A is at least that of a token inside). Then a minimiser
H with i in H, j outside and q_j/p_j > q_i/p_i gives p_j/q_j >= [F(H + j) - F(H)]/q_j >= [F(H) - F(H - i)]/q_i >=
p_i/q_i, a contradiction; with equality the tied j can be added at no cost, so some minimiser is a union of whole
ratio classes, i.e. a prefix. For i.i.d. drafts (*) is (Q + q_j)^n - Q^n >= n Q^{n-1} q_j >= Q^n - (Q - q_i)^n.
For draws without replacement:

* n = 1: F(H) = q(H), (*) is 1 >= 1.
* n = 2 (proved): F(S) = sum_{a in S} q_a (q(S) - q_a) / (1 - q_a) gives, for k outside S, [F(S + k) - F(S)] / q_k =
  q(S) / (1 - q_k) + sigma(S), sigma(S) = sum_{a in S} q_a / (1 - q_a). With B = A - i, (*) reads
  LHS - RHS = q(B) [1/(1 - q_j) - 1/(1 - q_i)] + q_i/(1 - q_j) + q_i/(1 - q_i). It is >= 0 when q_j >= q_i; else
  q(B) (q_i - q_j) / ((1 - q_i)(1 - q_j)) <= q_i / (1 - q_j) since q(B) <= 1 - q_i - q_j <= 1 - q_i. So at n <= 2 the
  minimum over the prefixes is min_H psi.
* n >= 3: **not proved.** (*) holds on 10,714 random (A, i, j) with V <= 8, n <= 5 (every q >= 1e-6, so that the
  differences of F are above rounding), and the prefix minimum equals the brute-force minimum on every instance of
  the tests. Because min over the prefixes >= min over all H, were (*) to fail somewhere the value returned would
  be an upper bound on alpha*, never a lower one.

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
  heaviest masses: E[n-th ring of H] <= n / mu) takes F = 1. K = (s_hi - s_lo) / h nodes, about 300-700.
  The error is estimated by the same sum on every other node (step 2h): ``error`` reports max |F_h - F_2h|, which
  bounds the step-h error wherever the rule converges geometrically (it is the 2h rule's error, and the h rule's
  is about its square). The tests hold it to 1e-13 against enumeration at V <= 10 and measure it at V = 128k.

So alpha* costs a sort, O(V log V), and K passes of O(n V) (``otlp_wor_prefix`` in ``otlp/native/wor.c``, or a numpy
loop over the tokens where the kernels are not built).
"""

from __future__ import annotations

import math

import numpy as np

from otlp import native
from otlp.distributions import check_distribution
from otlp.drafts import WithoutReplacement
from otlp.errors import InputError
from otlp.psi import ratio_order

#: default trapezoid step in s = log t for n >= 3 (tests/test_psi_wor.py: h = 1/4 already gives ~1e-15 at V <= 10)
STEP = 0.125
#: the integrand's size below which nodes are left out, and the 1 - F below which a prefix takes F = 1
NEGLIGIBLE = 1e-19


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
    open_r = r[~settled & (r > 0)]
    if open_r.size == 0:
        F = np.where(settled, 1.0, 0.0)
        F[0] = 0.0
        return F, 0.0
    s_lo = (math.log(NEGLIGIBLE) + math.lgamma(n + 1)) / (n + 1) - 1.0
    s_hi = math.log(50.0 / float(open_r.min()))
    K = int(math.ceil((s_hi - s_lo) / step)) + 1
    s = s_lo + step * np.arange(K)
    t = np.exp(s)  # [K]
    w = step * t  # [K] dt = t ds
    got = native.wor_prefix(qs, r, n, t, w)
    F, F2 = got if got is not None else _prefix_integral_numpy(qs, r, n, t, w)
    F = np.where(settled, 1.0, np.minimum(F, 1.0))
    F2 = np.where(settled, 1.0, np.minimum(F2, 1.0))
    F[0] = F2[0] = 0.0
    return F, float(np.max(np.abs(F - F2)))


def _prefix_integral_numpy(qs: np.ndarray, r: np.ndarray, n: int, t: np.ndarray,
                           w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``otlp_wor_prefix`` in numpy: a loop over the tokens, each step on all K nodes at once."""
    V, K = qs.size, t.size
    pmf = np.zeros((n, K))  # [n, K] P(N = j) at each node
    pmf[0] = 1.0
    tail = np.zeros(K)
    F, F2 = np.zeros(V + 1), np.zeros(V + 1)
    even = (np.arange(K) % 2 == 0) * 2.0
    with np.errstate(under="ignore", over="ignore"):
        for a in range(V):
            x = qs[a] * t
            stay, rung = np.exp(-x), -np.expm1(-x)
            tail = tail + rung * pmf[n - 1]
            pmf[1:] = pmf[1:] * stay + pmf[:-1] * rung
            pmf[0] = pmf[0] * stay
            y = r[a + 1] * t
            c = np.where(y < 745.0, w * r[a + 1] * np.exp(-np.minimum(y, 745.0)) * tail, 0.0)  # [K]
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
        a = np.where(light > 0, light / (1.0 - light), 0.0)  # q_i / (1 - q_i)
        b = np.where(light > 0, light * light / (1.0 - light), 0.0)
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
    draft = WithoutReplacement(q, n)  # checks q and n (at least n tokens with q > 0)
    p = check_distribution(p, "p", size=draft.V)
    order = ratio_order(p, draft.q)
    ps, qs = p[order], draft.q[order]
    F, error = prefix_subset_probability(qs, draft.n, step=step)
    P = np.concatenate([[0.0], np.cumsum(ps)])
    Pbar = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])
    psi = np.where(F > 0.5, (1.0 - F) - Pbar, P - F)
    psi[0] = psi[-1] = 0.0
    return order, psi, error


def wor_min_psi(p: object, draft: WithoutReplacement, *, step: float = STEP) -> tuple[float, np.ndarray]:
    """min_H psi(H) over the prefixes of the decreasing-q/p order and a minimiser ``mask bool [V]`` (the first
    exact argmin; module docstring for why the prefixes suffice)."""
    order, psi, _ = wor_prefix_psi(p, draft.q, draft.n, step=step)
    m = int(np.argmin(psi))
    mask = np.zeros(draft.V, dtype=bool)
    mask[order[:m]] = True
    return float(psi[m]), mask


def wor_optimal_acceptance(p: object, q: object, n: int, *, step: float = STEP) -> float:
    """alpha* = 1 + min_H psi(H) for ``WithoutReplacement(q, n)`` (GR Thm 3.1), clipped to [0, 1]."""
    _, psi, _ = wor_prefix_psi(p, q, n, step=step)
    return min(max(1.0 + float(psi.min()), 0.0), 1.0)
