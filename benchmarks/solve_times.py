"""Exact OT solve times on the GR Table 1 grid: otlp.optimal vs HiGHS (relaxed LP) vs OR-Tools max-flow vs the
outer/inner max-flow networks (GR Thm 5.1).

Time per token = build everything + one slice pi(. | omega) for a drafted omega ~ IID(q, n), at the GR Table 1 grid
(k, n) in {(10,2), (10,3), (10,4), (10,5), (100,2), (100,3), (1000,2)} (k = V, the vocabulary of the pair).

Instance sources (``--source heavy|decode|both``, default both; one table per source):
* ``heavy``: a documented heavy-tailed generator (design note §6): logits z = 2 * t_3 (Student t, 3 dof) over
  V = k tokens, p = softmax(z), q = softmax(z + N(0, 1)); seeded by (--seed, k, n).
* ``decode``: the decode loop's own models, otlp.decode.ngram.embedded_models() (Kneser-Ney bigram draft q and
  4-gram target p over the shipped 2000-word vocabulary; trained offline on the shipped corpus, nothing downloaded).
  Contexts are real ones: positions t drawn uniformly (seeded by --seed) in the shipped corpus' token stream, the
  context being the tokens of t's document before t, left-padded with <s> as the decode loop pads a prompt
  (so it never spans two documents); the first ``--pairs`` distinct target contexts are used at every grid point.
  PROJECTION onto k tokens: p and q are the full 2000-token next-token laws at that context; for grid size k the
  pair is restricted to the k tokens of largest target probability p (ties by token id) and both are renormalised
  on that set: p_k = p[T] / p(T), q_k = q[T] / q(T). A context where q(T) = 0 is skipped (it cannot happen with
  these interpolated KN models, whose laws are positive everywhere). So (p_k, q_k) is the pair the decode loop
  would verify if both models were truncated to the target's top k, not the loop's V = 2000 pair itself.

Methods
* ``optimal``: otlp.optimal.OptimalTransport: for V <= 128 every group a water-filling class chain computed in
  plain Python floats (otlp.optimal.scalar), above that the same chains on numpy arrays (otlp.optimal.host: the
  reference otlp.optimal.chains with its C kernels).
* ``highs``: the relaxed OTLP (GR eq. (2)) with scipy's HiGHS (``linprog(method="highs")``), model building
  included, then the slice by the residual completion (GR eq. (3)).
* ``maxflow``: OR-Tools SimpleMaxFlow on s -> i -> omega -> t (GR §5.2), int64 capacities scaled by 2^40.
* ``outer_inner``: otlp.lp.formulations.OuterInnerNetworks (GR Thm 5.1 / eq. (6)): H* by the sorted prefix, the outer
  and inner networks built and each solved with the project's ``ortools`` backend, then the slice of omega by the
  residual completion (GR eq. (8)) of that one column (the class's ``slice`` forms the dense [V, M] plan, which at
  (1000, 2) would be 8 GB, so only the column is formed here: same formula).
  (OR-Tools runs in this process next to scipy's bundled HiGHS; only the ``highspy`` package conflicts with it,
  see tests/lp/solvers/test_coexistence.py, and it is not imported here.)
Slow baselines get a per-call limit: after one call over ``--limit`` seconds (or a model above ``--max-vars``
variables) the method is not run again at that grid point and is reported as "> limit"; nor is it run, within the
same source, at a grid point whose model (~k^n * n variables) is at least as big as one where it went over the
limit (HiGHS's time limit does not cover building the model, so a (1000, 2) call takes ~7 s whatever the limit).
Baselines run on the first ``--baseline-pairs`` pairs of each grid point.

Timing: each (method, pair) is called ``--repeat`` times (default 3) and its fastest call is kept (the timeit
convention: on a shared 2-core machine the slower calls measure other processes, not the code). otlp.optimal makes
``--repeat`` passes over the grid point's pairs (a slow spell of the machine then hits one pass, not every call of
a pair); a baseline repeats each call at once, and not past 0.25 s. Every method gets its fastest of
``--repeat``, so the ratios compare like with like.

Columns: median / p95 / max ms per token, success rate (optimal: every group's rows at machine precision;
baselines: finished within the limit), max law error (optimal, L1 of the enumerated output law vs p where
V^n <= 2e5, else the certified bound sum ||R - t||_1 over blocks, marked *; the law is summed from the timed
``slice`` itself where V^n <= 1e4, else from ``slices``, the vectorised evaluation of the same rule), the
baselines' median ms, speed-up of the median over HiGHS. The JSON also has, per baseline,
``max_value_error`` = max |baseline value - optimal alpha*| over the pairs it solved (an agreement check; max-flow's
2^-40 rounding shows there), and for outer/inner the largest |sum of its slice - 1| (a drafted tuple of mass below
the flow's 1e-9 tolerance may be left unsaturated: it shows).
Also the batched path: time per pair of solve_batch vs a loop at B = 64, V = 100, n = 2 (heavy source).

Usage: python benchmarks/solve_times.py [--pairs 40] [--quick] [--limit 2.0] [--source both] [--repeat 3]
Writes benchmarks/results/solve_times.json ({"config", "sources": {name: {"grid": [...]}}, "batch"}).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

GRID = [(10, 2), (10, 3), (10, 4), (10, 5), (100, 2), (100, 3), (1000, 2)]
SOURCES = ("heavy", "decode")
BASELINES = ("highs", "maxflow", "outer_inner")


def heavy_tailed_pair(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Design note §6: z = 2 t_3 [V], p = softmax(z), q = softmax(z + N(0, 1))."""
    z = 2.0 * rng.standard_t(3, V)
    y = z + rng.normal(size=V)
    p = np.exp(z - z.max())
    q = np.exp(y - y.max())
    return p / p.sum(), q / q.sum()


