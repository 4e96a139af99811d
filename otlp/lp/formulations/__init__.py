"""otlp.lp.formulations: the OTLP family as declarative model objects (SPEC.md, "Formulations").

Each formulation knows its ``size()`` before building, ``build()`` s one IR (``LinearModel``, ``FlowNetwork`` or
``TransportProblem``, see :mod:`otlp.lp.ir`) and ``solve(backend=...)`` s it with a backend from
:mod:`otlp.lp.solvers`.

Names are resolved lazily (PEP 562): importing this package imports no formulation module, and a module that
fails to import fails only when one of its names is used, with its own error.
"""

from __future__ import annotations

from otlp.core._lazy import lazy_exports

#: public name -> module that defines it
_MODULES: dict[str, str] = {
    "FullOTLP": "otlp.lp.formulations.full",
    "RelaxedOTLP": "otlp.lp.formulations.relaxed",
    "BetaProgram": "otlp.lp.formulations.beta",
    "MaxFlowNetwork": "otlp.lp.formulations.maxflow",
    "OuterInnerNetworks": "otlp.lp.formulations.outer_inner",
    "SubsetSelection": "otlp.lp.formulations.subset_selection",
    "MultiPathLP": "otlp.lp.formulations.multipath",
    "SkewedDraftLP": "otlp.lp.formulations.skewed_draft",
    "PathAwareOTLP": "otlp.lp.formulations.path_aware",
    "Formulation": "otlp.lp.formulations.base",
    "LinearModel": "otlp.lp.ir",
    "FlowNetwork": "otlp.lp.ir",
    "TransportProblem": "otlp.lp.ir",
    "ModelSize": "otlp.lp.ir",
}

__all__ = list(_MODULES)


__getattr__ = lazy_exports(__name__, _MODULES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))
