"""Re-export of :mod:`otlp.lp.ir`, the declarative model IR (``LinearModel``, ``FlowNetwork``, ``TransportProblem``,
``ModelSize``), which moved to the ground floor of the package so that ``otlp.lp.solution`` and the backends need not
import ``otlp.lp.formulations``. New code imports ``otlp.lp.ir``."""

from __future__ import annotations

from otlp.lp.ir import MEMORY_LIMIT_BYTES, Block, FlowNetwork, LinearModel, ModelSize, TransportProblem

__all__ = ["MEMORY_LIMIT_BYTES", "Block", "FlowNetwork", "LinearModel", "ModelSize", "TransportProblem"]
