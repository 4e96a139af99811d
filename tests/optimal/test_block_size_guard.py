"""A block whose subset terms would not fit in memory is refused before allocating, with its size."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.optimal.coefficients import block_terms_bytes, check_block_size


def test_large_block_at_n4_is_refused_with_its_size():
    # p = q at V = 300: alpha* = 1 and one outer block of 300 tokens, C(300, 4) = 3.3e8 subset terms (tens of GiB).
    p = np.random.default_rng(0).dirichlet(np.ones(300))
    with pytest.raises(otlp.ModelTooLargeError, match="block of 300 tokens at n = 4"):
        otlp.optimal.OptimalTransport(p, otlp.IID(p, 4))


def test_size_estimate_counts_every_subset_term():
    # k = 5, n = 2: C(5,1) = 5 singletons (8 + 48 bytes each) and C(5,2) = 10 pairs (16 + 48 bytes each).
    assert block_terms_bytes(5, 2) == 5 * 56 + 10 * 64
    check_block_size(5, 2)  # small blocks pass
    with pytest.raises(otlp.ModelTooLargeError):
        check_block_size(5, 2, limit_bytes=100)
