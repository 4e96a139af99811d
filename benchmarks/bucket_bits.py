"""How many bucket bits per octave the optimal rule's bucketed CPU route should use (``otlp.optimal.buckets.bits_for``).

Finer buckets select fewer tokens to sort, coarser ones cost less per bucket. For each grid point (benchmarks/
verifiers.py's rows: float32 LM-like p and a loosely correlated draft) the optimal sampler is timed with each bits
value forced, beside rrs in the same run, one thread, the calls interleaved; printed as optimal / rrs, with the bits
``bits_for`` picks marked. Writes ``benchmarks/results/bucket_bits.json``.

    python benchmarks/bucket_bits.py                     # V in {2k, 32k, 128k, 152k}, n in {2, 8}, B in {1, 64}
    python benchmarks/bucket_bits.py --V 2000 --B 64 --bits 1 2 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from otlp.optimal import buckets as BK
from otlp.verifiers import get

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verifiers import SIZES, _inputs, _times  # noqa: E402 - benchmarks/verifiers.py, beside this script


def point(B: int, V: int, n: int, bits: list[int], reps: int) -> dict:
    """ms per call of rrs and of the optimal rule with each bits value at one grid point."""
    p, q, drafts = _inputs(B, V, n, "cpu")
    gen = torch.Generator().manual_seed(0)
    rrs, optimal = get("rrs"), get("optimal")
    chosen, takes = BK.bits_for, BK.takes

    def forced(b: int):  # noqa: ANN202
        def call() -> None:
            BK.bits_for, BK.takes = (lambda V: b), (lambda B, V: True)
            try:
                optimal.sample(p, q, drafts, gen)
            finally:
                BK.bits_for, BK.takes = chosen, takes
        return call

    fns = {"rrs": lambda: rrs.sample(p, q, drafts, gen), **{f"bits_{b}": forced(b) for b in bits}}
    seconds = _times(fns, reps, "cpu")
    return {"B": B, "V": V, "n": n, "bits_for": chosen(V), **{f"{k}_ms": 1e3 * s for k, s in seconds.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--V", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--n", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--B", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--bits", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "bucket_bits.json"))
    args = ap.parse_args(argv)
    if min(args.bits) < 1 or max(args.bits) > 10:
        ap.error(f"--bits must lie in 1..10 (2^(bits + 6) buckets a row), got {args.bits}")
    torch.set_num_threads(1)
    head = f"{'V':>7} {'n':>2} {'B':>3} {'rrs ms':>7} " + " ".join(f"{'bits ' + str(b):>8}" for b in args.bits)
    print("optimal / rrs with each bits per octave forced (* = bits_for's choice), one thread")
    print(head)
    print("-" * len(head))
    rows = []
    for V in args.V:
        for n in args.n:
            for B in args.B:
                r = point(B, V, n, args.bits, args.reps)
                rows.append(r)
                cells = [f"{r[f'bits_{b}_ms'] / r['rrs_ms']:.2f}{'*' if b == r['bits_for'] else ' '}"
                         for b in args.bits]
                print(f"{V:>7} {n:>2} {B:>3} {r['rrs_ms']:>7.2f} " + " ".join(f"{c:>8}" for c in cells), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"meta": {"torch": torch.__version__, "threads": 1}, "rows": rows}, fh, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
