"""What peeling buys the exact i.i.d. solver: otlp.optimal with priority-chain peeling ON vs OFF.

otlp.optimal cuts the tokens into blocks (records of psi in q/p order) and then peels blocks into closed-form
priority chains (otlp/optimal/peeling.py), leaving only small leaves for the damped Newton (otlp/optimal/newton.py).
Peeling is a free choice among optimal plans (it changes speed, never the law); this script measures how much it
removes from Newton and what that is worth in time.

Grid: the GR Table 1 grid (k, n) in {(10,2), (10,3), (10,4), (10,5), (100,2), (100,3), (1000,2)}, k = V. Instances:
--pairs pairs (p, q) per grid point from the heavy-tailed generator of benchmarks/solve_times.py (heavy_tailed_pair:
z = 2 t_3 over V tokens, p = softmax(z), q = softmax(z + N(0, 1))), seeded by (--seed, k, n) exactly as there, so
the instances are the solve-times table's "heavy" ones.

Per instance and mode, the timed work is what OptimalTransport.from_arrays(..., method="blocks") does for IID
drafts (the default method="auto" builds class chains instead for V <= 256, otlp/optimal/scalar.py):
``inst = prepare(p, q, n, peel=...)`` then ``solve_instances([inst])`` (otlp.optimal.solve), one instance at a time.
ON is the production setting (peel=True, peel_min=2); OFF is prepare(..., peel=False): every block of >= 2 tokens
goes to Newton whole. The two modes alternate pair by pair (same conditions for both); one untimed solve of the
first pair per mode and grid point warms the caches first.

Columns
* ON ms, OFF ms: median / p95 / max milliseconds per instance (prepare + solve_instances).
* off/on: ratio of the medians and of the p95s (> 1: peeling is faster).
* newton: share of instances that still reach Newton with peeling ON (some leaf of >= 2 tokens).
* leaf: the largest leaf over the instances (ON; 1 = everything closed form, 0 = every token peeled).
* depth: the deepest nest, max over instances and blocks of the block's nested chain levels (Block.depth).
* it ON, it OFF: mean Newton iterations per instance over the instances that reach Newton (an instance's count is
  the most over its leaves, as Block.iterations; "-" when none reaches it).
* block: the largest block OFF sends to Newton (the largest record block of >= 2 tokens; 1 if none).
* err ON, err OFF: max over instances of the row error sum ||R - t||_1 over leaves and chains
  (inst.gradient_norm.sum() + inst.chain_error.sum() = OptimalTransport.row_error): both routes are exact, so both
  must sit at rounding level (<= 1e-12 per block is OptimalTransport.success).
OFF is skipped at a grid point where some instance has a block the subset-term Newton (n >= 3) would refuse
(otlp.ModelTooLargeError, checked from the block sizes before solving); the cell then says "refused" and the JSON
gives the reason. The JSON also has, per grid point, the success shares and max |sum R_on - sum R_off| (both rules'
acceptance; they agree to rounding).

Usage: python benchmarks/peeling.py [--pairs 40] [--quick] [--seed 0] [--out benchmarks/results/peeling.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path

import numpy as np

GRID = [(10, 2), (10, 3), (10, 4), (10, 5), (100, 2), (100, 3), (1000, 2)]
#: per block, OptimalTransport.success's machine-precision bar on ||R - t||_1
SUCCESS_TOLERANCE = 1e-12


def load_generator():
    """heavy_tailed_pair from benchmarks/solve_times.py (loaded as a file: benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("solve_times_bench", Path(__file__).parent / "solve_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.heavy_tailed_pair


def solve_once(p: np.ndarray, q: np.ndarray, n: int, peel: bool) -> tuple[float, object]:
    """Seconds for prepare + solve_instances (the work of OptimalTransport.from_arrays(method="blocks")), and the
    instance."""
    from otlp.optimal.solve import prepare, solve_instances

    t0 = time.perf_counter()
    inst = prepare(p, q, n, peel=peel)
    solve_instances([inst])
    return time.perf_counter() - t0, inst


def describe(inst) -> dict:
    """The peeling / Newton record of one solved instance."""
    leaf = inst.leaf_of_token  # [V], -1 for a chain token
    sizes = np.bincount(leaf[leaf >= 0])  # [L'] tokens per leaf (0 for a leaf emptied by renumbering)
    multi = [tokens.size for tokens in inst.leaf_tokens.values()]  # sizes of the Newton leaves (>= 2)
    on_chain = inst.chain_node >= 0  # [V]
    depth = int(inst.node_depth[inst.chain_node[on_chain]].max()) + 1 if on_chain.any() else 0
    its = [int(inst.iterations[j]) for j in inst.leaf_tokens]
    row_error = float(inst.gradient_norm.sum() + inst.chain_error.sum())
    ok = bool(np.all(inst.gradient_norm <= SUCCESS_TOLERANCE) and np.all(inst.chain_error <= SUCCESS_TOLERANCE))
    return {"newton": bool(multi), "largest_leaf": int(sizes.max(initial=0)), "depth": depth,
            "iterations": max(its, default=0), "iterations_sum": sum(its), "row_error": row_error, "success": ok,
            "acceptance": float(inst.row_sums.sum())}


def refusal(pairs: list, n: int) -> str | None:
    """Why OFF would be refused at this grid point (the largest record block over the instances is above the
    subset-term memory limit of otlp.optimal.coefficients), or None. Only n >= 3 builds subset terms."""
    from otlp.errors import ModelTooLargeError
    from otlp.optimal.blocks import block_records
    from otlp.optimal.coefficients import check_block_size

    if n < 3:
        return None
    largest = max(int(np.diff(block_records(p, q, n).records).max()) for p, q in pairs)
    try:
        check_block_size(largest, n)
    except ModelTooLargeError as err:
        return str(err)
    return None


def stats(ms: list[float]) -> dict:
    a = np.asarray(ms)  # [pairs]
    return {"median": float(np.median(a)), "p95": float(np.percentile(a, 95)), "max": float(a.max())}


def summarise(ms: list[float], recs: list[dict]) -> dict:
    reach = [r for r in recs if r["newton"]]
    return stats(ms) | {
        "newton_share": len(reach) / len(recs),
        "largest_leaf": max(r["largest_leaf"] for r in recs),
        "max_depth": max(r["depth"] for r in recs),
        "mean_iterations": float(np.mean([r["iterations"] for r in reach])) if reach else None,
        "mean_iterations_sum": float(np.mean([r["iterations_sum"] for r in reach])) if reach else None,
        "max_row_error": max(r["row_error"] for r in recs),
        "success": sum(r["success"] for r in recs) / len(recs),
    }


def grid_point(pairs: list, n: int) -> dict:
    """Time both modes on the same pairs (alternating), after one untimed warm-up solve per mode."""
    reason = refusal(pairs, n)
    modes = (True,) if reason else (True, False)
    for peel in modes:
        solve_once(*pairs[0], n, peel)  # warm caches (combination tables, imports)
    ms: dict[bool, list[float]] = {m: [] for m in modes}
    recs: dict[bool, list[dict]] = {m: [] for m in modes}
    for p, q in pairs:
        for peel in modes:
            dt, inst = solve_once(p, q, n, peel)
            ms[peel].append(dt * 1e3)
            recs[peel].append(describe(inst))
    row = {"on": summarise(ms[True], recs[True])}
    if reason:
        row["off"] = {"status": "refused", "reason": reason}
        return row
    off = summarise(ms[False], recs[False])
    off["largest_block"] = off.pop("largest_leaf")  # no peeling: the leaves are the record blocks
    off.pop("max_depth")
    row["off"] = off | {"status": "ok"}
    row["ratio_median"] = off["median"] / row["on"]["median"]
    row["ratio_p95"] = off["p95"] / row["on"]["p95"]
    row["max_acceptance_gap"] = max(abs(a["acceptance"] - b["acceptance"])
                                    for a, b in zip(recs[True], recs[False], strict=True))
    return row


def _its(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


HEADER = (f"{'(k,n)':>9} | {'ON ms med/p95/max':>20} | {'OFF ms med/p95/max':>20} | {'off/on':>11} | newton | "
          f"leaf | depth | it ON | block | it OFF | {'err ON':>7} | {'err OFF':>7}")


def format_row(V: int, n: int, row: dict) -> str:
    on, off = row["on"], row["off"]
    left = (f"{str((V, n)):>9} | {on['median']:6.2f} /{on['p95']:6.2f} /{on['max']:5.1f} | ")
    if off["status"] != "ok":
        mid = f"{'refused (big block)':>20} | {'-':>11} | "
        tail = f"{'-':>5} | {'-':>6} | {on['max_row_error']:7.1e} | {'-':>7}"
    else:
        mid = (f"{off['median']:6.2f} /{off['p95']:6.2f} /{off['max']:5.1f} | "
               f"{row['ratio_median']:4.1f}x/{row['ratio_p95']:4.1f}x | ")
        tail = (f"{off['largest_block']:5d} | {_its(off['mean_iterations']):>6} | {on['max_row_error']:7.1e} | "
                f"{off['max_row_error']:7.1e}")
    return (left + mid + f"{on['newton_share']:6.0%} | {on['largest_leaf']:4d} | {on['max_depth']:5d} | "
            f"{_its(on['mean_iterations']):>5} | " + tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=40, help="(p, q) pairs per grid point")
    ap.add_argument("--quick", action="store_true", help="10 pairs per grid point")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "peeling.json"))
    args = ap.parse_args()
    if args.quick:
        args.pairs = 10
    heavy_tailed_pair = load_generator()

    results = {"config": vars(args) | {"threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                                       "timed": "prepare + solve_instances per instance"}, "grid": []}
    print(f"peeling ON vs OFF, {args.pairs} heavy-tailed pairs per point; ms per instance = prepare + "
          "solve_instances; off/on = ratio of medians / of p95s")
    print(HEADER)
    print("-" * len(HEADER))
    t_start = time.perf_counter()
    for V, n in GRID:
        rng = np.random.default_rng([args.seed, V, n])  # as benchmarks/solve_times.py's heavy source
        pairs = [heavy_tailed_pair(rng, V) for _ in range(args.pairs)]
        row = {"k": V, "n": n, "pairs": len(pairs)} | grid_point(pairs, n)
        results["grid"].append(row)
        print(format_row(V, n, row))
    results["seconds"] = time.perf_counter() - t_start
    print(f"newton = share of instances with a leaf of >= 2 tokens (ON); leaf / block = largest Newton input; "
          f"it = mean Newton iterations where reached; err = max sum ||R - t||_1 ({results['seconds']:.0f} s)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()
