"""The pulp backend: hand-built LPs (value, duals, certificate) against scipy's linprog, statuses, errors.
The OTLP formulations through pulp are checked against brute force in tests/lp/formulations/test_agreement.py."""

from __future__ import annotations

from tests.lp.solvers.backend_checks import (
    check_hand_built_lps,
    check_missing_dependency,
    check_statuses,
    check_unknown_option,
)


def test_hand_built_lps():
    check_hand_built_lps("pulp")


def test_statuses():
    check_statuses("pulp")


def test_unknown_option():
    check_unknown_option("pulp")


def test_missing_dependency(monkeypatch):
    check_missing_dependency("pulp", "pulp", monkeypatch)


def test_full_precision_from_the_binary_solution(monkeypatch):
    """CBC's text solution has 8 significant digits; the binary -saveSolution file gives doubles. Without it the
    backend still answers, to about 1e-8, and says so."""
    import pytest

    import otlp.lp.solvers.pulp_backend as pulp_backend
    from otlp.core.subsets import brute_force_min_psi
    from otlp.lp.formulations import FullOTLP
    from tests.lp.formulations.lp_instances import instances

    name, p, draft = instances(per_scheme=1, seed=3)[0]
    alpha = 1 + brute_force_min_psi(p, draft)[0]
    solution = FullOTLP(p, draft).solve(backend="pulp")
    assert solution.info["precision"].startswith("double")
    assert abs(solution.value - alpha) <= 1e-12
    monkeypatch.setattr(pulp_backend, "_read_saved_solution", lambda path: None)
    rough = FullOTLP(p, draft).solve(backend="pulp")
    assert rough.info["precision"].startswith("8 significant")
    assert rough.value == pytest.approx(alpha, abs=1e-6)
