"""The few array operations whose spelling differs between numpy and torch, so that :mod:`otlp.optimal.chains` (and
the other equations that serve numpy and torch alike: :func:`otlp.core.psi.sorted_psi`, K-SEQ's rho*, SpecHub's hub
quantities) is written once.

Everything else (``+ - * /``, comparisons, ``where``, ``log1p``, ``expm1``, ``sqrt``, ``exp``, ``minimum``,
``maximum``) has the same name and meaning in ``numpy`` and ``torch``: the callers use ``xp.<name>`` with
``xp = namespace(x)``. Row operations act along the last axis of ``[B, V]`` arrays. The torch versions never
synchronise with the host and never build a data-dependent shape (they run inside a decode loop on any device).
"""

from __future__ import annotations

import functools
import sys
from math import inf

import numpy as np

from otlp.backend import scratch


def namespace(x: object):  # noqa: ANN201 - the numpy or torch module
    """``numpy`` for numpy arrays, ``torch`` for tensors (imported only when a tensor is passed in)."""
    if isinstance(x, np.ndarray):
        return np
    import torch

    if isinstance(x, torch.Tensor):
        return torch
    raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")


def errstate(x, **kw):  # noqa: ANN001, ANN003, ANN201
    """``np.errstate(**kw)`` where ``x`` is a numpy array (or scalar), a null context for a tensor: torch raises no
    floating-point warnings, and ``torch.compile`` cannot trace numpy's context (a graph break at every use)."""
    import contextlib

    return np.errstate(**kw) if is_numpy(x) or isinstance(x, (float, np.generic)) else contextlib.nullcontext()


def is_numpy(x: object) -> bool:
    return isinstance(x, np.ndarray)


def _as_torch(x):  # noqa: ANN001, ANN202
    """``x`` as a torch tensor (zero copy) when torch is already imported and the array can be shared, else None.

    numpy's running sums and minima are scalar loops; torch's CPU kernels do the same sequential scans faster from a
    few thousand entries up, and its scatter inverts a permutation faster than ``put_along_axis``; below
    ``TORCH_SCAN_MIN`` entries torch's per-call overhead loses (measured at [1 .. 64] x [10 .. 128k] float64 for
    issue 19). Nothing here imports torch, so a numpy-only program keeps numpy's kernels."""
    torch = sys.modules.get("torch")
    if (torch is None or x.ndim != 2 or x.size < TORCH_SCAN_MIN or not x.flags.writeable
            or x.dtype not in _SCAN_DTYPES):
        return None
    return torch.from_numpy(np.ascontiguousarray(x))


_SCAN_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))

#: numpy arrays with fewer entries keep numpy's kernels (:func:`_as_torch`).
TORCH_SCAN_MIN = 1024

#: from this many entries torch's running sum writes straight into the padded output (below, into a new tensor and
#: then copied: torch's ``out=`` view costs more than the copy on small arrays).
TORCH_OUT_MIN = 1 << 16


#: :func:`row_chunks`: host rows are processed in chunks of at most this many entries (8 MiB of float32).
HOST_CHUNK = 1 << 21


