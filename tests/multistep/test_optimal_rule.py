"""The optimal K-path rule (issue 16): Thm 4.6's LP, the greedy-ranking decomposition, the sampler, the exact law.

Independent routes: the antichain LP of Thm 4.3 (``MultiPathLP``, a different LP over node budgets D with its own
separation) for the optimum; the target's own prefix marginals for target-matching; Eq. 19 re-evaluated from the
dense rank table, and the sampler's selection code run on every enumerated draft tuple, for the selection law;
a seeded chi-square test of the torch sampler against the exact law.
"""

import itertools

import numpy as np
import pytest
import torch

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.lp.formulations import MultiPathLP, SkewedDraftLP
from otlp.multistep import (
    bv_efficiency,
    certify_multistep,
    efficiency_from_law,
    gbv_efficiency,
    optimal_k_path_rule,
    output_law,
    random_pair,
    target_matching_error,
)
from otlp.multistep.enumeration import enumerate_drafts
from otlp.multistep.optimal_block import path_ranks
from otlp.multistep.optimal_rule import MAX_PATHS, check_size
from otlp.multistep.rankings import base_violation, decompose, project_into_base, vertex_values

from .stats import ALPHA, sampled_law_pvalue

LP_TOL = 1e-7  # both LPs stop at cap violations <= 1e-9; HiGHS runs at 1e-10 feasibility tolerances

# (V, L, K): V <= 4, L <= 4, K <= 4, chosen so that every LP converges in well under a second
SIZES = [(2, 2, 2), (2, 3, 3), (2, 4, 2), (2, 4, 4), (3, 2, 2), (3, 2, 4), (3, 3, 2), (3, 3, 3), (4, 2, 3), (4, 3, 4)]


def _random_instances():
    rng = np.random.default_rng(20260516)
    for V, L, K in SIZES:
        closeness = float(rng.choice([0.0, 0.5]))
        target, draft = random_pair(V, L, rng, concentration=float(rng.choice([0.5, 1.0])), closeness=closeness)
        yield f"random V={V} L={L} K={K}", target, draft, L, K


@pytest.fixture(scope="module")
def decode_instances():
    from otlp.cli.decode import DEFAULT_PROMPTS
    from otlp.decode.ngram import embedded_models, prompt_ids
    from otlp.multistep.from_lm import projected_pair

    models = embedded_models()
    contexts = prompt_ids(models.tokenizer, DEFAULT_PROMPTS)
    out = []
    for context, (V, L, K) in zip(contexts, [(3, 3, 2), (3, 4, 3), (4, 3, 2), (2, 4, 4)], strict=False):
        target, draft, _ = projected_pair(models.target, models.draft, context, V, L)
        out.append((f"decode V={V} L={L} K={K}", target, draft, L, K))
    return out


def _check_rule(where, target, draft, L, K):
    rule = optimal_k_path_rule(target, draft, L, K)
    R = rule.output_law(target)
    assert R[0] == 0.0 and np.all(R >= -1e-15), where
    assert abs(R.sum() - 1.0) < 1e-12, where
    assert target_matching_error(R, target, L) <= 1e-12, where
    assert efficiency_from_law(R, target.V, L) == pytest.approx(rule.block_efficiency, abs=1e-12), where
    antichain = MultiPathLP(target, draft, L, K).solve(time_limit=60)
    assert antichain.info["converged"], where
    assert rule.lp_value == pytest.approx(antichain.value, abs=LP_TOL), where
    assert rule.block_efficiency == pytest.approx(antichain.value, abs=LP_TOL), where
    # more than GBV and BV can do (both are K-path rules of the LP; GBV with K = 1 is BV)
    assert rule.block_efficiency >= gbv_efficiency(target, draft, L, K) - LP_TOL, where
    assert rule.block_efficiency >= bv_efficiency(target, draft, L) - LP_TOL, where
    assert rule.mixture.num_rankings <= target.V**L + 1, where
    return rule


def test_exact_law_and_antichain_optimum_on_random_models():
    for where, target, draft, L, K in _random_instances():
        _check_rule(where, target, draft, L, K)


