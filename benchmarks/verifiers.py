"""Verifier cost per decode step, side by side in one run: sps, rrs, rrs_wor, kseq and the exact optimal rule.

Grid: V in {2k, 32k, 128k, 152k}, n in {2, 4, 8}, B in {1, 8, 64} and three drafts (``--drafts``): ``loose``, loosely
correlated with the target (1 - TV about 0.1), and the close drafts a real draft model gives, the target's logits plus
Gaussian noise of sigma 1 and 0.5 (1 - TV about 0.64 and 0.81); float32 LM-like rows (softmax of scaled normals);
``verifier.sample(p, q, drafts, generator)`` timed as one call (median of
``--reps`` after a warm-up; the rules' calls interleaved, so a slow spell of a shared machine hits all alike), on
the CPU with one thread and with torch's default threads, and on CUDA when a GPU is present. "read floor" is one
``p.sum() + q.sum()`` over the same tensors in the same run: the time to read the inputs once. Prints one table per
(device, threads), writes ``benchmarks/results/verifiers.json`` and publishes the tables docs/COST.md shows
(``benchmarks/published/verifiers.json``, :mod:`readme_tables`).

    python benchmarks/verifiers.py                      # the full grid, the three drafts (about half an hour
                                                        # with both thread settings on this 2-core CPU)
    python benchmarks/verifiers.py --quick              # V = 2k and 32k, B = 1 and 64
    python benchmarks/verifiers.py --drafts loose       # the loosely correlated draft only
    python benchmarks/verifiers.py --rules rrs optimal --threads 1
    python benchmarks/verifiers.py --from-json benchmarks/results/verifiers.json   # publish a finished run
    python benchmarks/verifiers.py --device cuda --reps 10            # the CUDA table
    python benchmarks/verifiers.py --device cuda --compile --V 128000 --B 64   # and compile=True (a compile per shape)
    python benchmarks/verifiers.py --device cuda --graph --reps 10    # every rule captured in a CUDA graph
    python benchmarks/verifiers.py --device cuda --rules sps rrs --V 128000 --B 64 --n 4 --bytes
                                                        # with the fused Triton kernels of rrs and sps beside the
                                                        # torch routes for the same uniforms (on CUDA with Triton;
                                                        # --no-fused leaves them out) and their reads / floor, and
                                                        # optimal's Triton route beside its sorted torch route
    python benchmarks/verifiers.py --device cpu --threads 1 --drafts 1 0.5 --bytes --rates --V 32000 --B 64
                                                        # and each torch route's bytes moved / read floor
                                                        # (benchmarks/bytes_moved.py, meta tensors), and the
                                                        # cell rule's refinement / fallback rates on the rows
                                                        # and the CPU route's (certified at once, on the retry,
                                                        # left to the full sort)
    python benchmarks/verifiers.py --draft-top-k 10 --rules rrs_wor optimal_wor --drafts 1 --V 32000 128000
                                                        # drafts filtered to their top 10 tokens and drawn
                                                        # without replacement: optimal_wor beside rrs_wor
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from otlp.backend import native
from otlp.verifiers import get, triton_kernels
from otlp.verifiers.base import validation

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bytes_moved  # noqa: E402 - benchmarks/bytes_moved.py, beside this script
import readme_tables  # noqa: E402 - benchmarks/readme_tables.py, beside this script

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.optimal.instances import filtered_target  # noqa: E402 - the tests' top-k filter, for --top-k

RULES = ("sps", "rrs", "rrs_wor", "kseq", "optimal")
SIZES = (2_000, 32_000, 128_000, 152_000)
#: the grid's drafts: the loosely correlated one, then close drafts of noise sigma 1 and 0.5 (:func:`_inputs`)
DRAFTS = ("loose", "1", "0.5")


def _noise(draft: str) -> float | None:
    """A ``--drafts`` entry as :func:`_inputs`' noise: None for ``loose``, else the sigma."""
    return None if draft == "loose" else float(draft)


def _draft_name(row: dict) -> str:
    """A result row's draft as the tables name it: ``loose`` or ``sigma <noise>``."""
    return "loose" if row.get("draft_noise") is None else f"sigma {row['draft_noise']:g}"


