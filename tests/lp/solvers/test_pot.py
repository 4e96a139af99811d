"""The POT backend (ot.emd) on transport problems: against scipy's LP, duals, FullOTLP against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from otlp.core.errors import InputError
from otlp.core.subsets import brute_force_min_psi
from otlp.lp.ir import TransportProblem
from otlp.lp.solvers import solve
from tests.lp.formulations.instances import random_instances


def scipy_transport(a: np.ndarray, b: np.ndarray, cost: np.ndarray) -> float:
    V, M = cost.shape
    rows = np.vstack([np.kron(np.eye(V), np.ones(M)), np.kron(np.ones(V), np.eye(M))])
    res = linprog(cost.reshape(-1), A_eq=rows, b_eq=np.concatenate([a, b]), bounds=(0, None), method="highs")
    assert res.status == 0
    return float(res.fun)


@pytest.mark.parametrize("scale", [1.0, -1.0])
def test_random_transport_matches_scipy_and_certifies(scale):
    rng = np.random.default_rng(5)
    for _ in range(20):
        V, M = int(rng.integers(1, 7)), int(rng.integers(1, 9))
        a, b = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(M))
        a[rng.random(V) < 0.2] = 0.0  # zero-mass rows and columns too
        b[rng.random(M) < 0.2] = 0.0
        if a.sum() == 0 or b.sum() == 0:
            continue
        a, b = a / a.sum(), b / b.sum()
        cost = rng.random((V, M)).round(2)
        problem = TransportProblem("t", a, b, cost, value_offset=0.5, value_scale=scale)
        sol = solve(problem, "pot")
        assert sol.optimal and sol.backend == "pot"
        reference = scipy_transport(a, b, cost)
        assert abs(sol.value - (0.5 + scale * reference)) <= 1e-9
        C = sol.primal["C"]
        np.testing.assert_allclose(C.sum(axis=1), a, atol=1e-12)
        np.testing.assert_allclose(C.sum(axis=0), b, atol=1e-12)
        u, v = sol.info["u"], sol.info["v"]  # the dual potentials of min <cost, C>
        assert np.all(u[:, None] + v[None, :] <= cost + 1e-9)
        assert abs(a @ u + b @ v - reference) <= 1e-9
        cert = sol.certificate(tol=1e-9)
        assert cert.ok and cert.gap is not None, str(cert)


def test_full_otlp_matches_brute_force_on_every_scheme():
    from otlp.lp.formulations.full import FullOTLP

    for label, p, draft in random_instances(13, 5):
        alpha = 1.0 + brute_force_min_psi(p, draft)[0]
        sol = FullOTLP(p, draft).solve(backend="pot")
        assert sol.optimal, label
        assert abs(sol.value - alpha) <= 1e-9, (label, sol.value, alpha)
        assert sol.certificate(tol=1e-9).ok, label


def test_bad_input():
    cost = np.zeros((2, 2))
    with pytest.raises(InputError, match="equal mass"):
        solve(TransportProblem("t", np.array([0.5, 0.5]), np.array([0.5, 0.6]), cost), "pot")
    with pytest.raises(InputError, match=">= 0"):
        solve(TransportProblem("t", np.array([1.5, -0.5]), np.array([0.5, 0.5]), cost), "pot")
    with pytest.raises(InputError, match="shape"):
        solve(TransportProblem("t", np.array([1.0]), np.array([0.5, 0.5]), cost), "pot")
    with pytest.raises(InputError, match="finite"):
        solve(TransportProblem("t", np.array([0.5, 0.5]), np.array([0.5, 0.5]), np.full((2, 2), np.nan)), "pot")


def test_certificate_copy_can_be_skipped():
    problem = TransportProblem("t", np.array([1.0]), np.array([1.0]), np.zeros((1, 1)))
    sol = solve(problem, "pot", certify=False)
    assert sol.model is None and sol.info["certificate"] == "skipped"
