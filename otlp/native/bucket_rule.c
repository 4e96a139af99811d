/* The optimal rule's bucketed CPU route (otlp/optimal/buckets.py) on one row at a time, start to end, in C.
 *
 * buckets.py runs its steps on all the rows of a call at once: two per-token passes in C (otlp_bucket_sums,
 * otlp_gather_selected), then about three hundred numpy calls on [B, NB] and [B, K] arrays for the buckets' psi and
 * bounds, the selection, the compressed instance, its rule and the certificate. Their cost per call is what kept the
 * rule above twice RRS at small batches and at V = 2k (issue 19). Here each row takes the same steps in one loop
 * (buckets.py's module docstring numbers them):
 *
 *   1. the buckets and their sums (otlp_bucket_sums);
 *   2. psi at the bucket boundaries (otlp_prefix on the buckets in order) and each bucket's interior bound f
 *      (buckets.psi_interior_bound, less the margin), low and inner (buckets._Level);
 *   3. the selection (buckets._Level.select), or the caller's;
 *   4. the selected buckets' tokens (otlp_gather_selected), each run of unselected buckets one entry (its sums, and
 *      the least bound inside it), in the ratio order: buckets in order, a selected bucket's tokens by decreasing
 *      key (ties by token id), which is the order the numpy route's stable sort gives, since the buckets hold
 *      disjoint ratio ranges and a run's key lies between its neighbours';
 *   5. the rule on it (otlp_prefix, otlp_served_group, otlp_window_chain, otlp_pieces, otlp_sample, as
 *      chains.tuple_rule and chains.sample on the CPU route) and the certificate (buckets._attempt); a row that fails
 *      has its failing runs' buckets selected and is tried again, up to `attempts` times.
 *
 * The same operations as the numpy route in the same order, with differences that keep the certificate sound: a
 * run's sums add its buckets from the first (numpy's reduceat); the compressed instance has no zero-mass padding
 * (the numpy route pads rows to one width and keeps a column for each empty run; a zero entry changes no prefix's
 * psi, only where positions fall); psi at the bucket boundaries is formed over the buckets that hold mass (the same
 * values); a failing attempt stops before the chain. tests/optimal/test_buckets.py holds both routes to the full
 * sort, and to each other's certified rows. A call's rows may be spread over an OpenMP team (otlp_bucket_rule).
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

#define DIGIT_BITS 12 /* a large bucket's tokens are first spread by the 12 pattern bits after its own */
#define DIGITS (1 << DIGIT_BITS)
#define RADIX_MIN 64  /* from this many tokens in a bucket */

/* A selected bucket's tokens cols [m] (in token order) by decreasing key, stable: keys in [lo, hi) of one bucket
 * share their pattern's leading bits down to `shift`, so the next DIGIT_BITS bits spread them into DIGITS ordered
 * groups (a counting sort, stable), each then sorted by sort_by_key; the top and bottom buckets (unbounded ratio
 * ranges, keys 0 and -1) and small buckets by sort_by_key alone. tmp: m places; count: DIGITS + 1. */
static void sort_bucket(int64_t *cols, int64_t m, const double *key, int64_t *tmp, int64_t *count, int shift,
                        int edge) {
    if (m <= RADIX_MIN || edge || shift < DIGIT_BITS) {
        sort_by_key(cols, m, key, tmp);
        return;
    }
    const int low = shift - DIGIT_BITS;
    memset(count, 0, sizeof(int64_t) * (DIGITS + 1));
    for (int64_t i = 0; i < m; i++) {
        int64_t pattern;
        memcpy(&pattern, &key[cols[i]], sizeof pattern);
        count[(DIGITS - 1 - ((pattern >> low) & (DIGITS - 1))) + 1]++; /* larger keys first */
    }
    for (int d = 0; d < DIGITS; d++) count[d + 1] += count[d];
    for (int64_t i = 0; i < m; i++) {
        int64_t pattern;
        memcpy(&pattern, &key[cols[i]], sizeof pattern);
        tmp[count[DIGITS - 1 - ((pattern >> low) & (DIGITS - 1))]++] = cols[i];
    }
    int64_t at = 0; /* count[d] is now where group d ends */
    for (int d = 0; d < DIGITS; d++) {
        if (count[d] - at > 1) sort_by_key(tmp + at, count[d] - at, key, cols);
        at = count[d];
    }
    memcpy(cols, tmp, sizeof(int64_t) * (size_t)m);
}

