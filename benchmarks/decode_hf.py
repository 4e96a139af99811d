"""Recompute path against the KV-cached tree path of the decode loop, on random-weight Llama-style models.

Models are built in-process from a config (random weights, no download), V = 32000, and saved to a temporary
folder so they load through HFCausalLM.from_pretrained like real checkpoints:
- "10M": target 9.8M parameters (hidden 256, 2 layers, tied embeddings), draft 2.2M (hidden 64, 1 layer);
- "100M": target 95M parameters (hidden 768, 10 layers), draft = the 10M target.
For each size and context length (a random prompt of that many tokens, batch 1), one decode run per path with
the same seed: tokens/s end to end (prompt included), target positions per emitted token and per step, draft
positions per step, and the time split. Floor: a cached target step pushes n·L + 1 positions whatever the
context (the tree and its root); the recompute path pushes about (n·L + 1)·T. "steady" tokens/s leaves out the
first step (where the cached path pushes the whole prompt), i.e. the rate a long generation approaches.
Random weights make p and q nearly uniform, so almost every draft is accepted (block efficiency ~ L + 1); the
speed ratio is about compute per step, which does not depend on the weights.

Run (a few minutes on 2 CPU cores; rows print as they finish):
    flock /tmp/team/bench.lock python benchmarks/decode_hf.py [--sizes 10M,100M --contexts 128,1024
        --n 2 --L 3 --tokens 8 --device cpu --threads 1]
Writes benchmarks/results/decode_hf.json and publishes the docs/DECODE.md table (benchmarks/published/decode_hf.json,
see readme_tables.py); ``--from-json benchmarks/results/decode_hf.json`` publishes a finished run without re-running.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script

V = 32000
SIZES = {  # name -> (target config, draft config): hidden, layers, intermediate, heads
    "10M": ((256, 2, 688, 4), (64, 1, 172, 2)),
    "100M": ((768, 10, 2048, 12), (256, 2, 688, 4)),
}


def _save(folder: Path, spec: tuple[int, int, int, int], seed: int, max_positions: int,
          initializer_range: float = 0.02) -> int:
    """A random Llama-style model of ``spec`` saved to ``folder``; returns its parameter count. The default
    initializer_range (transformers' own) gives nearly uniform next-token laws."""
    import transformers

    hidden, layers, inter, heads = spec
    config = transformers.LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter,
                                      num_attention_heads=heads, num_key_value_heads=heads, vocab_size=V,
                                      max_position_embeddings=max_positions, tie_word_embeddings=True,
                                      bos_token_id=0, eos_token_id=0, initializer_range=initializer_range)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def _round(x: float) -> str:
    return str(math.floor(x + 0.5))


