"""The C kernels of otlp/backend/native against the references they replace: the bucket rule's per-token passes
against its torch reference (the same buckets, selected tokens and masses bit for bit, the bucket sums to rounding),
the chains' steps against :mod:`otlp.optimal.chains` in numpy, the same sampled tokens; and the numpy routes where no
kernel was built."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from otlp.backend import native
from otlp.optimal import buckets as BK
from otlp.optimal import chains as C
from otlp.optimal import host
from tests.optimal.instances import FAMILIES, draw

torch = pytest.importorskip("torch")

lib = native.library()
needs_kernels = pytest.mark.skipif(lib is None, reason="otlp/backend/native's kernels were not built here")


def _rows(rng, B: int, V: int, dtype) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """LM-shaped rows with exact zeros in p, q and both, and a row of one family of tests/optimal/instances.py."""
    z = 3.0 * rng.normal(size=(B, V))
    p = np.exp(z - z.max(1, keepdims=True))
    q = np.exp(3.0 * rng.normal(size=(B, V)) + 0.5 * np.log(p))
    p[:, : V // 10] = 0.0
    q[:, V // 20: V // 5] = 0.0
    p[0], q[0] = draw(sorted(FAMILIES)[int(rng.integers(len(FAMILIES)))], rng, V, 3)
    p, q = (p / p.sum(1, keepdims=True)).astype(dtype), (q / q.sum(1, keepdims=True)).astype(dtype)
    return p, q


def _family_batches(rng: np.random.Generator, n: int, sizes: tuple[int, ...], dtype=np.float64) -> list[tuple]:  # noqa: ANN001
    """Batches ``(p, q)`` of rows: LM-shaped rows with exact zeros at V = 3000 (``_rows``), then 4 rows of every
    instance family of the exact tests (tests/optimal/instances.py) at each V in ``sizes``."""
    batches = [_rows(rng, 5, 3000, dtype)]
    for family in sorted(FAMILIES):
        for V in sizes:
            rows = [draw(family, rng, V, n) for _ in range(4)]
            batches.append(tuple(np.array([r[k] for r in rows]).astype(dtype) for k in (0, 1)))
    return batches


@contextlib.contextmanager
def _numpy_route(*names: str):  # noqa: ANN202
    """Inside the block, ``otlp.backend.native``'s functions ``names`` answer None, so their callers take the numpy
    route ("library": none of the kernels)."""
    saved = {name: getattr(native, name) for name in names}
    for name in names:
        setattr(native, name, lambda *a, **k: None)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(native, name, fn)


def _kernel_passes(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, sc: BK.Scheme,
                   selected: np.ndarray | None = None):  # noqa: ANN202
    """The bucket rule's two per-token passes as ``otlp_bucket_rule`` runs them (``buckets.c``): ``(bucket uint16
    [B, V], Pb, Qb [B, NB])`` from ``otlp_bucket_sums``, and with ``selected bool [B, NB]`` also ``(F [T], P [T],
    Q [T])`` from ``otlp_gather_selected``: the selected buckets' tokens (row b's token i as b V + i) and their
    normalised masses."""
    B, V = p.shape
    wide = int(p.dtype == np.float64)
    inv_p, inv_q = (np.ascontiguousarray(x, dtype=np.float64) for x in (inv_p, inv_q))
    bucket, Pb, Qb = np.empty((B, V), dtype=np.uint16), np.empty((B, sc.NB)), np.empty((B, sc.NB))
    work = np.empty(2 * (sc.NB + 16))  # (kernels.h: OTLP_ZERO_SLOTS)
    lib.otlp_bucket_sums(p.ctypes.data, q.ctypes.data, wide, B, V, inv_p.ctypes.data, inv_q.ctypes.data, sc.bits,
                         sc.top, sc.NB, sc.below, sc.above, bucket.ctypes.data, Pb.ctypes.data,
                         Qb.ctypes.data, work.ctypes.data)
    if selected is None:
        return bucket, Pb, Qb, None
    chosen = np.ascontiguousarray(selected, dtype=bool).view(np.uint8)
    F, P, Q = np.empty(B * V + 1, dtype=np.int64), np.empty(B * V + 1), np.empty(B * V + 1)
    T = lib.otlp_gather_selected(p.ctypes.data, q.ctypes.data, wide, B, V, inv_p.ctypes.data, inv_q.ctypes.data,
                                 bucket.ctypes.data, chosen.ctypes.data, sc.NB, B * V, F.ctypes.data, P.ctypes.data,
                                 Q.ctypes.data)
    return bucket, Pb, Qb, (F[:T], P[:T], Q[:T])


def _reference_buckets(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, sc: BK.Scheme):  # noqa: ANN202
    """The bucket rule's reference on torch tensors (:mod:`otlp.optimal.device_buckets`): ``(P, Q float64 [B, V],
    bucket int64 [B, V], count, Pb, Qb [B, NB])``, as numpy arrays."""
    from otlp.optimal import device_buckets as DB

    tp, tq = torch.from_numpy(p), torch.from_numpy(q)
    ip, iq = (torch.from_numpy(np.asarray(x, dtype=np.float64))[:, None] for x in (inv_p, inv_q))
    P, Q = DB._normalised(tp, ip), DB._normalised(tq, iq)
    _, bucket = DB.token_buckets(P, Q, sc)
    count, Pb, Qb = DB.histogram(tp, tq, ip, iq, sc)
    return tuple(x.numpy() for x in (P, Q, bucket, count, Pb, Qb))


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("V", [3000, 40_000])
def test_the_kernels_find_the_references_buckets_tokens_and_masses(dtype, V: int) -> None:  # noqa: ANN001
    """``otlp_bucket_sums`` and ``otlp_gather_selected`` against the torch reference of the bucket rule
    (:mod:`otlp.optimal.device_buckets`) on rows with exact zeros in p, q and both: each token's bucket and its
    normalised masses bit for bit (the same IEEE operations), the bucket sums to rounding (both add in token order
    here, so in practice the same bits), and the tokens of a selection of buckets exactly those, in token order (a
    random selection, the usual one's size; and every bucket, more tokens than any first guess of room)."""
    rng = np.random.default_rng(V)
    B = 5
    p, q = _rows(rng, B, V, dtype)
    inv_p, inv_q = BK.inverse_sums(p), BK.inverse_sums(q)
    sc = BK.scheme(BK.bits_for(V))
    P, Q, bucket, count, Pb, Qb = _reference_buckets(p, q, inv_p, inv_q, sc)
    held = count > 0
    some = held & (rng.random(held.shape) < 0.1)
    for selected in (some, np.ones_like(held)):
        got_bucket, got_Pb, got_Qb, (F, gP, gQ) = _kernel_passes(p, q, inv_p, inv_q, sc, selected)
        np.testing.assert_array_equal(got_bucket.astype(np.int64), bucket)
        np.testing.assert_allclose(got_Pb, Pb, rtol=1e-14, atol=1e-300)
        np.testing.assert_allclose(got_Qb, Qb, rtol=1e-14, atol=1e-300)
        want = np.flatnonzero(np.take_along_axis(selected, bucket, axis=1))
        np.testing.assert_array_equal(F, want)
        np.testing.assert_array_equal(gP, P.ravel()[want])
        np.testing.assert_array_equal(gQ, Q.ravel()[want])
    assert F.size == B * V


@needs_kernels
@pytest.mark.parametrize("runs", [1, 3, 8, 9, 40])
def test_the_kernels_gather_exactly_the_selected_buckets_tokens(runs: int) -> None:
    """otlp_gather_selected tests blocks of 16 tokens against the selection's runs of buckets (up to 8 runs, with
    AVX2) or bucket by bucket: either way the tokens of the selected buckets in token order, none else, with the
    first and last buckets and a row length not a multiple of 16."""
    rng = np.random.default_rng(runs)
    B, V = 3, 20_011
    p, q = _rows(rng, B, V, np.float64)
    sc = BK.scheme(BK.bits_for(V))
    ones = np.ones(B)
    P, _, bucket, count, _, _ = _reference_buckets(p, q, ones, ones, sc)
    selected = np.zeros((B, sc.NB), dtype=bool)
    for b in range(B):
        held = np.flatnonzero(count[b])
        starts = np.sort(rng.choice(held.size, size=min(runs, held.size), replace=False))
        for k in starts:  # a run of 1-3 held buckets from each start (runs may touch: fewer of them)
            selected[b, held[k:k + rng.integers(1, 4)]] = True
    selected[0, [0, sc.NB - 1]] = True
    *_, (F, gP, _) = _kernel_passes(p, q, ones, ones, sc, selected)
    want = np.flatnonzero(np.take_along_axis(selected, bucket, axis=1))
    np.testing.assert_array_equal(F, want)
    np.testing.assert_array_equal(gP, P.ravel()[want])


@needs_kernels
def test_the_sampler_draws_the_same_tokens_with_and_without_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    from otlp.optimal.sampler import verify

    g = torch.Generator().manual_seed(4)
    B, V, n = 12, BK.MIN_V, 4
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    for _ in range(5):
        u = torch.rand(B, 2, dtype=torch.float64, generator=g)
        with_kernels = verify(p, q, drafts, u)
        monkeypatch.setenv("OTLP_NATIVE", "0")
        assert native.library() is None and native.reason() == "OTLP_NATIVE=0"
        without = verify(p, q, drafts, u)
        monkeypatch.delenv("OTLP_NATIVE")
        assert torch.equal(with_kernels[0], without[0]) and torch.equal(with_kernels[1], without[1])


def test_without_built_kernels_the_numpy_route_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A package built without a C compiler has no kernel libraries: the loader says why, and the numpy route
    answers."""
    from otlp.optimal.sampler import verify

    monkeypatch.setattr(native, "library_path", lambda name, folder=None: None)
    native._load.cache_clear()
    try:
        assert native.library() is None
        assert "was not built" in native.reason()  # for a user who wonders why it is slow
        g = torch.Generator().manual_seed(5)
        p = torch.softmax(torch.randn(3, BK.MIN_V, generator=g), dim=1)
        tokens, index = verify(p, p, torch.zeros(3, 2, dtype=torch.long), torch.rand(3, 2, generator=g))
        assert torch.equal(index, torch.zeros(3, dtype=torch.long))  # p = q: the first draft is accepted
    finally:
        native._load.cache_clear()


def test_a_library_that_does_not_load_leaves_the_numpy_route(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path) -> None:  # noqa: ANN001
    broken = tmp_path / "_kernels.so"
    broken.write_bytes(b"not a shared library")
    monkeypatch.setattr(native, "library_path", lambda name, folder=None: broken)
    native._load.cache_clear()
    try:
        assert native.library() is None and str(broken) in native.reason()
    finally:
        native._load.cache_clear()


@needs_kernels
def test_a_library_built_from_other_sources_is_refused(tmp_path) -> None:  # noqa: ANN001
    """A library beside C sources that changed since it was built (an in-place build not redone) is not loaded, since
    its functions may take other arguments than declared; beside its own sources, or none (a wheel), it is."""
    import shutil

    from otlp.backend.native.sources import FINGERPRINTED

    built = native._load()._name
    folder = Path(native.__file__).parent
    lib = tmp_path / Path(built).name
    shutil.copy(built, lib)
    assert native.load(lib) is not None  # no sources beside it: trusted
    for name in FINGERPRINTED:
        shutil.copy(folder / name, tmp_path / name)
    assert native.load(lib) is not None  # its own sources
    (tmp_path / "chains.c").write_text((folder / "chains.c").read_text() + "\n/* changed */\n")
    with pytest.raises(OSError, match="other C sources"):
        native.load(lib)


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_row_stats_are_numpys(dtype) -> None:  # noqa: ANN001
    """The kernel's row sums equal numpy's float64 sums to rounding and its minima numpy's exactly, on rows that are
    not a multiple of its eight running sums long, with negative entries, zeros and a NaN."""
    rng = np.random.default_rng(7)
    for V in (1, 5, 8, 40_001):
        x = rng.random((6, V)).astype(dtype) ** 8
        x[1, V // 2] = -0.25  # a negative entry in the middle of the row (a lane other than the first)
        x[2] = 0.0
        x[3, -1] = -1e-30  # the last entry, past the last full group of eight
        total, low = native.row_stats(x)
        np.testing.assert_allclose(total, x.sum(-1, dtype=np.float64), rtol=1e-14, atol=0)
        np.testing.assert_array_equal(low, x.min(-1).astype(np.float64))
    x[5, 17] = np.nan
    assert np.isnan(native.row_stats(x)[0][5]) and np.isfinite(native.row_stats(x)[0][:5]).all()
    assert native.row_stats(x.astype(np.float16)) is None and native.row_stats(x[0]) is None  # not its types


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_inverse_row_sums_are_numpys_to_rounding(dtype) -> None:  # noqa: ANN001
    rng = np.random.default_rng(7)
    x = rng.random((6, 40_001)).astype(dtype) ** 8  # V not a multiple of the kernel's eight running sums
    x[2] = 0.0
    x[4, 1:] = 0.0
    got = BK.inverse_sums(x)
    with _numpy_route("library"):
        ref = BK.inverse_sums(x)
    assert got[2] == ref[2] == 1.0  # a row without mass
    assert got[4] == ref[4] == 1.0 / float(x[4, 0])
    np.testing.assert_allclose(got, ref, rtol=1e-14)
    given = x.sum(-1, dtype=np.float64)
    np.testing.assert_array_equal(BK.inverse_sums(x, given), np.where(given > 0, 1.0 / np.where(given > 0, given, 1),
                                                                        1.0))
    assert given[2] == 0.0  # the caller's sums are not changed


@needs_kernels
def test_the_value_check_hands_its_sums_to_the_optimal_rule() -> None:
    """On the host the value check's sums are the kernel's exact float64 sums, the optimal sampler normalises by
    them without reading the rows again (the same tokens as when it sums the rows itself), and a bad row still gets
    its one-line error."""
    from otlp.core.errors import InputError
    from otlp.verifiers import get
    from otlp.verifiers.base import check_tensors

    g = torch.Generator().manual_seed(11)
    p = torch.softmax(2 * torch.randn(8, BK.MIN_V, generator=g), dim=1)
    q = torch.softmax(2 * torch.randn(8, BK.MIN_V, generator=g), dim=1)
    drafts = torch.multinomial(q, 3, replacement=True, generator=g)
    totals: list = []
    check_tensors(p, q, drafts, totals=totals)
    assert len(totals) == 2
    np.testing.assert_array_equal(totals[0], native.row_stats(p.numpy())[0])
    u = torch.rand(8, 2, generator=g, dtype=torch.float64)
    opt = get("optimal")
    passes = []
    stats = native.row_stats
    native.row_stats = lambda x: (passes.append(x.shape), stats(x))[1]
    try:
        with_check = opt.sample(p, q, drafts, uniforms=u)
        assert len(passes) == 2  # the check's pass over p and over q; the rule took none of its own
        without = opt.sample(p, q, drafts, uniforms=u, validate=False)
        assert len(passes) == 4  # unchecked, the rule sums the rows itself
        passes.clear()
        check_tensors(p, q.half(), drafts, totals=(mixed := []))
        check_tensors(p.half(), q, drafts, totals=mixed)
        assert passes == [] and mixed == []  # a float16 q (or p) is checked by torch: p's (q's) pass is not taken
    finally:
        native.row_stats = stats
    assert all(torch.equal(a, b) for a, b in zip(with_check, without, strict=True))
    check_tensors(p, q, drafts, validate=False, totals=(none := []))
    assert none == []  # nothing checked, nothing handed over
    bad = p.clone()
    bad[5, 3] = -1e-3
    with pytest.raises(InputError, match=r"p\[5\] has a negative entry"):
        opt.sample(bad, q, drafts, uniforms=u)


def _build(tmp_path, env: dict[str, str]) -> Path:  # noqa: ANN001
    """setup.py's build of the kernels into ``tmp_path`` (as ``pip`` runs it), with ``env`` added."""
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                    "--build-temp", str(tmp_path / "temp")], cwd=root, env={**os.environ, **env}, check=True,
                   capture_output=True, timeout=300)
    return tmp_path / "lib" / "otlp" / "backend" / "native"


