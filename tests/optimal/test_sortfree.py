"""The certified cell rule (otlp/optimal/sortfree.py): the optimal rule's slot from bounds on the chain's hazard.

* Exactness by enumeration at V <= 8 with cells of 1 and 2 positions (so that the served groups, a few positions
  long here, hold bounded cells between s's and the draws'; one position's bound is not exact either): the
  sampler's output is a step function of u[:, 0] (the slot) and u[:, 1] (the residual token), so its slot
  probabilities are the lengths of the u[:, 0] intervals where it picks each slot (found by bisection on its own
  answers); with them the law is p and the acceptance alpha* to 1e-12 (with the fallback), and wherever the
  certificate alone decides (no fallback), it decides the exact rule's slot, also within 1e-7 of every slot's end.
* Soundness of the cell bound (design note sortfree-rule.md §3): every bounded cell's exact hazard lies in its
  interval, on LM rows and on the instance families.
* The same tokens as ``get("optimal").sample`` (the CPU route) and as its device route (``backend="torch"``) for the
  same uniforms on LM-like rows at V = 32k: loose and close drafts (sigma 0.5 and 1), float32 / bfloat16 / float64,
  and rows with exact ties; 288 rows at V = 32k and 96 rows against the device route at V = 2k (counts in
  ``ROWS_32K``); the refinement / fallback rates are printed (``pytest -s``).
* No host synchronisation on the route (the aten ops recorded).
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.optimal import chains as C
from otlp.optimal import sortfree as SF

from .instances import draw, lm_rows, slot_law

torch = pytest.importorskip("torch")

from otlp.verifiers import get  # noqa: E402

from .test_sampler_device import SYNC_OPS, _Recorder  # noqa: E402

TOL = 1e-12


def _rows(p: np.ndarray, q: np.ndarray, omegas: np.ndarray):  # noqa: ANN202
    """One instance as a batch of its tuples: ``P, Q float64 [T, V]`` and drafts ``[T, n]``."""
    T = omegas.shape[0]
    P = torch.from_numpy(np.asarray(p, dtype=np.float64))[None, :].expand(T, -1).contiguous()
    Q = torch.from_numpy(np.asarray(q, dtype=np.float64))[None, :].expand(T, -1).contiguous()
    return P, Q, torch.from_numpy(omegas).long()


def _slot(d: SF.Decision, n: int):  # noqa: ANN001, ANN202
    return torch.where(d.index >= 0, d.index, n)


def _slot_probabilities(P, Q, w, cell: int, rounds: int) -> np.ndarray:  # noqa: ANN001
    """``[T, n + 1]`` the probability over u[:, 0] of each slot (n: reject) of the sampler on each tuple: the slot is
    non-decreasing in u[:, 0], so P(slot <= j) is where its answers cross j, found by bisection (2^-46)."""
    T, n = w.shape
    lo = torch.zeros(T, n, dtype=torch.float64)
    hi = torch.ones(T, n, dtype=torch.float64)
    rep = lambda x: x.repeat_interleave(n, 0)  # noqa: E731 - row t, boundary j at t n + j
    Pr, Qr, wr = rep(P), rep(Q), rep(w)
    j = torch.arange(n).repeat(T)
    for _ in range(46):
        mid = 0.5 * (lo + hi)
        u = torch.stack([mid.reshape(-1), torch.full((T * n,), 0.5, dtype=torch.float64)], 1)
        d = SF.decide(Pr, Qr, wr, u, cell=cell, rounds=rounds)
        le = (_slot(d, n) <= j).reshape(T, n)
        lo, hi = torch.where(le, mid, lo), torch.where(le, hi, mid)
    cdf = torch.cat([torch.zeros(T, 1, dtype=torch.float64), lo, torch.ones(T, 1, dtype=torch.float64)], 1)
    return cdf.diff(dim=1).numpy()


CASES = [("rational_ties", 4, 2), ("zeros", 6, 2), ("near_ties", 6, 2), ("identical_tokens", 6, 3),
         ("dirichlet", 8, 2), ("heavy", 5, 3), ("p_equals_q", 5, 2), ("rational_ties", 5, 3), ("near_ties", 5, 3),
         ("zeros", 5, 3), ("skewed_q", 6, 2), ("point_mass_q", 4, 2)]


@pytest.mark.parametrize(("family", "V", "n"), CASES)
@pytest.mark.parametrize("cell", [1, 2])
def test_law_and_acceptance_by_enumeration(family: str, V: int, n: int, cell: int) -> None:
    """The sampler's own slot probabilities (by bisection of its answers in u[:, 0], with the fallback, no
    refinement so that the bounded cells decide) and the rule's residual give the law p and the acceptance alpha*,
    over every tuple of positive probability."""
    rng = np.random.default_rng([CASES.index((family, V, n)), cell])
    p, q = draw(family, rng, V, n)
    omegas, probs = otlp.IID(q, n).support()
    P, Q, w = _rows(p, q, omegas)
    slots = _slot_probabilities(P, Q, w, cell, rounds=0)  # [T, n + 1]
    law, acceptance, alpha = slot_law(P[:1].numpy(), Q[:1].numpy(), n, omegas, probs, slots)
    assert np.abs(law - p).sum() < TOL, f"law off by {np.abs(law - p).sum():.3g} in L1"
    assert abs(acceptance - alpha) < TOL, f"acceptance {acceptance} vs alpha* {alpha}"


@pytest.mark.parametrize(("family", "V", "n"), CASES)
def test_certified_slots_are_the_exact_rules(family: str, V: int, n: int) -> None:
    """Without the fallback, wherever the certificate decides (cells of 1 and 2 positions, 0 and 1 refinement
    rounds) it picks the exact rule's slot (the chain to convergence, numpy), at random u[:, 0] and within 1e-7
    either side of every slot's end."""
    rng = np.random.default_rng([7, CASES.index((family, V, n))])
    p, q = draw(family, rng, V, n)
    omegas, _ = otlp.IID(q, n).support()
    P, Q, w = _rows(p, q, omegas)
    pre = C.prefix(P.numpy(), Q.numpy(), n)
    accept, reject = C.tuple_rule(pre, omegas, steps=None)
    weights = np.concatenate([accept, np.where(pre.alpha < 1.0, reject, 0.0)[:, None]], 1)  # [T, n + 1]
    cw = np.cumsum(weights, 1)
    points = np.concatenate([cw - 1e-7, cw + 1e-7, rng.random((len(w), 8))], 1).clip(0.0, 1.0 - 1e-12)
    for rounds, cell in ((0, 1), (1, 1), (0, 2)):
        for col in range(points.shape[1]):
            u0 = points[:, col]
            exact = np.minimum((cw <= (u0 * cw[:, -1])[:, None]).sum(1), n)
            U = torch.from_numpy(np.stack([u0, np.full_like(u0, 0.5)], 1))
            d = SF.decide(P, Q, w, U, cell=cell, rounds=rounds, fallback=False)
            certified = (d.rounds <= rounds).numpy()
            got = _slot(d, n).numpy()
            assert (got[certified] == exact[certified]).all(), (rounds, col)


