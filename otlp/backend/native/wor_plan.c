/* The Luce plan of otlp/optimal/wor.py's set_plan (the reference, whose docstring and module docstring derive it),
 * one row at a time: the host route of the rule for drafts sampled without replacement, where numpy's per-call cost
 * is most of the work (a few hundred small arrays a plan). The same steps as set_plan on one row: the decreasing-q/p
 * order (stable), psi on its prefixes, m*, the outer groups' cuts, the targets and blocks, each set's members, the
 * gauge, then Newton's method on the concave Luce likelihood with backtracking (up to `steps` steps, 40 halvings),
 * each row on its own. The answer is the same optimum to the tolerance; the additions run in another order, so the
 * choices agree with set_plan's to rounding of the Newton residual (tests/backend/test_native.py). A row whose
 * Hessian has a zero pivot stops there, as one that does not reach the tolerance: residual inf (the caller takes the
 * relaxed LP, as for set_plan's stalled rows). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { /* what an evaluation of the choices reads */
    int64_t U, G;
    int S;
    const double *probs; /* [U] */
    const int64_t *elem; /* [U, S] each set's slots, then R = E */
    const uint8_t *live; /* [U, S] the members */
    const double *chosen; /* [G] the objective's linear term */
    const int64_t *block; /* [G] each element's block */
    const uint8_t *present; /* [G] */
    double *w, *top; /* [G] work: exp(theta - its block's largest), each block's largest theta */
} plan_t;

/* Each set's choice at theta, the expected choices y [G] and the objective f (set_plan's `expected`). A set's
 * members lie in one block (the block that serves it), so exp(theta - the block's largest theta) [G] serves every
 * set: G exponentials, not one per member; a set whose members all underflow there takes its own peak. The
 * objective (a logarithm a set) only where `objective` asks: the line search reads it only when a step does not
 * lower the residual. */
static double expected(const plan_t *P, const double *theta, double *choice, double *y, int objective) {
    const int S = P->S;
    double f = 0.0;
    double *w = P->w, *top = P->top;
    for (int64_t g = 0; g < P->G; g++) {
        y[g] = 0.0;
        top[g] = -INFINITY;
    }
    for (int64_t g = 0; g < P->G; g++)
        if (P->present[g] && theta[g] > top[P->block[g]]) top[P->block[g]] = theta[g];
    for (int64_t g = 0; g < P->G; g++) w[g] = P->present[g] ? exp(theta[g] - top[P->block[g]]) : 0.0;
    for (int64_t u = 0; u < P->U; u++) {
        const int64_t *el = P->elem + u * S;
        const uint8_t *lv = P->live + u * S;
        double *c = choice + u * S;
        double total = 0.0, peak = 0.0;
        int any = 0;
        for (int a = 0; a < S; a++)
            if (lv[a]) {
                total += w[el[a]];
                peak = top[P->block[el[a]]];
                any = 1;
            }
        if (!any) { /* a set with no member: nothing chosen, no term */
            for (int a = 0; a < S; a++) c[a] = 0.0;
            continue;
        }
        if (!(total > 1e-250)) { /* far below the block's largest theta (or a member of mass 0): its own peak */
            peak = -INFINITY;
            for (int a = 0; a < S; a++)
                if (lv[a] && theta[el[a]] > peak) peak = theta[el[a]];
            total = 0.0;
            for (int a = 0; a < S; a++) total += lv[a] ? exp(theta[el[a]] - peak) : 0.0;
            for (int a = 0; a < S; a++) c[a] = lv[a] ? exp(theta[el[a]] - peak) / total : 0.0;
        } else {
            for (int a = 0; a < S; a++) c[a] = lv[a] ? w[el[a]] / total : 0.0;
        }
        for (int a = 0; a < S; a++) y[el[a]] += P->probs[u] * c[a];
        if (objective) f += P->probs[u] * (peak + log(total));
    }
    if (!objective) return NAN;
    for (int64_t g = 0; g < P->G; g++) f -= P->chosen[g] * theta[g];
    return f;
}

static double gap(const plan_t *P, const double *y, const double *goal, const uint8_t *present) {
    double worst = 0.0;
    for (int64_t g = 0; g < P->G; g++)
        if (present[g] && fabs(y[g] - goal[g]) > worst) worst = fabs(y[g] - goal[g]);
    return worst;
}

/* Solve H x = b in place (H [G, G] row-major, destroyed) by Gaussian elimination with partial pivoting: 0, or -1 at
 * a zero pivot. */
