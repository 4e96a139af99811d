/* What the kernels share: numpy's max / min and int_power (chains.c, bucket_rule.c, kseq.c), eight running sums
 * added pairwise and, with AVX2, eight entries loaded as two float64 vectors (buckets.c, kseq.c), and the kernels of
 * buckets.c and chains.c that bucket_rule.c calls on one row at a time (B = 1). */
#ifndef OTLP_KERNELS_H
#define OTLP_KERNELS_H
#include <stdint.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define MAX_N 32 /* native.SLOT_MASS_MAX_N: up to here j C(n, j) is an exact int64, as Python's ints are */

/* Eight running sums s [8] added pairwise. */
static inline double sum8(const double *s) {
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#ifdef __AVX2__
/* Eight entries as two float64 vectors (lanes 0-3 and 4-7). */
static inline void load8_f32(const float *x, __m256d *a, __m256d *b) {
    const __m256 v = _mm256_loadu_ps(x);
    *a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    *b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

static inline void load8_f64(const double *x, __m256d *a, __m256d *b) {
    *a = _mm256_loadu_pd(x);
    *b = _mm256_loadu_pd(x + 4);
}

/* The eight lanes of a (0-3) and b (4-7), added as sum8 adds. */
static inline double lanes_sum(__m256d a, __m256d b) {
    double s[8];
    _mm256_storeu_pd(s, a);
    _mm256_storeu_pd(s + 4, b);
    return sum8(s);
}
#endif

/* numpy's maximum and minimum: the first argument on ties, NaN propagated */
static inline double np_max(double a, double b) { return (a >= b || a != a) ? a : b; }
static inline double np_min(double a, double b) { return (a <= b || a != a) ? a : b; }

static inline double int_power(double x, int k) { /* x^k by repeated squaring, k >= 1: otlp.core.psi.int_power's products */
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

/* otlp_bucket_sums' work holds 2 (NB + OTLP_ZERO_SLOTS) doubles: the buckets' pairs, then the slots of the tokens
 * with P = 0 or Q = 0 (buckets.c) */
#define OTLP_ZERO_SLOTS 16
void otlp_bucket_sums(const void *p, const void *q, int is_double, int64_t B, int64_t V, const double *inv_p,
                      const double *inv_q, int bits, int64_t top, int64_t NB, double below, double above,
                      uint16_t *bucket, double *Pb, double *Qb, double *work);
int64_t otlp_gather_selected(const void *p, const void *q, int is_double, int64_t B, int64_t V, const double *inv_p,
                             const double *inv_q, const uint16_t *bucket, const uint8_t *selected, int64_t NB,
                             int64_t capacity, int64_t *F, double *P, double *Q);
void otlp_prefix(const double *P, const double *Q, const int64_t *order, int64_t B, int64_t V, int n, double *ps,
                 double *qs, double *prefix_q, double *suffix_q, double *psi, int64_t *m_star, double *work);
void otlp_served_group(const double *psi, const int64_t *order, const int64_t *w, const int64_t *m_star, int64_t B,
                       int64_t V, int64_t draws, int64_t *pos, int64_t *top_out, int64_t *s_out, int64_t *e_out);
int otlp_window_chain(const double *ps, const double *qs, const double *prefix_q, const double *suffix_q,
                      const double *psi, int64_t B, int64_t V, const int64_t *m_star, const int64_t *s_in,
                      const int64_t *e_in, const int64_t *top_in, const int64_t *pos_in, int64_t draws, int n,
                      int64_t limit, double *cum_out, double *cum_c_out, double *beta_out);
void otlp_slot_roots(const double *H, const double *L, const double *r, const double *gap, int64_t count, int n,
                     int64_t limit, double *y);
void otlp_pieces(const int64_t *w, const int64_t *pos, const int64_t *s, const double *cum, const double *cum_c,
                 const double *beta, int64_t B, int n, double *accept, double *reject);
void otlp_sample(const double *accept, const double *reject, const int64_t *w, const double *u, const double *psi,
                 const int64_t *order, const int64_t *m_star, int64_t B, int64_t V, int n, int64_t *tokens,
                 int64_t *index);

#endif
