/* psi on the prefixes of a ratio order for drafts sampled without replacement (otlp/core/psi_wor.py, _prefix_integral).
 *
 * F_m = P(the n draws lie in the first m tokens) = int_0^inf r_m e^{-r_m t} P(N_m(t) >= n) dt, with N_m(t) the number
 * of the first m tokens whose exponential clock (rate q_a) has rung by t and r_m the q-mass of the other tokens. The
 * integral runs on the nodes t_k = e^{s_k} of a trapezoid rule in s = log t (dt = t ds): for each node one
 * pass over the tokens keeps the truncated Poisson-binomial law of N_m(t) (n entries) and its tail P(N_m >= n), which
 * grows by pi_a P(N_{m-1} = n - 1): every term is a sum of non-negative products, nothing cancels. F2 is the rule on
 * the even nodes only (step 2h), for the error estimate. A node is passed as t_k = tA_k tB_k, so that t_k may exceed
 * the float64 range (subnormal masses put the clocks of a prefix past 1e308): q t = (q tA) tB, inf past the range
 * (a clock surely rung), and the weight r t e^{-r t} h is formed from y = r t.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

void otlp_wor_prefix(const double *qs, const double *r, int64_t V, int n, const double *tA, const double *tB,
                     double h, int64_t K, double *F, double *F2) {
    double pmf[64];
    for (int64_t m = 0; m <= V; m++) {
        F[m] = 0.0;
        F2[m] = 0.0;
    }
    for (int64_t k = 0; k < K; k++) {
        const double ta = tA[k], tb = tB[k];
        const int even = (k % 2) == 0;
        double tail = 0.0;
        pmf[0] = 1.0;
        for (int j = 1; j < n; j++) pmf[j] = 0.0;
        for (int64_t a = 0; a < V; a++) {
            const double x = (qs[a] * ta) * tb;
            double stay, rung;
            if (x < 1e-5) { /* rung = x - x^2/2 + x^3/6 to 4e-22 relative: no transcendental */
                rung = x * (1.0 - 0.5 * x * (1.0 - x / 3.0));
                stay = 1.0 - rung;
            } else if (x < 0.5) { /* stay >= 0.6: 1 - rung loses nothing */
                rung = -expm1(-x);
                stay = 1.0 - rung;
            } else if (x < 745.0) { /* rung >= 0.39: 1 - stay loses nothing */
                stay = exp(-x);
                rung = 1.0 - stay;
            } else {
                stay = 0.0;
                rung = 1.0;
            }
            tail += rung * pmf[n - 1];
            for (int j = n - 1; j >= 1; j--) pmf[j] = pmf[j] * stay + pmf[j - 1] * rung;
            pmf[0] *= stay;
            const double y = (r[a + 1] * ta) * tb;
            if (tail > 0.0 && y < 745.0) {
                const double c = h * y * exp(-y) * tail;
                F[a + 1] += c;
                if (even) F2[a + 1] += 2.0 * c;
            }
        }
    }
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
