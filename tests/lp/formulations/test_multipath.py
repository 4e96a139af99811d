"""MultiPathLP (papers/002 Thm 3.3 / 4.3): antichain enumeration, the separation oracle, and the LP optimum
against independent routes (BV's closed form, a hand-built scipy LP, the L = 1 closed form)."""

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog

from otlp.core.errors import InputError
from otlp.lp.formulations.multipath import (
    MultiPathLP,
    count_antichains,
    enumerate_antichains,
    max_weight_antichain,
    most_violated_antichains,
    psi,
)
from otlp.multistep import bv_efficiency, gbv_efficiency, random_pair, sps_efficiency
from otlp.multistep.armodel import num_nodes
from otlp.multistep.efficiency import bv_budget_mass, greedy_skewed_prefix


def _is_prefix(a, b, V):  # node a is a proper prefix (ancestor) of node b
    while b > 0:
        b = (b - 1) // V
        if b == a:
            return True
    return False


def test_antichain_counts_match_the_recursion_and_the_note():
    # notes/gbv.md §2.2 counts include the empty antichain and {root}: V=2: 5, 26, 677; V=3: 9, 730
    for (V, L), with_empty_and_root in {(2, 1): 5, (2, 2): 26, (2, 3): 677, (3, 1): 9, (3, 2): 730}.items():
        assert count_antichains(V, L) == with_empty_and_root - 2
        found = enumerate_antichains(V, L)
        assert len(found) == count_antichains(V, L)
        assert len({tuple(sorted(t)) for t in found}) == len(found)
    for T in enumerate_antichains(2, 3):
        assert not any(_is_prefix(a, b, 2) for a in T for b in T if a != b)


def test_enumeration_is_refused_when_too_large():
    with pytest.raises(InputError, match="antichains"):
        enumerate_antichains(2, 4, limit=1000)


def test_max_weight_antichain_equals_brute_force():
    rng = np.random.default_rng(0)
    for V, L in [(2, 2), (2, 3), (3, 2)]:
        antichains = enumerate_antichains(V, L)
        for _ in range(20):
            w = rng.normal(size=num_nodes(V, L))
            value, T = max_weight_antichain(w, V, L)
            brute = max(0.0, max(w[t].sum() for t in antichains))
            assert value == pytest.approx(brute, abs=1e-12)
            assert w[T].sum() == pytest.approx(value, abs=1e-12)


def test_separation_finds_the_most_violated_antichain():
    # the Eisner-Severance search over tangents of psi is exact for positive violations (the empty antichain, value
    # 0, may hide negative ones, which separation does not need): compare with max over ALL antichains
    rng = np.random.default_rng(1)
    violated = 0
    for V, L in [(2, 2), (2, 3), (3, 2)]:
        antichains = enumerate_antichains(V, L)
        for K in (2, 3, 4):
            for _ in range(5):
                target, draft = random_pair(V, L, rng, concentration=0.5)
                q = draft.prefix_probabilities(L)
                mass = target.prefix_probabilities(L) * rng.uniform(0.3, 1.5, size=q.size)  # some D p
                brute = max(mass[t].sum() - psi(q[t].sum(), K) for t in antichains)
                found = most_violated_antichains(mass, q, V, L, K)
                assert max(found[0][0], 0.0) == pytest.approx(max(brute, 0.0), abs=1e-12)
                T = found[0][1]
                assert found[0][0] == pytest.approx(mass[T].sum() - psi(q[T].sum(), K), abs=1e-15)
                violated += brute > 1e-6
    assert violated >= 10  # the comparison was exercised on violated inputs


