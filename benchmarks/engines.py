"""The engine adapters' cost per call against otlp's own ``sample`` at the same sizes, side by side in one run.

Each pair verifies the same work, one node per request with the same uniforms: ``get(method).sample(p, q, drafts,
uniforms=u)`` (``u [B, 2]``: one coin and one final uniform per request) against

* ``flashinfer``: ``otlp.engines.flashinfer.chain_speculative_sampling`` with one draft per request
  (``draft_probs [B, 1, V]``, ``target_probs [B, 2, V]``: the engine's bonus row is part of its contract);
* ``vllm``: ``otlp.engines.vllm.rejection_sample`` with one draft per request (``final_uniforms``: the recovered
  token by inverse CDF, as otlp draws it);
* ``sglang_chain``: ``otlp.engines.sglang.chain_speculative_sampling`` with N = 2 nodes (root and one draft);
* ``sglang_tree``: ``otlp.engines.sglang.tree_speculative_sampling``, a root with n children (N = n + 1, S = 2)
  against ``sample`` on the n drafts.

float32 LM-like rows (benchmarks/verifiers.py's inputs), the least time of ``--reps`` interleaved calls (the order
shuffled each round) after a warm-up, value checks off (``validation(False)``, the serving setting; ``--validate``
times them on). The ratio is adapter / the same work through ``sample``: for FlashInfer, SGLang's chain and the
tree that is ``sample`` plus the bonus draw (from p) of the accepted requests, which the engines' contracts include
(vLLM's bonus comes from outside): the adapter layer's overhead (issue 43 asks <= 1.10 at B = 64, V = 128k).
"read floor": one ``p.sum() + q.sum()``.

``--publish`` stores the printed table as ``benchmarks/published/engines.json``, table ``<device>_<threads>_threads``
(CPU) or ``<device>`` (:mod:`readme_tables`), and rewrites it where docs/ENGINES.md marks it
(``<!-- table: engines/cpu_1_threads -->``); a table no page marks yet (the first CUDA run) is printed with its
marker line, to paste under a heading of docs/ENGINES.md.

    python benchmarks/engines.py --threads 1 --publish   # B = 64, V = 32k and 128k, rrs and optimal, CPU (~1 min)
    python benchmarks/engines.py --device cuda --reps 20 --publish
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from otlp.engines import flashinfer, sglang, vllm
from otlp.engines._common import draw_where
from otlp.verifiers import get
from otlp.verifiers.base import validation

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script
from verifiers import _inputs  # noqa: E402 - benchmarks/verifiers.py, beside this script
from verifiers import _times as _interleaved  # noqa: E402


def _times(fns: dict[str, object], reps: int, device: str) -> dict[str, float]:
    """The least seconds of each call in ``fns`` over ``reps`` interleaved rounds (:func:`verifiers._times`, one
    round at a time), the order shuffled every round (seeded): on two threads a call right after one that ran an
    OpenMP team (the optimal rule's bucketed rows) shares the cores with the team's still-spinning threads, which in a
    fixed (or rotated) order falls on the same call every round. On a shared machine the least time is the one other
    jobs disturbed least."""
    import random

    names = list(fns)
    best = dict.fromkeys(names, float("inf"))
    rng = random.Random(0)
    for _ in range(reps):
        order = rng.sample(names, len(names))
        for name, seconds in _interleaved({k: fns[k] for k in order}, 1, device, stat=min).items():
            best[name] = min(best[name], seconds)
    return best


def bench_point(method: str, B: int, V: int, n: int, device: str, reps: int) -> dict[str, float]:
    """Median seconds of each adapter and of ``sample`` for one (method, B, V); ``n`` children for the tree."""
    p, q, drafts = _inputs(B, V, n, device)
    g = torch.Generator(device="cpu").manual_seed(1)
    u = torch.rand(B, 2, generator=g).to(device)
    verifier = get(method)
    one = drafts[:, :1]
    target2 = torch.stack([p, p], dim=1)  # [B, 2, V]: the position's row and the bonus row
    q1 = q[:, None]  # [B, 1, V]
    cu = torch.arange(1, B + 1, device=device)
    fi_u = torch.stack([u[:, 0], u[:, 1]], dim=1)  # [B, n + 1]: one coin, one final uniform

    def outputs(N: int, S: int):  # noqa: ANN202
        return (torch.full((B * N,), -1, dtype=torch.int32, device=device),
                torch.full((B, S), -1, dtype=torch.int32, device=device),
                torch.zeros(B, dtype=torch.int32, device=device))

    chain_cand = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=device), one], dim=1)
    chain_index = torch.arange(B * 2, device=device).reshape(B, 2)
    N = n + 1
    tree_cand = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=device), drafts], dim=1)  # [B, N]
    first = torch.tensor([1] + [-1] * n, device=device).expand(B, N).contiguous()
    sibling = torch.tensor([-1] + [j + 1 if j < n else -1 for j in range(1, N)], device=device).expand(B, N)
    sibling = sibling.contiguous()
    tree_target = torch.cat([p[:, None], p[:, None].expand(B, n, V)], dim=1).contiguous()  # leaves: p (bonus rows)
    tree_draft = torch.cat([q[:, None], q[:, None].expand(B, n, V)], dim=1).contiguous()
    tree_u = torch.cat([u[:, :1], u[:, :1].expand(B, n)], dim=1).contiguous()
    def with_bonus(drafts_):  # noqa: ANN001, ANN202 - sample, then the bonus draw of the accepted rows
        tokens, index = verifier.sample(p, q, drafts_, uniforms=u)
        return tokens, draw_where(index >= 0, p, u[:, 1])

    fns = {
        "read_floor": lambda: p.sum() + q.sum(),
        "sample_1": lambda: verifier.sample(p, q, one, uniforms=u),
        "sample_1_bonus": lambda: with_bonus(one),
        f"sample_{n}_bonus": lambda: with_bonus(drafts),
        "flashinfer": lambda: flashinfer.chain_speculative_sampling(q1, one, target2, method=method, uniforms=fi_u),
        "vllm": lambda: vllm.rejection_sample(one[:, 0], [1] * B, 1, cu, q, p, one, method=method,
                                              uniform_probs=u[:, 0], final_uniforms=u[:, 1]),
        "sglang_chain": lambda: sglang.chain_speculative_sampling(
            *outputs(2, 2), chain_cand, chain_index, None, None, u[:, :1].contiguous(), u[:, 1].contiguous(),
            target2, q1, method=method),
        f"sample_{n}": lambda: verifier.sample(p, q, drafts, uniforms=u),
        "sglang_tree": lambda: sglang.tree_speculative_sampling(
            *outputs(N, 2), tree_cand, torch.arange(B * N, device=device).reshape(B, N), first, sibling, tree_u,
            u[:, 1].contiguous(), tree_target, tree_draft, method=method, max_children=n),
    }
    return _times(fns, reps, device)


COLUMNS = ["method", "B", "V", "read floor", "`sample` (1 draft)", "+ bonus", "FlashInfer", "vLLM", "SGLang chain",
           "`sample` (n drafts) + bonus", "SGLang tree (n children)"]


def table(rows: list[dict]) -> list[list[str]]:
    """The published cells of a run: milliseconds, and in brackets adapter / the same work through ``sample``."""
    def cell(r: dict, k: str) -> str:
        return f"{r[k]:.2f} ({r[k + '_ratio']:.2f}x)"

    def size(V: int) -> str:
        return f"{V // 1000}k" if V % 1000 == 0 else str(V)

    return [[r["method"], str(r["B"]), size(r["V"]), f"{r['read_floor']:.2f}", f"{r['sample_1']:.2f}",
             f"{r['sample_1_bonus']:.2f}", cell(r, "flashinfer"), cell(r, "vllm"), cell(r, "sglang_chain"),
             f"{r['sample_{}_bonus'.format(r['n'])]:.2f}", cell(r, "sglang_tree")] for r in rows]


def publish(rows: list[dict], args: argparse.Namespace, threads: int) -> None:
    """Publish the run's table (:mod:`readme_tables`) and rewrite docs/ENGINES.md where it marks it."""
    name = f"cpu_{threads}_threads" if args.device == "cpu" else str(args.device).split(":")[0]
    settings = {"device": args.device, "threads": threads, "B": args.B, "n": args.n, "reps": args.reps,
                "validate": args.validate, "stat": "min"}
    cells = table(rows)
    readme_tables.publish("engines", name, COLUMNS, cells, settings)
    marker = f"<!-- table: engines/{name} -->"
    try:
        written = readme_tables.update_readme("engines", name)
        print(f"\n{marker} rewritten in {', '.join(str(p.name) for p in written)}")
    except ValueError:
        print(f"\nno page marks this table yet; paste under a heading of docs/ENGINES.md:\n{marker}\n"
              + readme_tables.markdown(COLUMNS, cells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--B", type=int, nargs="+", default=[64])
    parser.add_argument("--V", type=int, nargs="+", default=[32_000, 128_000])
    parser.add_argument("--n", type=int, default=4, help="children of the tree's root")
    parser.add_argument("--methods", nargs="+", default=["rrs", "optimal"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--validate", action="store_true", help="time with the value checks on")
    parser.add_argument("--publish", action="store_true",
                        help="publish the table (benchmarks/published/engines.json) and rewrite docs/ENGINES.md's")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "engines.json"))
    args = parser.parse_args(argv)
    if str(args.device).startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available on this machine")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    print(f"device {args.device}, threads {torch.get_num_threads()}, validation {'on' if args.validate else 'off'}; "
          "milliseconds per call (least of the reps), ratio = adapter / the same work through sample")
    print(f"{'method':8} {'B':>4} {'V':>7} {'floor':>7} {'sample_1':>9} {'+bonus':>8} {'flashinfer':>16} "
          f"{'vllm':>16} {'sglang_chain':>16} {'sample_n+b':>10} {'sglang_tree':>16}")
    for method in args.methods:
        for B in args.B:
            for V in args.V:
                with validation(args.validate):
                    t = bench_point(method, B, V, args.n, args.device, args.reps)
                row = {"method": method, "B": B, "V": V, "n": args.n, **{k: v * 1e3 for k, v in t.items()}}
                base1 = row["sample_1"]
                row["vllm_ratio"] = row["vllm"] / base1  # vLLM's bonus comes from outside
                for k in ("flashinfer", "sglang_chain"):  # these draw the bonus of every accepted request
                    row[f"{k}_ratio"] = row[k] / row["sample_1_bonus"]
                row["sglang_tree_ratio"] = row["sglang_tree"] / row[f"sample_{args.n}_bonus"]
                rows.append(row)
                cell = lambda k, r=row: f"{r[k]:8.2f} ({r[k + '_ratio']:4.2f}x)"  # noqa: E731
                print(f"{method:8} {B:4d} {V:7d} {row['read_floor']:7.2f} {base1:9.2f} {row['sample_1_bonus']:8.2f} "
                      f"{cell('flashinfer'):>16} {cell('vllm'):>16} {cell('sglang_chain'):>16} "
                      f"{row[f'sample_{args.n}_bonus']:10.2f} {cell('sglang_tree'):>16}")
    if args.publish:
        publish(rows, args, torch.get_num_threads())
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"device": args.device, "threads": torch.get_num_threads(), "validate": args.validate,
                   "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
