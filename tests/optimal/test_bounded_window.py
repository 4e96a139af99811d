"""The native CPU route's bounded window (``bucket_rule.c``'s ``window_bound`` with ``buckets.BOUND``; issue 41).

With it, a row's served window may hold buckets that are never sorted (merged runs, and the drafts' own buckets,
gathered but not sorted: each draft a token, the rest of its bucket runs between them), the chain's hazard over them
bounded (design note sortfree-rule.md section 3, the reference :mod:`otlp.optimal.sortfree`), and the slot certified
where ``u[:, 0]`` falls outside the bounds' uncertainty; elsewhere the row is retried with those buckets sorted, then
takes the full sort. So the sampler must draw exactly what it drew without the bounds (the full sort's token and slot)
for the same uniforms:

* by enumeration at V <= 8 with one bucket per octave (buckets holding several tokens): the sampler's slot
  probabilities (the lengths of the u[:, 0] intervals where it picks each slot, by bisection on its own answers)
  give the law p and the acceptance alpha* to 1e-12, over every tuple of positive probability of every instance
  family (ties, zeros, near-ties, point masses);
* on LM-like rows (loose drafts, close drafts sigma 1 and 0.5, rows with exact ties; float32 and float64; n = 1..8):
  10,240 rows at V = 4096 and 256 at V = 32k give the same tokens and slots as the route without the bounds
  (``BOUND`` off), and most close-draft rows are certified at the first attempt (the rates are printed with -s).
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.backend import native
from otlp.optimal import buckets as BK
from otlp.optimal import chains as C

from .instances import draw, lm_rows, slot_law

torch = pytest.importorskip("torch")

from otlp.optimal.sampler import verify  # noqa: E402

pytestmark = pytest.mark.skipif(native.library() is None, reason="needs otlp's C kernels (the bounds are theirs)")

TOL = 1e-12


def _answers(P: np.ndarray, Q: np.ndarray, W: np.ndarray, U: np.ndarray, n: int, sc: BK.Scheme):
    """``(tokens, index, status)``: the native route with the bounds on rows that need no normalising (every row
    tried: ``share`` 0), and the full sort's answer on the rows it leaves (status <= 0), as the sampler does."""
    one = np.ones(P.shape[0])
    got = native.bucket_rule(P, Q, one, one, W, U, n, steps=C.NEWTON_STEPS, bits=sc.bits, top=sc.top,
                             NB=sc.NB, below=sc.below, above=sc.above, LO=sc.LO, HI=sc.HI,
                             margin=BK.BOUND_MARGIN, share=0, attempts=BK.ATTEMPTS, bound=True)
    tokens, index, status = got
    left = status <= 0
    if left.any():
        pre = C.prefix(P[left], Q[left], n)
        accept, reject = C.tuple_rule(pre, W[left], window="auto")
        tokens[left], index[left] = C.sample(pre, accept, reject, W[left], U[left])
    return tokens, index, status


def _slot_probabilities(P, Q, W, n: int, sc: BK.Scheme) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """``([T, n + 1], status)``: the probability over u[:, 0] of each slot (n: reject) of the route on each tuple
    (u[:, 1] = 0.5), by bisection of its answers (the slot is non-decreasing in u[:, 0]; 2^-46), and the statuses
    seen."""
    T = W.shape[0]
    lo, hi = np.zeros((T, n)), np.ones((T, n))
    rep = lambda x: np.repeat(x, n, axis=0)  # noqa: E731 - row t, boundary j at t n + j
    Pr, Qr, Wr = rep(P), rep(Q), rep(W)
    j = np.tile(np.arange(n), T)
    seen = []
    for _ in range(46):
        mid = 0.5 * (lo + hi)
        U = np.stack([mid.reshape(-1), np.full(T * n, 0.5)], 1)
        _, index, status = _answers(Pr, Qr, Wr, U, n, sc)
        seen.append(status)
        le = (np.where(index >= 0, index, n) <= j).reshape(T, n)
        lo, hi = np.where(le, mid, lo), np.where(le, hi, mid)
    cdf = np.concatenate([np.zeros((T, 1)), lo, np.ones((T, 1))], 1)
    return np.diff(cdf, axis=1), np.concatenate(seen)


CASES = [("rational_ties", 4, 2), ("zeros", 6, 2), ("near_ties", 6, 2), ("identical_tokens", 6, 3),
         ("dirichlet", 8, 2), ("heavy", 5, 3), ("p_equals_q", 5, 2), ("rational_ties", 5, 3), ("near_ties", 5, 3),
         ("zeros", 5, 3), ("skewed_q", 6, 2), ("point_mass_q", 4, 2), ("dirichlet", 6, 4), ("near_ties", 4, 4)]


