/* The optimal rule's class chains (otlp/optimal/chains.py) on the CPU route: psi on the ratio order's prefixes
 * (otlp_prefix), the served group of a tuple (otlp_served_group), the slot roots (slot_mass at n >= 3) in one loop per
 * entry, the chain of each row's served group on its window (otlp_window_chain) in one pass, the rule's pieces and
 * draw (otlp_pieces, otlp_sample), and its one-draft form (otlp_single_draft).
 *
 * numpy solves the roots as vectorised Newton steps, about 25 passes over the entries per step (the Horner polynomials
 * of g and g', the clamps) and 5-6 steps from the upper bounds, and forms the rest of a window's chain in about 40
 * more passes, so on the CPU route with a draft close to its target (windows of tens of thousands of positions) the
 * chain was about a third of a call. Here each entry takes the same operations in the same order (the bounds, then
 * the Newton steps of chains._newton_step with chains._horner_terms' coefficients, until the step moves it by at most
 * 4.5e-16 of itself, as chains._newton_numpy stops an entry; chains._group_terms around them), so the same bits as
 * the numpy route, which stays for machines without a C compiler; tests/backend/test_native.py holds the two together. One
 * exception: a window's roots start from their neighbour's root (window_roots), not from the bounds, so they agree
 * with the numpy route's to rounding.
 *
 * numpy's maximum and minimum return their first argument on ties and propagate NaN (np_max, np_min); numpy's power
 * with the exponent 0.5 is a square root. Built without -ffast-math and with -ffp-contract=off
 * (otlp/backend/native/__init__.py).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels.h"

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

/* What the Newton iteration of one n needs: the integers of chains._horner_terms rounded to doubles once, as numpy
 * does (coef[j] = C(n, j + 1), scaled[j] = j C(n, j + 1)), and the constants of newton_start. */
struct poly {
    int n;
    double coef[MAX_N], scaled[MAX_N], half_n, inv_n, inv_n1, n1;
};

static void poly_init(struct poly *P, int n) {
    int64_t row[MAX_N + 1];
    binomials(n, row);
    P->n = n;
    for (int j = 0; j < n; j++) {
        P->coef[j] = (double)row[j + 1];
        P->scaled[j] = (double)(j * row[j + 1]);
    }
    P->half_n = (double)row[2];
    P->inv_n = 1.0 / n;
    P->inv_n1 = 1.0 / (n - 1);
    P->n1 = (double)(n - 1);
}

/* chains._descending_powers, n >= 2: powers[j] = H^(n-1-j) for j = 0 .. n - 2, each from the one after it by one
 * multiplication. */
static void descending_powers(double H, int n, double *powers) {
    powers[n - 2] = H;
    for (int j = n - 3; j >= 0; j--) powers[j] = powers[j + 1] * H;
}

/* One entry's coefficients of chains._newton_step's polynomials (chains._horner_terms) at stride `stride` in c and d,
 * from descending_powers of H. Returns H^(n-2), which newton_start reads. */
static double entry_terms(const struct poly *P, double H, double *c, double *d, int stride) {
    const int n = P->n;
    double powers[MAX_N];
    descending_powers(H, n, powers);
    for (int j = 0; j < n - 1; j++) {
        c[j * stride] = P->coef[j] * powers[j];
        d[j * stride] = j ? P->scaled[j] * powers[j] : 0.0;
    }
    return powers[1];
}

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* chains._newton_step on entries 0 .. m - 1 side by side (their coefficients from entry_terms, at stride LANES; m a
 * constant where this is inlined, so that the loops over entries vectorise): g = y (D(y) - r) - gap and
 * g' = D - r + y D'(y) by Horner; next = the step kept in [0, L], or y where g' <= 0; dg = g'(y). */
