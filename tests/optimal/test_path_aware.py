"""The path-aware optimal rule (issue 18): law = p and acceptance = alpha* by enumeration of every drafted tuple, and
E[continuing paths] = the lexicographic LP's optimum (otlp.lp.formulations.PathAwareOTLP, ordered tuples, solved by
HiGHS and, on tiny instances, in exact rationals), never below the class-chain plan's.

Instances: the 11 families of tests/optimal/instances.py (ties, zeros, point masses, near-ties of psi...), V <= 6,
n = 2 and 3.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import otlp
from otlp.core.errors import InputError
from otlp.lp.formulations.path_aware import PathAwareOTLP
from otlp.optimal import OptimalTransport
from otlp.optimal.paths import (
    PathAwareTransport,
    TwoDraftPaths,
    continuing_paths,
    expected_paths,
    multiset_probabilities,
    multisets,
    two_draft_optimum,
    two_draft_tuple_rule,
    window_size,
)

from .instances import FAMILIES, draw

#: acceptance the LP may give up (HiGHS' feasibility tolerance is 1e-10 absolute; PathAwareOTLP.tol is 1e-9)
ACC_TOL = 1e-9
#: the law is p by construction (residual = (p - R) / (1 - sum R)): rounding only
LAW_TOL = 1e-12


def instances(seed: int, per_family: int, n: int, V_max: int = 6):
    rng = np.random.default_rng(seed)
    for family in sorted(FAMILIES):
        for _ in range(per_family):
            V = int(rng.integers(2, V_max + 1))
            yield family, *draw(family, rng, V, n)


def enumerate_rule(rule, q: np.ndarray, n: int) -> tuple[np.ndarray, float, float]:
    """(output law [V], acceptance, E[continuing paths]) over every ordered tuple of V^n, from the slices alone:
    E[paths] = sum_omega P(omega) sum_k pi(omega_k | omega) (each draft slot whose token is output continues)."""
    omegas, probs = otlp.IID(q, n).enumerate()
    slices = rule.slices(omegas)  # [V^n, V]
    rows = np.arange(omegas.shape[0])
    in_set = np.zeros_like(slices, dtype=bool)
    paths = np.zeros(omegas.shape[0])
    for k in range(n):
        in_set[rows, omegas[:, k]] = True
        paths += slices[rows, omegas[:, k]]
    return probs @ slices, float(probs @ np.where(in_set, slices, 0.0).sum(1)), float(probs @ paths)


@pytest.mark.parametrize("n", [2, 3])
def test_law_acceptance_and_paths_by_enumeration(n):
    """11 families x 100 instances per n (2200 in all): law = p, acceptance = alpha*, paths >= the class chains'."""
    checked = gained = 0
    for family, p, q in instances(18 + n, 100, n):
        rule = PathAwareTransport(p, q, n)
        assert rule.exact_window and rule.status == "optimal", family
        law, acceptance, paths = enumerate_rule(rule, q, n)
        assert np.abs(law - p).sum() <= LAW_TOL, family
        assert abs(acceptance - rule.alpha) <= ACC_TOL, (family, acceptance, rule.alpha)
        assert rule.alpha == pytest.approx(otlp.optimal_acceptance(p, otlp.IID(q, n)), abs=1e-12)
        base_law, base_acc, base_paths = enumerate_rule(rule.base, q, n)
        assert abs(base_acc - rule.alpha) <= 1e-12
        assert paths >= base_paths - ACC_TOL, family
        assert paths == pytest.approx(rule.lp_value, abs=1e-9)  # the slices' count is the rule's own account
        assert base_paths == pytest.approx(rule.base_value, abs=1e-12)
        if n == 2:  # the closed form (an independent route): alpha* + sum_a min(q_a^2, p_a)
            assert paths == pytest.approx(two_draft_optimum(p, q), abs=1e-9), family
        checked += 1
        gained += paths > base_paths + 1e-6
    assert checked == 1100
    assert gained > 100  # the second-order freedom is real: the class chains are not path-optimal


