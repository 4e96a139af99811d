"""Block efficiency E[tau + 1] of multi-step verification rules on small explicit models (issue 6).

For K in {1, 2, 3, 4} drafted paths and block lengths L in {2, 3, 4}: token-wise SpS along one path, BV,
GBV, the multi-draft token tree (RRS at each node), and the antichain-LP optimum (MultiPathLP, papers/002
Thm 4.3; constraint generation under a time budget, "-" where it did not converge in time).  Every number
is exact (closed forms / recursions on the prefix tree), averaged over ``--instances`` random model pairs.

Families:
- random: every conditional of target and draft i.i.d. Dirichlet(1), draft mixed 50% towards the target.
- bigram: a decode-loop-style pair: the target is a bigram (first-order Markov) LM with Dirichlet(0.3)
  transitions; the draft is the same LM smoothed (temperature 1.6, mixed 20% with a random bigram) --
  a stand-in for an n-gram draft of a larger model until otlp.decode's models can be tabulated.

Usage: python benchmarks/block_efficiency.py [--instances 3] [--lp-budget 10] [--V 3]
Writes benchmarks/results/block_efficiency.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np

from otlp.formulations.multipath import MultiPathLP
from otlp.multistep import (
    ARModel,
    bv_efficiency,
    efficiency_from_law,
    gbv_efficiency,
    markov_ar_model,
    random_pair,
    sps_efficiency,
    tempered,
    token_tree_output_law,
)

KS = (1, 2, 3, 4)
LS = (2, 3, 4)


def bigram_pair(V: int, L: int, rng: np.random.Generator) -> tuple[ARModel, ARModel]:
    initial = rng.dirichlet(np.full(V, 0.3))
    transition = rng.dirichlet(np.full(V, 0.3), size=V)
    target = markov_ar_model(initial, transition, L, name="bigram target")
    other = markov_ar_model(rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V), size=V), L)
    smooth = tempered(target, 1.6)
    draft = ARModel(0.8 * smooth.conditionals + 0.2 * other.conditionals, V, name="bigram draft")
    return target, draft


def instance(family: str, V: int, L: int, rng: np.random.Generator) -> tuple[ARModel, ARModel]:
    if family == "random":
        return random_pair(V, L, rng, concentration=1.0, closeness=0.5)
    return bigram_pair(V, L, rng)


def run(instances: int, lp_budget: float, V: int, seed: int) -> list[dict]:
    rows = []
    for family in ("random", "bigram"):
        for L in LS:
            rng = np.random.default_rng(seed + L)
            pairs = [instance(family, V, L, rng) for _ in range(instances)]
            for K in KS:
                cell = {"family": family, "V": V, "L": L, "K": K, "instances": instances}
                cell["sps"] = float(np.mean([sps_efficiency(p, q, L) for p, q in pairs]))
                cell["bv"] = float(np.mean([bv_efficiency(p, q, L) for p, q in pairs]))
                cell["gbv"] = float(np.mean([gbv_efficiency(p, q, L, K) for p, q in pairs]))
                cell["token_tree"] = float(np.mean(
                    [efficiency_from_law(token_tree_output_law(p, q, L, K), V, L) for p, q in pairs]))
                values, seconds, ok = [], 0.0, True
                for p, q in pairs:
                    start = time.perf_counter()
                    sol = MultiPathLP(p, q, L, K).solve(time_limit=lp_budget)
                    seconds += time.perf_counter() - start
                    ok &= bool(sol.info["converged"])
                    values.append(sol.value)
                cell["lp"] = float(np.mean(values)) if ok else None
                cell["lp_seconds"] = seconds / instances
                cell["gbv_over_lp"] = cell["gbv"] / cell["lp"] if ok else None
                rows.append(cell)
                print_row(cell)
    return rows


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


HEADER = (f"{'family':<7} {'L':>2} {'K':>2} | {'SpS':>7} {'BV':>7} {'GBV':>7} {'tree':>7} {'LP opt':>7} | "
          f"{'GBV/LP':>7} {'tree/LP':>7} {'GBV/BV':>7} | {'LP s':>6}")


def print_row(c: dict) -> None:
    lp = c["lp"]
    print(f"{c['family']:<7} {c['L']:>2} {c['K']:>2} | {c['sps']:7.4f} {c['bv']:7.4f} {c['gbv']:7.4f} "
          f"{c['token_tree']:7.4f} {fmt(lp):>7} | {fmt(c['gbv_over_lp']):>7} "
          f"{fmt(None if lp is None else c['token_tree'] / lp):>7} {c['gbv'] / c['bv']:7.4f} | "
          f"{c['lp_seconds']:6.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--lp-budget", type=float, default=10.0, help="seconds per LP (constraint generation)")
    parser.add_argument("--V", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(HEADER)
    rows = run(args.instances, args.lp_budget, args.V, args.seed)
    out = pathlib.Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "block_efficiency.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    print(f"wrote {out / 'block_efficiency.json'}")


if __name__ == "__main__":
    main()
