"""otlp.xp's row scans on numpy arrays: torch's kernels (used when torch is already imported) give exactly
numpy's own sequential results, bit for bit, and a read-only array falls back to numpy without a warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from otlp import xp as X

torch = pytest.importorskip("torch")  # the torch kernels are only taken when torch is loaded

NUMPY = {
    "cumsum": lambda x: np.cumsum(x, axis=-1),
    "padded_cumsum": lambda x: np.concatenate([np.zeros(x.shape[:-1] + (1,), x.dtype), np.cumsum(x, axis=-1)], -1),
    "padded_suffix_sum": lambda x: np.concatenate([np.cumsum(x[..., ::-1], axis=-1)[..., ::-1],
                                                   np.zeros(x.shape[:-1] + (1,), x.dtype)], -1),
    "cummin": lambda x: np.minimum.accumulate(x, axis=-1),
    "suffix_min": lambda x: np.minimum.accumulate(x[..., ::-1], axis=-1)[..., ::-1],
    "cummax": lambda x: np.maximum.accumulate(x, axis=-1),
}


def _rows(rng: np.random.Generator) -> list[np.ndarray]:
    heavy = rng.random((7, 3001)) ** 12  # entries spanning many binades: the summation order shows in the bits
    ties = np.round(rng.random((4, 50)), 1)
    special = np.array([[0.5, np.inf, -np.inf, 0.0, 1e-300, -0.0, 2.0, np.inf]])
    ints = rng.integers(-5, 5, size=(3, 100))
    wide = [np.tile(x, (1, 200)) for x in (ties, special, ints)]  # the same values past TORCH_SCAN_MIN entries
    return [heavy, heavy[:1], ties, special, ints, *wide, heavy[:, ::2], heavy.T.copy()[:5]]


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_scans_equal_numpys_bit_for_bit(name: str) -> None:
    assert X._as_torch(np.zeros((2, X.TORCH_SCAN_MIN))) is not None  # the torch kernels are in use here
    for x in _rows(np.random.default_rng(0)):
        with np.errstate(invalid="ignore"):  # inf + -inf in the special row: nan on both routes
            got, want = getattr(X, name)(x), NUMPY[name](x)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_read_only_and_other_dtypes_take_numpy_quietly() -> None:
    x = np.random.default_rng(1).random((3, 40))
    x.flags.writeable = False
    assert X._as_torch(x) is None and X._as_torch(x.astype(np.float32)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(X.cumsum(x), np.cumsum(x, axis=-1))
        np.testing.assert_array_equal(X.padded_suffix_sum(x), NUMPY["padded_suffix_sum"](x))
        np.testing.assert_array_equal(X.suffix_min(x), NUMPY["suffix_min"](x))


def test_packed_sort_repairs_only_the_tied_runs_and_equals_a_stable_argsort() -> None:
    """Keys within the truncation's resolution (a few ulps apart) land in one truncated run; the second packed sort
    orders each run by (exact key decreasing, id increasing), as a stable argsort of -key does, with a few runs or
    with a third of the row tied; and the whole order on exact ties, p = q = 0 keys, +inf and 0."""
    rng = np.random.default_rng(4)
    for trial in range(200):
        B, V = int(rng.integers(1, 5)), int(rng.integers(2, 3000))
        key = np.tile(rng.random(V) * rng.choice([1e-3, 1.0, 1e3]), (B, 1))
        k = rng.integers(0, V, size=V // 3 if trial % 2 else max(1, V // 50))  # dense ties / a few runs
        key[:, k] = key[:, rng.integers(0, V, size=k.size)] * (1 + rng.integers(-3, 4, size=k.size) * 2.0**-45)
        key[:, rng.integers(0, V, size=V // 10)] = -1.0
        if trial % 5 == 0:
            key[:, rng.integers(0, V, size=3)] = np.inf
        np.testing.assert_array_equal(X._packed_sort(key), np.argsort(-key, axis=-1, kind="stable"))
    rng = np.random.default_rng(7)  # exact ties, p = q = 0, ties of the truncated keys only, +inf and 0
    for trial in range(100):
        B, V = int(rng.integers(1, 4)), int(rng.integers(1, 2000))
        k = rng.random((B, V)) ** int(rng.integers(1, 5))
        mode = trial % 5
        if mode == 1:
            k = np.round(k * 7) / 7
        elif mode == 2:
            k[rng.random((B, V)) < 0.3] = -1.0
        elif mode == 3:
            k = 1.0 + rng.integers(0, 4, (B, V)) * 2.0**-50
        elif mode == 4:
            k[rng.random((B, V)) < 0.2] = np.inf
            k[rng.random((B, V)) < 0.2] = 0.0
        np.testing.assert_array_equal(X._packed_sort(k), np.argsort(-k, axis=1, kind="stable"))
        np.testing.assert_array_equal(X.sort_descending(k), np.argsort(-k, axis=1, kind="stable"))  # either route
    rng = np.random.default_rng(8)  # rows that need the second sort beside rows that do not
    for trial in range(50):
        V = int(rng.integers(2, 3000))
        k = rng.random((4, V))
        k[trial % 4] = 1.0 + rng.integers(0, 4, V) * 2.0**-50
        np.testing.assert_array_equal(X._packed_sort(k), np.argsort(-k, axis=1, kind="stable"))


def test_inverse_permutation_through_torch_equals_numpys() -> None:
    order = np.argsort(np.random.default_rng(5).random((4, 1000)), axis=-1)
    assert X._as_torch(order) is not None
    inv = X.inverse_permutation(order)
    expected = np.empty_like(order)
    np.put_along_axis(expected, order, np.broadcast_to(np.arange(1000), order.shape), axis=-1)
    np.testing.assert_array_equal(inv, expected)
    np.testing.assert_array_equal(np.take_along_axis(order, inv, axis=-1), np.broadcast_to(np.arange(1000), (4, 1000)))