@pytest.mark.parametrize(("family", "V", "n"), CASES)
def test_law_and_acceptance_by_enumeration(family: str, V: int, n: int) -> None:
    """With one bucket per octave (so that buckets hold several tokens, and windows hold unsorted buckets), the
    route's own slot probabilities and the rule's residual give the law p and the acceptance alpha*, over every tuple
    of positive probability."""
    rng = np.random.default_rng([11, CASES.index((family, V, n))])
    p, q = draw(family, rng, V, n)
    omegas, probs = otlp.IID(q, n).support()
    T = omegas.shape[0]
    P, Q = np.tile(np.asarray(p, dtype=np.float64), (T, 1)), np.tile(np.asarray(q, dtype=np.float64), (T, 1))
    slots, _ = _slot_probabilities(P, Q, omegas.astype(np.int64), n, BK.scheme(0))
    law, acceptance, alpha = slot_law(P[:1], Q[:1], n, omegas, probs, slots)
    assert np.abs(law - p).sum() < TOL, f"law off by {np.abs(law - p).sum():.3g} in L1"
    assert abs(acceptance - alpha) < TOL, f"acceptance {acceptance} vs alpha* {alpha}"


def test_enumeration_rows_take_the_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The small instances above do reach the bounded window: over the instances of a few families (every row
    tried, as above), some rows certified at the first attempt with the bounds need a retry without them."""
    monkeypatch.setattr(BK, "FULL_SORT_SHARE", 0)
    gained = 0
    for family, V, n in CASES[:6]:
        rng = np.random.default_rng([12, CASES.index((family, V, n))])
        p, q = draw(family, rng, V, n)
        omegas, _ = otlp.IID(q, n).support()
        T = omegas.shape[0]
        P, Q = np.tile(np.asarray(p, dtype=np.float64), (T, 1)), np.tile(np.asarray(q, dtype=np.float64), (T, 1))
        W, U, sc, one = omegas.astype(np.int64), rng.random((T, 2)), BK.scheme(0), np.ones(T)
        with_bounds = BK._native_rows(P, Q, one, one, W, U, n, sc, bound=True)[2]
        without = BK._native_rows(P, Q, one, one, W, U, n, sc, bound=False)[2]
        gained += int(((with_bounds == 1) & (without != 1)).sum())
    assert gained > 0


def _agree(B: int, V: int, draft: str, n: int, dtype, seed: int, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001
    """The sampler with and without the bounds on the same rows and uniforms: same tokens and slots. Returns how
    many rows the bounds certified at once, and how many the route without them did."""
    p, q, drafts, u = lm_rows(B, V, seed, draft, n, dtype)
    monkeypatch.setattr(BK, "BOUND", True)
    got = verify(p, q, drafts, u)
    monkeypatch.setattr(BK, "BOUND", False)
    want = verify(p, q, drafts, u)
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    if n == 1:
        return 0, 0
    ph, qh = p.float().numpy() if dtype != torch.float64 else p.numpy(), q.float().numpy() if dtype != torch.float64 \
        else q.numpy()
    inv_p, inv_q = BK.inverse_sums(ph), BK.inverse_sums(qh)
    sc = BK.scheme(BK.bits_for(V))
    first = [int((BK._native_rows(ph, qh, inv_p, inv_q, drafts.numpy(), u.numpy(), n, sc, bound=b)[2] == 1).sum())
             for b in (True, False)]
    return first[0], first[1]


DRAFTS = ("loose", "1", "0.5", "ties")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("draft", DRAFTS)
def test_lm_rows_draw_what_the_route_without_bounds_draws(monkeypatch: pytest.MonkeyPatch, draft: str,
                                                          dtype: str) -> None:
    """8 x 160 rows at V = 4096 (n = 1..8) per draft and dtype: 10,240 rows in all, the same tokens and slots with
    and without the bounds; on close drafts most rows are certified at the first attempt with them."""
    B, V = 160, 4096
    at_once = without = rows = 0
    for n in range(1, 9):
        a, b = _agree(B, V, draft, n, getattr(torch, dtype), 100 * n + DRAFTS.index(draft), monkeypatch)
        at_once, without, rows = at_once + a, without + b, rows + (B if n > 1 else 0)
    print(f"V {V} draft {draft} {dtype}: certified at the first attempt {at_once}/{rows} with the bounds, "
          f"{without}/{rows} without")
    if draft in ("1", "0.5"):
        assert at_once >= 0.9 * rows and at_once > without


@pytest.mark.parametrize("draft", DRAFTS)
def test_lm_rows_at_32k(monkeypatch: pytest.MonkeyPatch, draft: str) -> None:
    """64 rows at V = 32k per draft (n = 2, 4, 8 and bfloat16 inputs among them): the same tokens and slots with
    and without the bounds."""
    for n, dtype in ((2, torch.float32), (4, torch.bfloat16), (8, torch.float64)):
        _agree(16 if n != 4 else 32, 32_000, draft, n, dtype, 7 + n, monkeypatch)
