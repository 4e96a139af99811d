"""incidence_pairs: the pairs (i, m) with i in set(omega_m), each once, sorted by m then i, against a brute-force set
construction and against the global-unique formulation it replaced (same pairs, same order, int64)."""

from __future__ import annotations

import numpy as np
import pytest

from otlp.lp.formulations.incidence import incidence_pairs


def brute_force_pairs(omegas: np.ndarray) -> list[tuple[int, int]]:
    """(m, i) for m in order, i in sorted(set(omega_m)): a Python set per tuple."""
    return [(m, i) for m, omega in enumerate(omegas.tolist()) for i in sorted(set(omega))]


def global_unique_pairs(omegas: np.ndarray, V: int) -> tuple[np.ndarray, np.ndarray]:
    """The former implementation: one np.unique over the codes m V + i."""
    M, n = omegas.shape
    codes = np.unique(np.repeat(np.arange(M, dtype=np.int64), n) * V + omegas.reshape(-1))
    return codes % V, codes // V


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_matches_brute_force_and_the_global_unique(n):
    rng = np.random.default_rng([20261123, n])
    for V in (1, 2, 3, 7, 50):
        for M in (0, 1, 5, 200):
            omegas = rng.integers(0, V, size=(M, n))  # small V: most tuples repeat a token
            if M > 2:
                omegas[: M // 3] = omegas[: M // 3, :1]  # some tuples of one token repeated n times
            tokens, cols = incidence_pairs(omegas, V)
            assert tokens.dtype == np.int64 and cols.dtype == np.int64
            assert list(zip(cols.tolist(), tokens.tolist(), strict=True)) == brute_force_pairs(omegas), (V, M, n)
            old_tokens, old_cols = global_unique_pairs(omegas, V)
            np.testing.assert_array_equal(tokens, old_tokens)
            np.testing.assert_array_equal(cols, old_cols)


def test_other_integer_dtypes_and_input_left_alone():
    omegas = np.array([[3, 1, 3], [0, 0, 0], [2, 1, 0]], dtype=np.int32)
    before = omegas.copy()
    tokens, cols = incidence_pairs(omegas, 4)
    np.testing.assert_array_equal(omegas, before)  # sorted a copy
    assert tokens.dtype == np.int64 and cols.dtype == np.int64
    assert list(zip(cols.tolist(), tokens.tolist(), strict=True)) == [(0, 1), (0, 3), (1, 0), (2, 0), (2, 1), (2, 2)]
