"""``OptimalTransport`` on small vocabularies: the plain-Python class chains (otlp/optimal/scalar.py) against the array
chains of the host route (otlp/optimal/host.py: the C kernels of otlp/backend/native for psi and the slot roots, numpy
for the rest) and of the numpy reference alone (otlp/optimal/chains.py, as a build without a C compiler runs it); and
the scalar path without the kernels (its slot roots by the numpy reference).

Each call is what benchmarks/solve_times.py times per token: ``OptimalTransport.from_arrays(p, q, n)`` and one ``slice``
of a drafted tuple, at V = 8 .. 256 and n = 2 .. 8, on the heavy-tailed pairs of the design note §6 (z = 2 t_3, p =
softmax(z), q = softmax(z + N(0, 1))). The routes are forced (``scalar.takes``): ``scalar``, ``C`` (the host route's
arrays with the kernels), ``numpy`` (the arrays, kernels off) and ``scalar_numpy`` (the scalar path, kernels off). The
four calls of a pair run interleaved round-robin (benchmarks/verifiers.py's ``_times``), each its least of ``--reps``
(the timeit convention on a shared machine), over ``--pairs`` pairs per point, medians reported. There is no read floor
to compare with: at these sizes the cost is per call, not per byte.

Usage: python benchmarks/transport_build.py [--reps 15] [--pairs 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

from otlp.backend import native
from otlp.optimal import OptimalTransport, scalar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verifiers import _times  # noqa: E402 - benchmarks/verifiers.py, beside this script

SIZES = (8, 16, 32, 64, 128, 256)
DRAFTS = (1, 2, 3, 4, 6, 8)


def heavy_pair(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Design note §6: z = 2 t_3 [V], p = softmax(z), q = softmax(z + N(0, 1))."""
    z = 2.0 * rng.standard_t(3, V)
    y = z + rng.normal(size=V)
    p, q = np.exp(z - z.max()), np.exp(y - y.max())
    return p / p.sum(), q / q.sum()


def _call(p: np.ndarray, q: np.ndarray, n: int, omega: np.ndarray, route: str):  # noqa: ANN202
    """One build and slice on ``route`` (the scalar path's range and the kernels switched for this call only)."""
    def run() -> None:
        saved_takes, saved_lib = scalar.takes, native.library
        scalar.takes = lambda V, n: route.startswith("scalar")
        if route.endswith("numpy"):
            native.library = lambda: None
        try:
            OptimalTransport.from_arrays(p, q, n).slice(omega)
        finally:
            scalar.takes, native.library = saved_takes, saved_lib

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--json", default=None, help="write the table here")
    args = parser.parse_args()
    if native.library() is None:
        sys.exit(f"the C kernels are not built here ({native.reason()}): build them first")
    rows = []
    print(f"{'V':>4} {'n':>2} {'takes':>5} | {'scalar us':>9} {'C us':>8} | {'numpy us':>9} {'scalar_numpy us':>15} | "
          f"{'C/scalar':>8} {'numpy/scalar_numpy':>18}")
    for V in SIZES:
        for n in DRAFTS:
            rng = np.random.default_rng([V, n])
            per = {"scalar": [], "C": [], "numpy": [], "scalar_numpy": []}
            for _ in range(args.pairs):
                p, q = heavy_pair(rng, V)
                omega = rng.choice(V, size=n, p=q)
                got = _times({r: _call(p, q, n, omega, r) for r in per}, args.reps, "cpu", stat=min)
                for r, t in got.items():
                    per[r].append(t * 1e6)
            med = {r: statistics.median(ts) for r, ts in per.items()}
            takes = scalar.takes(V, n)
            rows.append({"V": V, "n": n, "scalar_takes": takes, **{f"{r}_us": round(t, 1) for r, t in med.items()}})
            print(f"{V:>4} {n:>2} {'yes' if takes else 'no':>5} | {med['scalar']:>9.0f} {med['C']:>8.0f} | "
                  f"{med['numpy']:>9.0f} {med['scalar_numpy']:>15.0f} | {med['C'] / med['scalar']:>8.2f} "
                  f"{med['numpy'] / med['scalar_numpy']:>18.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
