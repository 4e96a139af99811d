"""The exact optimal rule for i.i.d. drafts as a decode-loop sampler on torch tensors (``get("optimal").sample``).

``verify(p [B, V], q [B, V], drafts [B, n], u [B, 2]) -> (tokens [B], accepted_index [B])`` runs the class-chain
rule of :mod:`.chains` on one drafted tuple per row: the ratio sort and psi over the whole vocabulary, then the class
chain of the served group only, on its positions up to the top draw (:func:`.chains.tuple_rule`), and one draw from
the slots or the residual with the caller's uniforms (``u[:, 0]`` picks the slot, ``u[:, 1]`` the residual token).
With one draft (n = 1, a tree node with one child) the default rule takes its closed form, which needs no sort
(:func:`.chains.single_draft`: the same law, the residual drawn in token order).

* Inputs are language-model probabilities as they come (float32, bfloat16, float16 or float64 rows that sum to 1
  within their dtype's rounding): each row is converted to float64 and multiplied by the reciprocal of its sum, and
  the rule is exact for that normalised row (law = p and acceptance = alpha* to float64 rounding).
* On CUDA tensors where Triton imports (``backend="auto"``, or ``"triton"``) the rule runs without the ratio sort:
  :mod:`.device_buckets` with the Triton passes of :mod:`.device_passes` certifies a row from its ratio buckets'
  sums and a few compacted buckets, and a row it cannot certify takes the full-order rule inside one Triton kernel
  (:mod:`.device_fallback`); static shapes, no host synchronisation, capturable in a CUDA graph. Elsewhere on an
  accelerator (no Triton), and with ``backend="torch"``, every step is a torch operation on the tensors' device
  with static shapes (the ratio sort, then the class chain with ``NEWTON_STEPS`` Newton steps at every position of
  the served window, ``window = V``: 285-1162 read floors at B = 64, V = 128k, benchmarks/bytes_moved.py); no host
  synchronisation (tests/optimal/test_sampler_device.py records the aten ops on CPU with ``backend="torch"``).
* On the CPU, where there is no device to synchronise with, the same equations run through numpy and, where they
  are built, the C loops of :mod:`otlp.backend.native` (normalisation with the ratio keys, the sort's passes, psi, the
  served group, its chain, the pieces and the draw; the one-draft form reads a row whole only where the draft is
  rejected), in chunks of rows of at most ``CPU_CHUNK`` floats (side by side on :mod:`otlp.backend.threads` from
  ``FULL_SORT_THREADS_MIN`` entries), each chunk normalised on its own into reused arrays of its thread
  (:mod:`otlp.backend.scratch`, so that temporaries stay in cache and are not page-faulted again on every call), with
  the data-dependent window the tuple needs (``backend="auto"``; measured in benchmarks/verifiers.py). From
  ``buckets.MIN_V`` tokens or ``buckets.MIN_ENTRIES`` entries in a call (``buckets.takes``) the default rule sorts
  only the ratio buckets it needs (:mod:`.buckets`, certified per row: each row start to end in the C loop of
  :mod:`otlp.backend.native`; from ``buckets.THREADS_MIN`` entries the rows side by side on torch's thread count of
  threads; a row it cannot certify takes the full sort; a close draft's served window need not be sorted either:
  :data:`.buckets.BOUND`; without the kernels every row takes the full sort). The normalised rows equal the device
  route's up to the rounding of the row sums (the host's, :func:`.buckets.inverse_sums`, and torch's add in different
  orders).
"""

from __future__ import annotations

import functools
import os

import numpy as np

from otlp.backend import native, scratch, threads
from otlp.core import xp as X
from otlp.core.errors import InputError
from otlp.optimal import buckets as BK
from otlp.optimal import chains as C
from otlp.optimal import host

#: rows per CPU chunk: at most this many float64 values per [rows, V] temporary (1 MiB, so a chunk's dozen live
#: temporaries stay near the cache; one row at V >= 128k).
CPU_CHUNK = 1 << 17

#: the full sort's chunks run side by side on :mod:`otlp.backend.threads` from this many entries (rows x V) in a call
#: (the rows a bucketed try left, or every row): 15-70 ns an entry (far to close drafts), past the pool's hand-over and
#: torch's spinning OpenMP workers.
FULL_SORT_THREADS_MIN = 1 << 16

BACKENDS = ("auto", "torch", "triton")

