"""The scalar path (otlp.optimal.scalar): class chains of one small pair in Python floats.

Independent routes: the numpy class chains of solve_batch (otlp.optimal.class_batch, the same equations on [B, V]
arrays) position by position; exact enumeration over V^n through the scalar path's own single slice; the brute-force
alpha* (min psi over 2^V subsets) through check_exact.
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.optimal import OptimalTransport, chains
from otlp.optimal.scalar import SCALAR_MAX_V, scalar_chains

from .instances import FAMILIES, draw, small_instances
from .test_exact_enumeration import TOL

#: families without ties in q/p: there the class chain is unique, so every per-position quantity must agree. With
#: ties (equal ratios) a slot may have any length between the tied tokens (the equation for it is flat) and psi can
#: tie to the last ulp (numpy's SIMD log1p/expm1 round differently from libm's), so only psi, the targets and the
#: row sums are compared there, and only where both routes cut the same records.
UNTIED = ("dirichlet", "heavy", "point_mass_p", "point_mass_q", "skewed_q", "uniform_q", "zeros")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_same_chains_as_the_numpy_class_chains(n: int) -> None:
    """Per-position quantities against the array route (otlp.optimal.chains) on every family, V = 1..60."""
    rng = np.random.default_rng([50, n])
    same_records = 0
    for family in sorted(FAMILIES):
        for _ in range(6):
            V = int(rng.integers(1, 61))
            p, q = draw(family, rng, V, n) if V > 1 else (np.ones(1), np.ones(1))
            s = scalar_chains(p.tolist(), q.tolist(), n)
            b = chains.build(p[None], q[None], n)
            where = f"{family} V={V}"
            np.testing.assert_allclose(s.psi, b.pre.psi[0], rtol=0, atol=1e-15, err_msg=where)
            assert s.order == b.pre.order[0].tolist() and abs(s.alpha - b.pre.alpha[0]) <= 1e-15, where
            first = b.terms.first[0]
            if np.flatnonzero(first).tolist() != s.starts:
                assert family not in UNTIED, where
                continue
            same_records += 1
            np.testing.assert_allclose(s.t, b.terms.t[0], rtol=0, atol=1e-15, err_msg=where)
            np.testing.assert_allclose(s.rows, chains.row_sums(b)[0], rtol=0, atol=1e-14, err_msg=where)
            if family not in UNTIED:
                continue
            # slot lengths are differences of nearly equal class masses: relative rounding up to ~3e-11 was seen
            np.testing.assert_allclose(s.fire, b.terms.a[0], rtol=1e-9, atol=1e-13, err_msg=where)
            # hazards above a position = the group's total minus those at or below it; compared as the survival
            # factors e^-Lambda the rule uses (a slot of class mass ~1e-12 has a hazard ~25 set by rounding noise,
            # different in the two routes, whose survival factor is below 1e-10 in both)
            last = b.end[0] - 1
            np.testing.assert_allclose(np.exp(-np.array(s.lam_above)), np.exp(-(b.lam_low[0][last] - b.lam_low[0])),
                                       rtol=1e-9, atol=1e-13, err_msg=where)
            np.testing.assert_array_equal(s.certain_above, b.certain_low[0][last] - b.certain_low[0], err_msg=where)
            # beta = 1 - slack / capacity in both routes: slack is a difference of psi values (absolute rounding
            # ~1e-16), so on a group of capacity ~1e-7 beta carries ~1e-9 relative rounding, i.e. ~1e-16 of law; the
            # row sums above (what beta does to the law) agree to 1e-14
            np.testing.assert_allclose(s.beta, b.beta[0][first], rtol=1e-6, atol=1e-12, err_msg=where)
            np.testing.assert_allclose(np.exp(-np.array(s.total)), np.exp(-b.lam_low[0][last][first]), rtol=1e-9,
                                       atol=1e-13, err_msg=where)
    assert same_records >= 50  # of 66 (ties at n = 1 with p = q flatten psi: records may split differently)


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


def test_array_chains_above_scalar_max_v() -> None:
    rng = np.random.default_rng(53)
    p, q = FAMILIES["heavy"](rng, SCALAR_MAX_V + 1)
    ot = OptimalTransport.from_arrays(p, q, 2)  # the array class chains above SCALAR_MAX_V
    assert "_scalar" not in ot.__dict__ and "_ch" in ot.__dict__ and ot.success
    assert abs(ot.alpha - otlp.optimal_acceptance(p, otlp.IID(q, 2))) < 1e-15
    omegas = rng.choice(p.size, size=(4000, 2), p=q)
    accept, reject = ot.rule(omegas)
    np.testing.assert_allclose(accept.sum(1) + reject, 1.0, atol=1e-12)
    assert "route='class_chains'" in repr(ot)
