"""otlp.optimal against independent routes: the relaxed LP (HiGHS), the batched path, and the LP route for
non-i.i.d. drafts."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.subsets import brute_force_min_psi
from otlp.optimal import OptimalTransport, solve_batch
from otlp.optimal.generic import relaxed_lp_plan

from .instances import FAMILIES
from .test_exact_enumeration import TOL, enumerate_rule


@pytest.mark.parametrize("V", [20, 50, 100])
def test_against_relaxed_lp(V: int) -> None:
    """alpha* vs the relaxed OTLP (GR eq. (2)) solved by HiGHS, n = 2, to the LP's own tolerance (its feasibility
    tolerances are 1e-10 in otlp.optimal.generic; 9e-13 was seen).
    The rule's row sums must also form a feasible relaxed-LP point: R <= p and total = alpha*."""
    rng = np.random.default_rng(V)
    for _ in range(4 if V == 100 else 6):
        p, q = FAMILIES["heavy"](rng, V)
        draft = otlp.IID(q, 2)
        value, _, _ = relaxed_lp_plan(p, *draft.support())
        ot = OptimalTransport(p, draft)
        assert abs(ot.alpha - value) < 1e-10
        assert np.all(ot.row_sums <= p + 1e-14)
        assert abs(ot.acceptance() - ot.alpha) < TOL
        assert ot.success


def test_batch_rows_are_exact_and_match_their_own_rules() -> None:
    rng = np.random.default_rng(4)
    B, V = 24, 30
    pairs = [FAMILIES["heavy"](rng, V) for _ in range(B)]
    P = np.stack([a for a, _ in pairs])
    Q = np.stack([b for _, b in pairs])
    batch = solve_batch(P, Q, 2)
    omegas = np.stack([rng.choice(V, size=2, p=q) for q in Q])
    slices = batch.slices(omegas)
    for b in range(B):
        single = OptimalTransport.from_arrays(P[b], Q[b], 2)
        assert abs(batch.alpha[b] - single.alpha) == 0.0
        # at V = 30 the single path builds the same class chains (scalar path): the same slices
        np.testing.assert_allclose(single.slice(omegas[b]), slices[b], rtol=0, atol=TOL)
        # the batch picks another optimal rule (class chains): row-wise slices agree with the batch's own
        # per-row rule, and every row is exact by enumeration
        np.testing.assert_allclose(slices[b], batch[b].slice(omegas[b]), atol=1e-12)
        law, acc = enumerate_rule(batch[b], otlp.IID(Q[b], 2))
        assert np.abs(law - P[b]).sum() < TOL and abs(acc - batch.alpha[b]) < TOL


@pytest.mark.parametrize("scheme", ["independent", "without_replacement", "greedy"])
def test_lp_route_for_other_drafts(scheme: str) -> None:
    """Non-i.i.d. drafts: exact through the relaxed LP; law = p, acceptance = alpha* = 1 + min psi (brute force)."""
    rng = np.random.default_rng(len(scheme))
    for _ in range(8):
        V, n = int(rng.integers(3, 7)), int(rng.integers(2, 4))
        p = rng.dirichlet(np.ones(V))
        if scheme == "independent":
            draft = otlp.Independent([rng.dirichlet(np.ones(V)) for _ in range(n)])
        elif scheme == "without_replacement":
            draft = otlp.WithoutReplacement(rng.dirichlet(np.ones(V)), n)
        else:
            draft = otlp.Greedy(rng.dirichlet(np.ones(V)), n)
        ot = OptimalTransport(p, draft)
        assert ot.route in (("luce", "lp") if scheme == "without_replacement" else ("lp",))
        law, acceptance = enumerate_rule(ot, draft)
        best, _ = brute_force_min_psi(p, draft)
        assert np.abs(law - p).sum() < 1e-12  # the completed plan keeps p exactly (otlp.lp.formulations.completion)
        assert abs(ot.alpha - (1 + best)) < 1e-10  # HiGHS' optimal value, to its tolerance
        assert abs(acceptance - ot.alpha) < 1e-10  # the repair may scale down what HiGHS left over a bound


