"""``otlp sweep`` throughput: pairs per second per core, alpha* against reading from disk, 1 vs 2 Dask workers.

All in one run, on synthetic LM-shaped pairs (Zipf-like target logits, draft = target + Gaussian noise, a per-row
temperature between peaked and flat):

1. pairs/s per core (one process, the whole pipeline: read + SHA-256 check + compute + save + assemble) at
   V = 2k dense, V = 32k dense and V = 32k sparse top-256, for alpha* alone (--verifiers none) and for all rules,
   n = 1,2,4,8, q untruncated; after a warm-up sweep, best of 2 runs;
2. the physical floor: reading one V = 32k dense pair from its shard (page cache hot, as ``shard_task`` reads it:
   the file's bytes, their SHA-256 against the manifest, the Parquet decode into float64 [M, V]) against alpha* for
   that pair (n = 2, and n = 1,2,4,8), best of 5 each; target ratio <= 2;
3. scaling: the same sweep (all rules, V = 2k dense, 16 shards of 128 pairs) on a LocalCluster of 1 worker and of
   2 workers (processes, 1 thread each), in a steady state: each cluster is started and runs a small warm-up sweep
   (imports, first calls) before the clock; the sizes alternate 1, 2, 1, 2 and the best of each counts (every run
   is in the JSON, with the CPU seconds of the workers and of the client process, which hosts the scheduler, saves
   each shard's result and assembles pairs.parquet); target >= 1.7x.

Run: flock /tmp/team/bench.lock python benchmarks/sweep.py [--quick]. Writes benchmarks/results/sweep.json; a full
run (no --quick, no --skip) publishes the docs/SWEEP.md tables (benchmarks/published/sweep.json,
:mod:`readme_tables`) and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def lm_pairs(rng: np.random.Generator, M: int, V: int, noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    base = -1.2 * np.log(np.arange(1, V + 1))[None, :] + rng.normal(0, 0.5, (M, V))  # [M, V]
    logits_p = base[:, rng.permutation(V)] * rng.uniform(0.3, 3.0, (M, 1))
    logits_q = logits_p + rng.normal(0, noise, (M, V))
    p = np.exp(logits_p - logits_p.max(axis=1, keepdims=True))
    q = np.exp(logits_q - logits_q.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)


def make_capture(path: Path, V: int, M: int, storage: str, shard_rows: int, seed: int = 0) -> Path:
    from otlp.sweep import CaptureWriter

    rng = np.random.default_rng(seed)
    with CaptureWriter(path, V, storage=storage, top_k=256, shard_rows=shard_rows) as w:
        for start in range(0, M, 64):
            p, q = lm_pairs(rng, min(64, M - start), V)
            w.add(p, q, depth=np.arange(p.shape[0]) % 4)
    return path


def best_of(fn, repeats: int = 3) -> float:  # noqa: ANN001
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def throughput(root: Path, quick: bool) -> list[dict]:
    """In one process, after a warm-up sweep (imports, first calls); each case timed twice on fresh output folders,
    the faster counts."""
    from otlp.sweep import open_capture, run_sweep

    warm = make_capture(root / "warm_throughput", 2000, 8, "dense", 4, seed=3)
    run_sweep(warm, ns=(1, 2, 4, 8), verifiers="all", out=root / "warm_throughput_out", workers=1, plots=False)
    # (label, V, storage, pairs for alpha* alone, pairs for all rules, rows per shard)
    cases = [("V=2k dense", 2000, "dense", 2048, 512, 256),
             ("V=32k sparse top-256", 32000, "sparse", 2048, 256, 256),
             ("V=32k dense", 32000, "dense", 512, 64, 64)]
    rows = []
    for label, V, storage, M_none, M_all, shard_rows in cases:
        for rules, M in (("none", M_none), ("all", M_all)):
            M = max(16, M // 8) if quick else M
            cap = make_capture(root / f"{label}_{M}".replace(" ", "_"), V, M, storage, min(shard_rows, M))
            seconds = []
            for k in range(2):
                out = root / f"out_{label}_{rules}_{k}".replace(" ", "_")
                t = time.perf_counter()
                res = run_sweep(cap, ns=(1, 2, 4, 8), verifiers=rules, out=out, workers=1, plots=False)
                seconds.append(time.perf_counter() - t)
            pairs = open_capture(cap).rows
            rows.append({"case": label, "verifiers": rules, "pairs": pairs, "seconds": min(seconds),
                         "runs_seconds": seconds, "pairs_per_second_per_core": pairs / min(seconds),
                         "skipped": sorted(res.report["skipped"])})
            print(f"{label:<22} verifiers={rules:<5} {pairs:>5} pairs  {min(seconds):7.2f} s  "
                  f"{rows[-1]['pairs_per_second_per_core']:9.1f} pairs/s/core", flush=True)
    return rows


def floor(root: Path) -> dict:
    """Read one V = 32k dense pair vs alpha* on it (both per pair, best of 5, one process)."""
    from otlp.sweep import open_capture
    from otlp.sweep.compute import CHUNK_CELLS, alpha_star_rows

    M, V = 64, 32000
    cap = open_capture(make_capture(root / "floor", V, M, "dense", M, seed=1))
    read = best_of(lambda: cap.read(0), 5) / M
    block = cap.read(0)
    chunk = max(1, CHUNK_CELLS // V)

    def alpha(ns: tuple[int, ...]) -> None:
        for s in range(0, M, chunk):
            alpha_star_rows(block.p[s:s + chunk], block.q[s:s + chunk], ns)

    one = best_of(lambda: alpha((2,)), 5) / M
    four = best_of(lambda: alpha((1, 2, 4, 8)), 5) / M
    out = {"V": V, "read_ms": 1e3 * read, "alpha_n2_ms": 1e3 * one, "alpha_n1248_ms": 1e3 * four,
           "ratio_n2": one / read, "ratio_n1248": four / read, "shard_bytes_per_pair": cap.shards[0].bytes / M}
    print(f"V = 32k dense, per pair: read {out['read_ms']:.2f} ms (SHA-256 + Parquet, page cache hot); alpha* n=2 "
          f"{out['alpha_n2_ms']:.2f} ms = {out['ratio_n2']:.2f}x read (target <= 2); n=1,2,4,8 "
          f"{out['alpha_n1248_ms']:.2f} ms = {out['ratio_n1248']:.2f}x", flush=True)
    return out


def cpu_seconds() -> float:
    """User + system CPU seconds of the calling process (run on each worker through ``client.run``)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def scaling(root: Path, quick: bool) -> dict:
    from dask.distributed import Client, LocalCluster

    from otlp.sweep import run_sweep

    shards, rows = 16, 32 if quick else 128
    cap = make_capture(root / "scaling", 2000, shards * rows, "dense", rows, seed=2)
    warm = make_capture(root / "warm", 2000, 8, "dense", 4, seed=3)
    runs = []
    for k, workers in enumerate((1, 2, 1, 2)):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=40) as lc, Client(lc) as client:
            run_sweep(warm, ns=(1, 2, 4, 8), verifiers="all", out=root / f"warm{k}", client=client, plots=False)
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
            before, mine = client.run(cpu_seconds), cpu_seconds()
            t = time.perf_counter()
            run_sweep(cap, ns=(1, 2, 4, 8), verifiers="all", out=root / f"scale{k}", client=client, plots=False)
            seconds = time.perf_counter() - t
            after = client.run(cpu_seconds)
            runs.append({"workers": workers, "seconds": seconds, "load_average_before": load,
                         "worker_cpu_seconds": sum(after[w] - before[w] for w in after),
                         "client_cpu_seconds": cpu_seconds() - mine})
            print(f"  {workers} worker(s): {seconds:.2f} s (workers' CPU {runs[-1]['worker_cpu_seconds']:.2f} s, "
                  f"client's {runs[-1]['client_cpu_seconds']:.2f} s; load before {load:.2f})", flush=True)
    best = {w: min(r["seconds"] for r in runs if r["workers"] == w) for w in (1, 2)}
    out = {"pairs": shards * rows, "shards": shards, "V": 2000, "seconds_1": best[1], "seconds_2": best[2],
           "speedup": best[1] / best[2], "cpu_count": os.cpu_count(), "runs": runs}
    print(f"LocalCluster, all rules, V = 2k dense, {out['pairs']} pairs in {shards} shards (best of 2): 1 worker "
          f"{best[1]:.2f} s, 2 workers {best[2]:.2f} s, speedup {out['speedup']:.2f}x (target >= 1.7; "
          f"{os.cpu_count()} cores)", flush=True)
    return out


