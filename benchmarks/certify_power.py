"""How many samples black-box ``certify`` needs, and how fast it flags biased rules. Writes
``benchmarks/results/certify_power.json`` and prints the tables of docs/CERTIFY.md.

1. **Samples needed** (simulated on cell counts: the test only sees the counts, so multinomial draws stand in for a
   sampler and sizes up to 1e10 are cheap). At the default error rate alpha = 1e-3 and the default look schedule,
   for M cells (3: a V = 3 token law; 64: the binned law certify uses for V > 64) and TV = 1e-2, 1e-3, 1e-4:
   - *pass*: samples until a lossless rule's tv_upper <= TV (the run has ruled out TV >= that value);
   - *flag, spread*: samples until a rule at exactly that TV is flagged, the bias moving mass between two halves of
     the cells (the hardest kind for a given TV: the KL divergence is smallest);
   - *flag, one cell*: the same TV moved onto one small cell (a hub-like bias: much easier).
   Median over ``--reps`` runs (the pass column varies little).
2. **Time to flag** each deliberately biased rule of ``tests/certification/test_blackbox.py`` (the real torch
   samplers through a plain function, two instances, V = 4), and the false-alarm count over ``--seeds`` seeds of a
   lossless rule run to its sample limit at alpha = 0.1.
3. **Throughput** at V = 32k on this machine: samples/s of certify on rrs and kseq against the bare sampler on the
   same batches (the floor: certify cannot be faster than the function it calls), as a ratio.

    flock /tmp/team/bench.lock python benchmarks/certify_power.py            # about 3 minutes on 2 cores
    python benchmarks/certify_power.py --quick                               # fewer reps, no 1e-4 pass column
    python benchmarks/certify_power.py --no-throughput                       # parts 1 and 2 only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from otlp.certification import stats
from otlp.certification.blackbox import ALPHA, FIRST_LOOK, GROWTH

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TVS = (1e-2, 1e-3, 1e-4)


def _cells(M: int) -> np.ndarray:
    return np.array([0.5, 0.3, 0.2]) if M == 3 else np.full(M, 1.0 / M)


def _alternative(p0: np.ndarray, tv: float, kind: str) -> np.ndarray:
    P = p0.copy()
    if kind == "spread":  # +tv over the first half of the mass, -tv over the rest, proportionally
        half = np.cumsum(p0) <= 0.5 + 1e-12
        P[half] += tv * p0[half] / p0[half].sum()
        P[~half] -= tv * p0[~half] / p0[~half].sum()
    else:  # one cell: the smallest gains tv, the others lose it proportionally
        j = int(np.argmin(p0))
        rest = np.arange(p0.size) != j
        P[j] += tv
        P[rest] -= tv * p0[rest] / p0[rest].sum()
    return P


def run_counts(p0: np.ndarray, P: np.ndarray, stop: str, tv: float, rng: np.random.Generator,
               limit: int = 10**11) -> int:
    """Samples at the look where the run stops: ``stop="pass"`` when tv_upper <= tv, ``"flag"`` when rejected."""
    counts = np.zeros(p0.size)
    done = 0
    for k, n in enumerate(stats.look_sizes(FIRST_LOOK, GROWTH, limit), start=1):
        counts += rng.multinomial(n - done, P)
        done = n
        b = stats.band(counts, p0, k, ALPHA, tv if stop == "pass" else 0.0)
        if stop == "flag" and b.rejects:
            return n
        if stop == "pass" and b.tv_upper <= tv:
            return n
    return -1


def samples_needed(reps: int, quick: bool) -> list[dict[str, object]]:
    rows = []
    for M in (3, 64):
        p0 = _cells(M)
        for tv in TVS:
            row: dict[str, object] = {"cells": M, "tv": tv}
            for column, stop, kind in (("pass", "pass", None), ("flag_spread", "flag", "spread"),
                                       ("flag_one_cell", "flag", "one")):
                if quick and tv < 1e-3 and column == "pass":
                    row[column] = None
                    continue
                P = p0 if kind is None else _alternative(p0, tv, kind)
                runs = [run_counts(p0, P, stop, tv, np.random.default_rng(r)) for r in range(reps)]
                row[column] = int(statistics.median(runs))
            rows.append(row)
            print(f"  M = {M:>2}  TV = {tv:g}: {row}", flush=True)
    return rows


def biased_rules(seeds: int) -> dict[str, object]:
    import torch

    sys.path.insert(0, ROOT)
    from otlp.certification.blackbox import certify_callable
    from otlp.verifiers import get
    from tests.certification.test_blackbox import BIASED, P2, Q2, _exact_tv

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small batches: thread hand-offs cost more than they save
    out = []
    for name, (rule, n) in BIASED.items():
        drafts = [rule.make_draft(q, n) for q in Q2]
        t0 = time.perf_counter()
        r = certify_callable(lambda a, b, c, g, rule=rule: rule.sample(a, b, c, g), P2, drafts, seed=0)
        out.append({"rule": name, "exact_tv": _exact_tv(rule, drafts), "flagged": r.preserves_target is False,
                    "samples": r.samples, "seconds": time.perf_counter() - t0, "tv_lower": r.tv_lower,
                    "tv_upper": r.tv_upper})
        print(f"  {name:<32} TV {out[-1]['exact_tv']:.4f} in [{r.tv_lower:.4f}, {r.tv_upper:.4f}]: flagged "
              f"{out[-1]['flagged']} after {r.samples} samples, {out[-1]['seconds']:.2f} s", flush=True)
    v = get("rrs")
    draft = v.make_draft([0.5, 0.3, 0.2], 2)
    alarms = 0
    for seed in range(seeds):
        r = certify_callable(lambda a, b, c, g: v.sample(a, b, c, g), [0.1, 0.6, 0.3], draft, samples=20_000,
                             tolerance=0.0, alpha=0.1, seed=seed)
        alarms += r.preserves_target is False
    print(f"  false alarms: {alarms} of {seeds} runs of rrs to 20000 samples at alpha = 0.1", flush=True)
    torch.set_num_threads(threads)
    return {"rules": out, "false_alarms": alarms, "false_alarm_runs": seeds, "false_alarm_alpha": 0.1}


def throughput(V: int, samples: int) -> list[dict[str, object]]:
    import torch

    from otlp.certification.blackbox import BATCH_CELLS, certify_callable
    from otlp.verifiers import get

    rng = np.random.default_rng(0)
    logits = rng.normal(size=V) * 3
    p = np.exp(logits - logits.max())
    p /= p.sum()
    q = np.exp(0.7 * np.log(p) + rng.normal(size=V))
    q /= q.sum()
    rows = []
    for name in ("rrs", "kseq"):
        v = get(name)
        draft = v.make_draft(q, 4)
        B = BATCH_CELLS // V
        w = torch.as_tensor(draft.sample(B, np.random.default_rng(1)))
        pt, qt = torch.as_tensor(p).expand(B, V), torch.as_tensor(q).expand(B, V)
        gen = torch.Generator().manual_seed(0)
        v.sample(pt, qt, w, gen)
        t0 = time.perf_counter()
        calls = max(1, samples // B)
        for _ in range(calls):
            v.sample(pt, qt, w, gen)
        bare = calls * B / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        r = certify_callable(lambda a, b, c, g, v=v: v.sample(a, b, c, g), p, draft, samples=samples,
                             tolerance=0.0)
        full = r.samples / (time.perf_counter() - t0)
        rows.append({"rule": name, "V": V, "n": 4, "batch": B, "bare_samples_per_s": bare,
                     "certify_samples_per_s": full, "ratio": full / bare, "tv_upper": r.tv_upper})
        print(f"  {name:<5} V = {V}: bare sampler {bare:,.0f}/s, certify {full:,.0f}/s (x{full / bare:.2f}); "
              f"after {r.samples} samples TV <= {r.tv_upper:.3g} on {r.cells}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-throughput", action="store_true", help="skip part 3 (V = 32k sampling on the CPU)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "certify_power.json"))
    args = parser.parse_args()
    if args.quick:
        args.reps, args.seeds = 3, 50
    print(f"samples needed at alpha = {ALPHA:g} (simulated counts, median of {args.reps}):", flush=True)
    needed = samples_needed(args.reps, args.quick)
    print("time to flag the biased rules (torch samplers, plain functions, V = 4, 2 instances):", flush=True)
    flagged = biased_rules(args.seeds)
    speed = []
    if not args.no_throughput:
        print("throughput at V = 32000, n = 4 (CPU):", flush=True)
        speed = throughput(32_000, 100_000 if not args.quick else 20_000)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"alpha": ALPHA, "first_look": FIRST_LOOK, "growth": GROWTH, "samples_needed": needed,
                   "biased": flagged, "throughput": speed, "threads": __import__("torch").get_num_threads(),
                   "machine": os.uname().nodename}, fh, indent=2)
    print("\n| cells | TV | pass: TV <= value shown | flag, spread bias | flag, one-cell bias |")
    print("| --- | --- | --- | --- | --- |")
    for row in needed:
        def f(x: object) -> str:
            return "-" if x is None else (f"{x:.2g}" if x >= 0 else "> 1e11")

        print(f"| {row['cells']} | {row['tv']:g} | {f(row['pass'])} | {f(row['flag_spread'])} | "
              f"{f(row['flag_one_cell'])} |")
    print(f"\nwrote {args.out}")
    return 0 if all(r["flagged"] for r in flagged["rules"]) else 1


if __name__ == "__main__":
    sys.exit(main())
