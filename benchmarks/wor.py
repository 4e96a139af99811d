"""alpha* for WithoutReplacement(q, n) at vocabulary scale (otlp.core.psi_wor), beside the read floor and the i.i.d.
route.

Per (V, n): the median time of ``wor_optimal_acceptance`` (sort + F on every prefix: closed form at n <= 2, the
trapezoid rule's K passes of O(n V) at n >= 3), the time to read p and q once (one float64 sum of each: the floor),
their ratio, the i.i.d. ``optimal_acceptance(p, IID(q, n))`` for scale, the number of quadrature nodes K and the
rule's own error estimate. Heavy-tailed rows: p = softmax(2 z), q = softmax(z + N(0, 1)). Then the issue's small
sizes against the relaxed OTLP solved by HiGHS (``otlp.optimal.generic.relaxed_lp_plan`` on the enumerated support,
the LP route) and the exact rule of otlp/optimal/wor.py (``OptimalTransport(p, WithoutReplacement(q, n))``: its whole
build, Luce weights, completion and checks; its alpha is a certified lower bound), both against alpha*. One
thread, a minute or so; run under ``flock /tmp/otlp-heavy.lock``.

``--top-k K ...``: drafts filtered to their top K tokens (close drafts: q = softmax(log p + N(0, 1)) before the
filter, p = softmax(5 z)) at each V of ``--sizes`` and n of ``--support-ns``: the exact rule's build on the draft's
support (``OptimalTransport``, :class:`otlp.optimal.wor.SupportRule`) against alpha* of ``psi_wor`` on the full
rows, and one verification call of ``get("optimal_wor")`` on B distinct float32 rows (each B of ``--rows``) against
``get("rrs_wor")`` on the same rows and uniforms (median of 9 calls of each, taken in turn, after a warm-up).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import otlp
from otlp.core.psi_wor import NEGLIGIBLE, STEP, prefix_subset_probability, wor_optimal_acceptance, wor_prefix_psi


def _median_time(repeats: int, fn, *args: object) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


#: ``--top-k``: calls of each sampler, taken in turn (one of each, then again), so that a slow stretch of the machine
#: weighs on both medians
TOP_K_REPEATS = 9


def _interleaved(repeats: int, fn, a: object, b: object, args: tuple) -> tuple[float, float]:  # noqa: ANN001
    """The median times of ``fn(a, *args)`` and ``fn(b, *args)`` over ``repeats`` calls of each, alternated."""
    times: tuple[list, list] = ([], [])
    for _ in range(repeats):
        for out, x in zip(times, (a, b), strict=True):
            start = time.perf_counter()
            fn(x, *args)
            out.append(time.perf_counter() - start)
    return float(np.median(times[0])), float(np.median(times[1]))


def _read(p: np.ndarray, q: np.ndarray) -> float:
    return float(p.sum() + q.sum())


def _iid(p: np.ndarray, q: np.ndarray, n: int) -> float:
    return otlp.optimal_acceptance(p, otlp.IID(q, n))


def _nodes(q: np.ndarray, p: np.ndarray, n: int) -> int:
    """K, the quadrature nodes prefix_subset_probability uses (0 at n <= 2)."""
    if n <= 2:
        return 0
    qs = q[otlp.core.psi.ratio_order(p, q)]
    r = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])
    mu = np.concatenate([[0.0], np.cumsum(qs)]) - np.sort(qs)[::-1][: n - 1].sum()
    settled = (r == 0) | ((mu > 0) & (r * n <= NEGLIGIBLE * 10 * np.where(mu > 0, mu, 1.0)))
    s_lo = (math.log(NEGLIGIBLE) + math.lgamma(n + 1)) / (n + 1) - 1.0
    s_hi = math.log(50.0 / float(r[~settled & (r > 0)].min()))
    return int(math.ceil((s_hi - s_lo) / STEP)) + 1


def _lp(p: np.ndarray, q: np.ndarray, n: int) -> float:
    from otlp.optimal.generic import relaxed_lp_plan

    omegas, probs = otlp.WithoutReplacement(q, n).support()
    return relaxed_lp_plan(p, omegas, probs)[0]


def small_table(sizes: list[tuple[int, int]], rng: np.random.Generator) -> None:
    print("| V | n | alpha* (psi_wor) | psi_wor ms | relaxed LP ms | LP value - alpha* | Luce rule ms | route | "
          "rule's alpha - alpha* |")
    print("|---|---|---|---|---|---|---|---|---|")
    for V, n in sizes:
        z = rng.standard_normal(V)
        p = np.exp(2 * z)
        p /= p.sum()
        q = np.exp(z + rng.standard_normal(V))
        q /= q.sum()
        fast = _median_time(5, wor_optimal_acceptance, p, q, n)
        alpha = wor_optimal_acceptance(p, q, n)
        start = time.perf_counter()
        value = _lp(p, q, n)
        lp = time.perf_counter() - start
        start = time.perf_counter()
        rule = otlp.OptimalTransport(p, otlp.WithoutReplacement(q, n))  # otlp/optimal/wor.py (the LP if it stalls)
        luce = time.perf_counter() - start
        print(f"| {V} | {n} | {alpha:.12f} | {1e3 * fast:.2f} | {1e3 * lp:.0f} | {value - alpha:.1e} | "
              f"{1e3 * luce:.0f} | {rule.route} | {rule.alpha - alpha:.1e} |")


def _verify(v, p, q, drafts, u) -> None:  # noqa: ANN001 - a verifier and its tensors
    v.sample(p, q, drafts, uniforms=u)


def support_table(sizes: list[int], ns: list[int], ks: list[int], batches: list[int],
                  rng: np.random.Generator) -> None:
    import torch

    from otlp.verifiers import get
    from otlp.verifiers.optimal_wor import MAX_SETS

    print("| V | k | n | B | alpha* | rule build ms | rule alpha - alpha* | optimal_wor ms / call | "
          "rrs_wor ms / call | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cells: dict[tuple[int, int, int], dict[int, str]] = {}  # (V, k, n) -> B -> its cell in the compact table
    for V in sizes:
        for B in batches:
            z = torch.from_numpy(rng.standard_normal((B, V)))
            p = torch.softmax(5 * z, 1)  # [B, V] float64
            noisy = torch.softmax(torch.log(p) + torch.from_numpy(rng.standard_normal((B, V))), 1)
            for k in ks:
                top = torch.topk(noisy, k, dim=1).indices
                q = torch.zeros_like(noisy).scatter_(1, top, noisy.gather(1, top))
                q = q / q.sum(1, keepdim=True)
                p0, q0 = p[0].numpy(), q[0].numpy()
                for n in ns:
                    if math.comb(k, n) > MAX_SETS:
                        print(f"| {V} | {k} | {n} | {B} | | | | refused: {math.comb(k, n):,} sets > {MAX_SETS:,} | | |")
                        cells.setdefault((V, k, n), {})[B] = "refused"
                        continue
                    alpha = wor_optimal_acceptance(p0, q0, n)
                    start = time.perf_counter()
                    rule = otlp.OptimalTransport(p0, otlp.WithoutReplacement(q0, n))
                    build = time.perf_counter() - start
                    keys = torch.log(q) - torch.log(-torch.log(torch.from_numpy(rng.random((B, V)))))
                    drafts = torch.topk(keys, n, dim=1).indices  # [B, n] without replacement
                    u = torch.from_numpy(rng.random((B, 2)))
                    args = (p.float(), q.float(), drafts, u)  # float32 rows, as a model gives them
                    for name in ("optimal_wor", "rrs_wor"):  # (warm-up)
                        _verify(get(name), *args)
                    opt, rrs = _interleaved(TOP_K_REPEATS, _verify, get("optimal_wor"), get("rrs_wor"), args)
                    print(f"| {V} | {k} | {n} | {B} | {alpha:.10f} | {1e3 * build:.1f} | {rule.alpha - alpha:.1e} | "
                          f"{1e3 * opt:.2f} | {1e3 * rrs:.2f} | {opt / rrs:.1f}x |", flush=True)
                    cells.setdefault((V, k, n), {})[B] = f"{1e3 * opt:.2f} / {1e3 * rrs:.2f} ms ({opt / rrs:.1f}x)"
    print("\ndocs/OPTIMAL.md's table: optimal_wor / rrs_wor, ms per call\n")
    print("| V | k | n | " + " | ".join(f"B = {B}" for B in batches) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in batches) + " |")
    for (V, k, n), by_b in sorted(cells.items()):
        print(f"| {V:,} | {k} | {n} | " + " | ".join(by_b[B] for B in batches) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--ns", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", type=str, nargs="*", default=["200x2", "60x3", "20x4"],
                        help="V x n pairs for the comparison with the relaxed LP")
    parser.add_argument("--top-k", type=int, nargs="*", default=[],
                        help="only the table of drafts filtered to their top K tokens (module docstring)")
    parser.add_argument("--support-ns", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--rows", type=int, nargs="+", default=[8], help="--top-k: rows per verification call (B)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    if args.top_k:
        import torch

        torch.set_num_threads(1)
        support_table(args.sizes, args.support_ns, args.top_k, args.rows, rng)
        return 0
    print("| V | n | alpha* (WOR) | WOR ms | read p, q ms | ratio to read | IID alpha* ms | K nodes | error est. |")
    print("|---|---|---|---|---|---|---|---|---|")
    for V in args.sizes:
        z = rng.standard_normal(V)
        p = np.exp(2 * z)
        p /= p.sum()
        q = np.exp(z + rng.standard_normal(V))
        q /= q.sum()
        read = _median_time(20, _read, p, q)
        for n in args.ns:
            wor = _median_time(args.repeats, wor_optimal_acceptance, p, q, n)
            iid = _median_time(args.repeats, _iid, p, q, n)
            alpha = wor_optimal_acceptance(p, q, n)
            order, _, _ = wor_prefix_psi(p, q, n)
            _, err = prefix_subset_probability(q[order], n)
            print(f"| {V} | {n} | {alpha:.12f} | {1e3 * wor:.1f} | {1e3 * read:.3f} | {wor / read:.0f}x | "
                  f"{1e3 * iid:.1f} | {_nodes(q, p, n)} | {err:.1e} |")
    print()
    small_table([tuple(int(x) for x in pair.split("x")) for pair in args.small], rng)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
