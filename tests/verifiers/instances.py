"""Random small (p, q) instances with the edge cases the issue asks for: ties, zeros, p = q, point masses."""

from __future__ import annotations

import numpy as np

KINDS = ("dirichlet", "sparse", "ties", "equal", "p_point", "q_flat", "q_point")


def make_pair(rng: np.random.Generator, V: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """One (p, q) of the given kind. ``q_point`` gives q a point mass (schemes that refuse it are skipped)."""
    p = rng.dirichlet(np.full(V, rng.choice([0.3, 1.0, 3.0])))
    q = rng.dirichlet(np.full(V, rng.choice([0.3, 1.0, 3.0])))
    if kind == "sparse":  # zeros in both, including p = 0 < q and q = 0 < p
        p = np.where(rng.random(V) < 0.35, 0.0, p)
        q = np.where(rng.random(V) < 0.35, 0.0, q)
        p[rng.integers(V)] += 0.1
        q[rng.integers(V)] += 0.1
    elif kind == "ties":  # quarter grid: equal entries, equal ratios, argmax ties in q
        p = rng.integers(0, 4, V).astype(float) + (np.arange(V) == 0)
        q = rng.integers(0, 4, V).astype(float) + (np.arange(V) == V - 1)
    elif kind == "equal":
        q = p.copy()
    elif kind == "p_point":
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
    elif kind == "q_flat":
        q = np.full(V, 1.0 / V)
    elif kind == "q_point":
        q = np.zeros(V)
        q[rng.integers(V)] = 1.0
    return p / p.sum(), q / q.sum()
