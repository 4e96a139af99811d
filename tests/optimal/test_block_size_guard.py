"""A block whose subset terms would not fit in memory: the size guard refuses such terms before allocating, and the
solver never asks for them: peeling (otlp.optimal.peeling) shrinks such blocks first, and a group whose leaves are
still too big becomes a water-filling class chain (otlp.optimal.waterfill)."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
import otlp.optimal.solve as solve_module
from otlp.optimal.coefficients import block_terms_bytes, check_block_size


def test_large_block_at_n4_takes_the_class_chain_instead_of_subset_terms(monkeypatch: pytest.MonkeyPatch):
    # p = q at V = 300 with peeling off: one outer block of 300 tokens, C(300, 4) = 3.3e8 subset terms (tens of
    # GiB). It is not refused: the group becomes a water-filling class chain (no subset terms), exact to 1e-12.
    monkeypatch.setattr(solve_module, "peel_group", lambda *args: None)
    p = np.random.default_rng(0).dirichlet(np.ones(300))
    ot = otlp.optimal.OptimalTransport(p, otlp.IID(p, 4), method="blocks")
    assert ot.alpha == 1.0 and ot.success and ot.row_error <= 1e-12
    assert ot._inst.node_class[0] and not ot._inst.leaf_tokens
    (block,) = ot.blocks
    assert block.class_chain and not block.fallback and block.leaves == () and block.gradient_norm <= 1e-12
    omegas = np.random.default_rng(1).choice(300, size=(2000, 4), p=p)
    accept, reject = ot.rule(omegas)
    np.testing.assert_allclose(accept.sum(1), 1.0, atol=1e-12)  # an outer block accepts every tuple
    assert np.all(reject <= 1e-12)


def test_a_block_of_100_peels_into_closed_forms():
    # p = q at V = 100, n = 4 (C(100, 4) = 3.9e6 subset terms): with peeling (the default) a complete fallback
    # chain takes the whole outer block (blocks of more than 128 tokens go to the class chain instead, as above),
    # and the rule is exact: row sums = p to 1e-12 in L1, and every sampled tuple is accepted.
    p = np.random.default_rng(0).dirichlet(np.ones(100))
    ot = otlp.optimal.OptimalTransport(p, otlp.IID(p, 4), method="blocks")
    assert ot.alpha == 1.0 and ot.success
    (block,) = ot.blocks
    assert block.kind == "outer" and block.fallback and max(len(leaf) for leaf in block.leaves) <= 2
    assert np.abs(ot._inst.row_sums - p).sum() <= 1e-12
    # the rule on sampled tuples: always accepts, and the slice is a distribution on the drafted tokens
    rng = np.random.default_rng(1)
    omegas = rng.choice(100, size=(2000, 4), p=p)
    accept, reject = ot.rule(omegas)
    np.testing.assert_allclose(accept.sum(1), 1.0, atol=1e-12)
    assert np.all(reject <= 1e-12)


def test_size_estimate_counts_every_subset_term():
    # k = 5, n = 2: C(5,1) = 5 singletons (8 + 48 bytes each) and C(5,2) = 10 pairs (16 + 48 bytes each).
    assert block_terms_bytes(5, 2) == 5 * 56 + 10 * 64
    check_block_size(5, 2)  # small blocks pass
    with pytest.raises(otlp.ModelTooLargeError):
        check_block_size(5, 2, limit_bytes=100)