ALWAYS_INLINE void lanes_step(const int m, const double *y, double c[][LANES], double d[][LANES], const double *L,
                              const double *r, const double *neg_gap, const struct poly *P, double *next,
                              double *dg) {
    const int n = P->n;
    double D[LANES], S[LANES];
    for (int k = 0; k < m; k++) D[k] = y[k] + c[n - 2][k];
    for (int j = n - 3; j >= 0; j--)
        for (int k = 0; k < m; k++) D[k] = D[k] * y[k] + c[j][k];
    for (int k = 0; k < m; k++) S[k] = P->n1 * y[k] + d[n - 2][k];
    for (int j = n - 3; j >= 1; j--)
        for (int k = 0; k < m; k++) S[k] = S[k] * y[k] + d[j][k];
    for (int k = 0; k < m; k++) {
        const double Dr = D[k] - r[k];
        const double g = Dr * y[k] + neg_gap[k];
        dg[k] = Dr + S[k] * y[k];
        const double step_to = np_min(np_max(y[k] - g / (dg[k] > 0 ? dg[k] : 1.0), 0.0), L[k]);
        next[k] = dg[k] > 0 ? step_to : y[k];
    }
}

/* Newton on entries 0 .. m - 1 side by side from y (lanes_step): each entry whose `live` is 1 steps until a step
 * moves it by at most 4.5e-16 of itself (it keeps that step's value and stops: live 0) or `limit` steps; the others
 * stay as they are. */
ALWAYS_INLINE void lanes_newton(const int m, double *y, double c[][LANES], double d[][LANES], const double *L,
                                const double *r, const double *neg_gap, double *live, const struct poly *P,
                                int64_t limit) {
    double next[LANES], dg[LANES];
    for (int64_t step = 0; step < limit; step++) {
        lanes_step(m, y, c, d, L, r, neg_gap, P, next, dg);
        double any = 0.0;
        for (int k = 0; k < m; k++) {
            const double moved = fabs(next[k] - y[k]) > 4.5e-16 * y[k] ? 1.0 : 0.0;
            y[k] = live[k] != 0.0 ? next[k] : y[k];
            live[k] = live[k] * moved;
            any += live[k];
        }
        if (any == 0.0) break;
    }
}

/* y[i] = the largest root in [0, L] of (H + y)^n - H^n - r y = gap for each of the `count` entries (chains.slot_mass,
 * 3 <= n <= MAX_N), at most `limit` Newton steps each. LANES entries step together; each keeps the value of its first
 * step that moved it by at most 4.5e-16 of itself and then stays as it is. */
void otlp_slot_mass(const double *H_in, const double *L_in, const double *r_in, const double *gap_in, int64_t count,
                    int n, int64_t limit, double *y_out) {
    struct poly P;
    poly_init(&P, n);
    for (int64_t i0 = 0; i0 < count; i0 += LANES) {
        const int m = count - i0 < LANES ? (int)(count - i0) : LANES;
        double y[LANES], L[LANES], r[LANES], neg_gap[LANES], live[LANES];
        double c[MAX_N][LANES], d[MAX_N][LANES];
        for (int k = 0; k < LANES; k++) {
            const int64_t i = i0 + (k < m ? k : 0);
            const double gap = np_max(gap_in[i], 0.0);
            L[k] = L_in[i];
            r[k] = r_in[i];
            neg_gap[k] = -gap;
            const double Hn2 = entry_terms(&P, H_in[i], &c[0][k], &d[0][k], LANES);
            y[k] = newton_start(H_in[i], Hn2, L[k], r[k], gap, n, P.half_n, P.inv_n, P.inv_n1);
            live[k] = k < m;
        }
        lanes_newton(LANES, y, c, d, L, r, neg_gap, live, &P, limit);
        for (int k = 0; k < m; k++) y_out[i0 + k] = y[k];
    }
}

/* (base + x)^n - base^n by Horner in x (chains.power_gap below POWER_GAP_EXPANSION_MAX), on descending_powers of
 * base as that reads chains._descending_powers. `row`: C(n, k). */
static double power_gap(double base, double x, int n, const int64_t *row) {
    if (n == 1) return x + 0.0 * base;
    if (n == 2) return x * (2.0 * base + x);
    double powers[MAX_N]; /* powers[j] = base^(n-1-j) */
    descending_powers(base, n, powers);
    double acc = x + (double)n * base;
    for (int j = n - 2; j >= 1; j--) acc = acc * x + (double)row[j] * powers[j - 1];
    return acc * x;
}

