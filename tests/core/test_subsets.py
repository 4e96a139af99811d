"""psi and alpha*: every closed form against brute force over all 2^V subsets."""

from __future__ import annotations

from fractions import Fraction
from itertools import product

import numpy as np
import pytest

import otlp
from otlp.core.subsets import brute_force_min_psi, min_psi, psi, sorted_prefix_psi
from tests.conftest import FAMILIES, random_pair


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_sorted_prefix_equals_brute_force(family, n):
    rng = np.random.default_rng(n * 100 + FAMILIES.index(family))
    for _ in range(25):
        V = int(rng.integers(1, 8))
        p, q = random_pair(rng, V, family)
        draft = otlp.IID(q, n)
        fast, mask = min_psi(p, draft)
        slow, _ = brute_force_min_psi(p, draft)
        assert fast == pytest.approx(slow, abs=1e-14)
        assert psi(p, draft, mask) == pytest.approx(fast, abs=1e-14)


def test_psi_prefix_is_exact_on_the_zero_tail():
    # design note §4: the naive P_m - Q_m^n leaves ~1e-16 noise on a p = q = 0 tail; the suffix form gives 0.
    p = np.array([0.3, 0.7, 0.0, 0.0])
    q = np.array([0.6, 0.4, 0.0, 0.0])
    _, values = sorted_prefix_psi(p, q, 3)
    assert values[-1] == 0.0 and values[-2] == 0.0 and values[-3] == 0.0


@pytest.mark.parametrize("seed", range(10))
def test_greedy_and_spechub_closed_forms(seed):
    rng = np.random.default_rng(seed)
    for family in FAMILIES:
        V = int(rng.integers(3, 8))
        p, q = random_pair(rng, V, family)
        for n in (1, 2, 3):
            if np.count_nonzero(q) > n - 1 and q[np.argsort(-q, kind="stable")[n - 1:]].sum() > 0:
                draft = otlp.Greedy(q, n)
                assert min_psi(p, draft)[0] == pytest.approx(brute_force_min_psi(p, draft)[0], abs=1e-14)
        if np.count_nonzero(q) >= 2:
            draft = otlp.SpecHub(q)
            assert min_psi(p, draft)[0] == pytest.approx(brute_force_min_psi(p, draft)[0], abs=1e-14)


def test_spechub_worked_example():
    # SpecHub paper Fig. 5: q = (.5, .3, .2), p = (.1, .6, .3): the hub design accepts with probability 1,
    # alpha_SH = p(a) + sum_{x != a} min(p(x), q(x) / (1 - q(a))) = .1 + .6 + .3.
    p, q = [0.1, 0.6, 0.3], [0.5, 0.3, 0.2]
    assert otlp.optimal_acceptance(p, otlp.SpecHub(q)) == pytest.approx(1.0, abs=1e-15)
    # i.i.d. drafts: psi({a}) = .1 - .25 is the minimum, alpha* = 0.85.
    assert otlp.optimal_acceptance(p, otlp.IID(q, 2)) == pytest.approx(0.85, abs=1e-15)


def test_alpha_star_in_exact_rationals():
    # Independent route: psi in Fraction arithmetic over all subsets.
    p = [Fraction(1, 10), Fraction(6, 10), Fraction(3, 10)]
    q = [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)]
    for n in (1, 2, 3):
        best = min(sum(pi for pi, h in zip(p, H, strict=True) if h)
                   - sum(qi for qi, h in zip(q, H, strict=True) if h) ** n
                   for H in product([0, 1], repeat=3))
        assert otlp.optimal_acceptance([float(x) for x in p], otlp.IID([float(x) for x in q], n)) == pytest.approx(
            float(1 + best), abs=1e-15)


def test_n1_is_classic_speculative_sampling():
    rng = np.random.default_rng(7)
    for _ in range(50):
        p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
        assert otlp.optimal_acceptance(p, otlp.IID(q, 1)) == pytest.approx(np.minimum(p, q).sum(), abs=1e-14)


def test_passing_q_instead_of_a_scheme_is_explained():
    with pytest.raises(otlp.InputError, match=r"otlp.IID\(q, n\)"):
        otlp.optimal_acceptance([0.5, 0.5], [0.5, 0.5])


def test_large_v_other_schemes_use_subset_selection():
    # Above the brute-force limit, non-IID schemes go through SubsetSelection; check against the relaxed LP.
    from otlp.lp.formulations import RelaxedOTLP

    rng = np.random.default_rng(3)
    V = 24
    p = rng.dirichlet(np.ones(V))
    draft = otlp.Independent([rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))])
    value, mask = min_psi(p, draft)
    assert value == pytest.approx(RelaxedOTLP(p, draft).solve(backend="highs").value - 1.0, abs=1e-9)
    assert psi(p, draft, mask) == pytest.approx(value, abs=1e-12)


def test_psi_refuses_a_mask_of_the_wrong_length() -> None:
    with pytest.raises(otlp.InputError, match=r"mask must have shape \[V\] or \[K, V\] with V = 2"):
        psi([0.5, 0.5], otlp.IID([0.5, 0.5], 2), [True, False, True])


def test_psi_refuses_a_ragged_mask() -> None:
    with pytest.raises(otlp.InputError, match="mask must be a boolean array"):
        psi([0.5, 0.5], otlp.IID([0.5, 0.5], 2), [[True, False], [True]])
