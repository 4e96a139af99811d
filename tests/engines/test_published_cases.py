"""Each engine's published cases, rebuilt exactly: vLLM's greedy cases (tests/v1/sample/test_rejection_sampler.py),
FlashInfer's docstring example and one-hot test (tests/utils/test_sampling.py), sgl-kernel's two tree cases
(sgl-kernel/tests/speculative/test_speculative_sampling.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from otlp.engines import flashinfer, sglang, vllm

PH = vllm.PLACEHOLDER_TOKEN_ID


def _vllm_greedy(spec_tokens, output_tokens, method="rrs"):
    """vLLM's ``create_logits_tensor`` (100 at the target token, -100 elsewhere, V = 100) and its greedy call."""
    V = 100
    rows = [t[:-1] for t in output_tokens]
    logits = torch.full((sum(map(len, rows)), V), -100.0)
    at = 0
    for r in rows:
        for j, tok in enumerate(r):
            logits[at + j, tok] = 100.0
        at += len(r)
    num = [len(s) for s in spec_tokens]
    meta = SimpleNamespace(all_greedy=True, all_random=False, temperature=None, generators={})
    return vllm.rejection_sample(
        torch.tensor([t for s in spec_tokens for t in s], dtype=torch.int32), num, max(num), torch.tensor(
            num).cumsum(0), None, logits, torch.tensor([[t[-1]] for t in output_tokens]), meta, method=method)


@pytest.mark.parametrize("method", ["rrs", "optimal"])
@pytest.mark.parametrize("spec_tokens, output_tokens, expected", [
    ([[1, 2, 3]], [[1, 2, 3, 4]], [[1, 2, 3, 4]]),  # test_perfect_match
    ([[1, 2, 3]], [[1, 5, 3, 4]], [[1, 5, PH, PH]]),  # test_early_mismatch
    ([[1, 2], [3]], [[1, 2, 5], [3, 4]], [[1, 2, 5], [3, 4, PH]]),  # test_multiple_sequences
    ([[1]], [[1, 2]], [[1, 2]]),  # test_single_token_sequence
    ([[]], [[5]], [[5]]),  # test_empty_sequence
    ([[1, 2, 3], [4, 5, 6]], [[1, 2, 7, 6], [4, 8, 6, 9]], [[1, 2, 7, PH], [4, 8, PH, PH]]),  # multiple mismatches
    ([[1, 2]], [[1, 2, 3]], [[1, 2, 3]]),  # test_parametrized_cases
    ([[1]], [[2, 3]], [[2, PH]]),
    ([[1, 2], [3, 4]], [[1, 5, 6], [3, 4, 7]], [[1, 5, PH], [3, 4, 7]]),
])
def test_vllm_greedy_cases(spec_tokens, output_tokens, expected, method):
    out = _vllm_greedy(spec_tokens, output_tokens, method)
    assert out.dtype == torch.int32
    assert out.tolist() == expected


@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_flashinfer_docstring_example(method):
    draft_probs = torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.2, 0.3, 0.4, 0.1]]])
    draft_token_ids = torch.tensor([[2, 1]], dtype=torch.int32)
    target_probs = torch.tensor([[[0.0, 0.1, 0.6, 0.3], [1.0, 0.0, 0.0, 0.0], [0.7, 0.1, 0.1, 0.1]]])
    for seed in range(5):  # deterministic: every coin gives the same answer
        torch.manual_seed(seed)
        out, accepted, emitted = flashinfer.chain_speculative_sampling(draft_probs, draft_token_ids, target_probs,
                                                                       method=method)
        assert out.tolist() == [[2, 0, -1]] and out.dtype == torch.int32
        assert accepted.tolist() == [1] and emitted.tolist() == [1]


@pytest.mark.parametrize("batch_size, vocab_size, n", [(1, 111, 1), (99, 111, 3), (7, 3000, 5), (3, 32000, 7)])
def test_flashinfer_onehot_targets(batch_size, vocab_size, n):
    """FlashInfer's one-hot case: a target that is one-hot on the drafts accepts them all; the output equals the
    target's ids (the bonus from the last one-hot row), and the counters are incremented in place."""
    g = torch.Generator().manual_seed(batch_size * 7 + n)
    draft_probs = F.softmax(torch.randn(batch_size, n, vocab_size, generator=g), dim=-1)
    draft_ids = torch.multinomial(draft_probs.reshape(-1, vocab_size), 1, generator=g).reshape(batch_size, n)
    target_ids = torch.cat([draft_ids, torch.randint(0, vocab_size, (batch_size, 1), generator=g)], dim=1)
    target_probs = F.one_hot(target_ids, vocab_size).float()
    accepted = torch.full((batch_size,), 3, dtype=torch.int32)
    emitted = torch.full((batch_size,), 2, dtype=torch.int32)
    out, acc, emi = flashinfer.chain_speculative_sampling(draft_probs, draft_ids.int(), target_probs, accepted,
                                                          emitted, generator=g)
    assert torch.equal(out, target_ids.int())
    assert acc is accepted and emi is emitted  # the caller's counters, incremented in place
    assert accepted.tolist() == [3 + n] * batch_size and emitted.tolist() == [2 + n] * batch_size


@pytest.mark.parametrize("threshold_single, threshold_acc, expected_predicts, expected_accept_index, expected_num", [
    (1, 1, [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18], [[0, 3, 4, 5], [6, 10, 11, -1]], [3, 2]),
    (0, 0, [1, 2, 18, -1, -1, -1, 11, -1, -1, -1, 12, 18], [[0, 1, 2, -1], [6, 10, 11, -1]], [2, 2]),
])
def test_sglang_tree_cases(threshold_single, threshold_acc, expected_predicts, expected_accept_index, expected_num):
    candidates = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    retrive_index = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]])
    next_token = torch.tensor([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]])
    next_sibling = torch.tensor([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]])
    logits = torch.full((2, 6, 20), 1.0)
    logits[0, 0, 3] = logits[0, 3, 4] = logits[0, 4, 5] = logits[1, 0, 11] = logits[1, 4, 12] = 10
    for i in range(2):
        for j in range(6):
            if logits[i, j].max() < 10:
                logits[i, j, 18] = 10
    target_probs = F.softmax(logits / 0.01, dim=-1)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        predicts = torch.full((12,), -1, dtype=torch.int32)
        accept_index = torch.full((2, 4), -1, dtype=torch.int32)
        accept_token_num = torch.zeros(2, dtype=torch.int32)
        draft_probs = torch.zeros_like(target_probs)
        sglang.tree_speculative_sampling_target_only(
            predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num, candidates=candidates,
            retrive_index=retrive_index, retrive_next_token=next_token, retrive_next_sibling=next_sibling,
            uniform_samples=torch.rand(2, 6, generator=g),
            uniform_samples_for_final_sampling=torch.rand(2, generator=g),
            target_probs=target_probs, draft_probs=draft_probs, threshold_single=threshold_single,
            threshold_acc=threshold_acc, deterministic=True)
        assert predicts.tolist() == expected_predicts
        assert accept_index.tolist() == expected_accept_index
        assert accept_token_num.tolist() == expected_num