def _scipy_single_path_lp(target, draft, L):
    """Theorem 3.3 written out by hand with dense rows (an independent build of the K = 1 LP)."""
    V, n = target.V, num_nodes(target.V, L)
    p, q = target.prefix_probabilities(L), draft.prefix_probabilities(L)
    rows, rhs = [], []
    for node in range(1, n):
        row = np.zeros(n)
        row[node], row[(node - 1) // V] = 1.0, -1.0  # D(child) <= D(parent)
        rows.append(row)
        rhs.append(0.0)
        cap = np.zeros(n)
        cap[node] = p[node]  # D p <= q
        rows.append(cap)
        rhs.append(q[node])
    bounds = [(1.0, 1.0)] + [(0.0, None)] * (n - 1)
    res = linprog(-p, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs")
    assert res.status == 0
    return -res.fun


def test_single_path_lp_equals_bv_efficiency():
    # papers/002 Thm 3.4: BV is optimal among all valid single-path rules, off-path information included
    rng = np.random.default_rng(2)
    for _ in range(25):
        V = int(rng.integers(2, 4))
        L = int(rng.integers(1, 5 if V == 2 else 4))
        target, draft = random_pair(V, L, rng, concentration=float(rng.choice([0.3, 1.0])))
        value = MultiPathLP(target, draft, L, 1).solve().value
        assert value == pytest.approx(bv_efficiency(target, draft, L), abs=1e-8)
        assert value == pytest.approx(_scipy_single_path_lp(target, draft, L), abs=1e-8)
        assert value >= sps_efficiency(target, draft, L) - 1e-9


def test_k1_with_all_antichains_equals_singletons():
    rng = np.random.default_rng(3)
    target, draft = random_pair(2, 3, rng)
    full = MultiPathLP(target, draft, 3, 1, antichains="enumerate").solve().value
    assert full == pytest.approx(MultiPathLP(target, draft, 3, 1).solve().value, abs=1e-9)


def test_enumeration_and_constraint_generation_agree():
    rng = np.random.default_rng(4)
    cases = [(2, 2), (2, 3), (3, 1), (3, 2)]
    for V, L in cases:
        for K in (2, 3, 4):
            target, draft = random_pair(V, L, rng, concentration=float(rng.choice([0.3, 1.0])))
            enumerated = MultiPathLP(target, draft, L, K, antichains="enumerate").solve()
            generated = MultiPathLP(target, draft, L, K, antichains="generate").solve()
            assert generated.info["converged"] and generated.info["max_violation"] <= 1e-9
            assert enumerated.info["max_violation"] <= 1e-9
            assert generated.value == pytest.approx(enumerated.value, abs=1e-8)
            assert generated.info["antichain_rows"] <= enumerated.info["antichain_rows"]


def test_l1_optimum_matches_the_polymatroid_closed_form():
    # notes/gbv.md §4 [DERIVED]: for L = 1, OPT = 1 + min_{T subset V} [psi(T) + p(V \ T)]
    rng = np.random.default_rng(5)
    for V in (2, 3, 4):
        for K in (1, 2, 3):
            target, draft = random_pair(V, 1, rng, concentration=0.5)
            p, q = target.conditionals[0], draft.conditionals[0]
            closed = 1 + min(psi(q[list(T)].sum(), K) + p.sum() - p[list(T)].sum()
                             for r in range(V + 1) for T in itertools.combinations(range(V), r))
            assert MultiPathLP(target, draft, 1, K).solve().value == pytest.approx(closed, abs=1e-9)


def test_lp_bounds_gbv_and_grows_with_k():
    # safe invariants (notes/gbv.md §7.9): BV <= OPT(K) nondecreasing in K, GBV(K) <= OPT(K); GBV's own node
    # budgets are feasible for the antichain LP (Thm 4.3: every valid rule is)
    rng = np.random.default_rng(6)
    for V, L in [(2, 2), (2, 3), (3, 2)]:
        target, draft = random_pair(V, L, rng)
        antichains = enumerate_antichains(V, L)
        q = draft.prefix_probabilities(L)
        previous = bv_efficiency(target, draft, L)
        for K in (1, 2, 3, 4):
            opt = MultiPathLP(target, draft, L, K).solve(time_limit=30).value
            gbv = gbv_efficiency(target, draft, L, K)
            assert previous - 1e-9 <= opt and gbv <= opt + 1e-9
            previous = opt
            mass = bv_budget_mass(target, greedy_skewed_prefix(target, draft, L, K), L)  # D_GBV p
            worst = max(mass[t].sum() - psi(q[t].sum(), K) for t in antichains)
            assert worst <= 1e-12


def test_solution_carries_budgets_and_a_certificate():
    rng = np.random.default_rng(8)
    target, draft = random_pair(2, 2, rng)
    sol = MultiPathLP(target, draft, 2, 2).solve()
    D = sol.primal["D"]
    assert D[0] == pytest.approx(1.0) and np.all(D >= -1e-9) and np.all(D <= 1 + 1e-9)
    assert float(D @ target.prefix_probabilities(2)) == pytest.approx(sol.value, abs=1e-9)
    assert sol.certificate().ok


def test_bad_input():
    rng = np.random.default_rng(9)
    target, draft = random_pair(2, 2, rng)
    with pytest.raises(InputError, match="K"):
        MultiPathLP(target, draft, 2, 0)
    with pytest.raises(InputError, match="antichains"):
        MultiPathLP(target, draft, 2, 2, antichains="all")
    with pytest.raises(InputError, match="depth"):
        MultiPathLP(target, draft, 3, 2)
    other, _ = random_pair(3, 2, rng)
    with pytest.raises(InputError, match="vocabulary"):
        MultiPathLP(other, draft, 2, 2)


def test_backends_agree_and_certify():
    # the same IR through three LP backends, the exact one in rationals (independent arithmetic)
    rng = np.random.default_rng(10)
    target, draft = random_pair(2, 2, rng)
    values = {}
    for backend in ("highs", "cvxpy", "exact"):
        sol = MultiPathLP(target, draft, 2, 3, antichains="generate").solve(backend=backend)
        assert sol.info["converged"] and sol.certificate().ok
        values[backend] = float(sol.value)
    assert values["cvxpy"] == pytest.approx(values["highs"], abs=1e-8)
    assert values["exact"] == pytest.approx(values["highs"], abs=1e-9)
