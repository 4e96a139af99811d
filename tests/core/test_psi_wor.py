"""alpha* for WithoutReplacement(q, n) by the sorted prefix and F on the prefixes (otlp.core.psi_wor), against
enumeration of the tuples, brute force over all 2^V subsets, and the relaxed OTLP solved by HiGHS."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import otlp
from otlp.core.drafts import WithoutReplacement
from otlp.core.errors import InputError
from otlp.core.psi import brute_force_min_psi, psi, ratio_order
from otlp.core.psi_wor import (
    _prefix_integral_numpy,
    prefix_subset_probability,
    wor_min_psi,
    wor_optimal_acceptance,
    wor_prefix_psi,
)
from otlp.optimal.generic import relaxed_lp_plan


def _family(rng: np.random.Generator, V: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) of one of the families: dirichlet, heavy (softmax of scaled normals), zeros, ties, point masses."""
    if kind == "dirichlet":
        return rng.dirichlet(np.ones(V) * rng.choice([0.2, 1.0, 4.0])), rng.dirichlet(np.ones(V))
    if kind == "heavy":
        z = rng.standard_normal(V)
        p = np.exp(3 * z)
        q = np.exp(2 * z + rng.standard_normal(V))
        return p / p.sum(), q / q.sum()
    if kind == "zeros" and V >= 4:
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        p[rng.choice(V, 2, replace=False)] = 0.0
        q[rng.choice(V, 1)] = 0.0
        return p / p.sum(), q / q.sum()
    if kind == "zeros":
        return rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    if kind == "ties":  # equal ratios and equal masses in exact binary fractions
        base = rng.integers(1, 4, size=V).astype(float)
        p = base / base.sum()
        perm = rng.permutation(V) if rng.random() < 0.5 else np.arange(V)
        q = base[perm] / base.sum()
        return p, q
    if kind == "point_p":
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
        return p, rng.dirichlet(np.ones(V))
    if kind == "point_q":  # q nearly a point mass: its heaviest token holds all but ~1e-9
        q = rng.dirichlet(np.ones(V)) * 1e-9
        q[rng.integers(V)] = 1.0
        return rng.dirichlet(np.ones(V)), q / q.sum()
    raise AssertionError(kind)


KINDS = ("dirichlet", "heavy", "zeros", "ties", "point_p", "point_q")


def _cases(seed: int, count: int, v_max: int = 10, n_max: int = 4):
    rng = np.random.default_rng(seed)
    for k in range(count):
        V = int(rng.integers(2, v_max + 1))
        n = int(rng.integers(1, min(n_max, V) + 1))
        p, q = _family(rng, V, KINDS[k % len(KINDS)])
        if np.count_nonzero(q) < n:
            continue
        yield p, q, n


def _enumerated_prefix_probability(draft: WithoutReplacement, order: np.ndarray) -> np.ndarray:
    omegas, probs = draft.support()
    rank = np.argsort(order)
    top = rank[omegas].max(axis=1)  # [M] the highest prefix position of each tuple
    return np.concatenate([[0.0], np.cumsum(np.bincount(top, weights=probs, minlength=draft.V))])


@pytest.mark.parametrize("seed", range(3))
def test_prefix_probability_matches_enumeration(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for p, q, n in _cases(seed, 60):
        draft = WithoutReplacement(q, n)
        order = rng.permutation(draft.V)  # any order: F on the prefixes does not need the ratio order
        exact = _enumerated_prefix_probability(draft, order)
        F, error = prefix_subset_probability(q[order], n)
        assert np.abs(F - exact).max() <= 1e-13, (p, q, n)
        assert error <= 1e-12


def test_numpy_route_matches_the_kernel() -> None:
    rng = np.random.default_rng(7)
    qs = rng.dirichlet(np.ones(40) * 0.3)
    r = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])
    s = np.linspace(-4, 700, 700 * 8)  # past the float range: t = tA tB
    tA, tB = np.exp(np.minimum(s, 600.0)), np.exp(s - np.minimum(s, 600.0))
    from otlp.backend import native

    got = native.wor_prefix(qs, r, 4, tA, tB, 0.125)
    if got is None:
        pytest.skip(f"native kernels not built: {native.reason()}")
    ref = _prefix_integral_numpy(qs, r, 4, tA, tB, 0.125)
    assert np.abs(got[0] - ref[0]).max() <= 1e-14
    assert np.abs(got[1] - ref[1]).max() <= 1e-14


