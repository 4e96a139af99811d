"""Whether Triton, the GPU kernels' compiler (the ``triton`` extra), imports: the one check behind every Triton route
(:mod:`otlp.verifiers.triton_kernels`, :mod:`otlp.optimal.triton_roots` and the optimal rule's Triton route). On the
CPU the kernels run under ``TRITON_INTERPRET=1`` only; and :func:`opaque`, how their launches meet ``torch.compile``."""

from __future__ import annotations

import functools
from collections.abc import Callable


def available() -> bool:
    """Whether Triton imports."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def opaque(fn: Callable) -> Callable:
    """``fn`` (a function that launches Triton kernels) as one opaque call to ``torch.compile``: traced code around it
    compiles, the call itself is a graph break (``torch.compiler.disable``), so the compiler never traces the
    launch (nor, under ``TRITON_INTERPRET=1``, the interpreter). Called eagerly, it is ``fn``."""

    @functools.wraps(fn)
    def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        import torch

        if torch.compiler.is_compiling():
            return torch.compiler.disable(fn)(*args, **kwargs)
        return fn(*args, **kwargs)

    return call
