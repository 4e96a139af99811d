"""otlp.multistep: multi-step (block) drafts over explicit autoregressive table models.

ARModel tables, random generators, exact block efficiencies and output laws by enumeration, the greedy
skewed draft q^Gamma, the token-level baselines (SpS along a path, the multi-draft token tree), and the optimal
K-path rule (Thm 4.6's q^Gamma* decomposed into greedy rankings: ``optimal_rule``, ``rankings``), and the block
verifiers themselves with their exact laws (``bv``, ``gbv``, ``optimal_block``); ``otlp.verifiers.multistep``
registers them in the verifier zoo.  Nothing here imports ``otlp.verifiers``.

Names are resolved lazily (PEP 562), so importing the package imports neither torch nor the submodules.
"""

from __future__ import annotations

from otlp.core._lazy import lazy_exports

#: public name -> module that defines it
_MODULES: dict[str, str] = {
    "ARModel": "otlp.multistep.armodel",
    "markov_ar_model": "otlp.multistep.armodel",
    "random_ar_model": "otlp.multistep.armodel",
    "random_pair": "otlp.multistep.armodel",
    "tempered": "otlp.multistep.armodel",
    "bv_efficiency": "otlp.multistep.efficiency",
    "gbv_efficiency": "otlp.multistep.efficiency",
    "greedy_skewed_prefix": "otlp.multistep.efficiency",
    "sps_efficiency": "otlp.multistep.efficiency",
    "RULES": "otlp.multistep.enumeration",
    "efficiency_from_law": "otlp.multistep.enumeration",
    "enumerate_drafts": "otlp.multistep.enumeration",
    "extended_law": "otlp.multistep.enumeration",
    "output_law": "otlp.multistep.enumeration",
    "target_matching_error": "otlp.multistep.enumeration",
    "draft_and_verify": "otlp.multistep.simulate",
    "sps_path": "otlp.multistep.token_wise",
    "token_tree": "otlp.multistep.token_wise",
    "token_tree_output_law": "otlp.multistep.token_wise",
    "MultiStepReport": "otlp.multistep.certify",
    "projected_pair": "otlp.multistep.from_lm",
    "top_tokens": "otlp.multistep.from_lm",
    "certify_multistep": "otlp.multistep.certify",
    "OptimalKPathRule": "otlp.multistep.optimal_rule",
    "optimal_k_path_rule": "otlp.multistep.optimal_rule",
    "RankingMixture": "otlp.multistep.rankings",
    "decompose": "otlp.multistep.rankings",
}

__all__ = sorted(_MODULES)


__getattr__ = lazy_exports(__name__, _MODULES, globals())
