"""Backends: each module emits an IR (``LinearModel``, ``FlowNetwork``, ``TransportProblem``) to one solver,
solves it and maps the answer back to a :class:`otlp.lp.solution.Solution`.

A backend module defines ``CAPABILITIES`` (a subset of {"linear", "network", "transport"}) and, for each, a
function ``solve_linear(model, **options)``, ``solve_network(network, **options)`` or
``solve_transport(problem, **options)``. Modules are imported lazily, so a missing optional dependency only
matters when that backend is asked for (and then it is a clear ``MissingDependencyError``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from otlp.core.errors import InputError

#: backend name -> module; the order is the order of tables and docs.
BACKENDS: dict[str, str] = {
    "highs": "otlp.lp.solvers.highs",
    "cvxpy": "otlp.lp.solvers.cvxpy_backend",
    "pulp": "otlp.lp.solvers.pulp_backend",
    "ortools": "otlp.lp.solvers.ortools_backend",
    "networkx": "otlp.lp.solvers.networkx_backend",
    "pot": "otlp.lp.solvers.pot_backend",
    "exact": "otlp.lp.solvers.exact",
}

KINDS = ("linear", "network", "transport")


def backend_module(name: str) -> ModuleType:
    """Import and return the backend module, with a clear error for an unknown name."""
    if name not in BACKENDS:
        raise InputError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return importlib.import_module(BACKENDS[name])


def capabilities(name: str) -> frozenset[str]:
    """The IR kinds a backend solves directly."""
    return frozenset(backend_module(name).CAPABILITIES)


def solve(model: object, backend: str = "highs", **options: object):  # -> Solution
    """Solve one IR object with ``backend``. Networks are converted to LPs for LP-only backends."""
    from otlp.lp.ir import FlowNetwork, LinearModel

    module = backend_module(backend)
    caps = set(module.CAPABILITIES)
    if isinstance(model, LinearModel):
        if "linear" not in caps:
            raise InputError(f"backend {backend!r} solves {sorted(caps)} problems, not general LPs")
        return module.solve_linear(model, **options)
    if isinstance(model, FlowNetwork):
        if "network" in caps:
            return module.solve_network(model, **options)
        if "linear" in caps:
            from otlp.lp.formulations.network_lp import network_to_linear

            return module.solve_linear(network_to_linear(model), **options)
        raise InputError(f"backend {backend!r} cannot solve a flow network")
    kind = type(model).__name__
    if kind == "TransportProblem":
        if "transport" not in caps:
            raise InputError(f"backend {backend!r} cannot solve a transport problem")
        return module.solve_transport(model, **options)
    raise InputError(f"cannot solve an object of type {kind}; expected a LinearModel, FlowNetwork or TransportProblem")