def row_chunks(x) -> list[slice]:  # noqa: ANN001
    """Slices of the rows of ``x [B, V]`` for a row-wise computation that reads its rows many times (a bisection):
    on the host, chunks of at most ``HOST_CHUNK`` entries (one row if V is larger), so that each chunk's passes
    read arrays that stay in the cache instead of the whole batch from memory on every pass, and each chunk's torch
    calls are few against their work (2^19 was the best of 2^14-2^20 for K-SEQ's numpy bisection at V = 2k-128k;
    with its first steps in C, 2^21 took less time than 2^19 for rrs, rrs_wor and K-SEQ at V = 32k-152k, B = 8 and
    64, one and two threads, and larger chunks leave K-SEQ's first stage too few chunks for the host threads); one
    slice of every row on a device (one kernel per pass over the batch) and for a small or 1-D ``x``."""
    if x.ndim != 2 or x.shape[0] * x.shape[1] <= HOST_CHUNK or (not is_numpy(x) and x.device.type != "cpu"):
        return [slice(None)]
    step = max(1, HOST_CHUNK // x.shape[1])
    return [slice(lo, lo + step) for lo in range(0, x.shape[0], step)]


def _rows(x, numpy_op, torch_op):  # noqa: ANN001, ANN202
    """``torch_op(x)`` for a tensor; for a numpy array ``torch_op`` on a zero-copy view when torch is loaded and the
    array is not tiny (:func:`_as_torch`), else ``numpy_op(x)``. Each row operation below is written once per
    library."""
    if not is_numpy(x):
        return torch_op(x)
    t = _as_torch(x)
    return numpy_op(x) if t is None else torch_op(t).numpy()


def _reversed(x):  # noqa: ANN001, ANN202
    """Each row backwards, as a contiguous array (numpy's copy of a reversed view is cheaper than torch's flip)."""
    return np.ascontiguousarray(x[..., ::-1])


#: on an accelerator, running sums, minima and maxima along rows of at least this many entries take two levels
#: (:func:`_two_level_scan`), except the running sum of a single row, where torch's own scan spreads the row over the
#: GPU. One float64 scan on an H200, eagerly: two levels took 0.23-0.72x the time at B = 1-64, V = 128k-152k (a single
#: row's sum 4.2-5.2x), and 0.85-6.6x at V <= 32k, where its extra kernels cost more than they save.
TWO_LEVEL_SCAN_MIN = 1 << 16
#: the blocks of :func:`_two_level_scan`.
SCAN_BLOCK = 256
_SCAN_COMBINE = {"sum": "add", "min": "minimum", "max": "maximum"}


def _scan(t, op: str):  # noqa: ANN001, ANN202 - a tensor [..., V]
    """torch's running ``op`` ("sum", "min" or "max") along the last axis of ``t``, in two levels on an accelerator
    from ``TWO_LEVEL_SCAN_MIN`` entries per row."""
    return _two_level_scan(t, op) if _two_level(t, op) else _one_level_scan(t, op)


def _two_level(t, op: str) -> bool:  # noqa: ANN001
    return (t.device.type != "cpu" and t.shape[-1] >= TWO_LEVEL_SCAN_MIN
            and (op != "sum" or t.numel() > t.shape[-1]))


def _one_level_scan(t, op: str):  # noqa: ANN001, ANN202
    if op == "sum":
        return t.cumsum(-1)
    return (t.cummin(-1) if op == "min" else t.cummax(-1)).values


def _two_level_scan(t, op: str):  # noqa: ANN001, ANN202 - a tensor [..., V]
    """The running ``op`` of :func:`_scan` as blocks of ``SCAN_BLOCK`` entries scanned side by side (``[..., NB, K]``),
    the blocks' last entries scanned (``[..., NB]``), and each block combined with the result of the blocks before it
    (one add, minimum or maximum per entry). torch's scan along the innermost axis spreads a row over few threads, so a
    few long rows leave a GPU idle, far from its read time; the blocks give it B x NB short rows. Minima and maxima are
    exact, so they equal the one-level scan's; sums are associated per block, which moves them by rounding only."""
    import torch

    V, K = t.shape[-1], SCAN_BLOCK
    nb = -(-V // K)
    if t.dtype.is_floating_point:
        identity = {"sum": 0.0, "min": inf, "max": -inf}[op]
    else:
        info = torch.iinfo(t.dtype)
        identity = {"sum": 0, "min": info.max, "max": info.min}[op]
    x = torch.nn.functional.pad(t, (0, nb * K - V), value=identity) if nb * K > V else t
    inside = _one_level_scan(x.reshape(*t.shape[:-1], nb, K), op)  # [..., NB, K]
    before = pad_first(_one_level_scan(inside[..., :-1, -1], op), identity)  # [..., NB]: the blocks before each
    out = getattr(torch, _SCAN_COMBINE[op])(inside, before[..., None]).reshape(*t.shape[:-1], nb * K)
    return out[..., :V].contiguous() if nb * K > V else out  # contiguous as torch's scans (a search reads it)


def cumsum(x):  # noqa: ANN001, ANN201
    """Running sum along the rows."""
    return _rows(x, lambda a: np.cumsum(a, axis=-1), lambda t: _scan(t, "sum"))


def padded_cumsum(x):  # noqa: ANN001, ANN201
    """``out[..., m] = sum_{j < m} x[..., j]``: ``[B, V]`` -> ``[B, V + 1]`` (no concatenation)."""
    if not is_numpy(x):
        out = x.new_empty(x.shape[:-1] + (x.shape[-1] + 1,))
        out[..., 0] = 0
        _scan_into(x, out[..., 1:])
        return out
    out = np.empty(x.shape[:-1] + (x.shape[-1] + 1,), dtype=x.dtype)
    out[..., 0] = 0
    t = _as_torch(x) if x.size >= TORCH_OUT_MIN else None
    if t is None:
        out[..., 1:] = cumsum(x)
    else:
        torch = sys.modules["torch"]  # loaded: _as_torch found it
        torch.cumsum(t, -1, out=torch.from_numpy(out)[..., 1:])
    return out


def padded_suffix_sum(x):  # noqa: ANN001, ANN201
    """``out[..., m] = sum_{j >= m} x[..., j]``, summed from the top (so the tail carries no cancellation):
    ``[B, V]`` -> ``[B, V + 1]`` with ``out[..., V] = 0``."""
    if not is_numpy(x):
        out = x.new_empty(x.shape[:-1] + (x.shape[-1] + 1,))
        out[..., 0] = 0
        _scan_into(x.flip(-1), out[..., 1:])
        return out.flip(-1)
    out = np.empty(x.shape[:-1] + (x.shape[-1] + 1,), dtype=x.dtype)
    out[..., -1] = 0
    out[..., -2::-1] = cumsum(_reversed(x))
    return out


def _scan_into(t, out) -> None:  # noqa: ANN001 - tensors
    """``out[...] = `` the running sum of ``t`` (:func:`_scan`), written in place where it takes one level."""
    import torch

    if _two_level(t, "sum"):
        out.copy_(_two_level_scan(t, "sum"))
    elif torch.compiler.is_compiling():  # (torch.compile takes no out= view)
        out.copy_(torch.cumsum(t, -1))
    else:
        torch.cumsum(t, -1, out=out)


def cummin(x):  # noqa: ANN001, ANN201
    return _rows(x, lambda a: np.minimum.accumulate(a, axis=-1), lambda t: _scan(t, "min"))


def suffix_min(x):  # noqa: ANN001, ANN201
    """``out[..., i] = min_{j >= i} x[..., j]`` (numpy: a reversed view of the scan of the reversed rows)."""
    if not is_numpy(x):
        return _scan(x.flip(-1), "min").flip(-1)
    return cummin(_reversed(x))[..., ::-1]


def cummax(x):  # noqa: ANN001, ANN201
    return _rows(x, lambda a: np.maximum.accumulate(a, axis=-1), lambda t: _scan(t, "max"))


def take(x, idx):  # noqa: ANN001, ANN201
    """``x[b, idx[b, k]]``: gather along the rows (``idx`` of any width; a single row of ``x`` serves every row of
    ``idx``; numpy: one flat ``take``, cheaper than ``take_along_axis``)."""
    if not is_numpy(x):
        return (x.expand(idx.shape[0], -1) if x.shape[0] == 1 else x).gather(-1, idx)
    if x.ndim != 2:
        return np.take_along_axis(x, idx, axis=-1)
    B, V = x.shape
    if B == 1:  # one row for every index row (a single instance evaluated on many tuples)
        return x[0][idx]
    rows = idx.shape[0]
    flat = idx + (np.arange(rows, dtype=np.int64) * V)[:, None] if rows > 1 else idx
    return np.take(np.ascontiguousarray(x).ravel(), flat)


def arange_like(x, size: int):  # noqa: ANN001, ANN201
    """``[0, 1, ..., size - 1]`` as an int64 row on ``x``'s device."""
    if is_numpy(x):
        return np.arange(size)
    import torch

    return torch.arange(size, device=x.device)


def pad_last(x, value: float):  # noqa: ANN001, ANN201
    """``x [..., V]`` with one more entry ``value`` at the end of each row: ``[..., V + 1]``."""
    if is_numpy(x):
        return np.concatenate([x, np.full(x.shape[:-1] + (1,), value, dtype=x.dtype)], axis=-1)
    import torch

    return torch.cat([x, torch.full(x.shape[:-1] + (1,), value, dtype=x.dtype, device=x.device)], dim=-1)


def pad_first(x, value: float):  # noqa: ANN001, ANN201
    """``x [..., V]`` with one more entry ``value`` in front of each row: ``[..., V + 1]``."""
    if is_numpy(x):
        return np.concatenate([np.full(x.shape[:-1] + (1,), value, dtype=x.dtype), x], axis=-1)
    import torch

    return torch.cat([torch.full(x.shape[:-1] + (1,), value, dtype=x.dtype, device=x.device), x], dim=-1)


def argmin_rows(x):  # noqa: ANN001, ANN201
    """First index of the minimum of each row, ``[B]`` int64."""
    return np.argmin(x, axis=-1) if is_numpy(x) else x.argmin(-1)


def argmax_rows(x):  # noqa: ANN001, ANN201
    """First index of the maximum of each row (numpy and torch both return the first on ties), ``[B]``."""
    return np.argmax(x, axis=-1) if is_numpy(x) else x.argmax(-1)


def inverse_permutation(order):  # noqa: ANN001, ANN201
    """``inv[b, order[b, i]] = i`` for permutations ``order [B, V]`` (one scatter)."""
    if is_numpy(order):
        t = _as_torch(order)
        if t is not None:  # torch's scatter on the same memory
            return inverse_permutation(t).numpy()
        inv = np.empty_like(order)
        np.put_along_axis(inv, order, np.broadcast_to(np.arange(order.shape[-1]), order.shape), axis=-1)
        return inv
    import torch

    ar = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, ar)


def sort_descending(key):  # noqa: ANN001, ANN201
    """Stable order of each row by decreasing ``key`` (float64, no NaN): ``int64 [B, V]``.

    numpy: the integers that pack the key's leading bits above the token id, sorted with numpy's vectorised sort
    (:func:`_packed_sort`), several times faster than ``argsort(kind="stable")`` (and than ``torch.sort`` on the CPU;
    the CPU sampler runs the numpy route) from about a thousand keys; below ``PACKED_SORT_MIN`` keys the stable
    argsort, which gives the same order and costs less there.
    torch: ``torch.sort(stable=True)`` on the tensor's device (:func:`stable_descending`, as the small numpy keys).
    """
    if is_numpy(key) and key.size >= PACKED_SORT_MIN:
        return _packed_sort(key)
    return stable_descending(key)


#: numpy keys below this many entries are sorted by a stable argsort (:func:`sort_descending`).
PACKED_SORT_MIN = 1024
#: :func:`_packed_sort` repairs its runs with one int64 sort where their numbers and two ids fit in these bits, else
#: by a lexsort.
_REPAIR_BITS = 63


def _packed_sort(key: np.ndarray) -> np.ndarray:
    """Stable descending order of each row of ``key [B, V]`` (float64: >= 0 or +inf, and one common negative value
    such as -1 for the p = q = 0 tokens) from one int64 sort.

    A float64 >= 0 compares like its bit pattern read as an integer, and every negative float's pattern is a
    negative integer, so clearing the low ``s = bit_length(V - 1)`` bits keeps the order (merging only keys within
    2^-(52 - s) relative of each other); with ``V - 1 - id`` in those bits every key is distinct, and their
    decreasing order is the stable decreasing order of the truncated keys. Runs of equal truncated keys that hold
    different exact keys (keys within about 2^-(52 - s) relative) are then put in exact order: their positions are
    sorted by (run, exact key decreasing, id increasing), one int64 sort of the run number, the low bits (the only
    ones that differ within a run; such runs hold keys >= 0) and the id, and written back into the same positions,
    so each run keeps its place. Where ties are sparse (a few dozen runs per row of a close draft's LM rows) only the
    positions of those runs are sorted; where they are dense (n-gram laws, whose smoothed ratios differ in their last
    bits) the whole rows that hold one. Runs of exact ties are already in id order. Where :mod:`otlp.backend.native`'s
    kernels are built, the passes between and around the two sorts run in one C loop (``otlp_sort_runs``: the same
    order; numpy still sorts).
    """
    B, V = key.shape
    s = max(int(V - 1).bit_length(), 1)
    low = (1 << s) - 1
    packed = (np.ascontiguousarray(key).view(np.int64) & ~low) | (V - 1 - np.arange(V, dtype=np.int64))
    packed.sort(axis=-1)
    from otlp.backend import native  # the kernels load on first use, not with the core

    got = native.sort_runs(key, packed, s, _REPAIR_BITS)  # the passes around the sorts in a C loop: the same order
    if got is not None and got[1] is not None:  # no ties, or dense ones: the rows that hold a mixed run sorted again
        order, rows, composite = got
        if rows.size:
            composite.sort(axis=-1)
            order[rows] = composite & low
        return order
    packed = packed[:, ::-1]
    order = np.ascontiguousarray((V - 1) - (packed & low)) if got is None else got[0]  # ids increasing in ties
    trunc = packed >> s
    same = trunc[:, 1:] == trunc[:, :-1]  # [B, V - 1]: position i + 1 ties position i
    if not same.any():
        return order
    if 8 * np.count_nonzero(same) > same.size:  # dense ties (n-gram laws): the whole rows that hold a mixed run
        kbits = take(key.view(np.int64), order)  # [B, V] the exact keys' bits in that order
        rows = np.flatnonzero((same & (kbits[:, 1:] != kbits[:, :-1])).any(axis=-1))
        if rows.size == 0:  # only exact ties: in id order already
            return order
        every = rows.size == B  # (n-gram rows: all of them; no copies then)
        run = np.empty((rows.size, V), dtype=np.int64)  # [R, V] each position's run within its row
        run[:, 0] = 0
        np.cumsum(~(same if every else same[rows]), axis=-1, out=run[:, 1:])
        if every:
            return _sorted_runs(run, kbits, order, s)
        order[rows] = _sorted_runs(run, kbits[rows], order[rows], s)
        return order
    rows, left = nonzero_2d(same)  # sparse ties (LM rows): the tied pairs
    exact = key[rows[:, None], order[rows[:, None], left[:, None] + np.arange(2)]]  # [pairs, 2] their exact keys
    differ = exact[:, 0] != exact[:, 1]
    if not differ.any():  # only exact ties: in id order already
        return order
    flat_left = rows * V + left  # [pairs] each tied pair by the flat position of its first member, increasing
    chain = np.cumsum(np.concatenate([[True], flat_left[1:] != flat_left[:-1] + 1]))  # [pairs] its run
    mixed = np.zeros(int(chain[-1]) + 1, dtype=bool)
    mixed[chain[differ]] = True
    flat_left = flat_left[mixed[chain]]  # the pairs of the runs that hold different keys
    at = np.concatenate([flat_left, flat_left + 1])
    at.sort()
    at = at[np.concatenate([[True], at[1:] != at[:-1]])]  # [M] the positions of those runs, increasing, once
    prev = np.minimum(np.searchsorted(flat_left, at - 1), flat_left.size - 1)
    run = np.cumsum(flat_left[prev] != at - 1)  # [M] run numbers: a new run unless at - 1 ties at
    flat = order.reshape(-1)
    ids = flat[at]
    flat[at] = _sorted_runs(run, key.view(np.int64).reshape(-1)[at // V * V + ids], ids, s)
    return order


def _sorted_runs(run, bits, ids, s: int):  # noqa: ANN001, ANN202 - numpy int64 arrays of one shape
    """``ids`` ordered by (run, exact key decreasing, id increasing) along the last axis, for ids in runs of keys
    equal in all but their low ``s`` bits (keys >= 0, so that their order is that of those bits; ``bits``: the keys'
    bit patterns): one int64 sort of the run number, the low bits decreasing and the id where they fit in
    ``_REPAIR_BITS``, else a lexsort of the exact keys. ``run`` and ``bits`` are overwritten."""
    low = (1 << s) - 1
    if int(run.max()).bit_length() + 2 * s <= _REPAIR_BITS:
        run <<= 2 * s  # in place: [R, V] arrays on the dense path
        bits &= low
        np.subtract(low, bits, out=bits)
        bits <<= s
        run |= bits
        run |= ids
        run.sort(axis=-1)
        run &= low
        return run
    return np.take_along_axis(ids, np.lexsort((ids, -bits.view(np.float64), run), axis=-1), axis=-1)


def nonzero_2d(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a 2-D numpy mask, ``(rows, cols)`` in row-major order, from ``flatnonzero``, which is
    several times faster than numpy's 2-D nonzero on the samplers' masks."""
    return np.divmod(np.flatnonzero(mask), mask.shape[1])


def row_places(rows: np.ndarray, B: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For entries listed row by row (``rows int64 [T]`` non-decreasing, as :func:`nonzero_2d` gives them) of B
    rows: ``(counts [B], start [B], place [T])``, each row's number of entries, the index of its first one, and each
    entry's place within its row (the column it takes when the rows are packed left-aligned into ``[B, max
    count]``)."""
    counts = np.bincount(rows, minlength=B)
    start = np.cumsum(counts) - counts
    return counts, start, np.arange(rows.size) - start[rows]


def searchsorted_rows(cdf, values, right: bool = True):  # noqa: ANN001, ANN201
    """Per row, the first index whose running sum exceeds the value (``right``; else the first that reaches it):
    ``cdf [B, V]`` non-decreasing, ``values [B, 1]`` -> ``[B]``."""
    if is_numpy(cdf):
        return ((cdf <= values) if right else (cdf < values)).sum(-1)
    import torch

    return torch.searchsorted(cdf, values.contiguous(), right=right).squeeze(-1)


#: on CPU tensors with at least this many entries per row, :func:`inverse_cdf` reads the rows once for the sums of
#: their blocks of ``CDF_BLOCK`` entries and runs the cumulative sum over the one block that holds each draw, rather
#: than writing a running sum over all of them (a read pass instead of a read and a write).
CDF_BLOCKED_MIN_V = 8192
CDF_BLOCK = 512


def inverse_cdf(weights, u, fallback=None):  # noqa: ANN001, ANN201
    """One index per row of unnormalised ``weights [B, V] >= 0`` for uniforms ``u [B, 1]`` in [0, 1): the first index
    whose running mass exceeds u * total, which has positive weight. A product rounded up to the total (index V) is
    clamped to the first index whose running mass reaches the total, positive too (its step of the running sum is >
    0) and never below the first answer otherwise. Rows with no mass give 0, or with ``fallback [B, V]`` the draw
    from its row with the same uniform: on the host only those rows are read again (their totals come with the
    running sums); on a device every row of ``weights`` gets ``fallback`` times (its total is 0) added in place
    (static shapes). ``[B]`` int64.

    On CPU tensors from ``CDF_BLOCKED_MIN_V`` entries per row the same search runs in two levels
    (:func:`_blocked_inverse_cdf`): the block, then the index within it."""
    host = is_numpy(weights) or weights.device.type == "cpu"
    if fallback is not None and not host:
        weights = weights.addcmul_(fallback, (weights.sum(dim=1, keepdim=True) == 0).to(weights.dtype))
    if not is_numpy(weights) and host and weights.shape[-1] >= CDF_BLOCKED_MIN_V:
        index, total = _blocked_inverse_cdf(weights, u)
    else:
        if is_numpy(weights):
            cdf = cumsum(weights)  # [B, V]
        else:  # into the thread's work array on the CPU (:mod:`otlp.backend.scratch`)
            import torch

            cdf = torch.cumsum(weights, -1, out=scratch.like("cdf", weights)) if host else _scan(weights, "sum")
        total = cdf[:, -1:]  # [B, 1]
        index = _first_above(cdf, u * total)
    if fallback is not None and host:  # (there is no device to synchronise with)
        empty = total[:, 0] == 0  # [B]
        if bool(empty.any()):  # rare: a residual of probability-zero branches
            rows = np.flatnonzero(empty) if is_numpy(empty) else empty.nonzero()[:, 0]
            index[rows] = inverse_cdf(fallback[rows], u[rows])
    return index


def _first_above(cdf, x):  # noqa: ANN001, ANN202
    """``[B]``: per row the first index of the running sums ``cdf [B, K]`` above ``x [B, 1]``, clamped to the first
    that reaches the row's last value (:func:`inverse_cdf`)."""
    return minimum(searchsorted_rows(cdf, x), searchsorted_rows(cdf, cdf[:, -1:], right=False))


def _blocked_inverse_cdf(weights, u):  # noqa: ANN001, ANN202 - CPU tensors
    """:func:`inverse_cdf`'s search in two levels: ``(index [B], total [B, 1])``. The running sum of the blocks'
    sums picks block b, the first whose running mass exceeds x = u * total (clamped as in :func:`_first_above`, so
    that its sum is > 0), then the running sum of block b alone picks the index for x minus the mass before b (>= 0:
    that mass is at most x). Each level's answer has positive weight, as in the one-level search."""
    import torch

    B, V = weights.shape
    K = CDF_BLOCK
    full = V // K * K
    sums = weights[:, :full].reshape(B, full // K, K).sum(-1)  # [B, V // K]
    if full < V:
        sums = torch.cat([sums, weights[:, full:].sum(-1, keepdim=True)], dim=1)  # [B, NB]
    running = sums.cumsum(-1)  # [B, NB]
    total = running[:, -1:]  # [B, 1]
    x = u.to(weights.dtype) * total  # [B, 1]
    block = _first_above(running, x)  # [B]
    before = torch.where(block[:, None] > 0, running.gather(1, (block[:, None] - 1).clamp(min=0)), 0.0)  # [B, 1]
    cols = block[:, None] * K + torch.arange(K)  # [B, K]
    inside = torch.where(cols < V, weights.gather(1, cols.clamp(max=V - 1)), 0.0)  # [B, K]
    return block * K + _first_above(inside.cumsum(-1), x - before), total


def positive_part(a, b, scale=None, out=None):  # noqa: ANN001, ANN201
    """``(a - scale * b)^+ [B, V]`` (``scale [B, 1]``, default 1) in one array, the clamp in place: a residual without
    the temporaries of ``relu(a - b)``. numpy: a new array; torch: ``out`` when given, else the thread's work array
    ``"residual"`` (:func:`otlp.backend.scratch.like`: reused on the CPU, fresh on a device), valid until the next
    call."""
    if is_numpy(a):
        out = a - b if scale is None else a - scale * b
        return np.maximum(out, 0.0, out=out)
    import torch

    out = scratch.like("residual", a) if out is None else out
    torch.sub(a, b, out=out) if scale is None else torch.addcmul(a, b, -scale, out=out)
    return out.clamp_(min=0)


def mul_add(a, b, c):  # noqa: ANN001, ANN201
    """``a * b + c`` elementwise (torch: one ``addcmul`` kernel instead of two, ``c`` a tensor there; not a fused
    multiply-add: the rounding is the backend's)."""
    if is_numpy(a):
        return a * b + c
    import torch

    return torch.addcmul(c, a, b)


def maximum(a, b):  # noqa: ANN001, ANN201
    """Elementwise maximum; ``b`` may be a Python number (``torch.maximum`` takes tensors only)."""
    if is_numpy(a):
        return np.maximum(a, b)
    import torch

    return torch.clamp(a, min=b) if isinstance(b, (int, float)) else torch.maximum(a, b)


def minimum(a, b):  # noqa: ANN001, ANN201
    """Elementwise minimum; ``b`` may be a Python number."""
    if is_numpy(a):
        return np.minimum(a, b)
    import torch

    return torch.clamp(a, max=b) if isinstance(b, (int, float)) else torch.minimum(a, b)


def stable_descending(key):  # noqa: ANN001, ANN201
    """Stable order of each row of ``key [B, n]`` by decreasing value, by numpy's stable argsort or ``torch.sort``:
    for narrow rows, and for keys that :func:`sort_descending`'s packing cannot take (any real values, negative
    ones too: logits)."""
    if is_numpy(key):
        return np.argsort(-key, axis=-1, kind="stable")
    import torch

    return torch.sort(key, dim=-1, descending=True, stable=True).indices


def scatter_rows(values, idx):  # noqa: ANN001, ANN201
    """``out[b, idx[b, k]] = values[b, k]`` for a permutation ``idx`` of each row."""
    if is_numpy(values):
        out = np.empty_like(values)
        np.put_along_axis(out, idx, values, axis=-1)
        return out
    return values.new_empty(values.shape).scatter_(-1, idx, values)


def first_true(mask):  # noqa: ANN001, ANN201
    """Index of the first True along the last axis (of a mask with at least one True per row). torch: the least
    index where the mask holds, a min-reduction, not an argmax over ties (``torch.compile`` on CUDA (torch 2.11,
    an H200) returned other maxima than the first for ``mask.to(int8).argmax(-1)``)."""
    if is_numpy(mask):
        return np.argmax(mask, axis=-1)
    import torch

    idx = torch.arange(mask.shape[-1], device=mask.device)
    return torch.where(mask, idx, mask.shape[-1]).amin(-1)


def max_rows(x):  # noqa: ANN001, ANN201
    return np.max(x, axis=-1) if is_numpy(x) else x.amax(-1)


def min_rows(x):  # noqa: ANN001, ANN201
    return np.min(x, axis=-1) if is_numpy(x) else x.amin(-1)


def bincount(idx, weights, size: int):  # noqa: ANN001, ANN201
    """``out[i] = sum of weights[idx == i]``, ``[size]`` (flat int64 ``idx`` and float ``weights`` of one shape):
    numpy's ``bincount``, torch's ``index_add_`` (whose order of addition on a GPU is not fixed: rounding only)."""
    if is_numpy(idx):
        return np.bincount(idx.ravel(), weights.ravel(), size)
    return weights.new_zeros(size).index_add_(0, idx.reshape(-1), weights.reshape(-1))


def scatter_extreme(idx, values, size: int, largest: bool):  # noqa: ANN001, ANN201
    """``out[i] = max`` (``largest``) or ``min`` of ``values[idx == i]`` (flat ``idx``), ``[size]``; +-inf, or the
    dtype's extreme for integers, where no entry goes."""
    if is_numpy(idx):
        fill = (-inf if largest else inf) if values.dtype.kind == "f" else (
            np.iinfo(values.dtype).min if largest else np.iinfo(values.dtype).max)
        out = np.full(size, fill, dtype=values.dtype)
        (np.maximum if largest else np.minimum).at(out, idx.ravel(), values.ravel())
        return out
    import torch

    if values.dtype.is_floating_point:
        fill = -inf if largest else inf
    else:
        fill = torch.iinfo(values.dtype).min if largest else torch.iinfo(values.dtype).max
    return values.new_full((size,), fill).scatter_reduce_(0, idx.reshape(-1), values.reshape(-1),
                                                          "amax" if largest else "amin")


def concat(arrays: list, axis: int):  # noqa: ANN201
    """``np.concatenate`` / ``torch.cat`` of arrays of one library."""
    if is_numpy(arrays[0]):
        return np.concatenate(arrays, axis=axis)
    import torch

    return torch.cat(arrays, dim=axis)


def full(like, shape: tuple, value: float | int):  # noqa: ANN001, ANN201
    """An array of ``shape`` filled with ``value``, of ``like``'s library, device and dtype."""
    if is_numpy(like):
        return np.full(shape, value, dtype=like.dtype)
    return like.new_full(shape, value)


def constant(like, values: list):  # noqa: ANN001, ANN201
    """``values`` (a Python list: index lists, masks) as an array of ``like``'s library and device; a tensor is made
    once per values and device (no copy to a device on later calls, none inside a CUDA graph's capture)."""
    if is_numpy(like):
        return np.asarray(values)
    return _device_constant(tuple(values), type(values[0]), like.device)  # (True == 1: the type is in the key)


@functools.lru_cache(maxsize=4096)
def _device_constant(values: tuple, kind: type, device):  # noqa: ANN001, ANN202, ARG001
    import torch

    return torch.tensor(values, device=device)
