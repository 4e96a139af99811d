"""The batched draft samplers reproduce the tuple laws of otlp.core.drafts (an independent implementation).

Chi-square over all n-tuples with mass (cells with expected count < 5 pooled), level 1e-3 per test (4 tests:
false-alarm rate under 0.4%); seeded, so deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otlp.core.drafts import IID, Greedy, SpecHub, WithoutReplacement
from otlp.core.errors import InputError
from otlp.decode.draft_sampling import sample_drafts

from .toy_models import chi_square_p_value

SCHEMES = {"iid": IID, "without_replacement": WithoutReplacement, "greedy": Greedy, "spechub": SpecHub}


@pytest.mark.parametrize(("scheme", "n"), [("iid", 3), ("without_replacement", 3), ("greedy", 3), ("spechub", 2)])
def test_sampled_tuples_follow_the_scheme(scheme, n):
    V, M = 6, 60000
    q = np.random.default_rng(1).dirichlet(np.ones(V))
    gen = torch.Generator().manual_seed(2)
    drafts = sample_drafts(scheme, torch.tensor(q).expand(M, V).contiguous(), n, gen).numpy()  # [M, n]
    omegas = np.array(np.unravel_index(np.arange(V**n), (V,) * n)).T  # lexicographic
    law = SCHEMES[scheme](q, n).tuple_probabilities(omegas)
    codes = drafts @ (V ** np.arange(n - 1, -1, -1))
    assert chi_square_p_value(codes, law) > 1e-3


def test_scheme_input_errors():
    q = torch.tensor([[1.0, 0.0, 0.0]])
    with pytest.raises(InputError, match="without replacement"):
        sample_drafts("without_replacement", q, 2)
    with pytest.raises(InputError, match="point mass"):
        sample_drafts("spechub", q, 2)
    with pytest.raises(InputError, match="greedy"):
        sample_drafts("greedy", q, 2)
    with pytest.raises(InputError, match="unknown draft scheme"):
        sample_drafts("zigzag", q, 2)
