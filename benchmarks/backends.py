"""Build and solve time of every backend x formulation on a small grid, side by side.

Grid: V in {5, 10, 20}, n in {2, 3}, IID drafts with seeded random p and q (Dirichlet(1)). Formulations: FullOTLP,
RelaxedOTLP, BetaProgram, and the network formulations (MaxFlowNetwork, OuterInnerNetworks, SubsetSelection) when
their modules exist. Backends: every entry of ``otlp.lp.solvers.BACKENDS`` whose module exists.

Each (formulation, instance, backend) runs in a forked child with a wall-clock limit; cells read
``build + solve ms (ratio of the total to highs)``, or "> limit", "too big" (refused by the size check, before
building), "-" (the backend does not solve that formulation's IR kinds), "error: ...". Every solved cell's value is
compared with alpha* (``otlp.optimal_acceptance``) and flagged "WRONG" if it is off by more than 1e-7 + the
backend's reported rounding bound.

    python benchmarks/backends.py [--time-limit 20] [--quick] [--json benchmarks/results/backends.json]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np

import otlp
from otlp.core.errors import InputError, ModelTooLargeError
from otlp.lp.solvers import BACKENDS

FORMULATIONS = ("FullOTLP", "RelaxedOTLP", "BetaProgram", "MaxFlowNetwork", "OuterInnerNetworks", "SubsetSelection")
GRID = [(V, n) for V in (5, 10, 20) for n in (2, 3)]


def instance(V: int, n: int, seed: int = 0) -> tuple[np.ndarray, otlp.IID]:
    rng = np.random.default_rng(1000 * V + n + seed)
    return rng.dirichlet(np.ones(V)), otlp.IID(rng.dirichlet(np.ones(V)), n)


def make(name: str, p: np.ndarray, draft: object):  # noqa: ANN201 - a Formulation, or None when not available
    try:
        cls = getattr(importlib.import_module("otlp.lp.formulations"), name)
    except (ImportError, AttributeError):
        return None
    try:
        return cls(p, draft)
    except TypeError:
        return None


def _child(conn, name: str, V: int, n: int, backend: str) -> None:  # noqa: ANN001
    os.setpgrp()  # own process group, so a timeout also ends solver subprocesses (CBC)
    try:
        p, draft = instance(V, n)
        f = make(name, p, draft)
        s = f.solve(backend=backend)
        alpha = getattr(s, "alpha", s.value)  # SubsetSelection's value is min psi; its .alpha is 1 + min psi
        conn.send({"status": s.status, "value": float(s.value), "alpha": float(alpha),
                   "value_bound": float(s.value_bound),
                   "build_s": s.seconds.get("build", 0.0), "solve_s": s.seconds.get("solve", 0.0)})
    except ModelTooLargeError as exc:
        conn.send({"status": "too big", "message": str(exc)})
    except Exception as exc:  # noqa: BLE001 - reported in the table
        conn.send({"status": "error", "message": f"{type(exc).__name__}: {exc}"})


def run_cell(name: str, V: int, n: int, backend: str, limit: float) -> dict:
    p, draft = instance(V, n)
    f = make(name, p, draft)
    if f is None:
        return {"status": "unavailable"}
    try:
        kind = f.kind_for(backend)
    except InputError:
        return {"status": "-"}
    try:
        f.size(kind).check(f"{name} ({kind})")
        if backend == "exact" and kind in ("linear", "network"):
            from otlp.lp.solvers.exact import EXACT_LIMIT_BYTES

            f.size(kind).check(f"{name} exact", EXACT_LIMIT_BYTES)
    except ModelTooLargeError as exc:
        return {"status": "too big", "message": str(exc)}
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, name, V, n, backend))
    start = time.perf_counter()
    proc.start()
    result = parent.recv() if parent.poll(limit) else None
    wall = time.perf_counter() - start
    if result is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.join()
        return {"status": "> limit", "wall_s": wall}
    proc.join()
    result["kind"] = kind
    if result.get("status") == "optimal":
        alpha = otlp.optimal_acceptance(p, draft)
        result["alpha_star"] = alpha
        result["correct"] = abs(result["alpha"] - alpha) <= 1e-7 + result["value_bound"]
    return result


def warm_up(backends: list[str]) -> None:
    """Solve a tiny instance with every backend in the parent, so that forked children do not pay the solver
    packages' import time inside their first build."""
    p, draft = instance(3, 2)
    for backend in backends:
        for name in ("RelaxedOTLP", "FullOTLP"):
            try:
                make(name, p, draft).solve(backend=backend)
            except InputError:
                continue


def cell_text(r: dict, ref: dict | None) -> str:
    status = r["status"]
    if status != "optimal":
        return status if status != "error" else "error: " + r.get("message", "")[:30]
    total = r["build_s"] + r["solve_s"]
    text = f"{1e3 * r['build_s']:.1f}+{1e3 * r['solve_s']:.1f}"
    if ref is not None and ref.get("status") == "optimal":
        text += f" (x{total / (ref['build_s'] + ref['solve_s']):.2g})"
    return text + ("" if r["correct"] else " WRONG")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per (formulation, instance, backend)")
    parser.add_argument("--quick", action="store_true", help="V in {5, 10} only")
    parser.add_argument("--json", default="benchmarks/results/backends.json")
    args = parser.parse_args()
    grid = [(V, n) for V, n in GRID if not args.quick or V <= 10]
    backends = [b for b, module in BACKENDS.items() if importlib.util.find_spec(module) is not None]
    warm_up(backends)
    rows = []
    for name in FORMULATIONS:
        for V, n in grid:
            cells = {b: run_cell(name, V, n, b, args.time_limit) for b in backends}
            if all(c["status"] == "unavailable" for c in cells.values()):
                break
            rows.append({"formulation": name, "V": V, "n": n, "cells": cells})
    header = ["formulation", "V", "n"] + backends
    table = [[r["formulation"], str(r["V"]), str(r["n"])] + [cell_text(r["cells"][b], r["cells"].get("highs"))
                                                              for b in backends] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    print("build+solve ms per call (ratio of the total to highs); IID drafts, seeded; limit "
          f"{args.time_limit:g} s per call")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"time_limit_s": args.time_limit, "backends": backends, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
