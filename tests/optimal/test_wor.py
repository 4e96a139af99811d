"""The exact optimal rule for drafts sampled without replacement (otlp/optimal/wor.py): priority blocks with a Luce
choice in each, against enumeration, brute force over subsets and the relaxed LP.

* By enumeration of every ordered tuple at V <= 8, n <= 4 on every instance family of tests/optimal/instances.py
  (ties, zeros, point masses, p = q, near-ties): each slice is a distribution, the output law is p and the
  acceptance alpha* = 1 + min psi over all 2^V subsets, to 1e-12, every instance on the Luce route (none stalls
  into the relaxed LP).
* At V = 60 (n = 2) and V = 16 (n = 3): the same alpha* as the relaxed LP (to its tolerance) and as
  :func:`otlp.core.psi_wor.wor_optimal_acceptance` (a separate computation of alpha*: prefixes and quadrature).
* A block that stalls takes the LP, and the answer is still exact.
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.psi_wor import wor_optimal_acceptance
from otlp.core.subsets import brute_force_min_psi
from otlp.optimal import OptimalTransport
from otlp.optimal import wor as W
from otlp.optimal.generic import LinearProgramRule

from .instances import FAMILIES, draw
from .test_exact_enumeration import enumerate_rule
from .test_generic import check_rule

TOL = 1e-12


@pytest.mark.parametrize("n", [2, 3, 4])
def test_law_and_acceptance_by_enumeration(n: int) -> None:
    rng = np.random.default_rng(n)
    routes = []
    for family in sorted(FAMILIES):
        for _ in range(6):
            V = int(rng.integers(n + 1, 9 if n < 4 else 8))
            p, q = draw(family, rng, V, n)
            if np.count_nonzero(q) < n:
                continue
            draft = otlp.WithoutReplacement(q, n)
            ot = OptimalTransport(p, draft)
            routes.append(ot.route)
            check_rule(ot, p, draft)  # every slice a distribution, the law p to 1e-12
            _, acceptance = enumerate_rule(ot, draft)
            best, _ = brute_force_min_psi(p, draft)
            assert abs(acceptance - (1.0 + best)) < TOL, (family, V, ot.route, acceptance, 1 + best)
            # alpha: the plan's total, a certified lower bound within the Newton residual of alpha*
            assert ot.alpha <= acceptance + TOL and acceptance - ot.alpha < 10 * W.TOLERANCE
    print(f"n = {n}: {routes.count('luce')} of {len(routes)} instances on the Luce route")  # (pytest -s)
    assert routes.count("luce") == len(routes), routes  # every instance on the new route, none on the LP


@pytest.mark.parametrize(("V", "n", "zeros", "seed"), [(5, 2, 1, 0), (6, 3, 2, 1), (7, 2, 3, 2), (7, 3, 1, 3),
                                                       (8, 4, 3, 4), (6, 2, 4, 5)])
def test_the_rule_on_the_drafts_support_is_exact_on_every_token(V: int, n: int, zeros: int, seed: int) -> None:
    """Drafts with zeros where the target has mass (so OTHER carries the residual's share): the rule solved on the
    support plus OTHER (W.SupportRule) and read back on all V tokens has law p and acceptance 1 + min psi over all
    2^V subsets, to 1e-12, by enumeration of every tuple."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.full(V, 0.7))
    q[rng.choice(V, zeros, replace=False)] = 0.0
    draft = otlp.WithoutReplacement(q / q.sum(), n)
    ot = OptimalTransport(p, draft)
    assert isinstance(ot._lp, W.SupportRule) and ot._lp.live.size == V - zeros and ot.route == "luce"
    check_rule(ot, p, draft)
    _, acceptance = enumerate_rule(ot, draft)
    best, _ = brute_force_min_psi(p, draft)
    assert abs(acceptance - (1.0 + best)) < TOL


@pytest.mark.parametrize(("V", "n"), [(60, 2), (16, 3)])
def test_the_same_alpha_as_the_lp_and_as_psi_wor(V: int, n: int) -> None:
    rng = np.random.default_rng(V)
    for family in ("dirichlet", "heavy", "skewed_q"):
        p, q = FAMILIES[family](rng, V)
        draft = otlp.WithoutReplacement(q, n)
        ot = OptimalTransport(p, draft)
        lp = LinearProgramRule(p, draft)
        assert ot.route == "luce"
        assert abs(ot.alpha - lp.alpha) < 1e-9  # HiGHS' tolerance
        assert abs(ot.alpha - wor_optimal_acceptance(p, q, n)) < 1e-11
        assert ot.alpha <= ot.alpha_upper + 1e-15 and ot.alpha_upper - ot.alpha < 1e-12


def test_a_block_whose_newton_steps_stall_takes_the_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no Newton step allowed every block with a choice stalls: the rule is the relaxed LP's, still exact."""
    monkeypatch.setattr(W, "MAX_STEPS", 0)
    rng = np.random.default_rng(3)
    p, q = FAMILIES["dirichlet"](rng, 6)
    draft = otlp.WithoutReplacement(q, 3)
    ot = OptimalTransport(p, draft)
    assert ot.route == "lp"
    check_rule(ot, p, draft)
    _, acceptance = enumerate_rule(ot, draft)
    assert abs(acceptance - (1.0 + brute_force_min_psi(p, draft)[0])) < 1e-10


def test_the_blocks_luce_choice_meets_each_target() -> None:
    """The plan itself (before the completion): every token's accepted mass is its target x* (p, less the outer
    groups' residual psi_e - psi_s at their first position), the rows never exceed p, and the total is alpha*."""
    rng = np.random.default_rng(9)
    for _ in range(20):
        V, n = int(rng.integers(4, 8)), int(rng.integers(2, 4))
        p, q = FAMILIES["heavy"](rng, V)
        draft = otlp.WithoutReplacement(q, n)
        omegas, probs = draft.set_support()
        got = W._set_plan(p, q, omegas, probs)
        if got is None:
            continue
        alpha, choice, residual = got
        S = probs[:, None] * choice  # [U, n] the mass each set sends to each of its tokens
        accepted = np.bincount(omegas.ravel(), S.ravel(), V)
        assert residual <= W.TOLERANCE and (accepted <= p + 1e-12).all()
        assert (S.sum(1) <= probs + 1e-15).all()
        assert abs(alpha - (1.0 + brute_force_min_psi(p, draft)[0])) < 1e-11


def test_solve_batch_takes_the_rule_row_by_row() -> None:
    """solve_batch(..., scheme="without_replacement"): each row is that row's OptimalTransport (alpha, accept and
    reject of one drafted tuple per row, slices), and its draws follow each row's slice (chi-square, p > 1e-6)."""
    import scipy.stats

    from otlp.optimal import solve_batch

    rng = np.random.default_rng(12)
    B, V, n = 5, 7, 3
    P, Q = rng.dirichlet(np.ones(V), B), rng.dirichlet(np.full(V, 0.6), B)
    Q[:, 0] = 0.0  # a token the drafts never draw
    Q /= Q.sum(1, keepdims=True)
    batch = solve_batch(P, Q, n, scheme="without_replacement")
    w = np.stack([otlp.WithoutReplacement(Q[b], n).sample(1, rng)[0] for b in range(B)])  # [B, n]
    accept, reject = batch.rule(w)
    slices = batch.slices(w)  # [B, V]
    for b in range(B):
        ot = OptimalTransport(P[b], otlp.WithoutReplacement(Q[b], n))
        assert batch.alpha[b] == ot.alpha and batch[b].alpha == ot.alpha
        a1, r1 = ot.rule(w[b:b + 1])
        np.testing.assert_array_equal(accept[b], a1[0])
        assert reject[b] == r1[0]
        np.testing.assert_allclose(slices[b], ot.slice(w[b]), rtol=0, atol=1e-15)
    draws = np.stack([batch.sample(w, rng) for _ in range(4000)])  # [4000, B]
    for b in range(B):
        counts = np.bincount(draws[:, b], minlength=V)
        live = slices[b] > 0
        assert counts[~live].sum() == 0
        assert scipy.stats.chisquare(counts[live], 4000 * slices[b][live] / slices[b][live].sum()).pvalue > 1e-6
    with pytest.raises(otlp.core.errors.InputError, match="scheme must be"):
        solve_batch(P, Q, n, scheme="greedy")


def test_support_rules_share_a_cached_solve_only_for_the_same_instance() -> None:
    """Two targets equal on the draft's support and in their mass off it, spread differently off it: one inner solve
    (the cache), each its own residual on the tokens of q = 0 (as without the cache); a third target, different on
    the support, gets its own solve."""
    rng = np.random.default_rng(21)
    n = 2  # V = 9: five tokens of q > 0, four of q = 0
    q = np.r_[rng.dirichlet(np.ones(5)), np.zeros(4)]
    p1 = np.r_[rng.dirichlet(np.ones(5)) * 0.7, rng.dirichlet(np.ones(4)) * 0.3]
    p2 = np.r_[p1[:5], rng.dirichlet(np.ones(4)) * p1[5:].sum()]
    p3 = np.r_[rng.dirichlet(np.ones(5)) * 0.7, p1[5:]]
    cache: dict = {}
    rules = [W.SupportRule(p, q, n, cache) for p in (p1, p2, p3)]
    assert rules[0].inner is rules[1].inner and rules[2].inner is not rules[0].inner and len(cache) == 2
    for p, rule in zip((p1, p2, p3), rules, strict=True):
        alone = W.SupportRule(p, q, n)
        np.testing.assert_array_equal(rule.residual, alone.residual)
        assert rule.alpha == alone.alpha
    assert not np.array_equal(rules[0].residual, rules[1].residual)
