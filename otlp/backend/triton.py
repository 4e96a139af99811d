"""Whether Triton, the GPU kernels' compiler (the ``triton`` extra), imports: the one check behind every Triton route
(:mod:`otlp.verifiers.triton_kernels`, :mod:`otlp.optimal.triton_roots` and the optimal rule's Triton route). On the
CPU the kernels run under ``TRITON_INTERPRET=1`` only."""

from __future__ import annotations


def available() -> bool:
    """Whether Triton imports."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
