"""The scalar path (otlp.optimal.scalar): class chains of one small pair in Python floats.

Independent routes: the numpy class chains (otlp.optimal.chains, the reference, and otlp.optimal.host, its C kernels)
position by position; exact enumeration over V^n through the scalar path's own single slice; the brute-force alpha*
(min psi over 2^V subsets) through check_exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import otlp
from otlp.backend import native
from otlp.optimal import OptimalTransport, chains, host
from otlp.optimal.scalar import SCALAR_MAX_V, scalar_chains, takes

from .instances import FAMILIES, draw, small_instances
from .test_exact_enumeration import TOL


def _numpy_pow_is_the_c_librarys() -> bool:
    """Whether numpy's float64 power is the C library's pow here (tests/backend/test_native.py: numpy's AVX512 builds
    dispatch it to SVML, whose last bit can differ); Python's math.pow is the C library's."""
    x = np.random.default_rng(0).random(4096) * 2.0
    return all(float(a) == math.pow(float(b), e) for e in (1 / 3, 1 / 4, 1 / 7) for a, b in zip(x**e, x, strict=True))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_same_chains_as_the_numpy_class_chains(n: int) -> None:
    """Per-position quantities against the array routes (the reference chains.build and host.build) on every family,
    ties included (rational ties, identical tokens, p = q, near-ties), V = 1..60: the same order, psi, records,
    targets, slot fire probabilities a_i, final acceptances and certain slots bit for bit (the same formulas on the
    same inputs, the roots by host.slot_mass as host.build's; against the reference's numpy roots to 1e-13 where
    numpy's power is not the C library's, which the kernel's Newton start calls, tests/backend/test_native.py); the row
    sums and the survival factors e^-Lambda, which the arrays accumulate in another order (a doubling scan, a cumulative
    sum of numpy's log1p), to 1e-15."""
    same_roots = native.library() is None or _numpy_pow_is_the_c_librarys()
    rng = np.random.default_rng([50, n])
    for family in sorted(FAMILIES):
        for _ in range(8):
            V = int(rng.integers(1, 61))
            p, q = draw(family, rng, V, n) if V > 1 else (np.ones(1), np.ones(1))
            s = scalar_chains(p.tolist(), q.tolist(), n)
            routes = (("reference", chains.build(p[None], q[None], n)), ("host", host.build(p[None], q[None], n)))
            for route, b in routes:
                where = f"{family} V={V} {route}"
                np.testing.assert_array_equal(s.psi, b.pre.psi[0], err_msg=where)
                assert s.order == b.pre.order[0].tolist() and s.alpha == b.pre.alpha[0], where
                first = b.terms.first[0]
                assert np.flatnonzero(first).tolist() == s.starts, where
                np.testing.assert_array_equal(s.t, b.terms.t[0], err_msg=where)
                if route == "host" or same_roots:
                    np.testing.assert_array_equal(s.fire, b.terms.a[0], err_msg=where)
                    np.testing.assert_array_equal(s.beta, b.beta[0][first], err_msg=where)
                else:
                    np.testing.assert_allclose(s.fire, b.terms.a[0], rtol=1e-13, atol=1e-16, err_msg=where)
                    np.testing.assert_allclose(s.beta, b.beta[0][first], rtol=1e-13, atol=1e-16, err_msg=where)
                last = b.end[0] - 1
                np.testing.assert_array_equal(s.certain_above, b.certain_low[0][last] - b.certain_low[0],
                                              err_msg=where)
                np.testing.assert_allclose(s.rows, chains.row_sums(b)[0], rtol=0, atol=1e-15, err_msg=where)
                # hazards above a position = the group's total minus those at or below it, compared as the survival
                # factors e^-Lambda the rule uses
                np.testing.assert_allclose(np.exp(-np.array(s.lam_above)),
                                           np.exp(-(b.lam_low[0][last] - b.lam_low[0])), rtol=0, atol=1e-15,
                                           err_msg=where)
                np.testing.assert_allclose(np.exp(-np.array(s.total)), np.exp(-b.lam_low[0][last][first]), rtol=0,
                                           atol=1e-15, err_msg=where)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_single_slice_is_exact_by_enumeration(n: int) -> None:
    """The scalar path's own slice (not the numpy rule): law = p and acceptance = alpha* over every tuple."""
    rng = np.random.default_rng([51, n])
    for family, p, q in small_instances(rng, n, per_family=4, max_tuples=1296):
        ot = OptimalTransport.from_arrays(p, q, n)
        assert ot.route == "class_chains" and "_ch" not in ot.__dict__
        omegas, probs = otlp.IID(q, n).enumerate()
        slices = np.stack([ot.slice(w) for w in omegas])  # [V^n, V]
        assert "_ch" not in ot.__dict__, "the single slice built the numpy arrays"
        accepted = (slices * (omegas[:, :, None] == np.arange(p.size)).any(1)).sum(1)
        where = f"{family} V={p.size}"
        assert np.abs(slices.sum(1) - 1).max() < TOL and slices.min() >= 0, where
        assert np.abs(probs @ slices - p).sum() < TOL, where
        assert abs(probs @ accepted - ot.alpha) < TOL, where
        assert abs(ot.alpha - otlp.optimal_acceptance(p, otlp.IID(q, n))) < TOL, where


def test_numpy_arrays_are_built_on_first_use_and_agree() -> None:
    rng = np.random.default_rng(52)
    p, q = FAMILIES["heavy"](rng, 12)
    ot = OptimalTransport.from_arrays(p, q, 3)
    omegas = rng.choice(12, size=(30, 3), p=q)
    single = np.stack([ot.slice(w) for w in omegas])
    assert "_ch" not in ot.__dict__
    np.testing.assert_allclose(ot.slices(omegas), single, rtol=0, atol=1e-15)
    assert "_ch" in ot.__dict__ and ot.success and ot.row_error <= 1e-12
    assert abs(ot.acceptance() - ot.alpha) < TOL
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ot.nope  # noqa: B018 - the lazy attributes do not swallow unknown names


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_array_chains_above_the_scalar_paths_range(n: int) -> None:
    """Past V = SCALAR_MAX_V the instance is built on arrays (host.build), and is exact."""
    rng = np.random.default_rng(53)
    V = SCALAR_MAX_V
    assert takes(V, n) and not takes(V + 1, n)
    p, q = FAMILIES["heavy"](rng, V + 1)
    ot = OptimalTransport.from_arrays(p, q, n)  # the array class chains
    assert "_scalar" not in ot.__dict__ and "_ch" in ot.__dict__ and ot.success
    assert abs(ot.alpha - otlp.optimal_acceptance(p, otlp.IID(q, n))) < 1e-15
    omegas = rng.choice(p.size, size=(4000, n), p=q)
    accept, reject = ot.rule(omegas)
    np.testing.assert_allclose(accept.sum(1) + reject, 1.0, atol=1e-12)
    assert "route='class_chains'" in repr(ot)
    assert "_scalar" in OptimalTransport.from_arrays(p[:V] / p[:V].sum(), q[:V] / q[:V].sum(), n).__dict__
