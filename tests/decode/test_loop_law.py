"""The decode loop's output stream has the law of plain target sampling.

Method: toy Markov models (V = 5; target reads 2 tokens of context, draft 1) so the law of the first T = 3
generated tokens is exact (125 cells). N independent prompts are decoded in one batch; Pearson's chi-square
(cells with expected count < 5 pooled) must not reject at level ALPHA = 1e-3. Each test is seeded, so it is
deterministic; under a correct loop a fresh seed would fail with probability 1e-3 per test (under 3% over the
~30 law tests here). T = 3 with L = 2 spans step boundaries, corrections and bonus tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otlp.core.distributions import probabilities_from_logits
from otlp.decode.loop import decode, sample_target

from .toy_models import TableLM, chi_square_p_value, exact_sequence_law, sequence_codes

ALPHA = 1e-3
V, T, N = 5, 3, 4000


@pytest.fixture(scope="module")
def toy_pair():
    rng = np.random.default_rng(7)
    target = TableLM.random(V, 2, rng)
    draft = TableLM.random(V, 1, rng, concentration=1.0)
    prompt = [1, 2]
    return draft, target, prompt, exact_sequence_law(target, prompt, T)


from otlp.decode.registry import available_verifiers, resolve_verifier  # noqa: E402

# samplers passed as plain callables with their scheme, over more tree shapes: (rule, scheme, n, L)
CALLABLE_CASES = [
    ("sps", "iid", 1, 2),
    ("rrs", "iid", 1, 3),
    ("rrs_wor", "without_replacement", 1, 2),
    ("rrs", "iid", 2, 2),
    ("rrs", "iid", 4, 1),
    ("rrs_wor", "without_replacement", 2, 2),
    ("rrs_wor", "without_replacement", 4, 2),
]
# every token-level rule of the zoo (otlp.verifiers) by name, on its own draft scheme, with n = 1 and n >= 2
ZOO_CASES = [(name, 1 if resolve_verifier(name).scheme != "spechub" else 2) for name in available_verifiers()]
ZOO_CASES += [(name, 2) for name, n in ZOO_CASES if n == 1]
N_ZOO = 2500  # fewer prompts: some zoo rules solve a transport per row on the host


@pytest.mark.parametrize(("name", "scheme", "n", "L"), CALLABLE_CASES,
                         ids=[f"{name}-n{n}-L{L}" for name, _, n, L in CALLABLE_CASES])
def test_callable_verifiers_stream_law(toy_pair, name, scheme, n, L):
    _check_stream_law(toy_pair, resolve_verifier(name).sample, scheme, n, L, seed=11)


@pytest.mark.parametrize(("name", "n"), sorted(ZOO_CASES))
def test_zoo_verifiers_stream_law(toy_pair, name, n):
    _check_stream_law(toy_pair, name, None, n, 2, seed=13, prompts=N_ZOO)


def _check_stream_law(toy_pair, verifier, scheme, n, L, seed, prompts=N):
    draft, target, prompt, law = toy_pair
    result = decode(draft, target, verifier, n, L, scheme=scheme, prompts=[prompt] * prompts, max_new_tokens=T,
                    seed=seed)
    assert all(len(t) == T for t in result.tokens)
    p_value = chi_square_p_value(sequence_codes(result.tokens, V, T), law)
    assert p_value > ALPHA, f"{verifier}/{result.metrics.scheme} n={n} L={L}: chi-square p = {p_value:.2e}"
    assert 1.0 <= result.metrics.block_efficiency <= L + 1


def _rrs_wor_as_callable(p, q, drafts, generator):
    return resolve_verifier("rrs_wor").sample(p, q, drafts, generator)


def test_callable_verifier_with_temperature_and_top_k(toy_pair):
    """A user callable, temperature 0.7 and top-k 3 on both models: the stream follows the processed target."""
    draft, target, prompt, _ = toy_pair

    def transform(law):
        return probabilities_from_logits(np.log(law), 0.7, 3, None)

    law = exact_sequence_law(target, prompt, T, transform)
    result = decode(draft, target, _rrs_wor_as_callable, 3, 2, scheme="without_replacement", prompts=[prompt] * N,
                    max_new_tokens=T, temperature=0.7, top_k=3, seed=5)
    assert chi_square_p_value(sequence_codes(result.tokens, V, T), law) > ALPHA


def test_top_p_and_different_draft_temperature(toy_pair):
    draft, target, prompt, _ = toy_pair

    def transform(law):
        return probabilities_from_logits(np.log(law), 1.0, None, 0.8)

    law = exact_sequence_law(target, prompt, T, transform)
    result = decode(draft, target, "rrs", 2, 2, prompts=[prompt] * N, max_new_tokens=T, top_p=0.8,
                    draft_temperature=1.5, draft_top_p=1.0, seed=6)
    assert chi_square_p_value(sequence_codes(result.tokens, V, T), law) > ALPHA


def test_plain_target_sampling_matches_exact_law(toy_pair):
    """The baseline sampler itself, and the test's power: a naive multi-draft rule is rejected."""
    _, target, prompt, law = toy_pair
    tokens, info = sample_target(target, prompts=[prompt] * N, max_new_tokens=T, seed=3)
    assert info["target_calls"] == T
    assert chi_square_p_value(sequence_codes(tokens, V, T), law) > ALPHA