/* chains.slot_mass at n = 1 and 2: the closed forms (n = 2: its stable branch). */
static double closed_root(double H, double L, double r, double gap, int n) {
    gap = np_max(gap, 0.0);
    if (n == 1) {
        const int below = r < 1.0;
        return np_min(np_max(below ? gap / (1.0 - r) : L, 0.0), L);
    }
    const double b = 2.0 * H - r;
    const double root = sqrt(b * b + 4.0 * gap);
    const double den = b + root;
    const double y = b >= 0 ? 2.0 * gap / (den > 0 ? den : 1.0) : 0.5 * (root - b);
    return np_min(np_max(y, 0.0), L);
}

/* A warm start is kept as it is when its first step moved it by at most this much of itself (the neighbour's root
 * was close); past it, the smaller of that step and newton_start (both upper bounds of the root): window_roots. */
#define WARM_MOVE 1e-3

/* The slot roots of a window's positions 1 .. width - 1 at n >= 3, then the tied runs' masses from them (the tied run
 * of chains._group_terms: y_k = (y_a - (H_k - H_a))^+ from the last position a solved). The positions that need a root
 * (`roots`, increasing, `count` of them) are cut into `lanes` equal segments solved side by side (their chains of
 * divisions overlap), each from its first up.
 *
 * Each root starts from the mass at the position below it, z = y_{k-1} - q_{k-1}: where the ratios of the two
 * positions below are equal this is the root (the tied run); where r_{k-1} > r_{k-2} (the order's increasing p / q)
 * step k's g at z is g_{k-1}(y_{k-1}) - (r_{k-1} - r_{k-2}) y_{k-1} <= 0, so z lies at or below the root, and one
 * Newton step from it (where g' > 0) lands at or above it (g is convex). From there Newton descends as from
 * newton_start, in a step or two where neighbouring ratios are close (a draft close to its target) instead of five or
 * six. A segment's first root, and a root whose first step moved by more than WARM_MOVE of itself, start from
 * newton_start (or from that step, where it is smaller: both are upper bounds). */
ALWAYS_INLINE void window_lanes(const struct poly *P, const int64_t *roots, int64_t count, const double *H,
                                const double *L, const double *r, const double *gap, const double *q, int64_t limit,
                                double *y, const int lanes) {
    int64_t lo[LANES], hi[LANES], longest = 0;
    for (int j = 0; j < lanes; j++) {
        lo[j] = j * count / lanes;
        hi[j] = (j + 1) * count / lanes;
        longest = hi[j] - lo[j] > longest ? hi[j] - lo[j] : longest;
    }
    double yl[LANES], Ll[LANES], rl[LANES], ng[LANES], live[LANES], z[LANES], dgz[LANES], Hn2[LANES];
    double c[MAX_N][LANES], d[MAX_N][LANES];
    int warm[LANES];
    for (int64_t i = 0; i < longest; i++) {
        for (int j = 0; j < lanes; j++) { /* this round's root of each segment */
            const int64_t t = lo[j] + i;
            live[j] = t < hi[j];
            if (live[j] == 0.0) { /* an idle lane: harmless values */
                warm[j] = 0;
                z[j] = Ll[j] = rl[j] = ng[j] = Hn2[j] = 0.0;
                for (int u = 0; u < P->n - 1; u++) c[u][j] = d[u][j] = 0.0;
                continue;
            }
            const int64_t k = roots[t];
            Hn2[j] = entry_terms(P, H[k], &c[0][j], &d[0][j], LANES);
            Ll[j] = L[k];
            rl[j] = r[k - 1];
            ng[j] = -gap[k];
            warm[j] = i > 0 && k >= 2;
            if (warm[j]) { /* the mass at k - 1: a root, or on the tied run from the segment's previous root a */
                const int64_t a = roots[t - 1];
                const double below = a == k - 1 ? y[a] : np_min(np_max(y[a] - (H[k - 1] - H[a]), 0.0), L[k - 1]);
                z[j] = np_min(np_max(below - q[k - 1], 0.0), L[k]);
            } else {
                z[j] = 0.0;
            }
        }
        lanes_step(lanes, z, c, d, Ll, rl, ng, P, yl, dgz);
        for (int j = 0; j < lanes; j++) {
            if (live[j] == 0.0 || (warm[j] && dgz[j] > 0 && yl[j] - z[j] <= WARM_MOVE * yl[j])) continue;
            const int64_t k = roots[lo[j] + i];
            const double cold = newton_start(H[k], Hn2[j], L[k], r[k - 1], gap[k], P->n, P->half_n, P->inv_n,
                                             P->inv_n1);
            yl[j] = warm[j] && dgz[j] > 0 ? np_min(yl[j], cold) : cold;
        }
        lanes_newton(lanes, yl, c, d, Ll, rl, ng, live, P, limit);
        for (int j = 0; j < lanes; j++)
            if (lo[j] + i < hi[j]) y[roots[lo[j] + i]] = yl[j];
    }
}

