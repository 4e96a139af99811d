"""The incidence pairs (i, omega) with i in set(omega): the only places an OTLP plan can put acceptance mass."""

from __future__ import annotations

import numpy as np


def incidence_pairs(omegas: np.ndarray, V: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (i, m) with i in set(omegas[m]), each once, sorted by m then i.

    ``omegas: int [M, n]`` -> ``(tokens int [K], columns int [K])``, K = sum_m |set(omega_m)| <= n M.
    """
    M, n = omegas.shape
    codes = np.unique(np.repeat(np.arange(M, dtype=np.int64), n) * V + omegas.reshape(-1))  # [K], distinct pairs
    return codes % V, codes // V
