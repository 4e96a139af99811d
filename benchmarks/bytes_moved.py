"""Device cost without a device: the bytes each verifier's torch route moves, over the read floor (issue 41).

The routes run on ``device="meta"`` tensors (shapes and dtypes, no data) under a ``TorchDispatchMode`` that adds up,
for every aten op that is not a view, the bytes of its tensor inputs and outputs: the traffic of an eager GPU call,
op by op (a fused kernel moves less; torch.sort counts as one op). The read floor is p and q read once, 2 B V bytes
of their dtype. On an H200 the ratio tracked the measured time (issue 41: 31.6x predicted, 32x measured).

    python benchmarks/bytes_moved.py                      # B = 64, V = 128k, n = 2, 4, 8
    python benchmarks/bytes_moved.py --B 8 --V 32000 --n 4

The bucket rule without the sort (otlp/optimal/device_buckets.py, its default buffer K and one refinement round;
static shapes): ``buckets`` (torch passes, the refinement round on ``REFINE_ROWS`` gathered rows, the fallback on
one), ``buckets_cert`` (every row refined, no fallback), ``buckets_r0`` (no refinement round, no fallback),
``buckets_fused`` and ``buckets_fused_r0`` (as ``buckets`` and ``buckets_r0`` with the Triton passes of
otlp/optimal/device_passes.py counted as one read of p and q each, the roots as ``sortfree_fused``'s),
``buckets_route`` (``get("optimal")``'s route on CUDA where Triton imports: as ``buckets_fused`` with the undecided
rows in the fallback kernel of otlp/optimal/device_fallback.py, which meta tensors cannot run: counted as its read of
the B row flags when no row needs it; a row that does costs it log2(Vp) (log2(Vp) + 1) / 2 sort stages over the row's
keys and ids, 32 Vp bytes each, and about ten passes over the row: ~640 MB at V = 128k, in one program).

Routes: ``optimal`` (the device route, ``backend="torch"``), ``sortfree`` (otlp/optimal/sortfree.py with its
full-chain fallback on every row, the exact static route), ``sortfree_F1`` (the fallback on one gathered row),
``sortfree_cert`` (the certificate alone, no fallback: the part that replaces the chain), ``sortfree_fused`` (the
certificate with its roots in one kernel, otlp/optimal/triton_roots.py, which meta tensors cannot run: counted as one
``addcmul`` over the root's arrays, 4 of the kernel's 5), ``rrs`` (its coins), ``rrs_uniforms`` and ``sps`` (the
caller-uniforms torch routes that the fused kernels of otlp/verifiers/triton_kernels.py replace on CUDA),
``rrs_wor``, ``kseq``, ``optimal_wor_top10`` (``get("optimal_wor")``'s static route, the route on a device, for a
draft filtered to its top ``WOR_TOP_K`` = 10 tokens, n drafts without replacement: its plan's Newton steps work on
the C(10, n) sets, not on [B, V]), ``optimal_wor_triton`` (the same with the plan's Newton steps in one Triton
kernel, otlp/optimal/wor_triton.py, its route on CUDA: counted as one op reading the sets' members and masses).

The fused kernels cannot run on meta tensors either; their reads depend on the outcomes: :func:`fused_reads` counts
them from the accepted indices of the same rows (the torch route's, which the kernels equal).
"""

from __future__ import annotations

import argparse

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from otlp.optimal import device_buckets as DB
from otlp.optimal import sortfree as SF
from otlp.optimal import wor_triton
from otlp.optimal.sampler import verify
from otlp.verifiers import get
from otlp.verifiers.base import validation

#: the support size of the without-replacement route's draft (``optimal_wor_top10``)
WOR_TOP_K = 10
#: ops that read their input at an index only: their input counts as many bytes as their output
INDEXED_READS = ("gather", "index", "index_select", "take_along_dim")
#: allocations and a Python number wrapped as a tensor (no kernel on a device), not traffic
NO_TRAFFIC = ("empty", "new_empty", "empty_like", "empty_strided", "new_empty_strided", "scalar_tensor")


class ByteCounter(TorchDispatchMode):
    """Adds up the bytes of the tensor inputs and outputs of every aten op that is not a view (``bytes``), and the
    bytes per op name (``by_op``): a gather's source as the entries it reads (``INDEXED_READS``), allocations as
    nothing (``NO_TRAFFIC``)."""

    def __init__(self, raw: bool = False) -> None:
        super().__init__()
        self.raw = raw  # every input whole (a gather's source too; the count)
        self.bytes = 0
        self.ops = 0  # the ops counted: an eager GPU call's kernel launches, about
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if not func.is_view and (self.raw or name not in NO_TRAFFIC):
            inputs = (args, kwargs or {})
            if name in INDEXED_READS and not self.raw:  # the source: only the entries read, as many as the output holds
                inputs = (args[1:], kwargs or {}, out)
            seen = 0
            for x in torch.utils._pytree.tree_leaves((inputs, out)):
                if isinstance(x, torch.Tensor):
                    seen += x.numel() * x.element_size()
            self.bytes += seen
            self.ops += 1
            self.by_op[name] = self.by_op.get(name, 0) + seen
        return out