static void window_roots(const struct poly *P, int64_t width, const double *H, const double *L, const double *r,
                         const double *gap, const double *q, const unsigned char *tied, int64_t *roots, int64_t limit,
                         double *y) {
    int64_t count = 0;
    for (int64_t k = 1; k < width; k++)
        if (!tied[k]) roots[count++] = k;
    if (count >= 8 * LANES) /* (constant lane counts: the lane loops vectorise) */
        window_lanes(P, roots, count, H, L, r, gap, q, limit, y, LANES);
    else
        window_lanes(P, roots, count, H, L, r, gap, q, limit, y, 1);
    int64_t anchor = 0;
    for (int64_t k = 1; k < width; k++) {
        if (!tied[k]) anchor = k;
        else y[k] = np_min(np_max(y[anchor] - (H[k] - H[anchor]), 0.0), L[k]);
    }
}

/* The class chain of each row's served group on its window of positions s .. top + 1 (chains.window_hazards with
 * chains._group_terms' `rows` form, 1 <= n <= MAX_N) in one pass per row: the same operations per entry in the same
 * order as the numpy route, except the Newton starts of the slot roots at n >= 3 (window_roots: the same roots to
 * rounding, in half the steps with close drafts). Rows of ps, qs [B, V] and prefix_q, suffix_q,
 * psi [B, V + 1] in the ratio order; m_star, s, e, top [B]; the draws' positions pos [B, draws]. Writes cum, cum_c
 * [B, draws]: the running sums over the window of the hazards -log1p(-a) and of the certain slots (a = 1), at the
 * positions that can matter (s <= pos <= top), read at each draw (offset pos - s, clamped to the window), as
 * chains.tuple_rule reads them; beta_out [B]: the group's final acceptance. Returns 0, or -1 where its work arrays
 * could not be allocated. */