@pytest.mark.parametrize("n", [3, 8])
def test_the_kernels_quadrature_is_the_numpy_routes_on_its_own_nodes(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """prefix_subset_probability on a heavy-tailed row of 3,000 tokens with its own nodes (every range of the
    kernel's per-token loops: the short series, the long series, the exponential, clocks surely rung), the C kernel
    against the numpy route: F and the error estimate to 1e-14."""
    from otlp.backend import native

    if native.library() is None:
        pytest.skip(f"native kernels not built: {native.reason()}")
    rng = np.random.default_rng(n)
    p, q = _family(rng, 3000, "heavy")
    qs = q[ratio_order(p, q)]
    got, err = prefix_subset_probability(qs, n)
    monkeypatch.setenv("OTLP_NATIVE", "0")
    ref, err_ref = prefix_subset_probability(qs, n)
    assert np.abs(got - ref).max() <= 1e-14
    assert abs(err - err_ref) <= 1e-14


SUBNORMAL_ROWS = (([0.1, 0.2, 0.3, 0.4], [1.0, 1e-320, 1e-320, 1e-320]),  # 1 - q_h subnormal
                  ([0.4, 0.3, 0.2, 0.1, 0.0], [0.5, 0.5, 0.0, 0.0, 0.0]))  # two heaviest tied at 1/2


def test_one_and_two_draft_kernel_is_the_numpy_route_bit_for_bit() -> None:
    """otlp_wor_closed_psi (psi.c), psi on every prefix at n = 1 and 2 and its first argmin after the sort, against
    sorted_prefix_psi, the numpy reference: the same bits, on every family, at V up to 4096 and on subnormal rows."""
    from otlp.backend import native
    from otlp.core.psi_wor import sorted_prefix_psi

    rng = np.random.default_rng(12)
    rows = [_family(rng, int(V), kind) for kind in KINDS for V in (2, 3, 7, 60, 4096)]
    rows += [(np.array(p), np.array(q)) for p, q in SUBNORMAL_ROWS]
    for (p, q), n in itertools.product(rows, (1, 2)):
        if np.count_nonzero(q) < n:
            continue
        order = ratio_order(p, q)
        got = native.wor_closed_psi(p, q, order, n)
        if got is None:
            pytest.skip(f"native kernels not built: {native.reason()}")
        ref, error = sorted_prefix_psi(p, q, order, n)
        assert error == 0.0
        assert np.array_equal(got[0], ref), (p, q, n)
        assert got[1] == ref.min() and got[2] == int(np.argmin(ref))
        _, _, at = native.wor_closed_psi(p, q, order, n, curve=False)
        assert at == got[2]


@pytest.mark.parametrize("seed", range(3))
def test_min_over_prefixes_is_the_brute_force_minimum(seed: int) -> None:
    for p, q, n in _cases(10 + seed, 60):
        draft = WithoutReplacement(q, n)
        value, mask = wor_min_psi(p, draft)
        brute, _ = brute_force_min_psi(p, draft)
        assert abs(value - brute) <= 1e-13, (p, q, n)
        assert abs(psi(p, draft, mask) - value) <= 1e-13  # the mask attains the value


@pytest.mark.parametrize(("p", "q", "n"), [
    ([0.0, 0.98094421, 0.01905579], [1.257e-320, 1.257e-320, 1.0], 3),  # found by tests/fuzz: 50 / r overflowed
    ([0.25, 0.25, 0.25, 0.25], [1.0, 1e-320, 1e-320, 1e-320], 3),  # clocks of a prefix past t = 1e308
    ([0.1, 0.2, 0.3, 0.4], [1.0, 1e-320, 1e-320, 1e-320], 2),
    ([0.4, 0.3, 0.2, 0.1, 0.0], [0.5, 0.5, 0.0, 0.0, 0.0], 2),
])
def test_subnormal_and_zero_masses(p: list, q: list, n: int) -> None:
    draft = WithoutReplacement(q, n)
    order = ratio_order(np.array(p), draft.q)
    F, _ = prefix_subset_probability(draft.q[order], n)
    assert np.abs(F - _enumerated_prefix_probability(draft, order)).max() <= 1e-13
    value, _ = wor_min_psi(p, draft)
    assert abs(value - brute_force_min_psi(np.array(p), draft)[0]) <= 1e-13


def test_tied_ratio_class_split_by_the_order_still_attains_the_minimum() -> None:
    # q = p: every ratio is 1, psi is >= 0 on every set (alpha* = 1), on every prefix of any tie order
    p = np.array([0.25, 0.25, 0.125, 0.125, 0.25])
    order, psi, _ = wor_prefix_psi(p, p, 3)
    assert psi.min() >= -1e-15
    assert wor_optimal_acceptance(p, p, 3) == pytest.approx(1.0, abs=1e-15)


def test_point_mass_target_accepts_when_its_token_is_drafted() -> None:
    # p = delta_a: alpha* = P(a among the n draws), by enumeration
    q = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    for a, n in itertools.product(range(5), (1, 2, 3, 4)):
        p = np.zeros(5)
        p[a] = 1.0
        draft = WithoutReplacement(q, n)
        omegas, probs = draft.support()
        included = probs[(omegas == a).any(axis=1)].sum()
        assert wor_optimal_acceptance(p, q, n) == pytest.approx(included, abs=1e-14)


@pytest.mark.parametrize(("V", "n", "seed"), [(6, 3, 0), (8, 2, 1), (7, 4, 2), (40, 2, 3), (60, 2, 4), (18, 3, 5)])
def test_optimal_acceptance_agrees_with_the_relaxed_lp(V: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    p, q = _family(rng, V, "heavy" if seed % 2 else "dirichlet")
    draft = WithoutReplacement(q, n)
    omegas, probs = draft.support()
    lp_value, _, _ = relaxed_lp_plan(p, omegas, probs)
    alpha = otlp.optimal_acceptance(p, draft)  # the fast route
    assert alpha == pytest.approx(wor_optimal_acceptance(p, q, n), abs=0)
    assert abs(alpha - lp_value) <= 1e-9  # HiGHS' tolerance


def test_subset_selection_sorted_prefix_takes_the_same_route() -> None:
    from otlp.lp.formulations.subset_selection import SubsetSelection

    rng = np.random.default_rng(3)
    p, q = _family(rng, 30, "heavy")
    draft = WithoutReplacement(q, 5)
    sol = SubsetSelection(p, draft).solve(method="sorted_prefix")
    value, mask = wor_min_psi(p, draft)
    assert sol.value == value and np.array_equal(sol.primal["H"], mask)


def test_quadrature_converges_at_a_large_vocabulary() -> None:
    # no enumeration at V = 4096: step h against h / 2, and the error estimate against that difference
    rng = np.random.default_rng(11)
    p, q = _family(rng, 4096, "heavy")
    for n in (3, 8):
        _, psi_h, err = wor_prefix_psi(p, q, n)
        _, psi_half, _ = wor_prefix_psi(p, q, n, step=0.0625)
        assert np.abs(psi_h - psi_half).max() <= max(1e-14, err)
        assert err <= 1e-10


def test_bad_input() -> None:
    with pytest.raises(InputError):
        prefix_subset_probability(np.array([0.5, 0.3, 0.2]), 3, step=0.0)
    with pytest.raises(InputError):
        wor_prefix_psi([0.5, 0.5, 0.0], [0.5, 0.5, 0.0], 3)  # fewer than n tokens with q > 0
    with pytest.raises(InputError):
        wor_prefix_psi([0.5, 0.5], [0.5, 0.3, 0.2], 2)  # lengths differ


def test_inputs_are_not_written() -> None:
    p = np.array([0.1, 0.6, 0.3])
    q = np.array([0.5, 0.3, 0.2])
    p0, q0 = p.copy(), q.copy()
    wor_prefix_psi(p, q, 2)
    prefix_subset_probability(q, 3)
    assert np.array_equal(p, p0) and np.array_equal(q, q0)


def _groups(psi: np.ndarray) -> np.ndarray:
    """The records of psi on the prefixes (0, m*, V, the strict prefix minima in [1, m*], the suffix minima, ties
    included, in [m*, V]) as sorted prefix indices (otlp.optimal.chains.records, for one row)."""
    V = psi.size - 1
    m_star = int(np.argmin(psi))
    rec = {0, m_star, V}
    rec |= {m for m in range(1, m_star + 1) if psi[m] < psi[:m].min()}
    rec |= {m for m in range(m_star, V) if psi[m] <= psi[m + 1:].min()}
    return np.array(sorted(rec))


@pytest.mark.parametrize("seed", range(4))
def test_serving_each_tuple_from_the_group_of_its_top_draw_loses_nothing(seed: int) -> None:
    """Evidence for the rule (module docstring): the relaxed OTLP with S[i, omega] = 0 unless token i lies in the
    group of omega's highest-positioned draw still reaches alpha* (HiGHS' tolerance)."""
    import scipy.optimize
    import scipy.sparse

    rng = np.random.default_rng(50 + seed)
    checked = 0
    for k in range(80):
        V = int(rng.integers(4, 8))
        n = int(rng.integers(2, min(4, V) + 1))
        p, q = _family(rng, V, ("dirichlet", "zeros", "heavy", "ties")[k % 4])
        if np.count_nonzero(q) < n:
            continue
        order, psi_prefix, _ = wor_prefix_psi(p, q, n)
        records = _groups(psi_prefix)
        if records.size < 3 or checked == 6:  # one group: the restriction is vacuous
            continue
        position = np.argsort(order)
        group = np.searchsorted(records, position, side="right") - 1  # [V] the group of each token
        omegas, probs = WithoutReplacement(q, n).support()
        served = group[omegas] == group[omegas].max(axis=1, keepdims=True)  # [M, n] (groups rise with position)
        if served.all():  # no tuple reaches two groups: vacuous
            continue
        checked += 1
        m_idx, k_idx = np.nonzero(served)
        K = m_idx.size
        A = scipy.sparse.csr_matrix((np.ones(2 * K), (np.concatenate([omegas[m_idx, k_idx], V + m_idx]),
                                                      np.concatenate([np.arange(K), np.arange(K)]))),
                                    shape=(V + probs.size, K))
        res = scipy.optimize.linprog(-np.ones(K), A_ub=A, b_ub=np.concatenate([p, probs]), bounds=(0, None),
                                     method="highs-ipm", options={"primal_feasibility_tolerance": 1e-10,
                                                                  "dual_feasibility_tolerance": 1e-10,
                                                                  "ipm_optimality_tolerance": 1e-12})
        assert res.status == 0
        assert abs(-res.fun - (1.0 + psi_prefix.min())) <= 1e-9
    assert checked == 6
