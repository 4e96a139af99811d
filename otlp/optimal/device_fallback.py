"""The full-order rule in one Triton program per row, for the rows the device bucket rule leaves undecided (issue 41).

:func:`.device_buckets.decide` certifies most rows from a histogram and a few compacted buckets; a row it cannot
certify (or whose selected buckets spill its buffer) needs the full ratio order. With static shapes and no host
synchronisation, torch operations can take that order only on every row (the cost of the old device route) or on a
fixed number F of gathered rows (a call with more such rows would keep a guess). Here each undecided row is taken
*inside* one kernel: ``G`` programs, program g taking rows g, g + G, ... whose ``todo`` flag is set and returning at
once on the others, so the cost is proportional to the number of undecided rows, whatever it is, and nothing leaves
the device.

Per undecided row, the reference's steps (:mod:`.chains`, the rule's one definition), on the row's own scratch:

1. keys q/p (:func:`otlp.core.psi.ratio_keys` on the normalised row) and a bitonic sort by decreasing key, ties by
   token id (:func:`.chains.ratio_order`: stable), padded to a power of two Vp with keys below every token's;
2. the masses in that order, their running sums from the bottom and from the top, psi on every prefix (the suffix
   form where Q_m > 1/2: :func:`otlp.core.psi.prefix_psi`), m* its first argmin;
3. the drafts' positions, the top one, the served group (s, e] (:func:`.chains.served_group`'s two cases);
4. the class chain on the window s .. top + 1 (:func:`.chains.group_terms`: targets, gaps, ratios, the slot masses
   by :func:`.chains.slot_mass`, Newton from its upper bound until no entry moves, as the host's; tied runs by their
   closed form; hazards and the certain slots), summed at each draw's position, and the group's beta;
5. the pieces (:func:`.chains._pieces`), the slot with ``u[:, 0]`` and the residual position with ``u[:, 1]``
   (:func:`.chains.sample`, :func:`.chains.residual_index`).

Same tokens as the reference for the same uniforms up to rounding (running sums in another order: a token differs
only where a uniform lies within rounding of a boundary); tests/optimal/test_device_fallback.py runs the kernel under
``TRITON_INTERPRET=1`` against :mod:`.chains` (every row undecided) and inside :func:`.device_buckets.decide`.

Cost of one undecided row: the sort's log2(Vp) (log2(Vp) + 1) / 2 passes over the row's keys and ids (153 at
V = 128k) plus about ten passes over the row, all by one program: milliseconds on a GPU, where the certified rows
take microseconds. log1p and expm1 by Kahan's and Goldberg's forms on exp and log (Triton's interpreter has no
libdevice). n <= 64 (the expansions' coefficients, :data:`.chains.POWER_GAP_EXPANSION_MAX`).
"""

from __future__ import annotations

import functools
from math import comb

from otlp.backend.triton import opaque

#: programs of the kernel (each takes every G-th row; its scratch is ~9 (Vp + 1) float64 values)
PROGRAMS = 8
#: tokens per block of a program's passes
BLOCK = 1024
#: the most draws the kernel takes (:data:`.chains.POWER_GAP_EXPANSION_MAX`)
MAX_DRAWS = 64
#: Newton steps at most per slot mass (the host's limit, :func:`.chains._newton_numpy`)
NEWTON_LIMIT = 200


