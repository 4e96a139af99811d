/* The per-token passes of the optimal rule's bucketed CPU route (otlp/optimal/buckets.py) in one loop each.
 *
 * Two passes over a row: normalise it (P = p * inv_p, Q = q * inv_q), each token's ratio Q / P, the ratio's bucket
 * from the leading bits of its float64 pattern (clamped as device_buckets.token_buckets clamps) and the buckets'
 * sums of P and Q; then the tokens of the selected buckets with their normalised masses. Every value here is the
 * same IEEE operation on the same operands as in that reference on torch tensors, so the same bits, and
 * tests/backend/test_native.py holds the two together (the bucket sums, added in token order here, to rounding).
 * And the rows' float64 sums and minima, in one pass (the samplers' value check and the optimal rule's
 * normalisation share it); for the rows that take the full sort, the normalised rows with their ratio keys in one
 * pass (otlp_normalised_keys) and the ratio sort's passes around its two sorts (otlp_sort_runs, xp._packed_sort).
 *
 * Built without -ffast-math and with -ffp-contract=off (otlp/backend/native/__init__.py): no fused multiply-adds, no
 * reciprocal divisions.
 */
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kernels.h"

#define BLOCK 1024 /* tokens whose ratios are formed before their histogram updates (they stay in L1) */
#define SKIP 16    /* tokens whose selection is tested at once by the gather (1-2% of an LM row's are selected) */

static inline int64_t bucket_of(double P, double Q, int shift, int64_t top, double below, double above) {
    double r = Q / P;          /* p = q = 0: NaN, which fails both tests and takes `below` (the bottom bucket) */
    r = r >= below ? r : below;
    r = r <= above ? r : above; /* +inf and 2^OCTAVES: the top bucket */
    int64_t pattern;
    memcpy(&pattern, &r, sizeof pattern);
    return top - (int64_t)((uint64_t)pattern >> shift); /* (r > 0: a logical shift, one vector op) */
}

/* One row: its tokens' buckets, and their P and Q added into work ([NB, 2]: a bucket's two sums share a cache line;
 * one histogram, in token order: at 2^11 buckets (V >= 128k) it fits the L1 cache, where
 * four interleaved copies, which spared tokens of one bucket in a row each other's add, did not, and took 1.08x the
 * time of a row's whole rule; two copies at V = 32k on close drafts, whose consecutive tokens often share a bucket,
 * changed nothing either: 29-34 us a row both ways, the vectorised loop before the adds being the larger part). With
 * SSE2 a token's (P, Q) pair is added to its bucket's pair as one 128-bit load, add and store (the same two
 * additions, lane by lane: the same bits), half the memory operations of the scalar update, which was the pass's
 * larger part.
 *
 * Tokens with P = 0 or Q = 0 are the exception: a target filtered by top-k or top-p (what an engine passes) has
 * P = 0 on all but a few tokens, all in one bucket (Q / 0 = inf: the top one), so each add waited on the one before
 * it through memory (a store-to-load chain: 99-105 us a row at V = 32k, against 27-30 unfiltered). In a block where
 * 4 of 8 tokens spaced through it fall in the two buckets of P = 0 and Q = 0, those buckets' pairs go to ZLANES
 * rotating slots each instead, after the NB buckets' in work: independent chains (29-33 us a row), added to their
 * buckets at the row's end. The same sums in another order, the same to rounding; a block without such runs keeps
 * the plain loop, which a test per token would slow by a tenth. */
