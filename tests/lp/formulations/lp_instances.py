"""Seeded random OTLP instances for the LP cross-backend tests (every draft scheme, V <= 6, n <= 3), and
hand-built LPs for the backend tests.

Some distributions get exact zeros (tokens the target or the draft never picks), which makes the LPs degenerate
and exercises the exact backend's repair pivots.
"""

from __future__ import annotations

import numpy as np

import otlp
from otlp.lp.ir import LinearModel

SCHEMES = ("iid", "independent", "without_replacement", "greedy", "spechub", "joint")


def random_distribution(rng: np.random.Generator, V: int, zeros: bool) -> np.ndarray:
    x = rng.dirichlet(np.full(V, 0.7))
    if zeros and V > 2:
        x[rng.choice(V, size=rng.integers(1, V - 1), replace=False)] = 0.0
        if x.sum() == 0:
            x[0] = 1.0
        x = x / x.sum()
    return x


def random_draft(rng: np.random.Generator, scheme: str, V: int, n: int) -> otlp.core.drafts.DraftScheme:
    if scheme == "iid":
        return otlp.IID(random_distribution(rng, V, rng.random() < 0.3), n)
    if scheme == "independent":
        return otlp.Independent([random_distribution(rng, V, rng.random() < 0.3) for _ in range(n)])
    if scheme == "without_replacement":
        return otlp.WithoutReplacement(rng.dirichlet(np.ones(V)), min(n, V))
    if scheme == "greedy":
        return otlp.Greedy(rng.dirichlet(np.ones(V)), min(n, V))
    if scheme == "spechub":
        return otlp.SpecHub(rng.dirichlet(np.ones(V)))
    if scheme == "joint":
        table = rng.dirichlet(np.full(V**n, 0.5)).reshape((V,) * n)
        table[table < np.quantile(table, 0.3)] = 0.0  # a sparse joint law
        return otlp.Joint(table / table.sum())
    raise ValueError(scheme)


def instances(per_scheme: int = 6, seed: int = 20261123) -> list[tuple[str, np.ndarray, object]]:
    """``per_scheme`` instances of each scheme: ``(id, p, draft)``."""
    rng = np.random.default_rng(seed)
    out = []
    for scheme in SCHEMES:
        for k in range(per_scheme):
            V = int(rng.integers(2, 7))
            n = 2 if scheme == "spechub" else int(rng.integers(1, 4))
            if scheme == "joint":
                V = min(V, 4) if n == 3 else V
            p = random_distribution(rng, V, rng.random() < 0.3)
            draft = random_draft(rng, scheme, V, n)
            out.append((f"{scheme}-{k}-V{V}n{draft.n}", p, draft))
    return out


# -- hand-built LPs for the backend tests (every row and bound kind) -----------------------------------------------
def zoo_max() -> LinearModel:
    """max 3x + 2y + z  s.t.  x + y + z <= 4,  x - y >= -1,  x + 2z = 3,  0 <= y + z <= 2.5,
    0 <= x <= 2.5,  y >= -1,  z free. Optimum 41/4 at (x, y, z) = (5/2, 5/4, 1/4), duals total 2, balance -1/2
    (hand-solved; checked against scipy's linprog in tests/lp/solvers)."""
    m = LinearModel("zoo_max", sense="max")
    m.add_block("x", 1, lower=0.0, upper=2.5)
    m.add_block("y", 1, lower=-1.0)
    m.add_block("z", 1, lower=-np.inf, upper=np.inf)
    m.set_objective("x", 3.0)
    m.set_objective("y", 2.0)
    m.set_objective("z", 1.0)
    m.add_rows("total", [0, 0, 0], [0, 1, 2], 1.0, -np.inf, 4.0)
    m.add_rows("gap", [0, 0], [0, 1], [1.0, -1.0], -1.0, np.inf)
    m.add_rows("balance", [0, 0], [0, 2], [1.0, 2.0], 3.0, 3.0)
    m.add_rows("range", [0, 0], [1, 2], 1.0, 0.0, 2.5)
    return m


ZOO_MAX_VALUE = 10.25


def zoo_min() -> LinearModel:
    """min x0 + 2 x1  s.t.  x0 + x1 >= 1,  x0 - x1 <= 1/2,  x >= 0. Optimum 5/4 at (3/4, 1/4), duals (3/2, -1/2)."""
    m = LinearModel("zoo_min", sense="min")
    m.add_block("x", 2, lower=0.0)
    m.set_objective("x", [1.0, 2.0])
    m.add_rows("cover", [0, 0], [0, 1], 1.0, 1.0, np.inf)
    m.add_rows("tilt", [0, 0], [0, 1], [1.0, -1.0], -np.inf, 0.5)
    return m


def infeasible_model() -> LinearModel:
    m = LinearModel("infeasible", sense="max")
    m.add_block("x", 2, lower=0.0)
    m.set_objective("x", 1.0)
    m.add_rows("low", [0, 0], [0, 1], 1.0, -np.inf, 1.0)
    m.add_rows("high", [0, 0], [0, 1], 1.0, 2.0, np.inf)
    return m


def unbounded_model() -> LinearModel:
    m = LinearModel("unbounded", sense="max")
    m.add_block("x", 2, lower=0.0)
    m.set_objective("x", [1.0, 0.0])
    m.add_rows("slack", [0, 0], [0, 1], [1.0, -1.0], -np.inf, 1.0)
    return m
