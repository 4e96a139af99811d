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