def _one_pass_roots(H, L, r, gap, n: int, steps: int):  # noqa: ANN001, ANN202, ARG001
    """A stand-in for the fused root kernel on meta tensors: one elementwise op over the root's arrays."""
    H, L, r = torch.broadcast_tensors(H, L, r)
    return torch.addcmul(H, L, r)


def _one_read_histogram(p, q, inv_p, inv_q, sc):  # noqa: ANN001, ANN202, ARG001
    """A stand-in for the Triton histogram on meta tensors: one read of p and of q, the [B, NB] sums written."""
    B = p.shape[0]
    p.sum(-1), q.sum(-1)
    z = torch.zeros(B, sc.NB, dtype=torch.float64, device=p.device)
    return torch.zeros(B, sc.NB, dtype=torch.int64, device=p.device), z, torch.zeros_like(z)


def _one_read_compact(p, q, inv_p, inv_q, sel, sc, K: int):  # noqa: ANN001, ANN202, ARG001
    """A stand-in for the Triton compaction on meta tensors: one read of p and of q, the [B, K] buffers written."""
    B = p.shape[0]
    p.sum(-1), q.sum(-1)
    z = torch.zeros(B, K, dtype=torch.float64, device=p.device)
    return (torch.full((B, K), -1, dtype=torch.int64, device=p.device), z, torch.zeros_like(z),
            torch.zeros(B, dtype=torch.int64, device=p.device))


#: the rows of the bucket rule's refinement round (gathered) and of its fallback (one row)
REFINE_ROWS = 4


def _one_read_segments(p, q, inv_p, inv_q, part, sc, dr):  # noqa: ANN001, ANN202, ARG001
    """A stand-in for the Triton segments kernel on meta tensors: one read of p and of q, the [B, 2n] sums written."""
    B, n = dr.w.shape
    p.sum(-1), q.sum(-1)
    z = torch.zeros(B, 2 * n, dtype=torch.float64, device=p.device)
    return z, torch.zeros_like(z), torch.zeros(B, 2 * n, dtype=torch.int64, device=p.device)


def _kernel_flags(d: DB.Decision):  # noqa: ANN202
    """A stand-in for the fallback kernel when no row needs it: the row flags read, the tokens kept."""
    (d.rounds > DB.ROUNDS).to(torch.uint8).clone()
    return d.tokens, d.index


def _one_launch_newton(theta, goal, fixed, present, sets, live, probs, failed, **options):  # noqa: ANN001, ANN202, ARG001
    """A stand-in for the plan's Newton kernel (otlp/optimal/wor_triton.py) on meta tensors: the sets' members and
    masses read once, the choices and the residuals written (the kernel walks the sets once per evaluation, about
    37 times, from the cache: [B, n + 1, C(K, n)] is small)."""
    n = sets.shape[1]
    return torch.mul(live[:, :n].transpose(1, 2), probs[:, :, None]), theta.amax(1)


def _wor_triton(p, q, d, u):  # noqa: ANN001, ANN202
    """``get("optimal_wor")``'s route on CUDA where Triton imports (backend "triton"), its kernel counted as
    :func:`_one_launch_newton`."""
    from otlp.verifiers.optimal_wor import static_sample

    kernel, wor_triton.newton = wor_triton.newton, _one_launch_newton
    try:
        return static_sample(p, q, d, u, None, max(WOR_TOP_K, d.shape[1]), True)
    finally:
        wor_triton.newton = kernel


#: the Triton passes as counted on meta tensors (otlp/optimal/device_passes.py: each reads p and q once)
ONE_READ = DB.Passes(DB.inverse_sums_one_read, _one_read_histogram, _one_read_compact, _one_read_segments)


