"""The Hugging Face adapter on a tiny randomly initialised GPT-2 saved to tmp_path (nothing is downloaded)."""

from __future__ import annotations

import pytest
import torch

from otlp.core.errors import InputError

transformers = pytest.importorskip("transformers", reason="the HF adapter needs the optional transformers package")

from otlp.decode.hf import HFCausalLM  # noqa: E402
from otlp.decode.loop import decode  # noqa: E402

V = 13


def _save_tiny_gpt2(path, seed):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=V, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(path)
    return model


def test_batched_logits_equal_single_forward_passes(tmp_path):
    reference = _save_tiny_gpt2(tmp_path / "m", 0)
    lm = HFCausalLM.from_pretrained(tmp_path / "m")
    assert lm.vocab_size == V and lm.bos_id == 0
    prefixes = [[0, 3, 4], [0], [0, 5, 6, 7, 8, 9], [0, 3, 4]]
    logits = lm.next_token_logits(prefixes)  # one right-padded pass over 3 distinct prefixes
    assert logits.shape == (4, V)
    with torch.no_grad():
        for row, prefix in zip(logits, prefixes, strict=True):
            torch.testing.assert_close(row, reference(torch.tensor([prefix])).logits[0, -1], rtol=1e-5, atol=1e-5)
    passes = lm.forward_passes
    assert torch.equal(lm.next_token_logits([[0, 5, 6, 7, 8, 9]])[0], logits[2])  # cached
    assert lm.forward_passes == passes
    padded = torch.tensor([[0, 3, 4, 0], [0, 0, 0, 0]])
    assert torch.equal(lm.next_token_logits(padded, torch.tensor([3, 1])), logits[:2])


def test_decode_with_two_hf_models(tmp_path):
    _save_tiny_gpt2(tmp_path / "draft", 1)
    _save_tiny_gpt2(tmp_path / "target", 2)
    draft, target = HFCausalLM.from_pretrained(tmp_path / "draft"), HFCausalLM.from_pretrained(tmp_path / "target")
    result = decode(draft, target, "rrs", 2, 3, prompts=[[0], [0, 4, 5]], max_new_tokens=12, seed=0)
    assert [len(t) for t in result.tokens] == [12, 12]
    assert all(0 <= t < V for row in result.tokens for t in row)
    assert 1.0 <= result.metrics.block_efficiency <= 4.0


def test_local_paths_only(tmp_path):
    with pytest.raises(InputError, match="local model directory"):
        HFCausalLM.from_pretrained(tmp_path / "does-not-exist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="config.json"):
        HFCausalLM.from_pretrained(tmp_path / "empty")
    _save_tiny_gpt2(tmp_path / "m", 0)
    lm = HFCausalLM.from_pretrained(tmp_path / "m")
    with pytest.raises(InputError, match="non-empty"):
        lm.next_token_logits([[]])
    with pytest.raises(InputError, match="token ids"):
        lm.next_token_logits([[0, V]])


def test_decode_with_two_hf_models_through_the_sglang_adapter(tmp_path):
    """The HF path's steps through the SGLang-style adapter (otlp decode --engine sglang): the tokens of the loop's
    own walk with the same uniforms (tests/decode/test_engine_step.py has the laws)."""
    _save_tiny_gpt2(tmp_path / "draft", 1)
    _save_tiny_gpt2(tmp_path / "target", 2)
    draft, target = HFCausalLM.from_pretrained(tmp_path / "draft"), HFCausalLM.from_pretrained(tmp_path / "target")
    kw = dict(prompts=[[0], [0, 4, 5], [0, 7]], max_new_tokens=12, seed=3)
    own = decode(draft, target, "optimal", 3, 3, uniforms=True, **kw)
    via = decode(draft, target, "optimal", 3, 3, engine="sglang", **kw)
    assert via.tokens == own.tokens and via.metrics.block_efficiency == own.metrics.block_efficiency
    assert via.metrics.target_tree == "cached"
