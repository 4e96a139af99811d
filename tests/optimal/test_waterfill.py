"""The water-filling class chain (otlp.optimal.waterfill): a closed-form optimal rule for a whole group.

Independent routes: the law and acceptance of the rule by enumeration over V^n with the class chain forced on
every group; the vectorised O(n) per-tuple formula against the slot-by-slot definition (a plain loop over the
slots, written here); and the two places the solver uses it on its own: groups whose leaves would need too many
subset terms (n >= 3) and blocks whose Newton stops short of machine precision (psi flat to 1e-13).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import otlp
import otlp.optimal.transport as transport_module
from otlp.optimal import OptimalTransport
from otlp.optimal.solve import prepare

from .instances import FAMILIES, draw, small_instances
from .test_exact_enumeration import TOL, check_exact, enumerate_rule


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group of two or more tokens becomes a class chain on the blocks route (prepare's class_chains=True: the
    numpy class chain of each group, :func:`otlp.optimal.waterfill.class_chain`); the tests then ask for
    method="blocks", since method="auto" up to V = 256 builds the class chains by the scalar path instead."""
    monkeypatch.setattr(transport_module, "prepare", functools.partial(prepare, class_chains=True))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_forced_class_chains_are_exact(forced: None, n: int) -> None:
    """Law = p, acceptance = alpha* (brute force) on every family, V <= 8, 12 instances each."""
    seen = 0
    for _family, p, q in small_instances(np.random.default_rng([40, n]), n, per_family=12):
        ot = check_exact(p, q, n, method="blocks")
        seen += int(ot._inst.node_class.any())
    assert seen > 40


def test_forced_class_chains_on_larger_groups(forced: None) -> None:
    """V = 12..60 (n = 2) and 12..25 (n = 3), every family: law = p and acceptance = alpha* by enumeration."""
    rng = np.random.default_rng(41)
    for family in sorted(FAMILIES):
        for trial in range(4):
            n = 3 if trial % 2 else 2
            V = int(rng.integers(12, 26 if n == 3 else 61))
            p, q = draw(family, rng, V, n)
            ot = OptimalTransport.from_arrays(p, q, n, method="blocks")
            law, acceptance = enumerate_rule(ot, otlp.IID(q, n))
            where = f"{family} trial {trial} V={V} n={n}"
            assert ot.success and np.abs(law - p).sum() < TOL and abs(acceptance - ot.alpha) < TOL, where


def _slot_by_slot(ot: OptimalTransport, omega: np.ndarray) -> tuple[np.ndarray, float]:
    """The class chain's definition, slot after slot from the top (module docstring of waterfill)."""
    inst = ot._inst
    group = inst.block_of_position[inst.position[omega].max()]
    tokens = inst.cuts.order[inst.cuts.records[group] : inst.cuts.records[group + 1]]
    rank = dict(zip(tokens.tolist(), inst.class_rank[tokens].tolist(), strict=True))
    fire = np.zeros(tokens.size)
    fire[inst.class_rank[tokens]] = inst.fire[tokens]  # a_j by rank
    draws = [rank[x] for x in omega.tolist() if x in rank]
    out = np.zeros(ot.V)
    alive = 1.0
    by_rank = {r: x for x, r in rank.items()}
    for j in range(tokens.size - 1, 0, -1):
        eligible = [d for d in draws if d >= j]
        if not eligible:
            continue
        fired = 1.0 - (1.0 - fire[j]) ** len(eligible)
        for d in eligible:
            out[by_rank[d]] += alive * fired / len(eligible)
        alive *= 1.0 - fired
    beta = inst.node_beta[group]
    for d in draws:
        out[by_rank[d]] += alive * beta / len(draws)
    return out, alive * (1.0 - beta)