#: the most B n^2 :func:`verify` takes (so n <= 16,384): the tuple rule's pieces compare the drafts of a row
#: pairwise (``chains._pieces``' [B, n, n] arrays, 9 bytes a cell: 2.4 GB at the limit); above it, :func:`verify`
#: refuses before any work (n = 100,000 at B = 2 ran 166 s, then asked numpy for 149 GiB)
MAX_PAIR_CELLS = 1 << 28


def verify(p, q, drafts, u, *, backend: str = "auto", rule=None, widths=None,  # noqa: ANN001, ANN201 - tensors
           compile: bool = False, totals=None, graphs: bool = False):  # noqa: A002 - torch.compile's name
    """One verified token per row (see the module docstring): ``p, q [B, V]`` (any float dtype), ``drafts int64
    [B, n]``, ``u float [B, 2]`` uniforms in [0, 1). Returns ``(tokens int64 [B], accepted_index int64 [B])``
    with -1 where the token came from the residual. ``backend="torch"`` keeps torch operations on the CPU too (and
    on CUDA the sorted route); ``backend="triton"`` takes the Triton route (module docstring; CUDA tensors, or the CPU
    under ``TRITON_INTERPRET=1``), which ``"auto"`` takes on CUDA tensors where Triton imports.
    ``rule(pre, w, window=...) -> (accept [B, n], reject [B])`` is the tuple rule on the class-chain prefix
    (default :func:`.chains.tuple_rule` with ``NEWTON_STEPS``; ``optimal_paths`` passes its path-optimal pair rule);
    ``window`` is ``None`` on the device route and ``"auto"`` on the CPU.

    ``widths int64 [B]`` (1 <= widths <= n; default rule only) masks the drafts: row b has only its first
    ``widths[b]`` drafts (a tree node with fewer children than n), the other slots are padding and never read, and
    the row gets the rule for n = widths[b]. The device routes compute every width 1..n on the whole batch and
    select per row (static shapes, no sync; the ratio sort is shared, the rest is n times one width's work); the
    CPU route computes each width present on its own rows. Row b's result is the unmasked call's on
    ``drafts[b, :widths[b]]`` with the same uniforms.

    ``compile=True`` (default rule, device routes only; the CPU's numpy route ignores it) runs the device route
    through ``torch.compile``, which fuses its elementwise work: the first call of each shape (B, V, n) compiles (tens
    of seconds), later calls of that shape reuse the kernels; for loops with fixed shapes, as CUDA graphs are. On the
    Triton route the torch operations compile and each Triton launch stays a call of its own
    (:func:`_compiled_bucket_route`; traced and checked on the CPU, not yet run on a GPU).

    ``totals``: the float64 row sums of p and q (numpy ``[B]`` each) when the caller took them exactly (the value
    check's, :func:`otlp.verifiers.base.check_tensors`); the CPU route then reads the rows once fewer.

    ``graphs=True`` (default rule, CUDA tensors only; elsewhere ignored) replays the device route from a CUDA graph
    captured for the call's shapes and dtypes, the rows rounded up to a power of two
    (:class:`otlp.backend.cuda_graphs.GraphCache`, one per device): the same kernels with one launch, for decode loops
    whose calls are too small to keep the GPU busy. The first call of each signature also runs the route three times
    (two warm-ups and the capture)."""
    import torch

    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if widths is not None and rule is not None:
        raise InputError("widths (a draft mask) is supported with the default tuple rule only")
    if graphs and rule is not None:
        raise InputError("graphs=True (CUDA graph replay) is supported with the default tuple rule only")
    B, n = drafts.shape
    if B * n * n > MAX_PAIR_CELLS:
        raise InputError(f"{n:,} drafts a row in {B:,} rows are over the sampler's limit of B n^2 <= "
                         f"{MAX_PAIR_CELLS:,} (its pieces compare a row's drafts pairwise); split the batch into "
                         f"rows of at most {max(1, MAX_PAIR_CELLS // (n * n)):,}, or draft fewer tokens")
    default = rule is None  # the default rule: its n = 1 form, and the bucketed partial order on the CPU
    U, drafts = guard(u, drafts, p.shape[1])
    args = (p, q, drafts, U) if widths is None else (p, q, drafts, U, widths)  # the device routes' arguments
    if backend == "triton" or (backend == "auto" and p.is_cuda and default and n <= MAX_KERNEL_DRAWS
                               and _triton()):
        if not default:
            raise InputError("backend='triton' runs the default tuple rule only")
        if not _triton():
            raise InputError("backend='triton' needs Triton (pip install triton; torch's CUDA builds ship it)")
        if n > MAX_KERNEL_DRAWS:
            raise InputError(f"backend='triton' takes at most {MAX_KERNEL_DRAWS} drafts a row, got {n}")
        if not p.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise InputError("backend='triton' runs on CUDA tensors (on the CPU only under TRITON_INTERPRET=1)")
        route = _BUCKET_ROUTES[bool(compile)]
        if graphs and p.is_cuda and p.shape[0] > 0:
            return _graph_cache(p.device).run(route, *args, rows=True)
        return route(*args)
    if backend == "torch" or p.device.type != "cpu":
        if graphs and p.is_cuda and p.shape[0] > 0:
            return _graph_cache(p.device).run(_DEVICE_ROUTES[bool(compile)], *args, rows=True)
        return _device_route(*args, rule=rule, compile=compile)
    rule = _default_rule if rule is None else rule
    B, V = p.shape
    Wn, Un = drafts.long().numpy(), U.numpy()
    ph, qh = _host(p), _host(q)  # [B, V] numpy views
    tp, tq = totals if totals else (None, None)
    rows_in = (ph, qh, BK.inverse_sums(ph, tp), BK.inverse_sums(qh, tq))  # the sums once per call: chunks agree
    if widths is None:
        return _cpu(rows_in, Wn, Un, rule, default, B)
    tokens, index = torch.empty(B, dtype=torch.int64), torch.empty(B, dtype=torch.int64)
    wn = widths.cpu().numpy()
    for m in np.unique(wn):  # each width present on its own rows
        rows = np.flatnonzero(wn == m)
        tokens[rows], index[rows] = _cpu(rows_in, Wn[rows, :m], Un[rows], rule, default, B, rows)
    return tokens, index