#define ZLANES (OTLP_ZERO_SLOTS / 2)
#ifdef __SSE2__
#define ADD_PAIR(dst, PQ, i) _mm_storeu_pd((dst), _mm_add_pd(_mm_loadu_pd(dst), _mm_loadu_pd((PQ) + 2 * (i))))
#else
#define ADD_PAIR(dst, PQ, i) ((dst)[0] += (PQ)[2 * (i)], (dst)[1] += (PQ)[2 * (i) + 1])
#endif
#define ROW_SUMS(NAME, T)                                                                                           \
    static void NAME(const T *restrict p, const T *restrict q, int64_t V, double ip, double iq, int shift,        \
                     int64_t top, double below, double above, uint16_t *restrict bucket, int64_t NB,              \
                     double *restrict work) {                                                                     \
        double PQ[2 * BLOCK];                                                                                     \
        int64_t Ks[BLOCK];                                                                                        \
        const int64_t k0[2] = {bucket_of(0.0, 1.0, shift, top, below, above), /* the top bucket: P = 0 */        \
                               bucket_of(1.0, 0.0, shift, top, below, above)}; /* the bottom: Q = 0 */            \
        for (int64_t lo = 0; lo < V; lo += BLOCK) {                                                               \
            const int64_t m = V - lo < BLOCK ? V - lo : BLOCK;                                                    \
            for (int64_t i = 0; i < m; i++) { /* vectorised: no stores to shared places */                       \
                const double P = (double)p[lo + i] * ip, Q = (double)q[lo + i] * iq;                              \
                Ks[i] = bucket_of(P, Q, shift, top, below, above);                                                \
                PQ[2 * i] = P;                                                                                    \
                PQ[2 * i + 1] = Q;                                                                                \
            }                                                                                                     \
            int zeros = 0; /* the block's share in the two buckets of P = 0 and Q = 0, from 8 of its tokens */   \
            for (int64_t j = 0; j < 8; j++) zeros += Ks[j * m / 8] == k0[0] || Ks[j * m / 8] == k0[1];          \
            if (zeros < 4)                                                                                        \
                for (int64_t i = 0; i < m; i++) {                                                                 \
                    bucket[lo + i] = (uint16_t)Ks[i];                                                             \
                    ADD_PAIR(work + 2 * Ks[i], PQ, i);                                                            \
                }                                                                                                 \
            else                                                                                                  \
                for (int64_t i = 0; i < m; i++) {                                                                 \
                    const int64_t k = Ks[i];                                                                      \
                    bucket[lo + i] = (uint16_t)k;                                                                 \
                    if (k == k0[0] || k == k0[1]) /* (those tokens' buckets: here, many in a row) */             \
                        ADD_PAIR(work + 2 * (NB + ZLANES * (k != k0[0]) + (i & (ZLANES - 1))), PQ, i);            \
                    else                                                                                          \
                        ADD_PAIR(work + 2 * k, PQ, i);                                                            \
                }                                                                                                 \
        }                                                                                                         \
        for (int kind = 0; kind < 2; kind++)                                                                      \
            for (int l = 0; l < ZLANES; l++) {                                                                    \
                work[2 * k0[kind]] += work[2 * (NB + ZLANES * kind + l)];                                         \
                work[2 * k0[kind] + 1] += work[2 * (NB + ZLANES * kind + l) + 1];                                 \
            }                                                                                                     \
    }

ROW_SUMS(row_sums_f32, float)
ROW_SUMS(row_sums_f64, double)

/* Rows p, q [B, V] (float32, or float64 when is_double), inv_p, inv_q [B] the reciprocals of their sums. Writes
 * bucket [B, V] (0 .. NB - 1, 0 the highest ratios) and Pb, Qb [B, NB] the bucket sums of P and Q. work: 2 (NB +
 * OTLP_ZERO_SLOTS) doubles. */
void otlp_bucket_sums(const void *p, const void *q, int is_double, int64_t B, int64_t V, const double *inv_p,
                      const double *inv_q, int bits, int64_t top, int64_t NB, double below, double above,
                      uint16_t *bucket, double *Pb, double *Qb, double *work) {
    const int shift = 52 - bits;
    for (int64_t b = 0; b < B; b++) {
        memset(work, 0, sizeof(double) * 2 * (NB + OTLP_ZERO_SLOTS));
        if (is_double)
            row_sums_f64((const double *)p + b * V, (const double *)q + b * V, V, inv_p[b], inv_q[b], shift, top,
                         below, above, bucket + b * V, NB, work);
        else
            row_sums_f32((const float *)p + b * V, (const float *)q + b * V, V, inv_p[b], inv_q[b], shift, top,
                         below, above, bucket + b * V, NB, work);
        for (int64_t k = 0; k < NB; k++) {
            Pb[b * NB + k] = work[2 * k];
            Qb[b * NB + k] = work[2 * k + 1];
        }
    }
}

/* The selected buckets of a row as at most RANGES runs of consecutive buckets [lo, lo + len): a row's selection is
 * a few such runs (m*, the served group's ends, the drafts' and the residual's buckets), so that a block of 16
 * tokens' buckets is tested against them with 16-lane compares instead of 16 table look-ups. Returns their number,
 * or -1 where there are more. */
