"""Shared test fixtures: seeded random instances, with the adversarial families every solver must survive."""

from __future__ import annotations

import numpy as np
import pytest


def random_pair(rng: np.random.Generator, V: int, family: str = "dirichlet") -> tuple[np.ndarray, np.ndarray]:
    """A (p, q) pair from a named family: dirichlet, sparse (zeros), ties (rational ties), equal (p = q),
    point (point masses), skewed (q nearly a point mass)."""
    if family == "dirichlet":
        return rng.dirichlet(np.ones(V) * 0.7), rng.dirichlet(np.ones(V) * 0.7)
    if family == "sparse":
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        p[rng.random(V) < 0.3] = 0.0
        q[rng.random(V) < 0.3] = 0.0
        p[0] += 1e-3 if p.sum() == 0 else 0.0
        q[-1] += 1e-3 if q.sum() == 0 else 0.0
        return p / p.sum(), q / q.sum()
    if family == "ties":
        a, b = rng.integers(1, 4, V).astype(float), rng.integers(1, 4, V).astype(float)
        return a / a.sum(), b / b.sum()
    if family == "equal":
        p = rng.dirichlet(np.ones(V))
        return p, p.copy()
    if family == "point":
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
        return p, rng.dirichlet(np.ones(V))
    if family == "skewed":
        q = np.full(V, 1e-6)
        q[rng.integers(V)] = 1.0
        return rng.dirichlet(np.ones(V)), q / q.sum()
    raise ValueError(family)


FAMILIES = ("dirichlet", "sparse", "ties", "equal", "point", "skewed")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261123)


#: top-level module of an optional dependency -> the extra of pyproject.toml that installs it
OPTIONAL_EXTRAS = {"torch": "torch", "tqdm": "decode", "matplotlib": "decode", "transformers": "hf", "cvxpy": "solvers",
                   "pulp": "solvers", "ortools": "solvers", "ot": "solvers"}


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # noqa: ANN001, ANN201
    """A test module that cannot be imported because an optional package is missing (a core-only install) is
    skipped, naming the package and its extra, instead of erroring at collection; any other import error still
    errors."""
    import re

    outcome = yield
    report = outcome.get_result()
    if not (report.failed and isinstance(collector, pytest.Module)):
        return
    match = re.search(r"No module named '([\w.]+)'", str(report.longrepr))
    if match and match.group(1).split(".")[0] in OPTIONAL_EXTRAS:
        package = match.group(1).split(".")[0]
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, f"Skipped: needs the optional package '{package}' "
                                                   f"(pip install 'otlp[{OPTIONAL_EXTRAS[package]}]')")