static int solve(double *H, double *b, int64_t G) {
    for (int64_t k = 0; k < G; k++) {
        int64_t piv = k;
        for (int64_t i = k + 1; i < G; i++)
            if (fabs(H[i * G + k]) > fabs(H[piv * G + k])) piv = i;
        if (H[piv * G + k] == 0.0) return -1;
        if (piv != k) {
            for (int64_t j = 0; j < G; j++) {
                const double t = H[k * G + j];
                H[k * G + j] = H[piv * G + j];
                H[piv * G + j] = t;
            }
            const double t = b[k];
            b[k] = b[piv];
            b[piv] = t;
        }
        for (int64_t i = k + 1; i < G; i++) {
            const double m = H[i * G + k] / H[k * G + k];
            if (m == 0.0) continue;
            for (int64_t j = k; j < G; j++) H[i * G + j] -= m * H[k * G + j];
            b[i] -= m * b[k];
        }
    }
    for (int64_t k = G - 1; k >= 0; k--) {
        double s = b[k];
        for (int64_t j = k + 1; j < G; j++) s -= H[k * G + j] * b[j];
        b[k] = s / H[k * G + k];
    }
    return 0;
}

/* One row: p, q [E], probs [U] -> choice_out [U, n], the residual (inf: no plan). work: doubles and ints sized by
 * otlp_wor_plan. */
