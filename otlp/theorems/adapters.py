"""Thin adapters from otlp's public objects to the shapes the checks consume (the default hooks).

Each adapter only reshapes; the math under test stays in the otlp module it calls.
"""

from __future__ import annotations

import numpy as np


def relaxed_plan(p: np.ndarray, draft: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An optimal relaxed-OTLP plan from otlp (GR eq. (2)): ``(omegas [M, n], probs [M], S [V, M])``."""
    from otlp.optimal.generic import relaxed_lp_plan

    omegas, probs = draft.support()
    _, S_slots, _ = relaxed_lp_plan(np.asarray(p, dtype=np.float64), omegas, probs)  # [M, n]
    V, M = len(p), len(probs)
    S = np.zeros((V, M))
    np.add.at(S, (omegas.reshape(-1), np.repeat(np.arange(M), omegas.shape[1])), S_slots.reshape(-1))
    return omegas, probs, S


def optimal_transport(p: np.ndarray, draft: object) -> object:
    """The production exact OT rule (``otlp.optimal.OptimalTransport``)."""
    from otlp.optimal import OptimalTransport

    return OptimalTransport(p, draft)


def outer_residual_targets(p: np.ndarray, draft: object) -> tuple[np.ndarray, np.ndarray, float]:
    """From the production OT: ``(H* mask [V], p_i [V], alpha*)`` with p_i = p(i) - (1 - alpha*) r(i) the outer row
    sums (GR Thm 6.1) recovered from the rejection law r (GR §3.2: r = (p - p_i) / (1 - alpha*) off H*)."""
    ot = optimal_transport(p, draft)
    V = len(p)
    h = np.zeros(V, dtype=bool)
    h[np.asarray(ot.h_star, dtype=np.int64)] = True
    p = np.asarray(p, dtype=np.float64)
    p_i = np.where(h, 0.0, p - (1.0 - float(ot.alpha)) * np.asarray(ot.residual, dtype=np.float64))
    return h, p_i, float(ot.alpha)


def ot_slices(p: np.ndarray, draft: object, omegas: np.ndarray) -> np.ndarray:
    """pi(. | omega) for every row of ``omegas`` from the production OT: ``float [M, V]``."""
    return np.asarray(optimal_transport(p, draft).slices(np.asarray(omegas, dtype=np.int64)), dtype=np.float64)


def verifier(name: str, **options: object) -> object:
    """``otlp.verifiers.get(name, **options)``."""
    from otlp.verifiers import get

    return get(name, **options)


def is_verifier(s: int) -> object:
    """The canonical-decomposition IS verifier with |Omega_1| = s (truncated LP, CD Algorithm 2)."""
    return verifier("is", s=s)


def kseq_verifier() -> object:
    return verifier("kseq")


def spechub_verifier() -> object:
    return verifier("spechub")


def rrs_verifier() -> object:
    return verifier("rrs")


def multipath_lp_value(target: object, draft: object, L: int, K: int) -> float:
    """The antichain multi-path LP optimum (GBV Thm 4.3; K = 1: the single-path LP of Thm 3.3), via scipy HiGHS."""
    from otlp.lp.formulations.multipath import MultiPathLP

    return float(MultiPathLP(target, draft, L, K).solve("highs").value)


def target_matching_error(rule: str, target: object, draft: object, L: int, K: int) -> float:
    """max |P(extended output = a_{1:L+1}) / p(a_{1:L+1}) - 1| of the exact law of ``rule`` (GBV Lemma A.3)."""
    from otlp.multistep.enumeration import output_law
    from otlp.multistep.enumeration import target_matching_error as error

    return float(error(output_law(rule, target, draft, L, K), target, L))


def relaxed_otlp_solve(p: np.ndarray, draft: object, exact: bool) -> tuple[object, np.ndarray, np.ndarray]:
    """``otlp.lp.formulations.RelaxedOTLP(p, draft)`` solved by the product's ``exact`` backend (``exact=True``: the
    value is a ``Fraction`` of the float data read as exact rationals) or by ``highs``:
    ``(value, omegas [M, n], probs float [M])``, the formulation's own support."""
    from otlp.lp.formulations import RelaxedOTLP

    f = RelaxedOTLP(p, draft)
    sol = f.solve(backend="exact" if exact else "highs")
    if not sol.optimal:
        raise RuntimeError(f"RelaxedOTLP ({sol.backend}) did not solve: {sol.status}")
    return sol.value, f.omegas, f.probs


def beta_program_solve(p: np.ndarray, draft: object, exact: bool) -> tuple[object, float, np.ndarray, np.ndarray]:
    """``otlp.lp.formulations.BetaProgram(p, draft)``: ``(LP value by the exact/highs backend, acceptance of its GR
    Thm 4.1 beta built from a RelaxedOTLP plan, omegas [M, n], probs float [M])``."""
    from otlp.lp.formulations import BetaProgram

    f = BetaProgram(p, draft)
    backend = "exact" if exact else "highs"
    sol = f.solve(backend=backend)
    if not sol.optimal:
        raise RuntimeError(f"BetaProgram ({sol.backend}) did not solve: {sol.status}")
    return sol.value, f.acceptance(f.optimal_beta(backend=backend)), f.omegas, f.probs


def rrs_wor_verifier() -> object:
    return verifier("rrs_wor")
