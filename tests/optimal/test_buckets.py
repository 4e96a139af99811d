"""The CPU sampler's bucketed partial order (otlp/optimal/buckets.py, its rows in ``otlp_bucket_rule``) against the
full sort of every row.

Every certified row must give the token and accepted slot of the full-sort route (chains.prefix + tuple_rule +
sample) for the same uniforms, on every instance family of tests/optimal/instances.py (ties, zeros, point masses,
near-ties) and on LM-shaped rows; rows the route cannot certify must be reported, not answered. The full route's law
is tested by enumeration in test_exact_enumeration.py, so equal draws for every uniform mean an equal law. Without the
kernels the sampler takes the full sort: these tests need them. Selections forced on the kernel (``forced``) come from
the bucket rule's torch reference, :mod:`otlp.optimal.device_buckets`."""

from __future__ import annotations

import numpy as np
import pytest

from otlp.backend import native
from otlp.optimal import buckets as BK
from otlp.optimal import chains as C
from tests.optimal.instances import FAMILIES, draw

needs_openmp = pytest.mark.skipif(not native.openmp(), reason="needs otlp's C kernels built with OpenMP")
needs_kernels = pytest.mark.skipif(native.library() is None, reason="needs otlp's C kernels (the route runs there)")


def _full(P, Q, w, U, n):  # noqa: ANN001, ANN202
    pre = C.prefix(P, Q, n)
    accept, reject = C.tuple_rule(pre, w, window="auto")
    return C.sample(pre, accept, reject, w, U)


def _batch(rng, family: str, B: int, V: int, n: int):  # noqa: ANN001, ANN202
    """B instances of one family, each with a tuple drafted from its q."""
    P, Q, W = np.empty((B, V)), np.empty((B, V)), np.empty((B, n), dtype=np.int64)
    for b in range(B):
        P[b], Q[b] = draw(family, rng, V, n)
        W[b] = rng.choice(V, size=n, p=Q[b])
    return P, Q, W


