"""Fused Triton kernels for the baselines rrs and sps with caller uniforms (issue 41): one program per row.

The maths is :func:`otlp.verifiers.rrs.verify_uniforms` (RRS with replacement, the residual chain of
:mod:`otlp.verifiers.rrs`' docstring) and :func:`otlp.optimal.chains.single_draft` (sps, Leviathan et al. 2023,
:mod:`otlp.verifiers.sps`), which stay the references; ``uniforms [B, 2]``: ``u[:, 0]`` one coin per node,
``u[:, 1]`` the final uniform. With r_0 = p, s_0 = 1 and, per rejected draft k,

    r_{k+1} = (r_k - s_k q)^+,  s_{k+1} = sum r_{k+1}      (unnormalised: p_k = r_k / s_k)
    a_k = min(1, r_k(x_k) / (s_k q(x_k))),  draft k taken iff u0 < 1 - prod_{i<=k} (1 - a_i)   (k = 0: u0 q < p)

(an emptied residual, s_{k+1} = 0, is r_{k+1} = s_k q with s kept: rrs.py's rule), and after m rejections the token
by inverse CDF of r_m at u1. r_k(v) depends on p(v), q(v) and the scalars s_0..s_{k-1} only, so the kernel keeps no
[B, V] array: each pass recomputes r_k from p and q in registers (k multiply-subtracts an entry). Per row it reads the
drafts' entries, then one pass over p and q per rejected draft (the sum s_{k+1}; a row that takes draft k stops
there), and after the last rejection one inverse-CDF pass that stops at the block holding the draw: at most
m + 1 reads of p and q for m rejections (FlashInfer's chain kernel reads them about twice per rejection). No host
synchronisation, a static grid of B programs, no data-dependent shapes: capturable in a CUDA graph.

Rounding follows the torch route: r_k entrywise in p's dtype (float16/bfloat16 computed in float32 and rounded, as
torch does), s_k rounded to p's dtype, the acceptance ratios in float64, the first test in the promoted dtype of u
and p; the kernel accumulates s_k and the running sum in float64 (torch: s_k in p's dtype or float32, the CPU's
running sum in float64, CUDA's in p's dtype). Tokens may therefore differ from the torch route where u0 ties a
ratio or u1 u * total ties a running sum to within that rounding (float32: a relative 1e-7; none in the tests' rows),
and on CUDA where torch's compiled addcmul fuses a multiply-add (the kernel is built without FMA contraction, as the
interpreter and torch's CPU ops round). sps's draw threshold u1 * total is in the promoted dtype of u and p, as the
device route and the CPU's search below 8192 tokens form it (the CPU's blocked search rounds u1 to p's dtype first).
Inputs: p and q of one dtype (float16, bfloat16, float32, float64), any row stride; the drafts are clamped to
[0, V - 1]; on the tensors' CUDA device (or under ``TRITON_INTERPRET=1``).

    tokens, index = triton_kernels.rrs(p, q, drafts, u, widths)    # = rrs.verify_uniforms(..., backend="torch")
    tokens, index = triton_kernels.sps(p, q, drafts, u)            # = chains.single_draft(p, q, drafts[:, :1], u)
"""

from __future__ import annotations

import contextlib
import functools

from otlp.backend.triton import available
from otlp.core.errors import InputError

#: entries per block of a pass over a row (p and q, float64 sums in registers), and the warps of a row's program
#: (not yet tuned on a GPU: 16 KiB of float32 p and q in flight per block)
BLOCK = 2048
WARPS = 8

#: dtypes the kernels read (p and q alike)
DTYPES = ("float16", "bfloat16", "float32", "float64")

#: the kernel's jit helpers, bound by :func:`_kernel` on first use (Triton's interpreter resolves a kernel's callees
#: in its module's namespace, not in a closure)
_to = _rnd = _step = _residual = None


def takes(p, q) -> bool:  # noqa: ANN001 - torch tensors
    """Whether ``backend="auto"`` takes the kernel for these rows: CUDA tensors of one of :data:`DTYPES`, the same for
    p and q, with Triton importable."""
    return (p.is_cuda and p.dtype == q.dtype and str(p.dtype).removeprefix("torch.") in DTYPES
            and available())