@pytest.mark.parametrize("route", ["blocks, forced"])  # the class-chains route: tests/optimal/test_chains.py
def test_vectorised_rule_matches_the_slot_by_slot_definition(monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    """The class chain's rule, evaluated (numpy slices, and the scalar path's own single slice) against its
    definition slot by slot: per-group class chains on the blocks route, whole-instance ones on the scalar path."""
    if route != "scalar":
        monkeypatch.setattr(transport_module, "prepare", functools.partial(prepare, class_chains=True))
    rng = np.random.default_rng(42)
    for _ in range(30):
        V, n = int(rng.integers(3, 30)), int(rng.integers(2, 6))
        p, q = FAMILIES["heavy"](rng, V)
        ot = OptimalTransport.from_arrays(p, q, n, method="blocks" if route != "scalar" else "auto")
        assert ot.method == ("blocks" if route != "scalar" else "class_chains")
        omegas = np.stack([rng.choice(V, size=n, p=q) for _ in range(40)])
        slices = ot.slices(omegas)
        _, reject = ot.rule(omegas)
        for m, omega in enumerate(omegas):
            group = ot._inst.block_of_position[ot._inst.position[omega].max()]
            if not ot._inst.node_class[group]:
                continue
            law, rej = _slot_by_slot(ot, omega)
            np.testing.assert_allclose(slices[m], law + rej * ot.residual, atol=1e-14)
            np.testing.assert_allclose(ot.slice(omega), law + rej * ot.residual, atol=1e-14)
            assert abs(reject[m] - rej) <= 1e-14


def test_near_tie_blocks_that_newton_cannot_finish_take_the_class_chain() -> None:
    """psi flat to 1e-13 across blocks of tens of tokens: Newton stops short of 1e-12 (weights beyond float64);
    the group is re-solved as a class chain and the rule is exact by enumeration."""
    rng = np.random.default_rng(123)
    rescued = 0
    for _ in range(30):
        V = int(rng.integers(20, 61))
        p, q = FAMILIES["near_ties"](rng, V, 2)
        ot = OptimalTransport.from_arrays(p, q, 2, method="blocks")
        law, acceptance = enumerate_rule(ot, otlp.IID(q, 2))
        assert ot.success and np.abs(law - p).sum() < TOL and abs(acceptance - ot.alpha) < TOL
        rescued += int(ot._inst.node_class.any())
    assert rescued >= 3  # without the class chain these instances end with ||R - p||_1 of 1e-11 .. 1e-7


def test_decode_distribution_at_n4_is_not_refused() -> None:
    """The embedded n-gram pair at a real context (V = 2000, n = 4): a 1975-token group whose peel leaves a
    1637-token leaf (C(1637, 4) = 3e11 subset terms) is solved as a class chain; rows meet p to 1e-12."""
    from otlp.decode.ngram import embedded_models

    models = embedded_models()
    rng = np.random.default_rng(43)
    worst, classes = 0.0, 0
    for _ in range(6):
        context = rng.integers(0, models.target.vocab_size, size=(1, models.target.context_size))
        p = models.target.probabilities(context)[0]
        q = models.draft.probabilities(context[:, -models.draft.context_size :])[0]
        ot = OptimalTransport.from_arrays(p, q, 4, method="blocks")
        assert ot.success
        worst = max(worst, ot.row_error)
        classes += int(ot._inst.node_class.any())
        accept, reject = ot.rule(rng.choice(p.size, size=(500, 4), p=q))
        np.testing.assert_allclose(accept.sum(1) + reject, 1.0, atol=1e-12)
    assert worst <= 1e-12


@pytest.mark.parametrize("n", [2, 3, 4])
def test_slot_mass_recovers_a_known_root(n: int) -> None:
    """slot_mass solves (H + y)^n - H^n - r y = gap on [0, L]: build gap from a chosen root y* (with r below the
    slope n H^(n-1) at 0, y* is the only root in [0, L]) over 12 decades of scale; n = 2 is the closed form, n >= 3
    the Newton from an upper bound."""
    from otlp.optimal.chains import NEWTON_STEPS, power_gap, slot_mass

    rng = np.random.default_rng([41, n])
    size = 4000
    H = rng.random(size) * 10.0 ** rng.integers(-12, 1, size)
    y_star = rng.random(size) * 10.0 ** rng.integers(-12, 1, size)
    L = y_star * (1.0 + rng.random(size))  # the root lies inside [0, L]
    r = rng.random(size) * n * H ** (n - 1)  # g'(0) = n H^(n-1) - r >= 0: g < 0 on (0, y*), > 0 after
    gap = power_gap(H, y_star, n) - r * y_star
    for steps in (None, NEWTON_STEPS):  # the numpy default and the device route's fixed count
        y = slot_mass(H, L, r, gap, n, steps)
        assert np.all((y >= 0) & (y <= L))
        assert np.max(np.abs(y - y_star) / y_star) < 1e-12
