"""otlp.theorems.block_programs (the scipy route to GR Section 6's block programs) against tuple enumeration:
the App. K coefficients are tuple masses, and the softmax rule with the solved weights meets the block targets of the
production class chains (``OptimalTransport.blocks``) row by row."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import otlp
from otlp.optimal import OptimalTransport
from otlp.theorems.block_programs import block_log_weights, block_program, block_terms, subset_coefficients
from otlp.theorems.instances import KINDS, pairs


@pytest.mark.parametrize("n", [1, 2, 3])
def test_subset_coefficients_are_tuple_masses(n: int) -> None:
    """c_U = the q^n-mass of the tuples over (null tokens + block) whose block part is exactly U."""
    rng = np.random.default_rng([7, n])
    for _ in range(20):
        k, nulls = int(rng.integers(1, 5)), int(rng.integers(0, 3))
        q = rng.dirichlet(np.full(k + nulls, 0.7)) * (10.0 ** -rng.integers(0, 4))  # block mass scaled down
        q_block, null_mass = q[:k], float(q[k:].sum())
        mass: dict[tuple, float] = {}
        for omega in itertools.product(range(k + nulls), repeat=n):
            U = tuple(sorted({i for i in omega if i < k}))
            if U:
                mass[U] = mass.get(U, 0.0) + float(np.prod(q[list(omega)]))
        incidence, c = block_terms(q_block, null_mass, n)
        for row, coef in zip(incidence, c, strict=True):
            U = tuple(np.flatnonzero(row).tolist())
            assert abs(coef - mass.get(U, 0.0)) <= 1e-15 * max(mass.get(U, 0.0), 1e-300) + 1e-300
        assert len(c) == len(mass)
        assert np.array_equal(subset_coefficients(q_block, null_mass, n, np.array([[0]])), c[:1])


def _enumerated_rows(p: np.ndarray, q: np.ndarray, n: int, log_w: np.ndarray, block: np.ndarray,
                     inner: np.ndarray) -> np.ndarray:
    """R_i of the block softmax rule by enumeration over V^n: the block of the tuple's highest block index serves it,
    outer w_i / w(U), inner w_i / (1 + w(U)), U = the tuple's tokens in that block."""
    V = p.size
    rows = np.zeros(V)
    for omega in itertools.product(range(V), repeat=n):
        prob = float(np.prod(q[list(omega)]))
        if prob == 0.0:
            continue
        top = max(block[i] for i in omega)
        U = np.array(sorted({i for i in omega if block[i] == top}))
        a = log_w[U]
        peak = max(float(a.max()), 0.0)
        w = np.exp(a - peak)
        rows[U] += prob * w / (w.sum() + (np.exp(-peak) if inner[top] else 0.0))
    return rows


def test_solved_weights_meet_the_class_chains_block_targets() -> None:
    """Every kind of the checks' generator, V <= 6, n <= 3: same blocks as the production class chains, and the
    enumerated rows of the softmax rule meet its targets (p on inner blocks, the GR Thm 6.2 vertex on outer ones)
    to 1e-12 per block (n = 1 outer blocks of ties excepted: there every alpha gives the same rows)."""
    rng = np.random.default_rng(11)
    checked = 0
    for inst in pairs(rng, 16 * len(KINDS), V_range=(2, 6), n_range=(1, 3)):
        p, q, n = inst.p, inst.q, inst.n
        log_w, block = block_log_weights(p, otlp.IID(q, n))
        assert np.all(np.isfinite(log_w))
        groups = OptimalTransport(p, otlp.IID(q, n)).blocks
        inner = np.array([g.kind == "inner" for g in groups])
        rows = _enumerated_rows(p, q, n, log_w, block, inner)
        for j, g in enumerate(groups):
            assert set(np.flatnonzero(block == j).tolist()) == set(g.tokens.tolist()), inst.label
            if n == 1 and g.kind == "outer" and g.size > 1:
                continue
            assert np.abs(rows[g.tokens] - g.targets).sum() <= 1e-12, (inst.label, j)
            checked += g.size > 1 and n > 1
    assert checked >= 20  # programs with two or more weights, not only closed forms


def test_a_zero_target_token_leaves_the_program() -> None:
    """Inner block, n = 2, one token with t = 0: it gets a weight e^-100 below the others, and the rows of the rest
    (by enumeration over the block and a null token) still meet their targets."""
    q = np.array([0.2, 0.3, 0.25, 0.25])  # tokens 0..2 the block, token 3 the null mass
    t = np.array([0.0, 0.2, 0.15])
    alpha = block_program(q[:3], t, float(q[3]), 2, inner=True)
    assert alpha[0] <= min(alpha[1:].min(), 0.0) - 100.0 + 1e-9
    rows = np.zeros(3)
    for omega in itertools.product(range(4), repeat=2):
        U = sorted({i for i in omega if i < 3})
        if U:
            w = np.exp(alpha[U])
            rows[U] += q[list(omega)].prod() * w / (1.0 + w.sum())
    np.testing.assert_allclose(rows, t, atol=1e-14)


def test_single_terms_take_the_closed_form() -> None:
    """n = 1 (or a singleton block): inner alpha = log t / (c - t), outer 0."""
    q, t = np.array([0.3, 0.1]), np.array([0.2, 0.05])
    np.testing.assert_allclose(block_program(q, t, 0.4, 1, inner=True), np.log(t / (q - t)), rtol=1e-15)
    assert np.array_equal(block_program(q, t, 0.4, 1, inner=False), np.zeros(2))
