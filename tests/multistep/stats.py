"""Shared seeded statistical check for the multi-step samplers (used by tests/verifiers/test_bv.py and test_gbv.py)."""

import numpy as np
import torch
from scipy.stats import chi2

from otlp.multistep import draft_and_verify, output_law
from otlp.multistep.armodel import num_nodes

# Pearson chi-square test of the sampled output sequences against the exact enumerated law, at level 1e-6:
# a correct sampler fails it with probability 1e-6 per call (and the seed is fixed, so the outcome is stable).
ALPHA = 1e-6


def sampled_law_pvalue(rule, target, draft, L, K, size=100_000, seed=0):
    R = output_law(rule, target, draft, L, K)
    _, nodes = draft_and_verify(rule, target, draft, L, K, size, torch.Generator().manual_seed(seed))
    observed = np.bincount(nodes.numpy(), minlength=num_nodes(target.V, L + 1))
    support = R > 1e-15
    assert observed[~support].sum() == 0, "a sequence of probability 0 was output"
    expected = size * R[support]
    stat = float(((observed[support] - expected) ** 2 / expected).sum())
    return float(chi2.sf(stat, int(support.sum()) - 1))
