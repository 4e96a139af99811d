"""The bucket rule's passes over ``[B, V]`` as Triton kernels (issue 41): :data:`TRITON` for
:func:`.device_buckets.decide`'s ``passes``.

* :func:`histogram`: one program per (row, block of ``BLOCK`` tokens); each token's normalised masses P = p inv_p,
  Q = q inv_q (float64, the values of :func:`.chains.normalised_rows`), its ratio key q/p and bucket
  (:func:`.device_buckets.token_buckets`), added into the row's count, sum P and sum Q by atomics (float64 atomics:
  the sums' order, so their last bits, varies from run to run; the certificate's margins take rounding); the tokens
  of p = 0 or q = 0 summed in the block first.
* :func:`compact`: one program per row, its tokens block by block in token order; a token of a selected bucket
  goes to the next column of the row's ``[K]`` buffer (a block's prefix sum), past K only counted.
* :func:`segments`: one program per (row, block of ``SEG_BLOCK`` tokens); a token of a draft's unsorted bucket is
  added into its segment's sums (:func:`.device_buckets.segments`: the drafts compared one by one), by atomics.

Each reads p and q once (compact and segments could share one pass: not done); the row sums
(:func:`.device_buckets.inverse_sums_one_read`) once more. The same values as the torch passes
(:func:`.device_buckets.histogram`, :func:`.device_buckets.compact`, :func:`.device_buckets.segments`), the sums to
rounding (tests/optimal/test_device_buckets.py, under ``TRITON_INTERPRET=1`` on the CPU). Kernels are made on first
use (``TRITON_INTERPRET`` is read then).
"""

from __future__ import annotations

import functools

from otlp.backend.triton import opaque
from otlp.optimal import buckets as BK
from otlp.optimal.device_buckets import Passes, inverse_sums_one_read

BLOCK = 1024
#: tokens per program of the segments kernel (its [block, 2n] sums)
SEG_BLOCK = 256


