"""otlp.lp: the linear programs. ``ir`` (the declarative IR: ``LinearModel``, ``FlowNetwork``,
``TransportProblem``), ``formulations`` (the OTLP family, one per module), ``solvers`` (one emitter per backend:
HiGHS, CVXPY, PuLP, OR-Tools, networkx, POT, exact rationals) and ``solution`` (``Solution`` and its
``certificate()``, the re-checked LP answer)."""
