"""Block coefficients c_U / d_U: the mass of the tuples served by a block whose in-block token set is U.

Design note §2 (iv): for a block G with null mass Q0 = Q_s (the q-mass of the positions below G) and U subset of G,

    c_U = sum_{j=|U|}^{n} n!/(n-j)! * Q0^(n-j) * [z^j] prod_{i in U} (e^{q_i z} - 1)
        = sum_{j=|U|}^{n} n!/(n-j)! * Q0^(n-j) * sum_{beta in comp(j, |U|)} prod_i q_i^beta_i / beta_i!,

a positive sum (the inclusion-exclusion form of GR App. K cancels catastrophically when q << Q0). The same
formula gives the outer c_U and the inner d_U. Everything here is vectorised over the subsets: the only Python
loops run over n (degrees and subset members), never over combinations.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb, factorial

import numpy as np

from otlp.errors import ModelTooLargeError

#: Memory allowed for one block's subset terms (index table, coefficients and the Newton work arrays).
BLOCK_TERMS_LIMIT_BYTES = 4 * 1024**3


@lru_cache(maxsize=256)
def combinations_index(k: int, u: int) -> np.ndarray:
    """All u-subsets of range(k) in lexicographic order, ``int64 [C(k, u), u]`` (read-only, cached).

    Built by extending the (u-1)-subsets with every larger index, vectorised with repeat/cumsum.
    """
    if u < 1 or u > k:
        out = np.zeros((0, max(u, 0)), dtype=np.int64)
    else:
        out = np.arange(k, dtype=np.int64)[:, None]  # [k, 1]
        for _ in range(1, u):
            last = out[:, -1]
            counts = k - 1 - last  # how many larger indices each row can take
            total = int(counts.sum())
            starts = np.repeat(np.cumsum(counts) - counts, counts)  # [total]
            new = np.repeat(last + 1, counts) + (np.arange(total, dtype=np.int64) - starts)
            out = np.concatenate([np.repeat(out, counts, axis=0), new[:, None]], axis=1)
        assert out.shape[0] == comb(k, u)
    out.setflags(write=False)
    return out


def subset_coefficients(q_block: np.ndarray, null_mass: float, n: int, subsets: np.ndarray) -> np.ndarray:
    """c_U for the given subsets (``subsets: int [M, u]`` indexing ``q_block: float [k]``) -> ``float [M]``.

    Uses the positive composition sum of the design note §2 (iv).
    """
    M, u = subsets.shape
    degrees = np.arange(n + 1)
    inv_fact = np.array([1.0 / factorial(m) for m in degrees])  # [n + 1]
    # series of e^{q z} - 1 truncated at degree n, per token: [k, n + 1]
    series = np.where(degrees[None, :] >= 1, q_block[:, None] ** degrees[None, :] * inv_fact[None, :], 0.0)
    prod = series[subsets[:, 0]]  # [M, n + 1]
    for a in range(1, u):
        factor = series[subsets[:, a]]  # [M, n + 1]
        new = np.zeros_like(prod)
        for m in range(a + 1, n + 1):  # degree >= a + 1 after a + 1 factors
            new[:, m] = np.einsum("ij,ij->i", prod[:, a:m], factor[:, m - a : 0 : -1])
        prod = new
    # weights n!/(n-j)! Q0^(n-j) for j = u..n
    weights = np.array([factorial(n) / factorial(n - j) * null_mass ** (n - j) if j >= u else 0.0 for j in degrees])
    return prod @ weights  # [M]


def block_terms(q_block: np.ndarray, null_mass: float, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The convex program's terms for one block: ``[(subsets int [M_u, u], coef float [M_u]) for u = 1..min(n, k)]``."""
    k = q_block.size
    check_block_size(k, n)
    return [
        (idx, subset_coefficients(q_block, null_mass, n, idx))
        for idx in (combinations_index(k, u) for u in range(1, min(n, k) + 1))
    ]


def block_terms_bytes(k: int, n: int) -> int:
    """Estimated peak bytes of :func:`block_terms` and one Newton evaluation for a block of k tokens:
    per u-subset an int64 index row (8u), its coefficient and the (n + 1)-wide series products (about 8 (n + 4))."""
    return sum(comb(k, u) * (8 * u + 8 * (n + 4)) for u in range(1, min(n, k) + 1))


def subset_terms(k: int, n: int) -> int:
    """sum_{u <= n} C(k, u): the subset terms of a block of k tokens."""
    return sum(comb(k, u) for u in range(1, min(n, k) + 1))


def check_block_size(k: int, n: int, limit_bytes: float = BLOCK_TERMS_LIMIT_BYTES) -> None:
    """Refuse, before allocating, a block whose sum_{u <= n} C(k, u) subset terms would not fit in memory."""
    need = block_terms_bytes(k, n)
    if need > limit_bytes:
        raise ModelTooLargeError(
            f"the exact rule's block of {k} tokens at n = {n} ({subset_terms(k, n):,} subset terms)", need, limit_bytes)