@pytest.mark.parametrize("n", [2, 3])
def test_equals_the_ordered_lexicographic_lp(n):
    """The multiset window LP (all tokens) reaches the optimum of PathAwareOTLP over ordered tuples (two stages)."""
    for family, p, q in instances(7 * n, 15, n):
        rule = PathAwareTransport(p, q, n)
        sol = PathAwareOTLP(p, otlp.IID(q, n)).solve("highs")
        assert sol.optimal and sol.info["alpha"] == pytest.approx(rule.alpha, abs=1e-9)
        assert sol.info["acceptance"] >= rule.alpha - 2e-9
        # the LP may trade up to tol = 1e-9 of acceptance: its count can exceed the rule's by a few tol at most
        assert rule.lp_value == pytest.approx(sol.value, abs=1e-7), family
        # the completed coupling of the ordered LP is a valid rule too: law p by GR eq. (3)
        f = PathAwareOTLP(p, otlp.IID(q, n), alpha=sol.info["alpha"])
        C = f.complete(f.solve("highs"))  # [V, M]
        assert np.abs(C.sum(1) - p).max() <= 1e-9


def test_exact_rationals_agree_with_highs():
    """Stage 2 in exact rational arithmetic (backend "exact") on tiny instances: the same optimum as HiGHS."""
    rng = np.random.default_rng(5)
    for _ in range(12):
        V, n = int(rng.integers(2, 5)), 2
        p = rng.integers(1, 6, V).astype(float)
        q = rng.integers(0, 6, V).astype(float)
        q[0] += 1
        p, q = p / p.sum(), q / q.sum()
        alpha = otlp.optimal_acceptance(p, otlp.IID(q, n))
        exact = PathAwareOTLP(p, otlp.IID(q, n), alpha=alpha).solve("exact")
        assert exact.optimal and isinstance(exact.value, Fraction)
        assert exact.certificate().ok
        assert float(exact.value) == pytest.approx(PathAwareTransport(p, q, n).lp_value, abs=1e-8)