#define RANGES 16
#if defined(__AVX2__) && SKIP == 16
/* COMPRESS[m]: the set bits of the 8-bit mask m, lowest first, one per nibble (an AVX2 permutation's lanes). */
static const uint32_t COMPRESS[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};

static int selected_ranges(const uint8_t *sel, int64_t NB, uint16_t *lo, uint16_t *len) {
    int R = 0;
    for (int64_t k = 0; k < NB; k++) {
        if (!sel[k] || (k > 0 && sel[k - 1])) continue;
        if (R == RANGES) return -1;
        int64_t z = k;
        while (z < NB && sel[z]) z++;
        lo[R] = (uint16_t)k;
        len[R++] = (uint16_t)(z - k);
    }
    return R;
}

#endif

/* The tokens of rows p, q [B, V] whose bucket (from otlp_bucket_sums) is selected (selected [B, NB], one byte each),
 * row by row in token order: F the flat index b V + i, P and Q their normalised masses, the first `capacity` of them
 * (F has capacity + 1 places). Returns how many there are, which may exceed capacity (the caller then grows its
 * arrays and calls again). A block of SKIP tokens none of which is selected (most of them) costs one test: with
 * AVX2 and a selection of at most RANGES runs, bucket - lo < len (unsigned) on 16 lanes per run, the selected lanes
 * then stored packed through a permutation of the compare's mask (COMPRESS): no look-up, no branch per token or
 * block. */
int64_t otlp_gather_selected(const void *p, const void *q, int is_double, int64_t B, int64_t V, const double *inv_p,
                             const double *inv_q, const uint16_t *restrict bucket, const uint8_t *restrict selected,
                             int64_t NB, int64_t capacity, int64_t *restrict F, double *restrict P,
                             double *restrict Q) {
    int64_t t = 0;
    for (int64_t b = 0; b < B; b++) {
        const uint8_t *restrict sel = selected + b * NB;
        const uint16_t *restrict bk = bucket + b * V;
        const int64_t row = b * V, start = t;
        int64_t i = 0;
#if defined(__AVX2__) && SKIP == 16
        uint16_t lo[RANGES], len[RANGES];
        const int R = selected_ranges(sel, NB, lo, len);
        if (R >= 0) {
            __m256i vlo[RANGES], vtop[RANGES]; /* bucket - lo <= len - 1, unsigned: min(x, len - 1) == x */
            for (int r = 0; r < R; r++) {
                vlo[r] = _mm256_set1_epi16((short)lo[r]);
                vtop[r] = _mm256_set1_epi16((short)(len[r] - 1));
            }
            const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), seven = _mm256_set1_epi32(7);
            const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            for (; i + SKIP <= V && t + SKIP <= capacity; i += SKIP) { /* (room for 16 stores: else the loop below) */
                const __m256i x = _mm256_loadu_si256((const __m256i *)(bk + i));
                __m256i any = _mm256_setzero_si256();
                for (int r = 0; r < R; r++) {
                    const __m256i d = _mm256_sub_epi16(x, vlo[r]);
                    any = _mm256_or_si256(any, _mm256_cmpeq_epi16(_mm256_min_epu16(d, vtop[r]), d));
                }
                /* lanes 0-7 in bits 0-7, 8-15 in bits 16-23; each half's selected lanes stored packed, lowest first,
                 * as row + i + lane (the lanes after them written too, then overwritten or left beyond t) */
                const unsigned mask = (unsigned)_mm256_movemask_epi8(_mm256_packs_epi16(any, any));
                for (int h = 0; h < 2; h++) {
                    const unsigned m = (mask >> (16 * h)) & 0xff;
                    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)COMPRESS[m]), shifts),
                                                         seven);
                    const __m256i pos = _mm256_permutevar8x32_epi32(lanes, idx);
                    const __m256i base = _mm256_set1_epi64x(row + i + 8 * h);
                    _mm256_storeu_si256((__m256i *)(F + t), _mm256_add_epi64(base, _mm256_cvtepi32_epi64(
                                                                _mm256_castsi256_si128(pos))));
                    _mm256_storeu_si256((__m256i *)(F + t + 4), _mm256_add_epi64(base, _mm256_cvtepi32_epi64(
                                                                    _mm256_extracti128_si256(pos, 1))));
                    t += __builtin_popcount(m);
                }
            }
        }
