"""Host threads for the CPU samplers' per-token passes over chunks of rows.

numpy releases the GIL inside its array loops, so chunks of a few hundred thousand entries run side by side on
several cores. The number of threads follows torch's intra-op setting (``torch.set_num_threads``): one thread there
means no pool here. Work run on the pool must not call parallel torch operations: each host thread that does gets an
OpenMP team of its own, whose waiting threads slow the torch operations that follow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def count() -> int:
    """Threads for host work: torch's intra-op thread count."""
    import torch

    return max(1, torch.get_num_threads())


def chunk_rows(rows: int, most: int) -> int:
    """Rows per chunk for ``rows`` rows in chunks of at most ``most`` rows, one chunk per thread (:func:`count`) at
    least where there are rows enough."""
    return max(1, min(most, -(-rows // count())))


def map_chunks(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, on :func:`count` threads when there are several (the order of ``items`` kept)."""
    items = list(items)
    workers = min(count(), len(items))
    if workers <= 1:
        return [fn(x) for x in items]
    return list(_pool(workers).map(fn, items))


@functools.cache
def _pool(workers: int):  # noqa: ANN202
    """A pool of ``workers`` threads, made on first use and kept (with their work arrays,
    :mod:`otlp.backend.scratch`)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(workers, thread_name_prefix="otlp")