#: rows per (draft, dtype, n) at V = 32k: 4 drafts (loose, sigma 1, sigma 0.5, ties) x 3 dtypes x 3 n x 8 = 288 rows
ROWS_32K = 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("draft", ["loose", "1", "0.5", "ties"])
def test_same_tokens_as_the_optimal_sampler_at_32k(draft: str, dtype) -> None:  # noqa: ANN001
    """Token for token (and the accepted slot) the public sampler's output for the same uniforms, n = 2, 4, 8 (the
    rows the certificate leaves take the fallback, here called on those rows only)."""
    rates = []
    for n in (2, 4, 8):
        p, q, drafts, u = lm_rows(ROWS_32K, 32_000, 100 * n + len(draft), draft, 8, dtype)
        drafts = drafts[:, :n]
        want = get("optimal").sample(p, q, drafts, None, uniforms=u)
        from otlp.optimal.sampler import _normalised

        P, Q = _normalised(p), _normalised(q)
        d = SF.decide(P, Q, drafts, u, fallback=False)
        tokens, index = d.tokens.clone(), d.index.clone()
        left = d.rounds > SF.ROUNDS
        if left.any():  # (the test may synchronise: the fallback on the rows that need it, not on all)
            rest = SF.decide(P[left], Q[left], drafts[left], u[left])
            assert (rest.rounds == SF.ROUNDS + 1).all()
            tokens[left], index[left] = rest.tokens, rest.index
        assert torch.equal(tokens, want[0]) and torch.equal(index, want[1]), (n, draft, dtype)
        rates.append(torch.bincount(d.rounds, minlength=SF.ROUNDS + 2).tolist())
    print(f"\n{draft} {dtype}: rows certified at round 0 .. {SF.ROUNDS}, fallback (n = 2, 4, 8): {rates}")


