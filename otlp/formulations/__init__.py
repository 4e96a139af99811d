"""otlp.formulations: the OTLP family as declarative model objects (SPEC.md, "Formulations").

Each formulation knows its ``size()`` before building, ``build()`` s one IR (``LinearModel``, ``FlowNetwork`` or
``TransportProblem``, see :mod:`otlp.formulations.model`) and ``solve(backend=...)`` s it with a backend from
:mod:`otlp.solvers`.

Names are resolved lazily (PEP 562): importing this package imports no formulation module, and a module that
fails to import fails only when one of its names is used, with its own error.
"""

from __future__ import annotations

from otlp._lazy import lazy_exports

#: public name -> module that defines it
_MODULES: dict[str, str] = {
    "FullOTLP": "otlp.formulations.full",
    "RelaxedOTLP": "otlp.formulations.relaxed",
    "BetaProgram": "otlp.formulations.beta",
    "MaxFlowNetwork": "otlp.formulations.maxflow",
    "OuterInnerNetworks": "otlp.formulations.outer_inner",
    "SubsetSelection": "otlp.formulations.subset_selection",
    "MultiPathLP": "otlp.formulations.multipath",
    "SkewedDraftLP": "otlp.formulations.skewed_draft",
    "PathAwareOTLP": "otlp.formulations.path_aware",
    "Formulation": "otlp.formulations.base",
    "LinearModel": "otlp.formulations.model",
    "FlowNetwork": "otlp.formulations.model",
    "TransportProblem": "otlp.formulations.model",
    "ModelSize": "otlp.formulations.model",
}

__all__ = list(_MODULES)


__getattr__ = lazy_exports(__name__, _MODULES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))
