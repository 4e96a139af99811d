"""Block efficiency E[tau + 1] of multi-step verification rules on small explicit models (issue 6).

For K in {1, 2, 3, 4} drafted paths and block lengths L in {2, 3, 4}: token-wise SpS along one path, BV,
GBV, the multi-draft token tree (RRS at each node), the optimal K-path rule (issue 16: Thm 4.6's q^Gamma*
decomposed into greedy rankings, ``otlp.multistep.optimal_rule``), two cheap rules cut from its mixture, and
the antichain-LP optimum (MultiPathLP, papers/002 Thm 4.3; constraint generation under a time budget, "-" where
it did not converge in time), and the token tree with an alpha*-optimal rule at every node (issue 18): "tree opt"
with the class-chain plan of ``optimal`` (otlp/optimal/chains.py), "tree paths" with the path-aware plan of
``optimal_paths`` (otlp/optimal/paths.py: alpha*, then the most continuing drafted paths), both exact
(otlp.optimal.tree_law).  Every number is exact (closed forms / recursions on the prefix tree), averaged
over ``--instances`` random model pairs.

Cheap rules (each a valid sampler: a mixture of greedy rankings run with BV on its own exact q^Gamma, Eq. 19):
- "best 1": the single ranking of the optimal mixture with the highest block efficiency (one fixed ranking);
- "top 4": the 4 heaviest rankings of the optimal mixture, reweighted to sum 1.
"opt s" is the optimal rule's precomputation time (LP + decomposition), mean per instance.

Families:
- random: every conditional of target and draft i.i.d. Dirichlet(1), draft mixed 50% towards the target.
- decode: derived from the decode loop's embedded n-gram pair (otlp.decode.ngram.embedded_models(): a bigram
  Kneser-Ney draft and a 4-gram Kneser-Ney target over a 2000-word vocabulary).  Instance j takes a real
  context (a prompt of otlp.cli.decode.DEFAULT_PROMPTS, then shorter prefixes of them), keeps the V tokens with
  the most target mass there, and tabulates p(. | prefix), q(. | prefix) for every prefix of depth <= L by
  querying the real models at context + prefix (otlp.multistep.from_lm.projected_pair).  This is a PROJECTION
  of the real models onto V tokens: each conditional is restricted to those V tokens and renormalised, so mass
  outside them is dropped; the numbers are not the real models' block efficiencies.

Usage: python benchmarks/block_efficiency.py [--instances 4] [--lp-budget 10] [--V 3] [--families random,decode]
Writes benchmarks/results/block_efficiency.json.
``--timing``: instead, the optimal rule's precomputation time against V^L (decode-projected pairs, K = 2 and 4,
first decode context; LP rounds, LP seconds, decomposition seconds, rankings), written to
benchmarks/results/optimal_rule_timing.json.
``--trees``: instead, only the token-tree columns (RRS, class-chain optimal, path-aware optimal) with SpS, GBV
and the antichain-LP optimum, over more instances (``--instances``, random family, V = ``--V``), with the mean
paired difference paths - class chains and its standard error; written to
benchmarks/results/block_efficiency_trees.json, and the table ``block_efficiency/trees`` of docs/PATHS.md published
(``--from-json FILE`` publishes a finished run).
``--decomposition``: the decomposition alone at N = 10^3 and 10^4 paths (a point of B(psi) mixing q with 20
random greedy vertices, Dirichlet(0.5) q), written to benchmarks/results/decomposition_timing.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np

from otlp.lp.formulations.multipath import MultiPathLP
from otlp.multistep import (
    ARModel,
    bv_efficiency,
    efficiency_from_law,
    gbv_efficiency,
    optimal_k_path_rule,
    random_pair,
    sps_efficiency,
    token_tree_output_law,
)
from otlp.multistep.efficiency import bv_budget_mass
from otlp.multistep.from_lm import projected_pair
from otlp.multistep.optimal_rule import _prefix_marginals
from otlp.multistep.rankings import vertex_values
from otlp.optimal.tree_law import tree_efficiency

KS = (1, 2, 3, 4)
LS = (2, 3, 4)


def decode_contexts(count: int) -> list[list[int]]:
    """``count`` real contexts: the default prompts (BOS + words), then ever shorter prefixes of them."""
    from otlp.cli.decode import DEFAULT_PROMPTS
    from otlp.decode.ngram import embedded_models, prompt_ids

    prompts = prompt_ids(embedded_models().tokenizer, DEFAULT_PROMPTS)
    contexts: list[list[int]] = []
    for cut in range(max(map(len, prompts))):  # cut = tokens dropped from the end
        contexts += [p[: len(p) - cut] for p in prompts if len(p) - cut >= 2 and p[: len(p) - cut] not in contexts]
    if count > len(contexts):
        raise SystemExit(f"--instances {count}: only {len(contexts)} distinct decode contexts")
    return contexts[:count]


def decode_pair(V: int, L: int, context: list[int]) -> tuple[ARModel, ARModel]:
    from otlp.decode.ngram import embedded_models

    models = embedded_models()
    target, draft, _ = projected_pair(models.target, models.draft, context, V, L)
    return target, draft


def instances_of(family: str, V: int, L: int, count: int, seed: int) -> list[tuple[ARModel, ARModel]]:
    if family == "random":
        rng = np.random.default_rng(seed + L)
        return [random_pair(V, L, rng, concentration=1.0, closeness=0.5) for _ in range(count)]
    if family == "decode":
        return [decode_pair(V, L, c) for c in decode_contexts(count)]
    raise SystemExit(f"unknown family {family!r} (expected random or decode)")


def cheap_rules(target: ARModel, draft: ARModel, L: int, K: int, rule: object) -> tuple[float, float]:
    """(best single ranking of the optimal mixture, its 4 heaviest rankings reweighted): block efficiencies,
    exact (Eq. 19 vertices, BV's Eq. 83)."""
    V = target.V
    q_leaf = draft.prefix_probabilities(L)[-(V**L):]
    support = np.flatnonzero(q_leaf > 0)
    table = rule.mixture.rank_table()  # [M, N'] ranks over the support
    weights = rule.mixture.weights

    def law_of(rows: np.ndarray, w: np.ndarray) -> np.ndarray:
        leaf = np.zeros(V**L)
        for j, wj in zip(rows, w, strict=True):
            order = np.argsort(-table[j])
            vertex = np.empty(order.size)
            vertex[order] = vertex_values(q_leaf[support][order], K)
            leaf[support] += wj * vertex
        return leaf

    def eff(leaf: np.ndarray) -> float:
        return float(bv_budget_mass(target, _prefix_marginals(leaf, V, L), L).sum())

    best = max(eff(law_of(np.array([j]), np.ones(1))) for j in range(weights.size))
    top = np.argsort(-weights)[:4]
    return best, eff(law_of(top, weights[top] / weights[top].sum()))


def run(instances: int, lp_budget: float, V: int, seed: int, families: list[str]) -> list[dict]:
    rows = []
    for family in families:
        for L in LS:
            pairs = instances_of(family, V, L, instances, seed)
            for K in KS:
                cell = {"family": family, "V": V, "L": L, "K": K, "instances": instances}
                cell["sps"] = float(np.mean([sps_efficiency(p, q, L) for p, q in pairs]))
                cell["bv"] = float(np.mean([bv_efficiency(p, q, L) for p, q in pairs]))
                cell["gbv"] = float(np.mean([gbv_efficiency(p, q, L, K) for p, q in pairs]))
                cell["token_tree"] = float(np.mean(
                    [efficiency_from_law(token_tree_output_law(p, q, L, K), V, L) for p, q in pairs]))
                cell["tree_class_chains"] = float(np.mean([tree_efficiency(p, q, L, K, "class_chains")
                                                           for p, q in pairs]))
                cell["tree_paths"] = float(np.mean([tree_efficiency(p, q, L, K, "paths") for p, q in pairs]))
                opt, best1, top4, opt_seconds = [], [], [], 0.0
                for p, q in pairs:
                    start = time.perf_counter()
                    rule = optimal_k_path_rule(p, q, L, K, time_limit=lp_budget)
                    opt_seconds += time.perf_counter() - start
                    opt.append(rule.block_efficiency)
                    b, t = cheap_rules(p, q, L, K, rule)
                    best1.append(b)
                    top4.append(t)
                cell["optimal"] = float(np.mean(opt))
                cell["best_ranking"] = float(np.mean(best1))
                cell["top4_rankings"] = float(np.mean(top4))
                cell["optimal_seconds"] = opt_seconds / instances
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


HEADER = (f"{'family':<7} {'L':>2} {'K':>2} | {'SpS':>7} {'BV':>7} {'GBV':>7} {'tree':>7} {'tr opt':>7} "
          f"{'tr path':>7} {'optimal':>7} {'best 1':>7} {'top 4':>7} {'LP opt':>7} | {'GBV/LP':>7} {'tree/LP':>7} "
          f"{'GBV/BV':>7} | {'LP s':>6} {'opt s':>6}")


def print_row(c: dict) -> None:
    lp = c["lp"]
    print(f"{c['family']:<7} {c['L']:>2} {c['K']:>2} | {c['sps']:7.4f} {c['bv']:7.4f} {c['gbv']:7.4f} "
          f"{c['token_tree']:7.4f} {c['tree_class_chains']:7.4f} {c['tree_paths']:7.4f} "
          f"{c['optimal']:7.4f} {c['best_ranking']:7.4f} {c['top4_rankings']:7.4f} "
          f"{fmt(lp):>7} | {fmt(c['gbv_over_lp']):>7} "
          f"{fmt(None if lp is None else c['token_tree'] / lp):>7} {c['gbv'] / c['bv']:7.4f} | "
          f"{c['lp_seconds']:6.2f} {c['optimal_seconds']:6.2f}", flush=True)


TIMING_SIZES = ((2, 4), (3, 3), (3, 4), (4, 3), (5, 3), (4, 4), (6, 3), (5, 4))


def timing(lp_budget: float) -> list[dict]:
    """Precomputation time of the optimal rule against V^L (module docstring)."""
    context = decode_contexts(1)[0]
    rows = []
    print(f"{'V':>3} {'L':>2} {'V^L':>6} {'K':>2} | {'rounds':>6} {'LP s':>7} {'decomp s':>8} {'rankings':>8} "
          f"{'optimal':>8} {'GBV':>8}")
    for V, L in TIMING_SIZES:
        target, draft = decode_pair(V, L, context)
        for K in (2, 4):
            row = {"V": V, "L": L, "paths": V**L, "K": K}
            try:
                rule = optimal_k_path_rule(target, draft, L, K, time_limit=lp_budget)
            except Exception as exc:  # noqa: BLE001 - a budget overrun is a result here
                row["error"] = str(exc)
                print(f"{V:>3} {L:>2} {V**L:>6} {K:>2} | not converged within {lp_budget:g} s", flush=True)
                rows.append(row)
                continue
            row.update(rounds=rule.info["rounds"], lp_seconds=rule.info["lp_seconds"],
                       decomposition_seconds=rule.info["decomposition_seconds"],
                       rankings=rule.mixture.num_rankings, optimal=rule.block_efficiency,
                       gbv=gbv_efficiency(target, draft, L, K))
            rows.append(row)
            print(f"{V:>3} {L:>2} {V**L:>6} {K:>2} | {row['rounds']:>6} {row['lp_seconds']:7.2f} "
                  f"{row['decomposition_seconds']:8.3f} {row['rankings']:>8} {row['optimal']:8.4f} "
                  f"{row['gbv']:8.4f}", flush=True)
    return rows


TREE_RULES = ("class_chains", "paths")


def trees(instances: int, V: int, seed: int, lp_budget: float) -> list[dict]:
    """The token-tree columns only, over ``instances`` random pairs per (L, K) (module docstring), with the
    antichain-LP optimum (None where a pair's LP did not converge within ``lp_budget`` seconds)."""
    rows = []
    print(f"{'V':>2} {'L':>2} {'K':>2} | {'SpS':>7} {'GBV':>7} {'tree rrs':>8} {'tr opt':>7} "
          f"{'tr path':>7} {'LP opt':>7} | {'path-opt':>9} {'+- se':>8} {'>0':>5} {'<0':>5}")
    for L in LS:
        pairs = instances_of("random", V, L, instances, seed)
        for K in KS:
            row = {"family": "random", "V": V, "L": L, "K": K, "instances": instances,
                   "sps": float(np.mean([sps_efficiency(p, q, L) for p, q in pairs])),
                   "gbv": float(np.mean([gbv_efficiency(p, q, L, K) for p, q in pairs])),
                   "tree_rrs": float(np.mean([efficiency_from_law(token_tree_output_law(p, q, L, K), V, L)
                                              for p, q in pairs]))}
            values = {r: np.array([tree_efficiency(p, q, L, K, r) for p, q in pairs]) for r in TREE_RULES}
            diff = values["paths"] - values["class_chains"]
            lps = [MultiPathLP(p, q, L, K).solve(time_limit=lp_budget) for p, q in pairs]
            row["lp"] = float(np.mean([s.value for s in lps])) if all(s.info["converged"] for s in lps) else None
            row.update({f"tree_{r}": float(v.mean()) for r, v in values.items()})
            row.update(paths_minus_chains=float(diff.mean()),
                       paths_minus_chains_se=float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else 0.0,
                       paths_above=int((diff > 1e-9).sum()), paths_below=int((diff < -1e-9).sum()))
            rows.append(row)
            print_tree_row(row)
    return rows


def print_tree_row(row: dict) -> None:
    V, L, K = row["V"], row["L"], row["K"]
    print(f"{V:>2} {L:>2} {K:>2} | {row['sps']:7.4f} {row['gbv']:7.4f} {row['tree_rrs']:8.4f} "
          f"{row['tree_class_chains']:7.4f} {row['tree_paths']:7.4f} "
          f"{fmt(row.get('lp')):>7} | "
          f"{row['paths_minus_chains']:+9.5f} {row['paths_minus_chains_se']:8.5f} {row['paths_above']:>5} "
          f"{row['paths_below']:>5}", flush=True)


def _readme_tables():  # noqa: ANN202 - the module benchmarks/readme_tables.py, beside this script
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import readme_tables

    return readme_tables


def publish_main(rows: list[dict], args: dict) -> None:
    """The block-efficiency table (README.md, docs/MULTISTEP.md): every family and K at the largest L, 3 decimals,
    optimal in bold."""
    readme_tables = _readme_tables()
    L = max(r["L"] for r in rows)
    columns = ["family", "K", "token-wise SpS", "BV", "GBV", "token tree", "tree, optimal", "tree, optimal_paths",
               "optimal", "best 1", "top 4", "antichain-LP optimum"]
    cells = [[r["family"], str(r["K"]), *(f"{r[k]:.3f}" for k in ("sps", "bv", "gbv", "token_tree",
                                                                   "tree_class_chains", "tree_paths")),
              f"**{r['optimal']:.3f}**", f"{r['best_ranking']:.3f}", f"{r['top4_rankings']:.3f}",
              "-" if r["lp"] is None else f"{r['lp']:.3f}"] for r in rows if r["L"] == L]
    settings = {"instances": args["instances"], "V": args["V"], "L": L, "seed": args["seed"],
                "lp_budget": args["lp_budget"]}
    readme_tables.publish("block_efficiency", "efficiency", columns, cells, settings)
    print("\n<!-- table: block_efficiency/efficiency -->\n" + readme_tables.markdown(columns, cells))


def publish_timing(rows: list[dict], args: dict) -> None:
    """The precomputation table of docs/MULTISTEP.md: LP rounds / seconds per V^L (columns) and K (rows)."""
    readme_tables = _readme_tables()
    sizes = sorted({r["paths"] for r in rows})

    def cell(r: dict) -> str:
        if "error" in r:
            return f"> {args['lp_budget']:g} s"
        s = r["lp_seconds"]
        return f"{r['rounds']} / " + (f"{s:.2f}" if s < 1 else f"{s:.1f}" if s < 10 else f"{s:.0f}")

    by = {(r["paths"], r["K"]): r for r in rows}
    columns = ["V^L", *map(str, sizes)]
    cells = [[f"K = {K}: LP rounds / seconds", *(cell(by[n, K]) for n in sizes)]
             for K in sorted({r["K"] for r in rows})]
    readme_tables.publish("block_efficiency", "timing", columns, cells, {"lp_budget": args["lp_budget"]})
    print("\n<!-- table: block_efficiency/timing -->\n" + readme_tables.markdown(columns, cells))


def publish_trees(rows: list[dict], args: argparse.Namespace) -> None:
    """The docs/PATHS.md table of ``--trees`` (benchmarks/readme_tables.py): K >= 2 at the largest L."""
    readme_tables = _readme_tables()
    L = max(r["L"] for r in rows)
    columns = ["K", "GBV", "tree, RRS", "tree, optimal (class chains)", "tree, optimal_paths",
               "paths - chains (+- se)", "pairs up / down", "antichain-LP optimum"]
    cells = [[str(r["K"]), f"{r['gbv']:.4f}", f"{r['tree_rrs']:.4f}", f"{r['tree_class_chains']:.4f}",
              f"{r['tree_paths']:.4f}", f"{r['paths_minus_chains']:+.4f} (+-{r['paths_minus_chains_se']:.4f})",
              f"{r['paths_above']} / {r['paths_below']}", fmt(r.get("lp"))]
             for r in rows if r["L"] == L and r["K"] >= 2]
    settings = {"instances": rows[0]["instances"], "V": rows[0]["V"], "L": L, "seed": args.seed}
    readme_tables.publish("block_efficiency", "trees", columns, cells, settings)
    print("\n<!-- table: block_efficiency/trees -->\n" + readme_tables.markdown(columns, cells))


def decomposition_timing() -> list[dict]:
    """Seconds of ``rankings.decompose`` alone (module docstring)."""
    from otlp.multistep.rankings import decompose

    rng = np.random.default_rng(1)
    rows = []
    print(f"{'N':>6} {'K':>2} | {'seconds':>8} {'rankings':>8} {'depth':>6} {'max |law - x|':>13}")
    for N in (1000, 10_000):
        for K in (2, 4, 8):
            q = rng.dirichlet(np.full(N, 0.5))
            x = 0.5 * q
            for w in 0.5 * rng.dirichlet(np.ones(20)):
                order = rng.permutation(N)
                vertex = np.empty(N)
                vertex[order] = vertex_values(q[order], K)
                x += w * vertex
            start = time.perf_counter()
            mix = decompose(x, q, K)
            row = {"N": N, "K": K, "seconds": time.perf_counter() - start, "rankings": mix.num_rankings,
                   "depth": mix.depth, "law_error": float(np.abs(mix.law - x).max())}
            rows.append(row)
            print(f"{N:>6} {K:>2} | {row['seconds']:8.3f} {row['rankings']:>8} {row['depth']:>6} "
                  f"{row['law_error']:13.1e}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=4, help="model pairs per cell (decode: contexts)")
    parser.add_argument("--lp-budget", type=float, default=10.0, help="seconds per LP (constraint generation)")
    parser.add_argument("--V", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="random family only")
    parser.add_argument("--families", default="random,decode", help="comma-separated: random, decode")
    parser.add_argument("--timing", action="store_true", help="the optimal rule's precomputation time vs V^L")
    parser.add_argument("--decomposition", action="store_true", help="the decomposition alone at N = 1e3, 1e4")
    parser.add_argument("--trees", action="store_true", help="token-tree columns only, over --instances pairs")
    parser.add_argument("--from-json", help="publish the docs table of this JSON (a finished run of the same mode: "
                                             "plain, --timing or --trees) instead of running")
    args = parser.parse_args()
    out = pathlib.Path(__file__).parent / "results"
    if args.trees:
        if args.from_json:
            stored = json.loads(pathlib.Path(args.from_json).read_text())
            rows, args.seed = stored["rows"], stored["args"]["seed"]
            for row in rows:
                print_tree_row(row)
        else:
            rows = trees(args.instances, args.V, args.seed, args.lp_budget)
            out.mkdir(exist_ok=True)
            (out / "block_efficiency_trees.json").write_text(json.dumps({"args": vars(args), "rows": rows},
                                                                        indent=1))
            print(f"wrote {out / 'block_efficiency_trees.json'}")
        publish_trees(rows, args)
        return
    if args.decomposition:
        rows = decomposition_timing()
        out.mkdir(exist_ok=True)
        (out / "decomposition_timing.json").write_text(json.dumps({"rows": rows}, indent=1))
        print(f"wrote {out / 'decomposition_timing.json'}")
        return
    if args.timing:
        if args.from_json:
            stored = json.loads(pathlib.Path(args.from_json).read_text())
            publish_timing(stored["rows"], stored["args"])
            return
        rows = timing(args.lp_budget)
        out.mkdir(exist_ok=True)
        (out / "optimal_rule_timing.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
        print(f"wrote {out / 'optimal_rule_timing.json'}")
        publish_timing(rows, vars(args))
        return
    if args.from_json:
        stored = json.loads(pathlib.Path(args.from_json).read_text())
        publish_main(stored["rows"], stored["args"])
        return
    print(HEADER)
    rows = run(args.instances, args.lp_budget, args.V, args.seed, args.families.split(","))
    contexts = decode_contexts(args.instances) if "decode" in args.families.split(",") else []
    out.mkdir(exist_ok=True)
    report = {"args": vars(args), "decode_contexts": contexts, "rows": rows}
    (out / "block_efficiency.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / 'block_efficiency.json'}")
    publish_main(rows, vars(args))


if __name__ == "__main__":
    main()
