"""``otlp sweep`` throughput: pairs per second per core, alpha* against reading from disk, 1 vs 2 Dask workers.

All in one run, on synthetic LM-shaped pairs (Zipf-like target logits, draft = target + Gaussian noise, a per-row
temperature between peaked and flat):

1. pairs/s per core (one worker process, the whole pipeline: read + SHA-256 check + compute + save + assemble) at
   V = 2k dense, V = 32k dense and V = 32k sparse top-256, for alpha* alone (--verifiers none) and for all rules,
   n = 1,2,4,8, q untruncated;
2. the physical floor: reading one V = 32k dense pair from its shard (page cache hot, SHA-256 checked, Parquet
   decoded) against alpha* for that pair (one n, and n = 1,2,4,8); target ratio <= 2;
3. scaling: the same sweep (all rules, V = 2k dense, 16 shards) on a LocalCluster of 1 worker and of 2 workers
   (processes, 1 thread each), clusters started before the clock; target >= 1.7x.

Run: flock /tmp/team/bench.lock python benchmarks/sweep.py [--quick]. Writes benchmarks/results/sweep.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
    from otlp.sweep import open_capture, run_sweep

    cases = [("V=2k dense", 2000, "dense", 512 if not quick else 128, 128),
             ("V=32k sparse top-256", 32000, "sparse", 256 if not quick else 64, 64),
             ("V=32k dense", 32000, "dense", 128 if not quick else 32, 32)]
    rows = []
    for label, V, storage, M, shard_rows in cases:
        cap = make_capture(root / label.replace(" ", "_"), V, M, storage, shard_rows)
        for rules in ("none", "all"):
            m = M if rules == "none" else max(16, M // 4)  # the rules cost more: fewer pairs
            sub = cap if m == M else make_capture(root / f"{label}_{m}".replace(" ", "_"), V, m, storage, shard_rows)
            out = root / f"out_{label}_{rules}".replace(" ", "_")
            t = time.perf_counter()
            res = run_sweep(sub, ns=(1, 2, 4, 8), verifiers=rules, out=out, workers=1, plots=False)
            seconds = time.perf_counter() - t
            rows.append({"case": label, "verifiers": rules, "pairs": open_capture(sub).rows, "seconds": seconds,
                         "pairs_per_second_per_core": open_capture(sub).rows / seconds,
                         "skipped": sorted(res.report["skipped"])})
            print(f"{label:<22} verifiers={rules:<5} {rows[-1]['pairs']:>5} pairs  {seconds:7.2f} s  "
                  f"{rows[-1]['pairs_per_second_per_core']:9.1f} pairs/s/core", flush=True)
    return rows


def floor(root: Path) -> dict:
    """Read one V = 32k dense pair vs alpha* on it (both per pair, best of 3, one process)."""
    from otlp.sweep import open_capture
    from otlp.sweep.compute import CHUNK_CELLS, alpha_star_rows

    M, V = 64, 32000
    cap = open_capture(make_capture(root / "floor", V, M, "dense", M, seed=1))
    read = best_of(lambda: cap.read(0)) / M
    block = cap.read(0)
    chunk = max(1, CHUNK_CELLS // V)

    def alpha(ns: tuple[int, ...]) -> None:
        for s in range(0, M, chunk):
            alpha_star_rows(block.p[s:s + chunk], block.q[s:s + chunk], ns)

    one = best_of(lambda: alpha((2,))) / M
    four = best_of(lambda: alpha((1, 2, 4, 8))) / M
    out = {"V": V, "read_ms": 1e3 * read, "alpha_n2_ms": 1e3 * one, "alpha_n1248_ms": 1e3 * four,
           "ratio_n2": one / read, "ratio_n1248": four / read, "shard_bytes_per_pair": cap.shards[0].bytes / M}
    print(f"V = 32k dense, per pair: read {out['read_ms']:.2f} ms (SHA-256 + Parquet, page cache hot); alpha* n=2 "
          f"{out['alpha_n2_ms']:.2f} ms = {out['ratio_n2']:.2f}x read (target <= 2); n=1,2,4,8 "
          f"{out['alpha_n1248_ms']:.2f} ms = {out['ratio_n1248']:.2f}x", flush=True)
    return out


def scaling(root: Path, quick: bool) -> dict:
    from dask.distributed import Client, LocalCluster

    from otlp.sweep import run_sweep

    cap = make_capture(root / "scaling", 2000, 16 * (16 if quick else 32), "dense", 16 if quick else 32, seed=2)
    seconds = {}
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=40) as lc, Client(lc) as client:
            client.run(lambda: __import__("otlp.sweep.runner"))  # imports outside the clock
            t = time.perf_counter()
            run_sweep(cap, ns=(1, 2, 4, 8), verifiers="all", out=root / f"scale{workers}", client=client, plots=False)
            seconds[workers] = time.perf_counter() - t
    out = {"pairs": 16 * (16 if quick else 32), "shards": 16, "seconds_1": seconds[1], "seconds_2": seconds[2],
           "speedup": seconds[1] / seconds[2], "cpu_count": os.cpu_count(),
           "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    print(f"LocalCluster, all rules, V = 2k dense, {out['pairs']} pairs in 16 shards: 1 worker {seconds[1]:.2f} s, "
          f"2 workers {seconds[2]:.2f} s, speedup {out['speedup']:.2f}x (target >= 1.7; {os.cpu_count()} cores, "
          f"load {out['load_average']})", flush=True)
    return out


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


if __name__ == "__main__":
    main()
