"""The work behind ``otlp decode`` and ``otlp bench acceptance`` (wired in otlp/cli/commands.py).

Models: omit ``--draft`` / ``--target`` for the embedded Kneser–Ney pair (bigram draft, 4-gram target);
``ngram:K`` picks an embedded model of order K; anything else is a local Hugging Face model directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.decode.registry import available_verifiers

if TYPE_CHECKING:
    from otlp.decode.models import LanguageModel

#: --vocab-size of the embedded n-gram pair (otlp.decode.ngram.DEFAULT_VOCAB_SIZE; not imported: it loads torch)
EMBEDDED_VOCAB = 2000
DEFAULT_PROMPTS = ("return the value of", "this module provides", "if the file does not exist",
                   "raise an exception when")


@dataclass
class ModelPair:
    draft: LanguageModel
    target: LanguageModel
    encode: object  # str -> list[int] (with a leading BOS where the model has one)
    decode_text: object  # list[int] -> str
    description: str


def _ngram_order(spec: str) -> int | None:
    if spec.startswith("ngram:"):
        try:
            return int(spec.split(":", 1)[1])
        except ValueError:
            raise InputError(f"{spec!r}: expected ngram:ORDER with an integer order, e.g. ngram:3") from None
    return None


def load_model_pair(draft: str | None, target: str | None, vocab_size: int | None = EMBEDDED_VOCAB,
                    device: str = "cpu") -> ModelPair:
    """Resolve the CLI's --draft / --target into two language models sharing a vocabulary."""
    draft_order = 2 if draft is None else _ngram_order(draft)
    target_order = 4 if target is None else _ngram_order(target)
    if draft_order is not None and target_order is not None:
        from otlp.decode.ngram import embedded_models

        pair = embedded_models(draft_order, target_order, EMBEDDED_VOCAB if vocab_size is None else vocab_size)
        tok = pair.tokenizer
        return ModelPair(pair.draft, pair.target, lambda s: [tok.bos_id, *tok.encode(s)], tok.decode,
                         f"embedded Kneser-Ney {draft_order}-gram draft / {target_order}-gram target, "
                         f"V = {tok.vocab_size}, Python stdlib docstrings")
    if draft_order is not None or target_order is not None:
        raise InputError("give both --draft and --target as local Hugging Face directories, or both as ngram:K "
                         "(or omit both for the embedded pair)")
    from otlp.decode.hf import HFCausalLM

    d = HFCausalLM.from_pretrained(draft, device=device)  # type: ignore[arg-type]
    t = HFCausalLM.from_pretrained(target, device=device)  # type: ignore[arg-type]
    tokenizer = t.tokenizer or d.tokenizer

    def encode(text: str) -> list[int]:
        ids = tokenizer(text)["input_ids"] if tokenizer is not None else []
        return [t.bos_id, *ids] if (not ids or ids[0] != t.bos_id) else list(ids)

    def decode_text(ids: list[int]) -> str:
        return tokenizer.decode(ids) if tokenizer is not None else " ".join(map(str, ids))

    return ModelPair(d, t, encode, decode_text, f"Hugging Face draft {draft} / target {target}")


