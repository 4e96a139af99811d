"""Projection of real LMs onto V tokens (otlp.multistep.from_lm), checked against the n-gram model directly."""

import numpy as np
import pytest
import torch

from otlp.cli.decode import DEFAULT_PROMPTS
from otlp.core.errors import InputError
from otlp.decode.ngram import embedded_models, prompt_ids
from otlp.multistep.armodel import all_paths, depth_offsets
from otlp.multistep.from_lm import projected_pair, top_tokens


@pytest.fixture(scope="module")
def pair():
    m = embedded_models()
    return m, prompt_ids(m.tokenizer, DEFAULT_PROMPTS)


def _direct(lm, context, tokens, path):
    """p(. | context + path) from KneserNeyLM.probabilities on the explicit last-(order-1) window."""
    full = [lm.bos_id] * lm.context_size + list(context) + tokens[list(path)].tolist()
    window = np.array(full[len(full) - lm.context_size:], dtype=np.int64)
    row = lm.probabilities(window[None, :])[0]
    return row[tokens] / row[tokens].sum()


@pytest.mark.parametrize("V,depth", [(3, 3), (4, 2)])
def test_tables_are_renormalised_ngram_conditionals(pair, V, depth):
    m, contexts = pair
    rng = np.random.default_rng(0)
    for context in contexts[:2]:
        p, q, tokens = projected_pair(m.target, m.draft, context, V, depth)
        assert (p.V, p.depth, q.depth) == (V, depth, depth)
        for model in (p, q):  # valid conditional laws
            assert np.all(model.conditionals > 0)
            np.testing.assert_allclose(model.conditionals.sum(1), 1.0, atol=1e-12)
        off = depth_offsets(V, depth)
        for i in range(depth + 1):
            paths = all_paths(V, i) if i else np.zeros((1, 0), dtype=np.int64)
            for r in rng.choice(len(paths), size=min(4, len(paths)), replace=False):
                node = off[i] + r
                np.testing.assert_allclose(p.conditionals[node], _direct(m.target, context, tokens, paths[r]),
                                           rtol=1e-12)
                np.testing.assert_allclose(q.conditionals[node], _direct(m.draft, context, tokens, paths[r]),
                                           rtol=1e-12)
        # the tokens are the V most probable under the target at the context
        full = m.target.probabilities(np.array(context[-3:])[None, :])[0]
        assert set(tokens.tolist()) == set(np.argsort(-full)[:V].tolist())
        assert np.all(np.diff(full[tokens]) <= 0)
        # draft (bigram) and target (4-gram) differ: the projection is not trivial
        assert np.abs(p.conditionals - q.conditionals).max() > 1e-3


def test_bad_input(pair):
    m, contexts = pair
    with pytest.raises(InputError, match="V must be"):
        projected_pair(m.target, m.draft, contexts[0], 1, 2)
    with pytest.raises(InputError, match="context"):
        projected_pair(m.target, m.draft, [], 3, 2)
    with pytest.raises(InputError, match="distinct"):
        projected_pair(m.target, m.draft, contexts[0], 3, 2, tokens=np.array([5, 5, 6]))


class _Zero:
    vocab_size = 4

    def next_token_logits(self, prefixes, lengths=None):
        out = torch.full((len(prefixes), 4), -torch.inf, dtype=torch.float64)
        out[:, 0] = 0.0
        return out


def test_zero_mass_is_refused():
    with pytest.raises(InputError, match="zero mass"):
        projected_pair(_Zero(), _Zero(), [0], 2, 1, tokens=np.array([2, 3]))
    assert top_tokens(_Zero(), [0], 2)[0] == 0
