"""The incidence pairs (i, omega) with i in set(omega): the only places an OTLP plan can put acceptance mass."""

from __future__ import annotations

import numpy as np


def incidence_pairs(omegas: np.ndarray, V: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (i, m) with i in set(omegas[m]), each once, sorted by m then i.

    ``omegas: int [M, n]`` -> ``(tokens int64 [K], columns int64 [K])``, K = sum_m |set(omega_m)| <= n M.

    The pairs are already grouped by m (row-major order), so only the repeats inside one tuple have to go: sort each
    row (``O(M n log n)``), keep an entry unless it equals its left neighbour, and read the kept entries row-major.
    That is the order of the codes ``m V + i`` sorted, with no global sort of ``n M`` codes.
    """
    omegas = np.asarray(omegas)
    M, n = omegas.shape
    if M == 0 or n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ordered = np.sort(omegas, axis=1)  # [M, n], each tuple's tokens ascending
    first = np.empty((M, n), dtype=bool)  # [M, n], not a repeat of the token to its left
    first[:, 0] = True
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=first[:, 1:])
    flat = np.flatnonzero(first.reshape(-1))  # [K], row-major: by m, then by token within m
    tokens = ordered.reshape(-1)[flat].astype(np.int64, copy=False)  # [K]
    return tokens, (flat // n).astype(np.int64, copy=False)
