"""certify_multistep: its numbers against independent routes, and injected wrong rules caught.

Routes: the closed-form block efficiencies (tree recursions) vs the LP optimum from HiGHS (papers/002 Thm 3.4:
equal for BV) and vs E[length] of the enumerated output law; the prefix-matching check (the LP's separation
routine) vs brute force over every enumerated antichain; the node budgets vs the paper's Eq. 6 definition.
"""

import argparse
import json

import numpy as np
import pytest
import torch

from otlp.cli.multistep import add_multistep_arguments, run_multistep_cli
from otlp.core.errors import InputError
from otlp.lp.formulations.multipath import enumerate_antichains, psi
from otlp.multistep import RULES, gbv_efficiency, random_pair
from otlp.multistep.armodel import ARModel, depth_offsets, node_parents, num_nodes, prefix_nodes
from otlp.multistep.bv import block_verification_law
from otlp.multistep.certify import (
    MultiStepReport,
    budget_mass,
    certify_multistep,
    certify_output_law,
    format_multistep_table,
    prefix_matching_violation,
)
from otlp.multistep.enumeration import enumerate_drafts, output_law
from otlp.multistep.gbv import select_greedy_path

GAP_TOL = 1e-7  # HiGHS primal/dual feasibility tolerances are 1e-7 on these LPs


