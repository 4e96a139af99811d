/* psi on the prefixes of the decreasing-q/p order, the minimum behind alpha* (otlp/core/psi.py for i.i.d. drafts,
 * otlp/core/psi_wor.py for drafts sampled without replacement), after the caller's sort.
 *
 * WOR at n <= 2 (otlp_wor_closed_psi): closed forms, in two passes and no [V] temporaries, the numpy route's
 * operations in its order, so its bits (i.i.d. drafts: otlp_prefix in chains.c).
 *
 * WOR at n >= 3 (otlp_wor_prefix): F_m = P(the n draws lie in the first m tokens) = int_0^inf r_m e^{-r_m t}
 * P(N_m(t) >= n) dt, with N_m(t) the number of the first m tokens whose exponential clock (rate q_a) has rung by t
 * and r_m the q-mass of the other tokens. The integral runs on the nodes t_k = e^{s_k} of a trapezoid rule in
 * s = log t (dt = t ds): every node keeps the truncated Poisson-binomial law of N_m(t) (n entries) and its tail
 * P(N_m >= n), which grows by pi_a P(N_{m-1} = n - 1): every term is a sum of non-negative products, nothing
 * cancels. Token by token, each update runs over all the nodes at once (vectorised), the nodes split into the ranges
 * where q_a t_k takes one form. F2 is the rule on the even nodes only (step 2h), for the error estimate. A node is
 * passed as t_k = tA_k tB_k, so that t_k may exceed the float64 range (subnormal masses put the clocks of a prefix
 * past 1e308): q t = (q tA) tB, inf past the range (a clock surely rung), and the weight r t e^{-r t} h is formed
 * from y = r t.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* e^-x for 0 <= x <= 708 (x > 708 returns a value below 2.4e-308 that the caller zeroes), branch-free so that a loop
 * over the nodes vectorises: x = k ln 2 + f (Cody-Waite, |f| <= ln 2 / 2), e^-f by its Taylor series to f^13
 * (relative error below 2e-16 there), 2^-k put into the exponent's bits. */
static inline double exp_neg(double x) {
    const double shifter = 0x1.8p52; /* 1.5 2^52: adding it rounds to an integer, kept in the low bits */
    x = x < 708.0 ? x : 708.0;
    const double kd = x * 1.4426950408889634 + shifter;
    uint64_t bits;
    memcpy(&bits, &kd, sizeof bits);
    const double k = kd - shifter;
    const double f = (k * 6.93147180369123816490e-01 - x) + k * 1.90821492927058770002e-10; /* -x + k ln 2 */
    double e = 1.0 / 6227020800.0; /* 1 / 13! */
    e = e * f + 1.0 / 479001600.0;
    e = e * f + 1.0 / 39916800.0;
    e = e * f + 1.0 / 3628800.0;
    e = e * f + 1.0 / 362880.0;
    e = e * f + 1.0 / 40320.0;
    e = e * f + 1.0 / 5040.0;
    e = e * f + 1.0 / 720.0;
    e = e * f + 1.0 / 120.0;
    e = e * f + 1.0 / 24.0;
    e = e * f + 1.0 / 6.0;
    e = e * f + 0.5;
    e = e * f + 1.0;
    e = e * f + 1.0;
    const uint64_t scale = (uint64_t)(1023 - (int64_t)(bits - 0x4338000000000000ULL)) << 52; /* 2^-k */
    double two;
    memcpy(&two, &scale, sizeof two);
    return e * two;
}

/* 1 - e^-x for 0 <= x < 0.5 by its series to x^17 (relative error below 1e-20): no cancellation */
static inline double rung_small(double x) {
    double s = 1.0 / 355687428096000.0; /* 1 / 17!, alternating signs below */
    s = -s * x + 1.0 / 20922789888000.0;
    s = -s * x + 1.0 / 1307674368000.0;
    s = -s * x + 1.0 / 87178291200.0;
    s = -s * x + 1.0 / 6227020800.0;
    s = -s * x + 1.0 / 479001600.0;
    s = -s * x + 1.0 / 39916800.0;
    s = -s * x + 1.0 / 3628800.0;
    s = -s * x + 1.0 / 362880.0;
    s = -s * x + 1.0 / 40320.0;
    s = -s * x + 1.0 / 5040.0;
    s = -s * x + 1.0 / 720.0;
    s = -s * x + 1.0 / 120.0;
    s = -s * x + 1.0 / 24.0;
    s = -s * x + 1.0 / 6.0;
    s = -s * x + 0.5;
    s = -s * x + 1.0;
    return s * x;
}

