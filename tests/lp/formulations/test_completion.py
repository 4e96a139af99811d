"""The residual completion of GR eq. (3) as RelaxedOTLP.complete uses it: a coupling of p and P_draft whatever the
solver left (a tuple too light to carry flow while sum_j p_res(j) = 0, a plan off by the solver's tolerance)."""

from __future__ import annotations

import numpy as np

import otlp
from otlp.lp.formulations import RelaxedOTLP
from otlp.lp.solution import Solution


def hand_solution(f: RelaxedOTLP, S: np.ndarray) -> Solution:
    """A solution whose "S" block is the dense plan ``S [V, M]`` read on the incidence pairs of ``f``."""
    tokens, cols = f.pairs
    return Solution(float(S.sum()), "optimal", {"S": S[tokens, cols]}, None, {}, "hand", f.name)


def test_complete_fills_a_light_column_when_p_is_used_up():
    """Rows use all of p (sum_j p_res(j) = 0 exactly) but the tuple (2, 2), of mass 1e-30, carries nothing: its slice
    C[:, m] / P_draft(omega_m) must still be a distribution."""
    table = np.zeros((3, 3))
    table[0, 0], table[1, 1], table[2, 2] = 0.5, 0.5, 1e-30  # [V, V], sums to 1 in float64
    f = RelaxedOTLP([0.5, 0.5, 0.0], otlp.Joint(table))
    S = np.zeros((f.V, f.probs.size))  # [V, M]
    m00, m11 = (int(np.flatnonzero((f.omegas == [t, t]).all(axis=1))[0]) for t in (0, 1))
    S[0, m00], S[1, m11] = 0.5, 0.5
    p_res, draft_res = f.residuals(hand_solution(f, S))
    assert p_res.sum() == 0 and draft_res.max() == 1e-30  # the set-up: nothing left of p, a column short
    C = f.complete(hand_solution(f, S))
    assert C.min() >= 0
    np.testing.assert_allclose(C.sum(axis=0) / f.probs, 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(C.sum(axis=1), f.p, rtol=0, atol=1e-15)


def test_complete_repairs_a_slightly_infeasible_plan():
    """A plan off by an LP's tolerance (a row above p and a column above P_draft by 1e-9, a negative entry) still
    completes to a coupling of p and P_draft to ~1e-15, with C >= 0."""
    f = RelaxedOTLP([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    S = f.plan(f.solve(backend="highs"))  # [V, M], alpha* = 0.85: row 0 and the columns but (0, 0) saturated
    col = {tuple(w): m for m, w in enumerate(f.omegas.tolist())}
    S[0, col[0, 0]] += 1e-9  # row 0 above p(0)
    S[1, col[0, 1]] += 1e-9  # column (0, 1) above P_draft
    S[2, col[1, 2]] = -1e-12  # a negative entry on an incidence pair
    p_res, draft_res = f.residuals(hand_solution(f, S))
    assert p_res.min() < -5e-10 and draft_res.min() < -5e-10  # the set-up: infeasible
    C = f.complete(hand_solution(f, S))
    np.testing.assert_allclose(C.sum(axis=1), f.p, rtol=0, atol=1e-15)
    np.testing.assert_allclose(C.sum(axis=0), f.probs, rtol=0, atol=1e-15)
    assert C.min() >= 0
    assert abs((C * f.incidence()).sum() - 0.85) <= 1e-8  # acceptance: alpha* up to the perturbation
