"""What torch.compile makes of the optimal rule's device route, measured where no GPU is (issue 41).

The Triton route (``get("optimal")`` on CUDA) is the bucket rule of otlp/optimal/device_buckets.py: three passes over
p and q, then ~2,600 small torch operations a call (B = 64, V = 128k, n = 4: ``bytes_moved.py --ops``), each an eager
kernel launch. ``compile=True`` hands those operations to torch.compile. Here the same rule runs on CPU tensors with
its torch passes, every row refined once on 4 gathered rows and no fallback (``DB.decide(..., fallback=False,
refine_rows=4)``), eager and compiled by inductor, one thread: the time of each call (median), whether the compiled
call gives the eager tokens, slots and rounds, the graphs dynamo made, the kernels inductor generated and the bytes
its kernels read and write by its own count (``num_bytes_accessed``) over the read floor (p and q float32 read once),
beside the eager call's ops and bytes on meta tensors (``bytes_moved.ByteCounter``).

Inductor's CPU code is built with ``cpp.simdlen = 1`` (no vector code): gcc 12 here failed with an internal compiler
error (``gimple_duplicate_bb``) on the vectorised kernels of this graph. A CPU proxy: on a GPU inductor emits Triton
kernels instead, and the launches it saves count for more.

    python benchmarks/compiled_rule.py                 # B = 8, V = 32k, n = 4, sigma 0.5 (compiles ~4 minutes)
    python benchmarks/compiled_rule.py --B 64 --V 32000 --n 2 4
    python benchmarks/compiled_rule.py --passes one-read --B 64 --V 128000   # the Triton route's rest, compiled
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bytes_moved  # noqa: E402 - benchmarks/bytes_moved.py: the eager call's bytes, on meta tensors
import verifiers  # noqa: E402 - benchmarks/verifiers.py, beside this script: its rows

from otlp.optimal import device_buckets as DB  # noqa: E402

#: ``--passes``: the passes over p and q as torch operations, or as the stand-ins of ``bytes_moved.py`` for the Triton
#: route's kernels (one read of p and q each, zeros for their results: the rest of the rule then runs on meaningless
#: buckets with the same shapes, so its kernels and bytes are the route's, its tokens not)
PASSES = {"torch": DB.TORCH, "one-read": bytes_moved.ONE_READ}


def _rule(p, q, w, U, passes=DB.TORCH):  # noqa: ANN001, ANN202
    d = DB.decide(p, q, w, U, fallback=False, refine_rows=4, passes=passes)
    return d.tokens, d.index, d.rounds


def _median_ms(fn, reps: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def eager_bytes(B: int, V: int, n: int, rule) -> tuple[float, int]:  # noqa: ANN001
    """``(bytes / read floor, ops)`` of the eager call on meta tensors (:class:`bytes_moved.ByteCounter`)."""
    from otlp.verifiers.base import validation

    p, q = torch.empty(B, V, device="meta"), torch.empty(B, V, device="meta")
    w, U = torch.empty(B, n, device="meta", dtype=torch.int64), torch.empty(B, 2, device="meta", dtype=torch.float64)
    with validation(False), bytes_moved.ByteCounter() as counted:
        rule(p, q, w, U)
    return counted.bytes / (2 * B * V * 4), counted.ops


def measure(B: int, V: int, n: int, sigma: float, reps: int, passes: str = "torch") -> dict:
    import torch._inductor.config as inductor
    from torch._inductor import metrics

    inductor.cpp.simdlen = 1
    import logging

    counter = logging.getLogger("torch._inductor.compile_fx.__inductor_metrics")  # inductor adds up its kernels' bytes
    counter.setLevel(logging.INFO)  # only where this logger is enabled; its lines go nowhere
    counter.propagate = False
    counter.addHandler(logging.NullHandler())
    p, q, w = verifiers._inputs(B, V, n, "cpu", 0, sigma)
    U = torch.rand(B, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    graphs = []

    def backend(gm, example_inputs):  # noqa: ANN001, ANN202 - inductor, counting the graphs it is given
        from torch._inductor.compile_fx import compile_fx

        graphs.append(gm)
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    metrics.reset()
    rule = functools.partial(_rule, passes=PASSES[passes])
    compiled = torch.compile(rule, backend=backend, dynamic=False)
    start = time.perf_counter()
    got = compiled(p, q, w, U)
    compile_s = time.perf_counter() - start
    want = rule(p, q, w, U)
    eager_floor, eager_ops = eager_bytes(B, V, n, rule)
    return {"eager_floor": eager_floor, "eager_ops": eager_ops, "B": B, "V": V, "n": n, "sigma": sigma,
            "compile_s": compile_s,
            "same": all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), "graphs": len(graphs),
            "kernels": metrics.generated_kernel_count, "bytes_floor": metrics.num_bytes_accessed / (2 * B * V * 4),
            "eager_ms": _median_ms(lambda: rule(p, q, w, U), reps),
            "compiled_ms": _median_ms(lambda: compiled(p, q, w, U), reps)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, nargs="+", default=[8])
    ap.add_argument("--V", type=int, nargs="+", default=[32_000])
    ap.add_argument("--n", type=int, nargs="+", default=[4])
    ap.add_argument("--sigma", type=float, default=0.5, help="the close draft's noise (benchmarks/verifiers.py)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--passes", choices=list(PASSES), default="torch",
                    help="the passes over p and q: torch's, or one read each as the Triton route's kernels make "
                         "(bytes_moved.py's stand-ins; the tokens are then meaningless, the rest's cost is not)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("B      V  n  compile s  graphs  eager ops  kernels  eager bytes / floor  compiled  eager ms  compiled ms  "
          "eager / compiled  same outputs", flush=True)
    for B in args.B:
        for V in args.V:
            for n in args.n:
                r = measure(B, V, n, args.sigma, args.reps, args.passes)
                print(f"{B:<2} {V:>6} {n:>2} {r['compile_s']:>10.0f} {r['graphs']:>7} {r['eager_ops']:>10} "
                      f"{r['kernels']:>8} {r['eager_floor']:>20.1f} {r['bytes_floor']:>9.1f} "
                      f"{r['eager_ms']:>9.2f} {r['compiled_ms']:>12.2f} {r['eager_ms'] / r['compiled_ms']:>17.2f}  "
                      f"{r['same']}", flush=True)


if __name__ == "__main__":
    main()