#: the largest float64 below 1: caller uniforms are clamped to [0, U_MAX] (:func:`guard`)
U_MAX = 1.0 - 2.0 ** -53


def guard(u, drafts, V: int):  # noqa: ANN001, ANN201 - tensors [B, 2], [B, n] -> float64 [B, 2], int64 [B, n]
    """What every route of :func:`verify` reads, made safe whatever the caller passed, by two elementwise device ops
    (no host sync, new tensors: the caller's are not written): the uniforms as float64 with NaN read as 0 and
    values clamped to [0, ``U_MAX``], and the draft ids clamped to [0, V - 1].

    With validation on (:func:`otlp.verifiers.base.check_tensors`) both were refused outside [0, 1) and [0, V), and
    this changes nothing. With it off, a uniform of 1.0 (a generator that returns (0, 1]) is read as the largest
    float64 below 1: u_0 (sum of the slots' and the residual's weights) then stays below the total, so the draw never
    falls past the last positive weight onto a token of zero probability, and likewise u_1 in the residual; NaN or a
    negative value is read as 0 (the first positive weight). An out-of-range draft id is read as the nearest token id,
    0 or V - 1, on every route (the C kernels clamp it too, once per draft: :mod:`otlp.backend.native`), where it would
    read outside the rows (a crash in the C loops, an IndexError in numpy, a device assert on CUDA)."""
    import torch

    U = torch.nan_to_num(u.to(torch.float64), nan=0.0).clamp_(0.0, U_MAX)  # [B, 2]
    return U, drafts.long().clamp(0, max(V - 1, 0))  # [B, n]