def _lm(rng, B: int, V: int, n: int):  # noqa: ANN001, ANN202
    """Rows shaped like benchmarks/verifiers.py's (softmax of scaled normals, the draft correlated with the target)."""
    z = 3.0 * rng.normal(size=(B, V))
    P = np.exp(z - z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    y = 3.0 * rng.normal(size=(B, V)) + 0.5 * np.log(P)
    Q = np.exp(y - y.max(1, keepdims=True))
    Q /= Q.sum(1, keepdims=True)
    W = np.stack([rng.choice(V, size=n, p=Q[b]) for b in range(B)])
    return P, Q, W


def _check(P, Q, W, n: int, draws: int, rng) -> np.ndarray:  # noqa: ANN001
    """Certified rows equal the full sort for ``draws`` uniforms each; returns the fraction certified per draw."""
    certified = []
    for _ in range(draws):
        U = rng.random((P.shape[0], 2))
        tokens, index, done = BK.verify_rows(P, Q, W, U, n)
        t0, i0 = _full(P, Q, W, U, n)
        np.testing.assert_array_equal(tokens[done], t0[done])
        np.testing.assert_array_equal(index[done], i0[done])
        certified.append(done.mean())
    return np.asarray(certified)


@needs_kernels
@pytest.mark.parametrize("n", [1, 2, 3, 8])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_certified_rows_draw_what_the_full_sort_draws(family: str, n: int) -> None:
    rng = np.random.default_rng([n, sorted(FAMILIES).index(family)])
    P, Q, W = _batch(rng, family, 6, 3000, n)
    _check(P, Q, W, n, 25, rng)


@needs_kernels
@pytest.mark.parametrize("n", [2, 4, 8])
def test_lm_rows_are_certified_and_agree(n: int) -> None:
    """At V = 32k almost every LM-shaped row is certified (else the route would be the full sort plus overhead)."""
    rng = np.random.default_rng(n)
    P, Q, W = _lm(rng, 7, 32_000, n)
    certified = _check(P, Q, W, n, 10, rng)
    assert certified.mean() > 0.9


@needs_kernels
@pytest.mark.parametrize("split", [True, False])
def test_a_team_answers_as_one_thread(monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    """With several torch threads an OpenMP team takes a call's rows one at a time inside its one call (from
    ``THREADS_MIN`` entries): 7 rows on 3 threads draw what one thread draws (which equals the full sort, above), and
    the split did happen where it reaches ``THREADS_MIN`` and the kernels have OpenMP."""
    from otlp.backend import threads

    V, n = 32_000, 4
    monkeypatch.setattr(BK, "THREADS_MIN", 0 if split else 1 << 62)
    rng = np.random.default_rng(11)
    P, Q, W = _lm(rng, 7, V, n)
    U = rng.random((7, 2))
    monkeypatch.setattr(threads, "count", lambda: 1)
    one = BK.verify_rows(P, Q, W, U, n)
    seen = []
    inner = native.bucket_rule

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the threads that took rows
        stats = {}
        out = inner(*args, **kwargs, stats=stats)
        seen.append(stats["threads"])
        return out

    monkeypatch.setattr(native, "bucket_rule", counted)
    monkeypatch.setattr(threads, "count", lambda: 3)
    pooled = BK.verify_rows(P, Q, W, U, n)
    assert seen == [3 if split and native.openmp() else 1]
    for a, b in zip(one, pooled, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_kernels
def test_rows_that_hardly_compress_take_the_full_sort_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row whose compressed instance would hold more than 1 / FULL_SORT_SHARE of its tokens (here a draft close
    to the target: every ratio within a few octaves) is not tried on the buckets (status 0); the CPU sampler gives it
    the full sort, and every row draws what the full sort draws. (The window's bounds, ``BOUND``, compress such a
    row: off here; and none takes its full order in C, ``WHOLE_ROWS``: the next test; nor the finer buckets of
    ``ZOOM``.)"""
    import torch

    monkeypatch.setattr(BK, "BOUND", False)
    monkeypatch.setattr(BK, "WHOLE_ROWS", 0)
    monkeypatch.setattr(BK, "ZOOM", False)  # (the finer buckets would take row 2: test_zoom)

    from otlp.backend import threads
    from otlp.optimal.sampler import verify

    attempts = []
    monkeypatch.setattr(threads, "count", lambda: 1)  # one call: the statuses in row order
    rule = BK._native_rows
    monkeypatch.setattr(BK, "_native_rows", lambda *a, **k: (out := rule(*a, **k), attempts.append(out[2].copy()))[0])
    rng = np.random.default_rng(5)
    P, Q, W = _lm(rng, 6, 20_000, 4)
    close = np.exp(np.log(P[2]) + 0.02 * rng.normal(size=20_000))  # all but a few percent of its tokens selected
    Q[2] = close / close.sum()
    W[2] = rng.choice(20_000, size=4, p=Q[2])
    U = rng.random((6, 2))
    tokens, index, done = BK.verify_rows(P, Q, W, U, 4)
    assert not done[2] and done[[0, 1, 3, 4, 5]].all()
    status = attempts[0]  # row 2 was never attempted: status 0
    assert status[2] == 0 and (status[[0, 1, 3, 4, 5]] > 0).all()
    t0, i0 = _full(P, Q, W, U, 4)
    np.testing.assert_array_equal(tokens[done], t0[done])
    t1, i1 = verify(torch.from_numpy(P), torch.from_numpy(Q), torch.from_numpy(W), torch.from_numpy(U))
    np.testing.assert_array_equal(t1.numpy(), t0)
    np.testing.assert_array_equal(i1.numpy(), i0)


@needs_kernels
def test_with_one_thread_a_few_rows_that_hardly_compress_take_their_full_order_in_c(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With one thread, up to ``whole`` of a call's rows that the buckets leave (here two close drafts) take every
    bucket in the call (status ATTEMPTS + 1), the first that ask; the others keep status 0 for the caller's full sort.
    Either way each row draws the full sort's token and slot; :func:`BK.verify_rows` gives them a second native call
    where they are at most ``WHOLE_ROWS``, and its answer is the full sort's either way. (``BOUND`` off: with the
    window's bounds such rows compress.)"""
    monkeypatch.setattr(BK, "BOUND", False)
    rng = np.random.default_rng(16)
    P, Q, W = _lm(rng, 8, 20_000, 4)
    for b in (2, 5):
        close = np.exp(np.log(P[b]) + 0.02 * rng.normal(size=20_000))  # all but a few percent of its tokens selected
        Q[b] = close / close.sum()
        W[b] = rng.choice(20_000, size=4, p=Q[b])
    sc = BK.scheme(BK.bits_for(20_000))
    one = np.ones(8)
    U = rng.random((8, 2))
    t0, i0 = _full(P, Q, W, U, 4)
    for whole, want in ((0, [0, 0]), (1, [BK.ATTEMPTS + 1, 0]), (2, [BK.ATTEMPTS + 1] * 2)):
        tokens, index, status = BK._native_rows(P, Q, one, one, W, U, 4, sc, threads=1, whole=whole)
        np.testing.assert_array_equal(status[[2, 5]], want)
        assert (status[[0, 1, 3, 4, 6, 7]] > 0).all() and (status[[0, 1, 3, 4, 6, 7]] <= BK.ATTEMPTS).all()
        ok = status > 0
        np.testing.assert_array_equal(tokens[ok], t0[ok])
        np.testing.assert_array_equal(index[ok], i0[ok])
    assert BK.whole_rows(8, 1) == 0 and BK.whole_rows(8, 2) == 8
    from otlp.backend import threads

    monkeypatch.setattr(threads, "count", lambda: 1)  # (a team would take every such row)
    monkeypatch.setattr(BK, "ZOOM", False)  # (the finer buckets would take them: test_zoom)
    for most in (0, 1, 2, 4):
        monkeypatch.setattr(BK, "WHOLE_ROWS", most)
        tokens, index, done = BK.verify_rows(P, Q, W, U, 4)
        assert done[[0, 1, 3, 4, 6, 7]].all() and done[[2, 5]].sum() == (2 if most >= 2 else 0)
        np.testing.assert_array_equal(tokens[done], t0[done])
        np.testing.assert_array_equal(index[done], i0[done])


@needs_openmp
def test_with_a_team_a_row_that_hardly_compresses_takes_its_full_order_in_the_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where an OpenMP team takes the rows, a row that hardly compresses (a draft close to its target) takes every
    bucket in the call instead of status 0: its compressed instance is then its full order, so it draws the full
    sort's token and slot; the other rows are certified as with one thread. (``BOUND`` off: with the window's
    bounds such a row compresses.)"""
    from otlp.backend import threads

    monkeypatch.setattr(BK, "BOUND", False)

    rng = np.random.default_rng(15)
    P, Q, W = _lm(rng, 6, 20_000, 4)
    for b in (1, 4):
        close = np.exp(np.log(P[b]) + 0.02 * rng.normal(size=20_000))  # all but a few percent of its tokens selected
        Q[b] = close / close.sum()
        W[b] = rng.choice(20_000, size=4, p=Q[b])
    sc = BK.scheme(BK.bits_for(20_000))
    one = np.ones(6)
    for _ in range(5):
        U = rng.random((6, 2))
        t0, i0 = _full(P, Q, W, U, 4)
        _, _, alone = BK._native_rows(P, Q, one, one, W, U, 4, sc, threads=1, whole=0)
        tokens, index, status = BK._native_rows(P, Q, one, one, W, U, 4, sc, threads=3)
        assert (alone[[1, 4]] == 0).all() and (status > 0).all()  # one thread leaves them; the team answers
        np.testing.assert_array_equal(tokens, t0)
        np.testing.assert_array_equal(index, i0)
    monkeypatch.setattr(threads, "count", lambda: 3)
    monkeypatch.setattr(BK, "THREADS_MIN", 0)
    tokens, index, done = BK.verify_rows(P, Q, W, U, 4)
    assert done.all()
    np.testing.assert_array_equal(tokens, t0)


def _very_close(rng, P: np.ndarray, Q: np.ndarray, W: np.ndarray, rows: tuple, sigma: float) -> None:
    """Rows ``rows`` of Q (in place) a draft within ``sigma`` of the target's log-masses, and W drawn from it."""
    for b in rows:
        close = P[b] * np.exp(sigma * rng.normal(size=P.shape[1]))  # (p = 0: q = 0)
        Q[b] = close / close.sum()
        W[b] = rng.choice(P.shape[1], size=W.shape[1], p=Q[b])


@needs_kernels
@pytest.mark.parametrize("sigma", [0.005, 0.002, 0.001])
def test_rows_of_a_very_close_draft_take_finer_buckets_about_1(monkeypatch: pytest.MonkeyPatch, sigma: float) -> None:
    """A draft within a percent of its target (1 - TV 0.996-0.999) puts nearly every ratio in one or two of
    ``bits_for``'s buckets: its compressed instance would hold most of the row, so the first call leaves it (status
    0, or ``CROWDED`` before its gather where a sample of its tokens shows it). ``verify_rows`` tries such rows again
    on :func:`BK.zoom`'s finer buckets about 1, where they are certified; every row draws the full sort's token and
    slot."""
    from otlp.backend import threads

    monkeypatch.setattr(threads, "count", lambda: 1)  # (one call each: the statuses in row order)
    calls = []
    rule = BK._native_rows
    monkeypatch.setattr(BK, "_native_rows",
                        lambda *a, **k: (out := rule(*a, **k), calls.append((a[7], out[2].copy())))[0])
    rng = np.random.default_rng(int(sigma * 1e4))
    V = 20_000
    P, Q, W = _lm(rng, 6, V, 4)
    _very_close(rng, P, Q, W, (1, 3, 4), sigma)
    for _ in range(4):
        calls.clear()
        U = rng.random((6, 2))
        tokens, index, done = BK.verify_rows(P, Q, W, U, 4)
        t0, i0 = _full(P, Q, W, U, 4)
        assert done.all()
        np.testing.assert_array_equal(tokens, t0)
        np.testing.assert_array_equal(index, i0)
        (first, status), (finer, again) = calls  # two calls: no full order taken
        assert first.octaves == BK.OCTAVES and np.array_equal(np.flatnonzero(status <= 0), [1, 3, 4])
        assert finer is BK.zoom(V) and finer.octaves == BK.ZOOM_OCTAVES and (again > 0).all()
        stats: dict = {}
        BK.verify_chunks(lambda r: (P[r], Q[r], np.ones(6)[r], np.ones(6)[r]), 6, V, W, U, 4, stats=stats)
        assert stats["zoom"] == 3 and stats["full"] == 0 and stats["first"] + stats["retry"] == 3


@needs_kernels
def test_a_crowded_row_is_left_before_its_gather_and_no_other() -> None:
    """With ``crowd`` the kernel leaves a row before its first gather (status ``CROWDED``) where at least that many of
    192 tokens spread over it lie in buckets the gather would take: the rows of a draft within 0.5% of its target
    (they would take status 0 after the gather), and no loose or close (sigma 0.5) row, whose tokens and statuses are
    those of the call without it; below V = 8192 no row is left so."""
    rng = np.random.default_rng(7)
    for V, want in ((20_000, [1, 3, 4]), (6000, [])):
        P, Q, W = _lm(rng, 6, V, 4)
        _very_close(rng, P, Q, W, (5,), 0.5)
        _very_close(rng, P, Q, W, (1, 3, 4), 0.005)
        one, sc, U = np.ones(6), BK.scheme(BK.bits_for(V)), rng.random((6, 2))
        t0, i0, s0 = BK._native_rows(P, Q, one, one, W, U, 4, sc, whole=0)
        t1, i1, s1 = BK._native_rows(P, Q, one, one, W, U, 4, sc, whole=0, crowd=BK.CROWD)
        np.testing.assert_array_equal(np.flatnonzero(s1 == BK.CROWDED), want)
        assert (s0[want] <= 0).all()
        rest = np.setdiff1d(np.arange(6), want)
        np.testing.assert_array_equal(s1[rest], s0[rest])
        ok = rest[s0[rest] > 0]
        np.testing.assert_array_equal(t1[ok], t0[ok])
        np.testing.assert_array_equal(i1[ok], i0[ok])


@needs_kernels
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_finer_buckets_about_1_draw_what_the_full_sort_draws(family: str, n: int) -> None:
    """:func:`BK.zoom`'s scheme (one octave each side of 1; the ratios beyond it in the top and bottom buckets) on
    every instance family, and on drafts within 1% of the family's targets: each row draws the full sort's token and
    slot (rows its buckets do not certify take their full order in the call), and the close drafts' rows are mostly
    certified."""
    rng = np.random.default_rng([n, sorted(FAMILIES).index(family), 1])
    P, Q, W = _batch(rng, family, 8, 3000, n)
    _very_close(rng, P, Q, W, (4, 5, 6, 7), 0.01)
    one, sc = np.ones(8), BK.zoom(3000)
    certified = 0
    for _ in range(10):
        U = rng.random((8, 2))
        tokens, index, status = BK._native_rows(P, Q, one, one, W, U, n, sc, whole=8)
        t0, i0 = _full(P, Q, W, U, n)
        np.testing.assert_array_equal(tokens, t0)
        np.testing.assert_array_equal(index, i0)
        certified += int(((status[4:] > 0) & (status[4:] <= BK.ATTEMPTS)).sum())
    assert certified >= 20 or family == "point_mass_p"  # (its close draft is p itself: one ratio, the full order)


def _buckets(P: np.ndarray, Q: np.ndarray, sc: BK.Scheme) -> np.ndarray:
    """``int64 [B, V]``: each token's bucket of ``sc`` for normalised rows, by the bucket rule's torch reference
    (:func:`otlp.optimal.device_buckets.token_buckets`)."""
    import torch

    from otlp.optimal import device_buckets as DB

    return DB.token_buckets(torch.from_numpy(P), torch.from_numpy(Q), sc)[1].numpy()


def _usual(p, q, inv_p, inv_q, w, U, n: int, sc: BK.Scheme, m_star: bool = True) -> np.ndarray:  # noqa: ANN001
    """``bool [B, NB]``: the first attempt's selection with the window's bounds (``bucket_rule.c``'s ``row_select``)
    from the torch reference (:func:`otlp.optimal.device_buckets.select` on its histogram and level); ``m_star``
    False leaves out the buckets that may hold m* (their interior bound taken as +inf while selecting)."""
    import dataclasses

    import torch

    from otlp.optimal import device_buckets as DB

    tp, tq = torch.from_numpy(np.ascontiguousarray(p)), torch.from_numpy(np.ascontiguousarray(q))
    ip, iq = (torch.from_numpy(np.asarray(x, dtype=np.float64))[:, None] for x in (inv_p, inv_q))
    _, Pb, Qb = DB.histogram(tp, tq, ip, iq, sc)
    lv = DB.level(Pb, Qb, n, sc)
    if not m_star:
        lv = dataclasses.replace(lv, f=torch.full_like(lv.f, float("inf")))
    _, bucket = DB.token_buckets(DB._normalised(tp, ip), DB._normalised(tq, iq), sc)
    return DB.select(lv, bucket.gather(1, torch.from_numpy(np.asarray(w))), torch.from_numpy(U[:, 1])).numpy()


def _drafts_only(p, q, inv_p, inv_q, w, U, n: int, sc: BK.Scheme) -> np.ndarray:  # noqa: ANN001
    """A selection of the drafted tokens' buckets only: m*, the groups and the residual lie in merged runs."""
    rows = np.arange(p.shape[0])[:, None]
    bucket = _buckets(BK.normalised(p, inv_p), BK.normalised(q, inv_q), sc)  # [B, V]
    sel = np.zeros((p.shape[0], sc.NB), dtype=bool)
    sel[rows, bucket[rows, w]] = True
    return sel


def _no_min_candidates(p, q, inv_p, inv_q, w, U, n: int, sc: BK.Scheme) -> np.ndarray:  # noqa: ANN001
    """The usual selection except the buckets that may hold m*: only the certificate's m* condition can catch a
    merged run holding a prefix below the compressed psi*."""
    return _usual(p, q, inv_p, inv_q, w, U, n, sc, m_star=False)


def _with_selection(rule, select):  # noqa: ANN001, ANN202
    """``buckets._native_rows`` given ``select(p, q, inv_p, inv_q, w, U, n, sc)`` as its first attempt's selection
    (unless the caller forces one: verify_chunks' second call, every bucket)."""
    def forced(p, q, inv_p, inv_q, w, u, n, sc, selected=None, **threading):  # noqa: ANN001, ANN202, ANN003
        if "forced" in threading:
            return rule(p, q, inv_p, inv_q, w, u, n, sc, **threading)
        return rule(p, q, inv_p, inv_q, w, u, n, sc, select(p, q, inv_p, inv_q, w, u, n, sc), **threading)
    return forced


@needs_kernels
@pytest.mark.parametrize("select", [_drafts_only, _no_min_candidates])
def test_a_failed_certificate_is_retried_with_the_failing_runs_sorted(monkeypatch: pytest.MonkeyPatch,
                                                                        select) -> None:  # noqa: ANN001
    """With a selection too small, the certificate must fail, the retry sorts the failing runs (then the caller's
    full sort takes what is left), and every certified answer still equals the full sort's."""
    rng = np.random.default_rng(7)
    P, Q, W = _lm(rng, 16, 4000, 2)
    calls = []
    rule = _with_selection(BK._native_rows, select)
    monkeypatch.setattr(BK, "_native_rows", lambda *a, **k: (out := rule(*a, **k), calls.append(out[2].copy()))[0])
    _check(P, Q, W, 2, 30, rng)
    status = np.concatenate(calls)  # statuses: 1 certified at once, 2 on the retry, -2 failed both
    assert (status != 1).any() and (np.abs(status) == 2).any()


def test_the_interior_bound_holds_on_every_prefix_inside_a_bucket() -> None:
    """psi_interior_bound: min(psi at the bucket's ends, f(x_c)) <= psi at every prefix ending inside the bucket,
    for buckets of random tokens with ratios in [lo, hi) (including lo = 0 and hi = inf) above random masses."""
    rng = np.random.default_rng(0)
    worst = np.inf
    for trial in range(3000):
        n = int(rng.integers(1, 9))
        k = int(rng.integers(1, 12))
        lo = [0.0, 0.5, 1.0, 3.0][trial % 4]
        hi = np.inf if trial % 5 == 0 else (lo + 1.0) * float(rng.choice([1.01, 1.1, 2.0]))
        r = lo + (min(hi, lo + 10.0) - lo) * rng.random(k)
        p = rng.random(k) * rng.choice([1e-3, 0.05, 0.3]) / k
        q = r * p
        if hi == np.inf:
            p[rng.random(k) < 0.3] = 0.0  # ratio +inf
            q = np.where(p == 0, rng.random(k) * 0.01, q)
        Pa, Qa = rng.random() * 0.5, rng.random() * 0.4
        order = np.argsort(-np.where(p > 0, q / np.where(p > 0, p, 1), np.inf), kind="stable")
        Pm = Pa + np.concatenate([[0.0], np.cumsum(p[order])])
        Qm = Qa + np.concatenate([[0.0], np.cumsum(q[order])])
        psi = Pm - Qm**n
        f = BK.psi_interior_bound(np.array(Pa), np.array(Qa), np.array(p.sum()), np.array(q.sum()),
                                  np.array(lo), np.array(hi), n)
        bound = min(psi[0], psi[-1], float(f))
        worst = min(worst, float((psi - bound).min()))
    assert worst > -1e-15


def test_bucket_numbers_decrease_with_the_ratio() -> None:
    """Bucket numbers (the bucket rule's reference, :func:`otlp.optimal.device_buckets.token_buckets`, which
    ``buckets.c`` is pinned to) are non-increasing in the ratio q / p, from 0 (+inf) to NB - 1 (0 and the p = q = 0
    tokens), and every ratio lies in its bucket's [LO, HI)."""
    ratios = np.array([2.0**40, 2.0**32, 2.0**32 * 0.999, 1.0, 0.999, 2.0**-32, np.nextafter(2.0**-32, 0), 1e-300])
    P = np.concatenate([[0.0], np.ones_like(ratios), [1.0, 0.0]])[None, :]  # +inf, the ratios, 0, then p = q = 0
    Q = np.concatenate([[1.0], ratios, [0.0, 0.0]])[None, :]
    every = np.concatenate([[np.inf], ratios, [0.0]])
    for bits in range(1, 8):
        sc = BK.scheme(bits)
        b = _buckets(P, Q, sc)[0]
        assert (np.diff(b) >= 0).all() and b[0] == 0 and b[-2] == b[-1] == sc.NB - 1
        inside = (every >= sc.LO[b[:-1]]) & ((every < sc.HI[b[:-1]]) | (sc.HI[b[:-1]] == np.inf))
        assert inside.all()


@needs_kernels
@pytest.mark.parametrize("select", [None, _drafts_only])
def test_the_cpu_sampler_takes_the_partial_order_and_agrees_with_the_device_route(
        monkeypatch: pytest.MonkeyPatch, select) -> None:  # noqa: ANN001
    """``verify`` on CPU tensors where it takes the bucketed route (widths masked too) draws what the torch route
    (full sort on the tensors' device) draws, for the same uniforms; with a selection too small (``_drafts_only``)
    and no retry the rows the route cannot certify take the CPU's full sort."""
    torch = pytest.importorskip("torch")
    from otlp.optimal.sampler import verify

    if select is not None:
        monkeypatch.setattr(BK, "ATTEMPTS", 1)
        failed = []
        rule = _with_selection(BK._native_rows, select)
        monkeypatch.setattr(BK, "_native_rows",
                            lambda *a, **k: (out := rule(*a, **k), failed.append(int((out[2] <= 0).sum())))[0])

    B, V, n = 12, BK.MIN_V, 4
    assert BK.takes(B, V)
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    widths = torch.arange(B) % n + 1
    for _ in range(5):
        u = torch.rand(B, 2, dtype=torch.float64, generator=g)
        for kw in ({}, {"widths": widths}):
            cpu, device = verify(p, q, drafts, u, **kw), verify(p, q, drafts, u, backend="torch", **kw)
            assert torch.equal(cpu[0], device[0]) and torch.equal(cpu[1], device[1])
    if select is not None:
        assert sum(failed) > 0  # rows did go to the full sort


@needs_kernels
@pytest.mark.parametrize(("draft", "zoom"), [("loose", False), ("0.5", False), ("ties", False), ("0.5", True),
                                             ("0.005", True)])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_native_route_draws_what_the_torch_reference_draws(draft: str, zoom: bool, n: int) -> None:
    """The C route (``_native_rows``: its bounded window, every row start to end in C) pinned to the bucket rule's
    torch reference (:func:`otlp.optimal.device_buckets.decide` on the CPU tensors, its host mode, normalised by the
    same row sums, :func:`.buckets.inverse_sums`): for the same rows and uniforms, every row has the reference's token
    and slot (loose, close and tied LM rows, float32, V = 2k and 32k, several uniforms; rows the C route's buckets
    leave take their full order in the call, ``whole``), and most loose and close rows are certified by the buckets
    (status 1 or 2; tied rows, a few ratio values in buckets of thousands of tokens, mostly are not: 16 of 88 at
    n = 2). With ``zoom`` both on :func:`BK.zoom`'s scheme (close drafts of sigma 0.5 and 0.005)."""
    torch = pytest.importorskip("torch")
    from otlp.optimal import device_buckets as DB
    from tests.optimal.instances import lm_rows

    certified = total = 0
    for B, V in ((16, 2000), (6, 32_000)):
        p, q, drafts, u = lm_rows(B, V, 13 * n + V, draft, n)
        ph, qh, w = p.numpy(), q.numpy(), drafts.numpy()
        inv_p, inv_q = BK.inverse_sums(ph), BK.inverse_sums(qh)
        inverse = (torch.from_numpy(inv_p)[:, None], torch.from_numpy(inv_q)[:, None])
        rng = np.random.default_rng([n, V])
        for _ in range(4):
            U = rng.random((B, 2))
            sc = BK.zoom(V) if zoom else BK.scheme(BK.bits_for(V))
            tokens, index, status = BK._native_rows(ph, qh, inv_p, inv_q, w, U, n, sc, whole=B)
            ref = DB.decide(p, q, drafts, torch.from_numpy(U), refine_rows="gather", fallback_rows="gather",
                            inverse=inverse, **({"bits": sc.bits, "octaves": sc.octaves} if zoom else {}))
            assert (status > 0).all()
            np.testing.assert_array_equal(tokens, ref.tokens.numpy())
            np.testing.assert_array_equal(index, ref.index.numpy())
            certified, total = certified + int((status <= BK.ATTEMPTS).sum()), total + B
    assert draft == "ties" or zoom or certified >= 0.5 * total


def _inside_run(rng, B: int, V: int, n: int):  # noqa: ANN001, ANN202
    """LM rows, and a selection of every bucket except one holding only tokens strictly inside the full order's
    (s, top) (a draft's bucket excepted) where the row has one: ``(P, Q, W, sc, forced [B, NB], inside [B])``."""
    P, Q, W = _lm(rng, B, V, n)
    sc = BK.scheme(BK.bits_for(V))
    pre = C.prefix(P, Q, n)
    _, top, s, _ = C.served_group(pre, W)
    bucket = _buckets(P, Q, sc)
    at = np.take_along_axis(bucket, pre.order, axis=1)  # [B, V] the bucket at each position of the full order
    forced, inside = np.ones((B, sc.NB), dtype=bool), np.zeros(B, dtype=bool)
    for b in range(B):
        lo, hi = s[b, 0], top[b, 0]
        edge = set(at[b, :lo + 1]) | set(at[b, hi:]) | set(bucket[b, W[b]])
        middle = sorted(set(at[b, lo + 1:hi]) - edge)
        if middle:
            forced[b, middle[0]], inside[b] = False, True
    assert inside.any()
    return P, Q, W, sc, forced, inside


@needs_kernels
def test_a_run_inside_the_served_chain_fails_the_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the window's bounds (``BOUND`` off) the served group's chain reads each position from s to the top
    draw, so a merged run there must fail the certificate however its psi bounds lie. Every bucket is selected except
    one holding only tokens strictly inside the full order's (s, top) (:func:`_inside_run`): such a row fails its
    first attempt and is certified on the retry (with that bucket sorted) with the full sort's answer; every other row
    is certified at once."""
    monkeypatch.setattr(BK, "FULL_SORT_SHARE", 0)  # try every row, though it hardly compresses
    rng = np.random.default_rng(3)
    B, V = 200, 4000
    for n in (4, 8):
        P, Q, W, sc, forced, inside = _inside_run(rng, B, V, n)
        U = rng.random((B, 2))
        tokens, index, status = BK._native_rows(P, Q, np.ones(B), np.ones(B), W, U, n, sc, forced, bound=False)
        done, first = status > 0, status == 1
        assert done.all() and not first[inside].any() and first[~inside].all()
        t0, i0 = _full(P, Q, W, U, n)
        np.testing.assert_array_equal(tokens, t0)
        np.testing.assert_array_equal(index, i0)


@needs_kernels
@pytest.mark.parametrize("n", [3, 4, 8])
def test_a_run_inside_the_served_chain_is_bounded(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """With the window's bounds (``BOUND``, the native route) a merged run strictly inside the served window need not
    be sorted: its share of the chain's hazard is bounded and the slot certified from the bounds. The rows of
    :func:`_inside_run` give the full sort's token and slot for the same uniforms, and most of those with a run inside
    are certified at the first attempt (the bounds' width is second order in a bucket's ratio span; a row they leave
    undecided is retried with the run sorted, as without them)."""
    monkeypatch.setattr(BK, "FULL_SORT_SHARE", 0)
    rng = np.random.default_rng([4, n])
    B, V = 200, 4000
    P, Q, W, sc, forced, inside = _inside_run(rng, B, V, n)
    for _ in range(3):
        U = rng.random((B, 2))
        tokens, index, status = BK._native_rows(P, Q, np.ones(B), np.ones(B), W, U, n, sc, forced, bound=True)
        assert (status > 0).all()
        assert (status[inside] == 1).mean() > 0.9 and (status[~inside] == 1).all()
        t0, i0 = _full(P, Q, W, U, n)
        np.testing.assert_array_equal(tokens, t0)
        np.testing.assert_array_equal(index, i0)


def _dipping_row():  # noqa: ANN202
    """One row (n = 2, 24 tokens) whose psi dips after the residual index M, between psi* and the threshold, inside
    the positions 8 .. 24 of the full order. By decreasing q / p, as runs of (tokens, q each, p / q): (3, 0.1, 0.1)
    falls to psi* = -0.06 at m* = 3; (5, 0.03, 1) rises to -0.0225 (psi' = p/q - 2Q > 0); (10, 0.025, 1.05) rises,
    then falls to -0.0475 (Q passes 0.525); (6, 0.05, 1.858) rises to psi_V = 0. The drafts are two of the first run
    (the top draw's group is inner and ends at m*), and u = 0.3 puts the threshold tau = psi* (1 - u) = -0.042
    inside that dip: the full order's M is position 18, its last position at or below tau; with positions 8 .. 24
    merged, the compressed order's M is position 4 (psi -0.049), a token of the second run."""
    runs = [(3, 0.1, 0.1), (5, 0.03, 1.0), (10, 0.025, 1.05)]
    q_left = 1.0 - sum(k * qe for k, qe, _ in runs)
    p_left = 1.0 - sum(k * qe * r for k, qe, r in runs)
    runs.append((6, q_left / 6, p_left / q_left))
    q = np.concatenate([np.full(k, qe) for k, qe, _ in runs])
    p = np.concatenate([np.full(k, qe * r) for k, qe, r in runs])
    perm = np.random.default_rng(0).permutation(p.size)  # tokens not in ratio order
    P, Q = (p / p.sum())[perm][None, :], (q / q.sum())[perm][None, :]
    where = np.argsort(perm)  # where[i]: the token of sorted position i (the runs' sort is stable here)
    return P, Q, where[None, :2], where


@needs_kernels
def test_a_run_that_dips_to_the_residual_threshold_after_M_fails_the_certificate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rejected tuple draws position M, the last prefix whose psi is within the threshold of psi*; a merged run
    after the compressed M whose inside dips to the threshold hides the full order's M. On :func:`_dipping_row`,
    with the buckets of positions 8 .. 24 left unselected, psi's dip stays above psi* and the served group ends
    before the run, so only the residual draw's condition can catch it: the first attempt must fail, and the retry
    (those buckets sorted) draws the full sort's token. Without the condition the route certifies the first attempt,
    which draws the token at compressed position 4 (of the second run) instead of the full order's position 18."""
    monkeypatch.setattr(BK, "FULL_SORT_SHARE", 0)  # try the row, though 24 tokens hardly compress
    P, Q, W, where = _dipping_row()
    n, sc = 2, BK.scheme(1)
    pre = C.prefix(P, Q, n)
    U = np.array([[0.999, 0.3]])  # u_0: the reject piece; u_1: the threshold inside the dip
    t0, i0 = _full(P, Q, W, U, n)
    assert i0[0] == -1 and C.residual_index(pre, U[:, 1:])[0] == 18 and pre.m_star[0] == 3  # the row as designed
    bucket = _buckets(P, Q, sc)[0]
    forced = np.ones((1, sc.NB), dtype=bool)
    forced[0, bucket[where[8:]]] = False
    assert forced[0, bucket[where[:8]]].all()  # the first two runs' buckets hold none of the dip's tokens
    tokens, index, status = BK._native_rows(P, Q, np.ones(1), np.ones(1), W, U, n, sc, forced)
    assert status[0] == 2  # failed the first attempt, certified on the retry
    assert (tokens[0], index[0]) == (t0[0], i0[0])