def test_blocks_are_consistent() -> None:
    """Block records: inner blocks tile H*, outer blocks the rest; row sums meet the targets; outer R <= p."""
    rng = np.random.default_rng(12)
    for _ in range(30):
        V, n = int(rng.integers(5, 40)), int(rng.integers(2, 4))
        p, q = FAMILIES["heavy"](rng, V)
        ot = OptimalTransport.from_arrays(p, q, n)
        inner = [b for b in ot.blocks if b.kind == "inner"]
        covered = np.concatenate([b.tokens for b in inner]) if inner else np.array([], dtype=int)
        assert sorted(covered.tolist()) == sorted(ot.h_star.tolist())
        assert sum(b.size for b in ot.blocks) == V
        for b in ot.blocks:
            if b.kind == "inner":
                np.testing.assert_allclose(b.row_sums, p[b.tokens], atol=1e-13)
            else:
                assert np.all(b.row_sums <= p[b.tokens] + 1e-14)
            assert b.row_error <= 1e-12


def test_bad_input() -> None:
    p = np.array([0.5, 0.5])
    with pytest.raises(otlp.InputError, match="sums to"):
        OptimalTransport.from_arrays([0.5, 0.6], p, 2)
    with pytest.raises(otlp.InputError, match="length"):
        OptimalTransport.from_arrays(p, [0.2, 0.3, 0.5], 2)
    with pytest.raises(otlp.InputError, match="n must be"):
        OptimalTransport.from_arrays(p, p, 0)
    with pytest.raises(otlp.InputError, match="top_k"):
        OptimalTransport.from_arrays(p, p, 2, top_k=0)
    ot = OptimalTransport.from_arrays(p, p, 2)
    with pytest.raises(otlp.InputError, match="shape"):
        ot.slice([0, 1, 1])
    with pytest.raises(otlp.InputError, match="lie in"):
        ot.slice([0, 2])
    with pytest.raises(otlp.InputError, match="shape"):
        solve_batch(p[None], np.ones((2, 2)) / 2, 2)


def test_batch_checks_its_tuples_like_the_single_path() -> None:
    """TransportBatch.rule / slices / sample refuse what OptimalTransport refuses (they used to cast, wrap
    negative ids round and return token -1)."""
    batch = solve_batch(np.array([[0.1, 0.6, 0.3]]), np.array([[0.5, 0.3, 0.2]]), 2)
    rng = np.random.default_rng(0)
    for bad, match in (([[0, -1]], "lie in"), ([[0, 3]], "lie in"), ([[0.9, 1.7]], "integer"), ([[0, 1, 2]], "shape")):
        for call in (batch.rule, batch.slices, lambda w: batch.sample(w, rng)):
            with pytest.raises(otlp.InputError, match=match):
                call(bad)
    with pytest.raises(otlp.InputError, match="empty batch"):
        solve_batch(np.zeros((0, 3)), np.zeros((0, 3)), 2)


def test_a_rejection_whose_residual_rounds_to_zero_still_draws_a_token() -> None:
    """p = [1, 0], q = [1 - 2e-6, 2e-6], n = 3: the tuple (1, 1, 1) is rejected and the true residual mass p - R is
    eps^3 ~ 8e-18, which rounds to 0. The residual then falls back to p (as the LP route's completion does), so
    the slice is a distribution and no p = 0 token is drawn."""
    p, q = np.array([1.0, 0.0]), np.array([1 - 2e-6, 2e-6])
    ot = OptimalTransport.from_arrays(p, q, 3)
    np.testing.assert_allclose(ot.slice([1, 1, 1]), [1.0, 0.0])
    assert ot.residual.sum() == 1.0
    assert (ot.sample(np.array([[1, 1, 1]] * 50), np.random.default_rng(0)) == 0).all()
    batch = solve_batch(p[None], q[None], 3)
    np.testing.assert_allclose(batch.slices([[1, 1, 1]]), [[1.0, 0.0]])
    assert batch.sample([[1, 1, 1]], np.random.default_rng(0)).tolist() == [0]


def test_tiny_mass_blocks_are_certified() -> None:
    """A 2-token outer block with targets ~1e-11 and ~1e-18 (benchmark generator, V = 1000, pair 8; it once sent a
    Newton solver chasing a relative tolerance below rounding): the rule is certified, inner rows = p, outer
    rows <= p, acceptance = alpha*."""
    rng = np.random.default_rng([0, 1000, 2])
    pairs = [FAMILIES["heavy"](rng, 1000) for _ in range(9)]
    p, q = pairs[8]
    ot = OptimalTransport.from_arrays(p, q, 2)
    assert ot.success
    for b in ot.blocks:
        if b.kind == "inner":
            np.testing.assert_allclose(b.row_sums, p[b.tokens], atol=1e-13)
        else:
            assert np.all(b.row_sums <= p[b.tokens] + 1e-14)
    assert abs(ot.acceptance() - ot.alpha) < TOL