def test_window_smaller_than_the_support():
    """A window of the top tokens only: still law p and acceptance alpha*; paths between the class chains' and the
    full optimum."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        V, n = int(rng.integers(6, 9)), int(rng.integers(2, 4))
        p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        small = PathAwareTransport(p, q, n, max_tuples=10)
        assert not small.exact_window and small.window.size == window_size(q, n, 10) < V
        law, acceptance, paths = enumerate_rule(small, q, n)
        assert np.abs(law - p).sum() <= LAW_TOL and abs(acceptance - small.alpha) <= ACC_TOL
        full = PathAwareTransport(p, q, n, max_tuples=200)
        assert full.exact_window
        assert small.base_value - ACC_TOL <= paths <= full.lp_value + ACC_TOL


def test_multisets_and_their_probabilities():
    q = np.array([0.5, 0.3, 0.2, 0.0])
    w = multisets(np.array([2, 0, 1]), 3)
    assert w.shape == (10, 3) and len({tuple(sorted(r)) for r in w.tolist()}) == 10
    assert multiset_probabilities(w, q).sum() == pytest.approx(1.0)
    omegas, probs = otlp.IID(q, 2).enumerate()
    base = OptimalTransport(np.array([0.1, 0.6, 0.3, 0.0]), otlp.IID(q, 2))
    accept, _ = base.rule(omegas)
    assert expected_paths(base, q, 2) == pytest.approx(float(probs @ continuing_paths(accept, omegas)))


def test_bad_input():
    with pytest.raises(InputError):
        PathAwareTransport([0.5, 0.5], [0.5, 0.5], 2, max_tuples=0)
    with pytest.raises(InputError):
        PathAwareTransport([0.5, 0.5], [0.5, 0.4], 2)


def test_the_per_token_bound_is_not_attained_beyond_two_drafts():
    """The n = 2 closed form's argument (each token's accepted mass from its highest-multiplicity tuples first) is
    only an upper bound at n = 3: on Dirichlet(0.5) instances the LP optimum falls strictly below it."""
    from math import comb

    rng = np.random.default_rng(11)
    below = 0
    for _ in range(30):
        V, n = 5, 3
        p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        rule = PathAwareTransport(p, q, n)
        bound = rule.alpha
        for a in range(V):
            left = p[a]
            for c in range(n, 0, -1):
                take = min(comb(n, c) * q[a] ** c * (1 - q[a]) ** (n - c), left)
                left -= take
                bound += (c - 1) * take
        assert rule.lp_value <= bound + 1e-9
        below += rule.lp_value < bound - 1e-6
    assert below >= 10


def test_the_registered_verifier_and_its_torch_sampler():
    """``get("optimal_paths")``: exact quantities from its plan (n = 2: TwoDraftPaths; n = 3: the LP), and the torch
    sampler draws what the plan's sampler draws with the same uniforms, at n = 1 what the optimal rule draws (its
    stream law in the decode loop: tests/decode/test_loop_law.py)."""
    import torch

    from otlp.optimal import chains as C
    from otlp.verifiers import get

    v = get("optimal_paths")
    p, q = np.array([0.1, 0.6, 0.3]), np.array([0.5, 0.3, 0.2])
    rng = np.random.default_rng(0)
    B = 64
    for n in (2, 3):
        draft = v.make_draft(q, n)
        assert v.acceptance(p, draft) == pytest.approx(0.85 if n == 2 else otlp.optimal_acceptance(p, draft), 1e-9)
        assert np.allclose(v.output_law(p, draft), p, atol=1e-12)
        drafts = rng.choice(3, size=(B, n), p=q)
        u = rng.random((B, 2))
        tokens, index = v.sample(torch.tensor(np.tile(p, (B, 1))), torch.tensor(np.tile(q, (B, 1))),
                                 torch.tensor(drafts), uniforms=torch.tensor(u))
        if n == 3:
            ref_tokens, ref_index = PathAwareTransport(p, q, n).sample(drafts, uniforms=u)
        else:  # the vectorised route draws over positions (chains.sample), as the optimal sampler does
            pre = C.prefix(np.tile(p, (B, 1)), np.tile(q, (B, 1)), 2)
            accept, reject = TwoDraftPaths(p, q).rule(drafts)
            ref_tokens, ref_index = C.sample(pre, accept, reject, drafts, u)
        assert tokens.tolist() == list(ref_tokens) and index.tolist() == list(ref_index)
        accepted = index.numpy() >= 0
        assert np.all(drafts[np.arange(B), np.maximum(index.numpy(), 0)][accepted] == tokens.numpy()[accepted])
    # n = 1: every alpha*-rule accepts with min(1, p/q) and keeps the one path, so the optimal rule's draws are used
    drafts = torch.tensor(rng.choice(3, size=(B, 1), p=q))
    u = torch.tensor(rng.random((B, 2)))
    P, Q = torch.tensor(np.tile(p, (B, 1))), torch.tensor(np.tile(q, (B, 1)))
    tokens, index = v.sample(P, Q, drafts, uniforms=u)
    ref_tokens, ref_index = get("optimal").sample(P, Q, drafts, uniforms=u)
    assert torch.equal(tokens, ref_tokens) and torch.equal(index, ref_index)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_two_draft_fast_rule_is_exact_and_path_optimal(backend):
    """n = 2 without an LP: law p, acceptance alpha*, E[paths] = the closed-form optimum, on the 11 families (550
    instances), and the vectorised pair rule (numpy or torch: the device code) gives TwoDraftPaths' probabilities."""
    import torch

    from otlp.optimal import chains as C

    for family, p, q in instances(31, 50, 2):
        rule = TwoDraftPaths(p, q)
        law, acceptance, paths = enumerate_rule(rule, q, 2)
        assert np.abs(law - p).sum() <= LAW_TOL, family
        assert abs(acceptance - rule.alpha) <= 1e-12, family
        assert paths == pytest.approx(two_draft_optimum(p, q), abs=1e-12), family
        omegas, _ = otlp.IID(q, 2).support()
        M = omegas.shape[0]
        P, Q, W = np.tile(p, (M, 1)), np.tile(q, (M, 1)), omegas
        if backend == "torch":
            P, Q, W = torch.tensor(P), torch.tensor(Q), torch.tensor(W)
        accept, reject = two_draft_tuple_rule(C.prefix(P, Q, 2), W, window=None if backend == "torch" else "auto")
        ref_accept, ref_reject = rule.rule(omegas)
        assert np.allclose(np.asarray(accept), ref_accept, atol=1e-12, rtol=0), family
        assert np.allclose(np.asarray(reject), ref_reject, atol=1e-12, rtol=0), family


def test_distinct_draft_schemes_have_nothing_to_gain():
    """Without replacement every draft is a distinct token, so each continuing path is one accepted draft: the
    lexicographic optimum is alpha* itself (the formulation takes any enumerable scheme)."""
    rng = np.random.default_rng(8)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
        draft = otlp.WithoutReplacement(q, 2)
        sol = PathAwareOTLP(p, draft).solve()
        assert sol.value == pytest.approx(otlp.optimal_acceptance(p, draft), abs=1e-8)
