"""rrs_wor's exact acceptance over rejected histories (otlp.verifiers.rrs_wor_acceptance) against independent routes:
enumeration of every drafted tuple (``conditional``), the rule run in exact rationals, and at V = 2048 a seeded
Monte Carlo of the torch sampler."""

from __future__ import annotations

import io
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from otlp.core.errors import InputError
from otlp.verifiers import get
from otlp.verifiers.exact import verifier_acceptance as enumerated
from otlp.verifiers.rrs_wor_acceptance import rejection_interval
from tests.verifiers.instances import KINDS, make_pair

RRS_WOR = get("rrs_wor")
#: the enumeration's own rounding (its acceptance may read 1 + 2e-16)
SLACK = 1e-14


def _heavy(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Heavy-tailed LM-like rows: p = softmax(2.5 z), q = softmax(log p + N(0, 1))."""
    lp = 2.5 * rng.standard_normal(V)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    lq = np.log(p) + rng.standard_normal(V)
    q = np.exp(lq - lq.max())
    return p, q / q.sum()


def _cases() -> list[tuple[np.ndarray, np.ndarray, int]]:
    rng = np.random.default_rng(45)
    out = []
    for V in (2, 3, 5, 8):
        for kind in (*KINDS, "heavy"):
            p, q = _heavy(rng, V) if kind == "heavy" else make_pair(rng, V, kind)
            for n in range(1, min(V, 4) + 1):
                if np.count_nonzero(q) >= n:
                    out.append((p, q, n))
    return out


CASES = _cases()


def test_the_interval_is_the_enumerated_acceptance() -> None:
    """V <= 8, n <= 4 on every kind (ties, zeros in p, q and both, point masses, q == p, heavy tails): nothing is
    pruned (or only groups whose bounds agree to 1e-12), so the interval is exact to its rounding bound, and holds the
    enumeration's value."""
    assert len(CASES) > 80
    for p, q, n in CASES:
        exact = enumerated(RRS_WOR, p, RRS_WOR.make_draft(q, n))
        iv = rejection_interval(p, q, n)
        assert iv.pruned <= 1e-12 and iv.width <= 1e-12 and not iv.stopped
        assert iv.lo - SLACK <= exact <= iv.hi + SLACK, (p, q, n)
        assert abs(RRS_WOR.acceptance_interval(p, RRS_WOR.make_draft(q, n)).value - exact) <= 1e-12


def test_pruned_intervals_still_hold_the_exact_value() -> None:
    """Node limits of 1 to 8 stop the refinement early, with groups of histories bounded, not summed: the interval
    is wider and still holds the enumerated value; so does a coarse target width."""
    widened = 0
    for p, q, n in CASES:
        if n < 3:
            continue
        exact = enumerated(RRS_WOR, p, RRS_WOR.make_draft(q, n))
        for nodes in (1, 2, 4, 8):
            iv = rejection_interval(p, q, n, max_nodes=nodes)
            assert iv.lo - SLACK <= exact <= iv.hi + SLACK, (p, q, n, nodes)
            assert iv.stopped in ("", "node limit") and iv.nodes <= nodes + 1
            widened += iv.pruned > 0
        coarse = rejection_interval(p, q, n, width=0.05)
        assert coarse.lo - SLACK <= exact <= coarse.hi + SLACK and coarse.width <= 0.05
    assert widened > 10  # the bounds were exercised


def _rational_rejection(p: list[Fraction], q: list[Fraction], n: int) -> Fraction:
    """P(all n rejected) by the rule itself (SpecHub Alg. 1) in exact rationals: recursion over the drafts."""

    def rec(p_cur: list[Fraction], q_cur: list[Fraction], k: int) -> Fraction:
        total = Fraction(0)
        residual = [max(a - b, Fraction(0)) for a, b in zip(p_cur, q_cur, strict=True)]
        mass = sum(residual, Fraction(0))
        for x, qx in enumerate(q_cur):
            reject = max(qx - p_cur[x], Fraction(0))  # drawn and rejected
            if reject == 0:
                continue
            if k == n:
                total += reject
                continue
            rest = [Fraction(0) if y == x else v for y, v in enumerate(q_cur)]
            z = sum(rest, Fraction(0))
            total += reject * rec([r / mass for r in residual], [v / z for v in rest], k + 1)
        return total

    return rec(p, q, 1)


def test_against_exact_rationals() -> None:
    rng = np.random.default_rng(7)
    for V, n in ((4, 3), (5, 3), (5, 4), (6, 2)):
        p = [Fraction(int(v), 1) for v in rng.integers(0, 6, V)]
        q = [Fraction(int(v), 1) for v in rng.integers(1, 6, V)]
        p[0] += 1
        p = [v / sum(p) for v in p]
        q = [v / sum(q) for v in q]
        exact = 1 - _rational_rejection(p, q, n)
        iv = rejection_interval(np.array(p, dtype=float), np.array(q, dtype=float), n)
        # the float inputs differ from the rationals by <= 1e-16 each: a few 1e-16 more than the rounding bound
        assert iv.lo - 1e-14 <= float(exact) <= iv.hi + 1e-14 and iv.width <= 1e-12


def test_vocabulary_scale_against_a_seeded_monte_carlo() -> None:
    """V = 2048, heavy-tailed rows, n = 2 and 3: the interval (width <= 1e-9) against 8,000 rows of the torch
    sampler; |mean - value| <= 5.3 standard errors (false-failure rate 1.2e-7 per case, normal approximation)."""
    rng = np.random.default_rng(11)
    p, q = _heavy(rng, 2048)
    gen = torch.Generator().manual_seed(3)
    for n in (2, 3):
        iv = rejection_interval(p, q, n, width=1e-9)
        assert iv.width <= 1e-9 and not iv.stopped
        draft = RRS_WOR.make_draft(q, n)
        rows = 8_000
        drafts = torch.as_tensor(draft.sample(rows, np.random.default_rng(n)))
        pt, qt = torch.as_tensor(p).expand(rows, -1), torch.as_tensor(q).expand(rows, -1)
        tokens, index = RRS_WOR.sample(pt, qt, drafts, gen)
        hit = (drafts == tokens[:, None]).any(1).double()
        assert torch.equal(hit, (index >= 0).double())  # acceptance = verifier acceptance
        mean = float(hit.mean())
        se = math.sqrt(iv.value * (1 - iv.value) / rows)
        assert abs(mean - iv.value) <= 5.3 * se, (n, mean, iv)


def test_progress_line_and_bad_input() -> None:
    from otlp.cli.util import Progress

    rng = np.random.default_rng(2)
    p, q = _heavy(rng, 64)
    stream = io.StringIO()
    with Progress("certify", stream=stream, force=True) as bar:
        rejection_interval(p, q, 3, progress=bar)
    assert "rrs_wor exact acceptance: width" in stream.getvalue()
    for kwargs, message in (({"width": 0.0}, "width must be"), ({"time_limit": -1.0}, "time_limit must be"),
                            ({"max_nodes": 0}, "max_nodes"), ({"width": float("nan")}, "width must be")):
        with pytest.raises(InputError, match=message):
            rejection_interval(p, q, 3, **kwargs)
    with pytest.raises(InputError, match="n must be"):
        rejection_interval(p, q, 0)
    with pytest.raises(InputError, match="at least n = 3 tokens with q > 0"):
        rejection_interval(p, np.eye(64)[0], 3)
    with pytest.raises(InputError, match="length"):
        rejection_interval(p, q[:10] / q[:10].sum(), 2)
    with pytest.raises(InputError, match="expects a 'without_replacement'"):
        RRS_WOR.acceptance_interval(p, get("rrs").make_draft(q, 2))


def test_deeper_histories_bounded_by_groups_hold_the_exact_value() -> None:
    """n = 5, 6 at V = 7 (histories of 3-4 rejections, where the later steps are bounded over reachable b and z
    ranges): every early-stopped interval holds the enumerated value, and the default call narrows to 1e-9."""
    rng = np.random.default_rng(12)
    for n, kind in ((5, "dirichlet"), (6, "dirichlet"), (5, "sparse"), (6, "heavy"), (5, "ties")):
        p, q = _heavy(rng, 7) if kind == "heavy" else make_pair(rng, 7, kind)
        q = np.maximum(q, 0.01) / np.maximum(q, 0.01).sum()  # all 7 tokens draftable
        exact = enumerated(RRS_WOR, p, RRS_WOR.make_draft(q, n))
        for nodes in (1, 3, 10, 30):
            iv = rejection_interval(p, q, n, max_nodes=nodes)
            assert iv.lo - SLACK <= exact <= iv.hi + SLACK, (n, kind, nodes)
        iv = rejection_interval(p, q, n)
        assert iv.lo - SLACK <= exact <= iv.hi + SLACK and iv.width <= 1e-9


def test_the_verifiers_acceptance_is_the_closed_form_up_to_two_drafts_and_the_enumeration_above() -> None:
    """``get("rrs_wor").verifier_acceptance`` (what sweeps and certify read) takes the closed form at n <= 2 and the
    enumeration at n >= 3: either way the enumeration's value, on every instance kind."""
    from otlp.core.drafts import WithoutReplacement

    rng = np.random.default_rng(7)
    for V in (3, 6):
        for kind in (*KINDS, "heavy"):
            p, q = _heavy(rng, V) if kind == "heavy" else make_pair(rng, V, kind)
            for n in (1, 2, 3):
                if n > int((q > 0).sum()):  # (the scheme needs n tokens of q > 0)
                    continue
                draft = WithoutReplacement(q, n)
                assert abs(RRS_WOR.verifier_acceptance(p, draft) - enumerated(RRS_WOR, p, draft)) <= SLACK, (kind, n)
                assert RRS_WOR.acceptance(p, draft) == RRS_WOR.verifier_acceptance(p, draft)
