"""Block efficiency of every token-level verifier inside the decode loop, on the embedded n-gram pair.

For each verifier (on its own draft scheme) and n, one decode run over the same prompts and seed; the table gives
block efficiency (tokens per target call), acceptance at depth 1, tokens/s and the verifier's share of the time,
and the ratio of block efficiency to the i.i.d. "optimal" rule's. Theory: for one draft scheme, "optimal" (alpha*)
>= every other rule in per-node acceptance. Writes benchmarks/results/decode_block_efficiency.json and publishes the
tables of docs/DECODE.md (block efficiency / acceptance at depth 1, and the verifier's share of the time, by verifier
and n; benchmarks/published/, readme_tables.py).
Run: python benchmarks/decode_block_efficiency.py [--tokens 256 --batch 16 --L 4]
docs/DECODE.md: python benchmarks/decode_block_efficiency.py --tokens 96 --batch 32
             and  python benchmarks/decode_block_efficiency.py --wor 20 --ns 2,3,4 --batch 16 --tokens 64

``--variants R``: instead, the two alpha*-optimal plans side by side (issue 18): "optimal" (the class-chain plan of
otlp/optimal/chains.py) and "optimal_paths" (the path-aware plan of otlp/optimal/paths.py: alpha*, then the most
continuing drafted paths), R independent runs per n (seeds --seed .. --seed + R - 1, both rules on the same seed),
each of --batch prompts x --tokens tokens. Block efficiency is reported as the mean over runs +- its standard error
(runs are independent), and the paired difference paths - chains +- its standard error. Runs accumulate in
benchmarks/results/decode_optimal_variants.json (keyed by n, rule, seed, batch, tokens, L), so the runs can be
split over several invocations: ``--variants 4 --seed 0``, then ``--variants 4 --seed 4``...

``--wor R``: the rules for drafts sampled without replacement side by side, "rrs_wor" and "optimal_wor" (alpha*,
otlp/verifiers/optimal_wor.py), R independent runs per n on the same seeds as --variants does, the draft filtered to
its ``--draft-top-k`` tokens (default 20; the optimal rule enumerates the draft's support), the target not
filtered; runs in benchmarks/results/decode_wor.json, table decode_block_efficiency/wor (docs/DECODE.md).

``--paths-gap N``: the path-aware rule's gap to the optimum at decode scale (V = 2000), on the distinct (p, q) among
the first N step roots of an ``optimal`` run (--batch prompts): E[continuing paths] of the class-chain plan (every
multiset enumerated), of the windowed path-aware plan, and, at n = 2, of the optimum (closed form alpha* +
sum_a min(q_a^2, p_a), otlp.optimal.paths.two_draft_optimum); written to benchmarks/results/decode_paths_gap.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from otlp.cli.decode import DEFAULT_PROMPTS
from otlp.core.errors import InputError
from otlp.decode.loop import decode
from otlp.decode.ngram import embedded_models, prompt_ids
from otlp.decode.registry import available_verifiers, resolve_verifier

sys.path.insert(0, str(Path(__file__).resolve().parent))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script

#: the tables' row order (then any other token-level rule) and how each draft scheme is named there
ORDER = ("optimal", "kseq", "rrs", "is", "weighted_is", "sps", "rrs_wor", "spechub", "greedy")
SCHEME_LABEL = {"iid": "iid", "without_replacement": "without replacement", "spechub": "hub", "greedy": "greedy"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--L", type=int, default=4)
    parser.add_argument("--ns", default="1,2,4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verifiers", default=",".join(v for v in available_verifiers() if v != "optimal_wor"),
                        help="the rules of the main table (default: every token-level rule but optimal_wor, which "
                             "needs a filtered draft: --wor)")
    parser.add_argument("--variants", type=int, default=0, help="R runs of optimal vs optimal_paths (docstring)")
    parser.add_argument("--paths-gap", type=int, default=0, help="the path-aware rule's gap on N decode roots")
    parser.add_argument("--wor", type=int, default=0, help="R runs of rrs_wor vs optimal_wor (docstring)")
    parser.add_argument("--draft-top-k", type=int, default=20, help="--wor: the draft's top-k filter (default 20)")
    args = parser.parse_args()
    if args.paths_gap:
        paths_gap(args)
        return
    if args.variants:
        variants(args)
        return
    if args.wor:
        wor(args)
        return
    pair = embedded_models()
    texts = [DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)] for i in range(args.batch)]
    prompts = prompt_ids(pair.tokenizer, texts)
    rows = []
    for n in (int(x) for x in args.ns.split(",")):
        for name in args.verifiers.split(","):
            scheme = resolve_verifier(name).scheme
            if scheme == "spechub" and n != 2:
                continue
            try:
                m = decode(pair.draft, pair.target, name, n, args.L, prompts=prompts, max_new_tokens=args.tokens,
                           seed=args.seed).metrics
            except InputError as exc:  # e.g. the exact rule's block too big for memory at n = 4 over V = 2000
                print(f"{name:<12} {scheme:<20} n={n} L={args.L}  refused: {exc}", flush=True)
                rows.append({"verifier": name, "scheme": scheme, "n": n, "L": args.L, "refused": str(exc)})
                continue
            # standard error of the mean tau over sequence-steps (tau in [1, L+1]); a crude +-
            se = (args.L / 2) / math.sqrt(m.sequence_steps)
            rows.append({"verifier": name, "scheme": scheme, "n": n, "L": args.L,
                         "block_efficiency": m.block_efficiency, "se_bound": se,
                         "acceptance_depth1": m.acceptance_per_position[0],
                         "tokens_per_second": m.tokens_per_second, "verifier_share": m.verifier_time_share})
            print(f"{name:<12} {scheme:<20} n={n} L={args.L}  BE {m.block_efficiency:6.3f} (+-{se:.3f})  "
                  f"acc@1 {m.acceptance_per_position[0]:.3f}  {m.tokens_per_second:8.1f} tok/s  "
                  f"verifier {100 * m.verifier_time_share:5.1f}%", flush=True)
    for row in rows:
        ref = [r for r in rows if r["verifier"] == "optimal" and r["n"] == row["n"] and "refused" not in r]
        if "refused" not in row:
            row["vs_optimal"] = row["block_efficiency"] / ref[0]["block_efficiency"] if ref else None
    out = Path(__file__).resolve().parent / "results" / "decode_block_efficiency.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")
    publish(rows, args)


VARIANTS = ("optimal", "optimal_paths")
#: --wor: the rules for drafts sampled without replacement, the baseline first
WOR = ("rrs_wor", "optimal_wor")


def variants(args: argparse.Namespace) -> None:
    """The two optimal plans over independent runs (module docstring)."""
    paired(args, args.variants, VARIANTS, "optimal_variants", {},
           ["optimal (class chains)", "optimal_paths", "paths - chains"])


def wor(args: argparse.Namespace) -> None:
    """rrs_wor against the optimal rule for the same without-replacement drafts (module docstring)."""
    paired(args, args.wor, WOR, "wor", {"draft_top_k": args.draft_top_k},
           ["rrs_wor", "optimal_wor", "optimal_wor - rrs_wor"])


def paired(args: argparse.Namespace, count: int, names: tuple[str, str], table: str, options: dict,
           labels: list[str]) -> None:
    """Two rules over ``count`` independent runs per n on the same seeds (decode ``options`` besides), accumulated
    in benchmarks/results/decode_<table>.json; the table of mean block efficiency +- standard error per rule and of
    the paired difference ``names[1] - names[0]``."""
    import numpy as np

    pair = embedded_models()
    texts = [DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)] for i in range(args.batch)]
    prompts = prompt_ids(pair.tokenizer, texts)
    out = Path(__file__).resolve().parent / "results" / f"decode_{table}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(out.read_text()) if out.exists() else []
    setting = {"batch": args.batch, "tokens": args.tokens, "L": args.L, **options}
    for n in (int(x) for x in args.ns.split(",")):
        for seed in range(args.seed, args.seed + count):
            for name in names:
                key = {"n": n, "verifier": name, "seed": seed, **setting}
                if any(all(r.get(k) == v for k, v in key.items()) for r in runs):
                    continue
                m = decode(pair.draft, pair.target, name, n, args.L, prompts=prompts, max_new_tokens=args.tokens,
                           seed=seed, **options).metrics
                runs.append({**key, "block_efficiency": m.block_efficiency, "sequence_steps": m.sequence_steps,
                             "acceptance_depth1": m.acceptance_per_position[0], "seconds": m.seconds})
                print(f"n={n} seed={seed} {name:<14} BE {m.block_efficiency:.4f}  acc@1 "
                      f"{m.acceptance_per_position[0]:.3f}  {m.seconds:6.1f} s", flush=True)
                out.write_text(json.dumps(runs, indent=1))
    cells, used = [], {}
    print(f"\nL = {args.L}, {args.batch} prompts x {args.tokens} tokens per run {options or ''}; mean over runs +- "
          "standard error")
    print(f"{'n':>2} {'runs':>4} {'prompts':>7} | {names[0]:>16} {names[1]:>16} | {'difference':>18} {'z':>6}")
    for n in sorted({r["n"] for r in runs if all(r.get(k) == v for k, v in setting.items())}):
        mine = [r for r in runs if r["n"] == n and all(r.get(k) == v for k, v in setting.items())]
        seeds = sorted({r["seed"] for r in mine if r["verifier"] == names[0]}
                       & {r["seed"] for r in mine if r["verifier"] == names[1]})
        if not seeds:
            continue
        be = {v: np.array([next(r["block_efficiency"] for r in mine if r["verifier"] == v and r["seed"] == s)
                           for s in seeds]) for v in names}
        se = {v: float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan") for v, x in be.items()}
        diff = be[names[1]] - be[names[0]]
        d_se = float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else float("nan")
        print(f"{n:>2} {len(seeds):>4} {len(seeds) * args.batch:>7} | "
              + " ".join(f"{be[v].mean():8.4f} +-{se[v]:.4f}" for v in names)
              + f" | {diff.mean():+9.4f} +-{d_se:.4f} {diff.mean() / d_se if d_se > 0 else float('nan'):6.2f}")
        used[str(n)] = seeds
        cells.append([str(n), f"{len(seeds)} x {args.batch} = {len(seeds) * args.batch}",
                      *(f"{be[v].mean():.3f} +- {se[v]:.3f}" for v in names), f"{diff.mean():+.3f} +- {d_se:.3f}"])
    print(f"runs in {out}")
    if cells:
        columns = ["n", "runs x prompts", *labels]
        readme_tables.publish("decode_block_efficiency", table, columns, cells, {**setting, "seeds": used})
        print(f"\n<!-- table: decode_block_efficiency/{table} -->\n" + readme_tables.markdown(columns, cells))


def paths_gap(args: argparse.Namespace) -> None:
    """E[continuing paths]: class chains, the windowed path-aware plan, and the n = 2 optimum (module docstring)."""
    import time

    import numpy as np

    from otlp.optimal.paths import PathAwareTransport, two_draft_optimum

    pair = embedded_models()
    texts = [DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)] for i in range(args.batch)]
    result = decode(pair.draft, pair.target, "optimal", 2, args.L, prompts=prompt_ids(pair.tokenizer, texts),
                    max_new_tokens=args.tokens, seed=args.seed, collect=args.paths_gap)
    roots, seen = [], set()
    for p, q in zip(result.root_p, result.root_q, strict=True):  # distinct roots only (prompts repeat in a batch)
        key = p.numpy().tobytes() + q.numpy().tobytes()
        if key not in seen:
            seen.add(key)
            roots.append((p, q))
    rows = []
    print(f"{'n':>2} {'root':>4} | {'alpha*':>7} {'chains':>8} {'window':>8} {'optimum':>8} | {'captured':>8} "
          f"{'LP ms':>6}")
    for n in (int(x) for x in args.ns.split(",")):
        for j, (p, q) in enumerate(roots):
            p, q = p.numpy() / p.numpy().sum(), q.numpy() / q.numpy().sum()
            start = time.perf_counter()
            rule = PathAwareTransport(p, q, n)
            ms = 1e3 * (time.perf_counter() - start)
            row = {"n": n, "root": j, "alpha": rule.alpha, "window_tokens": int(rule.window.size), "lp_ms": ms,
                   "window_gain": rule.window_gain}
            if n == 2:  # every multiset of V = 2000 is enumerated for the class chains (2M): n = 2 only
                row["chains"] = rule.base_value
                row["window"] = row["chains"] + rule.window_gain
                row["optimum"] = two_draft_optimum(p, q)
                gap = row["optimum"] - row["chains"]
                row["captured"] = rule.window_gain / gap if gap > 0 else 1.0
            rows.append(row)
            print(f"{n:>2} {j:>4} | {rule.alpha:7.4f} {row.get('chains', float('nan')):8.4f} "
                  f"{row.get('window', float('nan')):8.4f} {row.get('optimum', float('nan')):8.4f} | "
                  f"{row.get('captured', float('nan')):8.3f} {ms:6.1f}", flush=True)
    for n in sorted({r["n"] for r in rows}):
        mine = [r for r in rows if r["n"] == n]
        line = f"n = {n}: mean window gain {np.mean([r['window_gain'] for r in mine]):.4f} paths"
        if n == 2:
            line += (f", chains {np.mean([r['chains'] for r in mine]):.4f} -> window "
                     f"{np.mean([r['window'] for r in mine]):.4f}, optimum {np.mean([r['optimum'] for r in mine]):.4f}"
                     f"; the window captures {np.mean([r['captured'] for r in mine]):.3f} of the gain on average "
                     f"(min {np.min([r['captured'] for r in mine]):.3f})")
        print(line)
    out = Path(__file__).resolve().parent / "results" / "decode_paths_gap.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {out}")
    two = [r for r in rows if r["n"] == 2]
    if two:
        gaps = np.array([r["optimum"] - r["chains"] for r in two])
        gains = np.array([r["window_gain"] for r in two])
        big = gaps > 1e-3  # the per-root share is noise where there is almost nothing to gain
        columns = ["n", "distinct roots", "E[paths]: class chains", "path-aware (window)", "optimum (closed form)",
                   "share of the gain captured (all roots / worst root with a gap > 1e-3)", "ms per plan (median)"]
        cells = [["2", str(len(two)), f"{np.mean([r['chains'] for r in two]):.4f}",
                  f"{np.mean([r['window'] for r in two]):.4f}", f"{np.mean([r['optimum'] for r in two]):.4f}",
                  f"{gains.sum() / gaps.sum():.3f} / {(gains[big] / gaps[big]).min() if big.any() else 1.0:.3f}",
                  f"{np.median([r['lp_ms'] for r in two]):.0f}"]]
        readme_tables.publish("decode_block_efficiency", "paths_gap", columns, cells,
                              {"batch": args.batch, "tokens": args.tokens, "L": args.L, "seed": args.seed,
                               "collected_roots": args.paths_gap})
        print("\n<!-- table: decode_block_efficiency/paths_gap -->\n" + readme_tables.markdown(columns, cells))


def publish(rows: list[dict], args: argparse.Namespace) -> None:
    """The docs/DECODE.md tables, one row per verifier and one column per n (- where not run): ``block efficiency /
    acceptance at depth 1`` (``block_efficiency``) and the verifier's share of the run's time (``verifier_share``;
    the rest is drafting, the target calls and the loop)."""
    ns = sorted({r["n"] for r in rows})
    names = [v for v in ORDER if any(r["verifier"] == v for r in rows)]
    names += sorted({r["verifier"] for r in rows} - set(names))
    columns = ["verifier (scheme)", *(f"n = {n}" for n in ns)]
    settings = {"tokens": args.tokens, "batch": args.batch, "L": args.L, "seed": args.seed}
    cell = {"block_efficiency": lambda r: f"{r['block_efficiency']:.3f} / {r['acceptance_depth1']:.3f}",
            "verifier_share": lambda r: f"{100 * r['verifier_share']:.1f}%"}
    for table, fmt in cell.items():
        cells = []
        for name in names:
            mine = {r["n"]: r for r in rows if r["verifier"] == name}
            scheme = next(iter(mine.values()))["scheme"]
            cells.append([f"{name} ({SCHEME_LABEL.get(scheme, scheme)})",
                          *("-" if mine.get(n) is None or "refused" in mine[n] else fmt(mine[n]) for n in ns)])
        readme_tables.publish("decode_block_efficiency", table, columns, cells, settings)
        print(f"\n<!-- table: decode_block_efficiency/{table} -->\n" + readme_tables.markdown(columns, cells))


if __name__ == "__main__":
    main()
