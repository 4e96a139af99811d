"""Build and solve time of the network formulations and subset-selection methods, side by side.

    python benchmarks/networks.py [--quick]

Grid: V in {5, 10, 20}, n in {2, 3}, i.i.d. drafts (Dirichlet p, q, seed 0). Prints one table (times in ms, and
each route's solve time as a ratio to the fastest route for the same instance) and writes
benchmarks/results/networks.json. networkx (pure Python) is skipped above 2,000 tuples.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import otlp
from otlp.lp.formulations.maxflow import MaxFlowNetwork
from otlp.lp.formulations.outer_inner import OuterInnerNetworks
from otlp.lp.formulations.subset_selection import SubsetSelection


def instance(V: int, n: int):  # -> (p, draft)
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    return p, otlp.IID(q, n)


def routes(V: int, n: int):  # -> list of (formulation, route, callable returning (alpha, build_s, solve_s))
    p, draft = instance(V, n)
    out = []
    for backend in ("ortools", "networkx", "highs"):
        if backend == "networkx" and V**n > 2000:
            continue
        for cls in (MaxFlowNetwork, OuterInnerNetworks):
            def run(cls=cls, backend=backend):
                sol = cls(p, draft).solve(backend=backend)
                return float(sol.value), sol.seconds["build"], sol.seconds["solve"]
            out.append((cls.__name__, backend, run))
    for method in ("sorted_prefix", "mincut", "submodular", "brute_force"):
        def run(method=method):
            start = time.perf_counter()
            sol = SubsetSelection(p, draft).solve(method=method)
            return sol.alpha, 0.0, time.perf_counter() - start
        out.append(("SubsetSelection", method, run))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="V in {5, 10} only")
    args = parser.parse_args()
    grid = [(V, n) for V in ((5, 10) if args.quick else (5, 10, 20)) for n in (2, 3)]
    rows = []
    for V, n in grid:
        alpha_ref = otlp.optimal_acceptance(*instance(V, n))
        group = []
        for formulation, route, run in routes(V, n):
            run()  # warm-up (imports, first-call overheads)
            alpha, build, solve = run()
            group.append({"V": V, "n": n, "formulation": formulation, "route": route, "alpha": alpha,
                          "error": abs(alpha - alpha_ref), "build_ms": 1e3 * build, "solve_ms": 1e3 * solve})
        fastest = min(r["build_ms"] + r["solve_ms"] for r in group)
        for r in group:
            r["ratio"] = (r["build_ms"] + r["solve_ms"]) / fastest
        rows.extend(group)
    header = f"{'V':>3} {'n':>2}  {'formulation':<19} {'route':<14} {'build ms':>9} {'solve ms':>9} {'x fastest':>9}" \
             f" {'|alpha err|':>11}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['V']:>3} {r['n']:>2}  {r['formulation']:<19} {r['route']:<14} {r['build_ms']:>9.2f} "
              f"{r['solve_ms']:>9.2f} {r['ratio']:>9.1f} {r['error']:>11.1e}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "networks.json").write_text(json.dumps(rows, indent=1))
    print(f"\nwrote {out / 'networks.json'}")


if __name__ == "__main__":
    main()