def test_exact_law_and_antichain_optimum_on_decode_projected_models(decode_instances):
    for where, target, draft, L, K in decode_instances:
        _check_rule(where, target, draft, L, K)


def test_one_path_is_bv():
    rng = np.random.default_rng(3)
    for V, L in ((2, 3), (3, 2), (4, 2)):
        target, draft = random_pair(V, L, rng)
        rule = optimal_k_path_rule(target, draft, L, 1)
        assert rule.block_efficiency == pytest.approx(bv_efficiency(target, draft, L), abs=1e-12)
        np.testing.assert_allclose(rule.output_law(target), output_law("bv", target, draft, L), atol=1e-14)
        assert rule.mixture.num_rankings == 1


def test_selection_law_by_enumerating_draft_tuples_and_rankings():
    # the sampler's selection code (path_ranks), run for every ranking of the mixture on every K-tuple of drafts,
    # must give exactly the rule's q^Gamma; and each ranking's law must be Eq. 19 re-evaluated from the rank table
    rng = np.random.default_rng(8)
    for V, L, K in ((2, 2, 3), (3, 2, 2), (2, 3, 2)):
        target, draft = random_pair(V, L, rng)
        rule = optimal_k_path_rule(target, draft, L, K)
        m, tensors = rule.mixture, rule.tensors()
        table = m.rank_table()  # [M, N]
        q_leaf = draft.prefix_probabilities(L)[-V**L:]
        law = np.zeros(V**L)
        for w, ranks in zip(m.weights, table, strict=True):
            assert sorted(ranks) == list(range(V**L))  # a ranking: a permutation of the paths
            order = np.argsort(-ranks)
            vertex = np.empty(V**L)
            vertex[order] = vertex_values(q_leaf[order], K)
            law += w * vertex
        np.testing.assert_allclose(law, rule.leaf_law, atol=1e-14)
        tokens, probs = enumerate_drafts(draft, L, K)  # [T, K, L], [T]
        selected = np.zeros(V**L)
        leaf = (tokens * V ** torch.arange(L - 1, -1, -1)).sum(-1)  # [T, K]
        for j, w in enumerate(m.weights):
            u = torch.full((tokens.shape[0],), float(m.breaks[j]), dtype=torch.float64)
            best = path_ranks(tokens, tensors, u).argmax(-1)  # [T]
            np.add.at(selected, leaf[torch.arange(tokens.shape[0]), best].numpy(), w * probs.numpy())
        np.testing.assert_allclose(selected, rule.leaf_law, atol=1e-12)


@pytest.mark.parametrize("V,L,K,decode", [(3, 2, 3, False), (2, 3, 2, True)])
def test_sampler_matches_the_exact_law(V, L, K, decode, decode_instances):
    # seeded chi-square at level ALPHA = 1e-6 (a correct sampler fails with probability 1e-6; the seed is fixed)
    if decode:
        from otlp.decode.ngram import embedded_models
        from otlp.multistep.from_lm import projected_pair

        models = embedded_models()
        target, draft, _ = projected_pair(models.target, models.draft, [models.tokenizer.bos_id, 5], V, L)
    else:
        target, draft = random_pair(V, L, np.random.default_rng(11))
    assert sampled_law_pvalue("optimal", target, draft, L, K, size=60_000, seed=2) > ALPHA


def test_formulation_on_another_backend_and_through_certify():
    pytest.importorskip("pulp")
    target, draft = random_pair(3, 2, np.random.default_rng(5), closeness=0.3)
    highs = SkewedDraftLP(target, draft, 2, 3).solve()
    pulp = SkewedDraftLP(target, draft, 2, 3).solve("pulp")
    assert highs.info["converged"] and pulp.info["converged"]
    assert pulp.value == pytest.approx(highs.value, abs=1e-7)
    r = certify_multistep("optimal", target, draft, 2, 3)
    assert r.preserves_target is True and abs(r.gap) <= LP_TOL
    assert r.law_efficiency == pytest.approx(r.block_efficiency, abs=1e-12)