int otlp_window_chain(const double *ps, const double *qs, const double *prefix_q, const double *suffix_q,
                      const double *psi, int64_t B, int64_t V, const int64_t *m_star, const int64_t *s_in,
                      const int64_t *e_in, const int64_t *top_in, const int64_t *pos_in, int64_t draws, int n,
                      int64_t limit, double *cum_out, double *cum_c_out, double *beta_out) {
    int64_t row[MAX_N + 1];
    binomials(n, row);
    struct poly P;
    if (n >= 3) poly_init(&P, n);
    int64_t most = 2;
    for (int64_t b = 0; b < B; b++) most = top_in[b] - s_in[b] + 2 > most ? top_in[b] - s_in[b] + 2 : most;
    double *work = malloc(sizeof(double) * (size_t)most * 6);
    unsigned char *tied = malloc((size_t)most);
    int64_t *roots = malloc(sizeof(int64_t) * (size_t)most);
    if (!work || !tied || !roots) {
        free(work);
        free(tied);
        free(roots);
        return -1;
    }
    double *H = work, *L = H + most, *r = L + most, *gap = r + most, *y = gap + most, *q = y + most;
    for (int64_t b = 0; b < B; b++) {
        const double *pb = ps + b * V, *qb = qs + b * V, *Hb = prefix_q + b * (V + 1), *Sb = suffix_q + b * (V + 1);
        const double *psib = psi + b * (V + 1);
        const int64_t s = s_in[b], e = e_in[b], top = top_in[b], width = top - s + 2;
        const int inner = e <= m_star[b];
        const double psi_s = psib[s], psi_e = psib[e], S_e = Sb[e];
        for (int64_t k = 0; k < width; k++) { /* chains._group_terms, up to the roots */
            const int64_t at = s + k < V ? s + k : V - 1;
            const int first = k == 0, outer_first = first && !inner;
            const double p = pb[at];
            q[k] = qb[at];
            H[k] = Hb[at];
            const double t = outer_first ? np_max(p - (psi_e - psi_s), 0.0) : p;
            L[k] = Sb[at] - S_e;
            gap[k] = np_max(first ? (inner ? psi_s - psi_e : 0.0) : psib[at] - psi_e, 0.0);
            const int q_pos = q[k] > 0;
            const double q_div = q_pos ? q[k] : 1.0;
            r[k] = q_pos ? (outer_first ? t / q_div : 1.0 / (q_div / p)) : 0.0;
            tied[k] = n >= 3 && k >= 2 && r[k - 1] == r[k - 2] && q[k - 1] > 0; /* chains._tied */
            y[k] = first ? L[k] : n <= 2 ? closed_root(H[k], L[k], r[k - 1], gap[k], n) : 0.0;
        }
        if (n >= 3) window_roots(&P, width, H, L, r, gap, q, tied, roots, limit, y);
        double S = 0.0, S_c = 0.0; /* the running sums, into r and L (not read here) */
        for (int64_t k = 0; k < width; k++) {
            const int64_t pos = s + k;
            const int first = k == 0;
            const double before = (pos + 1 >= e || k + 1 >= width ? 0.0 : y[k + 1]) + q[k];
            const int b_pos = before > 0;
            const double a = first || !b_pos ? 0.0 : np_min(np_max(1.0 - y[k] / before, 0.0), 1.0);
            const int sure = a >= 1.0 && !first;
            const int live = pos <= top; /* (and pos < e: top < e) */
            S += live && !sure && !first ? -log1p(-a) : 0.0;
            S_c += live && sure ? 1.0 : 0.0;
            if (first) {
                const double capacity = power_gap(H[0], before, n, row);
                const int c_pos = capacity > 0;
                beta_out[b] = inner ? (c_pos ? np_min(np_max(1.0 - gap[0] / capacity, 0.0), 1.0) : 0.0) : 1.0;
            }
            r[k] = S;
            L[k] = S_c;
        }
        for (int64_t j = 0; j < draws; j++) {
            const int64_t off = pos_in[b * draws + j] - s;
            const int64_t at = off < 0 ? 0 : off >= width ? width - 1 : off;
            cum_out[b * draws + j] = r[at];
            cum_c_out[b * draws + j] = L[at];
        }
    }
    free(work);
    free(tied);
    free(roots);
    return 0;
}

/* chains.prefix on rows already ordered (order [B, V], from the ratio sort), 1 <= n <= MAX_N, in two passes per row
 * instead of about twenty numpy passes: ps, qs [B, V] the laws in that order; prefix_q, suffix_q, psi [B, V + 1]
 * (otlp.core.psi.sorted_psi: running sums from the bottom and, for the suffixes, from the top, each one addition per
 * entry in numpy's order; psi by otlp.core.psi.prefix_psi's two forms with int_power's products, the suffix form where
 * Q_m > 1/2; psi_0 = psi_V = 0); m_star [B] the first argmin of psi (numpy's argmin: the first NaN, if any). The
 * same operations as the numpy route, so the same bits (tests/backend/test_native.py). work: V + 1 doubles. */
