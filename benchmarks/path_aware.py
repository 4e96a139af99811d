"""How many more drafted paths the path-aware optimal rule keeps alive than the class-chain plan (issue 18).

For n i.i.d. drafts, every alpha*-optimal rule accepts the same mass; they differ in E[number of drafted paths that
continue] = sum_omega P(omega) sum_i pi(i | omega) count_i(omega). For random instances (V = 3..7, p and q
Dirichlet(0.5), ``--instances`` per n) this prints that expectation under

- the class-chain plan of ``optimal`` (otlp/optimal/chains.py),
- the path-aware plan (otlp.optimal.paths.PathAwareTransport, every token in its window: the lexicographic LP's
  optimum, tests/optimal/test_path_aware.py), and
- the path-aware plan with a small window (``--window`` multisets, the top tokens of q only): its share of the gain,

as the mean / median / max relative gain of the optimum over each plan, and the time of one PathAwareTransport at
V = 2000 (default window, Dirichlet(0.05) p and q). Publishes the table ``path_aware/lp_gain`` (docs/PATHS.md,
README.md; benchmarks/readme_tables.py); writes benchmarks/results/path_aware.json.
Run: python benchmarks/path_aware.py [--instances 300 --window 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from otlp.optimal.paths import PathAwareTransport

sys.path.insert(0, str(Path(__file__).resolve().parent))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=300)
    parser.add_argument("--window", type=int, default=10, help="multisets in the small window")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    print(f"{'n':>2} | {'E[paths]: chains':>16} {'small win':>9} {'optimum':>8} | gain over chains "
          f"(mean / median / max) | small window's share of the gain")
    for n in (2, 3, 4):
        vals = {"chains": [], "window": [], "optimum": []}
        for _ in range(args.instances):
            V = int(rng.integers(3, 8))
            p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
            full = PathAwareTransport(p, q, n)
            small = PathAwareTransport(p, q, n, max_tuples=args.window)
            vals["chains"].append(full.base_value)
            vals["window"].append(small.lp_value)
            vals["optimum"].append(full.lp_value)
        v = {k: np.array(x) for k, x in vals.items()}
        gain = v["optimum"] / v["chains"] - 1.0
        room = v["optimum"] - v["chains"]
        share = np.where(room > 1e-9, (v["window"] - v["chains"]) / np.where(room > 1e-9, room, 1.0), 1.0)
        row = {"n": n, "instances": args.instances, **{k: float(x.mean()) for k, x in v.items()},
               "gain_mean": float(gain.mean()), "gain_median": float(np.median(gain)), "gain_max": float(gain.max()),
               "improved": float((gain > 1e-6).mean()), "window_share_mean": float(share.mean()),
               "window_share_min": float(share.min())}
        rows.append(row)
        print(f"{n:>2} | {row['chains']:16.4f} {row['window']:9.4f} {row['optimum']:8.4f} | "
              f"{100 * row['gain_mean']:5.1f}% / {100 * row['gain_median']:5.1f}% / {100 * row['gain_max']:5.1f}%  | "
              f"{row['window_share_mean']:.3f} (min {row['window_share_min']:.3f})", flush=True)
    timing = {}
    p, q = rng.dirichlet(np.full(2000, 0.05)), rng.dirichlet(np.full(2000, 0.05))
    for n in (2, 4):
        PathAwareTransport(p, q, n)
        start = time.perf_counter()
        rule = PathAwareTransport(p, q, n)
        timing[n] = {"ms": 1e3 * (time.perf_counter() - start), "window_tokens": int(rule.window.size)}
        print(f"V = 2000, n = {n}: one PathAwareTransport {timing[n]['ms']:.1f} ms (window of "
              f"{rule.window.size} tokens)")
    out = Path(__file__).resolve().parent / "results" / "path_aware.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows, "timing": timing}, indent=1))
    print(f"wrote {out}")
    columns = ["n", "E[paths]: class chains", "path-aware optimum", "gain over class chains (mean / median / max)",
               f"window of {args.window} multisets: share of the gain (mean / min)"]
    cells = [[str(r["n"]), f"{r['chains']:.4f}", f"{r['optimum']:.4f}",
              f"{100 * r['gain_mean']:.1f}% / {100 * r['gain_median']:.1f}% / {100 * r['gain_max']:.1f}%",
              f"{r['window_share_mean']:.2f} / {r['window_share_min']:.2f}"] for r in rows]
    readme_tables.publish("path_aware", "lp_gain", columns, cells,
                          {"instances": args.instances, "seed": args.seed, "V": "3..7", "dirichlet": 0.5})
    print("\n<!-- table: path_aware/lp_gain -->\n" + readme_tables.markdown(columns, cells))


if __name__ == "__main__":
    main()
