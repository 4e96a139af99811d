"""Seeded random (p, draft) instances over every draft scheme, for the network and subset-selection tests."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

import otlp
from otlp.core.errors import InputError
from tests.conftest import FAMILIES, random_pair

SCHEMES = ("iid", "independent", "without_replacement", "greedy", "spechub", "joint")


def make_draft(rng: np.random.Generator, scheme: str, q: np.ndarray, n: int):  # -> DraftScheme
    """A draft scheme of the named kind around q (SpecHub forces n = 2). Degenerate q (too few tokens with mass
    for the scheme) is mixed with the uniform law so the scheme exists."""
    V = q.size
    for attempt in range(2):
        try:
            if scheme == "iid":
                return otlp.IID(q, n)
            if scheme == "independent":
                others = [rng.dirichlet(np.ones(V) * 0.7) for _ in range(n - 1)]
                return otlp.Independent([q, *others])
            if scheme == "without_replacement":
                return otlp.WithoutReplacement(q, n)
            if scheme == "greedy":
                return otlp.Greedy(q, n)
            if scheme == "spechub":
                return otlp.SpecHub(q)
            if scheme == "joint":
                table = rng.dirichlet(np.ones(V**n) * 0.5)
                table[rng.random(V**n) < 0.3] = 0.0
                table = table if table.sum() > 0 else np.ones(V**n)
                return otlp.Joint((table / table.sum()).reshape((V,) * n))
            raise ValueError(scheme)
        except InputError:
            if attempt:
                raise
            q = 0.9 * q + 0.1 / V
    raise AssertionError("unreachable")


def random_instances(seed: int, per_scheme: int, schemes: tuple[str, ...] = SCHEMES, max_V: int = 6,
                     max_n: int = 3) -> Iterator[tuple[str, np.ndarray, object]]:
    """``per_scheme`` instances of each scheme with V in [2, max_V], n in [1, max_n] (n = 2 for SpecHub, n <= V for
    WithoutReplacement and Greedy), p and q from the adversarial families of ``tests/conftest.py`` in turn."""
    rng = np.random.default_rng(seed)
    for scheme in schemes:
        for k in range(per_scheme):
            V = int(rng.integers(2, max_V + 1))
            n = 2 if scheme == "spechub" else int(rng.integers(1, max_n + 1))
            if scheme in ("greedy", "without_replacement"):
                n = min(n, V)  # needs n distinct tokens / a token outside the top n - 1
            family = FAMILIES[k % len(FAMILIES)]
            p, q = random_pair(rng, V, family)
            yield f"{scheme}-V{V}-n{n}-{family}-{k}", p, make_draft(rng, scheme, q, n)
