"""Every registered check passes at a small size (float and, where supported, exact rational mode), and a
deliberately broken implementation injected through a check's hook is caught by that check."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest

from otlp.theorems import build_registry, run_checks
from otlp.theorems.adapters import outer_residual_targets, relaxed_plan

REGISTRY = build_registry()
NAMES = REGISTRY.names()
EXACT = [c.name for c in REGISTRY if c.exact_supported]


def test_registry_covers_the_issue_list():
    required = {"gr.thm3.1", "gr.thm4.1", "gr.thm5.1", "gr.thm6.1", "gr.thm6.2", "gr.lemma6.3", "gr.lemma6.6",
                "cd.thm1", "cd.thm2", "cd.thm3", "cd.remark2", "cd.eq12", "spectr.thm1a", "spectr.thm1b",
                "spectr.thm1c", "spectr.lemma1-3", "spechub.closed_form", "spechub.thm3", "spechub.thm4",
                "gbv.thm3.4", "gbv.thm4.6"}
    assert required <= set(NAMES)
    for check in REGISTRY:
        assert check.source and check.statement and check.hooks, check.name
        if check.printed:  # a misprinted statement records why the printed version fails
            assert check.counterexample, check.name


@pytest.mark.parametrize("name", NAMES)
def test_check_passes_float(name):
    result = REGISTRY[name].run(instances=6, seed=1)
    assert result.status == "pass", result
    assert result.instances >= 1


@pytest.mark.parametrize("name", EXACT)
def test_check_passes_exact(name):
    result = REGISTRY[name].run(instances=3, seed=2, exact=True)
    assert result.status == "pass", result
    assert result.exact


# -- injected bugs ---------------------------------------------------------------------------------------------------
def _run(name, **impl):
    return REGISTRY[name].run(instances=8, seed=0, impl=impl)


def test_psi_with_wrong_sign_is_caught():
    from otlp.core.subsets import optimal_acceptance

    def min_psi_plus(p, draft):  # psi(H) = p(H) + P(H^n): the sign of the draft term flipped
        V = draft.V
        masks = ((np.arange(1 << V)[:, None] >> np.arange(V)) & 1).astype(bool)
        values = masks @ np.asarray(p) + draft.subset_probability(masks)
        k = int(np.argmin(values))
        return float(values[k]), masks[k]

    assert _run("gr.thm3.1", min_psi=min_psi_plus).status == "fail"
    result = _run("gr.thm3.1", optimal_acceptance=lambda p, d: optimal_acceptance(p, d) - 1e-4)
    assert result.status == "fail" and "optimal_acceptance" in result.details


def test_reversed_ratio_order_is_caught():
    from otlp.core.subsets import ratio_order

    result = _run("gr.lemma6.3", ratio_order=lambda p, q: ratio_order(p, q)[::-1])  # increasing q/p
    assert result.status == "fail"


def test_suboptimal_relaxed_plan_is_caught():
    def scaled(p, draft):
        omegas, probs, S = relaxed_plan(p, draft)
        return omegas, probs, 0.9 * S

    assert _run("gr.thm4.1", relaxed_plan=scaled).status == "fail"
    assert _run("gr.thm5.1", relaxed_plan=scaled).status == "fail"


def test_wrong_outer_residuals_are_caught():
    def shifted(p, draft):  # move a little outer mass from the first outer token to the last
        h, p_i, alpha = outer_residual_targets(p, draft)
        outer = np.flatnonzero(~h & (np.asarray(p) > 0))
        if outer.size >= 2:
            p_i = p_i.copy()
            delta = 0.5 * min(p_i[outer[0]], 0.05)
            p_i[outer[0]] -= delta
            p_i[outer[-1]] += delta
        return h, p_i, alpha

    assert _run("gr.thm6.1", outer_residuals=shifted).status == "fail"


def test_wrong_h_star_is_caught():
    def empty_h(p, draft):
        h, p_i, alpha = outer_residual_targets(p, draft)
        return np.zeros_like(h), np.where(h, np.asarray(p), p_i), alpha

    assert _run("gr.thm6.1", outer_residuals=empty_h).status == "fail"


def test_biased_ot_slices_are_caught():
    from otlp.theorems.adapters import ot_slices

    def biased(p, draft, omegas):  # shift 1% of every slice onto token 0
        s = ot_slices(p, draft, omegas)
        bump = np.zeros_like(s)
        bump[:, 0] = 1.0
        return 0.99 * s + 0.01 * bump

    assert _run("gr.eq8", ot_slices=biased).status == "fail"


def test_kseq_with_flipped_bisection_is_caught():
    from otlp.verifiers.kseq import KSeq

    class FlippedKSeq(KSeq):
        def rho_star(self, p, draft):  # the validity test flipped: keeps the f > 0 (invalid) end
            lo, hi = 1.0, float(draft.n)
            for _ in range(52):
                mid = 0.5 * (lo + hi)
                beta = float(np.minimum(draft.q, np.asarray(p) / mid).sum())
                if 1.0 - (1.0 - beta) ** draft.n - mid * beta > 0.0:
                    hi = mid
                else:
                    lo = mid
            return lo

    assert _run("spectr.thm1a", kseq_verifier=FlippedKSeq).status == "fail"
    assert _run("spectr.lemma4", kseq_verifier=FlippedKSeq).status == "fail"


def test_kseq_with_wrong_acceptance_is_caught():
    from otlp.verifiers.kseq import KSeq

    class OffByPower(KSeq):
        def verifier_acceptance(self, p, draft):  # 1 - (1 - beta)^(k+1): wrong exponent
            rho = self.rho_star(p, draft)
            beta = float(np.minimum(draft.q, np.asarray(p) / rho).sum())
            return 1 - (1 - beta) ** (draft.n + 1)

    assert _run("spectr.thm1b", kseq_verifier=OffByPower).status == "fail"


def test_printed_spechub_rule_is_caught():
    import otlp.verifiers.spechub as spechub_mod

    real = spechub_mod.hub_parts_numpy

    def printed_parts(p, q):  # Algorithm 3 as printed: the hub's remaining mass is p(a) for a (x, a) pair
        h = dict(real(p, q))
        h["pa_rem"] = float(p[h["a"]])
        return h

    class PrintedSpecHub(spechub_mod.SpecHubVerifier):
        def conditional(self, p, draft, omegas):
            with patch.object(spechub_mod, "hub_parts_numpy", printed_parts):
                return super().conditional(p, draft, omegas)

    assert _run("spechub.thm2", spechub_verifier=PrintedSpecHub).status == "fail"


def test_spechub_with_wrong_acceptance_is_caught():
    from otlp.verifiers.spechub import SpecHubVerifier

    class NoHub(SpecHubVerifier):
        def acceptance(self, p, draft):  # forgets the hub's own term p(a)
            return super().acceptance(p, draft) - float(np.asarray(p)[int(np.argmax(draft.q))])

    assert _run("spechub.closed_form", spechub_verifier=NoHub).status == "fail"


def test_truncated_lp_losing_mass_is_caught():
    from otlp.verifiers.importance import ImportanceSampling

    class Lossy(ImportanceSampling):
        def verifier_acceptance(self, p, draft):  # pays twice the truncation penalty
            return super().verifier_acceptance(p, draft) - 0.05

    assert _run("cd.eq12", is_verifier=Lossy).status == "fail"


def test_is_verifier_not_optimal_is_caught():
    from otlp.verifiers.importance import ImportanceSampling

    assert REGISTRY["cd.thm1"].run(instances=9, seed=0,
                                   impl={"is_verifier": lambda s: ImportanceSampling(s=0)}).status == "fail"


def test_run_checks_injects_by_hook_name():
    results = run_checks(["gr.thm3.1", "cd.thm3"], instances=4,
                         impl={"optimal_acceptance": lambda p, d: 0.5})
    assert [r.status for r in results] == ["fail", "fail"]


def test_bv_efficiency_of_token_wise_rule_is_caught():
    from otlp.multistep.efficiency import sps_efficiency

    assert _run("gbv.thm3.4", bv_efficiency=sps_efficiency).status == "fail"


def test_gbv_above_the_optimum_is_caught():
    from otlp.multistep.efficiency import gbv_efficiency

    result = _run("gbv.thm4.6", gbv_efficiency=lambda t, d, L, K: gbv_efficiency(t, d, L, K) + 0.01 * (K > 1))
    assert result.status == "fail"
