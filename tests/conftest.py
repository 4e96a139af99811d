"""Shared test fixtures: seeded random instances, with the adversarial families every solver must survive."""

from __future__ import annotations

import numpy as np
import pytest


def random_pair(rng: np.random.Generator, V: int, family: str = "dirichlet") -> tuple[np.ndarray, np.ndarray]:
    """A (p, q) pair from a named family: dirichlet, sparse (zeros), ties (rational ties), equal (p = q),
    point (point masses), skewed (q nearly a point mass)."""
    if family == "dirichlet":
        return rng.dirichlet(np.ones(V) * 0.7), rng.dirichlet(np.ones(V) * 0.7)
    if family == "sparse":
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        p[rng.random(V) < 0.3] = 0.0
        q[rng.random(V) < 0.3] = 0.0
        p[0] += 1e-3 if p.sum() == 0 else 0.0
        q[-1] += 1e-3 if q.sum() == 0 else 0.0
        return p / p.sum(), q / q.sum()
    if family == "ties":
        a, b = rng.integers(1, 4, V).astype(float), rng.integers(1, 4, V).astype(float)
        return a / a.sum(), b / b.sum()
    if family == "equal":
        p = rng.dirichlet(np.ones(V))
        return p, p.copy()
    if family == "point":
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
        return p, rng.dirichlet(np.ones(V))
    if family == "skewed":
        q = np.full(V, 1e-6)
        q[rng.integers(V)] = 1.0
        return rng.dirichlet(np.ones(V)), q / q.sum()
    raise ValueError(family)


FAMILIES = ("dirichlet", "sparse", "ties", "equal", "point", "skewed")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261123)