@functools.cache
def _kernel():  # noqa: ANN202 - made on first use: TRITON_INTERPRET is read when the kernel is defined
    global _to, _rnd, _step, _residual  # noqa: PLW0603 - see their definition
    import triton
    import triton.language as tl

    @triton.jit
    def _to(x, dt: tl.constexpr):  # noqa: ANN001, ANN202
        """``x`` rounded to ``dt``, to nearest even; the 16-bit dtypes through float32, as torch rounds its float32
        results (bfloat16 by its bits: the interpreter's own cast truncates)."""
        if dt.is_bf16():
            b = x.to(tl.float32).to(tl.uint32, bitcast=True)
            b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
            y = b.to(tl.float32, bitcast=True).to(dt)
        elif dt.is_fp16():
            y = x.to(tl.float32).to(dt)
        else:
            y = x.to(dt)
        return y

    @triton.jit
    def _rnd(x, code: tl.constexpr, dt: tl.constexpr):  # noqa: ANN001, ANN202
        """``x`` (float64) rounded to float32 (code 0), float64 (1) or p's dtype (2), held in float64."""
        if code == 0:
            y = x.to(tl.float32).to(tl.float64)
        elif code == 1:
            y = x
        else:
            y = _to(x, dt).to(tl.float64)
        return y

    @triton.jit
    def _step(r, q, s, WIDE: tl.constexpr):  # noqa: ANN001, ANN202
        """One link of the chain on entries ``r`` (p's dtype): ``((r - s q)^+, s q)``, the link and its value where
        it emptied, computed in float32 (float64 for float64 rows) and rounded to p's dtype, as torch's addcmul and
        clamp."""
        if WIDE:
            t = q.to(tl.float64) * s
            r = r.to(tl.float64)
        else:
            t = q.to(tl.float32) * s.to(tl.float32)
            r = r.to(tl.float32)
        return _to(tl.maximum(r - t, 0.0), q.dtype), _to(t, q.dtype)

    @triton.jit
    def _residual(r, q, svec, evec, lanes, k, WIDE: tl.constexpr):  # noqa: ANN001, ANN202
        """r_k from r_0 = p (entries ``r``, ``q`` of any shape): k links with the scales ``svec[j]`` = s_j and empty
        flags ``evec[j]``."""
        for j in range(0, k):
            s = tl.reduce(tl.where(lanes == j, svec, 0.0), 0, tl.standard._sum_combine)
            e = tl.reduce(tl.where(lanes == j, evec, 0), 0, tl.standard._sum_combine)
            kept, back = _step(r, q, s, WIDE)
            r = tl.where(e != 0, back, kept)
        return r

    @triton.jit
    def fused(p_ptr, q_ptr, d_ptr, u_ptr, w_ptr, tok_ptr, idx_ptr, V, sp, sq, sd, su, suc,  # noqa: ANN001, ANN202
              N: tl.constexpr, NP: tl.constexpr, HAS_W: tl.constexpr, RESTORE: tl.constexpr, WIDE: tl.constexpr,
              T0: tl.constexpr, TX: tl.constexpr, U1P: tl.constexpr, BLOCK: tl.constexpr):
        """Row ``program_id`` of the module docstring's chain: ``N`` drafts (``NP`` a power of two >= N), widths
        (``HAS_W``), the emptied-link rule (``RESTORE``: rrs; sps leaves (p - q)^+), the first test's dtype (``T0``)
        and the draw threshold's (``TX``, codes of :func:`_rnd`; ``U1P``: u1 rounded to p's dtype first)."""
        row = tl.program_id(0).to(tl.int64)
        p_row = p_ptr + row * sp
        q_row = q_ptr + row * sq
        dt = p_ptr.dtype.element_ty
        u0 = tl.load(u_ptr + row * su).to(tl.float64)
        u1 = tl.load(u_ptr + row * su + suc).to(tl.float64)
        # no tl.full / tl.zeros / tl.sum / tl.min / tl.max / tl.cumsum: jit functions of triton.language, which an
        # interpreter set after Triton's import (TRITON_INTERPRET=1 in a test) cannot call; tl.reduce and
        # tl.associative_scan with their combine functions are what they expand to
        zero_i = tl.program_id(0) * 0  # int32 scalars
        one = u0 * 0.0 + 1.0  # float64 scalars
        m = zero_i + N
        if HAS_W:
            m = tl.minimum(tl.maximum(tl.load(w_ptr + row).to(tl.int32), 0), N)
        lanes = tl.arange(0, NP)
        svec = lanes.to(tl.float64) * 0.0  # s_j, rounded to p's dtype
        evec = lanes * 0  # 1 where link j emptied
        s = one  # s_k
        tot = one * 0.0  # sum r_k (the draw's total)
        reach = one  # prod_{i<k} (1 - a_i)
        slot = zero_i - 1
        k = zero_i
        offs = tl.arange(0, BLOCK)
        while (k < m) & (slot < 0):
            x = tl.minimum(tl.maximum(tl.load(d_ptr + row * sd + k).to(tl.int64), 0), V - 1)
            px = tl.load(p_row + x)
            qx = tl.load(q_row + x)
            num = _residual(px, qx, svec, evec, lanes, k, WIDE).to(tl.float64)
            den = s * qx.to(tl.float64)
            a = tl.where(den > 0, num / tl.where(den > 0, den, 1.0), tl.where(num > 0, 1.0, 0.0))
            reach = reach * (1.0 - tl.minimum(tl.maximum(a, 0.0), 1.0))
            if T0 == 1:  # (the interpreter's calls are slow)
                first = u0 * qx.to(tl.float64) < px.to(tl.float64)
            else:
                first = _rnd(_rnd(u0, T0, dt) * qx.to(tl.float64), T0, dt) < px.to(tl.float64)
            take = tl.where(k == 0, first, u0 < 1.0 - reach)
            slot = tl.where(take, k, slot)
            if slot < 0:  # rejected: one pass for s_{k+1} (and the emptied link's sum)
                kept = one * 0.0
                back = one * 0.0
                for start in range(0, V, BLOCK):
                    cols = start + offs
                    inside = cols < V
                    pb = tl.load(p_row + cols, mask=inside, other=0.0)
                    qb = tl.load(q_row + cols, mask=inside, other=0.0)
                    rb = _residual(pb, qb, svec, evec, lanes, k, WIDE)
                    kb, bb = _step(rb, qb, s, WIDE)
                    kept += tl.reduce(kb.to(tl.float64), 0, tl.standard._sum_combine)
                    back += tl.reduce(bb.to(tl.float64), 0, tl.standard._sum_combine)
                empty = (kept <= 0) & RESTORE
                svec = tl.where(lanes == k, s, svec)
                evec = tl.where(lanes == k, empty.to(tl.int32), evec)
                tot = tl.where(empty, back, kept)
                s = tl.where(empty, s, _rnd(kept, 2, dt))
            k += 1
        if slot >= 0:
            token = tl.minimum(tl.maximum(tl.load(d_ptr + row * sd + slot).to(tl.int64), 0), V - 1)
        else:
            if m == 0:  # width 0: the draw from p
                for start in range(0, V, BLOCK):
                    cols = start + offs
                    pb = tl.load(p_row + cols, mask=cols < V, other=0.0).to(tl.float64)
                    tot += tl.reduce(pb, 0, tl.standard._sum_combine)
            total = _rnd(tot, 2, dt)
            if U1P:  # u1 in p's dtype, then u1 * total in it (rrs.py)
                thresh = _rnd(_rnd(u1, 2, dt) * total, 2, dt)
            else:  # in the promoted dtype of u and p (chains.single_draft)
                thresh = _rnd(_rnd(u1, TX, dt) * total, TX, dt)
            # the first index whose running sum (in p's dtype) exceeds thresh, clamped to the first that reaches the
            # total (xp.inverse_cdf); the last positive entry where rounding leaves neither (never in the tests)
            found = zero_i.to(tl.int64) + V
            last = zero_i.to(tl.int64) - 1
            carry = one * 0.0
            start = zero_i
            while (start < V) & (found == V):
                cols = start + offs
                inside = cols < V
                pb = tl.load(p_row + cols, mask=inside, other=0.0)
                qb = tl.load(q_row + cols, mask=inside, other=0.0)
                wb = _residual(pb, qb, svec, evec, lanes, m, WIDE).to(tl.float64)
                run = _rnd(carry + tl.associative_scan(wb, 0, tl.standard._sum_combine), 2, dt)
                hit = inside & ((run > thresh) | (run >= total))
                first_hit = tl.reduce(tl.where(hit, cols, V), 0, tl.standard._elementwise_min)
                last_positive = tl.reduce(tl.where(inside & (wb > 0), cols, -1), 0, tl.standard._elementwise_max)
                found = tl.minimum(found, first_hit.to(tl.int64))
                last = tl.maximum(last, last_positive.to(tl.int64))
                carry += tl.reduce(wb, 0, tl.standard._sum_combine)
                start += BLOCK
            token = tl.where(found < V, found, tl.maximum(last, 0))
        tl.store(tok_ptr + row, token.to(tl.int64))
        tl.store(idx_ptr + row, slot.to(tl.int64))

    return fused