@needs_kernels
def test_a_compiler_without_openmp_builds_the_kernels_without_it(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path) -> None:  # noqa: ANN001
    """A compiler that refuses -fopenmp (here a wrapper of the real one) still builds the kernels, without OpenMP:
    the bucketed route then takes a call's rows one after the other on the calling thread, with the same tokens."""
    import shutil
    import stat

    from otlp.optimal.sampler import verify

    real = shutil.which(os.environ.get("CC", "cc"))
    wrapper = tmp_path / "cc-without-openmp"
    wrapper.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && exit 1; done\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    g = torch.Generator().manual_seed(8)
    p = torch.softmax(3 * torch.randn(6, 4000, generator=g), dim=1)
    q = torch.softmax(3 * torch.randn(6, 4000, generator=g), dim=1)
    drafts = torch.multinomial(q, 4, replacement=True, generator=g)
    u = torch.rand(6, 2, dtype=torch.float64, generator=g)
    threaded = verify(p, q, drafts, u)
    folder = _build(tmp_path, {"CC": str(wrapper)})
    built = native.load(native.library_path("_kernels", folder))
    monkeypatch.setattr(native, "_load", lambda: built)
    assert native.library() is built and not native.openmp()
    stats = {}
    sc = BK.scheme(BK.bits_for(4000))
    P, Q = (x.double().numpy() for x in (p, q))
    native.bucket_rule(P, Q, 1 / P.sum(1), 1 / Q.sum(1), drafts.numpy(), u.numpy(), 4, steps=8, bits=sc.bits,
                       top=sc.top, NB=sc.NB, below=sc.below, above=sc.above, LO=sc.LO, HI=sc.HI,
                       margin=BK.BOUND_MARGIN, share=BK.FULL_SORT_SHARE, attempts=BK.ATTEMPTS, threads=3,
                       stats=stats)
    assert stats["threads"] == 1
    serial = verify(p, q, drafts, u)
    assert torch.equal(threaded[0], serial[0]) and torch.equal(threaded[1], serial[1])