#endif
        for (; i + SKIP <= V; i += SKIP) { /* a block of tokens none of which is selected (most of them) costs a test */
            unsigned any = 0;
            for (int k = 0; k < SKIP; k++) any |= sel[bk[i + k]];
            if (!any) continue;
            for (int k = 0; k < SKIP; k++) {
                F[t < capacity ? t : capacity] = row + i + k; /* written always, kept when selected: no branch */
                t += sel[bk[i + k]];
            }
        }
        for (; i < V; i++) {
            F[t < capacity ? t : capacity] = row + i;
            t += sel[bk[i]];
        }
        for (int64_t j = start; j < (t < capacity ? t : capacity); j++) {
            const int64_t x = F[j];
            P[j] = (is_double ? ((const double *)p)[x] : (double)((const float *)p)[x]) * inv_p[b];
            Q[j] = (is_double ? ((const double *)q)[x] : (double)((const float *)q)[x]) * inv_q[b];
        }
    }
    return t;
}

/* The float64 sum and the least entry of each row of x [B, V] (float32, or float64 when is_double) into sum [B] and
 * low [B], in one pass: eight running sums over the row's entries i = j mod 8, then added pairwise (with AVX2 the
 * same eight lanes in two registers: the same sums, bit for bit). A NaN entry makes its row's sum NaN (its minimum is
 * then meaningless; the callers test the sum first). */
static void row_finish(const double *s, const double *m, double *sum, double *low) {
    *sum = sum8(s);
    double lo = m[0];
    for (int j = 1; j < 8; j++) lo = m[j] < lo ? m[j] : lo;
    *low = lo;
}

#ifdef __AVX2__
#define STATS_LANES(LOAD8)                                                                                          \
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd(), m0 = _mm256_set1_pd(m[0]), m1 = m0, a, b;       \
    for (; i + 8 <= V; i += 8) {                                                                                  \
        LOAD8(x + i, &a, &b);                                                                                     \
        s0 = _mm256_add_pd(s0, a);                                                                                \
        s1 = _mm256_add_pd(s1, b);                                                                                \
        m0 = _mm256_min_pd(a, m0);                                                                                \
        m1 = _mm256_min_pd(b, m1);                                                                                \
    }                                                                                                             \
    _mm256_storeu_pd(s, s0);                                                                                      \
    _mm256_storeu_pd(s + 4, s1);                                                                                  \
    _mm256_storeu_pd(m, m0);                                                                                      \
    _mm256_storeu_pd(m + 4, m1);
#else
#define STATS_LANES(LOAD8)
#endif

