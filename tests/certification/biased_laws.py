"""Exact numpy laws of deliberately biased rules that more than one test needs (no torch here)."""

from __future__ import annotations

import numpy as np

from otlp.verifiers.base import accept_probability, normalize_or, sequential_law


def residual_after_removal_law(p: np.ndarray, draft: object, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pi(. | omega) of RRS without replacement that removes the rejected draft from q BEFORE it forms the residual
    p_cur = norm((p_cur - q_cur)^+) (the residual must use the q_cur the draft was tested against; SpecHub note
    §3.1). ``omegas [M, n]`` -> ``(law [M, V], rule_accepts [M])`` as ``Verifier.conditional``."""
    M, n = omegas.shape
    rows = np.arange(M)
    p_cur = np.tile(p, (M, 1))
    q_cur = np.tile(draft.q, (M, 1))
    accept = np.zeros((M, n))
    for k in range(n):
        x = omegas[:, k]
        accept[:, k] = accept_probability(p_cur[rows, x], q_cur[rows, x])
        q_cur[rows, x] = 0.0
        q_cur = normalize_or(q_cur, q_cur)
        p_cur = normalize_or(np.maximum(p_cur - q_cur, 0.0), p_cur)
    return sequential_law(omegas, accept, p_cur, p.size)