@functools.cache
def _kernel():  # noqa: ANN202, C901, PLR0915 - made on first use: TRITON_INTERPRET is read when it is defined
    import triton
    import triton.language as tl

    @triton.jit
    def rsum(x, axis: tl.constexpr):  # noqa: ANN001, ANN202 - tl.sum (see rule's first comment)
        return tl.reduce(x, axis, tl.standard._sum_combine)

    @triton.jit
    def rmax(x, axis: tl.constexpr):  # noqa: ANN001, ANN202
        return tl.reduce(x, axis, tl.standard._elementwise_max)

    @triton.jit
    def rmin(x, axis: tl.constexpr):  # noqa: ANN001, ANN202
        return tl.reduce(x, axis, tl.standard._elementwise_min)

    @triton.jit
    def scan(x, axis: tl.constexpr, reverse: tl.constexpr):  # noqa: ANN001, ANN202 - tl.cumsum
        return tl.associative_scan(x, axis, tl.standard._sum_combine, reverse=reverse)

    @triton.jit
    def log1p(x):  # noqa: ANN001, ANN202 - Goldberg: log(u) x / (u - 1), u = 1 + x
        u = 1.0 + x
        return tl.where(u == 1.0, x, tl.log(u) * (x / tl.where(u == 1.0, 1.0, u - 1.0)))

    @triton.jit
    def expm1(x):  # noqa: ANN001, ANN202 - Kahan: (u - 1) x / log(u), u = e^x (x <= 0 here)
        u = tl.exp(x)
        lu = tl.log(u)
        return tl.where(u == 1.0, x, tl.where(u == 0.0, -1.0, (u - 1.0) * (x / tl.where(lu == 0.0, 1.0, lu))))

    @triton.jit
    def ipow(x, N: tl.constexpr):  # noqa: ANN001, ANN202 - otlp.core.psi.int_power's products (1 x = x exactly)
        out = x * 0.0 + 1.0
        sq = x
        for bit in tl.static_range(7):
            if (N >> bit) & 1:
                out = out * sq
            sq = sq * sq
        return out

    @triton.jit
    def power_gap(base, x, binom_ptr, N: tl.constexpr):  # noqa: ANN001, ANN202 - chains.power_gap, n <= 64
        if N == 1:
            out = x + 0.0 * base
        elif N == 2:
            out = x * (2.0 * base + x)
        else:
            acc = x + N * base
            pw = base
            for j in tl.static_range(N - 2, 0, -1):
                pw = pw * base  # base^(n - j)
                acc = acc * x + tl.load(binom_ptr + j) * pw
            out = acc * x
        return out

    @triton.jit
    def slot_mass(H, L, r, gap, act, binom_ptr, dco_ptr, N: tl.constexpr, LIMIT: tl.constexpr):  # noqa: ANN001, ANN202
        """chains.slot_mass (its closed forms; n >= 3: Newton from the bound until no entry moves)."""
        gap = tl.maximum(gap, 0.0)
        if N == 1:
            below = r < 1.0
            y = tl.minimum(tl.maximum(tl.where(below, gap / tl.where(below, 1.0 - r, 1.0), L), 0.0), L)
        elif N == 2:
            b = 2.0 * H - r
            root = tl.sqrt(b * b + 4.0 * gap)
            den = b + root
            y = tl.where(b >= 0, 2.0 * gap / tl.where(den > 0, den, 1.0), 0.5 * (root - b))
            y = tl.minimum(tl.maximum(y, 0.0), L)
        else:
            Hn2 = H
            for _ in tl.static_range(N - 3):
                Hn2 = Hn2 * H  # H^(n - 2)
            b = N * Hn2 * H - r
            D1 = tl.load(binom_ptr + 2) * Hn2
            root = tl.sqrt(b * b + 4.0 * D1 * gap)
            den = b + root
            d_pos = D1 > 0
            y_a = tl.where(b >= 0, tl.where(den > 0, 2.0 * gap / tl.where(den > 0, den, 1.0), 0.0),
                           tl.where(d_pos, (root - b) / tl.where(d_pos, 2.0 * D1, 1.0), float("inf")))
            c = tl.maximum(gap + Hn2 * H * H - r * H, 0.0)
            u_b = tl.maximum(tl.exp(tl.log(2.0 * c) / N), tl.exp(tl.log(2.0 * tl.maximum(r, 0.0)) / (N - 1)))
            y = tl.maximum(tl.minimum(tl.minimum(y_a, u_b - H), L), 0.0)
            live = act
            it = 0
            while (it < LIMIT) & (tl.reduce(live.to(tl.int32), 0, tl.standard._sum_combine) > 0):
                D = y + N * H  # D(y) = sum_j C(n, j + 1) H^(n-1-j) y^j by Horner (chains._newton_step)
                shift = (N - 1) * y + tl.load(dco_ptr + N - 2) * H
                pw = H
                for j in tl.static_range(N - 3, -1, -1):
                    pw = pw * H  # H^(n - 1 - j)
                    D = D * y + tl.load(binom_ptr + j + 1) * pw
                    if j > 0:
                        shift = shift * y + tl.load(dco_ptr + j) * pw
                Dr = D - r
                g = Dr * y - gap
                dg = Dr + shift * y
                ok = dg > 0
                new = tl.where(ok, tl.minimum(tl.maximum(y - g / tl.where(ok, dg, 1.0), 0.0), L), y)
                moved = tl.abs(new - y) > 4.5e-16 * y
                y = tl.where(live, new, y)
                live = live & moved
                it += 1
        return y

    @triton.jit
    def ratio(ps, qs, first, outer_first, psi_e, psi_s):  # noqa: ANN001, ANN202 - group_terms' r = t / q
        t = tl.where(first & outer_first, tl.maximum(ps - (psi_e - psi_s), 0.0), ps)
        q_pos = qs > 0
        q_div = tl.where(q_pos, qs, 1.0)
        return tl.where(q_pos, tl.where(first & outer_first, t / q_div, 1.0 / (q_div / ps)), 0.0)

    @triton.jit
    def rule(p_ptr, q_ptr, ip_ptr, iq_ptr, w_ptr, u_ptr, todo_ptr, tok_ptr, idx_ptr,  # noqa: ANN001, ANN202, PLR0915
             key_s, ord_s, ps_s, qs_s, pp_s, pq_s, psi_s, sq_s, pos_s, y_s, binom_ptr, dco_ptr,
             B, V, Vp, G, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr, LIMIT: tl.constexpr,
             LOG1P: tl.constexpr, EXPM1: tl.constexpr, IPOW: tl.constexpr, POWER_GAP: tl.constexpr,
             SLOT_MASS: tl.constexpr, RATIO: tl.constexpr, SUM: tl.constexpr, MAX: tl.constexpr,
             MIN: tl.constexpr, CUMSUM: tl.constexpr):
        g = tl.program_id(0)
        # no tl.zeros / tl.sum / tl.max / tl.min / tl.cumsum: jit functions of triton.language, which an interpreter
        # set after Triton's import cannot call; SUM, MAX, MIN and CUMSUM are tl.reduce and tl.associative_scan with
        # Triton's combines
        zi = g * 0  # int32 and float64 scalars
        zf = zi.to(tl.float64)
        ar = tl.arange(0, BLOCK)
        kv = tl.arange(0, NP)
        real = kv < N
        sb = g.to(tl.int64) * (Vp + 1)  # this program's scratch
        INF = float("inf")
        for b in range(g, B, G):
            if tl.load(todo_ptr + b) != 0:
                tl.debug_barrier()  # the last row's reads of the scratch are done before this row writes it
                b64 = b + zi.to(tl.int64)
                rowp = b64 * V
                inv_p = tl.load(ip_ptr + b)
                inv_q = tl.load(iq_ptr + b)
                # 1. keys, then the bitonic sort by (key descending, id ascending)
                for t0 in range(0, Vp, BLOCK):
                    i = t0 + ar
                    m = i < V
                    P = tl.load(p_ptr + rowp + i, mask=m, other=0.0).to(tl.float64) * inv_p
                    Q = tl.load(q_ptr + rowp + i, mask=m, other=0.0).to(tl.float64) * inv_q
                    key = Q / P
                    key = tl.where(m, tl.where(key == key, key, -1.0), -2.0)
                    tl.store(key_s + sb + i, key)
                    tl.store(ord_s + sb + i, i.to(tl.int64))
                tl.debug_barrier()
                kk = 2
                while kk <= Vp:
                    jj = kk // 2
                    while jj > 0:
                        for t0 in range(0, Vp // 2, BLOCK):
                            t = t0 + ar
                            i = (t // jj) * (2 * jj) + t % jj
                            m = t < Vp // 2
                            j = i + jj
                            ki = tl.load(key_s + sb + i, mask=m)
                            kj = tl.load(key_s + sb + j, mask=m)
                            oi = tl.load(ord_s + sb + i, mask=m)
                            oj = tl.load(ord_s + sb + j, mask=m)
                            j_first = (kj > ki) | ((kj == ki) & (oj < oi))
                            swap = tl.where((i & kk) == 0, j_first, ~j_first)
                            tl.store(key_s + sb + i, tl.where(swap, kj, ki), mask=m)
                            tl.store(key_s + sb + j, tl.where(swap, ki, kj), mask=m)
                            tl.store(ord_s + sb + i, tl.where(swap, oj, oi), mask=m)
                            tl.store(ord_s + sb + j, tl.where(swap, oi, oj), mask=m)
                        tl.debug_barrier()
                        jj = jj // 2
                    kk = kk * 2
                # 2. masses in order, running sums, psi on the prefixes, m*
                cp = zf
                cq = zf
                tl.store(pp_s + sb, 0.0)
                tl.store(pq_s + sb, 0.0)
                for t0 in range(0, Vp, BLOCK):
                    i = t0 + ar
                    m = i < V
                    o = tl.load(ord_s + sb + i, mask=m, other=0)
                    P = tl.load(p_ptr + rowp + o, mask=m, other=0.0).to(tl.float64) * inv_p
                    Q = tl.load(q_ptr + rowp + o, mask=m, other=0.0).to(tl.float64) * inv_q
                    tl.store(ps_s + sb + i, P, mask=m)
                    tl.store(qs_s + sb + i, Q, mask=m)
                    tl.store(pos_s + sb + o, i.to(tl.int64), mask=m)  # the inverse permutation
                    run_p = CUMSUM(tl.where(ar == 0, P + cp, P), 0, False)
                    run_q = CUMSUM(tl.where(ar == 0, Q + cq, Q), 0, False)
                    tl.store(pp_s + sb + i + 1, run_p, mask=m)
                    tl.store(pq_s + sb + i + 1, run_q, mask=m)
                    cp = MAX(tl.where(ar == BLOCK - 1, run_p, -INF), 0)
                    cq = MAX(tl.where(ar == BLOCK - 1, run_q, -INF), 0)
                tl.debug_barrier()
                sp = zf
                sq = zf
                for tt in range(0, Vp, BLOCK):  # from the top: suffix sums and psi
                    i = Vp - BLOCK - tt + ar
                    m = i < V
                    P = tl.load(ps_s + sb + i, mask=m, other=0.0)
                    Q = tl.load(qs_s + sb + i, mask=m, other=0.0)
                    run_p = CUMSUM(tl.where(ar == BLOCK - 1, P + sp, P), 0, True)
                    run_q = CUMSUM(tl.where(ar == BLOCK - 1, Q + sq, Q), 0, True)
                    sp = MAX(tl.where(ar == 0, run_p, -INF), 0)
                    sq = MAX(tl.where(ar == 0, run_q, -INF), 0)
                    head_p = tl.load(pp_s + sb + i, mask=m, other=0.0)
                    head_q = tl.load(pq_s + sb + i, mask=m, other=0.0)
                    tail = 1.0 - IPOW(1.0 - tl.minimum(run_q, 1.0), N) - run_p
                    psi = tl.where(head_q > 0.5, tail, head_p - IPOW(head_q, N))
                    psi = tl.where(i == 0, 0.0, psi)
                    tl.store(psi_s + sb + i, psi, mask=m)
                    tl.store(sq_s + sb + i, run_q, mask=m)
                tl.store(psi_s + sb + V, 0.0)
                tl.store(sq_s + sb + V, 0.0)
                tl.debug_barrier()
                best = (zf + INF)
                m_star = zi
                for t0 in range(0, V + 1, BLOCK):
                    i = t0 + ar
                    v = tl.load(psi_s + sb + i, mask=i <= V, other=INF)
                    lo = MIN(v, 0)
                    at = MIN(tl.where(v == lo, i, 2 * Vp + 2), 0)
                    m_star = tl.where(lo < best, at, m_star)
                    best = tl.minimum(lo, best)
                psi_min = tl.load(psi_s + sb + m_star)
                # 3. the drafts' positions, the top one, the served group (chains.served_group)
                w = tl.load(w_ptr + b64 * N + kv, mask=real, other=0)
                pos = tl.load(pos_s + sb + w, mask=real, other=-1)
                top = MAX(pos, 0)
                s_in = zi
                lo_in = (zf + INF)
                e_out = zi
                lo_out = (zf + INF)
                for t0 in range(0, V + 1, BLOCK):
                    i = t0 + ar
                    v = tl.load(psi_s + sb + i, mask=i <= V, other=INF)
                    a = tl.where(i <= top, v, INF)
                    lo = MIN(a, 0)
                    at = MIN(tl.where(a == lo, i, 2 * Vp + 2), 0)
                    s_in = tl.where(lo < lo_in, at, s_in)
                    lo_in = tl.minimum(lo, lo_in)
                    a = tl.where(i > top, v, INF)
                    lo = MIN(a, 0)
                    at = MIN(tl.where(a == lo, i, 2 * Vp + 2), 0)
                    e_out = tl.where(lo < lo_out, at, e_out)
                    lo_out = tl.minimum(lo, lo_out)
                psi_sin = tl.load(psi_s + sb + s_in)
                psi_eout = tl.load(psi_s + sb + e_out)
                e_in = zi + 2 * Vp + 2
                s_out = zi
                for t0 in range(0, V + 1, BLOCK):
                    i = t0 + ar
                    v = tl.load(psi_s + sb + i, mask=i <= V, other=INF)
                    e_in = tl.minimum(e_in, MIN(tl.where((i > top) & (i <= V) & (v < psi_sin), i, 2 * Vp + 2), 0))
                    s_out = tl.maximum(s_out, MAX(tl.where((i <= top) & (v <= psi_eout), i, 0), 0))
                inner = top < m_star
                s = tl.where(inner, s_in, s_out)
                e = tl.where(inner, e_in, e_out)
                outer_first = e > m_star  # the group is outer: its first position's target is the vertex
                psi_gs = tl.load(psi_s + sb + s)
                psi_ge = tl.load(psi_s + sb + e)
                sq_e = tl.load(sq_s + sb + e)
                # 4. the class chain on the window s .. top + 1 (chains.group_terms)
                wend = tl.minimum(top + 1, V - 1)
                tl.debug_barrier()  # every draw's position is read before pos_s is written below
                for t0 in range(s, wend + 1, BLOCK):
                    i = t0 + ar
                    m = i <= wend
                    first = i == s
                    H = tl.load(pq_s + sb + i, mask=m, other=0.0)
                    L = tl.load(sq_s + sb + i, mask=m, other=0.0) - sq_e
                    gap = tl.where(first, tl.where(outer_first, 0.0, psi_gs - psi_ge),
                                   tl.load(psi_s + sb + i, mask=m, other=0.0) - psi_ge)
                    gap = tl.maximum(gap, 0.0)
                    one = m & (i - 1 >= s)
                    r1 = RATIO(tl.load(ps_s + sb + i - 1, mask=one, other=0.0),
                               tl.load(qs_s + sb + i - 1, mask=one, other=0.0), i - 1 == s, outer_first, psi_ge,
                               psi_gs)
                    r_below = tl.where(one, r1, 0.0)
                    if N >= 3:
                        two = m & (i - 2 >= s)
                        r2 = RATIO(tl.load(ps_s + sb + i - 2, mask=two, other=0.0),
                                   tl.load(qs_s + sb + i - 2, mask=two, other=0.0), i - 2 == s, outer_first, psi_ge,
                                   psi_gs)
                        q1 = tl.load(qs_s + sb + i - 1, mask=one, other=0.0)
                        tied = two & (r1 == r2) & (q1 > 0)
                    else:
                        tied = i < 0
                    act = m & ~first & ~tied
                    y = SLOT_MASS(H, L, tl.where(first, 0.0, r_below), gap, act, binom_ptr, dco_ptr, N, LIMIT)
                    y = tl.where(first, L, y)
                    tl.store(y_s + sb + i, y, mask=m & ~tied)
                    if N >= 3:  # pos_s is free once the draws' positions are read: the tied flags, for below
                        tl.store(pos_s + sb + i, tied.to(tl.int64), mask=m)
                tl.debug_barrier()
                if N >= 3:  # tied runs: y_i = min((y_a - (H_i - H_a))^+, L_i) from the last solved position a
                    solved_before = zi  # key_s is free after the sort
                    for t0 in range(s, wend + 1, BLOCK):
                        i = t0 + ar
                        m = i <= wend
                        tied = m & (tl.load(pos_s + sb + i, mask=m, other=0) != 0)
                        solved = m & ~tied  # s is one: every tied entry has an anchor
                        count = solved_before + CUMSUM(solved.to(tl.int32), 0, False)  # [BLOCK] solved ones so far
                        tl.store(key_s + sb + count - 1, i.to(tl.float64), mask=solved)  # their list, in order
                        solved_before += SUM(solved.to(tl.int32), 0)
                        tl.debug_barrier()
                        anchor = tl.load(key_s + sb + count - 1, mask=tied, other=0.0).to(tl.int32)
                        H = tl.load(pq_s + sb + i, mask=m, other=0.0)
                        L = tl.load(sq_s + sb + i, mask=m, other=0.0) - sq_e
                        y_a = tl.load(y_s + sb + anchor, mask=tied, other=0.0)
                        H_a = tl.load(pq_s + sb + anchor, mask=tied, other=0.0)
                        tl.store(y_s + sb + i, tl.minimum(tl.maximum(y_a - (H - H_a), 0.0), L), mask=tied)
                    tl.debug_barrier()
                lim = s + tl.minimum(tl.maximum(pos - s, 0), top - s + 1)  # [NP] each draw's window end
                cum = kv.to(tl.float64) * 0.0
                cum_c = kv.to(tl.float64) * 0.0
                before_s = zf
                for t0 in range(s, wend + 1, BLOCK):
                    i = t0 + ar
                    m = i <= wend
                    first = i == s
                    qs = tl.load(qs_s + sb + i, mask=m, other=0.0)
                    y = tl.load(y_s + sb + i, mask=m, other=0.0)
                    nxt = tl.load(y_s + sb + i + 1, mask=m & (i + 1 <= wend) & (i + 1 < e), other=0.0)
                    before = nxt + qs
                    b_pos = before > 0
                    a = tl.where(first | ~b_pos, 0.0,
                                 tl.minimum(tl.maximum(1.0 - y / tl.where(b_pos, before, 1.0), 0.0), 1.0))
                    certain = (a >= 1.0) & ~first
                    lam = tl.where(certain | first, 0.0, -LOG1P(-tl.where(certain, 0.0, a)))
                    live = m & (i <= top) & (i < e)
                    hit = live[:, None] & (i[:, None] <= lim[None, :])  # [BLOCK, NP]
                    cum += SUM(tl.where(hit, lam[:, None], 0.0), 0)
                    cum_c += SUM(tl.where(hit & certain[:, None], 1.0, 0.0), 0)
                    before_s += SUM(tl.where(first & m, before, 0.0), 0)
                H_s = tl.load(pq_s + sb + s)
                gap_s = tl.maximum(tl.where(outer_first, 0.0, psi_gs - psi_ge), 0.0)
                capacity = POWER_GAP(H_s, before_s, binom_ptr, N)
                c_pos = capacity > 0
                beta = tl.where(outer_first, 1.0, tl.where(c_pos, tl.minimum(tl.maximum(
                    1.0 - gap_s / tl.where(c_pos, capacity, 1.0), 0.0), 1.0), 0.0))
                # 5. the pieces (chains._pieces) and the draw (chains.sample)
                in_g = real & (pos >= s)
                key = tl.where(in_g, pos, tl.where(real, -1, -2))
                ahead = (key[None, :] > key[:, None]) | ((key[None, :] == key[:, None]) & (kv[None, :] < kv[:, None]))
                rank = SUM(ahead.to(tl.int32), 1)  # [NP] each draw's place by decreasing position
                c = SUM(in_g.to(tl.int32), 0)
                succ = rank[None, :] == rank[:, None] + 1  # [NP, NP]: draw j comes right after draw k
                more = rank + 1 < c
                nxt = tl.where(more, SUM(tl.where(succ, cum[None, :], 0.0), 1), 0.0)
                nxt_c = tl.where(more, SUM(tl.where(succ, cum_c[None, :], 0.0), 1), 0.0)
                h = tl.where(in_g, tl.maximum(cum - nxt, 0.0), 0.0)
                h = tl.where(in_g & (cum_c - nxt_c > 0), INF, h)
                per = kv.to(tl.float64) * 0.0
                log_reach = zf
                for k in tl.static_range(1, N + 1):
                    hk = SUM(tl.where(rank == k - 1, h, 0.0), 0)
                    fired = tl.exp(log_reach) * -EXPM1(-k * hk)
                    per += tl.where(rank < k, fired / k, 0.0)
                    log_reach = log_reach - k * hk
                left = tl.exp(log_reach)
                per = tl.where(in_g, per + left * beta / tl.maximum(c, 1), 0.0)
                same = (w[:, None] == w[None, :]) & real[:, None] & real[None, :]  # [NP, NP]
                first_occ = SUM((same & (kv[None, :] < kv[:, None])).to(tl.int32), 1) == 0
                accept = tl.where(first_occ & real, SUM(tl.where(same, per[None, :], 0.0), 1), 0.0)
                reject = left * (1.0 - beta)
                total = tl.maximum(-psi_min, 0.0)
                rej = tl.where(total > 0, reject, 0.0)
                u0 = tl.load(u_ptr + 2 * b)
                u1 = tl.load(u_ptr + 2 * b + 1)
                cw = CUMSUM(accept, 0, False)  # [NP] running slot weights (padding lanes add 0)
                whole = SUM(tl.where(kv == N - 1, cw, 0.0), 0) + rej  # cw's last entry, then the reject
                slot = tl.minimum(SUM(((cw <= u0 * whole) & real).to(tl.int32), 0)
                                  + tl.where(whole <= u0 * whole, 1, 0), N)
                slot = tl.where(whole > 0, slot, 0)
                v = u1 * total
                M = zi
                for t0 in range(0, V + 1, BLOCK):
                    i = t0 + ar
                    d = tl.load(psi_s + sb + i, mask=i <= V, other=INF) - psi_min
                    M = tl.maximum(M, MAX(tl.where((i <= V) & (d <= v), i, 0), 0))
                drawn = tl.minimum(M, V - 1)
                chosen = SUM(tl.where(kv == slot, w, 0), 0)
                token = tl.where(slot < N, chosen, tl.load(ord_s + sb + drawn))
                tl.store(tok_ptr + b, token)
                tl.store(idx_ptr + b, tl.where(slot < N, slot, -1).to(tl.int64))

    return rule, dict(LOG1P=log1p, EXPM1=expm1, IPOW=ipow, POWER_GAP=power_gap, SLOT_MASS=slot_mass, RATIO=ratio,
                      SUM=rsum, MAX=rmax, MIN=rmin, CUMSUM=scan)


@functools.cache
def _coefficients(n: int, device):  # noqa: ANN001, ANN202
    """``(C(n, j) for j = 0..n, j C(n, j + 1) for j = 0..n-1)`` as float64 tensors on ``device``, made once (a host
    copy, which a CUDA graph cannot capture: the graph cache's warm-up calls make them before its capture)."""
    import torch

    f64 = dict(dtype=torch.float64, device=device)
    return (torch.tensor([float(comb(n, j)) for j in range(n + 1)], **f64),
            torch.tensor([float(j * comb(n, j + 1)) for j in range(n)], **f64))


@opaque  # (its launch a graph break under torch.compile)
def decide_rows(p, q, inv_p, inv_q, w, U, todo, tokens, index, *, programs: int = PROGRAMS):  # noqa: ANN001, ANN201
    """``(tokens, index)`` with the rows of ``todo bool [B]`` decided by the full-order rule (module docstring), the
    others as given: ``p, q [B, V]`` (any float dtype), ``inv_p, inv_q float64 [B, 1]`` the reciprocals of their
    sums, ``w int64 [B, n]`` (2 <= n <= 64), ``U float64 [B, 2]``, ``tokens, index int64 [B]`` (not written: the
    result is a copy)."""
    import torch

    B, V = p.shape
    n = w.shape[1]
    if not 2 <= n <= MAX_DRAWS:
        raise ValueError(f"the full-order kernel takes 2 <= n <= {MAX_DRAWS} draws, got n = {n}")
    Vp = max(2, 1 << (V - 1).bit_length())
    block = min(BLOCK, Vp // 2)
    G = max(1, min(programs, B))
    dev = p.device
    f64 = dict(dtype=torch.float64, device=dev)
    scratch = [torch.empty(G * (Vp + 1), **f64) for _ in range(8)]
    key_s, ps_s, qs_s, pp_s, pq_s, psi_s, sq_s, y_s = scratch
    ord_s = torch.empty(G * (Vp + 1), dtype=torch.int64, device=dev)
    pos_s = torch.empty_like(ord_s)
    binom, dco = _coefficients(n, dev)
    tokens, index = tokens.clone(), index.clone()
    rule, helpers = _kernel()
    rule[(G,)](p.contiguous(), q.contiguous(), inv_p.contiguous(), inv_q.contiguous(), w.contiguous(),
                    U.contiguous(), todo.to(torch.uint8).contiguous(), tokens, index, key_s, ord_s, ps_s, qs_s, pp_s,
                    pq_s, psi_s, sq_s, pos_s, y_s, binom, dco, B, V, Vp, G, N=n,
                    NP=max(2, 1 << (n - 1).bit_length()), BLOCK=block, LIMIT=NEWTON_LIMIT,
                    enable_fp_fusion=False, **helpers)  # no fused multiply-add: the reference's roundings
    return tokens, index
