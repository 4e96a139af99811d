"""Small C kernels for the CPU samplers' per-token passes, built when the package is built (setup.py).

numpy spends one pass over a ``[B, V]`` array per operation; the optimal rule's bucketed route (``buckets.c``, see its
header) needs about ten for what a loop does in two, its class chains' slot roots (``chains.c``) about 25 per Newton
step, the rest of a served group's chain about 40, and psi on the prefixes with the served group about 30; the plan of
the rule for drafts without replacement (``wor_plan.c``) a few hundred small numpy calls a row, and more a Newton step
where its drafted sets are many. setup.py compiles the sources into two libraries beside this file, ``_kernels``
(portable) and ``_kernels_avx2`` (x86-64 with AVX2, taken where the CPU has it), each with OpenMP where the compiler
had it. They are loaded here with ctypes, which
lets go of the GIL during a call (so the row chunks of :mod:`otlp.backend.threads` run side by side). Nothing is
compiled at run time. Where the package was built without a compiler, or with ``OTLP_NATIVE=0``, or the library was
built from other sources than the C files beside it (:mod:`.sources`), :func:`library` returns
None and the callers take their numpy route, which gives the same answers (tests/backend/test_native.py): bit for bit
from the same row sums, or to rounding where a docstring below says so.

"Bit for bit" is kernel for kernel, on the same inputs. A sampler call is the same bits on both routes only where
the rows' float64 sums are: the kernels sum a row in eight lanes (:func:`row_stats`), numpy pairwise and torch in
its own order, and these differ in the last bit on some rows, so the normalised rows P = p / sum(p) can differ by an
ulp. Where that re-orders two exactly tied ratios p/q, ``OTLP_NATIVE=0`` and ``=1`` can return different tokens for
the same uniforms, each exact for its own rounding of the row (the law is p on both). Rows whose sums are exact in
every order (e.g. dyadic entries) give the same tokens (tests/test_unbounded_work.py).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import os
import platform
from pathlib import Path

import numpy as np

from otlp.backend import scratch
from otlp.backend.native.sources import fingerprint

#: the libraries setup.py builds, in the order they are tried (the AVX2 one only where the CPU has AVX2)
LIBRARIES = ("_kernels_avx2", "_kernels")
#: :func:`slot_mass` takes n up to here (chains.c's integers stay exact in int64).
SLOT_MASS_MAX_N = 32

_VOID, _I64, _F64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int


def enabled() -> bool:
    """False when ``OTLP_NATIVE`` is "0", "false", "no" or "off"."""
    return os.environ.get("OTLP_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def library() -> ctypes.CDLL | None:
    """The kernels (loaded on first use), or None where they are off or were not built (:func:`reason`)."""
    if not enabled():
        return None
    return _load()


def openmp() -> bool:
    """True where the kernels are built with OpenMP (``otlp_bucket_rule`` spreads a call's rows over a team)."""
    lib = library()
    return lib is not None and bool(lib.otlp_openmp())


def reason() -> str | None:
    """Why :func:`library` is None: "OTLP_NATIVE=0", or what the loader found; None when it is not."""
    if not enabled():
        return "OTLP_NATIVE=0"
    return None if library() is not None else (_FAILURES[-1] if _FAILURES else "no kernels")


_FAILURES: list[str] = []


def has_avx2() -> bool:
    """True on an x86-64 Linux CPU that reports AVX2 (elsewhere the portable library is taken)."""
    try:
        return platform.machine() in ("x86_64", "AMD64") and " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def library_path(name: str, folder: Path | None = None) -> Path | None:
    """The built library ``name`` (one of :data:`LIBRARIES`) in ``folder`` (this package's), or None."""
    folder = Path(__file__).parent if folder is None else folder
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (folder / f"{name}{suffix}").is_file():
            return folder / f"{name}{suffix}"
    return None


def load(path: Path) -> ctypes.CDLL:
    """The kernels of the library at ``path``, with their signatures declared (OSError where it does not load, or
    where it was built from other sources than the C files beside it: an in-place build not redone after they
    changed, whose functions may take other arguments than declared here)."""
    try:
        lib = _declare(ctypes.CDLL(str(path)))
    except AttributeError as exc:  # a library without one of the kernels
        raise OSError(f"{path}: {exc}") from exc
    here = fingerprint(path.parent)  # None beside an installed wheel's library, which carries no sources
    if here is not None and lib.otlp_source_fingerprint().decode() != here:
        raise OSError(f"{path.name} was built from other C sources than those beside it: rebuild it "
                      "(pip install -e . or python setup.py build_ext --inplace)")
    return lib


@functools.cache
def _load() -> ctypes.CDLL | None:
    for name in LIBRARIES:
        if name.endswith("_avx2") and not has_avx2():
            continue
        path = library_path(name)
        if path is None:
            _FAILURES.append(f"{name} was not built (the package was built without a working C compiler)")
            continue
        try:
            return load(path)
        except OSError as exc:
            _FAILURES.append(str(exc).splitlines()[0])
    return None


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.otlp_source_fingerprint.argtypes = []
    lib.otlp_source_fingerprint.restype = ctypes.c_char_p
    lib.otlp_bucket_sums.argtypes = [_VOID, _VOID, _INT, _I64, _I64, _VOID, _VOID, _INT, _I64, _I64, _F64, _F64,
                                     _VOID, _VOID, _VOID, _VOID]
    lib.otlp_bucket_sums.restype = None
    lib.otlp_gather_selected.argtypes = [_VOID, _VOID, _INT, _I64, _I64, _VOID, _VOID, _VOID, _VOID, _I64, _I64,
                                         _VOID, _VOID, _VOID]
    lib.otlp_gather_selected.restype = _I64
    lib.otlp_row_stats.argtypes = [_VOID, _INT, _I64, _I64, _I64, _VOID, _VOID]
    lib.otlp_row_stats.restype = None
    lib.otlp_sort_runs.argtypes = [_VOID, _VOID, _I64, _I64, _INT, _INT] + [_VOID] * 4
    lib.otlp_sort_runs.restype = _I64
    lib.otlp_normalised_keys.argtypes = [_VOID, _VOID, _INT, _I64, _I64] + [_VOID] * 5
    lib.otlp_normalised_keys.restype = None
    lib.otlp_slot_mass.argtypes = [_VOID, _VOID, _VOID, _VOID, _I64, _INT, _I64, _VOID]
    lib.otlp_slot_mass.restype = None
    lib.otlp_window_chain.argtypes = [_VOID] * 5 + [_I64, _I64] + [_VOID] * 5 + [_I64, _INT, _I64] + [_VOID] * 3
    lib.otlp_window_chain.restype = _INT
    lib.otlp_prefix.argtypes = [_VOID, _VOID, _VOID, _I64, _I64, _INT] + [_VOID] * 7
    lib.otlp_prefix.restype = None
    lib.otlp_served_group.argtypes = [_VOID] * 4 + [_I64] * 3 + [_VOID] * 4
    lib.otlp_served_group.restype = None
    lib.otlp_pieces.argtypes = [_VOID] * 6 + [_I64, _INT, _VOID, _VOID]
    lib.otlp_pieces.restype = None
    lib.otlp_sample.argtypes = [_VOID] * 7 + [_I64, _I64, _INT, _VOID, _VOID]
    lib.otlp_sample.restype = None
    lib.otlp_single_draft.argtypes = [_VOID, _VOID, _INT, _I64, _I64, _I64, _I64] + [_VOID] * 6
    lib.otlp_single_draft.restype = None
    lib.otlp_bucket_rule.argtypes = ([_VOID, _VOID, _INT, _I64, _I64, _I64, _I64] + [_VOID] * 4
                                     + [_INT, _I64, _INT, _I64, _I64, _F64, _F64, _VOID, _VOID, _F64, _I64, _INT, _INT,
                                        _VOID, _INT, _I64, _INT] + [_VOID] * 3)
    lib.otlp_bucket_rule.restype = _INT
    lib.otlp_kseq_first_stage.argtypes = [_VOID, _VOID, _INT, _I64, _I64, _INT, _INT, _INT] + [_VOID] * 5 + [
        _I64, _VOID, _VOID]
    lib.otlp_kseq_first_stage.restype = _I64
    lib.otlp_sort_bucket.argtypes = [_VOID, _I64, _INT, _INT, _VOID]
    lib.otlp_sort_bucket.restype = _INT
    lib.otlp_wor_prefix.argtypes = [_VOID, _VOID, _I64, _INT, _VOID, _VOID, _F64, _I64, _VOID, _VOID]
    lib.otlp_wor_prefix.restype = _INT
    lib.otlp_wor_closed_psi.argtypes = [_VOID] * 3 + [_I64, _INT] + [_VOID] * 6
    lib.otlp_wor_closed_psi.restype = None
    lib.otlp_wor_plan.argtypes = [_VOID, _VOID, _I64, _I64, _VOID, _I64, _INT, _VOID, _INT, _F64, _VOID, _VOID]
    lib.otlp_wor_plan.restype = _INT
    lib.otlp_set_probabilities.argtypes = [_VOID, _VOID, _VOID, _I64, _I64, _VOID, _I64, _INT, _VOID]
    lib.otlp_set_probabilities.restype = None
    lib.otlp_openmp.argtypes = []
    lib.otlp_openmp.restype = _INT
    return lib


def rows_in_place(x: np.ndarray) -> tuple[np.ndarray, int]:
    """``(x, ld)`` for a kernel that reads row b of ``x [B, V]`` at ``x + b ld`` (``ld`` in entries): ``x`` itself
    where its rows are contiguous and evenly spaced (a C-contiguous array, ``ld = V``, or a strided view such as one
    position ``t[:, j]`` of an engine's ``[B, n + 1, V]`` tensor, ``ld = (n + 1) V``: no copy), else a C-contiguous
    copy and ``ld = V``."""
    B, V = x.shape
    size = x.itemsize
    if x.flags.c_contiguous:
        return x, V
    if B > 0 and (V <= 1 or x.strides[1] == size) and x.strides[0] % size == 0 and x.strides[0] >= V * size:
        return x, x.strides[0] // size
    return np.ascontiguousarray(x), V


def row_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(total, low)``, each ``float64 [B]``: the float64 sum and the least entry of each row of ``x [B, V]``
    (float32 or float64) in one pass of ``otlp_row_stats``; None where the kernels are not built or ``x`` is of
    another dtype or shape (a NaN entry makes its row's total NaN and its low meaningless)."""
    lib = library()
    if lib is None or x.ndim != 2 or x.dtype not in (np.float32, np.float64):
        return None
    x, ld = rows_in_place(x)
    total, low = np.empty(x.shape[0]), np.empty(x.shape[0])
    lib.otlp_row_stats(x.ctypes.data, int(x.dtype == np.float64), x.shape[0], x.shape[1], ld, total.ctypes.data,
                       low.ctypes.data)
    return total, low


def normalised_keys(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, P: np.ndarray,
                    Q: np.ndarray) -> np.ndarray | None:
    """The rows ``p, q [B, V]`` (float32 or float64, one dtype) times ``inv_p, inv_q [B]`` into ``P, Q`` (float64
    ``[B, V]``, C-contiguous) and their ratio keys (:func:`otlp.core.psi.ratio_keys`, a new ``[B, V]`` array), in one
    pass of ``otlp_normalised_keys`` (the numpy route's bits); None where the kernels are not built or the inputs are of
    other dtypes."""
    lib = library()
    if lib is None or p.dtype != q.dtype or p.dtype not in (np.float32, np.float64) or p.ndim != 2:
        return None
    p, q = np.ascontiguousarray(p), np.ascontiguousarray(q)
    inv_p, inv_q = np.ascontiguousarray(inv_p, dtype=np.float64), np.ascontiguousarray(inv_q, dtype=np.float64)
    key = np.empty(p.shape)
    lib.otlp_normalised_keys(p.ctypes.data, q.ctypes.data, int(p.dtype == np.float64), p.shape[0], p.shape[1],
                             inv_p.ctypes.data, inv_q.ctypes.data, P.ctypes.data, Q.ctypes.data, key.ctypes.data)
    return key


def sort_runs(key: np.ndarray, packed: np.ndarray, s: int, bits: int = 63):  # noqa: ANN201
    """:func:`otlp.core.xp._packed_sort`'s passes around its sorts in ``otlp_sort_runs`` (``buckets.c``, the same
    order): ``packed int64 [B, V]`` its sorted packed keys (ascending) -> ``(order, rows, composite)``, the ids by
    decreasing packed key ``[B, V]`` and, where ties are dense, the rows holding a run of truncated ties with different
    exact keys ``int64 [R]`` with their composite keys ``[R, V]`` (sorted, their low ``s`` bits are those rows' exact
    order; R = 0 where no truncated keys tie: the order is exact); ``rows`` None where ties are sparse (the caller
    repairs the runs' positions). None where the kernels are
    not built or the composite keys would not fit in ``bits`` bits (<= 63)."""
    lib = library()
    if lib is None:
        return None
    B, V = key.shape
    key, packed = np.ascontiguousarray(key, dtype=np.float64), np.ascontiguousarray(packed)
    order, rows, R = np.empty((B, V), dtype=np.int64), np.empty(B, dtype=np.int64), np.zeros(1, dtype=np.int64)
    composite = scratch.array("sort_composite", (B, V), np.int64)
    if lib.otlp_sort_runs(key.ctypes.data, packed.ctypes.data, B, V, s, min(bits, 63), order.ctypes.data,
                          composite.ctypes.data, rows.ctypes.data, R.ctypes.data) < 0:
        return None
    if R[0] < 0:  # sparse ties
        return order, None, None
    return order, rows[: R[0]], composite[: R[0]]  # no ties (the order is exact), or dense ones


def slot_mass(H, L, r_below, gap, n: int, limit: int) -> np.ndarray | None:  # noqa: ANN001 - arrays or lists
    """:func:`otlp.optimal.chains.slot_mass` at 3 <= n <= ``SLOT_MASS_MAX_N`` in ``otlp_slot_mass``, each entry at
    most ``limit`` Newton steps: the numpy route's bits (``chains.c``); None where the kernels are not built or n is
    out of range. The inputs are numpy arrays (broadcast together; taken as they are where they already are float64,
    C-contiguous and of one shape), or four Python lists of floats of one length k (the scalar path,
    :mod:`otlp.optimal.scalar`), packed into one new ``float64 [5, k]`` buffer whose last row takes the roots, so that a
    call converts one array and reads one pointer (a ctypes call's cost is mostly its arguments': about 0.7 us per
    array pointer). Returns a new float64 array of the broadcast shape (``[k]`` for lists)."""
    lib = library()
    if lib is None or not 3 <= n <= SLOT_MASS_MAX_N:
        return None
    if type(H) is list:
        k = len(H)
        if not len(L) == len(r_below) == len(gap) == k:
            raise ValueError(f"slot_mass: lists of {k}, {len(L)}, {len(r_below)} and {len(gap)} entries, not one size")
        buf = np.array((H, L, r_below, gap, H), dtype=np.float64)  # [5, k]: H, L, r_below, gap, the roots (overwritten)
        at, row = buf.ctypes.data, 8 * k
        lib.otlp_slot_mass(at, at + row, at + 2 * row, at + 3 * row, k, n, limit, at + 4 * row)
        return buf[4]
    if not (type(H) is type(L) is type(r_below) is type(gap) is np.ndarray
            and H.dtype == L.dtype == r_below.dtype == gap.dtype == np.float64
            and H.shape == L.shape == r_below.shape == gap.shape and H.flags.c_contiguous and L.flags.c_contiguous
            and r_below.flags.c_contiguous and gap.flags.c_contiguous):
        H, L, r_below, gap = (np.ascontiguousarray(x, dtype=np.float64)
                              for x in np.broadcast_arrays(H, L, r_below, gap))
    out = np.empty(H.shape)
    lib.otlp_slot_mass(H.ctypes.data, L.ctypes.data, r_below.ctypes.data, gap.ctypes.data, out.size, n, limit,
                       out.ctypes.data)
    return out


def window_chain(pre, s, e, top, pos, limit: int):  # noqa: ANN001, ANN201 - a chains.Prefix and numpy arrays
    """The class chain of each row's served group on its positions s .. top + 1 (``s, e, top int64 [B, 1]``) as
    :func:`otlp.optimal.chains.window_hazards` forms it, in ``otlp_window_chain`` (``chains.c``; at n >= 3 its roots
    start from their neighbour's, so they agree with the numpy route's to rounding), each slot root at most ``limit``
    Newton steps after its start: ``(cum, cum_c)``, float64 ``[B, k]``, the running sums of the hazards and of the
    certain slots read at the positions ``pos int64 [B, k]`` (the draws'), and ``beta [B]``; None where the kernels
    are not built or n is above ``SLOT_MASS_MAX_N``."""
    lib = library()
    if lib is None or not 1 <= pre.n <= SLOT_MASS_MAX_N:
        return None
    B, V = pre.ps.shape
    rows = [np.ascontiguousarray(x, dtype=np.float64) for x in (pre.ps, pre.qs, pre.prefix_q, pre.suffix_q, pre.psi)]
    ends = [np.ascontiguousarray(x, dtype=np.int64).reshape(B, -1) for x in (pre.m_star, s, e, top, pos)]
    draws = ends[-1].shape[1]
    cum, cum_c, beta = np.empty((B, draws)), np.empty((B, draws)), np.empty(B)
    if lib.otlp_window_chain(*(x.ctypes.data for x in rows), B, V, *(x.ctypes.data for x in ends), draws, pre.n, limit,
                             cum.ctypes.data, cum_c.ctypes.data, beta.ctypes.data):
        width = int((top - s).max()) + 2
        raise MemoryError(f"otlp_window_chain: no memory for the work arrays of windows of up to {width} positions")
    return cum, cum_c, beta


def prefix(P: np.ndarray, Q: np.ndarray, order: np.ndarray, n: int, reuse: bool = False):  # noqa: ANN201
    """:func:`otlp.optimal.chains.prefix`'s arrays for float64 rows ``P, Q [B, V]`` in the ratio order ``order int64
    [B, V]``, in ``otlp_prefix`` (``chains.c``: the numpy route's bits): ``(ps, qs, prefix_q, suffix_q, psi,
    m_star)``; None where the kernels are not built or n is above ``SLOT_MASS_MAX_N``. ``reuse``: the arrays are
    this thread's :mod:`otlp.backend.scratch` buffers (valid until the next such call: for a caller that is done with
    them by then), not fresh ones, whose pages the first write would fault in on every call."""
    lib = library()
    if lib is None or not 1 <= n <= SLOT_MASS_MAX_N or P.ndim != 2:
        return None
    B, V = P.shape
    P, Q = np.ascontiguousarray(P, dtype=np.float64), np.ascontiguousarray(Q, dtype=np.float64)
    order = np.ascontiguousarray(order, dtype=np.int64)

    def new(name: str, shape: tuple, dtype=np.float64) -> np.ndarray:  # noqa: ANN001
        return scratch.array(f"prefix_{name}", shape, dtype) if reuse else np.empty(shape, dtype=dtype)

    ps, qs = new("ps", (B, V)), new("qs", (B, V))
    prefix_q, suffix_q, psi = new("prefix_q", (B, V + 1)), new("suffix_q", (B, V + 1)), new("psi", (B, V + 1))
    m_star = np.empty(B, dtype=np.int64)
    work = scratch.array("prefix_work", (V + 1,), np.float64)  # the kernel's own: never returned
    lib.otlp_prefix(P.ctypes.data, Q.ctypes.data, order.ctypes.data, B, V, n, *(x.ctypes.data for x in (
        ps, qs, prefix_q, suffix_q, psi, m_star, work)))
    return ps, qs, prefix_q, suffix_q, psi, m_star


def served_group(pre, w: np.ndarray):  # noqa: ANN001, ANN201 - a chains.Prefix of numpy arrays
    """:func:`otlp.optimal.chains.served_group` for the drafts ``w int64 [B, k]`` in ``otlp_served_group``
    (``chains.c``: the same positions): ``(pos [B, k], top [B, 1], s [B, 1], e [B, 1])``; None where the kernels are
    not built or ``w`` has other rows than the prefix (one row evaluated on many tuples)."""
    lib = library()
    B, V = pre.order.shape
    if lib is None or w.ndim != 2 or w.shape[0] != B:
        return None
    psi, order = np.ascontiguousarray(pre.psi, dtype=np.float64), np.ascontiguousarray(pre.order, dtype=np.int64)
    w, m_star = np.ascontiguousarray(w, dtype=np.int64), np.ascontiguousarray(pre.m_star, dtype=np.int64)
    pos = np.empty(w.shape, dtype=np.int64)
    top, s, e = (np.empty((B, 1), dtype=np.int64) for _ in range(3))
    lib.otlp_served_group(psi.ctypes.data, order.ctypes.data, w.ctypes.data, m_star.ctypes.data, B, V, w.shape[1],
                          *(x.ctypes.data for x in (pos, top, s, e)))
    return pos, top, s, e


def pieces(w: np.ndarray, pos: np.ndarray, s: np.ndarray, cum: np.ndarray, cum_c: np.ndarray, beta: np.ndarray):
    """:func:`otlp.optimal.chains._pieces` on numpy arrays (``w, pos int64 [B, n]``, ``s [B, 1]``, ``cum, cum_c
    [B, n]``, ``beta [B]``) in ``otlp_pieces`` (``chains.c``; the C library's exp and expm1, so equal to rounding):
    ``(accept [B, n], reject [B])``; None where the kernels are not built or n is above ``SLOT_MASS_MAX_N``."""
    lib = library()
    B, n = w.shape
    if lib is None or not 1 <= n <= SLOT_MASS_MAX_N:
        return None
    ints = [np.ascontiguousarray(x, dtype=np.int64) for x in (w, pos, s)]
    floats = [np.ascontiguousarray(x, dtype=np.float64) for x in (cum, cum_c, beta)]
    accept, reject = np.empty((B, n)), np.empty(B)
    lib.otlp_pieces(*(x.ctypes.data for x in ints + floats), B, n, accept.ctypes.data, reject.ctypes.data)
    return accept, reject


def sample(pre, accept: np.ndarray, reject: np.ndarray, w: np.ndarray, u: np.ndarray):  # noqa: ANN001, ANN201
    """:func:`otlp.optimal.chains.sample` on numpy arrays in ``otlp_sample`` (``chains.c``, the same operations):
    ``(tokens [B], index [B])``; None where the kernels are not built or n is above ``SLOT_MASS_MAX_N``."""
    lib = library()
    B, n = w.shape
    if lib is None or not 1 <= n <= SLOT_MASS_MAX_N or pre.order.shape[0] != B:
        return None
    V = pre.order.shape[1]
    floats = [np.ascontiguousarray(x, dtype=np.float64) for x in (accept, reject)]
    w = np.ascontiguousarray(w, dtype=np.int64)
    u = np.ascontiguousarray(u[:, :2], dtype=np.float64)
    psi = np.ascontiguousarray(pre.psi, dtype=np.float64)
    ints = [np.ascontiguousarray(x, dtype=np.int64) for x in (pre.order, pre.m_star)]
    tokens, index = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64)
    lib.otlp_sample(*(x.ctypes.data for x in floats + [w, u, psi] + ints), B, V, n, tokens.ctypes.data,
                    index.ctypes.data)
    return tokens, index


def single_draft(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, w: np.ndarray, u: np.ndarray):
    """:func:`otlp.optimal.chains.single_draft` on the unnormalised rows ``p, q [B, V]`` (float32 or float64, one
    dtype) with the reciprocals of their sums ``inv_p, inv_q [B]``, drafts ``w [B, 1]`` and uniforms ``u [B, 2]``, in
    ``otlp_single_draft`` (``chains.c``: the numpy route's operations, so the same tokens; only rejected rows read
    whole): ``(tokens [B], index [B])``; None where the kernels are not built or the rows are of other dtypes."""
    lib = library()
    if lib is None or p.dtype != q.dtype or p.dtype not in (np.float32, np.float64) or p.ndim != 2:
        return None
    B, V = p.shape
    (p, ldp), (q, ldq) = rows_in_place(p), rows_in_place(q)
    floats = [np.ascontiguousarray(x, dtype=np.float64) for x in (inv_p, inv_q)]
    w = np.ascontiguousarray(w[:, 0], dtype=np.int64)
    u = np.ascontiguousarray(u[:, :2], dtype=np.float64)
    tokens, index = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64)
    lib.otlp_single_draft(p.ctypes.data, q.ctypes.data, int(p.dtype == np.float64), B, V, ldp, ldq,
                          *(x.ctypes.data for x in (*floats, w, u, tokens, index)))
    return tokens, index