def test_decompose_random_points_of_the_base_polytope():
    rng = np.random.default_rng(2)
    for N, K in ((2, 2), (7, 3), (40, 2), (200, 4)):
        q = rng.dirichlet(np.full(N, 0.7))
        x = 0.3 * q  # q is in the relative interior of B(psi)
        for w in 0.7 * rng.dirichlet(np.ones(6)):
            order = rng.permutation(N)
            vertex = np.empty(N)
            vertex[order] = vertex_values(q[order], K)
            x += w * vertex
        assert base_violation(x, q, K) < 1e-14
        mix = decompose(x, q, K)
        assert mix.num_rankings <= N
        np.testing.assert_allclose(mix.law, x, atol=1e-14)
        assert mix.weights.min() > 0 and mix.weights.sum() == pytest.approx(1.0, abs=1e-15)


def test_project_into_base_takes_the_smallest_mix_with_q():
    rng = np.random.default_rng(4)
    q = rng.dirichlet(np.ones(12))
    x = rng.dirichlet(np.full(12, 0.2))  # far outside B(psi) for K = 2
    assert base_violation(x, q, 2) > 1e-3
    z, delta = project_into_base(x, q, 2)
    assert 0 < delta < 1 and base_violation(z, q, 2) <= 1e-14
    shy = (1 - (delta - 1e-6)) * x + (delta - 1e-6) * q
    assert base_violation(shy, q, 2) > 0  # a smaller mix is still outside


def test_too_many_paths_is_refused_with_its_size():
    with pytest.raises(ModelTooLargeError, match=f"{MAX_PATHS:,}"):
        check_size(10, 5)
    target, draft = random_pair(2, 2, np.random.default_rng(0))
    with pytest.raises(InputError, match="K"):
        optimal_k_path_rule(target, draft, 2, 0)


def test_registry_object():
    import otlp.verifiers as zoo

    v = zoo.get("optimal_block")
    assert (v.name, v.kind) == ("optimal_block", "multistep")
    target, draft = random_pair(3, 2, np.random.default_rng(6))
    rule = v.prepare(target, draft, 2, 2)
    assert v.block_efficiency(target, draft, 2, 2) == pytest.approx(rule.block_efficiency, abs=1e-12)
    tokens = draft.sample_paths(2, (64, 2), torch.Generator().manual_seed(0))
    p_paths, q_paths = target.on_path(tokens, 3), draft.on_path(tokens, 2)
    a = v.sample(tokens, p_paths, q_paths, torch.Generator().manual_seed(1), rule=rule)
    b = v.sample(tokens, p_paths, q_paths, torch.Generator().manual_seed(1), rule=rule.tensors())
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    assert bool((a.tau >= 0).all() and (a.tau <= 2).all())
    # outputs are prefixes of the selected draft
    with pytest.raises(InputError, match="prepare"):
        v.sample(tokens, p_paths, q_paths)
    with pytest.raises(InputError, match="K = 2"):
        v.sample(tokens[:, :1], p_paths[:, :1], q_paths[:, :1], rule=rule)


def test_duplicate_drafts_are_interchangeable():
    # K copies of one path: every ranking selects "it", whichever index
    target, draft = random_pair(2, 2, np.random.default_rng(9))
    rule = optimal_k_path_rule(target, draft, 2, 3).tensors()
    paths = torch.tensor(list(itertools.product(range(2), repeat=2)))  # [4, 2]
    drafts = paths[:, None, :].expand(4, 3, 2).contiguous()
    ranks = path_ranks(drafts, rule, torch.full((4,), 0.5, dtype=torch.float64))
    assert bool((ranks == ranks[:, :1]).all())


def test_cli_certify_block_rule_optimal(capsys):
    from otlp.cli.commands import main

    assert main(["certify-block", "--rule", "optimal", "--V", "2", "--L", "3", "--K", "3", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert "optimal" in out and "preserves target    yes" in out
    assert main(["certify-block", "--rule", "optimal", "--V", "20", "--L", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("otlp: error:") and "160,000 paths" in err and "\n" not in err