def routes(n: int) -> dict[str, object]:
    """name -> fn(p, q, drafts, u) on meta tensors."""
    return {
        "optimal": lambda p, q, d, u: verify(p, q, d, u, backend="torch"),
        "buckets": lambda p, q, d, u: DB.verify(p, q, d, u, refine_rows=REFINE_ROWS, fallback_rows=1),
        "buckets_cert": lambda p, q, d, u: DB.verify(p, q, d, u, fallback=False),
        "buckets_r0": lambda p, q, d, u: DB.verify(p, q, d, u, fallback=False, rounds=0),
        "buckets_fused": lambda p, q, d, u: DB.verify(p, q, d, u, refine_rows=REFINE_ROWS, fallback_rows=1,
                                                      passes=ONE_READ, roots=_one_pass_roots),
        "buckets_fused_r0": lambda p, q, d, u: DB.verify(p, q, d, u, fallback=False, rounds=0, passes=ONE_READ,
                                                         roots=_one_pass_roots),
        "buckets_route": lambda p, q, d, u: _kernel_flags(DB.decide(p, q, d, u, refine_rows=DB.ROUTE["refine_rows"],
                                                                    fallback=False, passes=ONE_READ,
                                                                    roots=_one_pass_roots)),
        "sortfree": lambda p, q, d, u: SF.verify(p, q, d, u),
        "sortfree_F1": lambda p, q, d, u: SF.verify(p, q, d, u, fallback_rows=1),
        "sortfree_cert": lambda p, q, d, u: SF.verify(p, q, d, u, fallback=False),
        "sortfree_fused": lambda p, q, d, u: SF.verify(p, q, d, u, fallback=False, roots=_one_pass_roots),
        "rrs": lambda p, q, d, u: get("rrs").sample(p, q, d),
        "rrs_uniforms": lambda p, q, d, u: get("rrs").sample(p, q, d, uniforms=u, backend="torch"),
        "sps": lambda p, q, d, u: get("sps").sample(p, q, d, uniforms=u, backend="torch"),
        "rrs_wor": lambda p, q, d, u: get("rrs_wor").sample(p, q, d),
        "kseq": lambda p, q, d, u: get("kseq").sample(p, q, d),
        "optimal_wor_top10": lambda p, q, d, u: get("optimal_wor").sample(p, q, d, uniforms=u, backend="torch",
                                                                        top_k=max(WOR_TOP_K, d.shape[1])),
        "optimal_wor_triton": _wor_triton,
    }


def fused_reads(index, n: int) -> tuple[float, float]:  # noqa: ANN001 - a tensor [B] of accepted indices
    """``(mean, max)`` over the rows of the reads of p and q, over the read floor, that the fused kernels of
    otlp/verifiers/triton_kernels.py make for rows with these outcomes (``index [B]``: the accepted draft, -1 for
    the residual, as ``sample`` returns it): a row that takes draft k made k passes (one sum per rejected draft), a
    row that rejects all n drafts n + 1 (the draw's pass counted whole, an upper bound: it stops at the draw's
    block); the drafts' entries and the uniforms are not counted. ``n = 1`` is sps (0 or 2 passes). On a GPU with
    one program per row the slowest row (``max``) sets the time while B is at most the number of SMs."""
    passes = torch.where(index >= 0, index, n + 1).double()  # [B]
    return float(passes.mean()), float(passes.max())


def measure(B: int, V: int, n: int, dtype=torch.float32, raw: bool = False,  # noqa: ANN001
            ops: bool = False) -> dict[str, float]:
    """bytes moved / read floor of each route at one point (``raw``: :class:`ByteCounter`'s whole-input count;
    ``ops``: instead, the number of ops counted, about an eager GPU call's kernel launches)."""
    p, q = torch.empty(B, V, device="meta", dtype=dtype), torch.empty(B, V, device="meta", dtype=dtype)
    drafts = torch.empty(B, n, device="meta", dtype=torch.int64)
    u = torch.empty(B, 2, device="meta", dtype=torch.float64)
    floor = 2 * B * V * p.element_size()
    out = {}
    with validation(False):
        for name, fn in routes(n).items():
            with ByteCounter(raw) as c:
                fn(p, q, drafts, u)
            out[name] = c.ops if ops else c.bytes / floor
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--V", type=int, default=128_000)
    ap.add_argument("--n", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--raw", action="store_true", help="count every input whole (a gather's whole source)")
    ap.add_argument("--ops", action="store_true", help="count the ops instead (about an eager GPU call's kernel "
                                                         "launches, each a few microseconds whatever its size)")
    args = ap.parse_args(argv)
    names = list(routes(2))
    if args.ops:
        print(f"non-view ops (eager kernel launches), B = {args.B}, V = {args.V:,}, meta device")
    else:
        print(f"bytes moved / read floor (p, q float32 read once), B = {args.B}, V = {args.V:,}, meta device"
              + (", every input whole" if args.raw else ", a gather's source as the entries it reads"))
    print(f"{'n':>2} " + " ".join(f"{x:>14}" for x in names))
    for n in args.n:
        r = measure(args.B, args.V, n, raw=args.raw, ops=args.ops)
        print(f"{n:>2} " + " ".join(f"{r[x]:>14.1f}" for x in names), flush=True)


if __name__ == "__main__":
    main()
