"""GR Section 6 convex-program checks (Thm 6.4, Thm 6.5, App. K, Lemma I.1): injected wrong implementations fail.
(That each check passes on the production code is covered by test_checks.test_check_passes_float.)"""

from __future__ import annotations

import numpy as np

from otlp.theorems import build_registry
from otlp.theorems.adapters import outer_residual_targets
from otlp.theorems.block_programs import block_log_weights, subset_coefficients

REGISTRY = build_registry()


def _run(name, instances=8, **impl):
    return REGISTRY[name].run(instances=instances, seed=0, impl=impl)


def _shifted_outer(p, draft):
    """Move outer mass from the largest-q outer token to the smallest-q one (breaks the Hall constraints)."""
    h, p_i, alpha = outer_residual_targets(p, draft)
    q = np.asarray(draft.q)
    outer = np.flatnonzero(~h & (np.asarray(p) > 0))
    if outer.size >= 2:
        order = outer[np.argsort(-q[outer])]
        p_i = p_i.copy()
        delta = 0.5 * min(p_i[order[0]], 0.05)
        p_i[order[0]] -= delta
        p_i[order[-1]] += delta
    return h, p_i, alpha


def _empty_h(p, draft):
    h, p_i, alpha = outer_residual_targets(p, draft)
    return np.zeros_like(h), np.where(h, np.asarray(p), p_i), alpha


def _grown_h(p, draft):
    """H* plus the outer token of largest q: no longer a minimiser of psi."""
    h, p_i, alpha = outer_residual_targets(p, draft)
    q, outer = np.asarray(draft.q), np.flatnonzero(~h)
    if outer.size:
        h = h.copy()
        h[outer[np.argmax(q[outer])]] = True
    return h, p_i, alpha


def test_thm64_catches_wrong_outer_targets_and_reversed_priority():
    assert _run("gr.thm6.4", outer_residuals=_shifted_outer).status == "fail"

    def reversed_blocks(p, draft):  # priority to the LOWEST block: the lifted weights no longer drive grad Phi to 0
        log_w, block = block_log_weights(p, draft)
        return log_w, block.max() - block

    result = _run("gr.thm6.4", instances=12, block_weights=reversed_blocks)
    assert result.status == "fail" and "existence" in result.details


def test_thm65_catches_a_non_minimising_h_star():
    result = _run("gr.thm6.5", outer_residuals=_grown_h)
    assert result.status == "fail" and "gamma_T" in result.details


def test_appk_catches_wrong_coefficients():
    result = _run("gr.appK", subset_coefficients=lambda qb, q0, n, s: subset_coefficients(qb, 0.0, n, s))
    assert result.status == "fail"  # null mass dropped: the outer sanity sum is off
    result = _run("gr.appK", subset_coefficients=lambda qb, q0, n, s: subset_coefficients(qb, q0, n, s) * (1 + 1e-6))
    assert result.status == "fail"  # a 1e-6 relative error is far above the 1e-12 tolerance


def test_lemma_i1_catches_infeasible_outer_systems():
    for broken in (_empty_h, _shifted_outer):  # Hall fails, so Phi -> -inf along some t 1_S
        result = _run("gr.lemmaI.1", outer_residuals=broken)
        assert result.status == "fail" and "Phi >= 0" in result.details
