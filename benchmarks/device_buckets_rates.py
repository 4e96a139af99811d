"""The device bucket rule's rates per grid point (issue 41): how often a row is certified at round 0, after the
refinement round, or needs the fallback, how often its selected tokens spill the buffer K, and its tokens against
``get("optimal").sample`` (the CPU route) for the same uniforms.

    python benchmarks/device_buckets_rates.py                       # V = 32k and 128k, B = 16, n = 2, 4, 8
    python benchmarks/device_buckets_rates.py --V 128000 --B 8 --K 8000 16000
    python benchmarks/device_buckets_rates.py --device cuda --passes triton   # the kernels compiled (not yet run)

Rows from tests/optimal/instances.lm_rows (loose drafts, close ones sigma 1 and 0.5, tied rows), float32. The route
runs on ``--device`` (default the CPU) with torch ops or the Triton passes (``--passes``), every row refined and the
fallback on every row, so the tokens are the route's exact ones (otlp/optimal/device_buckets.py); the reference runs
on the CPU. ``sel`` is the median and largest count of selected tokens a row compacts in the first round (at most
K).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from otlp.optimal import device_buckets as DB
from otlp.verifiers import get

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.optimal.instances import lm_rows  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--V", type=int, nargs="+", default=[32_000, 128_000])
    ap.add_argument("--n", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--K", type=int, nargs="+", default=[0],
                    help="buffer sizes (0: the route's default, V / 16 and at least 512)")
    ap.add_argument("--drafts", nargs="+", default=["loose", "1", "0.5", "ties"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--passes", choices=["torch", "triton"], default="torch")
    args = ap.parse_args(argv)
    if args.passes == "triton":
        from otlp.optimal.device_passes import TRITON as passes
    else:
        passes = DB.TORCH
    print(f"{'V':>7} {'K':>6} {'draft':>6} {'n':>2} {'round 0':>8} {'round 1':>8} {'fallback':>8} {'spilled':>8} "
          f"{'sel med':>8} {'sel max':>8} {'differ':>7}")
    total = wrong = 0
    for V in args.V:
        for K in args.K:
            K = K or DB.capacity(V)
            for draft in args.drafts:
                for n in args.n:
                    p, q, drafts, u = lm_rows(args.B, V, args.seed + 31 * n + V, draft, n)
                    want = get("optimal").sample(p, q, drafts, None, uniforms=u)
                    on = [x.to(args.device) for x in (p, q, drafts, u)]
                    d = DB.decide(*on, K=K, passes=passes)
                    d = DB.Decision(*(x.cpu() for x in (d.tokens, d.index, d.rounds, d.spilled, d.overflow,
                                                        d.selected)))
                    rates = torch.bincount(d.rounds, minlength=DB.ROUNDS + 2).double() / args.B
                    differ = int(((d.tokens != want[0]) | (d.index != want[1])).sum())
                    total, wrong = total + args.B, wrong + differ
                    sel = d.selected.double()
                    print(f"{V:>7} {K:>6} {draft:>6} {n:>2} {rates[0]:>8.3f} {rates[1]:>8.3f} {rates[2]:>8.3f} "
                          f"{float(d.spilled.double().mean()):>8.3f} {float(sel.median()):>8.0f} "
                          f"{float(sel.max()):>8.0f} {differ:>7}", flush=True)
    print(f"{wrong} of {total} rows differ from the CPU route")


if __name__ == "__main__":
    main()
