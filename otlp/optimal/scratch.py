"""Reused work arrays for the CPU sampler's per-token passes (one set per thread).

A fresh ``[rows, V]`` array of a megabyte or more comes from the C allocator's mmap or from the top of its heap,
which it hands back to the kernel when the call frees it; the next call then page-faults every page again (about
600 faults per call at B = 1, V = 128k, 900 at B = 64, V = 2k: ``benchmarks/verifiers.py``, issue 19). The CPU route
writes its few large temporaries (the float64 rows, their ratio keys, bucket numbers and the selection mask) into
arrays kept here between calls instead. Each is a view of the named buffer, valid until the next request of the same
name on the same thread; a buffer grows to the largest size asked for and stays (a few ``CHUNK``-sized arrays, at
most 4 MiB each at the sampler's chunk sizes). :func:`release` drops this thread's buffers.
"""

from __future__ import annotations

import threading

import numpy as np

_LOCAL = threading.local()


def array(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:  # noqa: ANN001 - a numpy dtype
    """An uninitialised array of ``shape`` and ``dtype``: a view of this thread's buffer ``name`` (grown when too
    small). The caller must not keep it past its next request of ``name``."""
    pool = _LOCAL.__dict__.setdefault("pool", {})
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    buf = pool.get(name)
    if buf is None or buf.dtype != dtype or buf.size < size:
        buf = pool[name] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)


def release() -> None:
    """Free this thread's work arrays (they are allocated again on the next call)."""
    _LOCAL.__dict__.pop("pool", None)
