"""The base class of every formulation: size first, then build one IR, then hand it to a backend."""

from __future__ import annotations

import time

from otlp.core.errors import InputError
from otlp.lp.ir import MEMORY_LIMIT_BYTES, ModelSize


class Formulation:
    """A declarative formulation. Subclasses set ``name`` and ``kinds`` (the IR kinds they can build, in order of
    preference: "linear", "network", "transport") and implement ``size(kind)`` and ``build(kind)``.

    ``solve(backend)`` picks the first kind the backend handles (a network also goes to LP backends), refuses a
    model that would not fit in memory before building it, and returns the backend's
    :class:`~otlp.lp.solution.Solution` with the build time included and ``formulation`` set.
    """

    name: str = "formulation"
    kinds: tuple[str, ...] = ("linear",)

    def size(self, kind: str | None = None) -> ModelSize:
        raise NotImplementedError

    def build(self, kind: str | None = None):  # -> LinearModel | FlowNetwork | TransportProblem
        raise NotImplementedError

    def kind_for(self, backend: str) -> str:
        from otlp.lp.solvers import capabilities

        caps = capabilities(backend)
        for kind in self.kinds:
            if kind in caps or (kind == "network" and "linear" in caps):
                return kind
        raise InputError(
            f"{self.name} builds {', '.join(self.kinds)} models; backend {backend!r} solves {', '.join(sorted(caps))}"
        )

    def solve(self, backend: str = "highs", *, memory_limit: float = MEMORY_LIMIT_BYTES, **options: object):
        """Build and solve with ``backend``; returns a :class:`~otlp.lp.solution.Solution`."""
        from otlp.lp.solvers import solve as solve_model

        kind = self.kind_for(backend)
        self.size(kind).check(f"{self.name} ({kind})", memory_limit)
        start = time.perf_counter()
        model = self.build(kind)
        build_seconds = time.perf_counter() - start
        solution = solve_model(model, backend, **options)
        solution.seconds["build"] = solution.seconds.get("build", 0.0) + build_seconds
        solution.formulation = self.name
        return self.finish(solution)

    def finish(self, solution):  # noqa: ANN001, ANN201 - hook for subclasses that map results back
        return solution

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size(self.kinds[0])})"
