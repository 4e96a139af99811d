"""The device bucket rule's rates per grid point (issue 41): how often a row is certified at round 0, after the
refinement round, or needs the fallback, how often its selected tokens spill the buffer K, and its tokens against
``get("optimal").sample`` (the CPU route) for the same uniforms.

    python benchmarks/device_buckets_rates.py                       # V = 32k and 128k, B = 16, n = 2, 4, 8
    python benchmarks/device_buckets_rates.py --V 128000 --B 8 --K 8000 16000
    python benchmarks/device_buckets_rates.py --device cuda --passes triton   # the kernels compiled (not yet run)
    python benchmarks/device_buckets_rates.py --device cuda --passes route --B 64 --batches 100 \
        --dtype float32 bfloat16 float64           # get("optimal")'s CUDA route itself, fallback kernel included
    python benchmarks/device_buckets_rates.py --B 64 --batches 10 --dtype float32 bfloat16 float64   # 10^5 scale

Rows from tests/optimal/instances.lm_rows (loose drafts, close ones sigma 1 and 0.5, tied rows) in each ``--dtype``
(float32 by default). The route runs on ``--device`` (default the CPU) with torch ops or the Triton passes
(``--passes``), every row refined and the fallback on every row, so the tokens are the route's exact ones
(otlp/optimal/device_buckets.py); ``--passes route`` runs ``get("optimal")``'s route on CUDA instead (the Triton
passes and roots, the refinement on ``DB.ROUTE``'s gathered rows, every undecided row in the fallback kernel of
otlp/optimal/device_fallback.py; on the CPU only under ``TRITON_INTERPRET=1``); the reference runs on the CPU. ``sel``
is the median and largest count of selected tokens a row compacts in the first round (at most K). Each grid point runs
``--batches`` batches of B rows, batch k (from ``--start``) on its own seed (:func:`seed`), so that a run can be split
into pieces that do not repeat rows. A row that differs is printed with its reproducer (V, n, draft, dtype, seed, B,
row); the exit status is 1 if any does. Totals per (V, draft, dtype) and overall at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from otlp.optimal import device_buckets as DB
from otlp.verifiers import get

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.optimal.instances import lm_rows  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def seed(base: int, V: int, n: int, dtype: str, batch: int) -> int:
    """The generator seed of a batch: float32's batch 0 is the earlier runs' ``base + 31 n + V``; each batch and
    dtype adds its own multiple of 10^6 (above 31 n + V for every V < 10^6 - 248)."""
    return base + 31 * n + V + 1_000_000 * (batch + 100_000 * list(DTYPES).index(dtype))


def point(V: int, K: int, draft: str, n: int, dtype: str, B: int, batches: range, base: int, device: str,
          passes: DB.Passes | dict, progress) -> dict:  # noqa: ANN001
    """One grid point over ``batches``: rows, rows differing, the rows per round (0, 1, fallback), spilled rows and
    the selected counts; ``progress(rows, differ)`` after each batch."""
    out = {"rows": 0, "differ": 0, "rounds": torch.zeros(DB.ROUNDS + 2, dtype=torch.int64), "spilled": 0, "sel": []}
    for k in batches:
        s = seed(base, V, n, dtype, k)
        p, q, drafts, u = lm_rows(B, V, s, draft, n, DTYPES[dtype])
        want = get("optimal").sample(p, q, drafts, None, uniforms=u)
        on = [x.to(device) for x in (p, q, drafts, u)]
        options = passes if isinstance(passes, dict) else {"passes": passes}  # a dict: decide's whole options
        d = DB.decide(*on, K=K, **options)
        d = DB.Decision(*(x.cpu() for x in (d.tokens, d.index, d.rounds, d.spilled, d.overflow, d.selected)))
        bad = (d.tokens != want[0]) | (d.index != want[1])  # [B]
        for row in bad.nonzero().flatten().tolist():
            print(f"DIFFER V {V} n {n} draft {draft} dtype {dtype} seed {s} B {B} row {row}: route token "
                  f"{int(d.tokens[row])} slot {int(d.index[row])}, reference token {int(want[0][row])} slot "
                  f"{int(want[1][row])}; u {u[row].tolist()}  (lm_rows({B}, {V}, {s}, {draft!r}, {n}, "
                  f"torch.{dtype}))", flush=True)
        out["rows"] += B
        out["differ"] += int(bad.sum())
        out["rounds"] += torch.bincount(d.rounds, minlength=DB.ROUNDS + 2)[:DB.ROUNDS + 2]
        out["spilled"] += int(d.spilled.sum())
        out["sel"].append(d.selected)
        progress(B, int(bad.sum()))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--V", type=int, nargs="+", default=[32_000, 128_000])
    ap.add_argument("--n", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--K", type=int, nargs="+", default=[0],
                    help="buffer sizes (0: the route's default, V / 16 and at least 512)")
    ap.add_argument("--drafts", nargs="+", default=["loose", "1", "0.5", "ties"])
    ap.add_argument("--dtype", nargs="+", choices=list(DTYPES), default=["float32"])
    ap.add_argument("--batches", type=int, default=1, help="batches of B rows per grid point, each its own seed")
    ap.add_argument("--start", type=int, default=0, help="the first batch's index (a later piece of a run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch's threads (0: leave torch's default)")
    ap.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--passes", choices=["torch", "triton", "route"], default="torch",
                    help="torch ops, the Triton passes, or get('optimal')'s whole CUDA route (fallback kernel too)")
    args = ap.parse_args(argv)
    if args.B < 1 or args.batches < 1 or args.start < 0 or args.threads < 0:
        ap.error("--B and --batches must be positive, --start and --threads at least 0")
    if str(args.device).startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device} needs a CUDA device, and torch sees none")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.passes == "torch":
        passes = DB.TORCH
    elif args.passes == "triton":
        from otlp.optimal.device_passes import TRITON as passes
    else:  # the route's own options
        from otlp.optimal.sampler import triton_route_options

        passes = triton_route_options()
    batches = range(args.start, args.start + args.batches)
    print(f"device bucket rule vs get('optimal').sample; B = {args.B}, batches {args.start}..{batches[-1]}, "
          f"seed {args.seed}, threads {torch.get_num_threads()}, passes {args.passes} on {args.device}")
    print(f"{'V':>7} {'K':>6} {'draft':>6} {'dtype':>8} {'n':>2} {'rows':>6} {'round 0':>8} {'round 1':>8} "
          f"{'fallback':>8} {'spilled':>8} {'sel med':>8} {'sel max':>8} {'differ':>7}", flush=True)
    done = {"rows": 0, "differ": 0, "shown": time.perf_counter()}
    t0 = time.perf_counter()

    def progress(rows: int, differ: int) -> None:
        done["rows"] += rows
        done["differ"] += differ
        if time.perf_counter() - done["shown"] >= args.progress:
            done["shown"] = time.perf_counter()
            print(f"  .. {done['rows']} rows done, {done['differ']} differ ({done['shown'] - t0:.0f} s)", flush=True)

    totals: dict[tuple[int, str, str], list[int]] = {}
    for V in args.V:
        for K in args.K:
            K = K or DB.capacity(V)
            for draft in args.drafts:
                for dtype in args.dtype:
                    for n in args.n:
                        r = point(V, K, draft, n, dtype, args.B, batches, args.seed, args.device, passes, progress)
                        rates = r["rounds"].double() / r["rows"]
                        sel = torch.cat(r["sel"]).double()
                        print(f"{V:>7} {K:>6} {draft:>6} {dtype:>8} {n:>2} {r['rows']:>6} {rates[0]:>8.3f} "
                              f"{rates[1]:>8.3f} {rates[2]:>8.3f} {r['spilled'] / r['rows']:>8.3f} "
                              f"{float(sel.median()):>8.0f} {float(sel.max()):>8.0f} {r['differ']:>7}", flush=True)
                        t = totals.setdefault((V, draft, dtype), [0] * (DB.ROUNDS + 5))
                        for i, c in enumerate([r["rows"], r["differ"], *r["rounds"].tolist(), r["spilled"]]):
                            t[i] += c
    print("totals per (V, draft, dtype):")
    for (V, draft, dtype), (rows, differ, *rounds, spilled) in totals.items():
        print(f"  V {V:>7} draft {draft:>5} {dtype:>8}: {differ} of {rows} rows differ; round 0 {rounds[0]}, "
              f"round 1 {rounds[1]}, fallback {rounds[2]}, spilled {spilled}")
    rows, wrong = sum(t[0] for t in totals.values()), sum(t[1] for t in totals.values())
    print(f"{wrong} of {rows} rows differ from the CPU route ({time.perf_counter() - t0:.0f} s)")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
