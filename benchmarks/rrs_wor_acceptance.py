"""rrs_wor's exact acceptance at vocabulary scale (otlp.verifiers.rrs_wor_acceptance): time and interval width.

Per (V, row kind, n): the seconds ``rejection_interval`` took (n <= 2: exact in O(V log V), the median of
``--repeats``; n >= 3: one call, refined until the width target ``--width`` or at ``--time-limit`` seconds), the
interval's width, the nodes it summed or bounded, the time to read p and q once (one float64 sum of each: the
floor) and the ratio, and alpha* (otlp.core.psi_wor) with the gap. Rows: p = softmax(2.5 z); close drafts
q = softmax(log p + sigma z') with sigma 0.5 and 1, and loose drafts q = softmax(2.5 z'') (independent). One thread;
about a minute at the defaults (2 s per n >= 3 case); run under ``flock /tmp/otlp-heavy.lock``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from otlp.core.psi_wor import wor_optimal_acceptance
from otlp.verifiers.rrs_wor_acceptance import rejection_interval

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wor import _median_time  # noqa: E402 - benchmarks/wor.py, beside this script


def _rows(rng: np.random.Generator, V: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    logits = 2.5 * rng.standard_normal(V)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    out = []
    for name, lq in (("sigma 0.5", np.log(p) + 0.5 * rng.standard_normal(V)),
                     ("sigma 1", np.log(p) + rng.standard_normal(V)),
                     ("loose", 2.5 * rng.standard_normal(V))):
        q = np.exp(lq - lq.max())
        out.append((name, p, q / q.sum()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--ns", type=int, nargs="+", default=[2, 3, 4, 8])
    parser.add_argument("--width", type=float, default=1e-9)
    parser.add_argument("--time-limit", type=float, default=2.0, help="seconds per n >= 3 case")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print("| V | rows | n | acceptance | width | nodes | seconds | read p, q ms | ratio to read | alpha* | gap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for V in args.sizes:
        for name, p, q in _rows(rng, V):
            read = _median_time(20, lambda a, b: float(a.sum() + b.sum()), p, q)
            for n in args.ns:
                if n <= 2:
                    seconds = _median_time(args.repeats, rejection_interval, p, q, n)
                    iv = rejection_interval(p, q, n)
                else:
                    iv = rejection_interval(p, q, n, width=args.width, time_limit=args.time_limit)
                    seconds = iv.seconds
                alpha = wor_optimal_acceptance(p, q, n)
                stop = f" ({iv.stopped})" if iv.stopped else ""
                print(f"| {V} | {name} | {n} | {iv.value:.12f} | {iv.width:.1e}{stop} | {iv.nodes:,} | "
                      f"{seconds:.3f} | {1e3 * read:.3f} | {seconds / read:.0f}x | {alpha:.12f} | "
                      f"{alpha - iv.value:.3e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
