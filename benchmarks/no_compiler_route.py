"""The optimal rule's CPU route without the C kernels, beside the torch bucket rule and the C route (issue 41).

Where otlp's C kernels are not built (a wheel built without a compiler, or ``OTLP_NATIVE=0``), ``get("optimal")`` on
CPU tensors gives every row the full sort (:mod:`otlp.optimal.chains` in numpy, the reference). A numpy copy of the
bucket route ran there until issue 41 retired it: at commit b90ca99 this script measured it beside the full sort at
the 16 default points, one thread, and it took 0.33-0.51x the full sort's time on loose drafts but 1.7-6.5x on close
ones (sigma 0.5; B = 64, V = 128k, n = 4: 5.3 s against 0.81 s). This times, per grid point, one call of each route
below, one thread by default (median of ``--reps`` after a warm-up, the calls interleaved):

* ``floor``: ``p.sum() + q.sum()``, reading the inputs once;
* ``sorted``: ``sampler.verify`` with the kernels off: every row the full sort;
* ``torch``: the bucket rule's torch reference, :func:`otlp.optimal.device_buckets.decide` on the CPU tensors, with
  its host mode (refinement and fallback on exactly the undecided rows, ``"gather"``, and the sampler's row sums,
  ``inverse=``; ``--no-torch`` leaves it out);
* ``C``: ``sampler.verify`` with the kernels (where they are built): the host's fast route, for scale;

and prints ``torch / sorted`` and how many rows of ``decide`` took the fallback and differ from the full sort
(``verify(backend="torch")``, same uniforms). Rows: tests/optimal/instances.lm_rows, float32.

    python benchmarks/no_compiler_route.py                       # B 8, 64; V 32k, 128k; n 2, 4; loose and 0.5
    python benchmarks/no_compiler_route.py --B 8 --V 32000 --drafts loose --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from otlp.backend import native
from otlp.optimal import buckets as BK
from otlp.optimal import device_buckets as DB
from otlp.optimal import sampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.optimal.instances import lm_rows  # noqa: E402


def _without_kernels(fn):  # noqa: ANN001, ANN202
    """``fn`` run with ``OTLP_NATIVE=0`` (:func:`otlp.backend.native.enabled` reads it at each call)."""
    def run():  # noqa: ANN202
        before = os.environ.get("OTLP_NATIVE")
        os.environ["OTLP_NATIVE"] = "0"
        try:
            return fn()
        finally:
            if before is None:
                del os.environ["OTLP_NATIVE"]
            else:
                os.environ["OTLP_NATIVE"] = before
    return run


def _torch_route(p, q, drafts, u):  # noqa: ANN001, ANN202
    """``decide`` in its host mode, normalised by the sums the CPU sampler takes (:func:`.buckets.inverse_sums`)."""
    inverse = tuple(torch.from_numpy(BK.inverse_sums(x.numpy()))[:, None] for x in (p, q))
    return DB.decide(p, q, drafts, u, refine_rows="gather", fallback_rows="gather", inverse=inverse)


def _times(fns: dict, reps: int) -> dict[str, float]:
    """Median seconds of each call of ``fns`` (one warm-up each; the calls interleaved round-robin)."""
    for fn in fns.values():
        fn()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in out.items()}


def _point(B: int, V: int, n: int, draft: str, reps: int,
           torch_route: bool = True) -> tuple[dict[str, float], int, int]:
    """One grid point: the routes' seconds (:func:`_times`), and the rows of ``decide`` that took the fallback and
    that differ from the full sort."""
    p, q, drafts, u = lm_rows(B, V, 17 * n + V, draft, n)
    u = u.double()
    fns = {"floor": lambda: p.sum() + q.sum(),
           "sorted": _without_kernels(lambda: sampler.verify(p, q, drafts, u))}
    if torch_route:
        fns["torch"] = lambda: _torch_route(p, q, drafts, u)
    if native.library() is not None:
        fns["C"] = lambda: sampler.verify(p, q, drafts, u)
    t = _times(fns, reps)
    if not torch_route:
        return t, -1, -1
    d = _torch_route(p, q, drafts, u)
    want = sampler.verify(p, q, drafts, u, backend="torch")
    differ = int(((d.tokens != want[0]) | (d.index != want[1])).sum())
    return t, int((d.rounds > DB.ROUNDS).sum()), differ


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--V", type=int, nargs="+", default=[32_000, 128_000])
    ap.add_argument("--n", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--drafts", nargs="+", default=["loose", "0.5"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-torch", action="store_true", help="leave out the torch route (decide), the slowest")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"{'V':>7} {'B':>3} {'n':>2} {'draft':>6} {'floor':>7} {'sorted':>8} {'torch':>8} {'C':>8} "
          f"{'torch/sorted':>12} {'fallback':>8} {'differ':>6}   (ms, {args.threads} thread(s))")
    for V in args.V:
        for B in args.B:
            for n in args.n:
                for draft in args.drafts:
                    t, fallback, differ = _point(B, V, n, draft, args.reps, not args.no_torch)
                    ratio = f"{t['torch'] / t['sorted']:>11.2f}x" if "torch" in t else f"{'-':>12}"
                    c, tt = (f"{t[k] * 1e3:>8.1f}" if k in t else f"{'-':>8}" for k in ("C", "torch"))
                    print(f"{V:>7} {B:>3} {n:>2} {draft:>6} {t['floor'] * 1e3:>7.2f} {t['sorted'] * 1e3:>8.1f} {tt} "
                          f"{c} {ratio} {fallback:>8} {differ:>6}", flush=True)

if __name__ == "__main__":
    main()
