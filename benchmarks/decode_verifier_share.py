"""The verifier's share of a speculative decode with Hugging Face models, by verifier, on the CPU or a GPU.

Issue 19 asks that ``otlp decode --verifier optimal --n 4`` spend no larger share of its time in the verifier than
``--verifier rrs`` does, plus 5 points. This runs the decode loop (KV-cached tree path) on the random-weight
Llama-style target of ``decode_hf.py`` ("10M": 9.8M parameters, V = 32000) with ``initializer_range`` raised
(``--init``, default 0.2) so that its next-token laws are far from uniform (entropy about 5.6 nats), and as the
draft the same model with every weight moved by Gaussian noise of ``--draft-noise`` (default 0.04) times that
tensor's standard deviation: a draft close to the target, as a trained draft is (a smaller random model agrees with
nothing; at 0.04 the acceptance with one draft is about 0.58 and alpha* at n = 4 about 0.86, on 8 random contexts).
The draft costs as much as the target here. A batch of random prompts of ``--context`` tokens, and the verifiers
side by side: one run each, interleaved, ``--repeats`` times (medians reported), after one warm-up run each. On
a GPU the laws, the draws and the verifier stay on the device (``otlp.decode.loop.loop_device``), every timed
section ends with a device synchronisation, and ``optimal`` replays its calls from CUDA graphs (one per call shape,
captured in the warm-up run) unless named ``optimal:eager``. Columns: tokens/s, block efficiency, the verifier's
share of the run's wall time, its time per call (the loop calls it once per depth and per number of children
present) and the split draft / target / verifier seconds.

Run (a minute or two on 2 CPU cores):
    flock /tmp/team/bench.lock python benchmarks/decode_verifier_share.py [--device cpu --verifiers rrs,optimal
        --n 4 --L 4 --batch 8 --tokens 32 --context 64 --repeats 3 --threads 1]
Writes benchmarks/results/decode_verifier_share_<device>_n<n>_b<batch>.json and publishes the docs/DECODE.md table (the
rows of this device, n and batch replace their earlier rows; the others stay); ``--from-json PATH`` publishes a
finished run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script
from decode_hf import SIZES, V, _save  # noqa: E402 - the models of the cached-vs-recompute benchmark

COLUMNS = ["device", "verifier", "n", "batch", "tokens/s", "block efficiency", "verifier share",
           "ms per verifier call", "draft / target / verifier s"]


def device_label(device: str) -> str:
    if device.startswith("cuda"):
        return f"CUDA ({torch.cuda.get_device_name(torch.device(device))})"
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} thread(s))"


def publish(rows: list[dict], label: str) -> None:
    """Replace the docs/DECODE.md table's rows of this device, n and batch by ``rows`` (medians of each verifier's
    runs)."""
    ours = {(label, str(r["n"]), str(r["batch"])) for r in rows}
    try:
        kept = [r for r in readme_tables.load("decode_verifier_share", "hf")["rows"] if (r[0], r[2], r[3]) not in ours]
    except (FileNotFoundError, KeyError):
        kept = []
    cells = [[label, r["verifier"], str(r["n"]), str(r["batch"]), f"{r['tokens_per_second']:.1f}",
              f"{r['block_efficiency']:.2f}", f"{100 * r['verifier_share']:.1f}%",
              f"{1e3 * r['verifier_seconds'] / r['verifier_calls']:.2f}",
              f"{r['draft_seconds']:.2f} / {r['target_seconds']:.2f} / {r['verifier_seconds']:.2f}"] for r in rows]
    readme_tables.publish("decode_verifier_share", "hf", COLUMNS, kept + cells)
    table = readme_tables.load("decode_verifier_share", "hf")
    print(f"\n<!-- table: decode_verifier_share/hf -->\n{readme_tables.markdown(table['columns'], table['rows'])}")


def _noisy_copy(source: Path, folder: Path, noise: float, seed: int) -> None:
    """The model saved in ``source`` with every weight tensor w moved by N(0, (noise * std(w))^2), saved to
    ``folder``."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(source), local_files_only=True)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in model.parameters():
            w.add_(torch.randn(w.shape, generator=gen) * (noise * float(w.std())))
    model.save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--verifiers", default="rrs,optimal",
                        help="comma-separated; NAME:eager turns the loop's CUDA graphs off (default rrs,optimal)")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--L", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per prompt (default 32)")
    parser.add_argument("--context", type=int, default=64, help="prompt length (default 64)")
    parser.add_argument("--init", type=float, default=0.2, help="initializer_range of both models (default 0.2)")
    parser.add_argument("--draft-noise", type=float, default=0.04,
                        help="the draft = the target with this relative Gaussian noise on its weights (default 0.04)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: steadier on a shared machine; 0 = torch's default)")
    parser.add_argument("--out", help="JSON path (default: benchmarks/results/"
                                      "decode_verifier_share_<device>_n<n>_b<batch>.json)")
    parser.add_argument("--from-json", metavar="PATH",
                        help="publish the docs/DECODE.md table of a finished run and exit")
    args = parser.parse_args()
    if args.from_json:
        done = json.loads(Path(args.from_json).read_text())
        publish(done["rows"], done["device"])
        return
    from otlp.cli.decode import check_device
    from otlp.core.errors import InputError

    try:
        check_device(args.device)
    except InputError as exc:
        parser.exit(2, f"otlp: error: {exc}\n")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from otlp.decode.hf import HFCausalLM
    from otlp.decode.loop import decode

    names = args.verifiers.split(",")
    label = device_label(args.device)
    gen = torch.Generator().manual_seed(args.seed)
    prompts = [[0] + torch.randint(1, V, (args.context - 1,), generator=gen).tolist() for _ in range(args.batch)]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    print(f"{label}: n = {args.n}, L = {args.L}, batch {args.batch}, {args.tokens} tokens, context {args.context}")
    print(f"{'verifier':>13} {'tok/s':>8} {'BE':>5} {'share':>6} {'calls':>6} {'ms/call':>8}  draft/target/verifier s",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        target_spec = SIZES["10M"][0]
        max_positions = args.context + args.tokens + args.L + 8
        _save(Path(tmp) / "t", target_spec, 1, max_positions, args.init)
        _noisy_copy(Path(tmp) / "t", Path(tmp) / "d", args.draft_noise, args.seed)
        draft = HFCausalLM.from_pretrained(Path(tmp) / "d", device=args.device)
        target = HFCausalLM.from_pretrained(Path(tmp) / "t", device=args.device)
        for name in names:  # warm-up: the mask probe, kernels, the native library, the CUDA graphs of the shapes
            decode(draft, target, name.split(":")[0], args.n, args.L, prompts=prompts, max_new_tokens=args.tokens,
                   cuda_graphs=not name.endswith(":eager"))
        for rep in range(args.repeats):
            for name in names:
                start = time.perf_counter()
                m = decode(draft, target, name.split(":")[0], args.n, args.L, prompts=prompts,
                           max_new_tokens=args.tokens, seed=args.seed + rep,
                           cuda_graphs=not name.endswith(":eager")).metrics
                wall = time.perf_counter() - start
                row = {"verifier": name, "n": args.n, "L": args.L, "batch": args.batch, "wall": wall,
                       "tokens_per_second": m.tokens_per_second, "block_efficiency": m.block_efficiency,
                       "verifier_share": m.verifier_time_share, "verifier_calls": m.verifier_calls,
                       "verifier_seconds": m.verifier_seconds, "draft_seconds": m.draft_seconds,
                       "target_seconds": m.target_seconds, "seconds": m.seconds}
                runs[name].append(row)
                per_call = 1e3 * m.verifier_seconds / m.verifier_calls
                print(f"{name:>13} {row['tokens_per_second']:8.1f} {m.block_efficiency:5.2f} "
                      f"{100 * m.verifier_time_share:5.1f}% {m.verifier_calls:6d} {per_call:8.2f}  "
                      f"{m.draft_seconds:.2f}/{m.target_seconds:.2f}/{m.verifier_seconds:.2f}", flush=True)
    rows = []
    for name in names:  # the median of each number over the repeats
        first = runs[name][0]
        rows.append({k: (statistics.median(r[k] for r in runs[name]) if isinstance(v, float) else v)
                     for k, v in first.items()})
        rows[-1]["verifier_calls"] = statistics.median(r["verifier_calls"] for r in runs[name])
    out = Path(args.out or Path(__file__).resolve().parent / "results" /
               f"decode_verifier_share_{args.device.replace(':', '')}_n{args.n}_b{args.batch}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(args, k) for k in ("n", "L", "batch", "tokens", "context", "init", "draft_noise", "repeats",
                                                 "seed")}
    out.write_text(json.dumps({"device": label, "settings": settings, "rows": rows, "runs": runs}, indent=2))
    print(f"wrote {out}")
    publish(rows, label)


if __name__ == "__main__":
    main()
