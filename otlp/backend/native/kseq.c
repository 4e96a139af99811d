/* K-SEQ's first bisection stage (otlp/verifiers/kseq.py, _first_stage) in one loop per row and step.
 *
 * numpy takes three passes over [rows, V] arrays per bisection step (mid q, its minimum with p, the sum) and about
 * eight more for the bracket's classes (the two masks, their sums, the inner tokens). Here a row's step is one pass
 * and its classes one more, the row's p and q staying in cache between them. The sums accumulate in float64 from
 * float64 products (exact for float32 rows: a float32 q times a dyadic mid fits a float64; float64 rows' products round
 * as numpy's), so on float32 rows g(mid) = sum min(mid q, p) is exact to float64 rounding where numpy's float32 sum
 * rounds in float32; the decision f(mid) = 1 - (1 - g / mid)^n - g <= 0 is taken in float64. The classes compare
 * those products too: q hi <= p exactly implies the rounded product is <= p, so a token classed above (below) here is
 * above (below) for every rounded mid q of the second stage, which is what that stage needs (kseq._host_rho).
 * tests/backend/test_native.py holds the stage to numpy's steps on float64 rows, tests/verifiers/test_kseq_rho.py rho* to its
 * definition.
 */
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __AVX2__
#define WIDE 8
#define G_LANES(LOAD8)                                                                                              \
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, qa, qb, pa, pb;                                                    \
    const __m256d m = _mm256_set1_pd(mid);                                                                        \
    for (; i + WIDE <= V; i += WIDE) {                                                                            \
        LOAD8(q + i, &qa, &qb);                                                                                   \
        LOAD8(p + i, &pa, &pb);                                                                                   \
        s0 = _mm256_add_pd(s0, _mm256_min_pd(_mm256_mul_pd(qa, m), pa)); /* min: a < b ? a : b */                 \
        s1 = _mm256_add_pd(s1, _mm256_min_pd(_mm256_mul_pd(qb, m), pb));                                          \
    }                                                                                                             \
    total = lanes_sum(s0, s1);
#else
#define G_LANES(LOAD8)
#endif

/* g(mid) = sum_i min(mid q_i, p_i) over one row of V entries (T: float or double). */
#define ROW_G(NAME, T, LOAD8)                                                                                       \
    static double NAME(const T *restrict p, const T *restrict q, int64_t V, double mid) {                         \
        double total = 0.0;                                                                                       \
        int64_t i = 0;                                                                                            \
        G_LANES(LOAD8)                                                                                            \
        for (; i < V; i++) {                                                                                      \
            const double a = (double)q[i] * mid, b = (double)p[i];                                                \
            total += a < b ? a : b;                                                                               \
        }                                                                                                         \
        return total;                                                                                             \
    }

ROW_G(row_g_f32, float, load8_f32)
ROW_G(row_g_f64, double, load8_f64)

/* Rows p, q [B, V] (float32, or float64 when is_double): the bracket lo, hi [B] of rho* after `steps` bisection
 * steps from [1, n]. With `inner`, also the classes for that bracket: A [B] the sum of q over the tokens with
 * q hi <= p, C [B] the sum of p over those with q lo >= p (p = q = 0 in both, adding 0), and the others' p and q,
 * row by row in token order, into Pm, Qm (capacity places; counts [B] per row). Returns the number of inner tokens,
 * which may exceed capacity (the caller then grows its arrays and calls again). */
int64_t otlp_kseq_first_stage(const void *p, const void *q, int is_double, int64_t B, int64_t V, int n, int steps,
                              int inner, double *lo_out, double *hi_out, double *A_out, double *C_out,
                              int64_t *counts, int64_t capacity, double *Pm, double *Qm) {
    int64_t t = 0;
    for (int64_t b = 0; b < B; b++) {
        const float *pf = (const float *)p + b * V, *qf = (const float *)q + b * V;
        const double *pd = (const double *)p + b * V, *qd = (const double *)q + b * V;
        double lo = 1.0, hi = (double)n;
        for (int k = 0; k < (n > 1 ? steps : 0); k++) {
            const double mid = 0.5 * (lo + hi);
            const double g = is_double ? row_g_f64(pd, qd, V, mid) : row_g_f32(pf, qf, V, mid);
            const int valid = 1.0 - int_power(1.0 - g / mid, n) - g <= 0.0;
            if (valid) hi = mid;
            else lo = mid;
        }
        lo_out[b] = lo;
        hi_out[b] = hi;
        if (!inner) continue;
        double A = 0.0, C = 0.0;
        const int64_t start = t;
        int64_t i = 0;
#ifdef __AVX2__
        { /* eight tokens at a time: the classes' sums by masks; the inner ones (about 1%) appended one by one */
            __m256d sa0 = _mm256_setzero_pd(), sa1 = sa0, sc0 = sa0, sc1 = sa0, qa, qb, pa, pb;
            const __m256d H = _mm256_set1_pd(hi), L = _mm256_set1_pd(lo);
            for (; i + WIDE <= V; i += WIDE) {
                if (is_double) {
                    load8_f64(qd + i, &qa, &qb);
                    load8_f64(pd + i, &pa, &pb);
                } else {
                    load8_f32(qf + i, &qa, &qb);
                    load8_f32(pf + i, &pa, &pb);
                }
                const __m256d up0 = _mm256_cmp_pd(_mm256_mul_pd(qa, H), pa, _CMP_LE_OQ);
                const __m256d up1 = _mm256_cmp_pd(_mm256_mul_pd(qb, H), pb, _CMP_LE_OQ);
                const __m256d dn0 = _mm256_cmp_pd(_mm256_mul_pd(qa, L), pa, _CMP_GE_OQ);
                const __m256d dn1 = _mm256_cmp_pd(_mm256_mul_pd(qb, L), pb, _CMP_GE_OQ);
                sa0 = _mm256_add_pd(sa0, _mm256_and_pd(up0, qa));
                sa1 = _mm256_add_pd(sa1, _mm256_and_pd(up1, qb));
                sc0 = _mm256_add_pd(sc0, _mm256_and_pd(dn0, pa));
                sc1 = _mm256_add_pd(sc1, _mm256_and_pd(dn1, pb));
                const int in = (~(_mm256_movemask_pd(_mm256_or_pd(up0, dn0)) |
                                  (_mm256_movemask_pd(_mm256_or_pd(up1, dn1)) << 4))) & 0xff;
                for (int j = 0; in && j < WIDE; j++) {
                    if (!(in >> j & 1)) continue;
                    if (t < capacity) {
                        Pm[t] = is_double ? pd[i + j] : (double)pf[i + j];
                        Qm[t] = is_double ? qd[i + j] : (double)qf[i + j];
                    }
                    t++;
                }
            }
            A = lanes_sum(sa0, sa1);
            C = lanes_sum(sc0, sc1);
        }
#endif
        for (; i < V; i++) {
            const double pi = is_double ? pd[i] : (double)pf[i], qi = is_double ? qd[i] : (double)qf[i];
            const int above = qi * hi <= pi, below = qi * lo >= pi;
            A += above ? qi : 0.0;
            C += below ? pi : 0.0;
            if (!above && !below) {
                if (t < capacity) {
                    Pm[t] = pi;
                    Qm[t] = qi;
                }
                t++;
            }
        }
        A_out[b] = A;
        C_out[b] = C;
        counts[b] = t - start;
    }
    return t;
}
