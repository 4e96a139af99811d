/* The optimal rule's bucketed CPU route (otlp/optimal/buckets.py) on one row at a time, start to end, in C.
 *
 * A numpy route once ran these steps on all the rows of a call at once (about three hundred numpy calls on [B, NB]
 * and [B, K] arrays), whose cost per call kept the rule above twice RRS at small batches and at V = 2k (issue 19);
 * it was retired (issue 41). Here each row takes the steps in one loop (buckets.py's module docstring numbers them;
 * the readable reference of each is otlp/optimal/device_buckets.py, on torch tensors):
 *
 *   1. the buckets and their sums (otlp_bucket_sums);
 *   2. psi at the bucket boundaries (otlp_prefix on the buckets in order) and each bucket's interior bound f
 *      (buckets.psi_interior_bound, less the margin), low and inner (device_buckets.level);
 *   3. the selection (device_buckets.select, with `bound`), or the caller's;
 *   4. the selected buckets' tokens (otlp_gather_selected), each run of unselected buckets one entry (its sums, and
 *      the least bound inside it), in the ratio order: buckets in order, a selected bucket's tokens by decreasing
 *      key (ties by token id), which is the order a stable sort by key gives, since the buckets hold
 *      disjoint ratio ranges and a run's key lies between its neighbours';
 *   5. the rule on it (otlp_prefix, otlp_served_group, otlp_window_chain, otlp_pieces, otlp_sample, as
 *      chains.tuple_rule and chains.sample on the CPU route) and the certificate (device_buckets' _attempt); a row that fails
 *      has its failing runs' buckets selected and is tried again, up to `attempts` times.
 *
 * A run's sums add its buckets from the first; psi at the bucket boundaries is formed over the buckets that hold
 * mass (the same values); a failing attempt stops before the chain. tests/optimal/test_buckets.py holds the route
 * to the full sort, and token for token to device_buckets.decide. A call's rows may be spread over an OpenMP team
 * (otlp_bucket_rule).
 *
 * With `bound` (buckets.BOUND; issue 41) the route goes further, for drafts close to their target, whose served window s .. top holds thousands of tokens: step 3 leaves the drafts' buckets unsorted
 * (row_gather: each draft a token, the rest of its bucket runs between them) and picks the group's ends from the
 * least boundary psi, and step 5 lets merged runs lie inside the window, bounding their share of the chain's hazard
 * (window_bound). tests/optimal/test_bounded_window.py holds it to the route without it.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"

#define INSERTION 24   /* a bucket's tokens sorted by insertion up to here, else by merge sort */

/* Stable sort of the columns cols [m] by decreasing key[col] (equal keys keep their order), tmp: m places. */
static void sort_by_key(int64_t *cols, int64_t m, const double *key, int64_t *tmp) {
    if (m <= INSERTION) {
        for (int64_t i = 1; i < m; i++) {
            const int64_t c = cols[i];
            const double k = key[c];
            int64_t j = i;
            while (j > 0 && key[cols[j - 1]] < k) {
                cols[j] = cols[j - 1];
                j--;
            }
            cols[j] = c;
        }
        return;
    }
    const int64_t half = m / 2;
    sort_by_key(cols, half, key, tmp);
    sort_by_key(cols + half, m - half, key, tmp);
    int64_t i = 0, j = half, t = 0;
    while (i < half && j < m) tmp[t++] = key[cols[j]] > key[cols[i]] ? cols[j++] : cols[i++];
    while (i < half) tmp[t++] = cols[i++];
    while (j < m) tmp[t++] = cols[j++];
    memcpy(cols, tmp, sizeof(int64_t) * (size_t)m);
}

#define DIGIT_BITS 12 /* a large bucket's tokens are first spread by at most the 12 pattern bits after its own */
#define DIGITS (1 << DIGIT_BITS)
#define RADIX_MIN 64  /* from this many tokens in a bucket */

/* A selected bucket's tokens cols [m] (in token order) by decreasing key, stable: keys in [lo, hi) of one bucket
 * share their pattern's leading bits down to `shift`, so the next d bits spread them into 2^d ordered groups (a
 * counting sort, stable), each then sorted by sort_by_key; the top and bottom buckets (unbounded ratio ranges, keys
 * 0 and -1) and small buckets by sort_by_key alone. d grows with m, about 4 tokens a group (2^d counts to clear and
 * add up: at a fixed 12 bits, 4,096 of them for a bucket of 100 tokens cost more than its sort), from 4 bits up to
 * DIGIT_BITS. tmp: m places; count: DIGITS + 1. */
static void sort_bucket(int64_t *cols, int64_t m, const double *key, int64_t *tmp, int64_t *count, int shift,
                        int edge) {
    const int width = 64 - __builtin_clzll((unsigned long long)m) + 1; /* bit_length(m) + 1 */
    const int bits = width < 4 ? 4 : width > DIGIT_BITS ? DIGIT_BITS : width;
    if (m <= RADIX_MIN || edge || shift < bits) {
        sort_by_key(cols, m, key, tmp);
        return;
    }
    const int low = shift - bits;
    const int64_t groups = (int64_t)1 << bits, mask = groups - 1;
    memset(count, 0, sizeof(int64_t) * (size_t)(groups + 1));
    for (int64_t i = 0; i < m; i++) {
        int64_t pattern;
        memcpy(&pattern, &key[cols[i]], sizeof pattern);
        count[(mask - ((pattern >> low) & mask)) + 1]++; /* larger keys first */
    }
    for (int64_t d = 0; d < groups; d++) count[d + 1] += count[d];
    for (int64_t i = 0; i < m; i++) {
        int64_t pattern;
        memcpy(&pattern, &key[cols[i]], sizeof pattern);
        tmp[count[mask - ((pattern >> low) & mask)]++] = cols[i];
    }
    int64_t at = 0; /* count[d] is now where group d ends */
    for (int64_t d = 0; d < groups; d++) {
        if (count[d] - at > 1) sort_by_key(tmp + at, count[d] - at, key, cols);
        at = count[d];
    }
    memcpy(cols, tmp, sizeof(int64_t) * (size_t)m);
}

/* sort_bucket on the columns 0 .. m - 1 of key [m] into cols [m] (a bucket whose pattern bits above `shift` are
 * shared; edge: the top or bottom bucket), for tests/backend/test_native.py. Returns 0, or -1 without memory. */
int otlp_sort_bucket(const double *key, int64_t m, int shift, int edge, int64_t *cols) {
    int64_t *tmp = malloc(sizeof(int64_t) * (size_t)(m + DIGITS + 1));
    if (!tmp) return -1;
    for (int64_t i = 0; i < m; i++) cols[i] = i;
    sort_bucket(cols, m, key, tmp, tmp + m, shift, edge);
    free(tmp);
    return 0;
}

#define SEGS(NB) ((NB) + 2 * MAX_N + 2) /* runs of a compressed instance, at most */
#define SPLIT_WAYS 4 /* row_gather's interleaved copies of the sub-run sums (MERGE adds four) */
#define SPLIT_SLOTS ((MAX_N + 1) * (MAX_N + 1)) /* sub-runs of a row's partial buckets, at most */

/* A partial bucket k (a draft's, not sorted: row_gather): its m distinct drafted tokens (ids, keys, and their
 * columns among the gathered tokens) by decreasing key, ties by id, and the sums of its other tokens between them
 * (sub-run v: after draw v - 1 and before draw v in the ratio order; cnt tokens). */
struct part {
    int64_t k, m, id[MAX_N], col[MAX_N], cnt[MAX_N + 1];
    double key[MAX_N], p[MAX_N + 1], q[MAX_N + 1];
};

/* What one call needs, for rows of V tokens in NB buckets: one allocation. */
struct work {
    uint16_t *bucket;                                 /* [V] */
    uint8_t *sel, *part, *gather, *code, *bad_run, *part_run; /* [SEGS(NB) + 1] */
    double *hist, *Pb, *Qb, *lps, *lqs, *Qa, *Sqb, *psib, *lwork, *f, *low, *inner; /* buckets' quantities */
    int64_t *ident, *start, *run_first, *run_last;    /* [NB + 1] */
    int64_t *count;                                   /* [DIGITS + 1] */
    double *run_p, *run_q, *run_low;                  /* [NB] */
    int64_t *F, *order, *tmp, *slot;                  /* [V + NB + 1] */
    double *acc;                                      /* [2 SPLIT_WAYS SPLIT_SLOTS]: row_gather's sub-run sums */
    int64_t *acc_n;                                   /* [SPLIT_WAYS SPLIT_SLOTS] */
    double *Pg, *Qg, *key, *ps, *qs, *pq, *sq, *psi, *pwork;
    /* the served window's bounded segments (window_bound): [SEGS(NB)] each, the chain's positions [n + 2 SEGS(NB)],
     * the roots' arguments and values [4 SEGS(NB)] */
    int64_t *seg_a, *seg_z, *seg_piece, *posl;
    double *seg_lo, *seg_hi, *cuml, *cumcl, *rH, *rL, *rr, *rg, *ry;
    struct part parts[MAX_N + 1];
    int np;
    int inf_ok; /* the top bucket is a run of p = 0 < q tokens with the strict bound (inf_run) */
    void *block, *block2;
};