def publish(result: dict) -> None:
    """The docs/SWEEP.md tables (``sweep/throughput``, ``sweep/targets``) to benchmarks/published/sweep.json."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import readme_tables

    by = {(r["case"], r["verifiers"]): r for r in result["throughput"]}
    columns = ["capture", "alpha* alone: pairs/s/core", "all rules: pairs/s/core"]
    rows = [[case, f"{by[(case, 'none')]['pairs_per_second_per_core']:.0f}",
             f"{by[(case, 'all')]['pairs_per_second_per_core']:.0f}"]
            for case in dict.fromkeys(r["case"] for r in result["throughput"])]
    readme_tables.publish("sweep", "throughput", columns, rows, {"machine": result["machine"],
                                                                  "cpu_count": result["cpu_count"]})
    print("\n<!-- table: sweep/throughput -->\n" + readme_tables.markdown(columns, rows))
    f, s = result["floor"], result["scaling"]
    columns = ["measure", "measured", "target"]
    rows = [["alpha* (n = 2) / read, one V = 32k dense pair", f"{f['ratio_n2']:.2f}x ({f['alpha_n2_ms']:.2f} ms / "
             f"{f['read_ms']:.2f} ms)", "<= 2x"],
            ["alpha* (n = 1,2,4,8) / read", f"{f['ratio_n1248']:.2f}x ({f['alpha_n1248_ms']:.2f} ms)", "-"],
            [f"2 vs 1 LocalCluster workers, all rules, {s['pairs']} pairs at V = 2k", f"{s['speedup']:.2f}x "
             f"({s['seconds_1']:.2f} s / {s['seconds_2']:.2f} s)", ">= 1.7x"]]
    readme_tables.publish("sweep", "targets", columns, rows, {"floor": f, "scaling": s})
    print("\n<!-- table: sweep/targets -->\n" + readme_tables.markdown(columns, rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs (a smoke run)")
    parser.add_argument("--out", default="benchmarks/results/sweep.json")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: throughput, floor, scaling")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    result: dict = {"machine": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                    "numpy": np.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "throughput" not in skip:
            result["throughput"] = throughput(root, args.quick)
        if "floor" not in skip:
            result["floor"] = floor(root)
        if "scaling" not in skip:
            result["scaling"] = scaling(root, args.quick)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    if not args.quick and not (skip - {""}):
        publish(result)


if __name__ == "__main__":
    main()