def _code(dtype) -> int:  # noqa: ANN001 - a torch dtype -> _rnd's code
    import torch

    return {torch.float32: 0, torch.float64: 1}.get(dtype, 2)


def _launch(p, q, drafts, u, widths, n: int, restore: bool, u1_in_p: bool):  # noqa: ANN001, ANN202
    import torch

    if p.dtype != q.dtype or str(p.dtype).removeprefix("torch.") not in DTYPES:
        raise InputError(f"the fused kernels take p and q of one dtype among {', '.join(DTYPES)}, got {p.dtype} and "
                         f"{q.dtype}")
    B, V = p.shape
    p = p if p.stride(1) == 1 else p.contiguous()
    q = q if q.stride(1) == 1 else q.contiguous()
    tokens = torch.empty(B, dtype=torch.int64, device=p.device)
    index = torch.empty(B, dtype=torch.int64, device=p.device)
    if B == 0:
        return tokens, index
    drafts = drafts if drafts.stride(1) == 1 else drafts.contiguous()  # [B, n], a row's drafts side by side
    w = tokens if widths is None else widths.contiguous()  # [B] (not read without widths)
    promoted = torch.promote_types(u.dtype, p.dtype)
    with torch.cuda.device(p.device) if p.is_cuda else contextlib.nullcontext():  # Triton launches on the current
        _kernel()[(B,)](p, q, drafts, u, w, tokens, index, V, p.stride(0), q.stride(0), drafts.stride(0),
                        u.stride(0), u.stride(1), N=n, NP=max(2, 1 << (n - 1).bit_length()),
                        HAS_W=widths is not None, RESTORE=restore, WIDE=p.dtype == torch.float64, T0=_code(promoted),
                        TX=_code(p.dtype if u1_in_p else promoted), U1P=u1_in_p,
                        BLOCK=min(BLOCK, max(16, 1 << (V - 1).bit_length())), num_warps=WARPS,
                        enable_fp_fusion=False)  # no fused multiply-add: the chain rounds as torch's CPU ops do
    return tokens, index


def rrs(p, q, drafts, u, widths=None):  # noqa: ANN001, ANN201 - torch tensors
    """:func:`otlp.verifiers.rrs.verify_uniforms` with replacement in one kernel: ``p, q [B, V]``, ``drafts [B, n]``,
    ``u [B, 2]`` in [0, 1) (as :func:`otlp.verifiers.base.check_uniforms` leaves them), ``widths [B]`` (optional,
    0..n) -> ``(tokens int64 [B], accepted_index int64 [B])``, -1 where the token came from the residual."""
    return _launch(p, q, drafts, u, widths, drafts.shape[1], restore=True, u1_in_p=True)


def sps(p, q, drafts, u):  # noqa: ANN001, ANN201 - torch tensors
    """:func:`otlp.optimal.chains.single_draft` on ``drafts[:, :1]`` in one kernel (accept iff u0 q(x) < p(x), else
    the inverse CDF of (p - q)^+ at u1, in their promoted dtype): ``(tokens int64 [B], accepted_index int64 [B])``."""
    return _launch(p, q, drafts, u, None, 1, restore=False, u1_in_p=False)