def _instances(seed: int, count: int):
    """Random (V, L, K, target, draft) small enough to enumerate V^(L K) draft tuples (<= 729)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        V = int(rng.integers(2, 4))
        L = int(rng.integers(1, 4)) if V == 2 else int(rng.integers(1, 3))
        K = int(rng.integers(2, 4)) if V**L <= 9 else 2
        while V ** (L * K) > 729:
            K -= 1
        target, draft = random_pair(V, L, rng, float(rng.choice([0.3, 1.0, 3.0])), float(rng.choice([0.0, 0.5])))
        yield V, L, K, target, draft


def test_bv_attains_the_single_path_lp_optimum_thm_3_4() -> None:
    for V, L, _, target, draft in _instances(0, 60):
        r = certify_multistep("bv", target, draft, L)
        where = f"V={V} L={L}"
        assert r.K == 1 and r.optimum is not None, where
        assert abs(r.gap) < GAP_TOL, (where, r)
        assert r.law_efficiency == pytest.approx(r.block_efficiency, abs=1e-12), where  # closed form vs enumeration
        assert r.preserves_target, (where, r.target_check)


def test_gbv_below_the_antichain_optimum_and_k1_is_bv() -> None:
    for V, L, K, target, draft in _instances(1, 60):
        where = f"V={V} L={L} K={K}"
        g = certify_multistep("gbv", target, draft, L, K)
        b = certify_multistep("bv", target, draft, L)
        assert g.K == K and g.optimum is not None and g.gap >= -GAP_TOL, (where, g)
        assert g.law_efficiency == pytest.approx(g.block_efficiency, abs=1e-12), where
        # OPT_LP(K) >= OPT_LP(1) = BV (more drafted paths never hurt the best rule; notes/gbv.md §7.9)
        assert g.optimum >= b.block_efficiency - GAP_TOL, where
        g1 = certify_multistep("gbv", target, draft, L, 1)
        assert g1.block_efficiency == pytest.approx(b.block_efficiency, abs=1e-12), where
        assert g1.optimum == pytest.approx(b.optimum, abs=GAP_TOL), where


def test_every_rule_preserves_the_target() -> None:
    count = 0
    for V, L, K, target, draft in _instances(2, 30):
        for rule in RULES:
            r = certify_multistep(rule, target, draft, L, K)
            where = f"{rule} V={V} L={L} K={K}"
            assert r.preserves_target is True, (where, r.target_check)
            assert r.target_matching_error < 1e-9 and r.prefix_matching_violation <= 1e-9, where
            assert r.block_efficiency <= r.optimum + GAP_TOL, where
            assert 1.0 <= r.block_efficiency <= L + 1 + 1e-12, where
            count += 1
    assert count == 30 * len(RULES)


def test_budget_mass_is_the_papers_node_budget_eq_6() -> None:
    # D(a_{1:i}) = 1 - sum_{j<=i} R(a_{1:j}) / p(a_{1:j}) (Eq. 6), accumulated along the parent chain
    rng = np.random.default_rng(5)
    target, draft = random_pair(3, 2, rng)
    L, V = 2, 3
    R = output_law("gbv", target, draft, L, 2)
    P = target.prefix_probabilities(L)
    parents = node_parents(V, L)
    D = np.empty(num_nodes(V, L))
    D[0] = 1.0
    for node in range(1, num_nodes(V, L)):  # parents come first in breadth-first numbering
        D[node] = D[parents[node]] - R[node] / P[node]
    np.testing.assert_allclose(budget_mass(R, V, L), D * P, atol=1e-14)


def _block_from_target_law(target: ARModel, L: int) -> np.ndarray:
    """The 'idealized' verifier that outputs a whole (L+1)-block from p: target-matching, NOT prefix-matching."""
    off = depth_offsets(target.V, L + 1)
    R = np.zeros(num_nodes(target.V, L + 1))
    R[off[L + 1] :] = target.prefix_probabilities(L + 1)[off[L + 1] :]
    return R


def test_prefix_matching_violation_matches_brute_force_over_antichains() -> None:
    rng = np.random.default_rng(7)
    found_violation = 0
    for _ in range(6):
        V, L = 2, 2
        target, draft = random_pair(V, L, rng)
        R = _block_from_target_law(target, L)
        mass, q_prefix = budget_mass(R, V, L), draft.prefix_probabilities(L)
        for K in (1, 2, 3):
            brute = max(float(mass[T].sum() - psi(q_prefix[T].sum(), K)) for T in enumerate_antichains(V, L))
            assert prefix_matching_violation(R, draft, L, K) == pytest.approx(max(brute, 0.0), abs=1e-12)
            found_violation += brute > 1e-6
    assert found_violation >= 6  # the check is not vacuous: the idealized law really violates caps


def test_target_matching_but_not_prefix_matching_is_refused() -> None:
    target, draft = random_pair(2, 2, np.random.default_rng(11))
    r = certify_output_law(_block_from_target_law(target, 2), target, draft, 2, 1, rule="idealized")
    assert r.target_matching_error < 1e-12  # it IS target-matching ...
    assert r.prefix_matching_violation > 1e-3 and r.preserves_target is False  # ... but leaves the drafted path
    assert r.block_efficiency == pytest.approx(3.0) and r.gap < 0  # above the optimum: no valid rule does that


def _gbv_law_with_plain_q(target: ARModel, draft: ARModel, L: int, K: int) -> np.ndarray:
    """Injected bug (notes/gbv.md §7.2): GBV selection, then BV with the ORIGINAL q instead of q^Gamma."""
    tokens, probs = enumerate_drafts(draft, L, K)  # [M, K, L], [M]
    p_paths, q_paths = target.on_path(tokens, L + 1), draft.on_path(tokens, L)
    M, V = tokens.shape[0], target.V
    rows = torch.arange(M)
    selected = select_greedy_path(tokens, p_paths, q_paths)
    path = tokens[rows, selected]
    tau_probs, corrections = block_verification_law(path, p_paths[rows, selected], q_paths[rows, selected])
    out_nodes = prefix_nodes(path, V)[..., None] * V + 1 + torch.arange(V)  # [M, L+1, V]
    mass = probs[:, None, None] * tau_probs[..., None] * corrections
    R = torch.zeros(num_nodes(V, L + 1), dtype=torch.float64)
    R.index_add_(0, out_nodes.reshape(-1), mass.reshape(-1))
    return R.numpy()


def test_injected_wrong_rules_fail() -> None:
    caught = 0
    for V, L, K, target, draft in _instances(13, 20):
        K = max(K, 2)
        if V ** (L * K) > 729:
            continue
        bad = certify_output_law(_gbv_law_with_plain_q(target, draft, L, K), target, draft, L, K, rule="gbv_plain_q")
        caught += bad.preserves_target is False
        # a perturbed law: move mass between two sibling outputs at depth L + 1 (still sums to 1, still >= 0)
        R = output_law("gbv", target, draft, L, K)
        off = depth_offsets(V, L + 1)
        leaf = off[L + 1] + V * int(np.argmax(R[off[L + 1] :].reshape(-1, V).sum(1)))  # a heavy sibling group
        eps = 0.5 * R[leaf]
        R[leaf] -= eps
        R[leaf + 1] += eps
        r = certify_output_law(R, target, draft, L, K, rule="perturbed")
        assert r.preserves_target is False and r.target_matching_error > 1e-6, r.target_check
    assert caught == 20  # plain q breaks target-matching on every one of these seeded instances (min error 7e-5)


def test_single_path_rules_are_certified_with_one_path() -> None:
    target, draft = random_pair(2, 2, np.random.default_rng(3))
    r = certify_multistep("sps", target, draft, 2, 3)
    assert r.K == 1 and any("one path" in n for n in r.notes)
    assert r.optimum == pytest.approx(certify_multistep("bv", target, draft, 2).block_efficiency, abs=GAP_TOL)
    d = r.to_dict()
    assert set(d) >= {"block_efficiency", "optimum", "gap", "preserves_target", "target_matching_error", "rule",
                      "L", "K", "V"}
    assert "block efficiency" in str(r) and isinstance(r, MultiStepReport)
    assert "sps" in format_multistep_table([r])


def test_bad_input_is_refused() -> None:
    target, draft = random_pair(2, 2, np.random.default_rng(4))
    with pytest.raises(InputError, match="unknown multi-step rule"):
        certify_multistep("spechub", target, draft, 2, 2)
    with pytest.raises(InputError, match="K"):
        certify_multistep("gbv", target, draft, 2, 0)
    with pytest.raises(InputError, match="depth"):
        certify_multistep("bv", target, draft, 3, 1)
    with pytest.raises(InputError, match="shape"):
        certify_output_law(np.zeros(5), target, draft, 2, 1)


def test_a_table_of_rules_solves_each_multipath_lp_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """certify_rules shares the multi-path LP optimum across rules: one solve for K = 1 (sps, bv) and one for K,
    and every row carries the same optimum as a rule certified on its own."""
    import io

    from otlp.cli.util import Progress
    from otlp.lp.formulations.multipath import MultiPathLP
    from otlp.multistep.certify import certify_rules

    target, draft = random_pair(2, 2, np.random.default_rng(5))
    alone = {rule: certify_multistep(rule, target, draft, 2, 2).optimum for rule in RULES}
    solves = []
    solve = MultiPathLP.solve

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN202
        solves.append(self.K)
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(MultiPathLP, "solve", counted)
    stream = io.StringIO()
    with Progress("otlp certify-block", stream=stream, force=True) as bar:
        reports = certify_rules(target, draft, 2, 2, progress=bar)
    assert sorted(solves) == [1, 2]
    assert {r.rule: r.optimum for r in reports} == pytest.approx(alone, abs=1e-12)
    text = stream.getvalue()
    assert f"{len(RULES) - 1}/{len(RULES)}" in text and "multi-path LP optimum (K = 2): round 1" in text


def test_a_rule_that_cannot_be_built_leaves_the_other_rows(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import otlp.multistep.optimal_rule as optimal_rule

    def fails(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise InputError("the Thm 4.6 LP did not converge")

    monkeypatch.setattr(optimal_rule, "optimal_k_path_rule", fails)
    assert run_multistep_cli(_cli("--rule", "all", "--V", "2", "--L", "2", "--K", "2")) == 0
    out = capsys.readouterr().out
    assert "not computed: the Thm 4.6 LP did not converge" in out
    assert all(rule in out for rule in RULES)
    with pytest.raises(InputError, match="did not converge"):  # asked alone, it is the command's error
        run_multistep_cli(_cli("--rule", "optimal", "--V", "2", "--L", "2", "--K", "2"))


def _cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_multistep_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_table_json_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_multistep_cli(_cli("--rule", "all", "--V", "2", "--L", "2", "--K", "2", "--seed", "1")) == 0
    out = capsys.readouterr().out
    for rule in RULES:
        assert rule in out
    assert "FAILED" not in out
    assert run_multistep_cli(_cli("--rule", "gbv", "--V", "2", "--L", "2", "--K", "2", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    (report,) = data["reports"]
    assert report["rule"] == "gbv" and report["K"] == 2 and report["preserves_target"] is True
    assert report["block_efficiency"] <= report["optimum"] + GAP_TOL
    for argv in (["--V", "1"], ["--L", "0"], ["--K", "0"], ["--rule", "nope"], ["--closeness", "1.5"]):
        with pytest.raises(InputError):
            run_multistep_cli(_cli(*argv))


def test_too_many_draft_tuples_leaves_the_law_unchecked_not_failed() -> None:
    # 12^(2*3) draft tuples is over the enumeration limit: the closed form still gives the efficiency, the law
    # check says "not checked" (None, never a silent True), and a time-limited LP reports no optimum with a reason
    target, draft = random_pair(12, 2, np.random.default_rng(8))
    r = certify_multistep("gbv", target, draft, 2, 3, time_limit=0.5)
    assert r.preserves_target is None and "not checked" in r.target_check
    assert r.block_efficiency == gbv_efficiency(target, draft, 2, 3) and r.law_efficiency is None
    if r.optimum is None:
        assert any("LP optimum" in n for n in r.notes) and r.gap is None
    else:
        assert r.gap >= -GAP_TOL


@pytest.mark.parametrize("argv", [["--seed", "-1"], ["--time-limit", "-1"], ["--time-limit", "0"],
                                  ["--time-limit", "nan"], ["--concentration", "inf"]])
def test_cli_refuses_bad_seed_and_time_limit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # a negative seed used to escape as numpy's ValueError; a negative time limit was accepted silently;
    # an infinite concentration failed later with a message about the conditionals
    with pytest.raises(InputError, match=argv[0]):
        run_multistep_cli(_cli(*argv))
    from otlp.cli.commands import main

    assert main(["certify-block", "--V", "2", "--L", "1", "--K", "1", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("otlp: error:") and argv[0] in err and "\n" not in err