@functools.cache
def _kernels():  # noqa: ANN202
    import triton
    import triton.language as tl

    @triton.jit
    def token_buckets(p_ptr, q_ptr, base, i, m, inv_p, inv_q, BELOW: tl.constexpr, ABOVE: tl.constexpr,  # noqa: ANN001, ANN202
                      TOP: tl.constexpr, SHIFT: tl.constexpr):
        """A block's normalised masses P, Q (float64), ratio keys and buckets in its row (as
        :func:`.device_buckets.token_buckets`)."""
        P = tl.load(p_ptr + base + i, mask=m, other=0.0).to(tl.float64) * inv_p
        Q = tl.load(q_ptr + base + i, mask=m, other=0.0).to(tl.float64) * inv_q
        key = Q / P
        key = tl.where(key == key, key, -1.0)  # p = q = 0: -1 (ratio_keys), then the bottom bucket
        b = TOP - (tl.minimum(tl.maximum(key, BELOW), ABOVE).to(tl.int64, bitcast=True) >> SHIFT)
        return P, Q, key, b

    @triton.jit
    def hist(p_ptr, q_ptr, ip_ptr, iq_ptr, count_ptr, Pb_ptr, Qb_ptr, V, NB,  # noqa: ANN001, ANN202
             BELOW: tl.constexpr, ABOVE: tl.constexpr, TOP: tl.constexpr, SHIFT: tl.constexpr,
             TB: tl.constexpr, BLOCK: tl.constexpr, KA: tl.constexpr, KB: tl.constexpr):
        row = tl.program_id(0)
        i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = i < V
        P, Q, _, b = TB(p_ptr, q_ptr, row.to(tl.int64) * V, i, m, tl.load(ip_ptr + row), tl.load(iq_ptr + row), BELOW,
                        ABOVE, TOP, SHIFT)
        ends = (b == KA) | (b == KB)  # p = 0, and q = 0: a filtered row's many tokens, in one bucket each
        b += row.to(tl.int64) * NB
        tl.atomic_add(count_ptr + b, tl.full([BLOCK], 1, tl.int64), mask=m & ~ends)
        tl.atomic_add(Pb_ptr + b, P, mask=m & ~ends)
        tl.atomic_add(Qb_ptr + b, Q, mask=m & ~ends)
        for k in tl.static_range(2):  # those two buckets summed in the block first: one atomic each, not a token's
            K = KA if k == 0 else KB
            at = m & (b == row.to(tl.int64) * NB + K)
            c = tl.reduce(at.to(tl.int64), 0, tl.standard._sum_combine)
            tl.atomic_add(count_ptr + row.to(tl.int64) * NB + K, c, mask=c > 0)
            tl.atomic_add(Pb_ptr + row.to(tl.int64) * NB + K, tl.reduce(tl.where(at, P, 0.0), 0,
                                                                          tl.standard._sum_combine), mask=c > 0)
            tl.atomic_add(Qb_ptr + row.to(tl.int64) * NB + K, tl.reduce(tl.where(at, Q, 0.0), 0,
                                                                          tl.standard._sum_combine), mask=c > 0)

    @triton.jit
    def gather(p_ptr, q_ptr, ip_ptr, iq_ptr, sel_ptr, ids_ptr, Pc_ptr, Qc_ptr, count_ptr, V, NB, K,  # noqa: ANN001, ANN202
               BELOW: tl.constexpr, ABOVE: tl.constexpr, TOP: tl.constexpr, SHIFT: tl.constexpr,
               TB: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        base = row.to(tl.int64) * V
        out = row.to(tl.int64) * K
        inv_p, inv_q = tl.load(ip_ptr + row), tl.load(iq_ptr + row)
        taken = tl.full([1], 0, tl.int64)  # the row's selected tokens so far
        for start in range(0, V, BLOCK):
            i = start + tl.arange(0, BLOCK)
            m = i < V
            P, Q, _, b = TB(p_ptr, q_ptr, base, i, m, inv_p, inv_q, BELOW, ABOVE, TOP, SHIFT)
            keep = (tl.load(sel_ptr + row.to(tl.int64) * NB + b, mask=m, other=0) != 0) & m
            flag = keep.to(tl.int64)
            col = taken + tl.associative_scan(flag, 0, tl.standard._sum_combine) - flag  # [BLOCK] kept tokens' columns
            put = keep & (col < K)
            tl.store(ids_ptr + out + col, i.to(tl.int64), mask=put)
            tl.store(Pc_ptr + out + col, P, mask=put)
            tl.store(Qc_ptr + out + col, Q, mask=put)
            taken += tl.reduce(flag, 0, tl.standard._sum_combine)
        tl.store(count_ptr + row + tl.arange(0, 1), taken)

    @triton.jit
    def segs(p_ptr, q_ptr, ip_ptr, iq_ptr, part_ptr, act_ptr, dkey_ptr, did_ptr, dbucket_ptr, drank_ptr,  # noqa: ANN001, ANN202
             dfirst_ptr, Ps_ptr, Qs_ptr, cs_ptr, V, NB, BELOW: tl.constexpr, ABOVE: tl.constexpr,
             TOP: tl.constexpr, SHIFT: tl.constexpr, TB: tl.constexpr, BLOCK: tl.constexpr, N: tl.constexpr,
             S: tl.constexpr):
        row = tl.program_id(0)
        i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = i < V
        P, Q, key, b = TB(p_ptr, q_ptr, row.to(tl.int64) * V, i, m, tl.load(ip_ptr + row), tl.load(iq_ptr + row),
                              BELOW, ABOVE, TOP, SHIFT)
        part = (tl.load(part_ptr + row.to(tl.int64) * NB + b, mask=m, other=0) != 0) & m
        ii = i.to(tl.int64)
        best = tl.full([BLOCK], -1, tl.int64)
        slot = tl.full([BLOCK], 2 * N, tl.int64)
        head = tl.full([BLOCK], 2 * N, tl.int64)
        is_draw = ii < 0
        for k in tl.static_range(N):  # the drafts, as device_buckets.segments
            d = row * N + k
            inb = (tl.load(act_ptr + d) != 0) & (b == tl.load(dbucket_ptr + d))
            kd = tl.load(dkey_ptr + d)
            idk = tl.load(did_ptr + d)
            rk = tl.load(drank_ptr + d)
            bef = inb & ((kd > key) | ((kd == key) & (idk < ii)))
            later = bef & (rk > best)
            best = tl.where(later, rk, best)
            slot = tl.where(later, k, slot)
            head = tl.where(inb & (~bef) & (head == 2 * N), N + tl.load(dfirst_ptr + d), head)
            is_draw = is_draw | (ii == idk)
        slot = tl.where(best >= 0, slot, head)
        valid = part & (~is_draw) & (slot < 2 * N)
        hit = valid[:, None] & (slot[:, None] == tl.arange(0, S)[None, :])  # [BLOCK, S]
        s = tl.arange(0, S)
        out = row.to(tl.int64) * (2 * N) + s
        put = s < 2 * N
        tl.atomic_add(Ps_ptr + out, tl.reduce(tl.where(hit, P[:, None], 0.0), 0, tl.standard._sum_combine), mask=put)
        tl.atomic_add(Qs_ptr + out, tl.reduce(tl.where(hit, Q[:, None], 0.0), 0, tl.standard._sum_combine), mask=put)
        tl.atomic_add(cs_ptr + out, tl.reduce(hit.to(tl.int64), 0, tl.standard._sum_combine), mask=put)

    # (sums by tl.reduce / tl.associative_scan with Triton's own combine: tl.sum and tl.cumsum are jit functions, which
    # an interpreter set after Triton's import cannot call; a combine passed as a constexpr compiles for no GPU)
    return hist, gather, segs, token_buckets


def _constants(sc: BK.Scheme) -> dict:
    """The bucket scheme's constants of every kernel, and ``TB`` their shared token-bucket function (a jit function
    passed as a constexpr: a kernel sees only its module's globals, not this factory's locals)."""
    return {"BELOW": sc.below, "ABOVE": sc.above, "TOP": sc.top, "SHIFT": 52 - sc.bits,
            "TB": _kernels()[3]}


def histogram(p, q, inv_p, inv_q, sc: BK.Scheme):  # noqa: ANN001, ANN201
    """:func:`.device_buckets.histogram` as one kernel. A filtered row's tokens of p = 0 (or q = 0) all fall in one
    bucket, where a token's atomic each would queue on one address: a block sums them first and adds them with one
    atomic (the same sums, to rounding)."""
    import torch

    B, V = p.shape
    p, q = p.contiguous(), q.contiguous()
    count = torch.zeros(B, sc.NB, dtype=torch.int64, device=p.device)
    Pb = torch.zeros(B, sc.NB, dtype=torch.float64, device=p.device)
    Qb = torch.zeros_like(Pb)
    hist = _kernels()[0]
    hist[(B, -(-V // BLOCK))](p, q, inv_p.contiguous(), inv_q.contiguous(), count, Pb, Qb, V, sc.NB,
                              BLOCK=BLOCK, KA=0, KB=sc.NB - 1, **_constants(sc))  # (the p = 0 and q = 0 buckets)
    return count, Pb, Qb


def compact(p, q, inv_p, inv_q, sel, sc: BK.Scheme, K: int):  # noqa: ANN001, ANN201
    """:func:`.device_buckets.compact` as one kernel."""
    import torch

    B, V = p.shape
    p, q = p.contiguous(), q.contiguous()
    ids = torch.full((B, K), -1, dtype=torch.int64, device=p.device)
    Pc = torch.zeros(B, K, dtype=torch.float64, device=p.device)
    Qc = torch.zeros_like(Pc)
    count = torch.zeros(B, dtype=torch.int64, device=p.device)
    gather = _kernels()[1]
    gather[(B,)](p, q, inv_p.contiguous(), inv_q.contiguous(), sel.to(torch.uint8).contiguous(), ids, Pc, Qc, count,
                 V, sc.NB, K, BLOCK=BLOCK, **_constants(sc))
    return ids, Pc, Qc, count


def segments(p, q, inv_p, inv_q, part, sc: BK.Scheme, dr):  # noqa: ANN001, ANN201
    """:func:`.device_buckets.segments` as one kernel (one program per (row, block), float64 atomics)."""
    import torch

    from otlp.optimal.device_buckets import _first_of_bucket

    B, V = p.shape
    n = dr.w.shape[1]
    p, q = p.contiguous(), q.contiguous()
    act = (dr.first & part.gather(1, dr.bucket)).to(torch.uint8).contiguous()
    first = _first_of_bucket(dr, act.bool()).contiguous()
    Ps = torch.zeros(B, 2 * n, dtype=torch.float64, device=p.device)
    Qs = torch.zeros_like(Ps)
    cs = torch.zeros(B, 2 * n, dtype=torch.int64, device=p.device)
    segs = _kernels()[2]
    S = max(2, 1 << (2 * n - 1).bit_length())  # the 2n segments' sums, padded to a power of two
    segs[(B, -(-V // SEG_BLOCK))](p, q, inv_p.contiguous(), inv_q.contiguous(), part.to(torch.uint8).contiguous(), act,
                                  dr.key.contiguous(), dr.w.contiguous(), dr.bucket.contiguous(),
                                  dr.rank.contiguous(), first, Ps, Qs, cs, V, sc.NB, BLOCK=SEG_BLOCK, N=n, S=S,
                                  **_constants(sc))
    return Ps, Qs, cs


#: the Triton passes, for :func:`.device_buckets.decide` (``passes=TRITON``), each launch opaque to torch.compile
#: (:func:`otlp.backend.triton.opaque`)
TRITON = Passes(inverse_sums_one_read, opaque(histogram), opaque(compact), opaque(segments))
