"""otlp.optimal.generic.LinearProgramRule (the LP route of OptimalTransport for non-i.i.d. drafts) on plans a solver
may leave behind: every slice must be a distribution and the output law p to rounding, whatever HiGHS returned
(the residual completion of GR eq. (3), otlp.lp.formulations.completion)."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
import otlp.optimal.generic as generic
from otlp.core.drafts import DraftScheme
from otlp.optimal import OptimalTransport

LAW_TOL = 1e-12  # L1 distance of the output law to p: rounding only, not HiGHS' feasibility tolerance


def check_rule(ot: OptimalTransport, p: np.ndarray, draft: DraftScheme) -> None:
    """Every slice pi(. | omega) on the support is a distribution (accept >= 0, reject >= 0, residual a law,
    sum_k accept + reject = 1) and sum_omega P(omega) pi(. | omega) = p to LAW_TOL."""
    omegas, probs = draft.support()  # [M, n], [M]
    accept, reject = ot.rule(omegas)  # [M, n], [M]
    assert accept.min() >= 0.0 and reject.min() >= 0.0, "a negative accept or reject probability"
    assert ot.residual.min() >= 0.0, "a negative residual entry"
    assert abs(ot.residual.sum() - 1.0) < 1e-14, f"the residual sums to {ot.residual.sum()!r}"
    assert np.abs(accept.sum(1) + reject - 1.0).max() < 1e-12, "accept + reject != 1 for some tuple"
    slices = ot.slices(omegas)  # [M, V]
    assert slices.min() >= 0.0
    assert np.abs(slices.sum(1) - 1.0).max() < 1e-12, "a slice does not sum to 1"
    law = probs @ slices  # [V]
    assert np.abs(law - p).sum() < LAW_TOL, f"output law off p by {np.abs(law - p).sum():.3g} in L1"


def test_light_tuple_with_no_residual_rejects_into_a_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows use all of p (sum p_res = 0 exactly) while a tuple of probability 1e-20 carries no flow: its slice is
    all rejection and must draw from a law (w = p), not from a zero vector."""
    p = np.array([0.5, 0.5])
    draft = otlp.Joint([[0.5, 1e-20], [0.0, 0.5]])

    def plan(p: np.ndarray, omegas: np.ndarray, probs: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        S = np.zeros(omegas.shape)  # [M, n]: (i, i) sends P(omega) from i, (0, 1) carries nothing
        diag = omegas[:, 0] == omegas[:, 1]
        S[diag, 0] = probs[diag]
        return 1.0, S, np.zeros(omegas.shape, dtype=np.int64)

    monkeypatch.setattr(generic, "relaxed_lp_plan", plan)
    ot = OptimalTransport(p, draft)
    assert ot.route == "lp"
    check_rule(ot, p, draft)
    np.testing.assert_allclose(ot.slice([0, 1]), p, atol=1e-15)


def test_slightly_infeasible_plan_is_repaired(monkeypatch: pytest.MonkeyPatch) -> None:
    """HiGHS' plan perturbed as its tolerance allows: a row above p by 1e-9 and a negative entry (-1e-12).
    The rule must still be a coupling of p and the draft (law = p to rounding)."""
    original = generic.relaxed_lp_plan
    rng = np.random.default_rng(3)
    for scheme in ("without_replacement", "independent"):
        V, n = 5, 2
        p = rng.dirichlet(np.ones(V))
        if scheme == "independent":
            draft = otlp.Independent([rng.dirichlet(np.ones(V)) for _ in range(n)])
        else:
            draft = otlp.WithoutReplacement(rng.dirichlet(np.ones(V)), n)

        def plan(p: np.ndarray, omegas: np.ndarray, probs: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
            alpha, S, var = original(p, omegas, probs)  # S [M, n]
            S = S.copy()
            rows = np.bincount(omegas.ravel(), S.ravel(), p.size)  # [V]
            i = int(np.argmax(rows - p))  # the tightest row
            m, k = np.argwhere(omegas == i)[0]
            S[m, k] += p[i] - rows[i] + 1e-9  # row i = p(i) + 1e-9
            free = np.argwhere((omegas != i) & (var >= 0))
            m2, k2 = free[np.argmax(S[free[:, 0], free[:, 1]])]
            S[m2, k2] = -1e-12  # a negative entry (and its row and column short)
            return alpha, S, var

        monkeypatch.setattr(generic, "relaxed_lp_plan", plan)
        ot = OptimalTransport(p, draft)
        check_rule(ot, p, draft)
        monkeypatch.setattr(generic, "relaxed_lp_plan", original)


@pytest.mark.parametrize("scheme", ["independent", "without_replacement", "greedy", "spechub", "joint"])
def test_lp_route_law_is_p_to_rounding(scheme: str) -> None:
    """Unperturbed HiGHS plans: slices are distributions and the law is p to 1e-12 (not HiGHS' tolerance);
    the acceptance is alpha* to the LP's tolerance (HiGHS' feasibility tolerances, set to 1e-10 in
    otlp.optimal.generic: the repair scales down what a column or row held above its bound; 2e-14 was seen)."""
    rng = np.random.default_rng([7, len(scheme)])
    for _ in range(6):
        V = int(rng.integers(3, 7))
        n = 2 if scheme == "spechub" else int(rng.integers(2, 4))
        p = rng.dirichlet(np.ones(V))
        q = rng.dirichlet(np.ones(V))
        if scheme == "independent":
            draft = otlp.Independent([rng.dirichlet(np.ones(V)) for _ in range(n)])
        elif scheme == "without_replacement":
            draft = otlp.WithoutReplacement(q, n)
        elif scheme == "greedy":
            draft = otlp.Greedy(q, n)
        elif scheme == "spechub":
            draft = otlp.SpecHub(q)
        else:
            draft = otlp.Joint(rng.dirichlet(np.ones(V**n) * 0.3).reshape((V,) * n))
        ot = OptimalTransport(p, draft)
        assert ot.route in (("luce", "lp") if scheme == "without_replacement" else ("lp",))
        check_rule(ot, p, draft)
        assert abs(ot.acceptance() - ot.alpha) < 1e-10


def test_degenerate_independent_drafts_with_a_draft_equal_to_p() -> None:
    """Independent drafts whose first draft is p itself (alpha* = 1, a very degenerate LP: dual simplex took 20 min at
    V = 300, the interior point 27 s; here V = 40): alpha* = 1, every tuple is accepted, and the law is p by
    enumeration."""
    rng = np.random.default_rng(12)
    p = rng.dirichlet(np.ones(40))
    draft = otlp.Independent([p, rng.dirichlet(np.ones(40))])
    ot = OptimalTransport(p, draft)
    assert ot.route == "lp" and abs(ot.alpha - 1.0) < 1e-12
    check_rule(ot, p, draft)
    omegas, _ = draft.support()
    _, reject = ot.rule(omegas)
    assert reject.max() < 1e-9  # rejection only to HiGHS' feasibility tolerance


def test_tuple_codes_past_int64_are_the_rows_bytes() -> None:
    """encode_tuples: int64 codes while k^n < 2^63, else byte keys; either way equal tuples get equal keys, distinct
    ones distinct keys (so the rule's lookup finds each tuple's own row), and a token outside ``tokens`` is unknown."""
    from otlp.optimal.generic import encode_tuples

    rng = np.random.default_rng(4)
    for k, n in [(10, 4), (18, 16)]:  # 10^4 codes; 18^16 > 2^63
        tokens = np.sort(rng.choice(1000, k, replace=False))
        rows = tokens[rng.integers(0, k, (400, n))]  # [400, n], with repeats among the rows
        codes, known = encode_tuples(rows, tokens)
        assert known.all() and (codes.dtype == np.int64) == (k ** n < 2 ** 63)
        same = (rows[:, None, :] == rows[None, :, :]).all(-1)  # [400, 400]
        assert ((codes[:, None] == codes[None, :]) == same).all()
        order = np.argsort(codes)
        found = order[np.searchsorted(codes[order], codes)]
        assert (rows[found] == rows).all()
        stranger = rows[:1].copy()
        stranger[0, 0] = 1000  # not a token of the support
        assert not encode_tuples(stranger, tokens)[1][0]