void otlp_prefix(const double *P, const double *Q, const int64_t *order, int64_t B, int64_t V, int n, double *ps,
                 double *qs, double *prefix_q, double *suffix_q, double *psi, int64_t *m_star, double *work) {
    double *prefix_p = work;
    for (int64_t b = 0; b < B; b++) {
        const double *Pb = P + b * V, *Qb = Q + b * V;
        const int64_t *ob = order + b * V;
        double *pb = ps + b * V, *qb = qs + b * V;
        double *Hq = prefix_q + b * (V + 1), *Sq = suffix_q + b * (V + 1), *psib = psi + b * (V + 1);
        /* up: the laws in order and their running sums (numpy's start at x_0), in registers */
        prefix_p[0] = Hq[0] = 0.0;
        double run_p = 0.0, run_q = 0.0;
        for (int64_t i = 0; i < V; i++) {
            const double p = Pb[ob[i]], q = Qb[ob[i]];
            pb[i] = p;
            qb[i] = q;
            run_p = i ? run_p + p : p;
            run_q = i ? run_q + q : q;
            prefix_p[i + 1] = run_p;
            Hq[i + 1] = run_q;
        }
        /* down: the sums from the top and psi at each prefix as they are known; the first argmin (numpy's argmin:
         * the first NaN, else the first least value) by keeping the lowest index with a value <= the best's */
        Sq[V] = psib[V] = 0.0;
        int64_t best = V;
        int best_nan = 0;
        run_p = V > 0 ? pb[V - 1] : 0.0;
        run_q = V > 0 ? qb[V - 1] : 0.0;
        for (int64_t m = V - 1; m >= 0; m--) {
            const double suffix_p = run_p;
            Sq[m] = run_q;
            if (m > 0) {
                run_p += pb[m - 1];
                run_q += qb[m - 1];
            }
            double value;
            if (m == 0) value = 0.0;
            else if (Hq[m] > 0.5) value = 1.0 - int_power(1.0 - (Sq[m] <= 1.0 || Sq[m] != Sq[m] ? Sq[m] : 1.0), n)
                                         - suffix_p;
            else value = prefix_p[m] - int_power(Hq[m], n);
            psib[m] = value;
            if (value != value) {
                best = m;
                best_nan = 1;
            } else if (!best_nan && value <= psib[best]) {
                best = m;
            }
        }
        m_star[b] = best;
    }
}

/* chains.served_group on the host: for the draws w [B, draws] of rows whose ratio order is order [B, V] and psi
 * [B, V + 1], pos [B, draws] the draws' positions, top [B] the highest, and the served group's first position s and
 * one past its last e [B]: an inner group (top < m*) from the first argmin of psi over [0, top] to the first m > top
 * with psi below it; an outer one from the last m <= top with psi_m <= psi_e to the first argmin e of psi over
 * (top, V]. The same comparisons as the numpy route (argmin's first NaN included), so the same positions. */
void otlp_served_group(const double *psi, const int64_t *order, const int64_t *w, const int64_t *m_star, int64_t B,
                       int64_t V, int64_t draws, int64_t *pos, int64_t *top_out, int64_t *s_out, int64_t *e_out) {
    for (int64_t b = 0; b < B; b++) {
        const double *psib = psi + b * (V + 1);
        const int64_t *ob = order + b * V, *wb = w + b * draws;
        int64_t *pb = pos + b * draws, found = 0;
        /* the draws' positions: the order read from its top until every draw is found (at the top draw; for a far
         * draft a few positions), where the inverse permutation wrote every position of the row at random */
        for (int64_t j = 0; j < draws; j++) pb[j] = 0; /* (every draw is a token of the row: the callers check) */
        for (int64_t i = 0; i < V && found < draws; i++)
            for (int64_t j = 0; j < draws; j++)
                if (wb[j] == ob[i]) {
                    pb[j] = i;
                    found++;
                }
        int64_t top = 0;
        for (int64_t j = 0; j < draws; j++) top = j == 0 || pb[j] > top ? pb[j] : top;
        int64_t s, e;
        if (top < m_star[b]) { /* inner */
            s = 0;
            for (int64_t m = 1; m <= top; m++) {
                const double low = psib[s], value = psib[m];
                if (low == low && (value < low || value != value)) s = m;
            }
            e = 0;
            for (int64_t m = top + 1; m <= V; m++)
                if (psib[m] < psib[s]) {
                    e = m;
                    break;
                }
        } else { /* outer */
            e = top + 1;
            for (int64_t m = top + 2; m <= V; m++) {
                const double low = psib[e], value = psib[m];
                if (low == low && (value < low || value != value)) e = m;
            }
            s = 0;
            for (int64_t m = top; m >= 1; m--)
                if (psib[m] <= psib[e]) {
                    s = m;
                    break;
                }
        }
        top_out[b] = top;
        s_out[b] = s;
        e_out[b] = e;
    }
}