def bucket_rule(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, w: np.ndarray, u: np.ndarray,
                n: int, *, steps: int, bits: int, top: int, NB: int, below: float, above: float, LO: np.ndarray,
                HI: np.ndarray, margin: float, share: int, attempts: int, bound: bool = False,
                forced: np.ndarray | None = None, threads: int = 1, whole: int = 0, crowd: int = 0,
                stats: dict | None = None):  # noqa: ANN201
    """The bucket rule's steps (:mod:`otlp.optimal.buckets`) on the rows ``p, q [B, V]`` (float32 or float64, one dtype,
    normalised by ``inv_p, inv_q [B]``) with drafts ``w int64 [B, n]`` and uniforms ``u [B, 2]``, one row at a time in
    ``otlp_bucket_rule`` (``bucket_rule.c``): ``(tokens [B], index [B], status int8 [B])``, status the attempt that
    certified the row (1 .. ``attempts``), ``attempts + 1`` for a row that took its full order in the call (every
    bucket sorted; at most ``whole`` rows of the call, among those that the buckets do not certify), 0 for a row whose
    compressed instance would hold more than 1 / ``share`` of its tokens (not tried), -``attempts`` for one that failed
    every attempt, -(``attempts`` + 1) for one left before its gather (``crowd``; those three need another route,
    their tokens are meaningless). The buckets' scheme (``bits`` per octave, ``NB`` buckets, the top bucket's pattern
    key ``top``, the clamps ``below`` and ``above``, the ranges ``LO, HI [NB]``) and ``margin``, ``share``,
    ``attempts`` are :mod:`otlp.optimal.buckets`' (:func:`~otlp.optimal.buckets._native_rows` passes them);
    ``steps``: the Newton steps of the chain's roots; ``bound``: merged runs may lie inside the served window, their
    hazard bounded (``bucket_rule.c``'s ``window_bound``; else the window's buckets are sorted); ``forced bool [B,
    NB]``: the first attempt's selection instead of the rule's; ``crowd`` (> 0): a row of which that many of 192
    tokens spread over it would be gathered by its first attempt is left before it, status -(attempts + 1) (from
    V = 8192; ``bucket_rule.c``'s ``crowded``: for a caller that tries such rows on finer buckets,
    :func:`otlp.optimal.buckets.zoom`); ``threads``: an OpenMP team of that many threads takes the rows one at a time
    inside the call (the same results; one thread where the kernels were built without OpenMP, :func:`openmp`);
    ``stats``, a dict: its "threads" set to the number that took part.
    None where the kernels are not built, n is above ``SLOT_MASS_MAX_N`` or the rows are of other dtypes."""
    lib = library()
    if lib is None or not 1 <= n <= SLOT_MASS_MAX_N or p.dtype != q.dtype or p.dtype not in (np.float32, np.float64):
        return None
    B, V = p.shape
    (p, ldp), (q, ldq) = rows_in_place(p), rows_in_place(q)
    floats = [np.ascontiguousarray(x, dtype=np.float64) for x in (inv_p, inv_q)]
    w = np.ascontiguousarray(w, dtype=np.int64)
    u = np.ascontiguousarray(u[:, :2], dtype=np.float64)
    LO, HI = np.ascontiguousarray(LO, dtype=np.float64), np.ascontiguousarray(HI, dtype=np.float64)
    if forced is not None:
        forced = np.ascontiguousarray(forced, dtype=bool).view(np.uint8)
    tokens, index, status = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int8)
    used = lib.otlp_bucket_rule(p.ctypes.data, q.ctypes.data, int(p.dtype == np.float64), B, V, ldp, ldq,
                            *(x.ctypes.data for x in (*floats, w, u)), n, steps, bits, top, NB, below, above,
                            LO.ctypes.data, HI.ctypes.data, margin, share, attempts, int(bool(bound)),
                            None if forced is None else forced.ctypes.data, max(int(threads), 1), max(int(whole), 0),
                            max(int(crowd), 0), tokens.ctypes.data, index.ctypes.data, status.ctypes.data)
    if used < 0:
        raise MemoryError(f"otlp_bucket_rule: no memory for the work arrays of rows of {V} tokens")
    if stats is not None:
        stats["threads"] = used
    return tokens, index, status