/* sort_bucket on the columns 0 .. m - 1 of key [m] into cols [m] (a bucket whose pattern bits above `shift` are
 * shared; edge: the top or bottom bucket), for tests/test_native.py. Returns 0, or -1 without memory. */
int otlp_sort_bucket(const double *key, int64_t m, int shift, int edge, int64_t *cols) {
    int64_t *tmp = malloc(sizeof(int64_t) * (size_t)(m + DIGITS + 1));
    if (!tmp) return -1;
    for (int64_t i = 0; i < m; i++) cols[i] = i;
    sort_bucket(cols, m, key, tmp, tmp + m, shift, edge);
    free(tmp);
    return 0;
}

/* What one call needs, for rows of V tokens in NB buckets: one allocation. */
struct work {
    uint16_t *bucket;                                 /* [V] */
    uint8_t *sel, *bad_run;                           /* [NB] */
    double *hist, *Pb, *Qb, *lps, *lqs, *Qa, *Sqb, *psib, *lwork, *f, *low, *inner; /* buckets' quantities */
    int64_t *ident, *start, *run_first, *run_last;    /* [NB + 1] */
    int64_t *count;                                   /* [DIGITS + 1] */
    double *run_p, *run_q, *run_low;                  /* [NB] */
    int64_t *F, *order, *tmp;                         /* [V + NB + 1] */
    double *Pg, *Qg, *key, *ps, *qs, *pq, *sq, *psi, *pwork;
    void *block;
};

static int work_alloc(struct work *W, int64_t V, int64_t NB) {
    const size_t K = (size_t)(V + NB + 1), nb = (size_t)(NB + 1);
    /* nb doubles each (lwork: otlp_prefix's work on the buckets), K each (pwork: its work on the instance) */
    double **lev[] = {&W->Pb, &W->Qb, &W->lps, &W->lqs, &W->Qa, &W->Sqb, &W->psib, &W->f, &W->low, &W->inner,
                      &W->run_p, &W->run_q, &W->run_low, &W->lwork};
    double **com[] = {&W->Pg, &W->Qg, &W->key, &W->ps, &W->qs, &W->pq, &W->sq, &W->psi, &W->pwork};
    const size_t n_lev = sizeof lev / sizeof *lev, n_com = sizeof com / sizeof *com;
    const size_t doubles = 2 * nb + n_lev * nb + n_com * K;
    const size_t ints = 4 * nb + 3 * K + DIGITS + 1;
    W->block = malloc(sizeof(double) * doubles + sizeof(int64_t) * ints + (size_t)V * 2 + 2 * nb + 64);
    if (!W->block) return -1;
    double *d = W->block;
    W->hist = d, d += 2 * nb;
    for (size_t i = 0; i < n_lev; i++) *lev[i] = d, d += nb;
    for (size_t i = 0; i < n_com; i++) *com[i] = d, d += K;
    int64_t *x = (int64_t *)d;
    W->ident = x, x += nb;
    W->start = x, x += nb;
    W->run_first = x, x += nb;
    W->run_last = x, x += nb;
    W->F = x, x += K;
    W->order = x, x += K;
    W->tmp = x, x += K;
    W->count = x, x += DIGITS + 1;
    W->bucket = (uint16_t *)x;
    W->sel = (uint8_t *)(W->bucket + V);
    W->bad_run = W->sel + nb;
    for (int64_t k = 0; k < NB; k++) W->ident[k] = k;
    return 0;
}

