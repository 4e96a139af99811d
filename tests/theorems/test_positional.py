"""spechub.positional: the positional rates are read off the verifiers' conditional laws, so a verifier that keeps
the right total but moves acceptance between positions, or breaks the law, is caught."""

from __future__ import annotations

from unittest.mock import patch

from otlp.theorems import build_registry

REGISTRY = build_registry()


def _run(**impl):
    return REGISTRY["spechub.positional"].run(instances=8, seed=0, impl=impl)


def test_rrs_wor_updating_the_residual_after_removal_is_caught():
    from otlp.verifiers.rrs import RecursiveRejectionWithoutReplacement
    from tests.certification.biased_laws import residual_after_removal_law

    class LateResidual(RecursiveRejectionWithoutReplacement):
        def conditional(self, p, draft, omegas):  # removes x from q_cur BEFORE p_cur = norm((p_cur - q_cur)^+)
            return residual_after_removal_law(p, draft, omegas)

    result = _run(rrs_wor_verifier=LateResidual)
    assert result.status == "fail" and "RRS w/o replacement" in result.details


def test_spechub_printed_hub_rule_is_caught():
    import otlp.verifiers.spechub as spechub_mod

    real = spechub_mod.hub_parts_numpy

    def printed_parts(p, q):  # Algorithm 3 as printed: pa_rem = p(a) for a pair (x, a)
        h = dict(real(p, q))
        h["pa_rem"] = float(p[h["a"]])
        return h

    class Printed(spechub_mod.SpecHubVerifier):
        def conditional(self, p, draft, omegas):
            with patch.object(spechub_mod, "hub_parts_numpy", printed_parts):
                return super().conditional(p, draft, omegas)

    result = _run(spechub_verifier=Printed)
    assert result.status == "fail" and "SpecHub" in result.details