def test_without_a_compiler_the_package_still_builds(tmp_path) -> None:  # noqa: ANN001
    """setup.py with no working C compiler: the build succeeds without the kernels (the numpy route then runs)."""
    folder = _build(tmp_path, {"CC": str(tmp_path / "no-such-compiler")})
    assert not any(native.library_path(name, folder) for name in native.LIBRARIES)


@needs_kernels
def test_the_portable_loops_give_the_vector_loops_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable library runs the row stats' plain C loops: the same sums and minima as the AVX2 library, bit
    for bit (the AVX2 lanes are the same eight running sums); and the slot roots, whose lanes are vectorised where
    the build allows."""
    paths = [native.library_path(name) for name in ("_kernels_avx2", "_kernels")]
    if not native.has_avx2() or None in paths:
        pytest.skip("this CPU runs the portable library only")
    rng = np.random.default_rng(3)
    x = rng.random((5, 40_003)) ** 8
    H, L, r, gap = _slot_inputs(rng)[-1]
    results = []
    for path in paths:
        lib = native.load(path)
        monkeypatch.setattr(native, "_load", lambda lib=lib: lib)
        results.append((native.row_stats(x), native.row_stats(x.astype(np.float32)),
                        native.slot_mass(H, L, r, gap, 4, 200)))
    (wide32, wide64, roots), (plain32, plain64, plain_roots) = results
    np.testing.assert_array_equal(plain_roots, roots)
    for a, b in ((wide32, plain32), (wide64, plain64)):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def _numpy_slot_mass(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    with np.errstate(all="ignore"):
        return C.slot_mass(*args, **kwargs)  # the reference (numpy)


def _slot_inputs(rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
    """``(H, L, r_below, gap)`` as the CPU route meets them (every slot root of close-draft rows at V = 8192) and
    adversarial entries: masses over many binades, zero gaps, ratios of 0 and far above 1, L = 0, odd sizes."""
    from otlp.optimal.sampler import verify

    seen = []
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(6, 8192, generator=g) * 2, dim=1)
    q = torch.softmax(torch.log(p) + 0.5 * torch.randn(6, 8192, generator=g), dim=1)
    drafts = torch.multinomial(q, 4, replacement=True, generator=g)
    real, takes = native.slot_mass, BK.takes
    native.slot_mass = lambda *a: seen.append(np.broadcast_arrays(*a[:4])) or real(*a)
    BK.takes = lambda B, V: False  # the full sort's route, whose chains run through Python (not in one C call)
    try:
        with _numpy_route("window_chain"):  # the roots through Python, to be seen
            verify(p, q, drafts, torch.rand(6, 2, dtype=torch.float64, generator=g))
    finally:
        native.slot_mass, BK.takes = real, takes
    out = [tuple(np.ascontiguousarray(x).ravel() for x in entry) for entry in seen]
    for size in (1, 7, 9, 1001):
        H = rng.random(size) ** rng.integers(1, 30, size)
        L = np.where(rng.random(size) < 0.1, 0.0, rng.random(size))
        r = np.where(rng.random(size) < 0.1, 0.0, rng.random(size) * 10.0 ** rng.integers(-3, 4, size))
        gap = np.where(rng.random(size) < 0.1, 0.0, rng.random(size) ** 8)
        out.append((H, L, r, gap))
    return out


def _numpy_pow_is_the_c_librarys() -> bool:
    """Whether numpy's float64 power is the C library's pow here, as chains.c's bounds call it (numpy's AVX512 builds
    dispatch float64 power to SVML, whose results can differ in the last bit); Python's math.pow is the C
    library's."""
    x = np.random.default_rng(0).random(4096) * 2.0
    return all(float(a) == math.pow(float(b), e) for e in (1 / 3, 1 / 4, 1 / 7) for a, b in zip(x**e, x, strict=True))