#define ROW_STATS(NAME, T, LOAD8)                                                                                   \
    static void NAME(const T *restrict x, int64_t V, double *sum, double *low) {                                  \
        double s[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, m[8];                                             \
        for (int j = 0; j < 8; j++) m[j] = V > 0 ? (double)x[0] : 0.0;                                            \
        int64_t i = 0;                                                                                            \
        STATS_LANES(LOAD8)                                                                                        \
        for (; i + 8 <= V; i += 8)                                                                                \
            for (int j = 0; j < 8; j++) {                                                                         \
                const double v = (double)x[i + j];                                                                \
                s[j] += v;                                                                                        \
                m[j] = v < m[j] ? v : m[j];                                                                       \
            }                                                                                                     \
        for (; i < V; i++) {                                                                                      \
            const double v = (double)x[i];                                                                        \
            s[0] += v;                                                                                            \
            m[0] = v < m[0] ? v : m[0];                                                                           \
        }                                                                                                         \
        row_finish(s, m, sum, low);                                                                               \
    }

ROW_STATS(row_stats_f32, float, load8_f32)
ROW_STATS(row_stats_f64, double, load8_f64)

/* The float64 sum and the least entry of each row of x [B, V] (float32, or float64 when is_double), row b at
 * x + b ld (ld = V for contiguous rows; more for rows of a larger tensor, e.g. one position of [B, n + 1, V]). */
void otlp_row_stats(const void *x, int is_double, int64_t B, int64_t V, int64_t ld, double *sum, double *low) {
    for (int64_t b = 0; b < B; b++) {
        if (is_double)
            row_stats_f64((const double *)x + b * ld, V, sum + b, low + b);
        else
            row_stats_f32((const float *)x + b * ld, V, sum + b, low + b);
    }
}

/* The rows p, q [B, V] (float32, or float64 when is_double) normalised, P = p inv_p and Q = q inv_q into P, Q [B, V]
 * float64 (the products buckets.normalised forms), and their ratio keys Q / P into key [B, V] (-1 where both are 0:
 * otlp.core.psi.ratio_keys), in one pass: the same bits as the numpy route. */
void otlp_normalised_keys(const void *p, const void *q, int is_double, int64_t B, int64_t V, const double *inv_p,
                          const double *inv_q, double *restrict P, double *restrict Q, double *restrict key) {
    for (int64_t b = 0; b < B; b++) {
        const double ip = inv_p[b], iq = inv_q[b];
        double *Pb = P + b * V, *Qb = Q + b * V, *kb = key + b * V;
        if (is_double) {
            const double *pb = (const double *)p + b * V, *qb = (const double *)q + b * V;
            for (int64_t i = 0; i < V; i++) {
                Pb[i] = pb[i] * ip;
                Qb[i] = qb[i] * iq;
            }
        } else {
            const float *pb = (const float *)p + b * V, *qb = (const float *)q + b * V;
            for (int64_t i = 0; i < V; i++) {
                Pb[i] = (double)pb[i] * ip;
                Qb[i] = (double)qb[i] * iq;
            }
        }
        for (int64_t i = 0; i < V; i++) {
            const double r = Qb[i] / Pb[i];
            kb[i] = r == r ? r : -1.0;
        }
    }
}

/* xp._packed_sort's passes around its two sorts. packed [B, V]: each row's keys' bit patterns with their low s bits
 * replaced by V - 1 - id, sorted ascending. Writes order [B, V], the ids by decreasing packed key (ids increasing
 * within a truncated tie), and returns the number of adjacent positions whose truncated keys tie, over all rows.
 * Where some tie but at most an eighth of them (sparse), *R_out = -1: the caller repairs those runs' positions.
 * Else (none, or `dense`: n-gram laws) each row holding a run of truncated ties with different exact keys also gets
 * composite [R, V] (R such rows, listed in rows) = (run << 2s) | ((2^s - 1 - the exact key's low s bits) << s) | id,
 * whose ascending order is that row's exact stable order (run, key decreasing, id increasing): *R_out = R. Returns
 * -1 where a row's runs need more than bits - 2s bits (bits <= 63; the caller's lexsort then). The numpy route's
 * quantities (xp._sorted_runs), so the same order. */
int64_t otlp_sort_runs(const double *key, const int64_t *packed, int64_t B, int64_t V, int s, int bits,
                       int64_t *order, int64_t *composite, int64_t *rows, int64_t *R_out) {
    const int64_t low = ((int64_t)1 << s) - 1;
    int64_t ties = 0, R = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t *pb = packed + b * V;
        int64_t *ob = order + b * V;
        for (int64_t i = 0; i < V; i++) {
            const int64_t x = pb[V - 1 - i];
            ob[i] = (V - 1) - (x & low);
            ties += i > 0 && (x >> s) == (pb[V - i] >> s);
        }
    }
    *R_out = ties > 0 ? -1 : 0;
    if (8 * ties <= B * (V - 1)) return ties; /* none, or sparse: the caller repairs the runs' positions only */
    for (int64_t b = 0; b < B; b++) {
        const int64_t *pb = packed + b * V, *ob = order + b * V;
        const double *kb = key + b * V;
        int mixed = 0;
        for (int64_t i = 1; i < V && !mixed; i++)
            mixed = (pb[V - 1 - i] >> s) == (pb[V - i] >> s) && kb[ob[i]] != kb[ob[i - 1]];
        if (!mixed) continue;
        int64_t *cb = composite + R * V, run = 0;
        for (int64_t i = 0; i < V; i++) {
            run += i > 0 && (pb[V - 1 - i] >> s) != (pb[V - i] >> s);
            int64_t kbits;
            memcpy(&kbits, &kb[ob[i]], sizeof kbits);
            cb[i] = (run << (2 * s)) | ((low - (kbits & low)) << s) | ob[i];
        }
        if (run > 0 && 64 - __builtin_clzll((unsigned long long)run) + 2 * s > bits) return -1;
        if (run == 0 && 2 * s > bits) return -1;
        rows[R++] = b;
    }
    *R_out = R;
    return ties;
}
