"""psi on the sorted prefixes for i.i.d. drafts (otlp.core.psi): the C passes after the sort that alpha* takes
(``otlp_prefix`` in otlp/backend/native/chains.c, one row) against the numpy reference, bit for bit, and alpha*
through either route."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import otlp
from otlp.core.psi import ratio_order, sorted_prefix_psi
from tests.conftest import FAMILIES, random_pair


def _rows() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(31)
    rows = [random_pair(rng, V, family) for family in FAMILIES for V in (1, 2, 3, 9, 300, 5000)]
    rows.append((np.array([0.1, 0.2, 0.3, 0.4]), np.array([1.0, 1e-320, 1e-320, 1e-320])))  # subnormal masses
    rows.append((np.array([0.4, 0.3, 0.2, 0.1, 0.0]), np.array([0.5, 0.5, 0.0, 0.0, 0.0])))  # zeros, a tie at 1/2
    return rows


def test_the_kernel_is_the_numpy_route_bit_for_bit() -> None:
    """psi on every prefix and its first argmin, on one row as alpha* calls it: the same bits, every family,
    V = 1 to 5000, n = 1 to 32 (above it the numpy route)."""
    from otlp.backend import native

    for (p, q), n in itertools.product(_rows(), (1, 2, 3, 8, 32)):
        order = ratio_order(p, q)
        got = native.prefix(p[None], q[None], order[None], n, reuse=True)
        if got is None:
            pytest.skip(f"native kernels not built: {native.reason()}")
        _, ref = sorted_prefix_psi(p, q, n)
        assert np.array_equal(got[4][0], ref), (p, q, n)
        assert int(got[5][0]) == int(np.argmin(ref))
    assert native.prefix(p[None], q[None], order[None], native.SLOT_MASS_MAX_N + 1) is None


def test_alpha_star_is_the_same_on_both_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    for (p, q), n in itertools.product(_rows()[::3], (1, 2, 4, 100)):
        draft = otlp.IID(q, n)
        value, mask = otlp.core.subsets.min_psi(p, draft)
        monkeypatch.setenv("OTLP_NATIVE", "0")
        value0, mask0 = otlp.core.subsets.min_psi(p, draft)
        monkeypatch.delenv("OTLP_NATIVE")
        assert value == value0 and np.array_equal(mask, mask0)
