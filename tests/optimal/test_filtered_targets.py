"""Targets filtered by top-k / top-p (p = 0 < q on most tokens; issue 41) on the native CPU route.

Engines filter the target before verification, so a row's p = 0 < q tokens (ratio +inf) fill its top bucket. The
route merges them into one run with a strict bound (``bucket_rule.c``'s ``inf_run``: psi falls strictly along the
run, so none of the rule's answers lies inside it; a draft inside it is below s, or the top draw, and the row then
rejects), and a draft inside splits it into its drafts (first, by id) and one run of the rest. Pinned to the full
sort of the reference (:func:`.chains.tuple_rule` and :func:`.chains.sample`) for the same uniforms:

* by enumeration at V <= 8 over families with p = 0 on most tokens (on all but one or two, with ties of q / p among
  the others, with q below rounding inside the p = 0 run): the route's slot probabilities (bisection on its own
  answers) give the law p and the acceptance alpha* to 1e-12, and every tuple's answer for random uniforms is the
  reference's, with rows certified through the p = 0 run (drafts inside it, and the top draw inside it);
* on LM rows with top-k (k = 1, 2, 50, 1000) and top-p (0.9) targets at V = 2k and 32k: the same tokens and slots as
  the reference, and nearly every row certified at the first attempt (where the top bucket used to be sorted whole).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import otlp
from otlp.backend import native
from otlp.optimal import buckets as BK
from otlp.optimal import chains as C

from .instances import lm_rows, slot_law
from .test_bounded_window import TOL, _slot_probabilities

pytestmark = pytest.mark.skipif(native.library() is None, reason="needs otlp's C kernels")


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum()


def _support(rng: np.random.Generator, V: int, k: int) -> np.ndarray:
    """p of mass on k random tokens only (dirichlet), 0 elsewhere."""
    p = np.zeros(V)
    p[rng.choice(V, size=k, replace=False)] = rng.dirichlet(np.ones(k))
    return p


def p_zero_most(rng, V):  # noqa: ANN001, ANN201
    return _support(rng, V, max(1, V // 3)), rng.dirichlet(np.ones(V))


def p_zero_but_one(rng, V):  # noqa: ANN001, ANN201
    return _support(rng, V, 1), rng.dirichlet(np.ones(V))


def p_zero_but_two(rng, V):  # noqa: ANN001, ANN201
    return _support(rng, V, 2), rng.dirichlet(np.full(V, 0.5))


def p_zero_ties(rng, V):  # noqa: ANN001, ANN201
    """p = q on the kept tokens (one tied ratio) and 0 elsewhere, q rational."""
    q = _normalise(rng.integers(1, 4, V).astype(float))
    keep = rng.choice(V, size=max(2, V // 2), replace=False)
    p = np.zeros(V)
    p[keep] = q[keep]
    return _normalise(p), q


def p_zero_tiny_q(rng, V):  # noqa: ANN001, ANN201
    """q below rounding (1e-20..1e-30) on some p = 0 tokens: psi along the run may repeat in float64."""
    p = _support(rng, V, 2)
    q = rng.dirichlet(np.ones(V))
    tiny = rng.random(V) < 0.5
    q[tiny & (p == 0)] = 10.0 ** rng.uniform(-30, -20, int((tiny & (p == 0)).sum()))
    return p, _normalise(q)


FAMILIES = {f.__name__: f for f in (p_zero_most, p_zero_but_one, p_zero_but_two, p_zero_ties, p_zero_tiny_q)}
CASES = [(family, V, n) for family in FAMILIES for V, n in ((6, 2), (5, 3), (4, 4), (8, 2))]


def _sane(q: np.ndarray, omegas: np.ndarray) -> np.ndarray:
    """``bool [T]``: the tuples whose drafts all have q >= 1e-12. On a tuple drafting a token of q below rounding
    (p_zero_tiny_q: q ~ 1e-20 to 1e-30, psi steps ~1e-40 to 1e-50) the reference's float chain may give a p = 0
    draw a weight of rounding (seen: 1e-7 on a tuple of probability 1e-40; the law is unmoved) that the exact rule,
    and the route, never give; the law tests above cover those tuples."""
    return (q[omegas] >= 1e-12).all(1)


def _route(P: np.ndarray, Q: np.ndarray, W: np.ndarray, U: np.ndarray, n: int, sc: BK.Scheme):
    one = np.ones(P.shape[0])
    return native.bucket_rule(P, Q, one, one, W, U, n, steps=C.NEWTON_STEPS, bits=sc.bits, top=sc.top,
                              NB=sc.NB, below=sc.below, above=sc.above, LO=sc.LO, HI=sc.HI,
                              margin=BK.BOUND_MARGIN, share=0, attempts=BK.ATTEMPTS, bound=True)


def _reference(P: np.ndarray, Q: np.ndarray, W: np.ndarray, U: np.ndarray, n: int):
    pre = C.prefix(P, Q, n)
    accept, reject = C.tuple_rule(pre, W, window="auto")
    return C.sample(pre, accept, reject, W, U)


@pytest.mark.parametrize(("family", "V", "n"), CASES)
def test_law_and_acceptance_by_enumeration(family: str, V: int, n: int) -> None:
    """The route's slot probabilities and the reference's residual give the law p and alpha* (1e-12), over every
    tuple of positive probability (one bucket per octave, as tests/optimal/test_bounded_window.py)."""
    rng = np.random.default_rng([41, CASES.index((family, V, n))])
    p, q = FAMILIES[family](rng, V)
    omegas, probs = otlp.IID(q, n).support()
    T = omegas.shape[0]
    P, Q = np.tile(p, (T, 1)), np.tile(q, (T, 1))
    slots, _ = _slot_probabilities(P, Q, omegas.astype(np.int64), n, BK.scheme(0))
    law, acceptance, alpha = slot_law(P[:1], Q[:1], n, omegas, probs, slots)
    assert np.abs(law - p).sum() < TOL, f"law off by {np.abs(law - p).sum():.3g} in L1"
    assert abs(acceptance - alpha) < TOL, f"acceptance {acceptance} vs alpha* {alpha}"


@pytest.mark.parametrize("bits", [0, 2])
def test_enumeration_rows_agree_with_the_reference(bits: int) -> None:
    """Every tuple of every case (drafts of q >= 1e-12: :func:`_sane`), 8 uniform pairs each: the route's certified
    answers are the reference's tokens and slots, and the rows it certifies at the first attempt include rows with a
    draft in the p = 0 run and rows whose top draw is in it (the row rejects)."""
    rng = np.random.default_rng([41, 1, bits])
    sc = BK.scheme(bits)
    inside = top_inside = 0
    for family, V, n in CASES:
        p, q = FAMILIES[family](rng, V)
        omegas, _ = otlp.IID(q, n).support()
        W = np.repeat(omegas.astype(np.int64), 8, axis=0)
        P, Q = np.tile(p, (W.shape[0], 1)), np.tile(q, (W.shape[0], 1))
        U = rng.random((W.shape[0], 2))
        tokens, index, status = _route(P, Q, W, U, n, sc)
        ref_tokens, ref_index = _reference(P, Q, W, U, n)
        ok = (status > 0) & _sane(q, W)
        np.testing.assert_array_equal(tokens[ok], ref_tokens[ok], err_msg=family)
        np.testing.assert_array_equal(index[ok], ref_index[ok], err_msg=family)
        dead = (P[np.arange(W.shape[0])[:, None], W] == 0).all(1)
        some = (P[np.arange(W.shape[0])[:, None], W] == 0).any(1)
        inside += int((some & ~dead & (status == 1)).sum())
        top_inside += int((dead & (status == 1)).sum())
    assert inside > 0 and top_inside > 0


TOPK = (1, 2, 50, 1000, 0.9)


@pytest.mark.parametrize("topk", TOPK)
@pytest.mark.parametrize(("V", "B", "dtype"), [(2048, 96, torch.float32), (2048, 64, torch.float64),
                                               (32_000, 16, torch.float32)])
def test_lm_rows_with_filtered_targets(topk: float, V: int, B: int, dtype: torch.dtype,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """LM rows (close drafts sigma 1 and 0.5, loose drafts; n = 2, 4, 8) with the target filtered: the sampler's
    route gives the tokens and slots of its full sort (the bucket route off) for the same uniforms, and at most 1
    row in 8 needs a second attempt or the full sort."""
    from otlp.verifiers import get

    verify = get("optimal").sample
    rows = first = 0
    for n, draft in ((2, "1"), (4, "loose"), (8, "1"), (4, "0.5")):
        p, q, w, u = lm_rows(B, V, 17 + n + TOPK.index(topk), draft, n, dtype, topk=topk)
        tokens, index = verify(p, q, w, None, uniforms=u)[:2]
        with monkeypatch.context() as m:
            m.setattr(BK, "takes", lambda B, V: False)
            ref_tokens, ref_index = verify(p, q, w, None, uniforms=u)[:2]
        np.testing.assert_array_equal(tokens.numpy(), ref_tokens.numpy())
        np.testing.assert_array_equal(index.numpy(), ref_index.numpy())
        ph, qh = p.numpy(), q.numpy()
        status = BK._native_rows(ph, qh, BK.inverse_sums(ph), BK.inverse_sums(qh), w.numpy(), u.numpy(), n,
                                 BK.scheme(BK.bits_for(V)))[2]
        rows, first = rows + B, first + int((status == 1).sum())
    assert first >= 7 * rows // 8, f"{first} of {rows} rows certified at the first attempt"


# -- the device route (otlp/optimal/device_buckets.py: inf_runs, the same strict bound and rejection) ------------------


@pytest.mark.parametrize(("family", "V", "n"), [c for c in CASES if c[1:] in ((6, 2), (5, 3))])
def test_device_route_same_slot_as_the_reference_for_every_tuple(family: str, V: int, n: int) -> None:
    """Every tuple (drafts of q >= 1e-12: :func:`_sane`), uniforms around the reference's slot ends and at random:
    the device route's certified
    rows (the least selection, no refinement, no fallback: the p = 0 run merged) give the reference's slot and
    token, and with its fallback every row does; some rows are certified through the p = 0 run."""
    from otlp.optimal import device_buckets as DB
    from otlp.optimal.sampler import verify

    rng = np.random.default_rng([41, 2, CASES.index((family, V, n))])
    p, q = FAMILIES[family](rng, V)
    omegas, _ = otlp.IID(q, n).support()
    T = omegas.shape[0]
    P = torch.from_numpy(p)[None, :].expand(T, -1).contiguous()
    Q = torch.from_numpy(q)[None, :].expand(T, -1).contiguous()
    w = torch.from_numpy(omegas).long()
    pre = C.prefix(P, Q, n)
    accept, reject = C.tuple_rule(pre, w, steps=C.NEWTON_STEPS)
    cw = torch.cat([accept, torch.where(pre.alpha < 1.0, reject, 0.0)[:, None]], 1).cumsum(1)  # [T, n + 1]
    points = torch.cat([cw[:, :2] - 1e-7, cw[:, :1] + 1e-7, torch.rand(T, 2, dtype=torch.float64,
                                                                        generator=torch.Generator().manual_seed(V))], 1)
    # (u0 from 1e-9: where every draw has p = 0 the reference's draws get rounding-level weights, ~1e-15, that a
    # u0 below them accepts; the route rejects those rows outright, the exact rule's answer)
    points = points.clamp(1e-9, 1.0 - 1e-12)
    least = torch.zeros(T, BK.scheme(0).NB, dtype=torch.bool)
    sane = torch.from_numpy(_sane(q, omegas))
    decided = 0
    for col in range(points.shape[1]):
        U = torch.stack([points[:, col], torch.rand(T, dtype=torch.float64)], 1)
        want = verify(P, Q, w, U, backend="torch")
        got = DB.decide(P, Q, w, U, bits=0)
        assert torch.equal(got.tokens[sane], want[0][sane]) and torch.equal(got.index[sane], want[1][sane]), col
        d = DB.decide(P, Q, w, U, bits=0, rounds=0, fallback=False, selection=least)
        ok = (d.rounds == 0) & sane
        assert torch.equal(d.tokens[ok], want[0][ok]) and torch.equal(d.index[ok], want[1][ok]), col
        decided += int(ok.sum())
    if family != "p_zero_tiny_q":
        assert decided > 0


@pytest.mark.parametrize("topk", TOPK)
@pytest.mark.parametrize("V", [2048, 32_000])
def test_device_route_on_lm_rows_with_filtered_targets(topk: float, V: int) -> None:
    """LM rows with filtered targets (float32; n = 2, 4, 8): the device route's tokens and slots are the CPU
    sampler's (``get("optimal").sample``), certified rows checked without the fallback, and at most 1 row in 8 that
    fits K takes the fallback (every row did before: the p = 0 run filled its top bucket, which spilled K)."""
    from otlp.optimal import device_buckets as DB
    from otlp.verifiers import get

    B = 16 if V > 4096 else 32
    rows = fallback = spilled = 0
    for n, draft in ((2, "1"), (4, "loose"), (8, "0.5")):
        p, q, w, u = lm_rows(B, V, 5 + n + TOPK.index(topk), draft, n, topk=topk)
        want = get("optimal").sample(p, q, w, None, uniforms=u)
        d = DB.decide(p, q, w, u, fallback=False)
        ok = d.rounds <= DB.ROUNDS
        assert torch.equal(d.tokens[ok], want[0][ok]) and torch.equal(d.index[ok], want[1][ok]), n
        # (a close draft's kept tokens may fill K at V = 2k, sigma 0.5, k = 1000: the close-draft spill, not the run)
        rows, fallback, spilled = rows + B, fallback + int((~ok & ~d.spilled).sum()), spilled + int(d.spilled.sum())
    assert fallback <= rows // 8, f"{fallback} of {rows} rows took the fallback without spilling"
    assert spilled <= rows // 3
