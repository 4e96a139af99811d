"""FullOTLP, RelaxedOTLP, BetaProgram: structure, the maps back (coupling, residual completion GR eq. (3),
beta of GR Thm 4.1), the worked example, sizes and refusals, and error messages."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import otlp
from otlp.core.errors import InputError, ModelTooLargeError
from otlp.core.subsets import brute_force_min_psi
from otlp.lp.formulations import BetaProgram, FullOTLP, RelaxedOTLP
from otlp.lp.formulations.incidence import incidence_pairs
from tests.lp.formulations.lp_instances import instances

P_EXAMPLE, Q_EXAMPLE = [0.1, 0.6, 0.3], [0.5, 0.3, 0.2]
SOME = instances(per_scheme=2, seed=11)


# -- worked example (SpecHub paper; GR note) -------------------------------------------------------------------
@pytest.mark.parametrize(("draft", "alpha"), [(otlp.SpecHub(Q_EXAMPLE), 1.0),
                                              (otlp.WithoutReplacement(Q_EXAMPLE, 2), 1.0),
                                              (otlp.IID(Q_EXAMPLE, 2), 0.85)])
@pytest.mark.parametrize("formulation", [FullOTLP, RelaxedOTLP, BetaProgram])
def test_worked_example(formulation, draft, alpha):
    """q = (.5, .3, .2), p = (.1, .6, .3): alpha* = 1 for SpecHub and for WithoutReplacement(q, 2); 0.85 for IID
    (optimal_acceptance's doctest). (RRS-w's 0.94 is a verifier's acceptance, checked in tests/verifiers.)"""
    assert formulation(P_EXAMPLE, draft).solve(backend="highs").value == pytest.approx(alpha, abs=1e-12)
    assert otlp.optimal_acceptance(P_EXAMPLE, draft) == pytest.approx(alpha, abs=1e-12)


def test_required_api():
    """SPEC.md's spelling of the public API."""
    draft = otlp.IID(Q_EXAMPLE, 2)
    assert otlp.lp.formulations.FullOTLP(P_EXAMPLE, draft).solve(backend="highs").value == pytest.approx(0.85)


# -- structure ----------------------------------------------------------------------------------------------------
def test_incidence_pairs():
    omegas = np.array([[0, 0, 2], [1, 2, 1], [3, 3, 3]])
    tokens, cols = incidence_pairs(omegas, 4)
    assert list(zip(cols.tolist(), tokens.tolist(), strict=True)) == [(0, 0), (0, 2), (1, 1), (1, 2), (2, 3)]


def test_variables_only_on_the_support():
    draft = otlp.SpecHub([0.4, 0.3, 0.2, 0.1])  # 6 tuples of positive mass out of 16
    assert FullOTLP(P_EXAMPLE + [0.0], draft).build().blocks["C"].shape == (4, 6)
    relaxed = RelaxedOTLP([0.1, 0.6, 0.3, 0.0], draft).build()
    assert relaxed.num_variables == 12  # two distinct tokens in each of the 6 tuples
    assert relaxed.size() == RelaxedOTLP([0.1, 0.6, 0.3, 0.0], draft).size("linear")


@pytest.mark.parametrize("formulation", [FullOTLP, RelaxedOTLP, BetaProgram])
def test_size_is_known_before_building(formulation):
    for _, p, draft in SOME:
        f = formulation(p, draft)
        for kind in f.kinds:
            built = f.build(kind)
            assert f.size(kind) == built.size(), (formulation.name, kind)


def test_full_otlp_plan_is_an_optimal_coupling():
    for name, p, draft in SOME:
        f = FullOTLP(p, draft)
        s = f.solve(backend="highs")
        C = f.plan(s)
        np.testing.assert_allclose(C.sum(axis=1), p, atol=1e-9, err_msg=name)  # includes the dropped row
        np.testing.assert_allclose(C.sum(axis=0), f.probs, atol=1e-9, err_msg=name)
        assert (C * f.incidence()).sum() == pytest.approx(s.value, abs=1e-12)
        rule = f.verification_rule(s)
        np.testing.assert_allclose(rule.sum(axis=0), 1.0, atol=1e-8)


def test_transport_kind():
    f = FullOTLP(P_EXAMPLE, otlp.IID(Q_EXAMPLE, 2))
    t = f.build("transport")
    assert t.cost.shape == (3, 9) and t.value_offset == 1.0 and t.value_scale == -1.0
    np.testing.assert_array_equal(t.cost, ~f.incidence())
    # value of the LP optimum's coupling under the transport objective
    C = f.plan(f.solve(backend="highs"))
    assert t.value_offset + t.value_scale * float((t.cost * C).sum()) == pytest.approx(0.85, abs=1e-12)


def test_relaxed_network_structure():
    f = RelaxedOTLP(P_EXAMPLE, otlp.IID(Q_EXAMPLE, 2))
    net = f.build("network")
    V, M, K = 3, 9, f.pairs[0].size
    assert net.num_nodes == V + M + 2 and net.num_arcs == V + K + M
    np.testing.assert_array_equal(net.capacities[net.arc_blocks["source"]], f.p)
    assert np.all(np.isinf(net.capacities[net.arc_blocks["S"]]))
    np.testing.assert_array_equal(net.capacities[net.arc_blocks["sink"]], f.probs)


def test_residual_completion_is_an_optimal_coupling():
    """GR eq. (3): S* plus the product of the residuals over 1 - alpha* is an OTLP optimum."""
    for name, p, draft in SOME:
        f = RelaxedOTLP(p, draft)
        s = f.solve(backend="highs")
        C = f.complete(s)
        assert C.min() >= 0
        np.testing.assert_allclose(C.sum(axis=1), p, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(C.sum(axis=0), f.probs, atol=1e-9, err_msg=name)
        assert (C * f.incidence()).sum() == pytest.approx(s.value, abs=1e-9), name


def test_beta_program():
    for name, p, draft in SOME:
        bp = BetaProgram(p, draft)
        s = bp.solve(backend="highs")
        alpha = 1 + brute_force_min_psi(p, draft)[0]
        beta = bp.beta(s)
        np.testing.assert_allclose(beta.sum(axis=0), 1.0, atol=1e-9, err_msg=name)
        assert np.all(beta[~bp.incidence()] == 0)
        assert bp.output_law(beta).sum() == pytest.approx(1.0, abs=1e-9)
        assert bp.acceptance(beta) == pytest.approx(alpha, abs=1e-9), name
        # GR Thm 4.1: the beta built from a relaxed optimum is optimal too
        beta41 = bp.optimal_beta()
        np.testing.assert_allclose(beta41.sum(axis=0), 1.0, atol=1e-12)
        assert bp.acceptance(beta41) == pytest.approx(alpha, abs=1e-9), name


def test_beta_of_thm41_uses_uniform_on_empty_columns():
    bp = BetaProgram([1.0, 0.0, 0.0], otlp.IID([0.0, 0.5, 0.5], 2))  # S* = 0: no tuple holds token 0
    beta = bp.optimal_beta()
    assert bp.acceptance(beta) == 0.0
    for m, omega in enumerate(bp.omegas):
        distinct = set(omega.tolist())
        np.testing.assert_allclose(beta[list(distinct), m], 1 / len(distinct))


def test_exact_beta_is_rational():
    bp = BetaProgram(P_EXAMPLE, otlp.IID(Q_EXAMPLE, 2))
    beta = bp.beta(bp.solve(backend="exact"))
    assert beta.dtype == object and all(v == 1 for v in beta.sum(axis=0))


# -- sizes, refusals, errors ------------------------------------------------------------------------------------
def test_too_big_is_refused_with_its_size_before_building(monkeypatch):
    p = np.full(100, 0.01)
    f = FullOTLP(p, otlp.IID(p, 3))  # 10^8 variables
    monkeypatch.setattr(FullOTLP, "build", lambda self, kind=None: pytest.fail("built a model that was refused"))
    with pytest.raises(ModelTooLargeError, match=r"100,000,000 variables") as info:
        f.solve(backend="highs")
    assert info.value.size_bytes > info.value.limit_bytes
    with pytest.raises(ModelTooLargeError, match="RelaxedOTLP"):
        RelaxedOTLP(P_EXAMPLE, otlp.IID(Q_EXAMPLE, 2)).solve(backend="highs", memory_limit=1000)


def test_size_of_a_huge_draft_is_a_bound_without_enumeration():
    p = np.full(1000, 0.001)
    size = RelaxedOTLP(p, otlp.IID(p, 3)).size()  # 10^9 tuples: never enumerated
    assert size.variables == 3 * 10**9
    with pytest.raises(ModelTooLargeError):
        size.check("RelaxedOTLP")


def test_unknown_backend_and_kind():
    f = FullOTLP(P_EXAMPLE, otlp.IID(Q_EXAMPLE, 2))
    with pytest.raises(InputError, match="unknown backend 'gurobi'; expected one of"):
        f.solve(backend="gurobi")
    with pytest.raises(InputError, match="builds kinds"):
        f.build("network")
    with pytest.raises(InputError, match="builds kinds"):
        BetaProgram(P_EXAMPLE, otlp.IID(Q_EXAMPLE, 2)).size("transport")


def test_bad_input():
    with pytest.raises(InputError, match="expected a draft scheme"):
        FullOTLP(P_EXAMPLE, Q_EXAMPLE)
    with pytest.raises(InputError, match="length 2, expected 3"):
        RelaxedOTLP([0.5, 0.5], otlp.IID(Q_EXAMPLE, 2))
    with pytest.raises(InputError, match="negative"):
        BetaProgram([1.2, -0.2, 0.0], otlp.IID(Q_EXAMPLE, 2))


def test_exports_are_lazy():
    """Importing otlp.lp.formulations imports no formulation module; a name resolves on first use."""
    code = ("import sys, otlp.lp.formulations as F; assert 'otlp.lp.formulations.full' not in sys.modules; "
            "assert F.FullOTLP.__module__ == 'otlp.lp.formulations.full'; assert 'FullOTLP' in dir(F); "
            "assert F.BetaProgram.name == 'BetaProgram'")
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchFormulation'"):
        otlp.lp.formulations.NoSuchFormulation  # noqa: B018


def test_a_missing_module_fails_only_when_its_name_is_used(monkeypatch):
    import otlp.lp.formulations as F

    monkeypatch.setitem(F._MODULES, "NotWrittenYet", "otlp.lp.formulations.not_written_yet")
    assert F.FullOTLP is FullOTLP
    with pytest.raises(ModuleNotFoundError, match="not_written_yet"):
        F.NotWrittenYet  # noqa: B018
