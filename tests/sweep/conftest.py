"""Shared helpers of the sweep tests: LM-like (p, q) pairs and small captures."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyarrow")


def lm_pairs(rng: np.random.Generator, M: int, V: int, noise: float = 1.0, temperature: float = 1.0
             ) -> tuple[np.ndarray, np.ndarray]:
    """M pairs shaped like a draft/target LM pair: Zipf-like target logits, the draft's perturbed by Gaussian noise.
    Rows vary from peaked to flat (a per-row temperature)."""
    base = -1.2 * np.log(np.arange(1, V + 1))[None, :] + rng.normal(0, 0.5, (M, V))  # [M, V]
    base = base[:, rng.permutation(V)]
    scale = rng.uniform(0.3, 3.0, (M, 1)) / temperature
    logits_p = base * scale
    logits_q = logits_p + rng.normal(0, noise, (M, V))
    p = np.exp(logits_p - logits_p.max(axis=1, keepdims=True))
    q = np.exp(logits_q - logits_q.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)


def write_capture(path, p, q, storage="dense", top_k=16, shard_rows=32, **meta):  # noqa: ANN001, ANN201
    from otlp.sweep import CaptureWriter

    with CaptureWriter(path, p.shape[1], storage=storage, top_k=top_k, shard_rows=shard_rows) as w:
        w.add(p, q, **meta)
    return path


def results(path) -> dict:  # noqa: ANN001
    """pairs.parquet as numpy columns."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return {name: table.column(name).to_numpy() for name in table.column_names}


def assert_identical(a: dict, b: dict) -> None:
    """Bit for bit: same columns, same dtypes, same bytes (NaN included)."""
    assert list(a) == list(b)
    for name in a:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name
