"""Device functions replayed from CUDA graphs: one capture per call signature, replays with no launch overhead.

A decode step verifies a few rows of a real vocabulary at a time, where a GPU runs the optimal rule's kernels
faster than the host can launch them (hundreds of small kernels a call; issue 19). A CUDA graph records those
launches once and replays them as one. :class:`GraphCache` keeps one graph per signature of the call (the shapes,
dtypes and device of its tensor arguments), captured on first use over static copies of the arguments; a call copies
its arguments into them, replays, and returns clones of the outputs (the next replay overwrites them). The graphs
share one memory pool: their temporaries are dead between replays, which run one at a time on the current stream,
and their outputs are cloned at once; and an argument's captured tensor is shared by every graph with the same
signature for it (a call copies all its arguments in before replaying). At most ``max_graphs`` graphs are kept
(least recently used dropped first); the captured arguments stay, one per signature met.

With ``rows=True`` the function must treat the leading dimension of every argument and output as independent rows
(a batch): the batch is then rounded up to a power of two (:func:`bucket`), so that a decode loop whose calls carry
1..B rows meets log2(B) + 1 signatures instead of B. A call copies its R rows into the first R rows of the captured
arguments and returns the first R rows of the outputs; the other rows hold earlier calls' rows (at the capture,
copies of the first row), valid inputs whose results are dropped.

The function must be capturable: static shapes, no host synchronisation, and randomness passed in as tensors (the
optimal sampler takes its uniforms as an argument, :mod:`otlp.optimal.sampler`). Where a capture fails all the same
(an operation a torch or driver version will not record, memory for the graph) while the warm-up calls ran, the
signature runs eagerly from then on, with one ``RuntimeWarning`` that names the error: the same results, without the
replay's saving.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - torch is imported where it is used: the core install has none
    import torch


class CaptureError(RuntimeError):
    """The function ran (its warm-up calls) but its capture in a CUDA graph failed."""


#: graphs a :class:`GraphCache` keeps: a decode loop of batch B and n drafts meets at most B·(n - 1) signatures.
MAX_GRAPHS = 64


def capture(fn: Callable[..., object], *static: torch.Tensor, pool: object = None,
            warmup: int = 2) -> tuple[torch.cuda.CUDAGraph, object]:
    """``fn(*static)`` captured in a CUDA graph, after ``warmup`` calls on a side stream (as ``torch.cuda.graphs``
    asks, so that lazy initialisation and the allocator's first requests happen outside the capture). Returns the
    graph and the outputs of the captured call (static tensors that each replay overwrites). Raises
    :class:`CaptureError` where the warm-up calls ran and the capture did not."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, pool=pool):
            outputs = fn(*static)
    except RuntimeError as err:  # (torch's capture errors, CUDA errors and out-of-memory are RuntimeErrors)
        raise CaptureError(f"{type(err).__name__}: {err}") from err
    return graph, outputs


def bucket(rows: int) -> int:
    """The least power of two >= ``rows`` (1 for 0 or 1)."""
    return 1 << max(int(rows) - 1, 0).bit_length()


def padded(x: torch.Tensor, rows: int) -> torch.Tensor:
    """``x`` with its leading dimension grown to ``rows`` by copies of its first row (a new tensor)."""
    import torch

    extra = rows - x.shape[0]
    return torch.cat([x, x[:1].expand(extra, *x.shape[1:])]) if extra > 0 else x.clone()


@dataclass
class _Entry:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]
    outputs: tuple[torch.Tensor, ...]


class GraphCache:
    """``run(fn, *args)``: ``fn(*args)`` (a tuple of tensors) replayed from the graph captured for ``fn`` and the
    signature of ``args`` (see the module docstring)."""

    def __init__(self, max_graphs: int = MAX_GRAPHS):
        self.max_graphs = int(max_graphs)
        self.captures = 0
        self._graphs: OrderedDict[tuple, _Entry] = OrderedDict()
        self._inputs: dict[tuple, torch.Tensor] = {}  # (argument, shape, dtype, device) -> its captured tensor
        self._pool = None
        self.eager: set[tuple] = set()  # the signatures whose capture failed: run eagerly

    def __len__(self) -> int:
        return len(self._graphs)

    def run(self, fn: Callable[..., tuple[torch.Tensor, ...]], *args: torch.Tensor,
            rows: bool = False) -> tuple[torch.Tensor, ...]:
        R = args[0].shape[0] if rows else None
        if R == 0:  # no rows: nothing worth a graph
            return tuple(fn(*args))
        size = bucket(R) if rows else None
        key = (fn, size, *((tuple(a.shape[1:] if rows else a.shape), a.dtype, a.device) for a in args))
        if key in self.eager:
            return tuple(fn(*args))
        entry = self._graphs.get(key)
        if entry is None:
            static = tuple(self._static(k, a, size) for k, a in enumerate(args))
            try:
                graph, outputs = capture(fn, *static, pool=self._pool)
            except CaptureError as err:
                self.eager.add(key)
                name = getattr(fn, "__name__", type(fn).__name__)
                warnings.warn(f"otlp: the CUDA graph capture of {name} failed ({err}); calls with these shapes run "
                              "eagerly", RuntimeWarning, stacklevel=2)
                return tuple(fn(*args))
            self._pool = graph.pool()
            self.captures += 1
            entry = self._graphs[key] = _Entry(graph, static, tuple(outputs))
            while len(self._graphs) > self.max_graphs:
                self._graphs.popitem(last=False)
        for slot, a in zip(entry.inputs, args, strict=True):
            (slot[:R] if rows else slot).copy_(a)
        self._graphs.move_to_end(key)
        entry.graph.replay()
        return tuple((o[:R] if rows else o).clone() for o in entry.outputs)

    def _static(self, k: int, a: torch.Tensor, size: int | None) -> torch.Tensor:
        """The captured tensor of argument ``k`` for ``a``'s shape (its rows grown to ``size``), dtype and device:
        made on first use (``a``, padded by copies of its first row), then shared by every graph whose argument
        ``k`` has that signature (the optimal rule's p and q by the graphs of every width), since each call copies
        its arguments in before its replay."""
        shape = (size, *a.shape[1:]) if size is not None else tuple(a.shape)
        slot = (k, shape, a.dtype, a.device)
        if slot not in self._inputs:
            self._inputs[slot] = padded(a, size) if size is not None else a.clone()
        return self._inputs[slot]
