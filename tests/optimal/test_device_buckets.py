"""The bucket rule on torch tensors (otlp/optimal/device_buckets.py) and its Triton passes (device_passes.py).

* Enumeration at V <= 8 with coarse buckets (bits 0: one per octave, so buckets hold several tokens), on every
  instance family: for every drafted tuple and u[:, 0] at random and 1e-7 either side of every slot's end, the same
  token and slot as the reference (:func:`.chains.tuple_rule` + :func:`.chains.sample`, the device route) with the
  default selection and the fallback; and with the least selection (no bucket sorted but the drafts', which are
  summed by segment between the drafts, or with ``partial=False`` compacted; so that bucket entries lie inside the
  served window and their hazard is bounded), wherever the certificate alone decides, the reference's slot. The
  law (p) and the acceptance (alpha*) from the route's own slot probabilities (bisection of its answers in
  u[:, 0]), with the least selection and the fallback.
* LM-like rows at V = 2k and 32k (loose, close sigma 1 and 0.5, ties; float32 / float64; n = 2, 4, 8): the same tokens
  and slots as ``get("optimal").sample`` (the CPU route) for the same uniforms, the certificate's rows and the
  fallback's; the certification, refinement, fallback and spill rates printed (``pytest -s``).
* The Triton passes, interpreted on the CPU (``TRITON_INTERPRET=1``), equal the torch passes; skipped by name
  ("triton") where Triton is not installed.
* No host synchronisation; spilled rows and the gathered fallback's overflow are counted.
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.optimal import chains as C

from ..kernels import fresh
from .instances import draw, lm_rows, slot_law

torch = pytest.importorskip("torch")

from otlp.optimal import device_buckets as DB  # noqa: E402
from otlp.optimal.sampler import verify  # noqa: E402
from otlp.verifiers import get  # noqa: E402

from .test_sampler_device import SYNC_OPS, _Recorder  # noqa: E402

CASES = [("rational_ties", 4, 2), ("zeros", 6, 2), ("near_ties", 6, 2), ("identical_tokens", 5, 3),
         ("dirichlet", 8, 2), ("heavy", 5, 3), ("p_equals_q", 5, 2), ("rational_ties", 5, 3), ("near_ties", 5, 3),
         ("zeros", 5, 3), ("skewed_q", 6, 2), ("point_mass_q", 4, 2), ("point_mass_p", 5, 2), ("uniform_q", 5, 3),
         ("dirichlet", 3, 4)]


def _rows(p: np.ndarray, q: np.ndarray, omegas: np.ndarray):  # noqa: ANN202
    """One instance as a batch of its tuples: ``p, q float64 [T, V]`` and drafts ``[T, n]``."""
    T = omegas.shape[0]
    P = torch.from_numpy(np.asarray(p, dtype=np.float64))[None, :].expand(T, -1).contiguous()
    Q = torch.from_numpy(np.asarray(q, dtype=np.float64))[None, :].expand(T, -1).contiguous()
    return P, Q, torch.from_numpy(omegas).long()


def _least(T: int) -> torch.Tensor:
    """The least selection (the route adds the drafts' buckets): ``bool [T, NB]`` of bits 0."""
    from otlp.optimal import buckets as BK

    return torch.zeros(T, BK.scheme(0).NB, dtype=torch.bool)


def _slot(tokens_index: tuple, n: int) -> torch.Tensor:
    return torch.where(tokens_index[1] >= 0, tokens_index[1], n)


@pytest.mark.parametrize(("family", "V", "n"), CASES)
def test_same_slot_as_the_reference_for_every_tuple(family: str, V: int, n: int) -> None:
    rng = np.random.default_rng([3, CASES.index((family, V, n))])
    p, q = draw(family, rng, V, n)
    omegas, _ = otlp.IID(q, n).support()
    P, Q, w = _rows(p, q, omegas)
    T = w.shape[0]
    pre = C.prefix(P, Q, n)
    accept, reject = C.tuple_rule(pre, w, steps=C.NEWTON_STEPS)
    cw = torch.cat([accept, torch.where(pre.alpha < 1.0, reject, 0.0)[:, None]], 1).cumsum(1)  # [T, n + 1]
    points = torch.cat([cw - 1e-7, cw + 1e-7, torch.rand(T, 4, dtype=torch.float64,
                                                         generator=torch.Generator().manual_seed(V))], 1)
    points = points.clamp(0.0, 1.0 - 1e-12)
    decided = bounded = 0
    for col in range(points.shape[1]):
        U = torch.stack([points[:, col], torch.rand(T, dtype=torch.float64)], 1)
        want = verify(P, Q, w, U, backend="torch")
        got = DB.decide(P, Q, w, U, bits=0)
        assert torch.equal(got.tokens, want[0]) and torch.equal(got.index, want[1]), col
        for partial in (True, False):
            d = DB.decide(P, Q, w, U, bits=0, rounds=0, fallback=False, selection=_least(T), partial=partial)
            certified = d.rounds == 0
            assert torch.equal(_slot((d.tokens, d.index), n)[certified], _slot(want, n)[certified]), col
            assert torch.equal(d.tokens[certified], want[0][certified]), col
            decided += int(certified.sum())
            bounded += int((certified & (d.selected < V)).sum())
    print(f"\n{family} V={V} n={n}: least selection certified {decided} of {2 * T * points.shape[1]} "
          f"({bounded} with merged runs)")


def _slot_probabilities(P, Q, w, selection) -> np.ndarray:  # noqa: ANN001
    """``[T, n + 1]`` the probability over u[:, 0] of each slot (n: reject): the slot is non-decreasing in u[:, 0],
    so P(slot <= j) is where the route's answers cross j, found by bisection (2^-46)."""
    T, n = w.shape
    lo = torch.zeros(T, n, dtype=torch.float64)
    hi = torch.ones(T, n, dtype=torch.float64)
    rep = lambda x: x.repeat_interleave(n, 0)  # noqa: E731 - row t, boundary j at t n + j
    Pr, Qr, wr, sr = rep(P), rep(Q), rep(w), rep(selection)
    j = torch.arange(n).repeat(T)
    for _ in range(46):
        mid = 0.5 * (lo + hi)
        u = torch.stack([mid.reshape(-1), torch.full((T * n,), 0.5, dtype=torch.float64)], 1)
        d = DB.decide(Pr, Qr, wr, u, bits=0, rounds=0, selection=sr)
        le = (_slot((d.tokens, d.index), n) <= j).reshape(T, n)
        lo, hi = torch.where(le, mid, lo), torch.where(le, hi, mid)
    cdf = torch.cat([torch.zeros(T, 1, dtype=torch.float64), lo, torch.ones(T, 1, dtype=torch.float64)], 1)
    return cdf.diff(dim=1).numpy()


@pytest.mark.parametrize(("family", "V", "n"), [("rational_ties", 4, 3), ("zeros", 6, 2), ("heavy", 4, 3),
                                                 ("near_ties", 6, 2), ("dirichlet", 8, 2)])
def test_law_and_acceptance_by_enumeration(family: str, V: int, n: int) -> None:
    """The route's slot probabilities (least selection, the fallback where it does not certify) and the rule's
    residual give the law p and the acceptance alpha* to 1e-12 over every tuple of positive probability."""
    rng = np.random.default_rng([5, V, n])
    p, q = draw(family, rng, V, n)
    omegas, probs = otlp.IID(q, n).support()
    P, Q, w = _rows(p, q, omegas)
    slots = _slot_probabilities(P, Q, w, _least(w.shape[0]))
    law, acceptance, alpha = slot_law(P[:1].numpy(), Q[:1].numpy(), n, omegas, probs, slots)
    assert np.abs(law - p).sum() < 1e-12, f"law off by {np.abs(law - p).sum():.3g} in L1"
    assert abs(acceptance - alpha) < 1e-12, f"acceptance {acceptance} vs alpha* {alpha}"


#: (rows, V) of the LM-row comparison: 4 drafts x 2 dtypes x 3 n x (16 + 8) rows = 576 rows
SIZES = [(16, 2000), (8, 32_000)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("draft", ["loose", "1", "0.5", "ties"])
def test_same_tokens_as_the_optimal_sampler(draft: str, dtype) -> None:  # noqa: ANN001
    """Token for token (and slot) ``get("optimal").sample`` for the same uniforms; the certificate's rows checked on
    their own (the fallback called on the rows it leaves)."""
    rates = []
    for B, V in SIZES:
        for n in (2, 4, 8):
            p, q, drafts, u = lm_rows(B, V, 7 * n + V, draft, 8, dtype)
            drafts = drafts[:, :n]
            want = get("optimal").sample(p, q, drafts, None, uniforms=u)
            d = DB.decide(p, q, drafts, u, fallback=False)
            tokens, index = d.tokens.clone(), d.index.clone()
            left = d.rounds > DB.ROUNDS
            if left.any():  # (the test may synchronise: the fallback on the rows that need it)
                rest = DB.decide(p[left], q[left], drafts[left], u[left])
                tokens[left], index[left] = rest.tokens, rest.index
            assert torch.equal(tokens, want[0]) and torch.equal(index, want[1]), (V, n)
            rates.append((V, n, torch.bincount(d.rounds, minlength=DB.ROUNDS + 2).tolist(), int(d.spilled.sum())))
    print(f"\n{draft} {dtype}: (V, n, rows certified at round 0 .. {DB.ROUNDS} / fallback, spilled): {rates}")


def test_verify_equals_the_device_route_with_the_fallback() -> None:
    """:func:`.device_buckets.verify` (the fallback on all rows) equals ``verify(backend="torch")``, also with a buffer
    too small for some rows (spilled rows take the fallback), with the refinement on two gathered rows, and with the
    drafts' buckets compacted (``partial=False``)."""
    for draft in ("loose", "0.5"):
        p, q, drafts, u = lm_rows(8, 3000, 9, draft, 4)
        want = verify(p, q, drafts, u, backend="torch")
        for K, refine_rows, partial in ((None, None, True), (8, None, True), (None, 2, True), (8, 2, True),
                                        (None, None, False), (64, 2, False)):
            got = DB.verify(p, q, drafts, u, K=K, refine_rows=refine_rows, partial=partial)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (draft, K, refine_rows, partial)
    d = DB.decide(p, q, drafts, u.double(), K=8)
    assert d.spilled.sum() >= 2 and (d.rounds[d.spilled] == DB.ROUNDS + 1).all()
    left = int((d.rounds == DB.ROUNDS + 1).sum())
    d = DB.decide(p, q, drafts, u.double(), K=8, fallback_rows=1)
    assert int(d.overflow) == left - 1


def test_the_host_mode_takes_exactly_the_undecided_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """``refine_rows="gather"`` and ``fallback_rows="gather"`` (host tensors) give the refinement and the fallback
    exactly the rows that need them, gathered: the same tokens and slots as ``verify(backend="torch")`` and the same
    rounds as the static route (every row refined), the fallback called once on the undecided rows only, none where
    every row is certified. Cases: the default selection; a buffer too small for every row (K = 8: they spill and take
    the fallback); every bucket selected on even rows (certified at round 0) and none on odd rows (certified on the
    refinement round). The caller's inverse sums (``inverse``) equal to the passes' give the same decision."""
    calls = []
    original = DB._fallback
    monkeypatch.setattr(DB, "_fallback", lambda p, *a: (calls.append(p.shape[0]), original(p, *a))[1])
    halves = torch.zeros(8, DB.BK.scheme(DB.bits_for(3000)).NB, dtype=torch.bool)  # [8, NB]
    halves[::2] = True
    for draft in ("loose", "0.5"):
        p, q, drafts, u = lm_rows(8, 3000, 9, draft, 4)
        u = u.double()
        want = verify(p, q, drafts, u, backend="torch")
        for K, selection, rounds in ((None, None, [0]), (8, None, [DB.ROUNDS + 1]), (3000, halves, [0, 1])):
            static = DB.decide(p, q, drafts, u, K=K, fallback=False, selection=selection)
            assert sorted(set(static.rounds.tolist())) == rounds, (draft, K)
            left = int((static.rounds == DB.ROUNDS + 1).sum())
            calls.clear()
            got = DB.decide(p, q, drafts, u, K=K, selection=selection, refine_rows="gather", fallback_rows="gather")
            assert torch.equal(got.tokens, want[0]) and torch.equal(got.index, want[1]), (draft, K)
            assert torch.equal(got.rounds, static.rounds) and int(got.overflow) == 0
            assert calls == ([left] if left else [])
    inverse = (DB.inverse_sums(p), DB.inverse_sums(q))
    a, b = DB.decide(p, q, drafts, u, inverse=inverse), DB.decide(p, q, drafts, u)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.index, b.index) and torch.equal(a.rounds, b.rounds)


def test_one_draft_takes_the_closed_form() -> None:
    p, q, drafts, u = lm_rows(8, 3000, 2, "1", 1)
    want = verify(p, q, drafts, u, backend="torch")
    got = DB.verify(p, q, drafts, u)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize(("refine_rows", "fallback_rows"), [(None, None), (2, 2)])
def test_never_synchronises(refine_rows: int | None, fallback_rows: int | None) -> None:
    p, q, drafts, u = lm_rows(6, 800, 3, "1", 4)
    with _Recorder() as rec:
        DB.verify(p, q, drafts, u, refine_rows=refine_rows, fallback_rows=fallback_rows)
    assert not rec.ops & set(SYNC_OPS), sorted(rec.ops & set(SYNC_OPS))


@pytest.mark.parametrize(("refine_rows", "fallback_rows"), [(None, None), (2, 2)])
def test_traces_as_one_graph(refine_rows: int | None, fallback_rows: int | None) -> None:
    """torch.compile traces the rule whole (``fullgraph=True`` raises at a graph break: a host synchronisation, a
    data-dependent shape, a numpy call), so that inductor may fuse its ~2,600 small ops (B = 64, V = 128k, n = 4:
    benchmarks/bytes_moved.py --ops); the traced graph, run without inductor (``backend="eager"``), gives the eager
    tokens, slots and rounds. (Inductor itself is not run: on this CPU its C++ hit an internal compiler error of
    gcc 12, and on CUDA it is untimed.)"""
    p, q, drafts, u = lm_rows(6, 2500, 4, "0.5", 5)

    def rule(p, q, w, U):  # noqa: ANN001, ANN202
        d = DB.decide(p, q, w, U, refine_rows=refine_rows, fallback_rows=fallback_rows)
        return d.tokens, d.index, d.rounds

    torch._dynamo.reset()
    try:
        traced = torch.compile(rule, backend="eager", fullgraph=True, dynamic=False)(p, q, drafts, u.double())
    finally:
        torch._dynamo.reset()
    eager = rule(p, q, drafts, u.double())
    assert all(torch.equal(a, b) for a, b in zip(traced, eager, strict=True))


# -- the Triton passes ---------------------------------------------------------------------------------------------


@pytest.fixture
def triton_passes(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """:mod:`.device_passes` with its kernels made afresh, interpreted on the CPU where there is no CUDA device."""
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    from otlp.optimal import device_passes as DP

    with fresh(monkeypatch, DP._kernels):
        yield DP


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_triton_passes_equal_the_torch_passes(triton_passes, dtype) -> None:  # noqa: ANN001
    """Counts, compacted ids and masses equal; the bucket sums to rounding (float64 atomics add in another order).
    Rows with p = 0, q = 0 and p = q = 0 tokens, and one filtered to p's top 50 and q's top 300 tokens (the two
    end buckets hold nearly all of its tokens, summed in a block before their atomics), bits 0 and 5, a buffer that
    overflows and one that does not."""
    from otlp.optimal import buckets as BK

    p, q, _, _ = lm_rows(3, 2500, 4, "1", 4, dtype)
    p[0, :6], q[0, 4:9], p[1, 100:140], q[1, 100:120] = 0.0, 0.0, 0.0, 0.0
    p[2, p[2].argsort()[:-50]], q[2, q[2].argsort()[:-300]] = 0.0, 0.0
    inv_p, inv_q = DB.inverse_sums(p), DB.inverse_sums(q)
    g = torch.Generator().manual_seed(1)
    for bits in (0, 5):
        sc = BK.scheme(bits)
        P, Q = (torch.tensor([x], dtype=torch.float64) for x in ([0.0, 1.0, 0.0], [1.0, 0.0, 0.0]))
        ends = [0, sc.NB - 1, sc.NB - 1]  # (the kernel's end buckets: p = 0 at the top, q = 0 at the bottom)
        assert DB.token_buckets(P, Q, sc)[1].tolist() == [ends]
        a, b = DB.histogram(p, q, inv_p, inv_q, sc), triton_passes.histogram(p, q, inv_p, inv_q, sc)
        assert torch.equal(a[0], b[0])
        for x, y in zip(a[1:], b[1:], strict=True):
            assert ((x - y).abs() <= 1e-15 * x.abs()).all()
        sel = torch.rand(3, sc.NB, generator=g) < 0.4
        sel |= a[0] > 100  # some large buckets
        for K in (200, 2500):
            a, b = DB.compact(p, q, inv_p, inv_q, sel, sc, K), triton_passes.compact(p, q, inv_p, inv_q, sel, sc, K)
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), (bits, K)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_triton_segments_equal_the_torch_segments(triton_passes) -> None:  # noqa: ANN001
    """The drafts' unsorted buckets summed by segment: counts equal, sums to rounding (float64 atomics); a repeated
    draft, a draft's bucket sorted (not partial), tied rows."""
    from otlp.optimal import buckets as BK

    for draft, n in (("1", 4), ("ties", 8)):
        p, q, drafts, _ = lm_rows(3, 1000, 2, draft, n)
        drafts[0, 1] = drafts[0, 0]
        sc = BK.scheme(1)
        inv_p, inv_q = DB.inverse_sums(p), DB.inverse_sums(q)
        dr = DB.draws(p, q, inv_p, inv_q, drafts, sc)
        part = torch.zeros(3, sc.NB, dtype=torch.bool).scatter(1, dr.bucket, True)
        part[1, dr.bucket[1, 0]] = False
        a = DB.segments(p, q, inv_p, inv_q, part, sc, dr)
        b = triton_passes.segments(p, q, inv_p, inv_q, part, sc, dr)
        assert torch.equal(a[2], b[2]) and int(a[2].sum()) > 0
        for x, y in zip(a[:2], b[:2], strict=True):
            assert ((x - y).abs() <= 1e-14 * x.abs()).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_rule_with_the_triton_passes_decides_alike(triton_passes) -> None:  # noqa: ANN001
    from otlp.optimal import device_passes as DP

    for draft in ("1", "ties"):
        p, q, drafts, u = lm_rows(3, 1000, 11, draft, 4)
        want = DB.decide(p, q, drafts, u, fallback=False)
        got = DB.decide(p, q, drafts, u, fallback=False, passes=DP.TRITON)
        for x, y in ((got.tokens, want.tokens), (got.index, want.index), (got.rounds, want.rounds)):
            assert torch.equal(x, y), draft