#: ``--top-k K``: the target filtered to its K likeliest tokens (p = 0 elsewhere, renormalised), as engines pass it
#: after top-k sampling; None: unfiltered (the grid and the published tables)
TARGET_TOP_K: int | None = None
#: ``--draft-top-k K``: the draft filtered to its K likeliest tokens and drawn without replacement (what
#: ``optimal_wor`` needs); None: unfiltered, drawn with replacement (the grid and the published tables)
DRAFT_TOP_K: int | None = None
#: rules a run may add to :data:`RULES` (never published); ``optimal_wor`` with ``--draft-top-k`` only
EXTRA_RULES = ("optimal_wor",)


def _inputs(B: int, V: int, n: int, device: str, seed: int = 0, noise: float | None = None):  # noqa: ANN202
    """float32 rows ``p, q [B, V]`` and drafts ``[B, n]`` from q. The grid's draft (``noise`` None) is loosely
    correlated with the target, q = softmax(3 z' + 0.5 log p) (1 - TV(p, q) about 0.1); with ``noise`` sigma it is the
    target's logits plus sigma-scaled Gaussian noise, q = softmax(log p + sigma z') (a close draft: 1 - TV about 0.64
    at sigma = 1 and 0.81 at 0.5). With :data:`TARGET_TOP_K` the target is then filtered to its top k (q is not);
    with :data:`DRAFT_TOP_K` the draft is, and drafted without replacement."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    if noise is None:
        q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    else:
        q = torch.softmax(torch.log(p) + noise * torch.randn(B, V, generator=g), dim=1)
    if TARGET_TOP_K is not None:
        p = filtered_target(p, TARGET_TOP_K)
    if DRAFT_TOP_K is None:
        drafts = torch.multinomial(q, n, replacement=True, generator=g)
    else:  # the draft's top K, then n draws without replacement (Gumbel top-n)
        q = filtered_target(q, DRAFT_TOP_K)
        keys = torch.log(q) - torch.log(-torch.log(torch.rand(q.shape, generator=g)))
        drafts = torch.topk(keys, n, dim=1).indices
    return p.to(device), q.to(device), drafts.to(device)


def _times(fns: dict[str, object], reps: int, device: str, stat=statistics.median) -> dict[str, float]:  # noqa: ANN001
    """Seconds of each call in ``fns`` (``stat`` of its ``reps`` timings: the median by default), the calls
    interleaved round-robin (one warm-up each), so that a slow spell of a shared machine falls on every method alike
    and the ratios stay comparable."""
    for fn in fns.values():
        fn()  # warm-up
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            out[name].append(time.perf_counter() - t)
    return {name: stat(ts) for name, ts in out.items()}


def _graphed(fn):  # noqa: ANN001, ANN202
    """``fn`` captured once in a CUDA graph (:func:`otlp.backend.cuda_graphs.capture`): its replay, which launches the
    captured kernels with no Python or launch overhead."""
    from otlp.backend.cuda_graphs import capture

    return capture(fn)[0].replay


def bench_point(rules: list[str], B: int, V: int, n: int, device: str, reps: int,
                compiled: bool = False, noise: float | None = None, graphs: bool = False,
                fused: bool = False) -> dict[str, object]:
    """One grid point. ``compiled``: also the optimal rule with ``compile=True`` (``optimal_compiled``; its first
    call, which compiles, is the warm-up), and how many of its tokens / slots differ from the eager call's for the
    same uniforms (``optimal_compiled_mismatches``, out of 2 B); ``noise``: the close draft of :func:`_inputs`
    (recorded with the rows' mean 1 - TV(p, q), ``draft_acceptance``); ``graphs`` (CUDA): every call captured in a
    CUDA graph and timed as a replay, as a serving engine that graphs its decode step runs it (value checks off,
    since they synchronise; randomness from the device's default generator, which graphs capture; a call that
    cannot be captured gets ``<name>_graph_error`` instead of a time); ``fused`` (CUDA with Triton): for rrs and sps
    in ``rules`` also ``<rule>_fused`` (the Triton kernel of otlp/verifiers/triton_kernels.py) and
    ``<rule>_uniforms`` (the torch route it replaces) with the same caller uniforms, and how many of their tokens /
    indices differ (``<rule>_fused_mismatches``, out of 2 B); for optimal ``optimal_triton`` (its route on CUDA: the
    bucket rule with the Triton passes and fallback kernel, what ``optimal`` times there) and ``optimal_torch`` (the
    sorted torch route, ``backend="torch"``, which the CUDA tables of docs/COST.md measured), and
    ``optimal_triton_mismatches``; for optimal_wor on a device (timed on its default route, the plan's Newton steps in
    the Triton kernel on CUDA) also ``optimal_wor_torch`` (those steps as torch operations), ``optimal_wor_host``
    and, on CUDA, ``optimal_wor_triton_mismatches`` (the two device routes, same uniforms, out of 2 B)."""
    p, q, drafts = _inputs(B, V, n, device, noise=noise)
    gen = torch.Generator(device=device).manual_seed(0)
    fns = {"read_floor": lambda: p.sum() + q.sum()}
    errors = {}
    for rule in rules:
        verifier = get(rule)
        kw = {"top_k": DRAFT_TOP_K} if rule == "optimal_wor" else {}  # (its support size: no host sync on a device)
        fns[rule] = lambda v=verifier, kw=kw: v.sample(p, q, drafts, None if graphs else gen, **kw)
    if "optimal_wor" in rules and torch.device(device).type != "cpu":  # the host route beside the device route
        fns["optimal_wor_host"] = lambda: get("optimal_wor").sample(p, q, drafts, gen, backend="host")
        fns["optimal_wor_torch"] = lambda: get("optimal_wor").sample(p, q, drafts, None if graphs else gen,
                                                                     backend="torch", top_k=DRAFT_TOP_K)
    kernels = [rule for rule in ("rrs", "sps") if fused and rule in rules]
    if kernels:  # the fused kernels beside the torch routes they replace, for the same uniforms
        u = torch.rand((B, 2), generator=gen, device=device, dtype=torch.float64)
        for rule in kernels:
            verifier = get(rule)
            for name, backend in (("uniforms", "torch"), ("fused", "triton")):
                fns[f"{rule}_{name}"] = lambda v=verifier, b=backend: v.sample(p, q, drafts, uniforms=u, backend=b)
    optimal = get("optimal")
    if fused and "optimal" in rules:  # the Triton route (the default on CUDA) beside the sorted torch route
        u = torch.rand((B, 2), generator=gen, device=device, dtype=torch.float64) if not kernels else u
        for name, backend in (("torch", "torch"), ("triton", "triton")):
            fns[f"optimal_{name}"] = lambda b=backend: optimal.sample(p, q, drafts, uniforms=u, backend=b)
    if compiled:
        fns["optimal_compiled"] = lambda: optimal.sample(p, q, drafts, None if graphs else gen, compile=True)
    if graphs:
        with validation(False):
            for name, fn in list(fns.items()):
                try:
                    fns[name] = _graphed(fn)
                except RuntimeError as exc:  # a host sync or a data-dependent shape inside the call
                    errors[f"{name}_graph_error"] = str(exc).splitlines()[0][:200]
                    del fns[name]
                    torch.cuda.synchronize()
    seconds = _times(fns, max(reps, 1), device)
    out = {"device": device, "threads": torch.get_num_threads(), "B": B, "V": V, "n": n,
           **{f"{name}_ms": 1e3 * s for name, s in seconds.items()}, **errors}
    if graphs:
        out["graphs"] = True
        del fns
        torch.cuda.empty_cache()
    out.update(draft_noise=noise, draft_acceptance=float(torch.minimum(p, q).sum(1).mean()))
    if compiled:
        u = torch.rand((B, 2), generator=gen, device=device, dtype=torch.float64)
        a, b = optimal.sample(p, q, drafts, uniforms=u, compile=True), optimal.sample(p, q, drafts, uniforms=u)
        out["optimal_compiled_mismatches"] = int((a[0] != b[0]).sum()) + int((a[1] != b[1]).sum())
    for rule in kernels:
        a, b = (get(rule).sample(p, q, drafts, uniforms=u, backend=x) for x in ("triton", "torch"))
        out[f"{rule}_fused_mismatches"] = int((a[0] != b[0]).sum()) + int((a[1] != b[1]).sum())
    if fused and "optimal" in rules:
        a, b = (optimal.sample(p, q, drafts, uniforms=u, backend=x) for x in ("triton", "torch"))
        out["optimal_triton_mismatches"] = int((a[0] != b[0]).sum()) + int((a[1] != b[1]).sum())
    if "optimal_wor" in rules and torch.device(device).type == "cuda":  # its plan's kernel against torch's steps
        u = torch.rand((B, 2), generator=gen, device=device, dtype=torch.float64)
        a, b = (get("optimal_wor").sample(p, q, drafts, uniforms=u, backend=x, top_k=DRAFT_TOP_K)
                for x in ("triton", "torch"))
        out["optimal_wor_triton_mismatches"] = int((a[0] != b[0]).sum()) + int((a[1] != b[1]).sum())
    return out


def fused_reads(B: int, V: int, n: int, noise: float | None) -> dict[str, float]:
    """The fused kernels' reads of p and q over the read floor on the point's rows with seeded uniforms
    (:func:`bytes_moved.fused_reads` from the torch routes' outcomes, which the kernels equal; any device):
    ``<rule>_fused_reads`` the mean over the rows, ``<rule>_fused_reads_max`` the slowest row's."""
    p, q, drafts = _inputs(B, V, n, "cpu", noise=noise)
    u = torch.rand((B, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = {}
    for rule, m in (("rrs", n), ("sps", 1)):
        index = get(rule).sample(p, q, drafts, uniforms=u, backend="torch")[1]
        out[f"{rule}_fused_reads"], out[f"{rule}_fused_reads_max"] = bytes_moved.fused_reads(index, m)
    return out


def device_rule_rates(B: int, V: int, n: int, noise: float | None) -> dict[str, int]:
    """The sort-free rule on torch tensors (otlp/optimal/device_buckets.py, its torch passes, on the CPU) on the
    point's rows with the call's uniforms: how many rows it certified at each round (``device_round<r>``), how many
    take the fallback (``device_fallback``) and how many of those spilled its buffer K (``device_spilled``)."""
    from otlp.optimal import device_buckets as DB
    from otlp.optimal.sampler import _normalised

    p, q, drafts = _inputs(B, V, n, "cpu", noise=noise)
    u = torch.rand((B, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    d = DB.decide(_normalised(p), _normalised(q), drafts, u, fallback=False)
    counts = torch.bincount(d.rounds, minlength=DB.ROUNDS + 2).tolist()
    return {**{f"device_round{r}": counts[r] for r in range(DB.ROUNDS + 1)}, "device_fallback": counts[-1],
            "device_spilled": int(d.spilled.sum())}


def host_rates(B: int, V: int, n: int, noise: float | None) -> dict[str, int]:
    """The CPU route's bucketed rows (otlp/optimal/buckets.py, ``otlp_bucket_rule`` with its bounded window) on the
    point's rows with the call's uniforms, as ``buckets.verify_chunks`` takes them (its ``stats``): how many it
    certified at the first attempt (``host_first``), on the retry with the uncertain buckets sorted (``host_retry``),
    on the finer buckets about 1 after their ratios crowded the first ones (``host_zoom``, ``buckets.zoom``), and how
    many it left to their full order (``host_full``)."""
    from otlp.optimal import buckets as BK

    if n < 2 or not BK.takes(B, V) or native.library() is None:
        return {}
    p, q, drafts = _inputs(B, V, n, "cpu", noise=noise)
    u = torch.rand((B, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ph, qh = p.numpy(), q.numpy()
    rows = (ph, qh, BK.inverse_sums(ph), BK.inverse_sums(qh))
    stats: dict = {}
    BK.verify_chunks(lambda r: tuple(x[r] for x in rows), B, V, drafts.numpy(), u.numpy(), n, stats=stats)
    return {f"host_{k}": v for k, v in stats.items()}


def publish(rows: list[dict], meta: dict) -> None:
    """The docs/COST.md tables from a run: one per (device, threads) setting that covers the whole grid with all five
    rules for each draft it ran (a ``draft`` column: loose, sigma 1, sigma 0.5), ``<device>_compiled`` for the points
    measured with ``--compile`` (eager and compiled side by side), and ``cuda_graphs`` / ``cuda_graphs_compiled``
    likewise for the calls replayed from CUDA graphs (``--graph``)."""
    grid = {(V, n, B) for V in SIZES for n in (2, 4, 8) for B in (1, 8, 64)}
    for device, threads in sorted({(r["device"], r["threads"]) for r in rows}):
        settings = {**meta, "device": device, "threads": threads}
        name = f"{device}_{threads}_threads" if device == "cpu" else device
        for graphs, suffix in ((False, ""), (True, "_graphs")):  # eager calls, and calls replayed from CUDA graphs
            mine = [r for r in rows if (r["device"], r["threads"]) == (device, threads)
                    and bool(r.get("graphs")) == graphs]
            drafts = sorted({_draft_name(r) for r in mine},  # loose first, then by decreasing noise
                            key=lambda d: (d != "loose", -float(d.split()[-1]) if d != "loose" else 0.0))
            if mine and all({(r["V"], r["n"], r["B"]) for r in mine if _draft_name(r) == d} == grid for d in drafts) \
                    and all(f"{x}_ms" in r or f"{x}_graph_error" in r for r in mine for x in RULES):
                cols = ["draft", "1 - TV", "V", "n", "B", "read floor", *RULES, "optimal / rrs"]
                mine.sort(key=lambda r: drafts.index(_draft_name(r)))  # (stable: the grid's order within a draft)
                cells = [[_draft_name(r), f"{r['draft_acceptance']:.2f}" if "draft_acceptance" in r else "-",
                          f"{r['V']:,}", str(r["n"]), str(r["B"]), _ms(r, "read_floor", 3), *(_ms(r, x) for x in RULES),
                          f"{r['optimal_ms'] / r['rrs_ms']:.2f}" if "optimal_ms" in r and "rrs_ms" in r else "-"]
                         for r in mine]
                _publish_table(name + suffix, cols, cells, settings)
            comp = [r for r in mine if "optimal_compiled_ms" in r and "rrs_ms" in r and "optimal_ms" in r]
            if comp:
                cols = ["V", "n", "B", "rrs", "optimal", "optimal, compile=True", "compiled / rrs", "eager / compiled",
                        "outputs unlike eager"]
                cells = [[f"{r['V']:,}", str(r["n"]), str(r["B"]), f"{r['rrs_ms']:.2f}", f"{r['optimal_ms']:.2f}",
                          f"{r['optimal_compiled_ms']:.2f}", f"{r['optimal_compiled_ms'] / r['rrs_ms']:.2f}",
                          f"{r['optimal_ms'] / r['optimal_compiled_ms']:.2f}",
                          f"{r['optimal_compiled_mismatches']} of {2 * r['B']}"] for r in comp]
                _publish_table(f"{device}{suffix}_compiled", cols, cells, settings)


def _ms(row: dict, name: str, digits: int = 2) -> str:
    """A row's time for ``name`` in ms, or "-" where it has none (a call that a CUDA graph could not capture)."""
    return f"{row[f'{name}_ms']:.{digits}f}" if f"{name}_ms" in row else "-"


def _publish_table(name: str, cols: list[str], cells: list[list[str]], settings: dict) -> None:
    readme_tables.publish("verifiers", name, cols, cells, settings)
    print(f"\n<!-- table: verifiers/{name} -->\n{readme_tables.markdown(cols, cells)}")


def _is_sigma(text: str) -> bool:
    try:
        return float(text) >= 0.0
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules", nargs="*", default=list(RULES), choices=RULES + EXTRA_RULES)
    ap.add_argument("--quick", action="store_true", help="V in {2k, 32k}, B in {1, 64}")
    ap.add_argument("--V", type=int, nargs="+", help="vocabulary sizes instead of the grid's")
    ap.add_argument("--B", type=int, nargs="+", help="batch sizes instead of the grid's")
    ap.add_argument("--n", type=int, nargs="+", help="drafts per row instead of the grid's")
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    ap.add_argument("--threads", choices=["1", "default", "both"], default="both",
                    help="CPU threads: 1, torch's default, or both (default)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--drafts", nargs="+", default=list(DRAFTS), metavar="DRAFT",
                    help="the drafts, each point once per draft: 'loose' (q = softmax(3 z' + 0.5 log p), 1 - TV about "
                         "0.1) or a noise SIGMA, the close draft q = softmax(log p + SIGMA z') (1 - TV about 0.64 at "
                         "1, 0.81 at 0.5); default: loose 1 0.5")
    ap.add_argument("--compile", action="store_true",
                    help="on CUDA, also the optimal rule with compile=True (torch.compile; each new shape compiles)")
    ap.add_argument("--graph", action="store_true",
                    help="on CUDA, time each call captured in a CUDA graph (replays; value checks off) instead of "
                         "eagerly: the CUDA-graph table of docs/COST.md")
    ap.add_argument("--no-fused", action="store_true",
                    help="on CUDA, leave out the fused Triton kernels of rrs and sps (otlp/verifiers/triton_kernels.py)"
                         " and the torch routes they replace, which run by default beside the rules where Triton is"
                         " installed")
    ap.add_argument("--bytes", action="store_true",
                    help="also each torch route's bytes moved / read floor on meta tensors (benchmarks/bytes_moved.py;"
                         " optimal: its device route; sortfree: the cell rule, exact, and its certificate alone)")
    ap.add_argument("--rates", action="store_true",
                    help="also the device bucket rule's (otlp/optimal/device_buckets.py) rates per round, fallback "
                         "and spill on each point's rows, and the CPU route's: certified at the first attempt, on the "
                         "retry, and left to the full sort")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "verifiers.json"))
    ap.add_argument("--from-json", metavar="PATH", help="publish the docs/COST.md tables of a finished run and exit")
    ap.add_argument("--top-k", type=int, metavar="K",
                    help="filter the target to its K likeliest tokens (p = 0 elsewhere), as engines pass it; such a "
                         "run is printed and saved, never published")
    ap.add_argument("--draft-top-k", type=int, metavar="K",
                    help="filter the draft to its K likeliest tokens and draw it without replacement (what "
                         "optimal_wor needs); such a run is printed and saved, never published")
    args = ap.parse_args(argv)
    for flag, k in (("--top-k", args.top_k), ("--draft-top-k", args.draft_top_k)):
        if k is not None and k < 1:
            ap.error(f"{flag}: {k} is not a positive number of tokens")
    if "optimal_wor" in args.rules and args.draft_top_k is None:
        ap.error("--rules optimal_wor needs --draft-top-k K (its rule enumerates the draft's sets)")
    global TARGET_TOP_K, DRAFT_TOP_K
    TARGET_TOP_K, DRAFT_TOP_K = args.top_k, args.draft_top_k
    for draft in args.drafts:
        if draft != "loose" and not _is_sigma(draft):
            ap.error(f"--drafts: {draft!r} is neither 'loose' nor a noise sigma (a number >= 0)")
    if args.device == "cuda" and not torch.cuda.is_available() and not args.from_json:
        ap.error("--device cuda needs a CUDA device, and torch sees none (torch.cuda.is_available() is False)")
    if (args.graph or args.compile) and args.device == "cpu":
        ap.error(f"{'--graph' if args.graph else '--compile'} applies to CUDA calls only; use --device cuda or all")
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as fh:
            done = json.load(fh)
        publish(done["rows"], done["meta"])
        return
    if args.compile:  # every grid shape may compile its own graph: let torch keep them all
        for limit in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 256)
    sizes = tuple(args.V or (SIZES[:2] if args.quick else SIZES))
    batches = tuple(args.B or ((1, 64) if args.quick else (1, 8, 64)))
    ns = tuple(args.n or (2, 4, 8))
    if args.draft_top_k is not None and args.draft_top_k < max(ns):
        ap.error(f"--draft-top-k {args.draft_top_k}: fewer tokens than n = {max(ns)} draws without replacement")
    default_threads = torch.get_num_threads()
    settings = []
    if args.device in ("cpu", "all"):
        settings += [("cpu", t) for t in ([1] if args.threads == "1" else [default_threads] if args.threads == "default"
                                           else sorted({1, default_threads}))]
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        settings.append(("cuda", default_threads))
    rows = []
    moved: dict[tuple[int, int, int], dict[str, float]] = {}
    print("C kernels (otlp/backend/native: the host's value check, the optimal rule's CPU route):",
          native.reason() or "used")
    for device, threads in settings:
        torch.set_num_threads(threads)
        print(f"\n{device}, {threads} thread(s): ms per verification step (median of {args.reps}); ratio = "
              "optimal / rrs; floor = p.sum() + q.sum()")
        head = f"{'V':>7} {'n':>2} {'B':>3} {'floor':>8} " + " ".join(f"{r:>9}" for r in args.rules)
        head += f" {'ratio':>6}" if {"optimal", "rrs"} <= set(args.rules) else ""
        print(head)
        print("-" * len(head))
        for noise, V, n, B in ((_noise(d), V, n, B) for d in args.drafts for V in sizes for n in ns for B in batches):
            compiled = args.compile and device == "cuda"
            fused = device == "cuda" and not args.no_fused and triton_kernels.available()
            r = bench_point(args.rules, B, V, n, device, args.reps, compiled, noise, args.graph and device == "cuda",
                            fused)
            rows.append(r)
            line = f"{V:>7} {n:>2} {B:>3} {_ms(r, 'read_floor', 3):>8} "
            line += " ".join(f"{_ms(r, x):>9}" for x in args.rules)
            if "optimal_ms" in r and "rrs_ms" in r:
                line += f" {r['optimal_ms'] / r['rrs_ms']:>6.2f}"
            if "optimal_wor_ms" in r and "rrs_wor_ms" in r:
                line += f"  optimal_wor / rrs_wor {r['optimal_wor_ms'] / r['rrs_wor_ms']:.2f}"
            if compiled:
                line += (f"  compiled {r['optimal_compiled_ms']:.2f} ms"
                         f" ({r['optimal_compiled_mismatches']} outputs differ from eager)")
            line += f"  draft {_draft_name(r)} (1 - TV {r['draft_acceptance']:.2f})"
            line += "".join(f"  {x} fused {_ms(r, x + '_fused', 3)} ms (torch, same uniforms: "
                            f"{_ms(r, x + '_uniforms', 3)} ms; {r[f'{x}_fused_mismatches']} outputs differ)"
                            for x in ("rrs", "sps") if f"{x}_fused_mismatches" in r)
            if "optimal_triton_mismatches" in r:
                line += (f"  optimal triton {_ms(r, 'optimal_triton', 3)} ms (sorted torch route, same uniforms: "
                         f"{_ms(r, 'optimal_torch', 3)} ms; {r['optimal_triton_mismatches']} outputs differ)")
            if "optimal_wor_triton_mismatches" in r:
                line += (f"  optimal_wor torch steps {_ms(r, 'optimal_wor_torch', 3)} ms, host "
                         f"{_ms(r, 'optimal_wor_host', 3)} ms ({r['optimal_wor_triton_mismatches']} outputs of the "
                         "kernel's and torch's steps differ)")
            line += "".join(f"  {k}: {v}" for k, v in r.items() if k.endswith("_graph_error"))
            if args.bytes:
                key = (B, V, n)
                if key not in moved:  # the same for every device and draft
                    moved[key] = bytes_moved.measure(B, V, n)
                r.update({f"{name}_bytes_over_floor": x for name, x in moved[key].items()})
                line += "  bytes/floor: " + ", ".join(f"{name} {x:.0f}" for name, x in moved[key].items())
                r.update(fused_reads(B, V, n, noise))
                line += "".join(f", {x}_fused {r[f'{x}_fused_reads']:.2f} (slowest row {r[f'{x}_fused_reads_max']:.0f})"
                                for x in ("rrs", "sps"))
            if args.rates:
                r.update(device_rule_rates(B, V, n, noise))
                line += "  device rule: " + ", ".join(f"{k[7:]} {v}" for k, v in r.items() if k.startswith("device_"))
                r.update(host_rates(B, V, n, noise))
                line += "  host: " + ", ".join(f"{k[5:]} {v}" for k, v in r.items() if k.startswith("host_"))
            print(line, flush=True)
    torch.set_num_threads(default_threads)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    meta = {"torch": torch.__version__, "default_threads": default_threads, "python": sys.version.split()[0],
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "native_kernels": native.reason() or "used"}  # otlp/backend/native's C loops (value check, optimal rule)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    print(f"wrote {args.out}")
    if args.top_k is None and args.draft_top_k is None and not set(args.rules) & set(EXTRA_RULES):
        publish(rows, meta)


if __name__ == "__main__":
    main()
