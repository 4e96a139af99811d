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


def _route(P: np.ndarray, Q: np.ndarray, W: np.ndarray, U: np.ndarray, n: int, sc: BK.Scheme):
    one = np.ones(P.shape[0])
    return native.bucket_rule(P, Q, one, one, W, U, n, steps=C.NEWTON_STEPS, bits=sc.bits, top=BK._top(sc.bits),
                              NB=sc.NB, below=BK._BELOW, above=2.0**BK.OCTAVES, LO=sc.LO, HI=sc.HI,
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
    """Every tuple of every case, 8 uniform pairs each: the route's certified answers are the reference's tokens and
    slots, and the rows it certifies at the first attempt include rows with a draft in the p = 0 run and rows whose
    top draw is in it (the row rejects)."""
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
        ok = status > 0
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