def _naive_multi_draft(p, q, drafts, generator):
    """Accept each draft with min(1, p/q) independently (SpecTr §1: not a valid coupling for n > 1)."""
    B, n = drafts.shape
    px, qx = p.gather(1, drafts), q.gather(1, drafts)
    u = torch.rand((B, n), generator=generator, dtype=p.dtype)
    hit = u * qx < px
    first = torch.argmax(hit.to(torch.int8), dim=1)
    any_hit = hit.any(dim=1)
    residual = torch.clamp(p - q, min=0)
    residual = torch.where(residual.sum(1, keepdim=True) > 0, residual, p)
    y = torch.multinomial(residual, 1, generator=generator).squeeze(1)
    tokens = torch.where(any_hit, drafts.gather(1, first[:, None]).squeeze(1), y)
    return tokens, torch.where(any_hit, first, torch.full_like(first, -1))


def test_the_law_test_detects_a_biased_verifier(toy_pair):
    draft, target, prompt, law = toy_pair
    result = decode(draft, target, _naive_multi_draft, 4, 2, prompts=[prompt] * N, max_new_tokens=T, seed=11)
    assert chi_square_p_value(sequence_codes(result.tokens, V, T), law) < ALPHA


def test_metrics_are_consistent(toy_pair):
    draft, target, prompt, _ = toy_pair
    L = 3
    result = decode(draft, target, "rrs", 2, L, prompts=[prompt] * 50, max_new_tokens=20, seed=2, collect=7)
    m = result.metrics
    assert m.target_calls >= 20 / (L + 1)
    assert m.tokens >= 50 * 20 and m.block_efficiency == pytest.approx(m.tokens / m.sequence_steps)
    # E[tau] = 1 + sum_j P(reach depth j+1): the reach counts must agree with the emitted tokens
    assert m.tokens == sum(m.reached_per_position) + round(m.acceptance_per_position[-1] * m.reached_per_position[-1])
    assert m.reached_per_position[0] == m.sequence_steps
    assert all(0.0 <= a <= 1.0 for a in m.acceptance_per_position)
    assert 0.0 <= m.verifier_time_share <= 1.0
    assert len(result.root_p) == 7 and result.root_p[0].shape == (V,)
    np.testing.assert_allclose(result.root_p[0].numpy(), target.law(prompt), rtol=1e-12)
    np.testing.assert_allclose(result.root_q[0].numpy(), draft.law(prompt), rtol=1e-12)


def test_identical_models_accept_everything(toy_pair):
    """p = q: every draft is accepted, so each step emits L + 1 tokens (block efficiency exactly L + 1)."""
    _, target, prompt, _ = toy_pair
    result = decode(target, target, "rrs", 2, 3, prompts=[prompt] * 10, max_new_tokens=8, seed=0)
    assert result.metrics.block_efficiency == 4.0
    assert result.metrics.acceptance_per_position == [1.0, 1.0, 1.0]


def test_seeded_runs_repeat(toy_pair):
    draft, target, prompt, _ = toy_pair
    a = decode(draft, target, "rrs", 3, 2, prompts=[prompt] * 5, max_new_tokens=9, seed=4).tokens
    b = decode(draft, target, "rrs", 3, 2, prompts=[prompt] * 5, max_new_tokens=9, seed=4).tokens
    assert a == b


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 0}, "n must be"),
        ({"L": 0}, "L must be"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"verifier": "nope"}, "unknown verifier"),
        ({"verifier": "bv"}, "block verifier"),
        ({"verifier": _rrs_wor_as_callable, "scheme": "spechub", "n": 3}, "n = 2"),
        ({"verifier": "optimal", "scheme": "greedy"}, "exact for 'iid' drafts only"),
        ({"scheme": "sideways"}, "unknown draft scheme"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"prompts": []}, "prompts is empty"),
    ],
)
def test_bad_input_is_refused(toy_pair, kwargs, match):
    from otlp.core.errors import InputError

    draft, target, prompt, _ = toy_pair
    args = {"verifier": "rrs", "n": 2, "L": 2, "prompts": [prompt], "max_new_tokens": 4} | kwargs
    with pytest.raises(InputError, match=match):
        decode(draft, target, **args)


def test_vocabulary_mismatch_and_oversized_step_are_refused(toy_pair):
    from otlp.core.errors import InputError, ModelTooLargeError

    _, target, prompt, _ = toy_pair
    other = TableLM.random(V + 1, 1, np.random.default_rng(0))
    with pytest.raises(InputError, match="vocabularies differ"):
        decode(other, target, "rrs", 2, 2, prompts=[prompt])
    with pytest.raises(ModelTooLargeError, match="decode step"):
        decode(target, target, "rrs", 64, 128, prompts=[prompt] * 8192)


def test_the_generator_lives_where_the_laws_do():
    """The loop draws on the target's device, where torch takes only that device's generators: a generator passed
    as the seed for another device is refused in one line (checked without a GPU: only the device types compare)."""
    from otlp.core.errors import InputError
    from otlp.decode.loop import _generator

    assert _generator(3, torch.device("cpu")).device.type == "cpu"
    with pytest.raises(InputError, match="seed is a torch.Generator on cpu, the models' laws are on cuda"):
        _generator(torch.Generator(), torch.device("cuda"))
