"""Hypothesis strategies for the fuzz suite: well-formed distributions (small V for exact comparison, large V up
to 10^5 built from a seed), and malformed inputs (NaN/inf, subnormal, negative, ragged, booleans, strings, wrong
dtype, empty, wrong length)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

SUBNORMALS = [5e-324, 1e-320, 1e-310, 2.2250738585072014e-308]
WEIRD = [float("nan"), float("inf"), -float("inf"), -0.0, -1e-300, 1e300, *SUBNORMALS]


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum()


@st.composite
def distributions(draw, V: int | None = None, max_V: int = 8) -> np.ndarray:
    """A valid probability vector: dirichlet, sparse, ties, point mass or with subnormal entries."""
    V = V or draw(st.integers(1, max_V))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["dirichlet", "sparse", "ties", "point", "subnormal", "skewed"]))
    if kind == "dirichlet":
        return rng.dirichlet(np.full(V, draw(st.sampled_from([0.1, 0.5, 1.0, 5.0]))))
    if kind == "sparse":
        x = rng.dirichlet(np.ones(V))
        x[rng.random(V) < 0.4] = 0.0
        if x.sum() == 0:
            x[rng.integers(V)] = 1.0
        return _normalise(x)
    if kind == "ties":
        return _normalise(rng.integers(1, 4, V).astype(float))
    if kind == "point":
        x = np.zeros(V)
        x[rng.integers(V)] = 1.0
        return x
    if kind == "subnormal":
        x = rng.dirichlet(np.ones(V))
        idx = rng.random(V) < 0.5
        x[idx] = rng.choice(SUBNORMALS, size=int(idx.sum()))
        if x.sum() < 0.5:
            x[rng.integers(V)] = 1.0
        return _normalise(x)
    x = np.full(V, 1e-9)
    x[rng.integers(V)] = 1.0
    return _normalise(x)


@st.composite
def large_distributions(draw, max_V: int = 100_000) -> np.ndarray:
    V = draw(st.sampled_from([1000, 32_000, max_V]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return rng.dirichlet(np.full(V, draw(st.sampled_from([0.05, 0.3, 1.0]))))


def malformed(max_V: int = 6):
    """Things that are not probability vectors (or are at the edge of being one)."""
    numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(WEIRD), st.integers(-3, 3))
    return st.one_of(
        st.lists(numbers, min_size=0, max_size=max_V),
        st.lists(st.one_of(numbers, st.booleans(), st.text(max_size=3), st.none()), max_size=max_V),
        st.lists(st.lists(numbers, max_size=3), max_size=3),  # ragged or 2-D
        st.builds(lambda v, dt: np.asarray(v).astype(dt), st.lists(st.floats(0, 1), min_size=1, max_size=max_V),
                  st.sampled_from(["float16", "float32", "int8", "bool", "complex64", "U4", "object"])),
        st.sampled_from([range(2), None, "0.5,0.5", 3, {0.5: 0.5}, (x for x in (0.5, 0.5)), b"\x00"]),
    )


def any_vector(max_V: int = 6):
    return st.one_of(distributions(max_V=max_V), malformed(max_V))


ns = st.one_of(st.integers(1, 4), st.integers(-3, 0), st.sampled_from([10**3, 10**9, 2**70]), st.booleans(),
               st.floats(0, 4), st.none(), st.text(max_size=2))
