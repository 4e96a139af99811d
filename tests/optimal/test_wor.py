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
        alpha, choice, residual = (a[0] for a in W.set_plan(p[None], q[None], omegas, probs[None]))
        if not np.isfinite(residual):
            continue
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


def _support_rows(rng: np.random.Generator, R: int, V: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """LM-like rows ``P, Q [R, V]``: p = softmax(3 z), a close draft filtered to its top k tokens; row 1 repeats row
    0, row 2's target is 0 off the support (no OTHER), row 3's masses are small integers, normalised (ties in q and
    in q/p)."""
    P = np.exp(3 * rng.standard_normal((R, V)))
    P /= P.sum(1, keepdims=True)
    noisy = P * np.exp(rng.standard_normal((R, V)))
    top = np.argsort(np.argsort(-noisy, axis=1), axis=1) < k  # [R, V] each row's top k
    Q = np.where(top, noisy, 0.0)
    P[1], Q[1] = P[0], Q[0]
    P[2] = np.where(top[2], P[2], 0.0)
    Q[3] = np.where(top[3], rng.integers(1, 4, V), 0.0)
    P[3] = np.where(top[3], rng.integers(1, 4, V), rng.integers(0, 2, V))
    return P / P.sum(1, keepdims=True), Q / Q.sum(1, keepdims=True)


@pytest.mark.parametrize(("k", "n"), [(6, 2), (7, 3), (6, 4)])
def test_the_batch_is_the_support_rule_row_by_row(k: int, n: int) -> None:
    """SupportBatch (every row's instance solved in one batch of Newton steps) against SupportRule on each row: the
    same accept probabilities for every drafted set in two slot orders and the same residual mass (1 - alpha times
    the law) on the support and OTHER, to 1e-10, on rows with ties, a repeated row and a row without OTHER (alpha*
    = 1 to rounding there: its residual law is rounding); a repeated instance is solved once."""
    rng = np.random.default_rng(k * n)
    P, Q = _support_rows(rng, 6, 40, k)
    batch = W.SupportBatch.from_rows(P, Q, n)
    assert batch.choice.shape[0] == 5  # rows 0 and 1: one instance
    sets = batch.live[:, batch.sets]  # [R, U, n] every drafted set of each row, as tokens
    for order in (np.arange(n), np.arange(n)[::-1]):
        drafts = sets[:, :, order]
        accept = np.stack([batch.accept(drafts[:, u]) for u in range(sets.shape[1])], 1)  # [R, U, n]
        for r in range(P.shape[0]):
            rule = W.SupportRule(P[r], Q[r], n)
            np.testing.assert_allclose(accept[r], rule.rule(drafts[r])[0], rtol=0, atol=1e-10)
            k_live, reject = rule.live.size, 1.0 - rule.alpha  # (the residual law weighs only that much)
            own = batch.residual(r) * reject
            np.testing.assert_allclose(own[:k_live], rule.residual[rule.live] * reject, rtol=0, atol=1e-10)
            assert abs(own[k_live] - rule.residual[rule._off].sum() * reject) < 1e-10


def test_a_batch_planned_in_chunks_is_the_batch_planned_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """BATCH_ENTRIES = 1: every instance planned in its own set_plan call (chunk bookkeeping, the accepted masses by
    chunk, a stalled row's index) gives the rule of one call over all instances, to 1e-12."""
    rng = np.random.default_rng(8)
    P, Q = _support_rows(rng, 6, 40, 7)
    whole = W.SupportBatch.from_rows(P, Q, 3)
    monkeypatch.setattr(W, "BATCH_ENTRIES", 1)
    chunked = W.SupportBatch.from_rows(P, Q, 3)
    drafts = whole.live[:, whole.sets[::7]].transpose(1, 0, 2)  # [sets, R, 3] every 7th set of each row
    for d in drafts:
        np.testing.assert_allclose(chunked.accept(d), whole.accept(d), rtol=0, atol=1e-12)
    for r in range(P.shape[0]):
        np.testing.assert_allclose(chunked.residual(r), whole.residual(r), rtol=0, atol=1e-12)


def test_a_batch_row_whose_newton_steps_stall_takes_the_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no Newton step allowed every row stalls: SupportBatch takes SupportRule (the relaxed LP) for each, so
    its rule is still that row's exact rule."""
    monkeypatch.setattr(W, "MAX_STEPS", 0)
    rng = np.random.default_rng(4)
    P, Q = _support_rows(rng, 4, 30, 6)
    batch = W.SupportBatch.from_rows(P, Q, 3)
    assert len(batch._fallback) == 3
    drafts = batch.live[:, [0, 2, 5]]
    for r in range(4):
        rule = W.SupportRule(P[r], Q[r], 3)
        assert rule.route == "lp"
        np.testing.assert_allclose(batch.accept(drafts)[r], rule.rule(drafts[r:r + 1])[0][0], rtol=0, atol=1e-10)
        reject = 1.0 - rule.alpha
        np.testing.assert_allclose(batch.residual(r)[:6] * reject, rule.residual[rule.live] * reject, atol=1e-10)


@pytest.mark.parametrize(("k", "n"), [(6, 2), (7, 3), (6, 4)])
def test_the_plan_on_tensors_is_the_plan_on_numpy(k: int, n: int) -> None:
    """set_plan on torch tensors (the sampler's static route: DEVICE_STEPS Newton steps of DEVICE_TRIALS step sizes,
    no early exit) gives the numpy plan's alpha and choices to 1e-12 on the support rows (ties, a repeated row, no
    OTHER), every row converged."""
    import torch

    from otlp.core.drafts import combinations, set_probabilities

    rng = np.random.default_rng(k + n)
    P, Q = _support_rows(rng, 6, 40, k)
    on = Q > 0
    live = np.nonzero(on)[1].reshape(6, k)
    rows = np.arange(6)[:, None]
    outside = np.where(on, 0.0, P).sum(1, keepdims=True)
    p1, q1 = np.concatenate([P[rows, live], outside], 1), np.concatenate([Q[rows, live], 0 * outside], 1)
    sets = combinations(k, n)
    want = W.set_plan(p1, q1, sets, set_probabilities(q1, sets))
    tp, tq, ts = torch.from_numpy(p1), torch.from_numpy(q1), torch.from_numpy(sets)
    got = W.set_plan(tp, tq, ts, set_probabilities(tq, ts))
    assert np.isfinite(want[2]).all() and torch.isfinite(got[2]).all()
    for a, b in zip(want[:2], got[:2], strict=True):
        np.testing.assert_allclose(b.numpy(), a, rtol=0, atol=1e-12)