/* The scheme: buckets.Scheme and its constants. */
struct scheme {
    int bits;
    int64_t top, NB;
    double below, above, margin;
    const double *LO, *HI;
};

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
        double x_c = 0.0; /* an empty bucket's (most of a row's buckets): the formula gives 0 there too */
        if (pb != 0.0 || qb != 0.0) {
            x_c = lo > 0 ? (qb / lo - pb) / (1.0 / lo - 1.0 / hi) : qb;
            x_c = np_min(np_max(x_c, 0.0), qb);
        }
        W->f[k] = ((Pa[k] + x_c / hi) - int_power(W->Qa[k] + x_c, n)) - S->margin;
        W->low[k] = np_min(np_min(W->psib[k], W->psib[k + 1]), W->f[k]);
        W->inner[k] = np_min(W->f[k], W->psib[k + 1]);
    }
    return b_star;
}

/* Step 3: buckets._Level.select for the drafts' buckets and the residual's uniform u1, into W->sel. */
static void row_select(const struct work *W, int64_t NB, int64_t b_star, const int64_t *w, int n, double u1,
                       uint8_t *sel) {
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
    const double psi_d = psi[d];
    double after = INFINITY;
    for (int64_t i = d + 1; i <= NB; i++) after = np_min(after, psi[i]);
    if (d < m_lo)
        for (int64_t k = 0; k < d; k++) sel[k] |= f[k] <= psi_d;
    if (m_hi <= d)
        for (int64_t k = d + 1; k < NB; k++) sel[k] |= f[k] <= after;
    for (int j = 0; j < n; j++) sel[W->bucket[w[j]]] = 1;
}

/* Step 4: the compressed instance of the row's T gathered tokens (W->F, Pg, Qg) and its runs, in W->order (columns:
 * the tokens 0 .. T - 1, then the runs T .. T + R - 1, R returned) with W->Pg, W->Qg extended by the runs' sums. */