def sort_bucket(key: np.ndarray, bits: int, edge: bool = False) -> np.ndarray | None:
    """The order ``bucket_rule.c`` gives one selected bucket's tokens: ``int64 [m]``, the indices of ``key float64
    [m]`` (keys of one bucket of ``bits`` bits per octave; ``edge``: the top or bottom bucket) by decreasing key,
    equal keys in index order. None where the kernels are not built."""
    lib = library()
    if lib is None:
        return None
    key = np.ascontiguousarray(key, dtype=np.float64)
    cols = np.empty(key.size, dtype=np.int64)
    if lib.otlp_sort_bucket(key.ctypes.data, key.size, 52 - bits, int(edge), cols.ctypes.data):
        raise MemoryError(f"otlp_sort_bucket: no memory for {key.size} keys")
    return cols


def kseq_first_stage(P: np.ndarray, Q: np.ndarray, n: int, steps: int, inner: bool):  # noqa: ANN201
    """:func:`otlp.verifiers.kseq._first_stage` on rows ``P, Q [b, V]`` (float32 or float64, one dtype) in
    ``otlp_kseq_first_stage`` (``kseq.c``: a step is one pass over a row, its sums exact to float64 rounding): the
    bracket ``(lo, hi)`` (``[b, 1]`` each, in P's dtype) after ``steps`` bisection steps from [1, n], and with ``inner``
    also ``(A, C, rows, p, q)``, the classes' sums ``[b, 1]`` and the inner tokens' rows ``int64 [T]`` (non-decreasing)
    and their p and q ``[T]``, row by row in token order. None where the kernels are not built or the rows are of other
    dtypes."""
    lib = library()
    if lib is None or P.dtype != Q.dtype or P.dtype not in (np.float32, np.float64) or P.ndim != 2:
        return None
    P, Q = np.ascontiguousarray(P), np.ascontiguousarray(Q)
    B, V = P.shape
    lo, hi, A, C = (np.empty(B) for _ in range(4))
    counts = np.zeros(B, dtype=np.int64)
    capacity = max(1 << 10, B * V >> 5) if inner else 0  # inner: about 1% of an LM row after 4 steps
    while True:
        Pm, Qm = scratch.array("kseq_Pm", (capacity + 1,), np.float64), scratch.array("kseq_Qm", (capacity + 1,),
                                                                                     np.float64)
        T = lib.otlp_kseq_first_stage(P.ctypes.data, Q.ctypes.data, int(P.dtype == np.float64), B, V, n, steps,
                                      int(inner), *(x.ctypes.data for x in (lo, hi, A, C, counts)), capacity,
                                      Pm.ctypes.data, Qm.ctypes.data)
        if T <= capacity:
            break
        capacity = T
    column = (lambda x: x.astype(P.dtype)[:, None])  # noqa: E731 - [b] float64 -> [b, 1] in P's dtype
    if not inner:
        return column(lo), column(hi)
    rows = np.repeat(np.arange(B), counts)  # [T] each inner token's row
    return column(lo), column(hi), column(A), column(C), rows, Pm[:T].astype(P.dtype), Qm[:T].astype(P.dtype)


