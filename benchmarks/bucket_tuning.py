"""The optimal rule's bucketed CPU route, its three tuning constants measured side by side (otlp/optimal/buckets.py).

* ``bits``: bucket bits per octave (``bits_for``). Finer buckets select fewer tokens to sort, coarser ones cost less
  per bucket: the optimal sampler with each bits forced, as optimal / rrs, one thread.
* ``route``: from which call size the route pays (``MIN_V``, ``MIN_ENTRIES``): the optimal sampler with the route
  forced on and off at small V, as buckets / full sort, one thread.
* ``threads``: from which call size the native route spreads its rows over an OpenMP team (``THREADS_MIN``): the
  optimal sampler at two threads with the split forced on and off, as optimal / rrs, each call right after the other
  rules' calls (as in benchmarks/verifiers.py and a decode loop: torch's OpenMP worker, which the team shares, still
  spins then).

Rows as benchmarks/verifiers.py's (float32 LM-like p, a loosely correlated draft); medians of ``--reps`` calls,
interleaved. Prints one table per part and writes ``benchmarks/results/bucket_tuning.json``.

    python benchmarks/bucket_tuning.py                 # all three parts (under a minute on 2 cores)
    python benchmarks/bucket_tuning.py --parts bits
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
from verifiers import _inputs, _times  # noqa: E402 - benchmarks/verifiers.py, beside this script

PARTS = ("bits", "route", "threads")


def _forced(name: str, value, call):  # noqa: ANN001, ANN202
    """``call`` with ``buckets.<name>`` set to ``value`` (a constant or a function) for its duration."""
    def run() -> None:
        saved = getattr(BK, name)
        setattr(BK, name, value)
        try:
            call()
        finally:
            setattr(BK, name, saved)
    return run


def _sample(rule: str, B: int, V: int, n: int):  # noqa: ANN202
    p, q, drafts = _inputs(B, V, n, "cpu")
    gen = torch.Generator().manual_seed(0)
    verifier = get(rule)
    return lambda: verifier.sample(p, q, drafts, gen)


def bits_part(reps: int) -> list[dict]:
    rows = []
    for V, n, B in ((2_000, 2, 64), (2_000, 8, 64), (32_000, 4, 8), (128_000, 4, 8)):
        optimal = _sample("optimal", B, V, n)
        fns = {"rrs": _sample("rrs", B, V, n)}
        for bits in (1, 2, 3, 4, 5):
            fns[f"bits_{bits}"] = _forced("takes", lambda B, V: True, _forced("bits_for", lambda V, b=bits: b, optimal))
        t = _times(fns, reps, "cpu")
        rows.append({"V": V, "n": n, "B": B, "bits_for": BK.bits_for(V),
                     **{k: t[k] / t["rrs"] for k in fns if k != "rrs"}})
    return rows


def route_part(reps: int) -> list[dict]:
    rows = []
    for V in (512, 1_000, 2_000):
        for B in (1, 16, 64):
            for n in (2, 8):
                optimal = _sample("optimal", B, V, n)
                t = _times({"buckets": _forced("takes", lambda B, V: True, optimal),
                            "full": _forced("takes", lambda B, V: False, optimal)}, reps, "cpu")
                rows.append({"V": V, "B": B, "n": n, "takes": BK.takes(B, V),
                             "buckets_over_full": t["buckets"] / t["full"]})
    return rows


def threads_part(reps: int) -> list[dict]:
    import statistics
    import time

    torch.set_num_threads(2)
    rows = []
    for B, V, n in ((4, 2_000, 2), (8, 2_000, 4), (64, 2_000, 2), (64, 2_000, 8), (8, 32_000, 2), (8, 128_000, 2),
                    (64, 32_000, 2), (64, 128_000, 4)):
        optimal = _sample("optimal", B, V, n)
        others = [_sample(rule, B, V, n) for rule in ("sps", "rrs", "kseq")]
        calls = {"rrs": others[1], "split": _forced("THREADS_MIN", 0, optimal),
                 "one": _forced("THREADS_MIN", 1 << 62, optimal)}
        seconds: dict[str, list[float]] = {name: [] for name in calls}
        for rep in range(reps + 1):  # each timed call right after the other rules' (untimed); the first a warm-up
            for name, call in calls.items():
                for other in others:
                    other()
                start = time.perf_counter()
                call()
                if rep:
                    seconds[name].append(time.perf_counter() - start)
        t = {name: statistics.median(s) for name, s in seconds.items()}
        rows.append({"B": B, "V": V, "n": n, "splits": B * V >= BK.THREADS_MIN, "split_over_rrs": t["split"] / t["rrs"],
                     "one_thread_over_rrs": t["one"] / t["rrs"]})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "bucket_tuning.json"))
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps must be at least 1, got {args.reps}")
    default_threads = torch.get_num_threads()
    out = {"meta": {"torch": torch.__version__, "default_threads": default_threads}}
    if "bits" in args.parts:
        torch.set_num_threads(1)
        out["bits"] = rows = bits_part(args.reps)
        print("optimal / rrs with each bits per octave forced (* = bits_for's choice), one thread")
        print(f"{'V':>7} {'n':>2} {'B':>3} " + " ".join(f"{'bits ' + str(b):>8}" for b in range(1, 6)))
        for r in rows:
            cells = [f"{r[f'bits_{b}']:.2f}{'*' if b == r['bits_for'] else ' '}" for b in range(1, 6)]
            print(f"{r['V']:>7} {r['n']:>2} {r['B']:>3} " + " ".join(f"{c:>8}" for c in cells), flush=True)
    if "route" in args.parts:
        torch.set_num_threads(1)
        out["route"] = rows = route_part(args.reps)
        print("\nbucketed route / full sort, one thread (* = the route buckets.takes picks)")
        print(f"{'V':>7} {'B':>3} {'n':>2} {'ratio':>7}")
        for r in rows:
            print(f"{r['V']:>7} {r['B']:>3} {r['n']:>2} {r['buckets_over_full']:>6.2f}{'*' if r['takes'] else ' '}",
                  flush=True)
    if "threads" in args.parts:
        out["threads"] = rows = threads_part(args.reps)
        print("\noptimal / rrs at two threads, each call after sps, rrs and K-SEQ's (* = the split THREADS_MIN picks)")
        print(f"{'B':>3} {'V':>7} {'n':>2} {'split':>7} {'one':>7}")
        for r in rows:
            mark = ("*", " ") if r["splits"] else (" ", "*")
            print(f"{r['B']:>3} {r['V']:>7} {r['n']:>2} {r['split_over_rrs']:>6.2f}{mark[0]} "
                  f"{r['one_thread_over_rrs']:>6.2f}{mark[1]}", flush=True)
    torch.set_num_threads(default_threads)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