/* The first node k whose x = (v tA_k) tB_k is at least `bound` (strict: above it), K where none is: x grows with k,
 * so by bisection. */
static int64_t first_node(double v, const double *tA, const double *tB, int64_t K, double bound, int strict) {
    int64_t lo = 0, hi = K;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const double x = (v * tA[mid]) * tB[mid];
        if (strict ? !(x <= bound) : !(x < bound))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Token by token, each step on every node at once (loops over the K nodes, which the compiler vectorises, with the
 * exponentials above in place of libm's): pmf [n, K] and tail [K] are the truncated Poisson-binomial laws of every
 * node. The same terms as the numpy route (_prefix_integral_numpy), to a few ulps (its exponentials are libm's, and
 * the nodes' sum runs in another order). Returns 0, or -1 where the work arrays could not be allocated. */
int otlp_wor_prefix(const double *qs, const double *r, int64_t V, int n, const double *tA, const double *tB,
                    double h, int64_t K, double *F, double *F2) {
    double *work = malloc(sizeof(double) * (size_t)((n + 5) * K));
    if (work == NULL) return -1;
    double *pmf = work, *tail = pmf + n * K, *rung = tail + K, *stay = rung + K, *c = stay + K, *even = c + K;
    for (int64_t k = 0; k < K; k++) {
        pmf[k] = 1.0;
        tail[k] = 0.0;
        even[k] = (k % 2) == 0 ? 2.0 : 0.0;
    }
    for (int j = 1; j < n; j++)
        for (int64_t k = 0; k < K; k++) pmf[j * K + k] = 0.0;
    F[0] = 0.0;
    F2[0] = 0.0;
    for (int64_t a = 0; a < V; a++) {
        const double qa = qs[a], ra = r[a + 1];
        /* x = q_a t_k and y = r_{a+1} t_k grow with k (t_k does, and so do both factors of its product): the
         * nodes split into ranges, each with one form and no select */
        const int64_t k1 = first_node(qa, tA, tB, K, 1e-5, 0), k2 = first_node(qa, tA, tB, K, 0.5, 0),
                      k3 = first_node(qa, tA, tB, K, 708.0, 1), ky = first_node(ra, tA, tB, K, 708.0, 1);
        for (int64_t k = 0; k < k1; k++) { /* x < 1e-5: rung = x - x^2/2 + x^3/6 to 4e-22 relative */
            const double x = (qa * tA[k]) * tB[k];
            rung[k] = x * (1.0 - 0.5 * x * (1.0 - x / 3.0));
            stay[k] = 1.0 - rung[k];
        }
        for (int64_t k = k1; k < k2; k++) { /* x < 0.5: stay >= 0.6, so 1 - rung loses nothing */
            rung[k] = rung_small((qa * tA[k]) * tB[k]);
            stay[k] = 1.0 - rung[k];
        }
        for (int64_t k = k2; k < k3; k++) { /* x <= 708: rung >= 0.39, so 1 - stay loses nothing */
            stay[k] = exp_neg((qa * tA[k]) * tB[k]);
            rung[k] = 1.0 - stay[k];
        }
        for (int64_t k = k3; k < K; k++) { /* e^-x below 3e-308 (inf past the range): a clock surely rung */
            stay[k] = 0.0;
            rung[k] = 1.0;
        }
        const double *top = pmf + (n - 1) * K;
        for (int64_t k = 0; k < K; k++) tail[k] += rung[k] * top[k];
        for (int j = n - 1; j >= 1; j--) {
            double *pj = pmf + j * K;
            const double *below = pj - K;
            for (int64_t k = 0; k < K; k++) pj[k] = pj[k] * stay[k] + below[k] * rung[k];
        }
        for (int64_t k = 0; k < K; k++) pmf[k] *= stay[k];
        for (int64_t k = 0; k < ky; k++) {
            const double y = (ra * tA[k]) * tB[k];
            c[k] = tail[k] > 0.0 ? h * y * exp_neg(y) * tail[k] : 0.0;
        }
        for (int64_t k = ky; k < K; k++) c[k] = 0.0;
        double s[4] = {0.0, 0.0, 0.0, 0.0}, e[4] = {0.0, 0.0, 0.0, 0.0}; /* four lanes: the sum vectorises */
        int64_t k = 0;
        for (; k + 3 < K; k += 4)
            for (int l = 0; l < 4; l++) {
                s[l] += c[k + l];
                e[l] += even[k + l] * c[k + l];
            }
        for (; k < K; k++) {
            s[0] += c[k];
            e[0] += even[k] * c[k];
        }
        F[a + 1] = (s[0] + s[1]) + (s[2] + s[3]);
        F2[a + 1] = (e[0] + e[1]) + (e[2] + e[3]);
    }
    free(work);
    return 0;
}

/* psi on every prefix at n = 2 (n = 1: F_m = Q_m) and its first minimum (otlp/core/psi_wor.py: sorted_prefix_psi), in two
 * passes over the order and no [V] temporaries: the same operations in the same order as the numpy route, so the
 * same bits (tests/core/test_psi_wor.py). p, q [V] as given, order [V] the decreasing-q/p order; ps, qs [V] and
 * suffix_p [V + 1] work arrays (p and q in the order, and the suffix sums of p from the top, as numpy's reversed
 * cumsum); psi [V + 1] filled where not NULL. F_m = Q_m A_m - B_m (+ the heaviest token h's term, summed apart),
 * A, B the running sums of q d and q^2 d, d = 1 / (1 - q), over the light tokens; psi_m = P_m - F_m, or
 * (1 - F_m) - Pbar_m where F_m > 1/2. */
void otlp_wor_closed_psi(const double *p, const double *q, const int64_t *order, int64_t V, int n, double *ps,
                      double *qs, double *suffix_p, double *psi, double *best, int64_t *at) {
    int64_t h = V - 1;
    ps[V - 1] = p[order[V - 1]];
    qs[V - 1] = q[order[V - 1]];
    double top = qs[V - 1], suffix_q = qs[V - 1], after_h = 0.0; /* after_h: the q-mass after h, from the top */
    suffix_p[V] = 0.0;
    suffix_p[V - 1] = ps[V - 1];
    for (int64_t i = V - 2; i >= 0; i--) {
        const double pi = p[order[i]], qi = q[order[i]];
        ps[i] = pi;
        qs[i] = qi;
        suffix_p[i] = suffix_p[i + 1] + pi;
        if (qi >= top) { /* ties: the first in the order, as numpy's argmax */
            top = qi;
            h = i;
            after_h = suffix_q;
        }
        suffix_q += qi;
    }
    double prefix = 0.0, A = 0.0, B = 0.0, rest = 0.0, P = 0.0, others = 0.0, low = 0.0;
    int64_t low_at = 0;
    if (psi != NULL) psi[0] = 0.0;
    for (int64_t m = 1; m < V; m++) {
        const int64_t i = m - 1;
        const double qi = qs[i];
        if (i == h) others = prefix + after_h; /* 1 - q_h as the other masses' sum */
        prefix += qi;
        P += ps[i];
        if (n == 1) { /* F_m = Q_m */
            const double value = prefix > 0.5 ? (1.0 - prefix) - suffix_p[m] : P - prefix;
            if (psi != NULL) psi[m] = value;
            if (value < low) {
                low = value;
                low_at = m;
            }
            continue;
        }
        const double light = i == h ? 0.0 : qi;
        if (light > 0.0) {
            const double d = 1.0 / (1.0 - light);
            A += light * d;
            B += light * light * d;
        }
        rest += light;
        double F = prefix * A - B;
        double heavy = 0.0;
        if (m > h && others > 0.0) {
            heavy = rest / others; /* (not rest * (1 / others): others may be subnormal) */
            heavy = top * (heavy < 1.0 ? heavy : 1.0);
        }
        F = (F > 0.0 ? F : 0.0) + heavy;
        F = F < 1.0 ? F : 1.0;
        const double value = F > 0.5 ? (1.0 - F) - suffix_p[m] : P - F;
        if (psi != NULL) psi[m] = value;
        if (value < low) {
            low = value;
            low_at = m;
        }
    }
    if (psi != NULL) psi[V] = 0.0;
    *best = low;
    *at = low_at;
}
