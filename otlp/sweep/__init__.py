"""otlp.sweep: captured (p, q) distributions and sweeps of alpha*, every rule's acceptance and the gaps over them.

- :mod:`otlp.sweep.capture`: the capture format (Parquet shards + manifest), :class:`CaptureWriter` and the sparse
  tail-mass bound;
- :mod:`otlp.sweep.loader`: :func:`open_capture`, checked shards as arrays;
- :mod:`otlp.sweep.compute`: the per-block work (alpha*, exact acceptances, gaps);
- :mod:`otlp.sweep.runner`: :func:`run_sweep`, shard by shard on local cores or a Dask cluster, saved and resumable;
- :mod:`otlp.sweep.report`: aggregates, the table, JSON and PNG plots; :mod:`otlp.cli.sweep`: ``otlp sweep``.

pyarrow and dask.distributed come with ``pip install 'otlp[sweep]'``; importing this package needs neither.
"""

from __future__ import annotations

from otlp.core._lazy import lazy_exports

_EXPORTS = {
    "CaptureWriter": "otlp.sweep.capture",
    "SCHEMA_VERSION": "otlp.sweep.capture",
    "open_capture": "otlp.sweep.loader",
    "Capture": "otlp.sweep.loader",
    "PairBlock": "otlp.sweep.loader",
    "SweepParams": "otlp.sweep.compute",
    "run_sweep": "otlp.sweep.runner",
    "SweepResult": "otlp.sweep.runner",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