static int work_alloc(struct work *W, int64_t V, int64_t NB) {
    const size_t nb = (size_t)SEGS(NB) + 1, K = (size_t)V + nb; /* (buckets, or runs of an instance) */
    /* nb doubles each (lwork: otlp_prefix's work on the buckets), K each (pwork: its work on the instance) */
    double **lev[] = {&W->Pb, &W->Qb, &W->lps, &W->lqs, &W->Qa, &W->Sqb, &W->psib, &W->f, &W->low, &W->inner,
                      &W->run_p, &W->run_q, &W->run_low, &W->lwork};
    double **com[] = {&W->Pg, &W->Qg, &W->key, &W->ps, &W->qs, &W->pq, &W->sq, &W->psi, &W->pwork};
    const size_t n_lev = sizeof lev / sizeof *lev, n_com = sizeof com / sizeof *com;
    const size_t doubles = 2 * (nb + OTLP_ZERO_SLOTS) + n_lev * nb + n_com * K + 2 * SPLIT_WAYS * SPLIT_SLOTS;
    const size_t ints = 4 * nb + 4 * K + DIGITS + 1 + SPLIT_WAYS * SPLIT_SLOTS;
    W->block = malloc(sizeof(double) * doubles + sizeof(int64_t) * ints + (size_t)V * 2 + 6 * nb + 64);
    if (!W->block) return -1;
    double *d = W->block;
    W->hist = d, d += 2 * (nb + OTLP_ZERO_SLOTS);
    for (size_t i = 0; i < n_lev; i++) *lev[i] = d, d += nb;
    for (size_t i = 0; i < n_com; i++) *com[i] = d, d += K;
    W->acc = d, d += 2 * SPLIT_WAYS * SPLIT_SLOTS;
    int64_t *x = (int64_t *)d;
    W->ident = x, x += nb;
    W->start = x, x += nb;
    W->run_first = x, x += nb;
    W->run_last = x, x += nb;
    W->F = x, x += K;
    W->order = x, x += K;
    W->tmp = x, x += K;
    W->slot = x, x += K;
    W->acc_n = x, x += SPLIT_WAYS * SPLIT_SLOTS;
    W->count = x, x += DIGITS + 1;
    W->bucket = (uint16_t *)x;
    W->sel = (uint8_t *)(W->bucket + V);
    W->part = W->sel + nb;
    W->gather = W->part + nb;
    W->code = W->gather + nb;
    W->bad_run = W->code + nb;
    W->part_run = W->bad_run + nb;
    for (int64_t k = 0; k < NB; k++) W->ident[k] = k;
    const size_t G = (size_t)SEGS(NB), P = MAX_N + 2 * G;
    W->block2 = malloc(sizeof(int64_t) * (3 * G + P) + sizeof(double) * (2 * G + 2 * P + 5 * 4 * G));
    if (!W->block2) {
        free(W->block);
        return -1;
    }
    x = W->block2;
    W->seg_a = x, x += G;
    W->seg_z = x, x += G;
    W->seg_piece = x, x += G;
    W->posl = x, x += P;
    d = (double *)x;
    W->seg_lo = d, d += G;
    W->seg_hi = d, d += G;
    W->cuml = d, d += P;
    W->cumcl = d, d += P;
    double **roots[] = {&W->rH, &W->rL, &W->rr, &W->rg, &W->ry};
    for (size_t i = 0; i < 5; i++) *roots[i] = d, d += 4 * G;
    return 0;
}

static void work_free(struct work *W) {
    free(W->block);
    free(W->block2);
}

/* The scheme: buckets.Scheme and its constants. */
struct scheme {
    int bits;
    int64_t top, NB;
    double below, above, margin;
    const double *LO, *HI;
};

/* buckets.psi_interior_bound: a lower bound of psi over the prefixes that end inside a stretch of the order holding
 * masses (pb, qb) of ratios q / p in [lo, hi), after prefix sums (Pa, Qa). */
static double interior_bound(double Pa, double Qa, double pb, double qb, double lo, double hi, int n) {
    double x_c = 0.0; /* an empty bucket's (most of a row's buckets): the formula gives 0 there too */
    if (pb != 0.0 || qb != 0.0) {
        x_c = lo > 0 ? (qb / lo - pb) / (1.0 / lo - 1.0 / hi) : qb;
        x_c = np_min(np_max(x_c, 0.0), qb);
    }
    return (Pa + x_c / hi) - int_power(Qa + x_c, n);
}

#define TINY_Q 1e-13 /* inf_run: the strict bound where the run's last q is >= TINY_Q 2^(n-1) of its mass */
#define TINY_MIX 1e-15 /* and its mass is <= 1/2 or above 1/2 by >= TINY_MIX 2^(n-1) V (the forms' switch) */

/* A run of p = 0 < q tokens (ratio +inf: the top bucket's tokens where its p mass is 0, issue 41). Engines filter
 * the target by top-k / top-p before verification, so such a run holds most of a row, and the interior bound of
 * buckets.psi_interior_bound is only its infimum, psi at the run's end, which kept the run a candidate for m* (and
 * s) and sorted it whole. But the run needs no token of its inside. In the reference (chains.py) the run is the
 * first positions of the order (ratio +inf first, ties by token id) and along it P is constant and each step adds
 * q > 0 to Q, so psi_i = P - Q_i^n falls strictly: every prefix strictly inside the run lies strictly above psi at
 * the run's end. Hence none of the reference's answers lies strictly inside it: m* and an inner group's s (first
 * argmins, over ranges that hold the run's end whenever they hold a point inside it), an outer group's s and the
 * residual's M (last prefixes at or below a threshold: the run's end qualifies whenever a point inside does), an
 * outer group's e (a first argmin after a draw inside the run would be its end or after it). An inner group's e
 * may lie inside (the first prefix after the top draw below psi_s), but only where the top draw is in the run, and
 * then every draw is (all precede it) and has p = 0: the rule never accepts a token of p = 0 (its slots serve t = p
 * mass), so the row rejects and draws the residual at M (row_rule's dead case; where u0 >= MARGIN_U, since the
 * reference's float chain may leave those draws weights of rounding, ~1e-15, that a u0 below them would pick). A draw inside the run below the top
 * draw lies below s (s is at or after the run's end), outside the served group. So the run is one merged entry
 * with exact sums and the strict bound: its inside is > psi at its end (W->run_low just above it), and a draft
 * inside splits it into sub-runs (row_gather) each with the same strict bound.
 *
 * Rounding: in float64 Q_i is a running sum (fl is monotone) and psi non-increasing along the run, so a point
 * inside may EQUAL psi at the run's end, where the q after it is lost to rounding. The reference's first argmin (m*,
 * s) then sits on that point, its group holds p = 0 positions of q ~ 0, and its slots differ from the exact rule's
 * (both give the law p and alpha*, tests/optimal/test_filtered_targets.py, p_zero_tiny_q: on one instance a tuple's
 * acceptance 0.27 against 0.13). So the strict bound is taken only where the run's LAST token (by id, as the
 * reference orders ties) has q_last >= TINY_Q 2^(n-1) Q_end (Q_end = the run's q mass; W->inf_ok, one backward scan
 * of the row's buckets, which stops at once where the run fills the row). Then for every prefix i inside, the
 * running sums (one add a step, monotone) give Q_end >= Q_i + q_last (1 - u), u = 2^-53: in the head form (psi =
 * -Q^n, P = 0 along the run; Q_end <= 1/2) Q_end^n exceeds Q_i^n by a relative >= n (q_last / Q_end - u), above the
 * power's rounding (~n u) once q_last / Q_end > 3u = 3.3e-16; in the suffix form (1 - (1 - Qbar)^n - Pbar, the
 * suffix sums one add a step too) the gap is >= n 2^(1-n) (q_last - 2u) against ~(2n + 6) u of rounding, which
 * needs q_last > ~3 2^(n-1) u: TINY_Q = 1e-13 ~ 900 u leaves a margin of 100 or more. A prefix inside in the head
 * form while the end is in the suffix form (Q_i <= 1/2 < Q_end) compares sums of two scans (each off by up to ~V u):
 * taken only where Q_end - 1/2 >= TINY_MIX 2^(n-1) V, whose psi gap n 2^(1-n) (Q_end - 1/2) exceeds that. So psi
 * at the run's end is strictly the least along it in floats too. Elsewhere (large n, tiny last q) the run keeps the
 * interior bound (its buckets sorted where needed, as before).
 * A bucket of one finite ratio value (exact ties) would take the same strict bound only where its tokens' ratios
 * are bitwise equal, which the buckets do not know without reading them; left out. */
