"""Seeded random OTLP instances for the cross-backend tests: every draft scheme, V <= 6, n <= 3.

Some distributions get exact zeros (tokens the target or the draft never picks), which makes the LPs degenerate
and exercises the exact backend's repair pivots.
"""

from __future__ import annotations

import numpy as np

import otlp

SCHEMES = ("iid", "independent", "without_replacement", "greedy", "spechub", "joint")


def random_distribution(rng: np.random.Generator, V: int, zeros: bool) -> np.ndarray:
    x = rng.dirichlet(np.full(V, 0.7))
    if zeros and V > 2:
        x[rng.choice(V, size=rng.integers(1, V - 1), replace=False)] = 0.0
        if x.sum() == 0:
            x[0] = 1.0
        x = x / x.sum()
    return x


def random_draft(rng: np.random.Generator, scheme: str, V: int, n: int) -> otlp.drafts.DraftScheme:
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