def wor_prefix(qs: np.ndarray, r: np.ndarray, n: int, tA: np.ndarray, tB: np.ndarray, h: float):  # noqa: ANN201
    """:func:`otlp.core.psi_wor.prefix_subset_probability`'s quadrature in ``otlp_wor_prefix`` (``psi.c``): ``qs [V]`` q
    in the prefix order, ``r [V + 1]`` the q-mass after each prefix, nodes t = ``tA [K]`` * ``tB [K]`` of the trapezoid
    rule of step ``h`` in log t -> ``(F, F2)``, each ``[V + 1]`` (the rule on all nodes and on the even ones); None
    where the kernels are not built or n is outside 1..64."""
    lib = library()
    if lib is None or not 1 <= n <= 64:
        return None
    qs, r, tA, tB = (np.ascontiguousarray(x, dtype=np.float64) for x in (qs, r, tA, tB))
    F, F2 = np.empty(r.size), np.empty(r.size)
    if lib.otlp_wor_prefix(qs.ctypes.data, r.ctypes.data, qs.size, n, tA.ctypes.data, tB.ctypes.data, float(h),
                           tA.size, F.ctypes.data, F2.ctypes.data):
        return None  # (its work arrays could not be allocated: the numpy route)
    return F, F2


def wor_closed_psi(p: np.ndarray, q: np.ndarray, order: np.ndarray, n: int = 2, *, curve: bool = True):  # noqa: ANN201
    """:func:`otlp.core.psi_wor.wor_prefix_psi` at n = 1 or 2 after its sort, in ``otlp_wor_closed_psi`` (``psi.c``):
    float64 ``p, q [V]`` and their decreasing-q/p ``order [V]`` -> ``(psi [V + 1] or None, min psi, its first
    argmin)``, the same bits as the numpy route; ``curve=False`` leaves psi out (alpha* reads only its minimum).
    None where the kernels are not built or n is not 1 or 2."""
    lib = library()
    if lib is None or n not in (1, 2):
        return None
    p, q = (np.ascontiguousarray(x, dtype=np.float64) for x in (p, q))
    order = np.ascontiguousarray(order, dtype=np.int64)
    V = p.size
    work = scratch.array("wor_closed_psi", (3, V + 1), np.float64)  # p and q in the order, p's suffix sums
    psi = np.empty(V + 1) if curve else None
    best, at = ctypes.c_double(), ctypes.c_int64()
    lib.otlp_wor_closed_psi(p.ctypes.data, q.ctypes.data, order.ctypes.data, V, n, work[0].ctypes.data,
                            work[1].ctypes.data, work[2].ctypes.data, None if psi is None else psi.ctypes.data,
                            ctypes.byref(best), ctypes.byref(at))
    return psi, best.value, at.value


