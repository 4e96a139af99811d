"""Verifier cost per decode step, side by side in one run: sps, rrs, rrs_wor, kseq and the exact optimal rule.

Grid: V in {2k, 32k, 128k, 152k}, n in {2, 4, 8}, B in {1, 8, 64}; float32 LM-like rows (softmax of scaled normals,
the draft correlated with the target); ``verifier.sample(p, q, drafts, generator)`` timed as one call (median of
``--reps`` after a warm-up; the rules' calls interleaved, so a slow spell of a shared machine hits all alike), on
the CPU with one thread and with torch's default threads, and on CUDA when a GPU is present. "read floor" is one
``p.sum() + q.sum()`` over the same tensors in the same run: the time to read the inputs once. Prints one table per
(device, threads), writes ``benchmarks/results/verifiers.json`` and publishes the tables the README shows
(``benchmarks/published/verifiers.json``, :mod:`readme_tables`).

    python benchmarks/verifiers.py                      # the full grid (about 15 minutes on 2 cores)
    python benchmarks/verifiers.py --quick              # V = 2k and 32k, B = 1 and 64
    python benchmarks/verifiers.py --rules rrs optimal --threads 1
    python benchmarks/verifiers.py --from-json benchmarks/results/verifiers.json   # publish a finished run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from otlp.verifiers import get

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script

RULES = ("sps", "rrs", "rrs_wor", "kseq", "optimal")
SIZES = (2_000, 32_000, 128_000, 152_000)


def _inputs(B: int, V: int, n: int, device: str, seed: int = 0):  # noqa: ANN202
    g = torch.Generator(device="cpu").manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    return p.to(device), q.to(device), drafts.to(device)


def _times(fns: dict[str, object], reps: int, device: str) -> dict[str, float]:
    """Median seconds of each call in ``fns``, the calls interleaved round-robin (one warm-up each), so that a slow
    spell of a shared machine falls on every method alike and the ratios stay comparable."""
    for fn in fns.values():
        fn()  # warm-up
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            out[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in out.items()}


def bench_point(rules: list[str], B: int, V: int, n: int, device: str, reps: int) -> dict[str, object]:
    p, q, drafts = _inputs(B, V, n, device)
    gen = torch.Generator(device=device).manual_seed(0)
    fns = {"read_floor": lambda: p.sum() + q.sum()}
    for rule in rules:
        verifier = get(rule)
        fns[rule] = lambda v=verifier: v.sample(p, q, drafts, gen)
    seconds = _times(fns, max(reps, 1), device)
    return {"device": device, "threads": torch.get_num_threads(), "B": B, "V": V, "n": n,
            **{f"{name}_ms": 1e3 * s for name, s in seconds.items()}}


def publish(rows: list[dict], meta: dict) -> None:
    """One README table per (device, threads) setting of a full run (all five rules)."""
    settings = sorted({(r["device"], r["threads"]) for r in rows})
    for device, threads in settings:
        mine = [r for r in rows if (r["device"], r["threads"]) == (device, threads)]
        if not all(f"{x}_ms" in r for r in mine for x in RULES):
            continue
        cols = ["V", "n", "B", "read floor", *RULES, "optimal / rrs"]
        cells = [[f"{r['V']:,}", str(r["n"]), str(r["B"]), f"{r['read_floor_ms']:.3f}",
                  *(f"{r[f'{x}_ms']:.2f}" for x in RULES), f"{r['optimal_ms'] / r['rrs_ms']:.2f}"] for r in mine]
        name = f"{device}_{threads}_threads" if device == "cpu" else device
        readme_tables.publish("verifiers", name, cols, cells, {**meta, "device": device, "threads": threads})
        print(f"\n<!-- table: verifiers/{name} -->\n{readme_tables.markdown(cols, cells)}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules", nargs="*", default=list(RULES), choices=RULES)
    ap.add_argument("--quick", action="store_true", help="V in {2k, 32k}, B in {1, 64}")
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    ap.add_argument("--threads", choices=["1", "default", "both"], default="both",
                    help="CPU threads: 1, torch's default, or both (default)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "verifiers.json"))
    ap.add_argument("--from-json", metavar="PATH", help="publish the README tables of a finished run and exit")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as fh:
            done = json.load(fh)
        publish(done["rows"], done["meta"])
        return
    sizes = SIZES[:2] if args.quick else SIZES
    batches = (1, 64) if args.quick else (1, 8, 64)
    default_threads = torch.get_num_threads()
    settings = []
    if args.device in ("cpu", "all"):
        settings += [("cpu", t) for t in ([1] if args.threads == "1" else [default_threads] if args.threads == "default"
                                           else sorted({1, default_threads}))]
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        settings.append(("cuda", default_threads))
    rows = []
    for device, threads in settings:
        torch.set_num_threads(threads)
        print(f"\n{device}, {threads} thread(s): ms per verification step (median of {args.reps}); ratio = "
              "optimal / rrs; floor = p.sum() + q.sum()")
        head = f"{'V':>7} {'n':>2} {'B':>3} {'floor':>8} " + " ".join(f"{r:>9}" for r in args.rules)
        head += f" {'ratio':>6}" if {"optimal", "rrs"} <= set(args.rules) else ""
        print(head)
        print("-" * len(head))
        for V in sizes:
            for n in (2, 4, 8):
                for B in batches:
                    r = bench_point(args.rules, B, V, n, device, args.reps)
                    rows.append(r)
                    line = f"{V:>7} {n:>2} {B:>3} {r['read_floor_ms']:>8.3f} "
                    line += " ".join(f"{r[f'{x}_ms']:>9.2f}" for x in args.rules)
                    if {"optimal", "rrs"} <= set(args.rules):
                        line += f" {r['optimal_ms'] / r['rrs_ms']:>6.2f}"
                    print(line, flush=True)
    torch.set_num_threads(default_threads)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    meta = {"torch": torch.__version__, "default_threads": default_threads, "python": sys.version.split()[0],
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    print(f"wrote {args.out}")
    if not args.quick:
        publish(rows, meta)


if __name__ == "__main__":
    main()
