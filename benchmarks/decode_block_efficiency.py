"""Block efficiency of every token-level verifier inside the decode loop, on the embedded n-gram pair.

For each verifier (on its own draft scheme) and n, one decode run over the same prompts and seed; the table gives
block efficiency (tokens per target call), acceptance at depth 1, tokens/s and the verifier's share of the time,
and the ratio of block efficiency to the i.i.d. "optimal" rule's. Theory: for one draft scheme, "optimal" (alpha*)
>= every other rule in per-node acceptance. Writes benchmarks/results/decode_block_efficiency.json.
Run: python benchmarks/decode_block_efficiency.py [--tokens 256 --batch 16 --L 4]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from otlp.decode.cli import DEFAULT_PROMPTS
from otlp.decode.loop import decode
from otlp.decode.ngram import embedded_models, prompt_ids
from otlp.decode.registry import available_verifiers, resolve_verifier
from otlp.errors import InputError


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


if __name__ == "__main__":
    main()