def wor_plan(p: np.ndarray, q: np.ndarray, sets: np.ndarray, probs: np.ndarray, steps: int, tolerance: float):  # noqa: ANN201
    """:func:`otlp.optimal.wor.set_plan`'s Luce plan in ``otlp_wor_plan`` (``wor_plan.c``), each row on its own:
    rows ``p, q [B, E]``, ``sets int [U, n]``, ``probs [B, U]`` -> ``(choice [B, U, n], residual [B])`` (inf where a
    row did not reach ``tolerance`` in ``steps`` Newton steps); None where the kernels are not built or a set's ids
    are not increasing (the kernel adds the Hessian's upper triangle only: the drafted sets of
    :func:`otlp.core.drafts.combinations` and ``set_support`` are)."""
    lib = library()
    sets = np.ascontiguousarray(sets, dtype=np.int64)
    if lib is None or not (sets[:, 1:] > sets[:, :-1]).all():
        return None
    p, q, probs = (np.ascontiguousarray(x, dtype=np.float64) for x in (p, q, probs))
    (B, E), (U, n) = p.shape, sets.shape
    choice, residual = np.empty((B, U, n)), np.empty(B)
    if lib.otlp_wor_plan(p.ctypes.data, q.ctypes.data, B, E, sets.ctypes.data, U, n, probs.ctypes.data, int(steps),
                         float(tolerance), choice.ctypes.data, residual.ctypes.data):
        raise MemoryError(f"otlp_wor_plan: no memory for the work arrays of a plan on {U:,} sets of {E} elements")
    return choice, residual