static int inf_run(const struct work *W, int64_t r) {
    return W->inf_ok && W->run_first[r] == 0 && W->run_last[r] == 0 && W->run_p[r] == 0.0 && W->run_q[r] > 0.0;
}

/* Steps 1-2 on one row: the buckets, their sums, psi at their boundaries and the bounds. Returns b*, the first
 * argmin of psi over the boundaries. */
static int64_t row_level(const void *p, const void *q, int is_double, int64_t V, const double *ip, const double *iq,
                         int n, const struct scheme *S, struct work *W) {
    const int64_t NB = S->NB;
    otlp_bucket_sums(p, q, is_double, 1, V, ip, iq, S->bits, S->top, NB, S->below, S->above, W->bucket, W->Pb, W->Qb,
                     W->hist);
    /* psi on the boundaries of the buckets kmin .. kmax that hold mass (an LM row's ratios span a third of the
     * octaves): the running sums there are the whole row's (the others add zeros), and psi is exactly 0 outside
     * (head form 0 - 0^n before kmin, tail form 1 - 1^n - 0 after kmax) */
    int64_t kmin = 0, kmax = NB - 1, m;
    while (kmin < NB - 1 && W->Pb[kmin] == 0.0 && W->Qb[kmin] == 0.0) kmin++;
    while (kmax > kmin && W->Pb[kmax] == 0.0 && W->Qb[kmax] == 0.0) kmax--;
    const int64_t L = kmax - kmin + 1;
    double *Pa = W->lwork; /* otlp_prefix's running sums of P from the bottom */
    otlp_prefix(W->Pb + kmin, W->Qb + kmin, W->ident, 1, L, n, W->lps, W->lqs, W->Qa + kmin, W->Sqb + kmin,
                W->psib + kmin, &m, Pa + kmin);
    const int64_t b_star = W->psib[kmin + m] < 0.0 ? kmin + m : 0; /* the first argmin; 0 where psi >= 0 */
    for (int64_t k = 0; k < kmin; k++) Pa[k] = W->Qa[k] = W->psib[k] = 0.0;
    for (int64_t k = kmax + 2; k <= NB; k++) {
        Pa[k] = Pa[kmax + 1];
        W->Qa[k] = W->Qa[kmax + 1];
        W->psib[k] = 0.0;
    }
    for (int64_t k = 0; k < NB; k++) {
        const double lo = S->LO[k], hi = S->HI[k], pb = W->Pb[k], qb = W->Qb[k];
        W->f[k] = interior_bound(Pa[k], W->Qa[k], pb, qb, lo, hi, n) - S->margin;
        W->low[k] = np_min(np_min(W->psib[k], W->psib[k + 1]), W->f[k]);
        W->inner[k] = np_min(W->f[k], W->psib[k + 1]);
    }
    W->inf_ok = 0; /* the top bucket holds only p = 0 < q tokens, its last by id not near rounding: strict (inf_run) */
    if (W->Pb[0] == 0.0 && W->Qb[0] > 0.0) {
        int64_t x = V - 1;
        while (x > 0 && W->bucket[x] != 0) x--;
        const double qx = (is_double ? ((const double *)q)[x] : (double)((const float *)q)[x]) * iq[0];
        const double scale = ldexp(1.0, n - 1), Qe = W->Qb[0];
        W->inf_ok = W->bucket[x] == 0 && qx >= TINY_Q * scale * Qe && (Qe <= 0.5 || Qe - 0.5 >= TINY_MIX * scale * V);
    }
    if (W->inf_ok)
        W->f[0] = nextafter(W->psib[1], INFINITY);
    return b_star;
}

/* Step 3: device_buckets.select for the drafts' buckets and the residual's uniform u1, into W->sel. With `bound`
 * (window_bound), an inner group's s candidates are the buckets before the top draw's whose bound reaches the least
 * psi at a boundary up to it (s, the first argmin over [0, top], is at or below it), not psi at the draw's bucket;
 * and the drafts' buckets are not sorted (row_run marks them partial: row_gather). The certificate decides either
 * way; the selection only makes it likely to pass. */
static void row_select(const struct work *W, int64_t NB, int64_t b_star, const int64_t *w, int n, double u1,
                       int bound, uint8_t *sel) {
    const double *psi = W->psib, *f = W->f;
    double best = psi[0];
    for (int64_t i = 1; i <= NB; i++) best = np_min(best, psi[i]);
    int64_t m_lo = NB, m_hi = 0;
    double lowest = INFINITY;
    for (int64_t k = 0; k < NB; k++) {
        sel[k] = f[k] <= best;
        if (sel[k]) {
            m_lo = k < m_lo ? k : m_lo;
            m_hi = k + 1 > m_hi ? k + 1 : m_hi;
            lowest = np_min(lowest, f[k]);
        }
    }
    m_lo = b_star < m_lo ? b_star : m_lo;
    m_hi = b_star > m_hi ? b_star : m_hi;
    lowest = np_min(best, lowest);
    const double keep = 1.0 - u1, tau_lo = lowest * keep, tau_hi = best * keep;
    int64_t last = 0;
    for (int64_t i = 0; i <= NB; i++) last = psi[i] <= tau_lo ? i : last;
    for (int64_t k = last; k < NB; k++) sel[k] |= W->low[k] <= tau_hi;
    int64_t d = 0;
    for (int j = 0; j < n; j++) d = W->bucket[w[j]] > d ? W->bucket[w[j]] : d;
    double psi_d = psi[d];
    for (int64_t i = 0; bound && i < d; i++) psi_d = np_min(psi_d, psi[i]);
    double after = INFINITY;
    for (int64_t i = d + 1; i <= NB; i++) after = np_min(after, psi[i]);
    if (d < m_lo)
        for (int64_t k = 0; k < d; k++) sel[k] |= f[k] <= psi_d;
    if (m_hi <= d)
        for (int64_t k = d + 1; k < NB; k++) sel[k] |= f[k] <= after;
    for (int j = 0; j < n && !bound; j++) sel[W->bucket[w[j]]] = 1;
    if (!bound) return;
    /* the group's other end: inner, e (the first prefix after the top draw below psi_s, psi_s in [s_lo, psi_d]) lies
     * before the first boundary after d at or below s_lo, in a bucket whose inside may fall below psi_d; outer, s (the
     * last prefix up to the top draw at or below psi_e, psi_e in [e_lo, after]) lies at or after the last boundary
     * up to d at or below e_lo, in a bucket whose inside may reach `after` */
    if (d < m_lo) {
        double s_lo = psi_d;
        for (int64_t k = 0; k < d; k++) s_lo = f[k] <= psi_d ? np_min(s_lo, f[k]) : s_lo;
        for (int64_t k = d + 1; k < NB && !(psi[k] < s_lo); k++) sel[k] |= W->low[k] < psi_d;
    }
    if (m_hi <= d) {
        double e_lo = after;
        for (int64_t k = d + 1; k < NB; k++) e_lo = f[k] <= after ? np_min(e_lo, f[k]) : e_lo;
        int64_t i_s = 0;
        for (int64_t i = 0; i <= d; i++) i_s = psi[i] <= e_lo ? i : i_s;
        for (int64_t k = i_s; k < d; k++) sel[k] |= W->low[k] <= after;
    }
    int64_t first = 0; /* the row's first position (s = 0 reads it), a token; after a run of p = 0 < q (inf_run),
                        * which s never lies inside, the first position after it (s = the run's end reads it) */
    if (W->inf_ok) first = 1;
    while (first < NB - 1 && W->Pb[first] == 0.0 && W->Qb[first] == 0.0) first++;
    sel[first] = 1;
}