static int64_t row_instance(struct work *W, int64_t NB, int64_t T, int bits) {
    const uint8_t *sel = W->sel;
    int64_t *start = W->start;
    memset(start, 0, sizeof(int64_t) * (size_t)(NB + 1));
    for (int64_t t = 0; t < T; t++) {
        const double r = W->Qg[t] / W->Pg[t];
        W->key[t] = r == r ? r : -1.0; /* otlp.psi.ratio_keys */
        start[W->bucket[W->F[t]] + 1]++;
    }
    int64_t R = 0, at = 0;
    for (int64_t k = 0; k < NB; k++) { /* each bucket's place in the order: its tokens, or its run's one entry */
        const int64_t count = start[k + 1];
        start[k] = at;
        if (sel[k]) {
            at += count;
            continue;
        }
        const double bound = k + 1 < NB && !sel[k + 1] ? W->inner[k] : W->f[k];
        if (k == 0 || sel[k - 1]) { /* a new run */
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
    for (int64_t t = 0; t < T; t++) W->order[fill[W->bucket[W->F[t]]]++] = t; /* token order within a bucket */
    for (int64_t k = 0; k < NB; k++)
        if (sel[k] && start[k + 1] - start[k] > 1)
            sort_bucket(W->order + start[k], start[k + 1] - start[k], W->key, W->tmp, W->count, 52 - bits,
                        k == 0 || k == NB - 1);
    for (int64_t r = 0; r < R; r++) {
        W->Pg[T + r] = W->run_p[r];
        W->Qg[T + r] = W->run_q[r];
    }
    return R;
}

/* Step 5 on the compressed instance of K = T + R entries: the rule, its draw and the certificate. Returns 1 when
 * certified (token and slot in *token, *slot), else 0 with the failing runs marked in W->bad_run. -1: no memory. */
static int row_rule(struct work *W, int64_t T, int64_t R, const int64_t *w, const double *u, int n, int64_t steps,
                    int64_t *token, int64_t *slot) {
    const int64_t K = T + R;
    int64_t w2[MAX_N], pos[MAX_N], m, top, s, e, index, drawn_col;
    double cum[MAX_N], cum_c[MAX_N], accept[MAX_N], beta, reject;
    for (int j = 0; j < n; j++) { /* the drafts' columns: their tokens' places among the gathered (increasing) */
        int64_t lo = 0, hi = T;
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            if (W->F[mid] < w[j]) lo = mid + 1;
            else hi = mid;
        }
        w2[j] = lo;
    }
    otlp_prefix(W->Pg, W->Qg, W->order, 1, K, n, W->ps, W->qs, W->pq, W->sq, W->psi, &m, W->pwork);
    otlp_served_group(W->psi, W->order, w2, &m, 1, K, n, pos, &top, &s, &e);
    /* the certificate (buckets._attempt), by compressed position j: first what needs no chain (m*, the served
     * group's ends, the chain's positions), so that a failing attempt skips the chain, the costly part of close
     * drafts' rows; then the residual draw's condition */
    const double *psi = W->psi;
    const double psi_star = psi[m], psi_s = psi[s], psi_e = psi[e];
    const int inner = top < m;
    memset(W->bad_run, 0, (size_t)(R > 0 ? R : 1));
    int ok = 1;
#define BELOW(thr) (least < (thr))
#define AT_OR_BELOW(thr) (ends < (thr) || low <= (thr))
    for (int64_t j = 0; j < K; j++) {
        const int64_t col = W->order[j];
        if (col < T) continue; /* only a merged run can fail */
        const double low = W->run_low[col - T], ends = np_min(psi[j], psi[j + 1]), least = np_min(ends, low);
        int bad = j < m ? AT_OR_BELOW(psi_star) : BELOW(psi_star);
        bad |= j >= s && j < top;
        if (inner) bad |= (AT_OR_BELOW(psi_s) && j < s) || (BELOW(psi_s) && j > top && j < e);
        else bad |= (AT_OR_BELOW(psi_e) && j > top && j < e) || (BELOW(psi_e) && j >= e);
        if (bad) {
            W->bad_run[col - T] = 1;
            ok = 0;
        }
    }
    if (!ok) return 0;
    if (otlp_window_chain(W->ps, W->qs, W->pq, W->sq, W->psi, 1, K, &m, &s, &e, &top, pos, n, n, steps, cum, cum_c,
                          &beta))
        return -1;
    otlp_pieces(w2, pos, &s, cum, cum_c, &beta, 1, n, accept, &reject);
    otlp_sample(accept, &reject, w2, u, W->psi, W->order, &m, 1, K, n, &drawn_col, &index);
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
    int is_double, n, attempts;
    int64_t V, ldp, ldq, steps, share; /* ldp, ldq: entries from one row of p, q to the next */
    const double *inv_p, *inv_q, *u;
    const int64_t *w;
    const uint8_t *forced;
    struct scheme S;
    int64_t *tokens, *index;
    int8_t *status;
    int64_t B;
    int whole;            /* a row that hardly compresses takes every bucket here (its full order) */
    _Atomic int64_t next; /* rows are taken one at a time, by whichever thread is free */
    _Atomic int failed;   /* some thread's work arrays could not be allocated */
};

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
    else row_select(W, NB, b_star, wb, n, ub[1], W->sel);
    C->tokens[b] = C->index[b] = 0;
    C->status[b] = (int8_t)-attempts;
    for (int attempt = 1; attempt <= attempts; attempt++) {
        int64_t T = otlp_gather_selected(pb, qb, is_double, 1, V, C->inv_p + b, C->inv_q + b, W->bucket, W->sel, NB,
                                         V, W->F, W->Pg, W->Qg);
        if (attempt == 1) {
            int64_t chosen = 0;
            for (int64_t k = 0; k < NB; k++) chosen += W->sel[k];
            if ((T + chosen) * C->share > V) { /* hardly compresses: the full sort at once */
                if (!C->whole) {
                    C->status[b] = 0;
                    return 0;
                }
                memset(W->sel, 1, (size_t)NB); /* every bucket sorted, no run merged: the full order */
                T = otlp_gather_selected(pb, qb, is_double, 1, V, C->inv_p + b, C->inv_q + b, W->bucket, W->sel, NB,
                                         V, W->F, W->Pg, W->Qg);
            }
        }
        const int64_t R = row_instance(W, NB, T, C->S.bits);
        const int got = row_rule(W, T, R, wb, ub, n, C->steps, C->tokens + b, C->index + b);
        if (got < 0) return -1;
        if (got) {
            C->status[b] = (int8_t)attempt;
            return 0;
        }
        for (int64_t r = 0; r < R; r++) /* the failing runs' buckets sorted too */
            if (W->bad_run[r])
                for (int64_t k = W->run_first[r]; k <= W->run_last[r]; k++) W->sel[k] = 1;
    }
    return 0;
}