#: :func:`set_probabilities` takes n up to here (its recursion keeps 2^n subsets a set on the stack)
SET_PROBABILITIES_MAX_N = 12


def set_probabilities(q: np.ndarray, rank: np.ndarray, suffix: np.ndarray, sets: np.ndarray):  # noqa: ANN201
    """:func:`otlp.core.drafts.set_probabilities` in ``otlp_set_probabilities`` (``wor_plan.c``), bit for bit: rows
    ``q [B, V]`` with :func:`otlp.core.drafts.mass_ranks`' ``rank [B, V]`` and ``suffix [B, V + 1]``, ``sets int
    [U, n]`` -> ``[B, U]``; None where the kernels are not built or n is above ``SET_PROBABILITIES_MAX_N``."""
    lib = library()
    if lib is None or sets.shape[1] > SET_PROBABILITIES_MAX_N:
        return None
    q, suffix = (np.ascontiguousarray(x, dtype=np.float64) for x in (q, suffix))
    rank, sets = (np.ascontiguousarray(x, dtype=np.int64) for x in (rank, sets))
    (B, V), (U, n) = q.shape, sets.shape
    out = np.empty((B, U))
    lib.otlp_set_probabilities(q.ctypes.data, rank.ctypes.data, suffix.ctypes.data, B, V, sets.ctypes.data, U, n,
                               out.ctypes.data)
    return out
