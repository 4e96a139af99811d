"""psi on the sorted prefixes for i.i.d. drafts (otlp.core.psi): the C pass after the sort (``otlp_iid_psi`` in
otlp/backend/native/psi.c) against the numpy reference, bit for bit, and alpha* through either route."""

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
    """psi on every prefix, its minimum and first argmin: the same bits, every family, V = 1 to 5000, n = 1 to 64."""
    from otlp.backend import native

    for (p, q), n in itertools.product(_rows(), (1, 2, 3, 8, 64)):
        order = ratio_order(p, q)
        got = native.iid_psi(p, q, order, n)
        if got is None:
            pytest.skip(f"native kernels not built: {native.reason()}")
        _, ref = sorted_prefix_psi(p, q, n)
        assert np.array_equal(got[0], ref), (p, q, n)
        assert got[1] == ref.min() and got[2] == int(np.argmin(ref))
        assert native.iid_psi(p, q, order, n, curve=False)[1:] == got[1:]
    assert native.iid_psi(p, q, order, 65) is None  # past int_power's squaring: the numpy route


def test_alpha_star_is_the_same_on_both_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    for (p, q), n in itertools.product(_rows()[::3], (1, 2, 4, 100)):
        draft = otlp.IID(q, n)
        value, mask = otlp.core.subsets.min_psi(p, draft)
        monkeypatch.setenv("OTLP_NATIVE", "0")
        value0, mask0 = otlp.core.subsets.min_psi(p, draft)
        monkeypatch.delenv("OTLP_NATIVE")
        assert value == value0 and np.array_equal(mask, mask0)