def publish(rows: list[dict], meta: dict) -> None:
    """The docs/DECODE.md table: one line per (size, context) from the recompute, cached and speed-up rows of a run."""
    cols = ["target, context", "target positions per step (recompute / cached)", "per emitted token",
            "tokens/s recompute", "tokens/s cached", "speed-up (steady)"]
    runs = {(r["size"], r["context"], r["tree"]): r for r in rows if "tree" in r}

    def rate(x: float) -> str:
        return f"{x:.1f}" if x >= 2 else f"{x:.2f}"

    cells = []
    for r in rows:
        if "speedup_tokens_per_second" not in r:
            continue
        rec, cac = runs[r["size"], r["context"], "recompute"], runs[r["size"], r["context"], "cached"]
        steady = r["speedup_steady_tokens_per_second"]
        cells.append([f"{r['size']}, {r['context']}",
                      f"{_round(rec['target_positions_per_step'])} / {_round(cac['target_positions_per_step'])}",
                      f"{_round(rec['target_positions_per_token'])} / {_round(cac['target_positions_per_token'])}",
                      rate(rec["tokens_per_second"]), rate(cac["tokens_per_second"]),
                      f"{r['speedup_tokens_per_second']:.1f}x ({f'{steady:.1f}' if steady < 10 else _round(steady)}x)"])
    readme_tables.publish("decode_hf", "cached_vs_recompute", cols, cells, meta)
    print(f"\n<!-- table: decode_hf/cached_vs_recompute -->\n{readme_tables.markdown(cols, cells)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10M,100M")
    parser.add_argument("--contexts", default="128,1024")
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--L", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=8, help="new tokens per run (default 8)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: steadier on a shared machine; 0 = torch's default)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "decode_hf.json"))
    parser.add_argument("--from-json", metavar="PATH",
                        help="publish the docs/DECODE.md table of a finished run and exit")
    args = parser.parse_args()
    if args.from_json:
        done = json.loads(Path(args.from_json).read_text())
        publish(done["rows"], {"machine": done["machine"], "threads": done["threads"]})
        return
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    from otlp.decode.hf import HFCausalLM
    from otlp.decode.loop import decode

    contexts = [int(c) for c in args.contexts.split(",")]
    max_positions = max(contexts) + args.tokens + args.L + 8
    rows = []
    print(f"{'size':>5} {'ctx':>5} {'path':>9} {'tok/s':>8} {'steady':>8} {'s':>7} {'tgt pos/tok':>11} "
          f"{'tgt pos/step':>12} {'dft pos/step':>12} {'BE':>5}  draft/target/verifier s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            target_spec, draft_spec = SIZES[size]
            params = {"target": _save(Path(tmp) / f"{size}-t", target_spec, 1, max_positions),
                      "draft": _save(Path(tmp) / f"{size}-d", draft_spec, 2, max_positions)}
            draft = HFCausalLM.from_pretrained(Path(tmp) / f"{size}-d", device=args.device)
            target = HFCausalLM.from_pretrained(Path(tmp) / f"{size}-t", device=args.device)
            for tree in ("recompute", "cached"):  # warm-up; the first also probes each model's mask support once
                decode(draft, target, "rrs", args.n, args.L, prompts=[[0, 1, 2]], max_new_tokens=2, tree=tree)
            for ctx in contexts:
                gen = torch.Generator().manual_seed(args.seed + ctx)
                prompt = [0] + torch.randint(1, V, (ctx - 1,), generator=gen).tolist()
                results = {}
                for tree in ("recompute", "cached"):
                    draft._cache.clear()
                    target._cache.clear()
                    marks: list[tuple[float, int]] = []  # (time, new tokens) after each step

                    def step_done(new: int, marks: list = marks) -> None:
                        marks.append((time.perf_counter(), new))

                    start = time.perf_counter()
                    result = decode(draft, target, "rrs", args.n, args.L, prompts=[prompt],
                                    max_new_tokens=args.tokens, seed=args.seed, tree=tree, progress=step_done)
                    wall = time.perf_counter() - start
                    # after the first step (which pushes the prompt): the decode rate a long generation approaches
                    later = sum(k for _, k in marks[1:])
                    steady = later / (marks[-1][0] - marks[0][0]) if len(marks) > 1 else float("nan")
                    m = result.metrics
                    row = {"size": size, "params": params, "context": ctx, "tree": m.target_tree, "n": args.n,
                           "L": args.L, "tokens": args.tokens, "batch": 1, "device": args.device, "seconds": wall,
                           "tokens_per_second": args.tokens / wall, "steady_tokens_per_second": steady,
                           "first_step_seconds": marks[0][0] - start, "block_efficiency": m.block_efficiency,
                           "target_positions": m.target_positions,
                           "target_positions_per_token": m.target_positions / args.tokens,
                           "target_positions_per_step": m.target_positions_per_step,
                           "draft_positions_per_step": m.draft_positions_per_step,
                           "draft_seconds": m.draft_seconds, "target_seconds": m.target_seconds,
                           "verifier_seconds": m.verifier_seconds, "floor_positions_per_step": args.n * args.L + 1}
                    results[tree] = (row, result.tokens)
                    rows.append(row)
                    print(f"{size:>5} {ctx:>5} {row['tree']:>9} {row['tokens_per_second']:8.2f} {steady:8.2f} "
                          f"{wall:7.2f} {row['target_positions_per_token']:11.1f} "
                          f"{row['target_positions_per_step']:12.1f} {row['draft_positions_per_step']:12.1f} "
                          f"{m.block_efficiency:5.2f}  "
                          f"{m.draft_seconds:.2f}/{m.target_seconds:.2f}/{m.verifier_seconds:.3f}", flush=True)
                (rec, rec_tokens), (cac, cac_tokens) = results["recompute"], results["cached"]
                speedup = cac["tokens_per_second"] / rec["tokens_per_second"]
                steady = cac["steady_tokens_per_second"] / rec["steady_tokens_per_second"]
                rows.append({"size": size, "context": ctx, "speedup_tokens_per_second": speedup,
                             "speedup_steady_tokens_per_second": steady,
                             "positions_ratio": rec["target_positions"] / cac["target_positions"],
                             "same_tokens": rec_tokens == cac_tokens})
                print(f"{size:>5} {ctx:>5}   cached / recompute: {speedup:.1f}x tokens/s ({steady:.1f}x steady), "
                      f"{rec['target_positions'] / cac['target_positions']:.1f}x fewer target positions, "
                      f"same tokens: {rec_tokens == cac_tokens}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.processor() or platform.machine(), "threads": torch.get_num_threads()}
    out.write_text(json.dumps({**meta, "rows": rows}, indent=2))
    print(f"wrote {out}")
    publish(rows, meta)


if __name__ == "__main__":
    main()
