"""otlp.core.xp's row scans on numpy arrays: torch's kernels (used when torch is already imported) give exactly
numpy's own sequential results, bit for bit, and a read-only array falls back to numpy without a warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from otlp.core import xp as X

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


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("repair_bits", [63, 0])
def test_packed_sort_repairs_only_the_tied_runs_and_equals_a_stable_argsort(repair_bits: int, kernels: bool,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys within the truncation's resolution (a few ulps apart) land in one truncated run; the repair orders the
    positions of each such run by (exact key decreasing, id increasing), as a stable argsort of -key does, with a
    few runs or with a third of the row tied; and the whole order on exact ties, p = q = 0 keys, +inf and 0.
    ``repair_bits`` 0: the repair's lexsort, which huge vocabularies take. ``kernels``: the passes around the sorts
    in otlp/backend/native's C loop (``otlp_sort_runs``, where it is built) or in numpy."""
    from otlp.backend import native

    monkeypatch.setattr(X, "_REPAIR_BITS", repair_bits)
    if not kernels:
        monkeypatch.setattr(native, "sort_runs", lambda *a: None)
    elif native.library() is None:
        pytest.skip("otlp/backend/native's kernels were not built here")
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
    rng = np.random.default_rng(8)  # rows that need the repair beside rows that do not
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


def test_inverse_cdf_draws_massless_rows_from_the_fallback_with_their_uniforms() -> None:
    """Rows of weights with no mass draw from the fallback's row with the same uniform, the others are untouched:
    the same tokens as filling those rows with the fallback first (what the device route does in place), on torch
    and numpy, with none, some and all rows massless."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(3)
    for empty in ([], [1, 4], list(range(6))):
        w = torch.rand(6, 300, generator=gen, dtype=torch.float64) ** 4
        w[empty] = 0.0
        fallback = torch.softmax(torch.randn(6, 300, generator=gen, dtype=torch.float64), 1)
        u = torch.rand(6, 1, generator=gen, dtype=torch.float64)
        filled = w.clone()
        filled[empty] = fallback[empty]
        expected = X.inverse_cdf(filled, u)
        assert torch.equal(X.inverse_cdf(w.clone(), u, fallback), expected)
        assert np.array_equal(X.inverse_cdf(w.numpy().copy(), u.numpy(), fallback.numpy()), expected.numpy())
        assert torch.equal(X.inverse_cdf(w, u)[empty], torch.zeros(len(empty), dtype=torch.int64))


def test_blocked_inverse_cdf_is_the_one_level_search() -> None:
    """From ``CDF_BLOCKED_MIN_V`` tokens CPU tensors take the two-level search: on float64 rows (zeros, a row without
    mass, a row whose only mass is its last token, V not a multiple of the block, uniforms up to 1 - 2^-53) it gives
    the one-level search's index, always one of positive weight (float32 rows: positive weight, as their running sums
    differ in rounding)."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(5)
    for V in (X.CDF_BLOCKED_MIN_V, 10_000, 40_001):
        w = torch.rand(32, V, generator=gen, dtype=torch.float64) ** 8
        w[:, ::3] = 0.0
        w[5] = 0.0
        w[7] = 0.0
        w[7, V - 2] = 1e-300
        w[9, :] = 0.0
        w[9, 100] = 1.0
        u = torch.rand(32, 1, generator=gen, dtype=torch.float64)
        u[:4] = 1.0 - 2.0**-53
        cdf = w.cumsum(-1)
        one_level = torch.minimum(torch.searchsorted(cdf, u * cdf[:, -1:], right=True),
                                  torch.searchsorted(cdf, cdf[:, -1:].contiguous()))[:, 0]
        index = X.inverse_cdf(w, u)
        assert torch.equal(index, one_level)
        massive = w.sum(-1) > 0
        assert bool((w.gather(1, index[:, None])[:, 0] > 0)[massive].all()) and int(index[5]) == 0
        assert int(index[7]) == V - 2 and int(index[9]) == 100
        index32 = X.inverse_cdf(w.float(), u.float())
        assert bool((w.float().gather(1, index32[:, None])[:, 0] > 0)[w.float().sum(-1) > 0].all())
    empty = torch.zeros(0, X.CDF_BLOCKED_MIN_V, dtype=torch.float64)  # no rows
    assert X.inverse_cdf(empty, torch.zeros(0, 1, dtype=torch.float64), empty).shape == (0,)


@pytest.mark.parametrize("block", [1, 3, 256])
def test_two_level_scans_are_the_one_level_scans(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """An accelerator's running sums, minima and maxima (:func:`otlp.core.xp._two_level_scan`, blocks of ``block``,
    some rows padded): minima and maxima equal torch's one-level scans exactly, sums to rounding (relative to the
    running sum of |x|), on floats with infinities, ties and many binades, and on integers."""
    monkeypatch.setattr(X, "SCAN_BLOCK", block)
    for x in _rows(np.random.default_rng(1)):
        t = torch.from_numpy(np.ascontiguousarray(x))
        for op in ("sum", "min", "max"):
            with np.errstate(invalid="ignore"):
                got, want = X._two_level_scan(t, op), X._one_level_scan(t, op)
            assert got.dtype == want.dtype and got.shape == want.shape
            if op == "sum" and t.dtype.is_floating_point:
                g, w = got.numpy(), want.numpy()
                same = (g == w) | (np.isnan(g) & np.isnan(w))  # infinities and nan where the rows hold them
                with np.errstate(invalid="ignore"):
                    assert np.all(same | (np.abs(g - w) <= 1e-13 * np.abs(x).cumsum(-1))), op
            else:
                assert torch.equal(got, want), op
