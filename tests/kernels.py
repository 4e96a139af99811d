"""Triton kernels made afresh for a test: interpreted on the CPU where there is no CUDA device, or compiled.

A kernel module makes its kernels on first use (a ``functools.cache``'d factory), and Triton reads
``TRITON_INTERPRET`` when a kernel is made: so a test sets the variable, then clears the factories' caches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def fresh(monkeypatch: pytest.MonkeyPatch, *factories: Callable, compiled: bool = False) -> Iterator[None]:
    """Inside the block the kernels of ``factories`` are made afresh: under ``TRITON_INTERPRET=1`` where there is no
    CUDA device, or (``compiled``) with the variable unset, to compile them for a GPU target without one; their
    caches are cleared again afterwards, so that no other test meets these kernels."""
    import torch

    if compiled:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    elif not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    for made in factories:
        made.cache_clear()
    try:
        yield
    finally:
        for made in factories:
            made.cache_clear()


def compile_sm90(fn, types: dict, constants: dict, num_warps: int = 4):  # noqa: ANN001, ANN201
    """The jit function ``fn`` lowered to PTX and a cubin for sm_90 (an H100 / H200) without a GPU: ``types`` its
    runtime arguments' Triton types (``"*fp64"``, ``"i32"``), ``constants`` its constexpr arguments; no fused
    multiply-add, as the kernels launch. Skipped where this Triton build has no CUDA assembler (ptxas), which is not a
    kernel error. Run inside :func:`fresh` with ``compiled=True``: the compiled route, which the interpreter does not
    check (loop-carried types, constexpr branches, combine functions)."""
    compiler = pytest.importorskip("triton.compiler")
    backends = pytest.importorskip("triton.backends.compiler")
    sig = {**types, **dict.fromkeys(constants, "constexpr")}
    src = compiler.ASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()})
    try:
        return compiler.compile(src, target=backends.GPUTarget("cuda", 90, 32),
                                options={"enable_fp_fusion": False, "num_warps": num_warps})
    except RuntimeError as exc:
        if "ptxas" in str(exc).lower():
            pytest.skip(f"Triton cannot assemble for sm_90 here: {str(exc).splitlines()[0]}")
        raise