static double plan_row(const double *p, const double *q, int64_t E, const int64_t *sets, int64_t U, int n,
                       const double *probs, int steps, double tolerance, double *choice_out, double *dw,
                       int64_t *iw, uint8_t *bw) {
    const int S = n + 1;
    const int64_t G = E + 1;
    double *key = dw, *psi = key + E, *goal = psi + E + 1, *reach = goal + G, *theta = reach + G, *y = theta + G,
           *grad = y + G, *step = grad + G, *trial = step + G, *y2 = trial + G, *chosen = y2 + G, *target = chosen + G,
           *best = target + E, *H = best + G, *choice = H + G * G, *c2 = choice + U * S, *w = c2 + U * S,
           *top_theta = w + G;
    int64_t *order = iw, *pos = order + E, *top = pos + E, *block = top + U, *cutnext = block + E,
            *elem_block = cutnext + E + 1, *elem = elem_block + G, *first = elem + U * S;
    uint8_t *cut = bw, *present = cut + E + 1, *fixed = present + G, *live = fixed + G;

    /* the decreasing-q/p order, stable (psi.ratio_keys: q/p, +inf for p = 0 < q, -1 for p = q = 0) */
    for (int64_t e = 0; e < E; e++) {
        const double r = q[e] / p[e];
        key[e] = r != r ? -1.0 : r;
        int64_t i = e;
        while (i > 0 && key[order[i - 1]] < key[e]) {
            order[i] = order[i - 1];
            i--;
        }
        order[i] = e;
    }
    for (int64_t m = 0; m < E; m++) pos[order[m]] = m;
    /* psi_m = P_m - F_m, F_m the mass of the sets whose lowest-ratio draw is among the first m positions */
    for (int64_t m = 0; m <= E; m++) psi[m] = 0.0;
    for (int64_t u = 0; u < U; u++) {
        int64_t t = 0;
        for (int j = 0; j < n; j++)
            if (pos[sets[u * n + j]] > t) t = pos[sets[u * n + j]];
        top[u] = t;
        psi[t + 1] += probs[u]; /* the sets' mass by lowest-ratio position, summed below */
    }
    double P = 0.0, F = 0.0;
    int64_t m_star = 0;
    for (int64_t m = 1; m <= E; m++) {
        P += p[order[m - 1]];
        F += psi[m];
        psi[m] = P - F;
    }
    for (int64_t m = 1; m <= E; m++)
        if (psi[m] < psi[m_star]) m_star = m;
    /* cuts: m >= m* where psi_m is at most every later psi (ties included); the first cut after m */
    double after = INFINITY;
    int64_t next = E;
    for (int64_t m = E; m >= 0; m--) {
        cutnext[m] = next; /* the first cut after m */
        if (psi[m] < after) after = psi[m];
        cut[m] = m >= m_star && psi[m] <= after;
        if (cut[m]) next = m;
    }
    cut[E] = 1;
    int64_t groups = 0;
    for (int64_t m = 0; m < E; m++) {
        const double drop = cut[m] ? psi[cutnext[m] < E ? cutnext[m] : E] - psi[m] : 0.0;
        const double t = p[order[m]] - drop;
        target[m] = t > 0.0 ? t : 0.0;
        groups += cut[m];
        block[m] = m < m_star ? 0 : groups;
    }
    const double alpha_star = 1.0 + psi[m_star];
    for (int64_t e = 0; e < E; e++) {
        goal[e] = target[pos[e]];
        elem_block[e] = block[pos[e]];
    }
    goal[E] = 1.0 - alpha_star > 0.0 ? 1.0 - alpha_star : 0.0;
    elem_block[E] = 0;
    /* each set's members: its draws in the block that serves it (that of its lowest-ratio draw) with a target > 0,
     * and R where the inner block serves it */
    int failed = 0;
    for (int64_t g = 0; g < G; g++) reach[g] = 0.0;
    for (int64_t u = 0; u < U; u++) {
        const int64_t served = block[top[u]];
        int any = 0;
        for (int a = 0; a < S; a++) {
            const int64_t e = a < n ? sets[u * n + a] : E;
            elem[u * S + a] = e;
            live[u * S + a] = a < n ? (block[pos[e]] == served && goal[e] > 0.0) : (served == 0 && goal[E] > 0.0);
            if (live[u * S + a]) {
                reach[e] += probs[u];
                any = 1;
            }
        }
        if (probs[u] > 0.0 && !any) failed = 1;
    }
    /* the gauge: in each block, its present element of largest goal (the first on ties) keeps theta */
    for (int64_t g = 0; g < G; g++) {
        present[g] = reach[g] > 0.0;
        best[g] = -INFINITY;
        first[g] = G;
    }
    for (int64_t g = 0; g < G; g++)
        if (present[g] && goal[g] > best[elem_block[g]]) best[elem_block[g]] = goal[g];
    for (int64_t g = 0; g < G; g++)
        if (present[g] && goal[g] == best[elem_block[g]] && first[elem_block[g]] == G) first[elem_block[g]] = g;
    for (int64_t g = 0; g < G; g++) {
        fixed[g] = !present[g] || first[elem_block[g]] == g;
        theta[g] = log((goal[g] > 1e-300 ? goal[g] : 1e-300) / (reach[g] > 1e-300 ? reach[g] : 1e-300));
        chosen[g] = present[g] ? goal[g] : 0.0;
    }
    plan_t plan = {U, G, S, probs, elem, live, chosen, elem_block, present, w, top_theta};
    double f = expected(&plan, theta, choice, y, 0); /* NaN: not computed yet */
    double residual = gap(&plan, y, goal, present);
    for (int it = 0; it < steps && !failed && residual > tolerance; it++) {
        for (int64_t g = 0; g < G; g++) grad[g] = fixed[g] ? 0.0 : y[g] - goal[g];
        /* the Hessian sum_S P(S) (diag(pi) - pi pi^T) on the members; fixed coordinates: step 0 */
        for (int64_t i = 0; i < G * G; i++) H[i] = 0.0;
        for (int64_t u = 0; u < U; u++) {
            const int64_t *el = elem + u * S;
            const double *c = choice + u * S;
            for (int a = 0; a < S; a++) { /* a set's slots are increasing ids (R last): the upper triangle */
                if (c[a] == 0.0) continue;
                const double w = probs[u] * c[a];
                double *row = H + el[a] * G;
                row[el[a]] -= w * c[a];
                for (int b = a + 1; b < S; b++) row[el[b]] -= w * c[b];
            }
        }
        for (int64_t g = 0; g < G; g++) /* mirrored */
            for (int64_t l = g + 1; l < G; l++) H[l * G + g] = H[g * G + l];
        for (int64_t g = 0; g < G; g++) H[g * G + g] += y[g];
        for (int64_t g = 0; g < G; g++)
            for (int64_t l = 0; l < G; l++)
                if (fixed[g] || fixed[l]) H[g * G + l] = g == l ? 1.0 : 0.0;
        for (int64_t g = 0; g < G; g++) step[g] = -grad[g];
        if (solve(H, step, G)) {
            failed = 1;
            break;
        }
        double slope = 0.0;
        for (int64_t g = 0; g < G; g++) {
            step[g] = step[g] < -30.0 ? -30.0 : (step[g] > 30.0 ? 30.0 : step[g]);
            slope += grad[g] * step[g];
        }
        /* backtracking on the convex objective, or on the residual once f is down to rounding */
        for (double t = 1.0;; t *= 0.5) {
            for (int64_t g = 0; g < G; g++) trial[g] = theta[g] + t * step[g];
            double f2 = expected(&plan, trial, c2, y2, 0);
            const double g2 = gap(&plan, y2, goal, present);
            int ok = g2 < residual || t <= 2e-12;
            if (!ok) { /* the objective, at theta and the trial, only now */
                if (f != f) f = expected(&plan, theta, choice, y, 1);
                f2 = expected(&plan, trial, c2, y2, 1);
                ok = f2 <= f + 1e-4 * t * slope;
            }
            if (ok) {
                memcpy(theta, trial, G * sizeof(double));
                memcpy(choice, c2, U * S * sizeof(double));
                memcpy(y, y2, G * sizeof(double));
                f = f2;
                residual = g2;
                break;
            }
        }
    }
    for (int64_t u = 0; u < U; u++)
        for (int j = 0; j < n; j++) choice_out[u * n + j] = live[u * S + j] ? choice[u * S + j] : 0.0;
    return failed || !(residual <= tolerance) ? INFINITY : residual;
}

