"""Block efficiency of every token-level verifier inside the decode loop, on the embedded n-gram pair.

For each verifier (on its own draft scheme) and n, one decode run over the same prompts and seed; the table gives
block efficiency (tokens per target call), acceptance at depth 1, tokens/s and the verifier's share of the time,
and the ratio of block efficiency to the i.i.d. "optimal" rule's. Theory: for one draft scheme, "optimal" (alpha*)
>= every other rule in per-node acceptance. Writes benchmarks/results/decode_block_efficiency.json and publishes the
README table (block efficiency / acceptance at depth 1 by verifier and n; benchmarks/published/, readme_tables.py).
Run: python benchmarks/decode_block_efficiency.py [--tokens 256 --batch 16 --L 4]
README: python benchmarks/decode_block_efficiency.py --tokens 96 --batch 32
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from otlp.decode.cli import DEFAULT_PROMPTS
from otlp.decode.loop import decode
from otlp.decode.ngram import embedded_models, prompt_ids
from otlp.decode.registry import available_verifiers, resolve_verifier
from otlp.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script

#: README row order (then any other token-level rule) and how each draft scheme is named there
ORDER = ("optimal", "kseq", "rrs", "is", "weighted_is", "sps", "rrs_wor", "spechub", "greedy")
SCHEME_LABEL = {"iid": "iid", "without_replacement": "without replacement", "spechub": "hub", "greedy": "greedy"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--L", type=int, default=4)
    parser.add_argument("--ns", default="1,2,4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verifiers", default=",".join(available_verifiers()))
    args = parser.parse_args()
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


def publish(rows: list[dict], args: argparse.Namespace) -> None:
    """The README table: one row per verifier, ``block efficiency / acceptance at depth 1`` per n (- where not run)."""
    ns = sorted({r["n"] for r in rows})
    names = [v for v in ORDER if any(r["verifier"] == v for r in rows)]
    names += sorted({r["verifier"] for r in rows} - set(names))
    cells = []
    for name in names:
        mine = {r["n"]: r for r in rows if r["verifier"] == name}
        scheme = next(iter(mine.values()))["scheme"]
        row = [f"{name} ({SCHEME_LABEL.get(scheme, scheme)})"]
        for n in ns:
            r = mine.get(n)
            row.append("-" if r is None or "refused" in r else
                       f"{r['block_efficiency']:.3f} / {r['acceptance_depth1']:.3f}")
        cells.append(row)
    columns = ["verifier (scheme)", *(f"n = {n}" for n in ns)]
    settings = {"tokens": args.tokens, "batch": args.batch, "L": args.L, "seed": args.seed}
    readme_tables.publish("decode_block_efficiency", "block_efficiency", columns, cells, settings)
    print("\n<!-- table: decode_block_efficiency/block_efficiency -->\n" + readme_tables.markdown(columns, cells))


if __name__ == "__main__":
    main()