#define MAX_THREADS 64

/* The default tuple rule and its draw on rows p, q [B, V] (float32, or float64 when is_double; row b at p + b ldp
 * and q + b ldq, ldp = ldq = V for contiguous rows) normalised by inv_p, inv_q [B], drafts w [B, n] and uniforms
 * u [B, 2], as buckets.verify_rows: tokens, index [B] and status [B], the attempt that certified the row
 * (1 .. attempts), or 0 for a row whose compressed instance would hold more than 1 / share of its tokens (not tried,
 * where one thread takes the rows; below), or -attempts (neither needs the full sort). forced [B, NB] (or NULL): the
 * selection of the first attempt, instead of step 3's. The scheme: bits, top (buckets._top), NB, below, above and LO,
 * HI [NB] (buckets.Scheme; a run's key is not needed: step 4 places it by its bucket); margin:
 * buckets.BOUND_MARGIN; steps: the Newton steps of the chain's roots.
 *
 * threads > 1 (and B > 1): an OpenMP team of that many threads takes the rows one at a time, each thread with its own
 * work arrays (the rows are independent, so the results do not depend on which thread takes which). The team is the
 * OpenMP runtime's pool of the calling thread: where torch is loaded it shares libgomp with it (one copy per
 * process), so right after torch's own parallel work its waiting threads, still spinning, take rows at once, where a
 * thread of our own would have had to share a core with them. A row that hardly compresses then takes every bucket
 * here, not status 0: with no run merged its compressed instance is its full order (sorted bucket by bucket, which
 * cost 1.07-1.24x the caller's full sort of a row of a close draft, but runs on the team, where the caller's chunks
 * run on threads of their own). Built without OpenMP, the rows run one after the other here. Returns the number of
 * threads that took part, or -1 where work arrays could not be allocated. */
int otlp_bucket_rule(const void *p, const void *q, int is_double, int64_t B, int64_t V, int64_t ldp, int64_t ldq,
                     const double *inv_p, const double *inv_q, const int64_t *w, const double *u, int n,
                     int64_t steps, int bits, int64_t top, int64_t NB, double below, double above, const double *LO,
                     const double *HI, double margin, int64_t share, int attempts, const uint8_t *forced, int threads,
                     int64_t *tokens, int64_t *index, int8_t *status) {
    int team = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads, used = 1;
    team = B < team ? (int)(B > 1 ? B : 1) : team;
#ifndef _OPENMP
    team = 1;
#endif
    struct call C = {p, q, is_double, n, attempts, V, ldp, ldq, steps, share, inv_p, inv_q, u, w, forced,
                     {bits, top, NB, below, above, margin, LO, HI}, tokens, index, status, B, team > 1, 0, 0};
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
            free(W.block);
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
