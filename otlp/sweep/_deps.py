"""The optional packages of ``otlp[sweep]``: imported on first use, refused in one line when absent."""

from __future__ import annotations

from types import ModuleType

from otlp.core.errors import MissingDependencyError


def pyarrow() -> ModuleType:
    """``pyarrow`` (captures and per-pair results are Parquet)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise MissingDependencyError("pyarrow", "captures and sweeps (Parquet)", "sweep") from None
    return pa


def parquet() -> ModuleType:
    pyarrow()
    import pyarrow.parquet as pq

    return pq


def distributed() -> ModuleType:
    """``dask.distributed`` (``--scheduler`` / a ``Client``)."""
    try:
        import dask.distributed as dd
    except ImportError:
        raise MissingDependencyError("dask[distributed]", "a sweep on a Dask cluster", "sweep") from None
    return dd