/* chains._pieces on one tuple per row, n <= MAX_N draws: w, pos [B, n] the drafted tokens and their positions, s [B]
 * the served group's first position, cum, cum_c [B, n] the running hazards and certain-slot counts at the draws, beta
 * [B]. The served group's draws by position (decreasing, slot order on ties; the others after them) cut the hazard
 * into pieces: piece k holds the top k draws with hazard h_k = cum(d_k) - cum(d_{k+1}) (infinite where it holds a
 * certain slot) and fires with probability reach_k (1 - e^{-k h_k}), shared by its k draws; what is left gives each
 * draw beta / c and rejects 1 - beta. Writes accept [B, n] (a repeated token's draws summed on its first slot) and
 * reject [B]. The numpy route's operations with the C library's exp and expm1 (numpy's own differ in the last bit),
 * so equal to rounding. */
void otlp_pieces(const int64_t *w, const int64_t *pos, const int64_t *s, const double *cum, const double *cum_c,
                 const double *beta, int64_t B, int n, double *accept, double *reject) {
    for (int64_t b = 0; b < B; b++) {
        const int64_t *wb = w + b * n, *pb = pos + b * n;
        const double *at = cum + b * n, *at_c = cum_c + b * n;
        int64_t key[MAX_N];
        int by[MAX_N], c = 0;
        for (int k = 0; k < n; k++) { /* stable descending order of the keys: insertion */
            key[k] = pb[k] >= s[b] ? pb[k] : -1;
            c += pb[k] >= s[b];
            int i = k;
            while (i > 0 && key[by[i - 1]] < key[k]) {
                by[i] = by[i - 1];
                i--;
            }
            by[i] = k;
        }
        double h[MAX_N], per[MAX_N], slot[MAX_N], log_reach = 0.0;
        for (int k = 0; k < n; k++) {
            const int valid = k < c, more = k + 1 < c;
            const double next = more ? at[by[k + 1]] : 0.0, next_c = more ? at_c[by[k + 1]] : 0.0;
            h[k] = valid ? np_max(at[by[k]] - next, 0.0) : 0.0;
            if (valid && at_c[by[k]] - next_c > 0) h[k] = INFINITY;
            per[k] = 0.0;
        }
        for (int k = 1; k <= n; k++) {
            const double hk = h[k - 1], fired = exp(log_reach) * -expm1((double)(-k) * hk);
            for (int i = 0; i < k; i++) per[i] = per[i] + fired / k;
            log_reach = log_reach - k * hk;
        }
        const double left = exp(log_reach), share = left * beta[b] / (c > 1 ? c : 1);
        for (int k = 0; k < n; k++) slot[by[k]] = k < c ? per[k] + share : 0.0;
        for (int i = 0; i < n; i++) {
            int first = 1;
            double total = 0.0;
            for (int j = 0; j < n; j++) {
                if (wb[j] != wb[i]) continue;
                first &= j >= i;
                total += slot[j];
            }
            accept[b * n + i] = first ? total : 0.0;
        }
        reject[b] = left * (1.0 - beta[b]);
    }
}

/* chains.sample: one output token per row from accept [B, n], reject [B] and uniforms u [B, 2]: draft slot k with
 * probability accept[k], else (reject; only where 1 - alpha* > 0) the residual draw, the position min(M, V - 1) with
 * M the last prefix index where psi_M - psi_m* <= u_1 (1 - alpha*), read through order [B, V]. Writes tokens [B] and
 * index [B] (the slot, or -1 for the residual). The numpy route's operations. */
