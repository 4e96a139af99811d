"""Every backend of every OTLP formulation gives alpha* = 1 + min_H psi(H) (brute force over 2^V subsets).

Instances: 6 per draft scheme (IID, Independent, WithoutReplacement, Greedy, SpecHub, Joint), V <= 6, n <= 3,
seeded. Backends are those of the registry whose module exists in this checkout and that solve the formulation's
IR kinds (so the ortools / networkx / pot routes, written in other modules, join automatically when present).
Float backends: |value - alpha*| <= 1e-9 + the backend's reported rounding bound, certificate OK to 1e-9.
exact: the certificate is exact, with zero primal violation and zero duality gap.
"""

from __future__ import annotations

import importlib.util
from fractions import Fraction

import numpy as np
import pytest

from otlp.core.errors import InputError
from otlp.core.subsets import brute_force_min_psi
from otlp.lp.formulations import BetaProgram, FullOTLP, RelaxedOTLP
from otlp.lp.ir import FlowNetwork, LinearModel
from otlp.lp.solvers import BACKENDS
from tests.lp.formulations.lp_instances import instances

INSTANCES = instances(per_scheme=6)
FORMULATIONS = (FullOTLP, RelaxedOTLP, BetaProgram)


def _combinations() -> list[tuple[type, str]]:
    out = []
    p, draft = INSTANCES[0][1], INSTANCES[0][2]
    for backend, module in BACKENDS.items():
        if importlib.util.find_spec(module) is None:
            continue  # another engineer's backend not written yet; it is picked up once it exists
        for formulation in FORMULATIONS:
            try:
                formulation(p, draft).kind_for(backend)
            except InputError:
                continue  # e.g. FullOTLP has no network kind for ortools
            out.append((formulation, backend))
    return out


@pytest.fixture(scope="module")
def alpha_star() -> dict[str, float]:
    return {name: 1.0 + brute_force_min_psi(p, draft)[0] for name, p, draft in INSTANCES}


@pytest.mark.parametrize(("formulation", "backend"), _combinations(),
                         ids=[f"{f.name}-{b}" for f, b in _combinations()])
def test_every_backend_matches_brute_force(formulation, backend, alpha_star):
    for name, p, draft in INSTANCES:
        solution = formulation(p, draft).solve(backend=backend)
        assert solution.status == "optimal", name
        assert abs(float(solution.value) - alpha_star[name]) <= 1e-9 + solution.value_bound, name
        if not isinstance(solution.model, (LinearModel, FlowNetwork)):
            continue  # a transport problem has no certificate; its value is checked above
        cert = solution.certificate(tol=1e-9)
        assert cert.ok, (name, str(cert))
        if backend == "exact":
            assert cert.exact and cert.gap == 0 and cert.primal_violation == 0, name
            assert isinstance(solution.value, Fraction)
        elif isinstance(solution.model, LinearModel):
            assert solution.dual is not None, (name, "LP backends must return duals")


def test_combinations_cover_the_lp_backends():
    """The parametrisation above is not empty by accident: the four LP backends of this package are in it."""
    combos = {(f.name, b) for f, b in _combinations()}
    for backend in ("highs", "cvxpy", "pulp", "exact"):
        for f in FORMULATIONS:
            assert (f.name, backend) in combos


@pytest.mark.parametrize("kind", ["linear", "network"])
def test_relaxed_kinds_agree_on_highs(kind, alpha_star):
    """RelaxedOTLP's network kind (GR §5.2), solved as an LP, maps back to the same S block and value."""
    from otlp.lp.solvers import solve

    for name, p, draft in INSTANCES[::3]:
        f = RelaxedOTLP(p, draft)
        solution = solve(f.build(kind), "highs")
        assert abs(solution.value - alpha_star[name]) <= 1e-9, name
        S = f.plan(solution)
        assert np.all(S[~f.incidence()] == 0)
        assert S.sum() == pytest.approx(alpha_star[name], abs=1e-9)