/* The column of token id x among the gathered tokens W->F [T] (increasing). */
static int64_t column_of(const struct work *W, int64_t T, int64_t x) {
    int64_t lo = 0, hi = T;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (W->F[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Step 4's gather with the partial buckets (W->part and not W->sel: the drafts' buckets, not sorted): the tokens of
 * the selected and the partial buckets (otlp_gather_selected: a branch-free pass), then the partial buckets' tokens
 * other than the drafts only added into the sums of their sub-runs (W->parts; a token t lies after a draw d in the
 * ratio order where key_d > key_t, or key_d = key_t and d < t) and the rest kept in W->F, Pg, Qg in token order.
 * Returns their number T. */
static int64_t row_gather(struct work *W, int64_t NB, const void *p, const void *q, int is_double, int64_t V,
                          const double *ip, const double *iq, const int64_t *w, int n) {
    uint8_t *code = W->code; /* 0 skipped, 1 selected, 2 + i partial (parts[i]) */
    for (int64_t k = 0; k < NB; k++) code[k] = W->sel[k];
    struct part *parts = W->parts;
    int np = 0;
    for (int j = 0; j < n; j++) {
        const int64_t k = W->bucket[w[j]];
        if (W->sel[k] || !W->part[k]) continue;
        if (!code[k]) {
            parts[np].k = k;
            parts[np].m = 0;
            code[k] = (uint8_t)(2 + np++);
        }
        struct part *P = parts + code[k] - 2;
        const double pw = (is_double ? ((const double *)p)[w[j]] : (double)((const float *)p)[w[j]]) * ip[0];
        const double qw = (is_double ? ((const double *)q)[w[j]] : (double)((const float *)q)[w[j]]) * iq[0];
        const double r = qw / pw, key = r == r ? r : -1.0; /* (the gather's products: otlp.core.psi.ratio_keys) */
        int64_t at = 0, dup = 0;
        for (; at < P->m; at++) {
            if ((dup = P->id[at] == w[j])) break;
            if (P->key[at] < key || (P->key[at] == key && P->id[at] > w[j])) break;
        }
        if (dup) continue;
        for (int64_t v = P->m; v > at; v--) P->id[v] = P->id[v - 1], P->key[v] = P->key[v - 1];
        P->id[at] = w[j];
        P->key[at] = key;
        P->m++;
    }
    for (int i = 0; i < np; i++)
        for (int64_t v = 0; v <= parts[i].m; v++) parts[i].p[v] = parts[i].q[v] = 0.0, parts[i].cnt[v] = 0;
    W->np = np;
    for (int64_t k = 0; k < NB; k++) W->gather[k] = code[k] != 0;
    /* a partial top bucket of p = 0 < q tokens (inf_run) is not gathered: its drafts enter first, by id, the rest one
     * sub-run after them (its sums: the bucket's less the drafts'). Any order of the run's tokens serves: along it
     * psi falls strictly, none of the rule's answers lies inside it, and a draft in it only needs a position below
     * the run's end (below s, or the top draw's: the row rejects) */
    const int inf = code[0] >= 2 && W->inf_ok;
    W->gather[0] &= !inf;
    const int64_t all = otlp_gather_selected(p, q, is_double, 1, V, ip, iq, W->bucket, W->gather, NB, V, W->F, W->Pg,
                                             W->Qg);
    for (int64_t t = 0; t < all; t++) { /* (vectorised) */
        const double r = W->Qg[t] / W->Pg[t];
        W->key[t] = r == r ? r : -1.0;
    }
    /* without a branch on a token's kind (selected and partial tokens interleave at random): the kept tokens (a
     * selected bucket's, or a draft: found by bisection in F) flagged (W->order) and the partial buckets' others
     * listed (W->tmp), each with its sub-run (W->slot: part i's sub-run v at i (MM + 1) + v, v the number of the
     * part's drafts before it in the ratio order, its drafts padded to the most any part holds with entries before
     * no token, key -inf and id -1); those added into their sub-runs in SPLIT_WAYS interleaved copies (token l of
     * the list into copy l mod SPLIT_WAYS: consecutive tokens of one sub-run, the common case on a close draft, do
     * not wait on each other's add), merged pairwise in a fixed order (the same sums whatever the thread); then the
     * kept ones compacted in token order */
    int64_t L = 0, MM = 0, *list = W->tmp, *kept = W->order, *slot = W->slot;
    for (int64_t t = 0; t < all; t++) kept[t] = code[W->bucket[W->F[t]]] == 1;
    for (int j = 0; j < n; j++) {
        const int64_t c = column_of(W, all, w[j]);
        if (c < all && W->F[c] == w[j]) kept[c] = 1;
    }
    for (int64_t t = 0; t < all; t++) {
        list[L] = t;
        L += !kept[t];
    }
    for (int i = 0; i < np; i++) MM = parts[i].m > MM ? parts[i].m : MM;
    for (int i = 0; i < np; i++)
        for (int64_t a = parts[i].m; a < MM; a++) parts[i].id[a] = -1, parts[i].key[a] = -INFINITY;
    const int64_t stride = MM + 1, used = np * stride;
    for (int64_t l = 0; l < L; l++) {
        const int64_t t = list[l], x = W->F[t], i = code[W->bucket[x]] - 2;
        const struct part *D = parts + i;
        const double key = W->key[t];
        int64_t v = 0;
        for (int64_t a = 0; a < MM; a++) /* (no branch: the comparisons fall either way at random) */
            v += (int64_t)((D->key[a] > key) | ((D->key[a] == key) & (D->id[a] < x)));
        slot[l] = i * stride + v;
    }
    double *acc_p = W->acc, *acc_q = W->acc + SPLIT_WAYS * SPLIT_SLOTS;
    int64_t *acc_n = W->acc_n;
    for (int c = 0; c < SPLIT_WAYS; c++)
        for (int64_t k = 0; k < used; k++) {
            acc_p[c * SPLIT_SLOTS + k] = acc_q[c * SPLIT_SLOTS + k] = 0.0;
            acc_n[c * SPLIT_SLOTS + k] = 0;
        }
    for (int64_t l = 0; l < L; l++) {
        const int64_t at = (l % SPLIT_WAYS) * SPLIT_SLOTS + slot[l], t = list[l];
        acc_p[at] += W->Pg[t];
        acc_q[at] += W->Qg[t];
        acc_n[at]++;
    }
    for (int i = 0; i < np; i++)
        for (int64_t v = 0; v <= parts[i].m; v++) {
            const int64_t k = i * stride + v;
#define MERGE(a) (((a)[k] + (a)[SPLIT_SLOTS + k]) + ((a)[2 * SPLIT_SLOTS + k] + (a)[3 * SPLIT_SLOTS + k]))
            parts[i].p[v] = MERGE(acc_p);
            parts[i].q[v] = MERGE(acc_q);
            parts[i].cnt[v] = MERGE(acc_n);
#undef MERGE
        }
    int64_t T = 0;
    for (int64_t t = 0; t < all; t++) {
        W->F[T] = W->F[t];
        W->Pg[T] = W->Pg[t];
        W->Qg[T] = W->Qg[t];
        T += kept[t];
    }
    if (inf) {
        struct part *D = parts + code[0] - 2;
        int64_t count = 0;
        for (int64_t x = 0; x < V; x++) count += W->bucket[x] == 0; /* (vectorised) */
        double q_rest = W->Qb[0];
        for (int64_t a = 0; a < D->m; a++) { /* (ids increasing: equal keys) merged into F's token order */
            const int64_t x = D->id[a];
            const double qx = (is_double ? ((const double *)q)[x] : (double)((const float *)q)[x]) * iq[0];
            int64_t at = T;
            for (; at > 0 && W->F[at - 1] > x; at--) {
                W->F[at] = W->F[at - 1];
                W->Pg[at] = W->Pg[at - 1];
                W->Qg[at] = W->Qg[at - 1];
            }
            W->F[at] = x;
            W->Pg[at] = 0.0;
            W->Qg[at] = qx;
            T++;
            q_rest -= qx;
        }
        for (int64_t v = 0; v <= D->m; v++) D->p[v] = D->q[v] = 0.0, D->cnt[v] = 0;
        D->cnt[D->m] = count - D->m;
        D->q[D->m] = q_rest;
    }
    return T;
}

/* Step 4: the compressed instance of the row's T gathered tokens (W->F, Pg, Qg) and its runs, in W->order (columns:
 * the tokens 0 .. T - 1, then the runs T .. T + R - 1, R returned; *K_out entries in all) with W->Pg, W->Qg extended
 * by the runs' sums. A partial bucket (W->part and not W->sel: its tokens gathered, not sorted) enters as its drafted
 * tokens with, between them, one run of the bucket's other tokens each (W->part_run; its bound: the bucket's f), so
 * that the drafts' positions and the prefix sums at them are exact with no sort. */
static int64_t row_instance(struct work *W, int64_t NB, int64_t T, int bits, int64_t *K_out) {
    const uint8_t *sel = W->sel, *part = W->part;
    int64_t *start = W->start;
    memset(start, 0, sizeof(int64_t) * (size_t)(NB + 1));
    for (int64_t t = 0; t < T; t++) { /* (vectorised) */
        const double r = W->Qg[t] / W->Pg[t];
        W->key[t] = r == r ? r : -1.0; /* otlp.core.psi.ratio_keys */
    }
    for (int64_t t = 0; t < T; t++) start[W->bucket[W->F[t]] + 1]++;
#define PARTIAL(k) (part[k] && !sel[k])
    struct part *parts = W->parts;
    for (int i = 0; i < W->np; i++) /* the partial buckets' drafts: their columns */
        for (int64_t v = 0; v < parts[i].m; v++) parts[i].col[v] = column_of(W, T, parts[i].id[v]);
    int64_t R = 0, at = 0;
    for (int64_t k = 0; k < NB; k++) { /* each bucket's place in the order: its tokens, or its run's one entry */
        const int64_t count = start[k + 1];
        start[k] = at;
        if (sel[k]) {
            at += count;
            continue;
        }
        if (PARTIAL(k)) {
            int i = 0;
            while (parts[i].k != k) i++;
            const struct part *P = parts + i; /* (every partial bucket holds a draft: row_gather) */
            for (int64_t v = 0; v <= P->m; v++) {
                if (P->cnt[v]) {
                    W->run_first[R] = W->run_last[R] = k;
                    W->run_p[R] = P->p[v];
                    W->run_q[R] = P->q[v];
                    W->run_low[R] = W->f[k];
                    W->part_run[R] = 1;
                    W->order[at++] = T + R++;
                }
                if (v < P->m) W->order[at++] = P->col[v];
            }
            continue;
        }
        const double bound = k + 1 < NB && !sel[k + 1] && !PARTIAL(k + 1) ? W->inner[k] : W->f[k];
        if (k == 0 || sel[k - 1] || PARTIAL(k - 1)) { /* a new run */
            W->part_run[R] = 0;
            W->run_first[R] = k;
            W->run_p[R] = W->Pb[k];
            W->run_q[R] = W->Qb[k];
            W->run_low[R] = bound;
            W->order[at++] = T + R;
            R++;
        } else {
            W->run_p[R - 1] += W->Pb[k];
            W->run_q[R - 1] += W->Qb[k];
            W->run_low[R - 1] = np_min(W->run_low[R - 1], bound);
        }
        W->run_last[R - 1] = k;
    }
    start[NB] = at;
    int64_t *fill = W->tmp; /* where each selected bucket's next token goes */
    for (int64_t k = 0; k < NB; k++) fill[k] = start[k];
    for (int64_t t = 0; t < T; t++) /* token order within a bucket */
        if (sel[W->bucket[W->F[t]]]) W->order[fill[W->bucket[W->F[t]]]++] = t;
#undef PARTIAL
    for (int64_t k = 0; k < NB; k++)
        if (sel[k] && start[k + 1] - start[k] > 1)
            sort_bucket(W->order + start[k], start[k + 1] - start[k], W->key, W->tmp, W->count, 52 - bits,
                        k == 0 || k == NB - 1);
    for (int64_t r = 0; r < R; r++) {
        W->Pg[T + r] = W->run_p[r];
        W->Qg[T + r] = W->run_q[r];
    }
    *K_out = at;
    return R;
}

/* The bounded window (issue 41; otlp/optimal/sortfree.py is the reference, design note sortfree-rule.md section 3).
 * A merged run may lie inside the served group's positions s .. top when the bounds below decide the slot: the
 * hazard of the chain over a segment of merged entries, from the token A before it to the token Z after it (both
 * exact, ratios r_A <= r_Z), is the integral over the ratio of G = d log F / dr along the prefix sums it passes,
 * F(H, psi, r) the largest root y in [0, Qe - H] of (H + y)^n - H^n - r y = psi - psi_e (chains.slot_mass). Cut
 * [r_A, r_Z] at the ratio edges of the segment's nonempty buckets (rho_0 = r_A, rho_i = max(E_b, r_A) with E_b = 1 /
 * HI_b the least ratio bucket b holds): over [rho_i, rho_i+1] every token passed from piece i has its ratio in
 * [rho_i, r], so the point lies between the fixed points (H_i, psi_i) and (H_i + q_i, psi_i + rho_i q_i - ((H_i +
 * q_i)^n - H_i^n)), and along a fixed point the integral is exact:
 *
 *     sum over piece i  in  [ log F(H_i, psi_i, rho_i+1) / F(H_i, psi_i, rho_i),  the same at the second point ],
 *
 * four roots a piece, no token of the segment read. The tokens' own hazards are the chain's (otlp_window_chain on
 * the compressed instance, read at the segments' ends and subtracted there). The piece hazards of chains._pieces
 * then get intervals, the slots' running weights too (sortfree._Group.certify's interval arithmetic), and the slot
 * is certified where u0 times the total lies MARGIN_U inside one slot's ends. */
#define MARGIN_U 1e-9  /* sortfree.MARGIN */
#define TOL_REL 1e-9   /* sortfree.TOL_REL, TOL_ABS: every hazard interval widened */
#define TOL_ABS 1e-11
#define POINT_EPS 1e-13 /* the two fixed points moved apart in psi (the buckets' sums add in another order) */
#define ROOT_STEPS 64   /* Newton steps at most for the bounds' roots (each stops once it no longer moves) */

/* The chain's ratio at compressed position j (chains.group_terms): 1 / (q / p), 0 where q = 0; an outer group's
 * first position: max(p - (psi_e - psi_s), 0) / q (GR Thm 6.2's vertex). */
static double chain_ratio(const struct work *W, int64_t j, int64_t s, int outer, double psi_gap) {
    const double p = W->ps[j], q = W->qs[j];
    if (!(q > 0)) return 0.0;
    return j == s && outer ? np_max(p - psi_gap, 0.0) / q : 1.0 / (q / p);
}

/* The slot of u0 on the compressed instance of K entries (T tokens) whose served group (s, e] holds merged runs in
 * s + 1 .. top - 1, from the bounds above. Returns 1 with *index_out (the slot, -1 for the residual) where they
 * decide it, 0 where they do not (the window's runs then marked in W->bad_run), -1 without memory. */
static int window_bound(struct work *W, const struct scheme *S, int64_t T, int64_t K, int64_t m, int64_t s,
                        int64_t e, int64_t top, const int64_t *pos, const int64_t *w, int n, double u0, int64_t steps,
                        int64_t *index_out) {
    const int64_t *order = W->order, NB = S->NB;
    const double *psi = W->psi;
    const double psi_e = psi[e], Qe = W->pq[e], psi_gap = psi_e - psi[s];
    const int outer = !(top < m);
    int64_t G = 0, I = 0; /* segments, pieces */
    int fail = 0;
    for (int64_t j = s + 1; j < top && !fail; j++) { /* the segments: merged entries a + 1 .. z - 1 */
        if (order[j] < T) continue;
        int64_t z = j;
        while (order[z] >= T) z++; /* (top is a token) */
        const int64_t a = j - 1;
        const double rA = chain_ratio(W, a, s, outer, psi_gap), rZ = chain_ratio(W, z, s, outer, psi_gap);
        /* a merged entry's ratio equal to Z's would make the chain take Z's next root as a tied run's */
        fail |= !(rZ >= rA) || (n >= 3 && chain_ratio(W, z - 1, s, outer, psi_gap) == rZ);
        W->seg_a[G] = a;
        W->seg_z[G] = z;
        W->seg_piece[G++] = I;
        double H = W->pq[a + 1], at = psi[a + 1]; /* the exclusive sums at the segment's first entry */
        for (int64_t i = a + 1; i < z && !fail; i++) {
            const int64_t r = order[i] - T;
            for (int64_t b = W->run_first[r]; b <= W->run_last[r] && !fail; b++) {
                /* a whole bucket's sums, or a partial bucket's sub-run (row_instance) */
                const int sub = W->part_run[r];
                const double qb = sub ? W->run_q[r] : W->Qb[b], pb = sub ? W->run_p[r] : W->Pb[b];
                if (qb == 0.0 && pb == 0.0) continue;
                const double rho = I == W->seg_piece[G - 1] ? rA : np_max(1.0 / S->HI[b], rA);
                fail |= b == NB - 1 || !(rho <= rZ); /* (the bottom bucket: q = 0 tokens, whose ratio reads 0) */
                double *piece = W->ry + 4 * I++; /* the piece's start, mass and least ratio, solved below */
                piece[0] = H;
                piece[1] = at;
                piece[2] = qb;
                piece[3] = rho;
                const double next = H + qb;
                at = at + pb - (int_power(next, n) - int_power(H, n));
                H = next;
            }
        }
        if (I == W->seg_piece[G - 1]) { /* runs of empty buckets only: the one point, its integral exact */
            double *piece = W->ry + 4 * I++;
            piece[0] = H;
            piece[1] = at;
            piece[2] = 0.0;
            piece[3] = rA;
        }
        j = z;
    }
    W->seg_piece[G] = I;
    if (fail) goto refuse;
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = W->seg_piece[g]; i < W->seg_piece[g + 1]; i++) {
            const double H1 = W->ry[4 * i], at = W->ry[4 * i + 1], qb = W->ry[4 * i + 2], rho0 = W->ry[4 * i + 3];
            const double rho1 = i + 1 < W->seg_piece[g + 1] ? W->ry[4 * (i + 1) + 3]
                                                            : chain_ratio(W, W->seg_z[g], s, outer, psi_gap);
            const double H2 = H1 + qb, at2 = at + rho0 * qb - (int_power(H2, n) - int_power(H1, n));
            const double Hs[4] = {H1, H1, H2, H2}, gaps[4] = {at + POINT_EPS, at + POINT_EPS, at2 - POINT_EPS,
                                                               at2 - POINT_EPS};
            const double rs[4] = {rho1, rho0, rho1, rho0};
            for (int k = 0; k < 4; k++) {
                W->rH[4 * i + k] = Hs[k];
                W->rL[4 * i + k] = np_max(Qe - Hs[k], 0.0);
                W->rr[4 * i + k] = rs[k];
                W->rg[4 * i + k] = gaps[k] - psi_e;
            }
        }
    otlp_slot_roots(W->rH, W->rL, W->rr, W->rg, 4 * I, n, ROOT_STEPS, W->ry);
    for (int64_t g = 0; g < G; g++) {
        double lo = 0.0, hi = 0.0;
        for (int64_t i = W->seg_piece[g]; i < W->seg_piece[g + 1]; i++) {
            const double *y = W->ry + 4 * i;
            double l = log(y[0]) - log(y[1]), h = log(y[2]) - log(y[3]);
            l = isfinite(l) ? np_max(l, 0.0) : 0.0;
            h = h != h ? INFINITY : np_max(h, l);
            lo += l;
            hi += h;
        }
        W->seg_lo[g] = lo;
        W->seg_hi[g] = hi;
    }
    /* the chain's running hazards at the draws and at the segments' ends */
    for (int j = 0; j < n; j++) W->posl[j] = pos[j];
    for (int64_t g = 0; g < G; g++) {
        W->posl[n + 2 * g] = W->seg_a[g];
        W->posl[n + 2 * g + 1] = W->seg_z[g];
    }
    double beta;
    if (otlp_window_chain(W->ps, W->qs, W->pq, W->sq, psi, 1, K, &m, &s, &e, &top, W->posl, n + 2 * G, n, steps,
                          W->cuml, W->cumcl, &beta))
        return -1;
    /* the piece hazards (chains._pieces: the group's draws by position, decreasing, slot order on ties) */
    int64_t key[MAX_N];
    int by[MAX_N], c = 0;
    for (int k = 0; k < n; k++) {
        key[k] = pos[k] >= s ? pos[k] : -1;
        c += pos[k] >= s;
        int i = k;
        while (i > 0 && key[by[i - 1]] < key[k]) {
            by[i] = by[i - 1];
            i--;
        }
        by[i] = k;
    }
    double h_lo[MAX_N], h_hi[MAX_N];
    for (int k = 0; k < n; k++) {
        h_lo[k] = h_hi[k] = 0.0;
        if (k >= c) continue;
        const int more = k + 1 < c;
        const int64_t top_k = pos[by[k]], low_k = more ? pos[by[k + 1]] : s;
        double ex = W->cuml[by[k]] - (more ? W->cuml[by[k + 1]] : 0.0);
        double ex_c = W->cumcl[by[k]] - (more ? W->cumcl[by[k + 1]] : 0.0), lo = 0.0, hi = 0.0;
        for (int64_t g = 0; g < G; g++)
            if (W->seg_a[g] >= low_k && W->seg_z[g] <= top_k) {
                ex -= W->cuml[n + 2 * g + 1] - W->cuml[n + 2 * g];
                ex_c -= W->cumcl[n + 2 * g + 1] - W->cumcl[n + 2 * g];
                lo += W->seg_lo[g];
                hi += W->seg_hi[g];
            }
        lo += ex;
        hi += ex;
        if (ex_c > 0.5) lo = hi = INFINITY;
        h_lo[k] = np_max(lo - TOL_ABS - TOL_REL * fabs(lo), 0.0);
        h_hi[k] = np_max(hi + TOL_ABS + TOL_REL * fabs(hi), 0.0);
    }
    /* piece k fires with reach (1 - e^(-k h_k)), shared by its k draws; the reach falls by e^(-k h_k) */
    double per_lo[MAX_N], per_hi[MAX_N], reach_lo = 0.0, reach_hi = 0.0;
    for (int k = 0; k < n; k++) per_lo[k] = per_hi[k] = 0.0;
    for (int k = 1; k <= n; k++) {
        const double f_lo = exp(reach_lo) * -expm1((double)(-k) * h_lo[k - 1]);
        const double f_hi = exp(reach_hi) * -expm1((double)(-k) * h_hi[k - 1]);
        for (int i = 0; i < k; i++) {
            per_lo[i] += f_lo / k;
            per_hi[i] += f_hi / k;
        }
        reach_lo -= k * h_hi[k - 1];
        reach_hi -= k * h_lo[k - 1];
    }
    const double left_lo = exp(reach_lo), left_hi = exp(reach_hi), share = beta / (c > 1 ? c : 1);
    double slot_lo[MAX_N], slot_hi[MAX_N], wlo[MAX_N + 1], whi[MAX_N + 1];
    for (int k = 0; k < n; k++) {
        slot_lo[by[k]] = k < c ? per_lo[k] + left_lo * share : 0.0;
        slot_hi[by[k]] = k < c ? per_hi[k] + left_hi * share : 0.0;
    }
    double sum_lo = 0.0, sum_hi = 0.0;
    for (int i = 0; i < n; i++) { /* a repeated token's draws summed on its first slot */
        int first = 1;
        double a_lo = 0.0, a_hi = 0.0;
        for (int j = 0; j < n; j++) {
            if (w[j] != w[i]) continue;
            first &= j >= i;
            a_lo += slot_lo[j];
            a_hi += slot_hi[j];
        }
        wlo[i] = first ? a_lo : 0.0;
        whi[i] = first ? a_hi : 0.0;
    }
    const int residual = -psi[m] > 0; /* 1 - alpha* > 0: the reject slot counts (chains.sample) */
    wlo[n] = residual ? left_lo * (1.0 - beta) : 0.0;
    whi[n] = residual ? left_hi * (1.0 - beta) : 0.0;
    for (int i = 0; i <= n; i++) {
        sum_lo += wlo[i];
        sum_hi += whi[i];
    }
    const double t_lo = residual ? 1.0 : np_max(1.0 - left_hi * (1.0 - beta), sum_lo);
    const double t_hi = residual ? 1.0 : np_min(1.0 - left_lo * (1.0 - beta), sum_hi);
    const double x_lo = u0 * t_lo - MARGIN_U, x_hi = u0 * t_hi + MARGIN_U;
    double head_lo = 0.0, head_hi = 0.0, prev_hi = -INFINITY;
    for (int j = 0; j <= n; j++) {
        head_lo += wlo[j];
        head_hi += whi[j];
        const double cw_lo = np_max(head_lo, t_lo - (sum_hi - head_hi)), cw_hi = np_min(head_hi, t_hi - (sum_lo - head_lo));
        if ((j == 0 || prev_hi < x_lo) && cw_lo > x_hi && whi[j] > 0) {
            *index_out = j < n ? j : -1;
            return 1;
        }
        prev_hi = cw_hi;
    }
refuse:
    for (int64_t j = s + 1; j < top; j++)
        if (order[j] >= T) W->bad_run[order[j] - T] = 1;
    return 0;
}

/* Step 5 on the compressed instance of K = T + R entries: the rule, its draw and the certificate. Returns 1 when
 * certified (token and slot in *token, *slot), else 0 with the failing runs marked in W->bad_run. -1: no memory. */
static int row_rule(struct work *W, const struct scheme *S, int bound, int64_t T, int64_t R, int64_t K,
                    const int64_t *w, const double *u, int n, int64_t steps, int64_t *token, int64_t *slot) {
    int64_t w2[MAX_N], pos[MAX_N], m, top, s, e, index, drawn_col;
    double cum[MAX_N], cum_c[MAX_N], accept[MAX_N], beta, reject;
    for (int j = 0; j < n; j++) w2[j] = column_of(W, T, w[j]); /* the drafts' columns */
    otlp_prefix(W->Pg, W->Qg, W->order, 1, K, n, W->ps, W->qs, W->pq, W->sq, W->psi, &m, W->pwork);
    otlp_served_group(W->psi, W->order, w2, &m, 1, K, n, pos, &top, &s, &e);
    /* the certificate (device_buckets' _attempt), by compressed position j: first what needs no chain (m*, the served
     * group's ends, the chain's positions), so that a failing attempt skips the chain, the costly part of close
     * drafts' rows; then the residual draw's condition */
    const double *psi = W->psi;
    const double psi_star = psi[m], psi_s = psi[s], psi_e = psi[e];
    const int inner = top < m;
    memset(W->bad_run, 0, (size_t)(R > 0 ? R : 1));
    for (int64_t j = 0; j < K; j++) { /* a partial bucket's sub-run: its bound from its own sums and ratio range */
        const int64_t col = W->order[j], r = col - T;
        if (col < T || !W->part_run[r]) continue;
        const int64_t k = W->run_first[r];
        double lo = S->LO[k], hi = S->HI[k]; /* narrowed to the keys of the drafted tokens on either side */
        if (j > 0 && W->order[j - 1] < T && W->bucket[W->F[W->order[j - 1]]] == k)
            hi = np_min(hi, W->key[W->order[j - 1]]);
        if (j + 1 < K && W->order[j + 1] < T && W->bucket[W->F[W->order[j + 1]]] == k)
            lo = np_max(lo, W->key[W->order[j + 1]]);
        W->run_low[r] = hi > lo ? interior_bound(psi[j] + int_power(W->pq[j], n), W->pq[j], W->run_p[r],
                                                 W->run_q[r], lo, hi, n) - S->margin
                                : np_min(psi[j], psi[j + 1]) - S->margin; /* one ratio: psi concave along it */
    }
    for (int64_t j = 0; j < K; j++) /* a run of p = 0 < q: inside strictly above psi at its end (inf_run) */
        if (W->order[j] >= T && inf_run(W, W->order[j] - T)) W->run_low[W->order[j] - T] = nextafter(psi[j + 1], INFINITY);
    /* the top draw of p = 0 < q: every draw has p = 0 (all precede it), the row rejects (inf_run); no group to read */
    const int64_t top_col = W->order[top];
    /* (u0 >= MARGIN_U: the reference's chain gives the p = 0 draws weights of rounding, which a u0 below them picks) */
    const int dead = W->inf_ok && W->Pg[top_col] == 0.0 && W->Qg[top_col] > 0.0 && u[0] >= MARGIN_U;
    int ok = 1, window = 0;
#define BELOW(thr) (least < (thr))
#define AT_OR_BELOW(thr) (ends < (thr) || low <= (thr))
    for (int64_t j = 0; j < K; j++) {
        const int64_t col = W->order[j];
        if (col < T) continue; /* only a merged run can fail */
        const double low = W->run_low[col - T], ends = np_min(psi[j], psi[j + 1]), least = np_min(ends, low);
        int bad = j < m ? AT_OR_BELOW(psi_star) : BELOW(psi_star);
        if (dead) {
            if (bad) W->bad_run[col - T] = 1, ok = 0;
            continue;
        }
        const int inside = j > s && j < top; /* bounded (window_bound), unless the row takes the exact chain */
        bad |= j == s || (inside && !bound);
        if (inner) bad |= (AT_OR_BELOW(psi_s) && j < s) || (BELOW(psi_s) && (inside || (j > top && j < e)));
        else bad |= (AT_OR_BELOW(psi_e) && (inside || (j > top && j < e))) || (BELOW(psi_e) && j >= e);
        window |= inside;
        if (bad) {
            W->bad_run[col - T] = 1;
            ok = 0;
        }
    }
    if (!ok) return 0;
    if (dead) {
        index = -1;
    } else if (window) {
        const int got = window_bound(W, S, T, K, m, s, e, top, pos, w2, n, u[0], steps, &index);
        if (got <= 0) return got;
    } else {
        if (otlp_window_chain(W->ps, W->qs, W->pq, W->sq, W->psi, 1, K, &m, &s, &e, &top, pos, n, n, steps, cum,
                              cum_c, &beta))
            return -1;
        otlp_pieces(w2, pos, &s, cum, cum_c, &beta, 1, n, accept, &reject);
        otlp_sample(accept, &reject, w2, u, W->psi, W->order, &m, 1, K, n, &drawn_col, &index);
    }
    const double v = u[1] * np_max(-psi_star, 0.0);
    const int rejected = index < 0;
    int64_t M = 0;
    for (int64_t i = 0; i <= K; i++)
        if (psi[i] - psi_star <= v) M = i;
    for (int64_t j = M; rejected && j < K; j++) {
        const int64_t col = W->order[j];
        if (col < T) continue;
        const double low = W->run_low[col - T], ends = np_min(psi[j], psi[j + 1]);
        if ((ends - psi_star < v) || (low - psi_star <= v)) {
            W->bad_run[col - T] = 1;
            ok = 0;
        }
    }
#undef BELOW
#undef AT_OR_BELOW
    const int64_t drawn = W->order[M < K - 1 ? M : K - 1];
    if (rejected && drawn >= T) ok = 0; /* (a run at M fails above unless psi_M is exactly the threshold) */
    if (!ok) return 0;
    *token = rejected ? W->F[drawn] : w[index];
    *slot = index;
    return 1;
}

/* One call's arguments (otlp_bucket_rule's), shared by its threads, and the next row to take. */
struct call {
    const void *p, *q;
    int is_double, n, attempts, bound;
    int64_t V, ldp, ldq, steps, share; /* ldp, ldq: entries from one row of p, q to the next */
    const double *inv_p, *inv_q, *u;
    const int64_t *w;
    const uint8_t *forced;
    struct scheme S;
    int64_t *tokens, *index;
    int8_t *status;
    int64_t B;
    int64_t whole;        /* rows that may take every bucket here (their full order; take_whole) */
    int crowd;            /* > 0: a row with that many of crowded()'s sample gathered is left before it */
    _Atomic int64_t wholes; /* rows that took it, or asked to */
    _Atomic int64_t next; /* rows are taken one at a time, by whichever thread is free */
    _Atomic int failed;   /* some thread's work arrays could not be allocated */
};

/* Whether row b may take its full order here: the first C->whole rows of a call that ask may (with a team, any
 * thread's; which rows they are changes no answer, only whether the caller's full sort draws it). */
static int take_whole(struct call *C) { return C->wholes++ < C->whole; }

/* Row b's full order here (status attempts + 1): every bucket sorted and no run merged, so its compressed instance
 * is the full order and the certificate, with no run to fail, holds. Returns 0, or -1 without memory. */
static int row_whole(struct call *C, struct work *W, int64_t b, const char *pb, const char *qb, const int64_t *wb,
                     const double *ub) {
    const int64_t NB = C->S.NB;
    memset(W->sel, 1, (size_t)NB);
    W->np = 0;
    const int64_t T = otlp_gather_selected(pb, qb, C->is_double, 1, C->V, C->inv_p + b, C->inv_q + b, W->bucket,
                                           W->sel, NB, C->V, W->F, W->Pg, W->Qg);
    int64_t K;
    const int64_t R = row_instance(W, NB, T, C->S.bits, &K);
    const int got = row_rule(W, &C->S, C->bound, T, R, K, wb, ub, C->n, C->steps, C->tokens + b, C->index + b);
    if (got > 0) C->status[b] = (int8_t)(C->attempts + 1);
    return got < 0 ? -1 : 0;
}

/* Whether `of` or more of CROWDED_SAMPLE tokens spread evenly over the row lie in buckets its first attempt gathers
 * (selected, or a draft's): a draft within a few percent of its target puts nearly every ratio in the few buckets
 * about 1 that m*, the served group's ends and the drafts fall in, and gathering such a row, and sorting or splitting
 * its gathered tokens, cost it 2-9x a certified row's whole rule (V = 32k, sigma 0.01: 250 us a row left at status 0
 * after its gather, 600 us a row certified), where the caller's finer buckets about 1 (buckets.zoom) certify it in
 * 60-80 us. Token ids are not in ratio order, so the sample is a fair one. */
#define CROWDED_SAMPLE 192
#define CROWDED_V 8192 /* below it a row's gather is cheap either way */
static int crowded(const struct work *W, int64_t V, int of) {
    if (V < CROWDED_V) return 0;
    int64_t hit = 0;
    for (int64_t i = 0; i < CROWDED_SAMPLE; i++) {
        const int64_t k = W->bucket[(2 * i + 1) * V / (2 * CROWDED_SAMPLE)];
        hit += W->sel[k] | W->part[k];
    }
    return hit >= of;
}

/* Row b of a call, in the work arrays W. Returns 0, or -1 where the chain's arrays could not be allocated. */
static int row_run(struct call *C, struct work *W, int64_t b) {
    const int64_t V = C->V, NB = C->S.NB;
    const int n = C->n, attempts = C->attempts, is_double = C->is_double;
    const size_t size = is_double ? sizeof(double) : sizeof(float);
    const char *pb = (const char *)C->p + (size_t)(b * C->ldp) * size,
               *qb = (const char *)C->q + (size_t)(b * C->ldq) * size;
    int64_t wb[MAX_N]; /* the row's drafts, ids outside [0, V) (unchecked input) clamped into it: sampler.guard */
    for (int j = 0; j < n; j++) wb[j] = C->w[b * n + j] < 0 ? 0 : C->w[b * n + j] < V ? C->w[b * n + j] : V - 1;
    const double *ub = C->u + 2 * b;
    const int64_t b_star = row_level(pb, qb, is_double, V, C->inv_p + b, C->inv_q + b, n, &C->S, W);
    if (C->forced) memcpy(W->sel, C->forced + b * NB, (size_t)NB);
    else row_select(W, NB, b_star, wb, n, ub[1], C->bound, W->sel);
    W->np = 0;
    memset(W->part, 0, (size_t)NB); /* with bound: the drafts' buckets not selected are gathered, not sorted */
    for (int j = 0; j < n && C->bound; j++) W->part[W->bucket[wb[j]]] = 1;
    C->tokens[b] = C->index[b] = 0;
    C->status[b] = (int8_t)-attempts;
    if (C->crowd > 0 && crowded(W, V, C->crowd)) { /* left before its gather, for the caller's finer buckets */
        C->status[b] = (int8_t)(-attempts - 1);
        return 0;
    }
    for (int attempt = 1; attempt <= attempts; attempt++) {
        int64_t T = C->bound ? row_gather(W, NB, pb, qb, is_double, V, C->inv_p + b, C->inv_q + b, wb, n)
                             : otlp_gather_selected(pb, qb, is_double, 1, V, C->inv_p + b, C->inv_q + b, W->bucket,
                                                    W->sel, NB, V, W->F, W->Pg, W->Qg);
        if (attempt == 1) {
            int64_t chosen = 0;
            for (int64_t k = 0; k < NB; k++) chosen += W->sel[k];
            if ((T + chosen) * C->share > V) { /* hardly compresses: the full order at once, here or by the caller */
                C->status[b] = 0;
                return take_whole(C) ? row_whole(C, W, b, pb, qb, wb, ub) : 0;
            }
        }
        int64_t K;
        const int64_t R = row_instance(W, NB, T, C->S.bits, &K);
        const int got = row_rule(W, &C->S, C->bound, T, R, K, wb, ub, n, C->steps, C->tokens + b, C->index + b);
        if (got < 0) return -1;
        if (got) {
            C->status[b] = (int8_t)attempt;
            return 0;
        }
        for (int64_t r = 0; r < R; r++) /* the failing runs' buckets sorted too */
            if (W->bad_run[r])
                for (int64_t k = W->run_first[r]; k <= W->run_last[r]; k++) W->sel[k] = 1;
    }
    return take_whole(C) ? row_whole(C, W, b, pb, qb, wb, ub) : 0; /* every attempt failed: the full order */
}

#define MAX_THREADS 64

/* The default tuple rule and its draw on rows p, q [B, V] (float32, or float64 when is_double; row b at p + b ldp
 * and q + b ldq, ldp = ldq = V for contiguous rows) normalised by inv_p, inv_q [B], drafts w [B, n] and uniforms
 * u [B, 2], as buckets.verify_rows: tokens, index [B] and status [B], the attempt that certified the row
 * (1 .. attempts), attempts + 1 for a row that took its full order here (below), or 0 for a row whose compressed
 * instance would hold more than 1 / share of its tokens (not tried), or -attempts (neither needs the full sort), or
 * -(attempts + 1) (crowd).
 * crowd (> 0): a row of which crowded() finds that many of 192 tokens gathered is left before its first gather,
 * status -(attempts + 1).
 * whole: how many rows of the call may take their full order here instead of 0 or -attempts (every bucket sorted and
 * no run merged: sorted bucket by bucket, 1.07-1.24x the caller's full sort a row of a close draft, but no call of
 * its own). forced [B, NB] (or NULL): the
 * selection of the first attempt, instead of step 3's. The scheme: bits, top (buckets._top), NB, below, above and LO,
 * HI [NB] (buckets.Scheme; a run's key is not needed: step 4 places it by its bucket); margin:
 * buckets.BOUND_MARGIN; steps: the Newton steps of the chain's roots.
 *
 * threads > 1 (and B > 1): an OpenMP team of that many threads takes the rows one at a time, each thread with its own
 * work arrays (the rows are independent, so the results do not depend on which thread takes which). The team is the
 * OpenMP runtime's pool of the calling thread: where torch is loaded it shares libgomp with it (one copy per
 * process), so right after torch's own parallel work its waiting threads, still spinning, take rows at once, where a
 * thread of our own would have had to share a core with them. Built without OpenMP, the rows run one after the other
 * here. Returns the number of
 * threads that took part, or -1 where work arrays could not be allocated. */
int otlp_bucket_rule(const void *p, const void *q, int is_double, int64_t B, int64_t V, int64_t ldp, int64_t ldq,
                     const double *inv_p, const double *inv_q, const int64_t *w, const double *u, int n,
                     int64_t steps, int bits, int64_t top, int64_t NB, double below, double above, const double *LO,
                     const double *HI, double margin, int64_t share, int attempts, int bound, const uint8_t *forced,
                     int threads, int64_t whole, int crowd,
                     int64_t *tokens, int64_t *index, int8_t *status) {
    int team = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads, used = 1;
    team = B < team ? (int)(B > 1 ? B : 1) : team;
#ifndef _OPENMP
    team = 1;
#endif
    struct call C = {p, q, is_double, n, attempts, bound, V, ldp, ldq, steps, share, inv_p, inv_q, u, w, forced,
                     {bits, top, NB, below, above, margin, LO, HI}, tokens, index, status, B, whole, crowd, 0, 0, 0};
#ifdef _OPENMP
#pragma omp parallel if (team > 1) num_threads(team)
#endif
    {
        struct work W;
        if (work_alloc(&W, V, NB)) {
            C.failed = 1;
        } else {
            for (int64_t b; !C.failed && (b = C.next++) < B;)
                if (row_run(&C, &W, b)) C.failed = 1;
            work_free(&W);
        }
#ifdef _OPENMP
#pragma omp master
        used = omp_get_num_threads();
#endif
    }
    return C.failed ? -1 : used;
}

/* 1 where the kernels were built with OpenMP (otlp_bucket_rule's rows on a team of threads), else 0. */
int otlp_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}