void otlp_sample(const double *accept, const double *reject, const int64_t *w, const double *u, const double *psi,
                 const int64_t *order, const int64_t *m_star, int64_t B, int64_t V, int n, int64_t *tokens,
                 int64_t *index) {
    for (int64_t b = 0; b < B; b++) {
        const double *psib = psi + b * (V + 1), *ab = accept + b * n;
        const double psi_min = psib[m_star[b]], total = np_max(-psi_min, 0.0);
        double cw[MAX_N + 1], run = 0.0;
        int any = 0;
        for (int k = 0; k <= n; k++) {
            const double weight = k < n ? ab[k] : (total > 0 ? reject[b] : 0.0);
            run = k ? run + weight : weight;
            cw[k] = run;
            any |= weight > 0;
        }
        const double value = u[2 * b] * cw[n];
        int slot = 0;
        for (int k = 0; k <= n; k++) slot += cw[k] <= value;
        slot = any ? (slot < n ? slot : n) : 0;
        if (slot < n) {
            tokens[b] = w[b * n + slot];
            index[b] = slot;
            continue;
        }
        const double v = u[2 * b + 1] * total;
        int64_t M = 0;
        for (int64_t m = 0; m <= V; m++)
            if (psib[m] - psi_min <= v) M = m;
        tokens[b] = order[b * V + (M < V - 1 ? M : V - 1)];
        index[b] = -1;
    }
}

/* chains.single_draft on the CPU route, straight from the unnormalised rows p, q [B, V] (float32, or float64 when
 * is_double) and the reciprocals of their sums inv_p, inv_q [B]: the draft w [B] is accepted where u_0 Q_w < P_w (P =
 * p inv_p, Q = q inv_q: buckets.normalised's products), else the residual (P - Q)^+ is drawn by inverse CDF with u_1
 * (xp.inverse_cdf: its running sum from the left, the first index above u_1 times the total, clamped to the first
 * that reaches the total). Only a rejected row is read whole, twice. The numpy route's operations, so the same
 * tokens. Writes tokens [B] and index [B] (0, or -1 for the residual). A draft id outside [0, V) (unchecked input)
 * is clamped into it, as sampler.guard does, one compare per row. Row b of p (q) starts at p + b ldp (q + b ldq):
 * ldp = ldq = V for contiguous rows, more for rows of a larger tensor (no copy of a strided view). */
void otlp_single_draft(const void *p, const void *q, int is_double, int64_t B, int64_t V, int64_t ldp, int64_t ldq,
                       const double *inv_p, const double *inv_q, const int64_t *w, const double *u, int64_t *tokens, int64_t *index) {
    for (int64_t b = 0; b < B; b++) {
        const double ip = inv_p[b], iq = inv_q[b];
        const float *pf = (const float *)p + b * ldp, *qf = (const float *)q + b * ldq;
        const double *pd = (const double *)p + b * ldp, *qd = (const double *)q + b * ldq;
#define P_AT(i) ((is_double ? pd[i] : (double)pf[i]) * ip)
#define Q_AT(i) ((is_double ? qd[i] : (double)qf[i]) * iq)
        const int64_t x = w[b] < 0 ? 0 : w[b] < V ? w[b] : V - 1; /* an id out of range read as the nearest */
        if (u[2 * b] * Q_AT(x) < P_AT(x)) {
            tokens[b] = x;
            index[b] = 0;
            continue;
        }
        double total = 0.0;
        for (int64_t i = 0; i < V; i++) {
            const double d = np_max(P_AT(i) - Q_AT(i), 0.0);
            total = i ? total + d : d;
        }
        const double threshold = u[2 * b + 1] * total;
        double run = 0.0;
        int64_t at = V - 1;
        for (int64_t i = 0; i < V; i++) {
            const double d = np_max(P_AT(i) - Q_AT(i), 0.0);
            run = i ? run + d : d;
            if (run > threshold || run >= total) {
                at = i;
                break;
            }
        }
#undef P_AT
#undef Q_AT
        tokens[b] = at;
        index[b] = -1;
    }
}

/* chains.slot_mass for 1 <= n <= MAX_N: the closed forms at n <= 2 (closed_root), else otlp_slot_mass with at most
 * `limit` Newton steps (bucket_rule.c's bounds on the chain's hazard over the buckets it does not sort). */
void otlp_slot_roots(const double *H, const double *L, const double *r, const double *gap, int64_t count, int n,
                     int64_t limit, double *y) {
    if (n >= 3) {
        otlp_slot_mass(H, L, r, gap, count, n, limit, y);
        return;
    }
    for (int64_t i = 0; i < count; i++) y[i] = closed_root(H[i], L[i], r[i], gap[i], n);
}
