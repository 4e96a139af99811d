"""The cell rule's roots (:func:`.chains.slot_mass`) as one fused Triton kernel (issue 41, a first kernel).

:mod:`.sortfree` decides the slot from roots F of the class chain's slot equation on ``[B, V / cell]`` cells and
``[B, (n + 1) (cell + 1)]`` positions; through torch each root is ~100 eager ops (bounds, then ``NEWTON_STEPS``
Newton steps of degree-n polynomials), here one kernel that reads H, L, r, gap and writes y:

    the largest y in [0, L] with (H + y)^n - H^n - r y = gap   (g convex in y; Newton from an upper bound),

with the same start as :func:`.chains.slot_mass` (the smaller of the quadratic bound y_A and u_B - H) and the same
number of steps; the polynomial D(y) = ((H + y)^n - H^n) / y = sum_{i < n} (H + y)^i H^(n-1-i) is summed as
S_t = S_(t-1) (H + y) + H^t (no cancellation: positive terms), its derivative alongside. Equal to the torch roots to
rounding (tests/optimal/test_sortfree_triton.py, under ``TRITON_INTERPRET=1`` on the CPU). ``pip install triton``
(shipped with torch's CUDA builds); n <= ``MAX_N``.

    decide(P, Q, w, U, roots=triton_roots.slot_mass)
"""

from __future__ import annotations

import functools

from otlp.backend.triton import opaque
from otlp.optimal import chains as C

#: the kernel's largest n (unrolled loops of n terms); above it :func:`slot_mass` takes the torch route.
MAX_N = 16
BLOCK = 256


@functools.cache
def _kernel():  # noqa: ANN202 - made on first use: TRITON_INTERPRET is read when the kernel is defined
    import triton
    import triton.language as tl

    @triton.jit
    def roots(H_ptr, L_ptr, r_ptr, gap_ptr, out_ptr, N, n: tl.constexpr, steps: tl.constexpr,  # noqa: ANN001, ANN202
              BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < N
        H = tl.load(H_ptr + i, mask=m, other=0.0)
        L = tl.load(L_ptr + i, mask=m, other=0.0)
        r = tl.load(r_ptr + i, mask=m, other=0.0)
        gap = tl.maximum(tl.load(gap_ptr + i, mask=m, other=0.0), 0.0)
        if n == 1:
            below = r < 1.0
            y = tl.where(below, gap / tl.where(below, 1.0 - r, 1.0), L)
        elif n == 2:
            b = 2.0 * H - r
            root = tl.sqrt(b * b + 4.0 * gap)
            den = b + root
            y = tl.where(b >= 0, 2.0 * gap / tl.where(den > 0, den, 1.0), 0.5 * (root - b))
        else:
            Hn2 = H
            for _ in tl.static_range(n - 3):
                Hn2 = Hn2 * H  # H^(n-2)
            b = n * Hn2 * H - r
            D1 = (n * (n - 1) // 2) * Hn2
            root = tl.sqrt(b * b + 4.0 * D1 * gap)
            den = b + root
            y_a = tl.where(b >= 0, tl.where(den > 0, 2.0 * gap / tl.where(den > 0, den, 1.0), 0.0),
                           tl.where(D1 > 0, (root - b) / tl.where(D1 > 0, 2.0 * D1, 1.0), float("inf")))
            c = tl.maximum(gap + Hn2 * H * H - r * H, 0.0)
            c2, r2 = 2.0 * c, 2.0 * tl.maximum(r, 0.0)  # u_B = max(c2^(1/n), r2^(1/(n-1))), 0^x = 0
            u_b = tl.maximum(tl.where(c2 > 0, tl.exp(tl.log(tl.where(c2 > 0, c2, 1.0)) / n), 0.0),
                             tl.where(r2 > 0, tl.exp(tl.log(tl.where(r2 > 0, r2, 1.0)) / (n - 1)), 0.0))
            y = tl.maximum(tl.minimum(tl.minimum(y_a, u_b - H), L), 0.0)
            for _ in tl.static_range(steps):
                a = H + y
                S = y * 0.0 + 1.0  # D(y) by S_t = S_(t-1) a + H^t (no tl.full: the interpreter, set late, lacks it)
                T = y * 0.0  # dD/da alongside: T_t = T_(t-1) a + S_(t-1)
                Ht = S
                for _ in tl.static_range(n - 1):
                    Ht = Ht * H
                    T = T * a + S
                    S = S * a + Ht
                Dr = S - r
                g = Dr * y - gap
                dg = Dr + T * y
                ok = dg > 0
                y = tl.where(ok, tl.minimum(tl.maximum(y - g / tl.where(ok, dg, 1.0), 0.0), L), y)
        y = tl.minimum(tl.maximum(y, 0.0), L)
        tl.store(out_ptr + i, y, mask=m)

    return roots


@opaque  # (its launch a graph break under torch.compile; the compiled route takes torch's roots instead)
def slot_mass(H, L, r_below, gap, n: int, steps: int | None = None):  # noqa: ANN001, ANN201 - float64 tensors
    """:func:`.chains.slot_mass` on float64 tensors of one shape (broadcast here) through the kernel; n above
    ``MAX_N`` through torch."""
    import torch

    if n > MAX_N:
        return C.slot_mass(H, L, r_below, gap, n, steps)
    H, L, r_below, gap = (x.contiguous().to(torch.float64) for x in torch.broadcast_tensors(H, L, r_below, gap))
    out = torch.empty_like(H)
    N = H.numel()
    if N:
        _kernel()[(-(-N // BLOCK),)](H, L, r_below, gap, out, N, n=n,
                                     steps=C.NEWTON_STEPS if steps is None else steps, BLOCK=BLOCK,
                                     enable_fp_fusion=False)  # no fused multiply-add, as the torch roots
    return out