def add_decode_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Options of ``otlp decode``."""
    parser.add_argument("--draft", help="local HF model directory or ngram:K (default: embedded bigram)")
    parser.add_argument("--target", help="local HF model directory or ngram:K (default: embedded 4-gram)")
    parser.add_argument("--verifier", default="rrs",
                        help=f"verification rule (default rrs); one of {', '.join(available_verifiers())}")
    parser.add_argument("--scheme", choices=("iid", "without_replacement", "greedy", "spechub"),
                        help="draft scheme (default: the one the verifier expects)")
    parser.add_argument("--n", type=int, default=2, help="drafts per step (default 2)")
    parser.add_argument("--L", type=int, default=4, help="draft length (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=128,
                        help="new tokens kept per prompt (default 128); a prompt's last step may accept past it, "
                             "and the report says how many such tokens were dropped")
    parser.add_argument("--prompt", action="append", help="a text prompt (repeat for a batch)")
    parser.add_argument("--batch", type=int, default=8, help="prompts when --prompt is not given (default 8)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature of the target and draft laws, > 0 (default 1)")
    parser.add_argument("--top-k", type=int, default=None,
                        help="sample the target and draft from their top-k tokens only, k >= 1 (default: all)")
    parser.add_argument("--top-p", type=float, default=None,
                        help="nucleus sampling: the smallest set of tokens of mass >= top-p, in (0, 1] "
                             "(default: all)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the drafts, the verifier's coins and the bonus tokens, >= 0 (default 0)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help=f"vocabulary of the embedded n-gram pair, 3 to the corpus's distinct tokens (9344) "
                             f"(default {EMBEDDED_VOCAB}); a Hugging Face pair has its tokenizer's, so it is refused "
                             "there")
    parser.add_argument("--device", default="cpu", help="device for HF models (default cpu)")
    parser.add_argument("--tree", choices=("cached", "recompute"), default="cached",
                        help="HF models: cached = accepted context in the KV cache, one tree-attention pass per "
                             "step (default; falls back to recompute, with a warning, for a model that cannot "
                             "take a custom attention mask); recompute = every tree node's prefix from scratch")
    parser.add_argument("--no-cuda-graphs", action="store_true",
                        help="on a CUDA device, launch the optimal verifier's kernels on every call instead of "
                             "replaying a CUDA graph captured per call shape (the default; same tokens)")
    parser.add_argument("--engine", choices=("sglang",), default=None,
                        help="verify each step's tree through the SGLang-style adapter "
                             "(otlp.engines.sglang.tree_speculative_sampling: the loop's merged tree in SGLang's "
                             "first-child / next-sibling encoding, engine-style uniforms; --verifier optimal, rrs, "
                             "rrs_wor or optimal_wor); the same tokens as the loop's own walk with the same uniforms")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip plain target sampling (two runs: the token-law comparison with its noise "
                             "floor, and the speed ratio)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--capture", metavar="DIR",
                        help="write every verification node's (p, q) to a new capture folder DIR (Parquet; needs "
                             "otlp[sweep]), the input of `otlp sweep DIR`")
    parser.add_argument("--capture-storage", choices=("sparse", "dense"), default="sparse",
                        help="sparse: top-k of p and q plus tail masses (default); dense: whole laws")
    parser.add_argument("--capture-top-k", type=int, default=256, help="k of sparse captures (default 256)")
    return parser


def _progress(total: int, enabled: bool, desc: str):  # noqa: ANN202
    """A tqdm bar on stderr, only on a terminal (like ``otlp.cli.util.Progress``): a pipe or a log file gets no
    carriage-return frames, and an error line never lands on a bar."""
    if not enabled or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, leave=False)


def check_device(device: object, flag: str = "--device") -> str:
    """``device`` if torch can place tensors there (``cpu``, ``cuda``, ``cuda:1``, ``mps``); else ``InputError``."""
    import torch

    try:
        dev = torch.device(str(device))
    except (RuntimeError, ValueError):
        raise InputError(f"{flag} {device!r} is not a torch device; expected cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"{flag} {device!r}: CUDA is not available in this torch build or machine; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InputError(f"{flag} {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return str(dev)


def check_model_vocab(draft: str | None, target: str | None, vocab_size: int | None) -> int | None:
    """``--vocab-size`` checked before any model loads: for the embedded n-gram pair (both models omitted or
    ngram:K) an integer in [3, the corpus's distinct tokens], default :data:`EMBEDDED_VOCAB`; with a Hugging Face
    pair (whose tokenizer fixes V) it must be absent. Returns the size to build with (None for HF)."""
    embedded = all(spec is None or spec.startswith("ngram:") for spec in (draft, target))
    if not embedded:
        if vocab_size is not None:
            raise InputError("--vocab-size sets the embedded n-gram pair's vocabulary; a Hugging Face pair "
                             "(--draft / --target directories) has its tokenizer's: drop --vocab-size")
        return None
    from otlp.decode.corpus import check_vocab_size

    return check_vocab_size(EMBEDDED_VOCAB if vocab_size is None else vocab_size)


def check_decode_arguments(args: argparse.Namespace) -> None:
    """Every argument of ``otlp decode`` checked before a model is built (milliseconds, not seconds)."""
    from otlp.core.distributions import check_int

    check_int(args.n, "--n", 1)
    check_int(args.L, "--L", 1)
    check_int(args.max_new_tokens, "--max-new-tokens", 1)
    check_int(args.batch, "--batch", 1)
    check_int(args.seed, "--seed", 0)
    args.vocab_size = check_model_vocab(args.draft, args.target, args.vocab_size)
    if args.verifier not in available_verifiers():
        raise InputError(f"unknown --verifier {args.verifier!r}; expected one of {', '.join(available_verifiers())}")
    from otlp.core.distributions import probabilities_from_logits

    try:
        probabilities_from_logits([0.0, 0.0], args.temperature, args.top_k, args.top_p)
    except InputError as exc:  # name the flag: "temperature must be ..." -> "--temperature must be ..."
        raise InputError("--" + str(exc).replace("top_k", "top-k").replace("top_p", "top-p")) from None
    engine = getattr(args, "engine", None)
    if engine is not None:
        from otlp.decode.engine import ENGINE_VERIFIERS

        if args.verifier not in ENGINE_VERIFIERS:
            raise InputError(f"--engine {engine} verifies with the adapter's rules: --verifier "
                             f"{' / '.join(ENGINE_VERIFIERS)}, got {args.verifier!r}")
        if args.capture:
            raise InputError(f"--engine {engine} writes no capture; drop --capture")
    check_device(args.device)
    if args.capture:
        from otlp.sweep.capture import check_new_capture

        check_new_capture(args.capture, args.capture_top_k)


def run_decode_cli(args: argparse.Namespace) -> int:
    """Run ``otlp decode``; prints metrics (or JSON). Bad input raises ``InputError`` before any model is built
    (``otlp.cli.commands`` prints the one line and exits 2)."""
    check_decode_arguments(args)
    from otlp.decode.loop import decode, sample_target  # torch: imported once the arguments are checked
    from otlp.decode.metrics import compare_token_laws

    bar = capture = None
    try:
        pair = load_model_pair(args.draft, args.target, args.vocab_size, args.device)
        texts = args.prompt or [DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)] for i in range(max(1, args.batch))]
        prompts = [pair.encode(t) for t in texts]
        total = len(prompts) * args.max_new_tokens
        bar = _progress(total, not (args.no_progress or args.json), f"decode {args.verifier} n={args.n} L={args.L}")
        if args.capture:  # opened before the run, closed (last shard written) even on an interrupt
            from otlp.sweep.capture import CaptureWriter

            facts = {"source": "otlp decode", "models": pair.description, "verifier": args.verifier, "n": args.n,
                     "L": args.L, "seed": args.seed}
            capture = CaptureWriter(args.capture, pair.target.vocab_size, storage=args.capture_storage,
                                    top_k=args.capture_top_k, provenance=facts)
        result = decode(pair.draft, pair.target, args.verifier, args.n, args.L, prompts=prompts,
                        max_new_tokens=args.max_new_tokens, scheme=args.scheme, temperature=args.temperature,
                        top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                        progress=bar.update if bar is not None else None, capture=capture, tree=args.tree,
                        cuda_graphs=not args.no_cuda_graphs, engine=getattr(args, "engine", None))
        if bar is not None:
            bar.close()
        report: dict = {"models": pair.description, "metrics": result.metrics.as_dict(),
                        "sample": pair.decode_text(result.tokens[0])}
        if capture is not None:
            capture.close()
            report["capture"] = {"path": str(capture.path), "nodes": capture.rows, "shards": len(capture.shards),
                                 "storage": capture.storage}
        if not args.no_baseline:  # two plain runs: the second gives the token-law comparison its noise floor
            runs = []
            for k in (1, 2):
                bar = _progress(total, not (args.no_progress or args.json), f"plain target sampling ({k}/2)")
                runs.append(sample_target(pair.target, prompts=prompts, max_new_tokens=args.max_new_tokens,
                                          temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                          seed=args.seed + k, progress=bar.update if bar is not None else None))
                if bar is not None:
                    bar.close()
            (plain, info), (plain_again, _) = runs
            V = pair.target.vocab_size
            report["baseline"] = {**info, "token_law": compare_token_laws(result.tokens, plain, V),
                                  "token_law_plain_vs_plain": compare_token_laws(plain_again, plain, V)}
    except InputError as exc:
        if bar is not None:
            bar.close()  # the error line starts on a clean line, not on the progress bar
        if isinstance(exc, ModelTooLargeError) and args.top_k is None:
            # the exact rule's leaves at n >= 3 on a full vocabulary: sampling with --top-k bounds the support
            raise InputError(f"{exc} (here: sample with --top-k, e.g. --top-k 100, which bounds the tokens the "
                             "verifier sees)") from None
        raise
    finally:
        if capture is not None:
            capture.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0


def _output_line(m: dict) -> str:
    """The tokens kept against the tokens the rule emitted: a prompt's last step may accept past
    --max-new-tokens; those tokens are dropped from the output but counted in block efficiency."""
    kept, asked = m["tokens_kept"], f"{m['batch']} prompts x {m['max_new_tokens']} (--max-new-tokens)"
    extra = m["tokens"] - kept
    if extra <= 0:
        return f"output              {kept} tokens = {asked}"
    return (f"output              {kept} tokens = {asked}; the rule emitted {m['tokens']}: a prompt's last step "
            f"can accept past {m['max_new_tokens']}, and those {extra} tokens are dropped from the output (block "
            "efficiency counts them: it measures the rule)")


def format_report(report: dict) -> str:
    m = report["metrics"]
    acc = " ".join(f"{a:.3f}" for a in m["acceptance_per_position"])
    lines = [
        f"models              {report['models']}",
        f"verifier            {m['verifier']} (draft scheme {m['scheme']}), n = {m['n']}, L = {m['L']}, "
        f"batch = {m['batch']}" + (f", through the {m['engine']} adapter" if m.get("engine") else ""),
        f"block efficiency    {m['block_efficiency']:.4f} tokens per sequence per target call = {m['tokens']} "
        f"tokens / {m['sequence_steps']} sequence-steps (a sequence-step: one prompt in one target call; "
        f"{m['target_calls']} batched target calls, each over the prompts still decoding)",
        _output_line(m),
        f"acceptance by depth {acc}",
        f"rule acceptance     {m['rule_acceptance']:.4f} (verifications where the rule accepted a draft)",
        f"throughput          {m['tokens_per_second']:.1f} tokens/s, {m['seconds']:.2f} s "
        f"(draft {m['draft_seconds']:.2f} s, target {m['target_seconds']:.2f} s, "
        f"verifier {m['verifier_seconds']:.2f} s = {100 * m['verifier_time_share']:.1f}% of the run)",
        f"target positions    {m['target_positions']} ({m['target_positions_per_step']:.1f} per sequence-step, "
        f"{m['target_positions_per_token']:.1f} per token; {m['target_tree']} path), draft: "
        f"{m['draft_positions_per_step']:.1f} per sequence-step ({m['draft_tree']})",
    ]
    if "baseline" in report:
        b = report["baseline"]
        law, floor = b["token_law"], b["token_law_plain_vs_plain"]
        lines += [
            f"plain sampling      {b['tokens_per_second']:.1f} tokens/s, {b['target_calls']} target calls",
            f"token law vs plain  TV = {law['tv']:.4f} ({law['tokens'][0]} vs {law['tokens'][1]} tokens); "
            f"two plain runs: TV = {floor['tv']:.4f} (equal laws; tokens of a stream are dependent, so no p-value)",
        ]
    if "capture" in report:
        c = report["capture"]
        lines.append(f"capture             {c['nodes']} nodes ({c['storage']}) in {c['shards']} shards under "
                     f"{c['path']}")
    lines.append(f"sample              {report['sample'][:300]}")
    return "\n".join(lines)


def add_acceptance_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Options of ``otlp bench acceptance``."""
    parser.add_argument("--draft", help="local HF model directory or ngram:K (default: embedded bigram)")
    parser.add_argument("--target", help="local HF model directory or ngram:K (default: embedded 4-gram)")
    parser.add_argument("--pairs", type=int, default=256, help="(p, q) pairs collected from the loop (default 256)")
    parser.add_argument("--ns", default="1,2,4,8", help="comma-separated n values (default 1,2,4,8)")
    parser.add_argument("--top-ks", default="10,100,1000,all", help="comma-separated top-k on q; 'all' = V")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="temperature of the target and draft laws the pairs are collected at, > 0 (default 1)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help=f"vocabulary of the embedded n-gram pair, 3 to the corpus's distinct tokens (9344) "
                             f"(default {EMBEDDED_VOCAB}); refused with a Hugging Face pair")
    parser.add_argument("--seed", type=int, default=0, help="seed of the decode loop the pairs come from (default 0)")
    parser.add_argument("--device", default="cpu", help="device for HF models (default cpu)")
    parser.add_argument("--out", default="benchmarks/results",
                        help="folder for the JSON and PNG, relative to the current directory (default "
                             "benchmarks/results); the paths written are printed at the end")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _check_out_dir(out: str) -> None:
    """Create ``--out`` (as the run would) and check it takes files; ``InputError`` in one line if not."""
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise InputError(f"--out {out!r} is not a writable folder ({exc.strerror or exc}); pass a folder the JSON "
                         "and PNG can be written to") from None