def _cpu(rows_in, w, U, rule, default: bool, B: int, rows=None):  # noqa: ANN001, ANN202
    """The CPU route on rows ``rows`` (int64 indices; default all) of the inputs ``rows_in = (p, q, inv_p, inv_q)``
    (numpy ``[B, V]`` rows, float32 or float64, and the reciprocals of their sums, :func:`.buckets.inverse_sums`),
    with drafts ``w [rows, n]`` and uniforms ``U`` (numpy), as ``(tokens, index)`` tensors: the default rule's n = 1
    form (:func:`.chains.single_draft`), the bucketed partial order (:mod:`.buckets`) where it pays for ``B`` rows
    (the whole call's) and the full sort for the rows it cannot certify, and for all rows otherwise. Rows are
    normalised chunk by chunk into reused arrays (:mod:`otlp.backend.scratch`): a float64 copy of the whole batch would
    be a fresh array above the allocator's mmap threshold, page-faulted on every call."""
    import torch

    count, n = w.shape
    V = rows_in[0].shape[1]

    def load(r):  # noqa: ANN001, ANN202 - a slice or an int64 index array of these rows -> their p, q, inv_p, inv_q
        pick = r if rows is None else rows[r]
        return tuple(x[pick] for x in rows_in)

    tokens, index = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    todo = np.arange(count)
    if default and n > 1 and BK.takes(B, V):
        tokens, index, done = BK.verify_chunks(load, count, V, w, U, n)
        todo = np.flatnonzero(~done)
    step = max(1, CPU_CHUNK // max(V, 1))

    def chunk(lo: int) -> None:  # rows todo[lo:lo + step], vectorised (into this thread's scratch arrays)
        sl = todo[lo:lo + step] if todo.size < count else slice(lo, lo + step)
        p, q, inv_p, inv_q = load(sl)
        if n == 1 and default:  # the rows are read whole only where the draft is rejected (the same tokens)
            got = native.single_draft(p, q, inv_p, inv_q, w[sl], U[sl])
            if got is not None:
                tokens[sl], index[sl] = got
                return
        P, Q = scratch.array("P", p.shape, np.float64), scratch.array("Q", q.shape, np.float64)
        key = native.normalised_keys(p, q, inv_p, inv_q, P, Q) if n > 1 or not default else None
        if key is None:  # (the kernels form the same products and keys in one pass)
            BK.normalised(p, inv_p, P)
            BK.normalised(q, inv_q, Q)
        if n == 1 and default:
            tokens[sl], index[sl] = C.single_draft(P, Q, w[sl], U[sl])
            return
        pre = host.prefix(P, Q, n, None if key is None else X.sort_descending(key), reuse=True)  # done by the next
        accept, reject = rule(pre, w[sl], window="auto")
        tokens[sl], index[sl] = host.sample(pre, accept, reject, w[sl], U[sl])

    if todo.size * V >= FULL_SORT_THREADS_MIN and threads.count() > 1:  # side by side on the host threads
        step = threads.chunk_rows(todo.size, step)
        threads.map_chunks(chunk, range(0, todo.size, step))
    else:
        for lo in range(0, todo.size, step):
            chunk(lo)
    return torch.from_numpy(tokens), torch.from_numpy(index)


def _default_rule(pre, w, window=None):  # noqa: ANN001, ANN202
    """The default tuple rule: :func:`.chains.tuple_rule` with ``NEWTON_STEPS`` (on the host through
    :func:`.host.tuple_rule`, which hands tensors to the reference)."""
    return host.tuple_rule(pre, w, window=window, steps=C.NEWTON_STEPS)


@functools.cache
def _compiled_device():  # noqa: ANN202
    """``torch.compile`` of :func:`_device` with the default rule, made on first use, with static shapes: every new
    shape compiles its own graph (torch 2.11's inductor failed an internal assertion when it recompiled the route for
    a second vocabulary size with dynamic shapes, on an H200)."""
    import torch

    return torch.compile(_device, dynamic=False)


def _device_route(p, q, drafts, U, widths=None, *, rule=None, compile: bool = False):  # noqa: ANN001, ANN202, A002
    """The device route of :func:`verify` (``rule`` None: the default rule): ``(tokens, index)``."""
    P, Q = _normalised(p), _normalised(q)
    if compile and rule is None:
        device = _compiled_device()
    else:
        device = functools.partial(_device, rule=rule or _default_rule, default=rule is None)
    if widths is None:
        return device(P, Q, drafts, U)[:2]
    order = [None]  # the ratio sort, made by the first width and shared by the others (it does not depend on n)

    def width(m: int):  # noqa: ANN202
        t, i, order[0] = device(P, Q, drafts[:, :m], U, order[0])
        return t, i

    return _by_width(widths, drafts.shape[1], width)


def _by_width(widths, n: int, width):  # noqa: ANN001, ANN202
    """``(tokens, index)`` with row b's from width ``widths[b]``: every width m = 1..n on every row (``width(m)``),
    selected per row (static shapes, no sync)."""
    import torch

    tokens = index = None
    for m in range(1, n + 1):
        t, i = width(m)
        here = widths == m
        tokens = t if tokens is None else torch.where(here, t, tokens)
        index = i if index is None else torch.where(here, i, index)
    return tokens, index


#: the most drafts a row the Triton route takes (its fallback kernel's expansions, :mod:`.device_fallback`)
MAX_KERNEL_DRAWS = 64


@functools.cache
def _triton() -> bool:
    from otlp.backend import triton

    return triton.available()


def triton_route_options() -> dict:
    """The options of :func:`.device_buckets.decide` on the Triton route: the Triton passes, the cell rule's roots in
    one kernel (:mod:`.triton_roots`), the refinement rows and the fallback kernel of :data:`.device_buckets.ROUTE`."""
    from otlp.optimal import device_buckets as DB
    from otlp.optimal import triton_roots
    from otlp.optimal.device_passes import TRITON

    return {"passes": TRITON, "roots": triton_roots.slot_mass, **DB.ROUTE}


def _bucket_route(p, q, drafts, U, widths=None, *, roots=None):  # noqa: ANN001, ANN202
    """The Triton route of :func:`verify`: :func:`.device_buckets.decide` with :func:`triton_route_options` (every
    row it cannot certify decided in the fallback kernel); with ``widths``, every width on every row, selected per
    row (static shapes). ``roots``: the cell rule's root solver in place of the Triton kernel's (the compiled
    route's: :func:`_compiled_bucket_route`)."""
    from otlp.optimal import device_buckets as DB

    options = triton_route_options()
    if roots is not None:
        options["roots"] = roots

    def one(w):  # noqa: ANN001, ANN202
        d = DB.decide(p, q, w, U, **options)
        return d.tokens, d.index

    if widths is None:
        return one(drafts)
    return _by_width(widths, drafts.shape[1], lambda m: one(drafts[:, :m]))


@functools.cache
def _compiled_bucket_route():  # noqa: ANN202
    """``torch.compile`` of :func:`_bucket_route`, made on first use, with static shapes: its torch operations (the
    compressed instance, the cell rule, the certificate: ~2,600 small ops a call eager) compile to fused kernels,
    each Triton launch stays one call between graphs (:func:`otlp.backend.triton.opaque`), and the cell rule's roots
    are torch's (:func:`.chains.slot_mass`, fused by the compiler) rather than a launch of their own."""
    import torch

    return torch.compile(functools.partial(_bucket_route, roots=C.slot_mass), dynamic=False)


def _bucket_route_compiled(p, q, drafts, U, widths=None):  # noqa: ANN001, ANN202
    """:func:`_bucket_route` through :func:`_compiled_bucket_route` (``compile=True``)."""
    return _compiled_bucket_route()(p, q, drafts, U, widths)


#: the default rule's device routes, eager and compiled: stable callables, as the graph cache keys on them
_DEVICE_ROUTES = {False: _device_route, True: functools.partial(_device_route, compile=True)}
_BUCKET_ROUTES = {False: _bucket_route, True: _bucket_route_compiled}


@functools.cache
def _graph_cache(device):  # noqa: ANN001, ANN202 - a torch.device
    """The CUDA graphs of the device route on ``device``, made on first use (graphs and their pool are per device)."""
    from otlp.backend.cuda_graphs import GraphCache

    return GraphCache()


def _device(P, Q, drafts, U, order=None, *, rule=_default_rule, default: bool = True):  # noqa: ANN001, ANN202
    """The device route for the width ``drafts.shape[1]``: ``(tokens, index, order)`` (``order``: the shared ratio
    sort; ``default``: the default rule, whose n = 1 form needs no sort, :func:`.chains.single_draft`)."""
    n = drafts.shape[1]
    if n == 1 and default:
        tokens, index = C.single_draft(P, Q, drafts, U)
        return tokens.long(), index.long(), order
    pre = C.prefix(P, Q, n, order)
    accept, reject = rule(pre, drafts)
    tokens, index = C.sample(pre, accept, reject, drafts, U)
    return tokens.long(), index.long(), pre.order


_normalised = C.normalised_rows  # (its name here for the tests and benchmarks that read it)


def _host(x) -> np.ndarray:  # noqa: ANN001 - a CPU tensor
    """A CPU tensor's rows as numpy float32 or float64 (a view; float16 and bfloat16, which convert exactly, as a
    float32 copy)."""
    import torch

    x = x.detach()
    return x.numpy() if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32).numpy()