@pytest.mark.parametrize("draft", ["loose", "1", "0.5", "ties"])
def test_same_tokens_as_the_device_route(draft: str) -> None:
    """``verify`` (normalisation included) equals the device route (``backend="torch"``), n = 2, 4, 8."""
    from otlp.optimal.sampler import verify

    for n in (2, 4, 8):
        p, q, drafts, u = lm_rows(8, 2000, n, draft, 8)
        want = verify(p, q, drafts[:, :n], u, backend="torch")
        got = SF.verify(p, q, drafts[:, :n], u)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (n, draft)


def _bounded_cells_hold_their_exact_hazards(p, q, w, cell: int) -> int:  # noqa: ANN001
    from otlp.optimal.sampler import _normalised

    pre = C.prefix(_normalised(p), _normalised(q), w.shape[1])
    g = SF._Group(pre, w, cell)
    lo, hi, exact = g.cell_bounds()
    all_cells = torch.arange(g.NC)[None, :].expand(p.shape[0], -1)
    true = g._cell_hazards(all_cells).sum(-1)  # [B, NC] (the rule needs normalised rows: psi's two forms agree)
    bounded = ~exact & (hi > 0)
    assert (true[bounded] >= lo[bounded]).all() and (true[bounded] <= hi[bounded]).all()
    return int(bounded.sum())


def test_cell_bounds_hold_on_lm_rows() -> None:
    """Every bounded cell's exact hazard (two roots a position) lies in its interval (roots per cell only)."""
    count = 0
    for draft in ("loose", "1", "0.5", "ties"):
        for n in (2, 4, 8):
            p, q, drafts, _ = lm_rows(4, 4000, n, draft, 8, torch.float64)
            count += _bounded_cells_hold_their_exact_hazards(p, q, drafts[:, :n], 16)
    assert count > 1000  # the test reached bounded cells


def test_cell_bounds_hold_on_the_instance_families() -> None:
    rng = np.random.default_rng(11)
    for family, V, n in CASES:
        p, q = draw(family, rng, V, n)
        omegas, _ = otlp.IID(q, n).support()
        _bounded_cells_hold_their_exact_hazards(*_rows(p, q, omegas), 2)


@pytest.mark.parametrize("fallback_rows", [None, 2])
def test_never_synchronises(fallback_rows: int | None) -> None:
    p, q, drafts, u = lm_rows(6, 500, 3, "1", 8)
    with _Recorder() as rec:
        SF.verify(p, q, drafts[:, :4], u, fallback_rows=fallback_rows)
    assert not rec.ops & set(SYNC_OPS), sorted(rec.ops & set(SYNC_OPS))


def test_fallback_capacity_and_rounds_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the certificate made to fail (a margin no decision clears), every row takes the fallback: all of them on
    the full route (the exact tokens), F of them when gathered (the rest counted as overflow)."""
    p, q, drafts, u = lm_rows(6, 500, 4, "0.5", 8, torch.float64)
    from otlp.optimal.sampler import _normalised, verify

    P, Q, w = _normalised(p), _normalised(q), drafts[:, :4]
    want = verify(p, q, w, u, backend="torch")
    monkeypatch.setattr(SF, "MARGIN", 2.0)
    d = SF.decide(P, Q, w, u)
    assert (d.rounds == SF.ROUNDS + 1).all() and int(d.overflow) == 0
    assert torch.equal(d.tokens, want[0]) and torch.equal(d.index, want[1])
    d = SF.decide(P, Q, w, u, fallback_rows=2)
    assert int(d.overflow) == 4
