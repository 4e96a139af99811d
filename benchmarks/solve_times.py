"""Exact OT solve times on the GR Table 1 grid: otlp.optimal vs HiGHS (relaxed LP) vs OR-Tools max-flow.

Time per token = build everything + one slice pi(. | omega) for a drafted omega ~ IID(q, n).
Instances (documented heavy-tailed generator, as in the design note §6): logits z = 2 * t_3 (Student t, 3 dof)
over V = k tokens, p = softmax(z), q = softmax(z + N(0, 1)).

Methods
* ``optimal``: otlp.optimal.OptimalTransport (exact block route).
* ``highs``: the relaxed OTLP (GR eq. (2)) with scipy's HiGHS (``linprog(method="highs")``), model building
  included, then the slice by the residual completion (GR eq. (3)).
* ``maxflow``: OR-Tools SimpleMaxFlow on s -> i -> omega -> t (GR §5.2), int64 capacities scaled by 2^40.
Slow baselines get a per-call limit: after one call over ``--limit`` seconds (or a model above ``--max-vars``
variables) the method is not run again at that grid point and is reported as "> limit".

Columns: median / p95 / max ms per token, success rate (optimal: every block at machine precision; baselines:
finished within the limit), max law error (optimal, L1 of the enumerated output law vs p where V^n <= 2e5, else
the certified bound sum ||R - t||_1 over blocks, marked *), speed-up of the median over HiGHS.
Also the batched path: time per pair of solve_batch vs a loop at B = 64, V = 100, n = 2.

Usage: python benchmarks/solve_times.py [--pairs 40] [--quick] [--limit 2.0]
Writes benchmarks/results/solve_times.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

GRID = [(10, 2), (10, 3), (10, 4), (10, 5), (100, 2), (100, 3), (1000, 2)]


def heavy_tailed_pair(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    z = 2.0 * rng.standard_t(3, V)
    y = z + rng.normal(size=V)
    p = np.exp(z - z.max())
    q = np.exp(y - y.max())
    return p / p.sum(), q / q.sum()


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


def law_error(ot, p, q, n) -> tuple[float, bool]:
    """L1 error of the enumerated output law (exact route), or the certified row-sum bound when V^n is big."""
    import otlp

    if p.size**n <= 200_000:
        omegas, probs = otlp.IID(q, n).enumerate()
        law = np.zeros(p.size)
        for start in range(0, omegas.shape[0], 20_000):
            law += probs[start : start + 20_000] @ ot.slices(omegas[start : start + 20_000])
        return float(np.abs(law - p).sum()), True
    return float(ot._inst.gradient_norm.sum()), False


def stats(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"median": float(np.median(a)), "p95": float(np.percentile(a, 95)), "max": float(a.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="10 pairs, 0.5 s baseline limit")
    ap.add_argument("--limit", type=float, default=2.0, help="per-call limit for the baselines, seconds")
    ap.add_argument("--max-vars", type=float, default=2.5e6, help="skip LP / flow models above this many variables")
    ap.add_argument("--baseline-pairs", type=int, default=5, help="pairs per grid point for the slow baselines")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "solve_times.json"))
    args = ap.parse_args()
    if args.quick:
        args.pairs, args.limit, args.baseline_pairs = 10, 0.5, 3
    try:
        import ortools.graph.python.max_flow  # noqa: F401

        have_ortools = True
    except ImportError:
        have_ortools = False

    from otlp.optimal import OptimalTransport, solve_batch

    results = {"config": vars(args) | {"threads": os.environ.get("OPENBLAS_NUM_THREADS")}, "grid": []}
    header = (f"{'(k,n)':>9} | {'optimal med/p95/max ms':>24} | succ | {'law err':>9} | {'HiGHS med ms':>12} | "
              f"{'max-flow med ms':>15} | speed-up vs HiGHS")
    print(header)
    print("-" * len(header))
    for V, n in GRID:
        rng = np.random.default_rng([args.seed, V, n])
        pairs = [heavy_tailed_pair(rng, V) for _ in range(args.pairs)]
        omegas = [rng.choice(V, size=n, p=q) for _, q in pairs]
        OptimalTransport.from_arrays(*pairs[0], n)  # warm caches (combination tables)
        ms, ok, errs, enumerated = [], 0, [], True
        for (p, q), omega in zip(pairs, omegas, strict=True):
            dt, ot = run_optimal(p, q, n, omega)
            ms.append(dt * 1e3)
            ok += ot.success
            err, enum = law_error(ot, p, q, n)
            errs.append(err)
            enumerated &= enum
        row = {"k": V, "n": n, "optimal": stats(ms) | {"success": ok / len(pairs), "max_law_error": max(errs),
                                                         "law_error_enumerated": enumerated}}
        nvars = V**n * n
        for name, enabled in (("highs", True), ("maxflow", have_ortools)):
            if not enabled:
                row[name] = {"status": "not installed"}
                continue
            if nvars > args.max_vars:
                row[name] = {"status": "> limit", "reason": f"model of ~{nvars:.2g} variables"}
                continue
            times, solved, over = [], 0, False
            for (p, q), omega in list(zip(pairs, omegas, strict=True))[: args.baseline_pairs]:
                if name == "highs":
                    dt, good, value = run_highs(p, q, n, omega, args.limit)
                else:
                    dt, good, value = run_maxflow(p, q, n, omega)
                times.append(dt * 1e3)
                solved += bool(good)
                if dt > args.limit or not good:
                    over = True
                    break
            row[name] = stats(times) | {"solved": solved, "tried": len(times), "status": "> limit" if over else "ok"}
        results["grid"].append(row)
        o = row["optimal"]

        def cell(r: dict) -> str:
            if r.get("status") == "ok":
                return f"{r['median']:.1f}"
            return f"> {args.limit:g} s" if r.get("status") == "> limit" else r.get("status", "-")

        h = row["highs"]
        if h.get("status") == "ok":
            speed = f"{h['median'] / o['median']:.0f}x"
        else:
            speed = f"> {args.limit * 1e3 / o['median']:.0f}x"
        star = "" if enumerated else "*"
        print(f"{str((V, n)):>9} | {o['median']:7.2f} / {o['p95']:6.2f} / {o['max']:6.1f} | {o['success']:4.0%} | "
              f"{o['max_law_error']:8.1e}{star} | {cell(h):>12} | {cell(row['maxflow']):>15} | {speed}")

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
    print(f"\nbatched path (B=64, V=100, n=2): loop {min(loop):.3f} ms/pair, solve_batch {min(batch):.3f} ms/pair, "
          f"ratio {min(loop) / min(batch):.1f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()
