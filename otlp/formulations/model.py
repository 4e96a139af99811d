"""Re-export of :mod:`otlp.ir`, the declarative model IR (``LinearModel``, ``FlowNetwork``, ``TransportProblem``,
``ModelSize``), which moved to the ground floor of the package so that ``otlp.solution`` and the backends need not
import ``otlp.formulations``. New code imports ``otlp.ir``."""

from __future__ import annotations

from otlp.ir import MEMORY_LIMIT_BYTES, Block, FlowNetwork, LinearModel, ModelSize, TransportProblem

__all__ = ["MEMORY_LIMIT_BYTES", "Block", "FlowNetwork", "LinearModel", "ModelSize", "TransportProblem"]
