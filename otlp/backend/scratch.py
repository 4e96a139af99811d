"""Reused work arrays for the samplers' ``[B, V]`` temporaries on the host (one set per thread).

A fresh array of a megabyte or more comes from the C allocator's mmap or from the top of its heap, which it hands
back to the kernel when it is freed; the next call then page-faults every page again (the counts per call are in
docs/COST.md, issue 19). The samplers write their few large temporaries (residuals, running sums,
the optimal rule's float64 rows, keys and bucket numbers) into arrays kept here between calls instead.

Each array is a view of the named buffer, valid until the next request of that name on the same thread; a buffer
grows to the largest size asked for and stays until :func:`release`. On an accelerator :func:`like` returns a fresh
tensor (the caching allocator already reuses device memory), so device code stays free of host state.
"""

from __future__ import annotations

import threading

import numpy as np

_LOCAL = threading.local()


def _pool(kind: str) -> dict:
    return _LOCAL.__dict__.setdefault(kind, {})


def array(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:  # noqa: ANN001 - a numpy dtype
    """An uninitialised numpy array of ``shape`` and ``dtype``: a view of this thread's buffer ``name`` (grown when
    too small). The caller must not keep it past its next request of ``name``."""
    pool, dtype = _pool("numpy"), np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    buf = pool.get(name)
    if buf is None or buf.dtype != dtype or buf.size < size:
        buf = pool[name] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)


def like(name: str, t):  # noqa: ANN001, ANN201 - torch tensors
    """An uninitialised contiguous tensor of ``t``'s shape, dtype and device: on the CPU a view of this thread's
    buffer ``name`` (as :func:`array`); on a device, or for a tensor that needs grad (``out=`` is not
    differentiable), a fresh ``torch.empty``."""
    import torch

    if t.device.type != "cpu" or t.requires_grad:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    pool, size = _pool("torch"), t.numel()
    buf = pool.get(name)
    if buf is None or buf.dtype != t.dtype or buf.numel() < size:
        buf = pool[name] = torch.empty(size, dtype=t.dtype)
    return buf[:size].view(t.shape)


def release() -> None:
    """Free this thread's work arrays (they are allocated again on the next call)."""
    _LOCAL.__dict__.clear()