def run_acceptance_cli(args: argparse.Namespace) -> int:
    """Run ``otlp bench acceptance``: table (or JSON) on stdout, JSON + PNG under ``--out`` (their absolute paths
    printed). Bad input raises ``InputError`` before the models load."""
    from otlp.core.distributions import check_int
    from otlp.decode.acceptance import format_sweep, run_acceptance

    if isinstance(args.pairs, bool) or not isinstance(args.pairs, int) or args.pairs < 1:
        raise InputError(f"--pairs must be an integer >= 1, got {args.pairs} (the number of (p, q) pairs to "
                         "collect)")
    check_int(args.seed, "--seed", 0)
    args.vocab_size = check_model_vocab(args.draft, args.target, args.vocab_size)
    from otlp.cli.util import int_list

    ns = int_list(args.ns, "--ns")
    top_ks = int_list(args.top_ks, "--top-ks", allow_all=True)
    check_device(args.device)  # imports torch: after the checks that need nothing
    _check_out_dir(args.out)  # before the minutes of collection, not after
    pair = load_model_pair(args.draft, args.target, args.vocab_size, args.device)
    prompts = [pair.encode(t) for t in DEFAULT_PROMPTS]
    sweep = run_acceptance(pair.draft, pair.target, prompts, pairs=args.pairs, ns=ns, top_ks=top_ks,
                           temperature=args.temperature, seed=args.seed, out_dir=args.out)
    for note in sweep["notes"]:
        print(f"otlp bench: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(sweep, indent=2))
    else:
        print(format_sweep(sweep, sweep["V"]))
        print(f"wrote {os.path.abspath(sweep['png'])} and its JSON, in {os.path.abspath(args.out)} "
              f"({sweep['seconds']:.1f} s)")
    return 0