@needs_kernels
@pytest.mark.parametrize("n", [3, 4, 5, 8, native.SLOT_MASS_MAX_N])
def test_the_slot_roots_are_numpys_bit_for_bit(n: int) -> None:
    """``otlp_slot_mass`` (chains.c, through host.slot_mass) against the reference chains.slot_mass: the same bounds
    (its shortcut past the second bound's powers included) and the same Newton steps per entry, to the last bit, with
    Newton to convergence and cut at 1 and 8 steps. Where numpy's float64 power is not the C library's (its AVX512
    builds), the starts can differ in the last bit, and the roots to convergence are compared to 1e-14 (relative)
    instead."""
    exact = _numpy_pow_is_the_c_librarys()
    inputs = _slot_inputs(np.random.default_rng(n))
    assert sum(x[0].size for x in inputs) > 10_000  # the CPU route did solve roots
    for H, L, r, gap in inputs:
        for steps in (None, 1, C.NEWTON_STEPS) if exact else (None,):
            with np.errstate(all="ignore"):
                got = host.slot_mass(H, L, r, gap, n, steps)
            want = _numpy_slot_mass(H, L, r, gap, n, steps)
            if exact:
                np.testing.assert_array_equal(got, want, err_msg=f"{steps}")
            else:
                np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)


