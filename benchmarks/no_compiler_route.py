"""The optimal rule's CPU route without the C kernels, its two bucket rules side by side (issue 41).

Where otlp's C kernels are not built (a wheel built without a compiler, or ``OTLP_NATIVE=0``), ``get("optimal")``
on CPU tensors from ``buckets.takes`` runs the numpy bucket route (otlp/optimal/buckets.py, ``verify_chunks``).
Issue 41 would retire it in favour of the torch bucket rule (:func:`otlp.optimal.device_buckets.decide`, on the CPU
tensors, with its host mode: refinement and fallback on exactly the undecided rows, ``"gather"``, and the sampler's
row sums, ``inverse=``). This times, per grid point, one call of each, one thread by default (median of ``--reps``
after a warm-up, the calls interleaved):

* ``floor``: ``p.sum() + q.sum()``, reading the inputs once;
* ``numpy``: ``sampler.verify`` with the kernels off (the numpy bucket route, its full sort for the rows it leaves);
* ``sorted``: ``sampler.verify`` with the kernels off and the buckets off (``buckets.takes`` false): every row the
  full sort, :mod:`otlp.optimal.chains` in numpy (the reference);
* ``torch``: ``device_buckets.decide`` as above (its torch passes; ``--no-torch`` leaves it out);
* ``C``: ``sampler.verify`` with the kernels (where they are built): the host's fast route, for scale;

and prints ``sorted / numpy``, ``torch / numpy`` and how many rows of ``decide`` took the fallback and differ from the
full sort (``verify(backend="torch")``, same uniforms). Rows: tests/optimal/instances.lm_rows, float32.

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


def _sorted(fn):  # noqa: ANN001, ANN202
    """``fn`` run with the bucket route off (:func:`.buckets.takes` false): the CPU sampler's full sort on every row."""
    def run():  # noqa: ANN202
        saved = BK.MIN_V, BK.MIN_ENTRIES
        BK.MIN_V = BK.MIN_ENTRIES = 1 << 62
        try:
            return fn()
        finally:
            BK.MIN_V, BK.MIN_ENTRIES = saved
    return run


def _point(B: int, V: int, n: int, draft: str, reps: int, torch_route: bool = True) -> tuple[dict[str, float], int,
int]:
    """One grid point: the routes' seconds (:func:`_times`), and the rows of ``decide`` that took the fallback and
    that differ from the full sort."""
    p, q, drafts, u = lm_rows(B, V, 17 * n + V, draft, n)
    u = u.double()
    fns = {"floor": lambda: p.sum() + q.sum(),
           "numpy": _without_kernels(lambda: sampler.verify(p, q, drafts, u)),
           "sorted": _without_kernels(_sorted(lambda: sampler.verify(p, q, drafts, u)))}
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
    print(f"{'V':>7} {'B':>3} {'n':>2} {'draft':>6} {'floor':>7} {'numpy':>8} {'sorted':>8} {'torch':>8} {'C':>8} "
          f"{'sorted/numpy':>12} {'torch/numpy':>11} {'fallback':>8} {'differ':>6}   (ms, {args.threads} thread(s))")
    slower = points = 0
    for V in args.V:
        for B in args.B:
            for n in args.n:
                for draft in args.drafts:
                    t, fallback, differ = _point(B, V, n, draft, args.reps, not args.no_torch)
                    ratio = t["torch"] / t["numpy"] if "torch" in t else float("nan")
                    slower, points = slower + (ratio > 1.5), points + 1
                    c, tt = (f"{t[k] * 1e3:>8.1f}" if k in t else f"{'-':>8}" for k in ("C", "torch"))
                    print(f"{V:>7} {B:>3} {n:>2} {draft:>6} {t['floor'] * 1e3:>7.2f} {t['numpy'] * 1e3:>8.1f} "
                          f"{t['sorted'] * 1e3:>8.1f} {tt} {c} {t['sorted'] / t['numpy']:>11.2f}x {ratio:>10.2f}x "
                          f"{fallback:>8} {differ:>6}", flush=True)
    if not args.no_torch:
        print(f"torch more than 1.5x the numpy route at {slower} of {points} points")

if __name__ == "__main__":
    main()
