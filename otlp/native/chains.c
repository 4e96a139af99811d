/* The slot roots of the optimal rule's class chains (otlp/optimal/chains.py, slot_mass at n >= 3) in one loop per entry.
 *
 * numpy solves them as vectorised Newton steps, about 25 passes over the entries per step (the Horner polynomials of
 * g and g', the clamps) and 5-6 steps from the upper bounds, so on the CPU route with a draft close to its target
 * (windows of tens of thousands of positions) the roots were about a third of a call. Here each entry takes the same
 * operations in the same order (the bounds, then the Newton steps of chains._newton_step with chains._horner_terms'
 * coefficients, until the step moves it by at most 4.5e-16 of itself, as chains._newton_numpy stops an entry), so
 * the same bits as the numpy route, which stays for machines without a C compiler; tests/test_native.py holds the
 * two together.
 *
 * numpy's maximum and minimum return their first argument on ties and propagate NaN (np_max, np_min); numpy's power
 * with the exponent 0.5 is a square root. Built without -ffast-math and with -ffp-contract=off
 * (otlp/native/__init__.py).
 */
#include <math.h>
#include <stdint.h>

#define MAX_N 32 /* native.SLOT_MASS_MAX_N: up to here j C(n, j) is an exact int64, as Python's ints are */

static inline double np_max(double a, double b) { return (a >= b || a != a) ? a : b; }
static inline double np_min(double a, double b) { return (a <= b || a != a) ? a : b; }

static double int_power(double x, int k) { /* x^k by repeated squaring, k >= 1 (for the check of newton_start) */
    double out = 0.0;
    int have = 0;
    for (;;) {
        if (k & 1) {
            out = have ? out * x : x;
            have = 1;
        }
        k >>= 1;
        if (!k) return out;
        x = x * x;
    }
}

static void binomials(int n, int64_t *row) { /* row[k] = C(n, k), k = 0..n, by Pascal's rule (exact) */
    row[0] = 1;
    for (int m = 1; m <= n; m++) {
        row[m] = 1;
        for (int k = m - 1; k >= 1; k--) row[k] += row[k - 1];
    }
}

/* The bounds of chains.slot_mass for one entry: the start of its Newton iteration. The second upper bound's powers
 * (u_b, two pow calls) only matter where u_b - H < y_a; where a few multiplications show u_b >= (y_a + H) (1 + 1e-9)
 * (so that u_b - H, rounded, stays above y_a whatever pow's last bit), the numpy route's minimum takes y_a, and so
 * does this without them. */
static double newton_start(double H, double Hn2, double L, double r, double gap, int n, double half_n,
                           double inv_n, double inv_n1) {
    /* upper bound A: y (b + D1 y) = gap, b = n H^(n-1) - r, D1 = C(n, 2) H^(n-2) */
    const double b = (double)n * Hn2 * H - r;
    const double D1 = half_n * Hn2;
    const double root = sqrt(b * b + 4.0 * D1 * gap);
    const double den = b + root;
    double y_a;
    if (b >= 0) y_a = den > 0 ? 2.0 * gap / den : 0.0;
    else y_a = D1 > 0 ? (root - b) / (2.0 * D1) : INFINITY;
    /* upper bound B, in u = H + y */
    const double cc = np_max(gap + Hn2 * H * H - r * H, 0.0);
    const double rr = 2.0 * np_max(r, 0.0);
    const double t = (y_a + H) * (1.0 + 1e-9);
    if (int_power(t, n - 1) <= rr || int_power(t, n) <= 2.0 * cc) return np_max(np_min(y_a, L), 0.0);
    const double u_b = np_max(pow(2.0 * cc, inv_n), n == 3 ? sqrt(rr) : pow(rr, inv_n1));
    return np_max(np_min(np_min(y_a, u_b - H), L), 0.0);
}

#define LANES 8 /* entries iterated side by side (vector registers, and divisions that overlap) */

/* y[i] = the largest root in [0, L] of (H + y)^n - H^n - r y = gap for each of the `count` entries (chains.slot_mass,
 * 3 <= n <= MAX_N), at most `limit` Newton steps each. LANES entries step together; each keeps the value of its first
 * step that moved it by at most 4.5e-16 of itself and then stays as it is. */
void otlp_slot_mass(const double *H_in, const double *L_in, const double *r_in, const double *gap_in, int64_t count,
                    int n, int64_t limit, double *y_out) {
    int64_t row[MAX_N + 1];
    double coef[MAX_N], scaled[MAX_N], powers[MAX_N];
    binomials(n, row);
    for (int j = 0; j < n; j++) { /* the integers of chains._horner_terms, rounded to doubles once, as numpy does */
        coef[j] = (double)row[j + 1];
        scaled[j] = (double)(j * row[j + 1]);
    }
    const double half_n = (double)row[2], inv_n = 1.0 / n, inv_n1 = 1.0 / (n - 1), n1 = (double)(n - 1);
    for (int64_t i0 = 0; i0 < count; i0 += LANES) {
        const int m = count - i0 < LANES ? (int)(count - i0) : LANES;
        double y[LANES], L[LANES], r[LANES], neg_gap[LANES], live[LANES], D[LANES], S[LANES];
        double c[MAX_N][LANES], d[MAX_N][LANES];
        for (int k = 0; k < LANES; k++) {
            const int64_t i = i0 + (k < m ? k : 0);
            const double H = H_in[i], gap = np_max(gap_in[i], 0.0);
            L[k] = L_in[i];
            r[k] = r_in[i];
            neg_gap[k] = -gap;
            /* chains._descending_powers: powers[j] = H^(n-1-j), each from the one after it by one multiplication */
            powers[n - 2] = H;
            for (int j = n - 3; j >= 0; j--) powers[j] = powers[j + 1] * H;
            y[k] = newton_start(H, powers[1], L[k], r[k], gap, n, half_n, inv_n, inv_n1);
            live[k] = k < m;
            for (int j = 0; j < n - 1; j++) { /* chains._horner_terms */
                c[j][k] = coef[j] * powers[j];
                d[j][k] = j ? scaled[j] * powers[j] : 0.0;
            }
        }
        for (int64_t step = 0; step < limit; step++) { /* chains._newton_step, lane by lane */
            for (int k = 0; k < LANES; k++) D[k] = y[k] + c[n - 2][k];
            for (int j = n - 3; j >= 0; j--)
                for (int k = 0; k < LANES; k++) D[k] = D[k] * y[k] + c[j][k];
            for (int k = 0; k < LANES; k++) S[k] = n1 * y[k] + d[n - 2][k];
            for (int j = n - 3; j >= 1; j--)
                for (int k = 0; k < LANES; k++) S[k] = S[k] * y[k] + d[j][k];
            double any = 0.0;
            for (int k = 0; k < LANES; k++) {
                const double Dr = D[k] - r[k];
                const double g = Dr * y[k] + neg_gap[k], dg = Dr + S[k] * y[k];
                const double step_to = np_min(np_max(y[k] - g / (dg > 0 ? dg : 1.0), 0.0), L[k]);
                const double next = dg > 0 ? step_to : y[k];
                const double moved = fabs(next - y[k]) > 4.5e-16 * y[k] ? 1.0 : 0.0;
                y[k] = live[k] != 0.0 ? next : y[k];
                live[k] = live[k] * moved;
                any += live[k];
            }
            if (any == 0.0) break;
        }
        for (int k = 0; k < m; k++) y_out[i0 + k] = y[k];
    }
}
