"""The residual completion of a relaxed OTLP plan to a full coupling (GR eq. (3); GR eq. (8) for the outer/inner split).

Given a plan S >= 0 feasible for the relaxed OTLP (GR eq. (2)), with residuals

    p_res(i)      = p(i)           - sum_omega S[i, omega]   >= 0
    P_res(omega)  = P_draft(omega) - sum_i     S[i, omega]   >= 0,

GR eq. (3) adds their product, normalised by ``sum_j p_res(j) = sum_omega P_res(omega) = 1 - alpha*``:

    C[i, omega] = S[i, omega] + p_res(i) * P_res(omega) / sum_j p_res(j),

a coupling of p and P_draft; it is an OTLP optimum when S is a relaxed optimum (its acceptance
``sum_{i in set(omega)} C[i, omega]`` is alpha*). For the outer/inner split of GR Thm 5.1, with H* a minimiser of psi,
GR eq. (7) says p_res = 0 on H* and P_res = 0 off H*^n, and eq. (3) becomes eq. (8).

Both hold for an exact optimum. A computed plan may be slightly infeasible (an LP's tolerance: a negative entry, a row
above p(i), a column above P_draft(omega)), and may leave a column short while the rows use all of p (a tuple lighter
than a flow solver's quantum carries nothing; rounding). :func:`residual_completion` repairs the first and completes
the second, so that every slice ``C[:, omega] / P_draft(omega)`` is a distribution. It is the one completion of the
package: :meth:`otlp.lp.formulations.relaxed.RelaxedOTLP.complete` and the maps back of
:class:`otlp.lp.formulations.outer_inner.OuterInnerNetworks` both call it.
"""

from __future__ import annotations

import numpy as np


def residual_completion(p: np.ndarray, probs: np.ndarray, flow_S: np.ndarray, arc_token: np.ndarray,
                        arc_tuple: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GR eq. (3) on a computed relaxed plan, kept sparse: ``C[i, m] = S[i, m] + w[i] * d_res[m]``.

    ``p [V]``, ``probs [M]`` (P_draft of the columns), the plan as arc flows ``flow_S [K]`` on the pairs
    ``(arc_token [K], arc_tuple [K])`` -> ``(S [K], w [V], d_res [M])``:

    * ``S``: the flows made exactly feasible for GR eq. (2) (negatives clipped, then a column above P_draft(omega)
      and a row above p(i) scaled down; a no-op on an exactly feasible plan, e.g. OR-Tools' or an exact solver's);
    * ``d_res[m] = P_draft(omega_m) - sum_i S[i, m] >= 0`` and ``p_res(i) = p(i) - sum_m S[i, m] >= 0`` (GR eq. (3));
    * ``w = p_res / sum_j p_res(j)``; when ``sum_j p_res(j) = 0`` (alpha* = 1 to the last bit, so any ``d_res`` left is
      rounding, or a tuple too light to carry flow), ``w = p / sum_j p(j)`` (= p).

    Column m of C sums to P_draft(omega_m) (``sum_i w[i] = 1``) whatever the solver left, so every slice
    ``C[:, m] / P_draft(omega_m)`` is a distribution; row i sums to
    ``p(i) + p_res(i) (sum_m d_res[m] - sum_j p_res(j)) / sum_j p_res(j) = p(i)`` up to
    ``|sum_m P_draft - sum_i p|`` (rounding). On an exact optimum with H* a minimiser the residuals are zero where
    GR eq. (7) says, and C is GR eq. (8).
    """
    p = np.asarray(p, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    V, M = p.size, probs.size
    S = np.maximum(np.asarray(flow_S, dtype=np.float64), 0.0)  # [K]
    col = np.bincount(arc_tuple, weights=S, minlength=M)  # [M]
    S = S * np.where(col > probs, probs / np.where(col > 0, col, 1.0), 1.0)[arc_tuple]
    row = np.bincount(arc_token, weights=S, minlength=V)  # [V]
    S = S * np.where(row > p, p / np.where(row > 0, row, 1.0), 1.0)[arc_token]  # rows down: columns stay <= probs
    p_res = np.maximum(p - np.bincount(arc_token, weights=S, minlength=V), 0.0)  # [V]
    d_res = np.maximum(probs - np.bincount(arc_tuple, weights=S, minlength=M), 0.0)  # [M]
    return S, residual_law(p_res, p), d_res  # sum_j p_res(j) = sum_m d_res[m] = 1 - alpha* up to rounding


def residual_law(p_res: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The law a rejected tuple's output is drawn from: ``p_res [..., V]`` normalised along its last axis, and where it
    carries no mass (alpha* = 1 to the last bit, or a rejection whose p - R rounds to 0) ``p`` normalised instead, so
    the draw stays a distribution on tokens of positive p. The rule of :func:`residual_completion`, of
    ``OptimalTransport.residual`` and of ``TransportBatch.residual``."""
    total = p_res.sum(-1, keepdims=True)  # [..., 1]
    empty = total <= 0
    if not empty.any():
        return p_res / total
    p = np.asarray(p, dtype=np.float64)
    return np.where(empty, p / p.sum(-1, keepdims=True), p_res / np.where(empty, 1.0, total))
