"""otlp.multistep: multi-step (block) drafts over explicit autoregressive table models.

ARModel tables, random generators, exact block efficiencies and output laws by enumeration, the greedy
skewed draft q^Gamma, and the token-level baselines (SpS along a path, the multi-draft token tree).
The block verifiers themselves live in ``otlp.verifiers.bv`` and ``otlp.verifiers.gbv``.
"""

from otlp.multistep.armodel import ARModel, markov_ar_model, random_ar_model, random_pair, tempered
from otlp.multistep.efficiency import bv_efficiency, gbv_efficiency, greedy_skewed_prefix, sps_efficiency
from otlp.multistep.enumeration import (
    RULES,
    efficiency_from_law,
    enumerate_drafts,
    extended_law,
    output_law,
    target_matching_error,
)
from otlp.multistep.simulate import draft_and_verify
from otlp.multistep.token_wise import sps_path, token_tree, token_tree_output_law

__all__ = [
    "ARModel",
    "RULES",
    "bv_efficiency",
    "draft_and_verify",
    "efficiency_from_law",
    "enumerate_drafts",
    "extended_law",
    "gbv_efficiency",
    "greedy_skewed_prefix",
    "markov_ar_model",
    "output_law",
    "random_ar_model",
    "random_pair",
    "sps_efficiency",
    "sps_path",
    "target_matching_error",
    "tempered",
    "token_tree",
    "token_tree_output_law",
]