@needs_kernels
@pytest.mark.parametrize("n", [3, 5, native.SLOT_MASS_MAX_N])
def test_the_slot_roots_take_lists_and_any_arrays(n: int) -> None:
    """host.slot_mass's other inputs against its float64 C-contiguous arrays: four Python lists (the scalar path's
    packed buffer), strided, float32 and broadcast arrays (converted first), all to the last bit, with the caller's
    arrays left as they were and a new array returned; the lists without the kernel take the reference
    (chains.slot_mass on arrays, the same bits as that route); lists of different lengths are a ValueError."""
    rng = np.random.default_rng([n, 7])
    for H, L, r, gap in _slot_inputs(rng)[-4:]:  # the adversarial entries, 1 to 1001 of them
        for steps in (None, 1, C.NEWTON_STEPS):
            want = host.slot_mass(H, L, r, gap, n, steps)
            kept = [x.copy() for x in (H, L, r, gap)]
            got = host.slot_mass(H.tolist(), L.tolist(), r.tolist(), gap.tolist(), n, steps)
            np.testing.assert_array_equal(got, want, err_msg=f"lists, steps {steps}")
            assert got.dtype == np.float64 and got.shape == H.shape
            for a, b in zip((H, L, r, gap), kept, strict=True):
                np.testing.assert_array_equal(a, b)
                assert not np.shares_memory(want, a)
            with _numpy_route("slot_mass"):
                np.testing.assert_array_equal(host.slot_mass(H.tolist(), L.tolist(), r.tolist(), gap.tolist(), n,
                                                             steps), _numpy_slot_mass(H, L, r, gap, n, steps))
        strided = np.stack([H, H], axis=1)[:, 1]  # [k], every other entry of a [k, 2] array
        assert H.size == 1 or not strided.flags.c_contiguous
        np.testing.assert_array_equal(host.slot_mass(strided, L, r, gap, n), host.slot_mass(H, L, r, gap, n))
        np.testing.assert_array_equal(host.slot_mass(H, L, r, gap[:1], n), host.slot_mass(H, L, r, gap[:1] + 0 * H, n))
        low = H.astype(np.float32)
        np.testing.assert_array_equal(host.slot_mass(low, L, r, gap, n),
                                      host.slot_mass(low.astype(np.float64), L, r, gap, n))
    with pytest.raises(ValueError, match="not one size"):
        native.slot_mass([0.1, 0.2], [0.3], [0.5, 0.5], [0.0, 0.0], 3, 20)


def _numpy_window_hazards(*args):  # noqa: ANN002, ANN202
    with np.errstate(all="ignore"):
        return C.window_hazards(*args)  # the reference (numpy)


@needs_kernels
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, native.SLOT_MASS_MAX_N])
def test_the_window_chains_are_numpys(n: int) -> None:
    """``otlp_window_chain`` (chains.c, through host.window_hazards) against the reference chains.window_hazards
    (chains._group_terms on the flat windows, running sums on ``[B, W]`` arrays) on the windows the CPU route meets
    (close drafts at V = 8192, through the sampler) and on rows of every instance family of the exact tests (ties,
    zeros, point masses, near-ties; tuples drawn from q and uniform ones), with Newton to convergence and cut at
    ``NEWTON_STEPS``. The kernel starts each root from its neighbour's (chains.c, window_roots) where numpy starts from
    the bounds, and takes the C library's log1p where numpy takes its own, so the two agree to rounding: each hazard
    log(before / y) to a few 1e-16 (a relative error e of y moves it by about e, however close y is to before), their
    running sums to 2e-15 per position summed, the final acceptances to 1e-13; the certain slots' counts exactly."""
    from otlp.optimal.sampler import verify

    seen = []
    real = host.window_hazards
    host.window_hazards = lambda *a: seen.append(a) or real(*a)
    try:
        g = torch.Generator().manual_seed(n)
        p = torch.softmax(torch.randn(6, 8192, generator=g) * 2, dim=1)
        q = torch.softmax(torch.log(p) + 0.5 * torch.randn(6, 8192, generator=g), dim=1)
        verify(p, q, torch.multinomial(q, n, replacement=True, generator=g),
               torch.rand(6, 2, dtype=torch.float64, generator=g))
        rng = np.random.default_rng(n)
        for family in sorted(FAMILIES):
            for V in (2, 5, 40, 600):  # (600: windows long enough to be cut into segments)
                rows = [draw(family, rng, V, n) for _ in range(6)]
                P, Q = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
                for w in (np.array([rng.choice(V, n, p=r[1]) for r in rows]), rng.integers(0, V, (6, n))):
                    with np.errstate(all="ignore"):  # tuples drawn from q, and any tuples (q = 0 draws included)
                        host.tuple_rule(host.prefix(P, Q, n), w, window="auto")
    finally:
        host.window_hazards = real
    assert sum(int((a[2] - a[3]).sum()) for a in seen) > 100  # the windows hold slots (n = 1: the families only)
    for pre, pos, top, s, e, _ in seen:
        summed = np.minimum(np.maximum(pos - s, 0), top - s + 1) + 1  # [B, n] positions in each running sum
        for steps in (None, C.NEWTON_STEPS):
            cum, cum_c, beta = native.window_chain(pre, s, e, top, pos, 200 if steps is None else steps)
            want = _numpy_window_hazards(pre, pos, top, s, e, steps)
            assert np.all(np.abs(cum - want[0]) <= 2e-15 * summed), np.max(np.abs(cum - want[0]) / summed)
            np.testing.assert_array_equal(cum_c, want[1])
            np.testing.assert_allclose(beta, want[2], rtol=0, atol=1e-13)