/* set_plan's (choice [B, U, n], residual [B]) for rows p, q [B, E], the sets [U, n] (each set's ids increasing: the
 * Hessian is added on its upper triangle) and their masses probs [B, U]; 0, or -1 where the work arrays could not be
 * allocated. */
int otlp_wor_plan(const double *p, const double *q, int64_t B, int64_t E, const int64_t *sets, int64_t U, int n,
                  const double *probs, int steps, double tolerance, double *choice, double *residual) {
    const int64_t G = E + 1, S = n + 1;
    double *dw = malloc(sizeof(double) * (size_t)(14 * G + 2 * E + 1 + G * G + 2 * U * S));
    int64_t *iw = malloc(sizeof(int64_t) * (size_t)(4 * E + 1 + U + 2 * G + U * S));
    uint8_t *bw = malloc((size_t)(E + 1 + 2 * G + U * S));
    if (!dw || !iw || !bw) {
        free(dw);
        free(iw);
        free(bw);
        return -1;
    }
    for (int64_t b = 0; b < B; b++)
        residual[b] = plan_row(p + b * E, q + b * E, E, sets, U, n, probs + b * U, steps, tolerance,
                               choice + b * U * n, dw, iw, bw);
    free(dw);
    free(iw);
    free(bw);
    return 0;
}

/* otlp.core.drafts.set_probabilities on rows q [B, V] (with mass_ranks' rank [B, V] and suffix [B, V + 1]) for the
 * sets [U, n] (n <= 12): P(S) = f(S) by the recursion over the subsets T of S, f(T) = sum_{b in T} f(T - b) q_b /
 * q(V - (T - b)), each mass left by mass_left's rank trick, the same terms added in the same order as the numpy
 * reference (so the same bits) -> out [B, U]. */
void otlp_set_probabilities(const double *q, const int64_t *rank, const double *suffix, int64_t B, int64_t V,
                            const int64_t *sets, int64_t U, int n, double *out) {
    double f[1 << 12], left[1 << 12], qs[12];
    int64_t rk[12];
    int size[1 << 12], lowest[1 << 12]; /* each mask's number of slots and its lowest slot */
    const int full = (1 << n) - 1;
    size[0] = 0;
    for (int mask = 1; mask <= full; mask++) {
        int j = 0;
        while (!(mask >> j & 1)) j++;
        lowest[mask] = j;
        size[mask] = size[mask & (mask - 1)] + 1;
    }
    for (int64_t b = 0; b < B; b++) {
        const double *qb = q + b * V, *sb = suffix + b * (V + 1);
        const int64_t *rb = rank + b * V;
        for (int64_t u = 0; u < U; u++) {
            for (int j = 0; j < n; j++) {
                qs[j] = qb[sets[u * n + j]];
                rk[j] = rb[sets[u * n + j]];
            }
            left[0] = 1.0;
            for (int mask = 1; mask < full; mask++) { /* q(V - T): the suffix from the least undrawn rank r */
                uint64_t low = 0;
                for (int m = mask; m; m &= m - 1) /* the mask's slots, in increasing order */
                    if (rk[lowest[m]] < size[mask]) low |= (uint64_t)1 << rk[lowest[m]];
                int r = 0;
                while (low >> r & 1) r++;
                double later = 0.0;
                for (int m = mask; m; m &= m - 1)
                    if (rk[lowest[m]] >= r) later += qs[lowest[m]];
                left[mask] = sb[r] - later;
            }
            f[0] = 1.0;
            for (int mask = 1; mask <= full; mask++) {
                double total = 0.0;
                for (int m = mask; m; m &= m - 1) {
                    const int j = lowest[m], rest = mask ^ (1 << j);
                    const double l = left[rest];
                    double share = qs[j] / (l > 0.0 ? l : 1.0);
                    share = share < 1.0 ? share : 1.0;
                    total += f[rest] * (l > 0.0 ? share : 0.0);
                }
                f[mask] = total;
            }
            out[b * U + u] = f[full];
        }
    }
}
