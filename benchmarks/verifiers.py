"""Batched verifier throughput against a per-sequence loop of the same rule.

For each rule, batch size B in {1, 64}, vocabulary V in {1k, 32k, 128k} and drafts n in {2, 4, 8} (SpecHub: n = 2),
times ``verifier.sample`` on the whole batch and a straightforward loop that calls it once per sequence (B = 1
slices), and reports rows/s and the ratio loop / batched. Float32 on CPU; CUDA rows as well when a GPU is present.
Writes ``benchmarks/results/verifiers.json``.

    python benchmarks/verifiers.py                 # the full grid, a few minutes on 2 cores
    python benchmarks/verifiers.py --quick         # V = 1k and 32k only
    python benchmarks/verifiers.py --rules kseq spechub --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from otlp.verifiers import get

RULES = ("sps", "rrs", "rrs_wor", "kseq", "spechub", "is", "weighted_is", "greedy")


def _inputs(B: int, V: int, n: int, device: str, seed: int = 0):  # noqa: ANN202
    g = torch.Generator(device="cpu").manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    return p.to(device), q.to(device), drafts.to(device)


def _time(fn, reps: int, device: str) -> float:  # noqa: ANN001
    fn()  # warm-up
    out = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def bench(rule: str, B: int, V: int, n: int, device: str, reps: int) -> dict[str, object]:
    v = get(rule)
    p, q, drafts = _inputs(B, V, n, device)
    if v.per_draft_q:
        q = q.unsqueeze(1).expand(B, n, V).contiguous()
    gen = torch.Generator(device=device).manual_seed(0)
    batched = _time(lambda: v.sample(p, q, drafts, gen), reps, device)

    def loop() -> None:
        for b in range(B):
            v.sample(p[b:b + 1], q[b:b + 1], drafts[b:b + 1], gen)

    looped = _time(loop, reps, device) if B > 1 else batched
    return {"rule": rule, "device": device, "B": B, "V": V, "n": n, "batched_s": batched, "loop_s": looped,
            "rows_per_s": B / batched, "loop_rows_per_s": B / looped, "speedup": looped / batched}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules", nargs="*", default=list(RULES))
    ap.add_argument("--quick", action="store_true", help="V in {1k, 32k} only")
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "verifiers.json"))
    args = ap.parse_args()
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    sizes = (1_000, 32_000) if args.quick else (1_000, 32_000, 128_000)
    rows = []
    head = (f"{'rule':<12} {'dev':<5} {'B':>3} {'V':>7} {'n':>2} {'batched ms':>11} {'loop ms':>10} {'rows/s':>10} "
            f"{'ratio':>7}")
    print(head)
    print("-" * len(head))
    for device in devices:
        for rule in args.rules:
            for V in sizes:
                for n in ((2,) if rule == "spechub" else (2, 4, 8)):
                    for B in (1, 64):
                        r = bench(rule, B, V, n, device, args.reps)
                        rows.append(r)
                        print(f"{rule:<12} {device:<5} {B:>3} {V:>7} {n:>2} {1e3 * r['batched_s']:>11.2f} "
                              f"{1e3 * r['loop_s']:>10.2f} {r['rows_per_s']:>10.0f} {r['speedup']:>7.1f}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