@needs_kernels
@pytest.mark.parametrize("n", [1, 2, 4, 8, native.SLOT_MASS_MAX_N])
def test_the_prefix_is_numpys_bit_for_bit(n: int) -> None:
    """``otlp_prefix`` (chains.c, through host.prefix) against the reference chains.prefix (the ratio sort's order, psi
    by otlp.core.psi's two forms, m*) to the last bit, on rows of every instance family of the exact tests at V = 1 to
    600 and on LM-shaped rows with exact zeros at V = 3000 (psi near 0 at both ends, the suffix form where Q_m > 1/2);
    and m* on rows with a NaN entry (numpy's argmin: the first NaN of psi), which the kernel finds walking down from the
    top."""
    rng = np.random.default_rng(n)
    batches = _family_batches(rng, n, (1, 2, 5, 40, 600))
    P, Q = rng.random((4, 30)), rng.random((4, 30))
    P[0, 7] = Q[1, 20] = np.nan
    P[2, 3] = P[2, 25] = np.nan
    batches.append((P / np.nansum(P, 1, keepdims=True), Q / np.nansum(Q, 1, keepdims=True)))
    for P, Q in batches:
        with np.errstate(invalid="ignore"):
            got = host.prefix(P, Q, n)
            want = C.prefix(P, Q, n)
        for name in ("order", "ps", "qs", "prefix_q", "suffix_q", "psi", "m_star", "alpha"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


@needs_kernels
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_the_served_groups_are_numpys(n: int) -> None:
    """``otlp_served_group`` (chains.c, through host.served_group) against the reference chains.served_group: the same
    draw positions, top draw, and group ends s and e, on rows of every instance family at V = 1 to 600 and LM-shaped
    rows at V = 3000, for tuples drawn from q and uniform ones (inner and outer groups both met)."""
    rng = np.random.default_rng(n)
    batches = _family_batches(rng, n, (1, 2, 5, 40, 600))
    inner = outer = 0
    for P, Q in batches:
        pre = C.prefix(P, Q, n)
        V = P.shape[1]
        for w in (np.array([rng.choice(V, n, p=q / q.sum()) for q in Q]), rng.integers(0, V, (P.shape[0], n))):
            got = host.served_group(pre, w)
            want = C.served_group(pre, w)
            for name, a, b in zip(("pos", "top", "s", "e"), got, want, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=name)
            inside = got[1][:, 0] < pre.m_star
            inner, outer = inner + int(inside.sum()), outer + int((~inside).sum())
    assert inner > 20 and outer > 20


@needs_kernels
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_the_pieces_and_the_draw_are_numpys(n: int) -> None:
    """``otlp_pieces`` and ``otlp_sample`` (chains.c) against chains._pieces and chains.sample's numpy route on rows of
    every instance family at V = 2 to 600 and LM-shaped rows at V = 3000, for tuples drawn from q and uniform ones
    (repeated tokens, draws outside the served group) and uniforms that land on every outcome: acceptances and
    rejections to 1e-15 (the C library's exp and expm1 against numpy's), the same tokens and slots (a uniform would
    have to fall within that rounding of a boundary)."""
    rng = np.random.default_rng(n)
    batches = _family_batches(rng, n, (2, 5, 40, 600))
    residual = 0
    for P, Q in batches:
        pre = C.prefix(P, Q, n)
        B, V = P.shape
        for w in (np.array([rng.choice(V, n, p=q / q.sum()) for q in Q]), rng.integers(0, V, (B, n))):
            pos, top, s, e = C.served_group(pre, w)
            with np.errstate(all="ignore"):
                cum, cum_c, beta = C.window_hazards(pre, pos, top, s, e, C.NEWTON_STEPS)
            accept, reject = native.pieces(w, pos, s, cum, cum_c, beta)
            with np.errstate(all="ignore"):
                want = C._pieces(np, w, pos, pos >= s, cum, cum_c, beta)
            np.testing.assert_allclose(accept, want[0], rtol=0, atol=1e-15)
            np.testing.assert_allclose(reject, want[1], rtol=0, atol=1e-15)
            for _ in range(4):
                U = rng.random((B, 2))
                got = host.sample(pre, accept, reject, w, U)
                expected = C.sample(pre, accept, reject, w, U)
                np.testing.assert_array_equal(got[0], expected[0])
                np.testing.assert_array_equal(got[1], expected[1])
                residual += int((got[1] < 0).sum())
    assert residual > 20  # residual draws were met
    # synthetic running sums with certain slots (infinite pieces), which the families rarely meet: positions with
    # repeats and draws outside the group (below s), sums non-decreasing in the position
    B, V = 200, 30
    pos = rng.integers(0, V, (B, n))
    s = rng.integers(0, V // 2, (B, 1))
    steps = np.where(rng.random((B, V)) < 0.3, 0.0, rng.random((B, V)))
    lam, cert = np.cumsum(steps, axis=1), np.cumsum(rng.random((B, V)) < 0.1, axis=1).astype(float)
    cum, cum_c = np.take_along_axis(lam, pos, 1), np.take_along_axis(cert, pos, 1)
    beta = np.where(rng.random(B) < 0.3, 1.0, rng.random(B))
    w = rng.integers(0, 5, (B, n))  # repeated tokens
    accept, reject = native.pieces(w, pos, s, cum, cum_c, beta)
    with np.errstate(all="ignore"):
        want = C._pieces(np, w, pos, pos >= s, cum, cum_c, beta)
    np.testing.assert_allclose(accept, want[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(reject, want[1], rtol=0, atol=1e-15)


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_normalised_rows_and_keys_are_numpys(dtype) -> None:  # noqa: ANN001
    """``otlp_normalised_keys`` against buckets.normalised and otlp.core.psi.ratio_keys: the same P, Q and ratio keys to
    the last bit, on LM-shaped rows with exact zeros in p, in q and in both (keys +inf, 0 and -1)."""
    from otlp.core.psi import ratio_keys

    p, q = _rows(np.random.default_rng(7), 6, 5000, dtype)
    inv_p, inv_q = BK.inverse_sums(p), BK.inverse_sums(q)
    P, Q = np.empty(p.shape), np.empty(q.shape)
    key = native.normalised_keys(p, q, inv_p, inv_q, P, Q)
    want_P, want_Q = BK.normalised(p, inv_p), BK.normalised(q, inv_q)
    with np.errstate(all="ignore"):
        want_key = ratio_keys(want_P, want_Q)
    np.testing.assert_array_equal(P, want_P)
    np.testing.assert_array_equal(Q, want_Q)
    np.testing.assert_array_equal(key, want_key)
    assert {-1.0, 0.0, np.inf} <= set(np.unique(key).tolist())


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_single_draft_rule_draws_numpys_tokens(dtype) -> None:  # noqa: ANN001
    """``otlp_single_draft`` (chains.c) against chains.single_draft's numpy route on the normalised rows: the same
    tokens and slots, on LM-shaped rows with exact zeros (V = 3000) and rows of every instance family (V = 1 to 600;
    p = q rows, whose residual has no mass, included), for drafts drawn from q and uniform ones and many uniforms
    (among them the largest below 1, whose product with the residual's total can round up to it)."""
    rng = np.random.default_rng(11)
    batches = _family_batches(rng, 1, (1, 2, 5, 40, 600), dtype)
    rejected = 0
    for p, q in batches:
        inv_p, inv_q = BK.inverse_sums(p), BK.inverse_sums(q)
        P, Q = BK.normalised(p, inv_p), BK.normalised(q, inv_q)
        B, V = p.shape
        for w in (np.array([[rng.choice(V, p=r / r.sum())] for r in Q]), rng.integers(0, V, (B, 1))):
            for k in range(6):
                U = rng.random((B, 2))
                if k == 0:  # u_1 * total rounds to the total: the draw is clamped to the first index reaching it
                    U[:, 0], U[:, 1] = 1.0, np.nextafter(1.0, 0.0)
                got = native.single_draft(p, q, inv_p, inv_q, w, U)
                with np.errstate(all="ignore"):
                    want = C.single_draft(P, Q, w, U)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
                rejected += int((got[1] < 0).sum())
    assert rejected > 50


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kseq_first_stage_is_numpys(dtype) -> None:  # noqa: ANN001
    """K-SEQ's first bisection stage in ``otlp_kseq_first_stage``: the same bracket as numpy's steps on LM-like rows
    (and on rows with zeros, a point mass and p = q), the classes' sums to rounding and the same inner tokens,
    left-aligned in token order. The kernel forms the products, sums and f in float64 whatever the rows' dtype, so
    float32 rows are held to numpy's steps on their float64 values (numpy's float32 evaluation of f rounds where f
    is within 1e-7 of 0: against a point-mass draft it took f(1.5) <= 0 where f(1.5) = p_x / 3 > 0)."""
    from otlp.verifiers import kseq

    rng = np.random.default_rng(8)
    B, V = 6, 5003  # not a multiple of the kernel's eight lanes
    z = 3.0 * rng.normal(size=(B, V))
    P = np.exp(z - z.max(1, keepdims=True))
    Q = np.exp(3.0 * rng.normal(size=(B, V)) + 0.5 * np.log(P))
    P[1, : V // 2] = 0.0  # zeros in p
    Q[2] = 0.0
    Q[2, 7] = 1.0  # a point-mass draft
    Q[3] = P[3]  # p = q
    P, Q = (x / x.sum(1, keepdims=True) for x in (P, Q))
    P, Q = P.astype(dtype), Q.astype(dtype)
    for n in (1, 2, 4, 8):
        for steps in (0, 3, 4):
            assert native.kseq_first_stage(P, Q, n, steps, inner=False) is not None  # the kernel's route below
            got = kseq._first_stage(P, Q, n, steps, inner=True)
            with _numpy_route("kseq_first_stage"):
                ref = kseq._first_stage(P.astype(np.float64), Q.astype(np.float64), n, steps, inner=True)
            for a, b in zip(got[:2], ref[:2], strict=True):  # the bracket
                assert a.dtype == dtype
                np.testing.assert_array_equal(a, b)
            for a, b in zip(got[2:4], ref[2:4], strict=True):  # A, C
                np.testing.assert_allclose(a, b, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=1e-30)
            for a, b in zip(got[4:], ref[4:], strict=True):  # the inner tokens (padding may differ in width)
                assert a.dtype == dtype
                width = max(a.shape[1], b.shape[1])
                np.testing.assert_array_equal(np.pad(a, ((0, 0), (0, width - a.shape[1]))),
                                              np.pad(b, ((0, 0), (0, width - b.shape[1]))))
            lo, hi = kseq._first_stage(P, Q, n, steps, inner=False)
            np.testing.assert_array_equal(lo, got[0])
            np.testing.assert_array_equal(hi, got[1])


@needs_kernels
@pytest.mark.parametrize("bits", [2, 5])
def test_a_selected_buckets_tokens_are_sorted_as_a_stable_argsort(bits: int) -> None:
    """``bucket_rule.c`` orders a selected bucket's tokens by decreasing key, ties in token order: by a counting sort
    on the pattern bits after the bucket's own (bit_length(m) + 1 of them for m tokens, at most 12), then within each
    group (or, for small and edge buckets, alone). Keys of one bucket: spread over it, crowded into a few groups (keys
    equal in all but their last bits), with exact ties, and small; sizes that take 8 to 12 bits; the edge buckets with
    +inf, 0 and -1."""
    sc = BK.scheme(bits)
    rng = np.random.default_rng(bits)
    k = sc.NB // 3  # an inner bucket: keys in [LO, HI)
    lo, hi = sc.LO[k], sc.HI[k]
    spread = lo + (hi - lo) * rng.random(5000)
    crowded = lo * (1.0 + 1e-9 * rng.integers(0, 40, size=3000))  # a few 12-bit groups, many keys each, ties
    for key in (spread, crowded, np.concatenate([crowded, spread]), spread[:40], crowded[:200], spread[:100],
                crowded[:100], spread[:700], np.concatenate([crowded[:300], spread[:300]])):
        assert (key >= lo).all() and (key < hi).all()
        np.testing.assert_array_equal(native.sort_bucket(key, bits), np.argsort(-key, kind="stable"))
    edge = np.concatenate([[np.inf, 2.0**40, np.inf], 2.0**32 * (1 + rng.random(300)), [0.0, -1.0, 0.0, -1.0]])
    np.testing.assert_array_equal(native.sort_bucket(edge, bits, edge=True), np.argsort(-edge, kind="stable"))


def test_setup_builds_every_source_and_exports_every_kernel() -> None:
    """setup.py compiles every C file of otlp/backend/native and lists every kernel the loader declares (MSVC exports
    only the listed names), so a new kernel cannot be left out of the build."""
    import ast
    import re

    root = Path(__file__).resolve().parents[2]
    tree = ast.parse((root / "setup.py").read_text())
    values = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)}
    from otlp.backend.native.sources import SOURCES  # setup.py reads the list from there

    assert set(SOURCES) == {p.name for p in (root / "otlp" / "backend" / "native").glob("*.c")}
    loader = (root / "otlp" / "backend" / "native" / "__init__.py").read_text()
    declared = set(re.findall(r"lib\.(otlp_\w+)\.restype", loader))
    assert declared == set(ast.literal_eval(values["SYMBOLS"]))


def _tied_batches(rng: np.random.Generator, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rows full of exact ties: the tie families of the exact tests (small-integer masses, repeated (p, q) pairs,
    p = q) at V = 2 to 600, and dyadic rows (masses k / 2^12, so that every sum is exact in any order) with long runs
    of one ratio, some q = 0 and p = 0 tokens."""
    batches = []
    for family in ("rational_ties", "identical_tokens", "p_equals_q"):
        for V in (2, 5, 40, 600):
            rows = [draw(family, rng, V, n) for _ in range(6)]
            batches.append(tuple(np.array([r[k] for r in rows]) for k in (0, 1)))
    for V in (64, 1000):
        base = rng.integers(1, 5, (6, V)).astype(float)
        P, Q = base.copy(), base * rng.choice([1.0, 2.0, 0.5], size=(6, V))
        P[:, ::11], Q[:, 3::13] = 0.0, 0.0
        P, Q = P / P.sum(1, keepdims=True), Q / Q.sum(1, keepdims=True)
        batches.append((P, Q))
    return batches


@needs_kernels
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_the_host_route_is_the_reference_on_tied_rows(n: int) -> None:
    """The host route of otlp/optimal/host.py (every kernel of chains.c) against the reference chains.py on rows
    full of exact ties, no family exempted: the full chains of host.build equal chains.build's to the last bit where
    numpy's power is the C library's (else to 1e-14); and the sampler's steps (prefix, served group, own-window
    chain, pieces, draw) give the reference's acceptances to 1e-15 and its tokens and slots for 8 draws of uniforms
    per row (a uniform would have to fall within that rounding of a boundary to differ)."""
    exact = _numpy_pow_is_the_c_librarys()
    rng = np.random.default_rng(100 + n)
    draws = 0
    for P, Q in _tied_batches(rng, n):
        B, V = P.shape
        with np.errstate(all="ignore"):
            got, want = host.build(P, Q, n), C.build(P, Q, n)
        for name in ("t", "y", "before", "a", "lam", "beta"):
            a, b = getattr(got.terms, name), getattr(want.terms, name)
            if exact:
                np.testing.assert_array_equal(a, b, err_msg=name)
            else:
                np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-300, err_msg=name)
        for w in (np.array([rng.choice(V, n, p=q) for q in Q]), rng.integers(0, V, (B, n))):
            with np.errstate(all="ignore"):
                pre, ref_pre = host.prefix(P, Q, n), C.prefix(P, Q, n)
                accept, reject = host.tuple_rule(pre, w, window="auto")
                ref_accept, ref_reject = C.tuple_rule(ref_pre, w, window="auto")
            np.testing.assert_allclose(accept, ref_accept, rtol=0, atol=1e-15)
            np.testing.assert_allclose(reject, ref_reject, rtol=0, atol=1e-15)
            for _ in range(8):
                U = rng.random((B, 2))
                tokens, index = host.sample(pre, accept, reject, w, U)
                ref_tokens, ref_index = C.sample(ref_pre, ref_accept, ref_reject, w, U)
                np.testing.assert_array_equal(tokens, ref_tokens)
                np.testing.assert_array_equal(index, ref_index)
                draws += B
    assert draws > 1000


def _wor_instances(rng: np.random.Generator, count: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Instances of the rule for drafts without replacement on a support of k tokens and OTHER (q = 0): ``(P, Q
    [B, k + 1], n)``, Dirichlet masses from flat to spiky, with ties in q, zeros in p (a drafted token the target
    never takes, no OTHER), a near point mass and repeated rows."""
    out = []
    for i in range(count):
        k = int(rng.integers(2, 11))
        n, B = int(rng.integers(1, min(k, 4) + 1)), int(rng.integers(1, 5))
        P = rng.dirichlet(np.full(k + 1, rng.choice([0.05, 0.3, 1.0, 3.0])), size=B)
        Q = np.concatenate([rng.dirichlet(np.full(k, rng.choice([0.05, 0.3, 1.0, 3.0])), size=B), np.zeros((B, 1))], 1)
        if i % 5 == 0:
            Q[:, 1], P[:, 2] = Q[:, 0], 0.0
        if i % 7 == 0:
            P[:, -1] = 0.0
        if i % 11 == 0:
            Q[0, :k] = 1e-9
            Q[0, 0] = 1.0
        if i % 13 == 0 and B > 1:
            P[1], Q[1] = P[0], Q[0]
        out.append((P / P.sum(1, keepdims=True), Q / Q.sum(1, keepdims=True), n))
    return out


@needs_kernels
def test_the_wor_plan_kernel_finds_set_plans_plan() -> None:
    """otlp_wor_plan (each row's Newton steps on its own, in C) against the reference otlp.optimal.wor.set_plan on 300
    batches of instances: the same rows converge (residual within the tolerance), and every converged row's choice
    probabilities agree to 1e-10 (the same optimum of a strictly concave program, reached by other additions)."""
    from otlp.core.drafts import combinations, set_probabilities
    from otlp.optimal import wor as W

    for P, Q, n in _wor_instances(np.random.default_rng(2), 300):
        sets = combinations(P.shape[1] - 1, n)
        probs = set_probabilities(Q, sets)
        _, want, want_residual = W.set_plan(P, Q, sets, probs)
        got, residual = native.wor_plan(P, Q, sets, probs, W.MAX_STEPS, W.TOLERANCE)
        np.testing.assert_array_equal(np.isfinite(residual), np.isfinite(want_residual))
        ok = np.isfinite(residual)
        assert (residual[ok] <= W.TOLERANCE).all()
        np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=1e-10)
    P, Q, _ = _wor_instances(np.random.default_rng(4), 1)[0]
    sets = combinations(P.shape[1] - 1, 2)[:, ::-1]  # ids not increasing: the kernel declines (upper triangle only)
    assert native.wor_plan(P, Q, sets, set_probabilities(Q, sets), W.MAX_STEPS, W.TOLERANCE) is None


@needs_kernels
def test_the_set_probabilities_kernel_gives_the_references_bits() -> None:
    """otlp_set_probabilities against otlp.core.drafts.set_probabilities: equal to the last bit (the same terms in
    the same order) on the instances above and on wider sets (n up to 8, the draft's q of ties and a near point
    mass)."""
    from otlp.core.drafts import combinations, mass_ranks, set_probabilities

    rng = np.random.default_rng(3)
    cases = [(Q, n) for _, Q, n in _wor_instances(rng, 100)]
    cases += [(rng.dirichlet(np.full(10, 0.4), size=3), 8), (np.r_[np.full(9, 1e-9), 1 - 9e-9][None], 5)]
    for Q, n in cases:
        sets = combinations(Q.shape[1], n)
        np.testing.assert_array_equal(native.set_probabilities(Q, *mass_ranks(Q), sets), set_probabilities(Q, sets))