# -- the decode source -------------------------------------------------------------------------------------------
def decode_laws(seed: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` distinct real contexts of the embedded target model and the full next-token laws there.

    Returns ``(contexts int [C, c_target], P float [C, V], Q float [C, V])`` with C <= count, V = 2000: P from the
    embedded 4-gram target, Q from the bigram draft (its context = the last ``c_draft`` tokens of the same one).
    """
    from otlp.decode.corpus import load_corpus
    from otlp.decode.ngram import embedded_models

    models = embedded_models()
    target, draft = models.target, models.draft
    stream = models.tokenizer.encode_corpus(load_corpus())  # [T], each document preceded by <s>
    bos = models.tokenizer.bos_id
    c = target.context_size
    starts = np.flatnonzero(stream == bos)  # [D], document starts
    rng = np.random.default_rng([seed, 7919])
    t = rng.integers(1, stream.size, size=20 * count + 200)  # [K] next-token positions (context = stream[.. t])
    t = t[t > starts[0]]
    doc = starts[np.searchsorted(starts, t - 1, side="right") - 1]  # [K], start of t's document
    idx = t[:, None] + np.arange(-c, 0)[None, :]  # [K, c]
    ctx = np.where(idx >= doc[:, None], stream[np.clip(idx, 0, None)], bos)  # [K, c], left-padded with <s>
    _, first = np.unique(ctx, axis=0, return_index=True)
    ctx = ctx[np.sort(first)][:count]  # [C, c], distinct, in draw order
    P = target.probabilities(ctx)  # [C, V]
    Q = draft.probabilities(ctx[:, c - draft.context_size :])  # [C, V]
    return ctx, P, Q


def project_top_k(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The pair restricted to the k tokens of largest p (ties by id), both renormalised; None if q(T) = 0."""
    tokens = np.argsort(-p, kind="stable")[:k]  # [k]
    pk, qk = p[tokens], q[tokens]
    if qk.sum() <= 0 or pk.sum() <= 0:
        return None
    return pk / pk.sum(), qk / qk.sum(), tokens


def decode_pairs(laws: tuple[np.ndarray, np.ndarray, np.ndarray], k: int, count: int
                 ) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[int]]:
    """Up to ``count`` projected pairs at grid size k, and the row of ``laws`` each came from."""
    _, P, Q = laws
    pairs, rows = [], []
    for r in range(P.shape[0]):
        if len(pairs) == count or k > P.shape[1]:
            break
        proj = project_top_k(P[r], Q[r], k)
        if proj is not None:
            pairs.append(proj[:2])
            rows.append(r)
    return pairs, rows


# -- the methods: each returns (seconds, ok, value) or similar ---------------------------------------------------
def best_of(method, call_args: tuple, repeat: int, cap: float = 0.25) -> tuple:
    """The result of the fastest of ``repeat`` calls ``method(*call_args)`` (whose first element is its seconds);
    a call slower than ``cap`` seconds is not repeated."""
    best = method(*call_args)
    for _ in range(repeat - 1):
        if best[0] > cap:
            break
        again = method(*call_args)
        if again[0] < best[0]:
            best = again
    return best


def run_optimal(p, q, n, omega):
    from otlp.optimal import OptimalTransport

    t0 = time.perf_counter()
    ot = OptimalTransport.from_arrays(p, q, n)
    ot.slice(omega)
    return time.perf_counter() - t0, ot


def run_highs(p, q, n, omega, limit):
    import scipy.optimize
    import scipy.sparse

    import otlp

    t0 = time.perf_counter()
    omegas, probs = otlp.IID(q, n).support()
    M = omegas.shape[0]
    dup = np.tril(omegas[:, :, None] == omegas[:, None, :], -1).any(2)
    m_idx, k_idx = np.nonzero(~dup)
    nvar = m_idx.size
    rows = np.concatenate([omegas[m_idx, k_idx], p.size + m_idx])
    cols = np.concatenate([np.arange(nvar), np.arange(nvar)])
    A = scipy.sparse.csr_matrix((np.ones(2 * nvar), (rows, cols)), shape=(p.size + M, nvar))
    res = scipy.optimize.linprog(-np.ones(nvar), A_ub=A, b_ub=np.concatenate([p, probs]), bounds=(0, None),
                                 method="highs", options={"time_limit": float(limit)})
    ok = res.status == 0
    if ok:  # the slice of omega (GR eq. (3)), to count the same work as the exact route
        code = int(omega @ (p.size ** np.arange(n - 1, -1, -1)))
        codes = omegas @ (p.size ** np.arange(n - 1, -1, -1))
        _ = res.x[np.flatnonzero(codes[m_idx] == code)]
    return time.perf_counter() - t0, ok, (-res.fun if ok else np.nan)


def run_maxflow(p, q, n, omega):
    from ortools.graph.python import max_flow

    import otlp

    t0 = time.perf_counter()
    V = p.size
    omegas, probs = otlp.IID(q, n).support()
    M = omegas.shape[0]
    dup = np.tril(omegas[:, :, None] == omegas[:, None, :], -1).any(2)
    m_idx, k_idx = np.nonzero(~dup)
    scale = float(2**40)
    source, sink = V + M, V + M + 1
    tails = np.concatenate([np.full(V, source), omegas[m_idx, k_idx], V + np.arange(M)])
    heads = np.concatenate([np.arange(V), V + m_idx, np.full(M, sink)])
    caps = np.concatenate([np.floor(p * scale), np.full(m_idx.size, 2**62), np.floor(probs * scale)]).astype(np.int64)
    mf = max_flow.SimpleMaxFlow()
    mf.add_arcs_with_capacity(tails.astype(np.int64), heads.astype(np.int64), caps)
    status = mf.solve(source, sink)
    value = mf.optimal_flow() / scale
    return time.perf_counter() - t0, status == mf.OPTIMAL, value


def run_outer_inner(p, q, n, omega):
    import otlp
    from otlp.core.errors import ModelTooLargeError
    from otlp.lp.formulations import OuterInnerNetworks

    t0 = time.perf_counter()
    try:
        model = OuterInnerNetworks(p, otlp.IID(q, n))  # H* by min_psi (sorted prefix for IID)
        sol = model.solve(backend="ortools")
    except ModelTooLargeError as err:
        return time.perf_counter() - t0, False, np.nan, {"reason": str(err)}
    ok = sol.status == "optimal"
    mass_error = np.nan
    if ok:
        mass_error = abs(float(model.slice(sol, np.asarray(omega)).sum()) - 1.0)  # one column (GR eq. (3))
    return time.perf_counter() - t0, ok, (float(sol.value) if ok else np.nan), {"slice_mass_error": mass_error}


def law_error(ot, p, q, n) -> tuple[float, bool]:
    """L1 error of the enumerated output law (exact route), or the certified row-sum bound when V^n is big."""
    import otlp

    if p.size**n <= 10_000:  # through the timed single slice (per tuple)
        omegas, probs = otlp.IID(q, n).enumerate()
        law = probs @ np.stack([ot.slice(w) for w in omegas])
        return float(np.abs(law - p).sum()), True
    if p.size**n <= 200_000:
        omegas, probs = otlp.IID(q, n).enumerate()
        law = np.zeros(p.size)
        for start in range(0, omegas.shape[0], 20_000):
            law += probs[start : start + 20_000] @ ot.slices(omegas[start : start + 20_000])
        return float(np.abs(law - p).sum()), True
    return ot.row_error, False


def stats(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"median": float(np.median(a)), "p95": float(np.percentile(a, 95)), "max": float(a.max())}


# -- one grid point ----------------------------------------------------------------------------------------------
def grid_point(pairs: list, omegas: list, V: int, n: int, args: argparse.Namespace, have_ortools: bool,
               over: dict[str, tuple[int, int, int]]) -> dict:
    """One row of the table. ``over[name] = (nvars, k, n)``: the smallest model of that baseline found over the
    limit so far in this source; a model at least as big is not run (reported "> limit", with that reason)."""
    from otlp.optimal import OptimalTransport
    for p, q in pairs[:5]:  # warm the interpreter's first calls; not timed
        OptimalTransport.from_arrays(p, q, n).slice(np.zeros(n, dtype=np.int64))
    ok, errs, alphas, enumerated = 0, [], [], True
    seconds = np.full((args.repeat, len(pairs)), np.inf)  # [pass, pair]
    for r in range(args.repeat):  # passes over all pairs, so a slow spell of the machine hits one pass, not a pair
        for j, ((p, q), omega) in enumerate(zip(pairs, omegas, strict=True)):
            seconds[r, j], ot = run_optimal(p, q, n, omega)
            if r == 0:
                ok += ot.success
                alphas.append(float(ot.alpha))
                err, enum = law_error(ot, p, q, n)
                errs.append(err)
                enumerated &= enum
    ms = seconds.min(0) * 1e3  # [pair]
    row = {"k": V, "n": n, "pairs": len(pairs),
           "optimal": stats(list(ms)) | {"success": ok / len(pairs), "max_law_error": max(errs),
                                         "law_error_enumerated": enumerated}}
    nvars = V**n * n
    for name in BASELINES:
        if name != "highs" and not have_ortools:
            row[name] = {"status": "not installed"}
            continue
        if nvars > args.max_vars:
            row[name] = {"status": "> limit", "reason": f"model of ~{nvars:.2g} variables"}
            continue
        if name in over and nvars >= over[name][0]:
            row[name] = {"status": "> limit", "reason": f"model of ~{nvars:.2g} variables, not smaller than "
                                                          f"the one over the limit at {over[name][1:]}"}
            continue
        times, solved, slow, value_err, extra = [], 0, False, [], {}
        for j, ((p, q), omega) in enumerate(list(zip(pairs, omegas, strict=True))[: args.baseline_pairs]):
            if name == "highs":
                dt, good, value = best_of(run_highs, (p, q, n, omega, args.limit), args.repeat)
            elif name == "maxflow":
                dt, good, value = best_of(run_maxflow, (p, q, n, omega), args.repeat)
            else:
                dt, good, value, info = best_of(run_outer_inner, (p, q, n, omega), args.repeat)
                if "reason" in info:
                    extra["reason"] = info["reason"]
                elif good:
                    extra["max_slice_mass_error"] = max(extra.get("max_slice_mass_error", 0.0),
                                                        info["slice_mass_error"])
            times.append(dt * 1e3)
            solved += bool(good)
            if good:
                value_err.append(abs(value - alphas[j]))
            if dt > args.limit or not good:
                slow = True
                if name not in over or nvars < over[name][0]:
                    over[name] = (nvars, V, n)
                break
        row[name] = stats(times) | {"solved": solved, "tried": len(times), "status": "> limit" if slow else "ok",
                                    "max_value_error": max(value_err) if value_err else None} | extra
    return row


def print_row(row: dict, limit: float) -> None:
    def cell(r: dict) -> str:
        if r.get("status") == "ok":
            return f"{r['median']:.1f}"
        return f"> {limit:g} s" if r.get("status") == "> limit" else r.get("status", "-")

    o, h = row["optimal"], row["highs"]
    if h.get("status") == "ok":
        speed = f"{h['median'] / o['median']:.0f}x"
    else:
        speed = f"> {limit * 1e3 / o['median']:.0f}x"
    star = "*" if not o["law_error_enumerated"] else " "
    print(f"{str((row['k'], row['n'])):>9} | {o['median']:7.2f} / {o['p95']:6.2f} / {o['max']:6.2f} | "
          f"{o['success']:4.0%} | {o['max_law_error']:8.1e}{star} | {cell(h):>8} | {cell(row['maxflow']):>8} | "
          f"{cell(row['outer_inner']):>11} | {speed}")


def run_source(source: str, args: argparse.Namespace, have_ortools: bool) -> dict:
    out: dict = {"grid": []}
    laws = None
    over: dict[str, tuple[int, int, int]] = {}
    if source == "decode":
        t0 = time.perf_counter()
        laws = decode_laws(args.seed, args.pairs)
        out["contexts"] = laws[0].tolist()
        out["setup_seconds"] = time.perf_counter() - t0
    what = {"heavy": "heavy-tailed generator (z = 2 t_3, q = softmax(z + N(0,1)))",
            "decode": "embedded KN 4-gram target / bigram draft at corpus contexts, top-k of p, renormalised"}[source]
    print(f"\nsource: {source} -- {what}")
    header = (f"{'(k,n)':>9} | {'optimal med/p95/max ms':>24} | succ | {'law err':>9} | {'HiGHS ms':>8} | "
              f"{'flow ms':>8} | {'out/inn ms':>11} | speed-up vs HiGHS")
    print(header)
    print("-" * len(header))
    for V, n in GRID:
        if source == "heavy":
            rng = np.random.default_rng([args.seed, V, n])
            pairs = [heavy_tailed_pair(rng, V) for _ in range(args.pairs)]
            rows = None
        else:
            rng = np.random.default_rng([args.seed, V, n, 1])
            pairs, rows = decode_pairs(laws, V, args.pairs)
            if not pairs:
                print(f"{str((V, n)):>9} | no decode pairs (k > V or no draft mass on the top k)")
                out["grid"].append({"k": V, "n": n, "pairs": 0})
                continue
        omegas = [rng.choice(V, size=n, p=q) for _, q in pairs]
        row = grid_point(pairs, omegas, V, n, args, have_ortools, over)
        if rows is not None:
            row["context_rows"] = rows
        out["grid"].append(row)
        print_row(row, args.limit)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=40, help="(p, q) pairs per grid point and source")
    ap.add_argument("--quick", action="store_true", help="10 pairs, 0.5 s baseline limit, 3 baseline pairs")
    ap.add_argument("--limit", type=float, default=2.0, help="per-call limit for the baselines, seconds")
    ap.add_argument("--max-vars", type=float, default=2.5e6, help="skip LP / flow models above this many variables")
    ap.add_argument("--baseline-pairs", type=int, default=5, help="pairs per grid point for the slow baselines")
    ap.add_argument("--source", choices=("heavy", "decode", "both"), default="both", help="instance source(s)")
    ap.add_argument("--repeat", type=int, default=3, help="calls per (method, pair); the fastest is kept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "solve_times.json"))
    ap.add_argument("--from-json", metavar="PATH", help="publish the docs/OPTIMAL.md table of a finished run and exit")
    args = ap.parse_args()
    if args.from_json:
        publish(json.loads(Path(args.from_json).read_text()))
        return
    if args.quick:
        args.pairs, args.limit, args.baseline_pairs = 10, 0.5, 3
    try:
        import ortools.graph.python.max_flow  # noqa: F401

        have_ortools = True
    except ImportError:
        have_ortools = False

    from otlp.optimal import OptimalTransport, solve_batch

    results = {"config": vars(args) | {"threads": os.environ.get("OPENBLAS_NUM_THREADS")}, "sources": {}}
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    print(f"ms per token = build + one slice, fastest of {args.repeat} calls per pair; baselines on the first "
          "--baseline-pairs pairs, '> limit' past "
          f"{args.limit:g} s per call (or above --max-vars); * = certified bound, not enumerated")
    for source in SOURCES if args.source == "both" else (args.source,):
        results["sources"][source] = run_source(source, args, have_ortools)

    # batched path: B = 64, V = 100, n = 2
    rng = np.random.default_rng([args.seed, 64])
    pairs = [heavy_tailed_pair(rng, 100) for _ in range(64)]
    P = np.stack([a for a, _ in pairs])
    Q = np.stack([b for _, b in pairs])
    om = np.stack([rng.choice(100, size=2, p=q) for q in Q])
    loop, batch = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        for b in range(64):
            OptimalTransport.from_arrays(P[b], Q[b], 2).slice(om[b])
        loop.append((time.perf_counter() - t0) / 64 * 1e3)
        t0 = time.perf_counter()
        solve_batch(P, Q, 2).slices(om)
        batch.append((time.perf_counter() - t0) / 64 * 1e3)
    results["batch"] = {"B": 64, "V": 100, "n": 2, "loop_ms_per_pair": min(loop), "batch_ms_per_pair": min(batch)}
    print(f"\nbatched path (B=64, V=100, n=2, heavy): loop {min(loop):.3f} ms/pair, solve_batch {min(batch):.3f} "
          f"ms/pair, ratio {min(loop) / min(batch):.1f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"JSON: {out}")
    if args.source == "both" and not args.quick:
        publish(results)


def publish(results: dict) -> None:
    """The table of docs/OPTIMAL.md and README.md (heavy and decode medians / p95 side by side, the heavy source's
    baselines in ms) to ``benchmarks/published/solve_times.json`` (:mod:`readme_tables`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import readme_tables

    limit_ms = results["config"]["limit"] * 1e3

    def cell(r: dict) -> str:
        return f"{r['median']:.1f}" if r.get("status") == "ok" else f"> {limit_ms:g}"

    heavy, decode = (results["sources"][s]["grid"] for s in ("heavy", "decode"))
    columns = ["(V, n)", "heavy: median / p95", "decode: median / p95", "HiGHS relaxed LP",
               "OR-Tools max-flow", "outer/inner flow", "speed-up vs HiGHS"]
    rows = []
    for h, d in zip(heavy, decode, strict=True):
        o, hi = h["optimal"], h["highs"]
        speed = f"{hi['median'] / o['median']:.0f}x" if hi.get("status") == "ok" else f"> {limit_ms / o['median']:.0f}x"
        rows.append([f"({h['k']}, {h['n']})", f"{o['median']:.2f} / {o['p95']:.2f}",
                     f"{d['optimal']['median']:.2f} / {d['optimal']['p95']:.2f}", cell(hi), cell(h["maxflow"]),
                     cell(h["outer_inner"]), speed])
    readme_tables.publish("solve_times", "grid", columns, rows, {"config": results["config"],
                                                                  "batch": results.get("batch")})
    print("\n<!-- table: solve_times/grid -->\n" + readme_tables.markdown(columns, rows))


if __name__ == "__main__":
    main()
