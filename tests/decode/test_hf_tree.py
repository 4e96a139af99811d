"""The KV-cached tree pass (otlp.decode.hf_tree) on tiny random GPT-2, Llama, Qwen2 and Mistral models.

Every model is built in the test from a config (random weights), saved with save_pretrained to a temporary folder
and loaded through HFCausalLM.from_pretrained: nothing is downloaded. initializer_range is raised so that the
next-token laws are far from uniform and depend on the context (the law tests then have power).

- logits: every node of every cached tree pass (and every grown depth) equals a full forward pass over that
  node's prefix to 1e-5 (float32), over several steps with rows of different lengths, row drops and compaction;
  Mistral runs with a sliding window of 3 so the window is exercised;
- cache: after every commit each row holds len(sequence) - 1 tokens (the newest enters with the next pass),
  checked inside real decode runs;
- law: the emitted stream of the cached loop has the law of plain target sampling (chi-square, as in
  test_loop_law.py); the false-failure rate is stated there.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the cached tree pass needs the optional transformers")

from otlp.decode.hf import HFCausalLM  # noqa: E402
from otlp.decode.hf_tree import KVTreeCache  # noqa: E402
from otlp.decode.loop import decode  # noqa: E402

from .toy_models import chi_square_p_value, sequence_codes  # noqa: E402

V = 6
ALPHA = 1e-3  # per chi-square test; 6 law tests here: a correct loop fails one with probability < 0.6%
SMALL = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 16,
         "intermediate_size": 24, "max_position_embeddings": 64, "vocab_size": V, "bos_token_id": 0,
         "eos_token_id": 0, "pad_token_id": 0, "initializer_range": 0.5}
CONFIGS = {
    "gpt2": lambda: transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=V, n_positions=64,
                                            bos_token_id=0, eos_token_id=0, initializer_range=0.5),
    "llama": lambda: transformers.LlamaConfig(**SMALL),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL),
    "mistral": lambda: transformers.MistralConfig(**SMALL, sliding_window=3),
}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_tree")
    dirs = {}
    for seed, (name, make) in enumerate(CONFIGS.items()):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(make()).eval()
        model.save_pretrained(root / name)
        dirs[name] = root / name
    return dirs


def _load(model_dirs, name):
    return HFCausalLM.from_pretrained(model_dirs[name])


@torch.no_grad()
def _reference(lm, prefixes):
    """Next-token logits of each prefix from its own unpadded forward pass: [len(prefixes), V]."""
    return torch.stack([lm.model(input_ids=torch.tensor([p])).logits[0, -1, :V].float() for p in prefixes])


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_tree_pass_logits_equal_full_recompute(model_dirs, arch):
    lm = _load(model_dirs, arch)
    session = lm.tree_session()
    assert isinstance(session, KVTreeCache)
    assert session.window == (3 if arch == "mistral" else None)
    gen = torch.Generator().manual_seed(1)
    sequences = {0: [0, 1, 2, 3, 4], 1: [0, 5], 2: [0, 3, 1], 3: [0]}
    n, d = 3, 3
    for step in range(5):
        ids = sorted(sequences)
        contexts = [sequences[g] for g in ids]
        A = len(ids)
        drafts = torch.randint(0, V, (A, n, d), generator=gen)
        if step % 2:  # a draft-model step: root only, then one depth per pass
            nodes = session.tree(ids, contexts, drafts[:, :, :0])  # [A, n, 1, V]
            grown = [session.grow(drafts[:, :, j]) for j in range(d - 1)]  # [A, n, V] each
            got = torch.cat([nodes[:, 0, 0]] + [g.reshape(-1, V) for g in grown])
            want = _reference(lm, [c for c in contexts]
                              + [c + drafts[a, i, : j + 1].tolist() for j in range(d - 1)
                                 for a, c in enumerate(contexts) for i in range(n)])
            pushed = d - 1
        else:  # a target step: root and all n*d nodes in one pass
            nodes = session.tree(ids, contexts, drafts)  # [A, n, d + 1, V]
            got = nodes.reshape(-1, V)
            want = _reference(lm, [c + drafts[a, i, :j].tolist() for a, c in enumerate(contexts)
                                   for i in range(n) for j in range(d + 1)])
            pushed = d
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        # verification outcome: tau - 1 drafted tokens accepted along `path`, then one sampled token
        tau = torch.randint(1, pushed + 2, (A,), generator=gen)
        path = torch.randint(0, n, (A,), generator=gen)
        session.commit(tau, path)
        for a, g in enumerate(ids):
            k = int(tau[a]) - 1
            sequences[g] = sequences[g] + drafts[a, int(path[a]), :k].tolist() + [int(tau[a]) % V]
        assert session.cache_lengths == [len(sequences[g]) - 1 for g in ids]
        assert (session.slot_pos >= 0).sum(dim=1).tolist() == session.cache_lengths
        if step == 1:
            del sequences[1]  # a finished row leaves the batch
        if step == 2:
            session.compact()  # holes gathered away: the next passes must not change
            assert session.slot_pos.shape[1] == max(session.cache_lengths)


def test_positions_of_a_cached_step(model_dirs):
    """A target step pushes n*L + 1 positions whatever the context; the prompt is pushed once."""
    lm = _load(model_dirs, "llama")
    session = lm.tree_session()
    drafts = torch.zeros((1, 4, 3), dtype=torch.int64)
    session.tree([0], [list(range(1, 6)) * 4], drafts)  # prompt of 20 tokens
    assert session.positions == 20 + 4 * 3 and session.prompt_positions == 19
    session.commit(torch.tensor([2]), torch.tensor([1]))
    session.tree([0], [list(range(1, 6)) * 4 + [0, 1]], drafts)
    assert session.positions - 32 == 4 * 3 + 1
    with pytest.raises(Exception, match="not committed"):
        session.tree([0], [[1, 2]], drafts)


def _recording(lm):
    """Wrap lm.tree_session so the test sees each session and the contexts of its last tree()."""
    sessions = []
    make = lm.tree_session

    def tree_session():
        session = make()
        if session is not None:
            inner = session.tree

            def tree(ids, contexts, drafts):
                session.last = (list(ids), contexts)  # the loop's own sequence lists, extended in place
                return inner(ids, contexts, drafts)

            session.tree = tree
            sessions.append(session)
        return session

    lm.tree_session = tree_session
    return sessions


def test_cached_decode_matches_recompute_and_keeps_the_accepted_context(model_dirs):
    draft, target = _load(model_dirs, "gpt2"), _load(model_dirs, "qwen2")
    sessions = _recording(draft) + _recording(target)
    prompts = [[0, 1, 2, 3, 4, 5, 1], [0], [0, 2, 4]]
    checked = []

    def check(_):
        for session in sessions:
            ids, contexts = session.last
            assert session.cache_lengths == [len(c) - 1 for c in contexts]
        checked.append(1)

    n, L = 3, 3
    cached = decode(draft, target, "rrs", n, L, prompts=prompts, max_new_tokens=20, seed=3, progress=check)
    sessions.clear()  # the recompute run makes none
    plain = decode(draft, target, "rrs", n, L, prompts=prompts, max_new_tokens=20, seed=3, tree="recompute")
    assert cached.tokens == plain.tokens  # same laws (to float rounding), same random numbers
    m, r = cached.metrics, plain.metrics
    assert (m.draft_tree, m.target_tree, r.target_tree) == ("cached", "cached", "recompute")
    assert len(checked) == m.target_calls
    assert m.target_positions_per_step == n * L + 1
    assert m.target_prompt_positions == sum(len(p) - 1 for p in prompts)
    assert n * (L - 1) + 1 <= m.draft_positions_per_step <= n * (L - 1) + 2
    assert r.target_positions > 2 * m.target_positions  # every prefix recomputed
    assert m.target_positions_per_token == pytest.approx(m.target_positions / m.tokens)


def _exact_law(lm, prompt, T):
    """P(first T tokens = s) for s in V^T (lexicographic) from full recomputes."""
    prefixes = [prompt + list(np.unravel_index(c, (V,) * t)) for t in range(T) for c in range(V**t)]
    laws = torch.softmax(_reference(lm, [[int(x) for x in p] for p in prefixes]).double(), dim=-1).numpy()
    law, offset = np.ones(1), 0
    for t in range(T):
        law = (law[:, None] * laws[offset : offset + V**t]).reshape(-1)
        offset += V**t
    return law


@pytest.mark.parametrize(("draft_arch", "target_arch", "verifier", "n", "L"),
                         [("gpt2", "llama", "rrs", 2, 2), ("llama", "mistral", "optimal", 2, 1),
                          ("qwen2", "gpt2", "rrs_wor", 3, 2)])
def test_cached_stream_has_the_target_law(model_dirs, draft_arch, target_arch, verifier, n, L):
    """Two prompt groups of different lengths in one batch (so rows carry holes); T = 3 tokens span steps."""
    draft, target = _load(model_dirs, draft_arch), _load(model_dirs, target_arch)
    T, N = 3, 2000
    groups = [[0], [0, 4, 1, 5]]
    result = decode(draft, target, verifier, n, L, prompts=[groups[0]] * N + [groups[1]] * N, max_new_tokens=T,
                    seed=7)
    assert result.metrics.target_tree == "cached"
    for g, prompt in enumerate(groups):
        codes = sequence_codes(result.tokens[g * N : (g + 1) * N], V, T)
        p_value = chi_square_p_value(codes, _exact_law(target, prompt, T))
        assert p_value > ALPHA, f"{draft_arch}->{target_arch} {verifier} prompt {prompt}: p = {p_value:.2e}"


def test_the_law_test_has_power(model_dirs):
    """The same test rejects the law of another model (the draft's), so the passing tests above say something."""
    draft, target = _load(model_dirs, "gpt2"), _load(model_dirs, "llama")
    T, N, prompt = 3, 2000, [0]
    result = decode(draft, target, "rrs", 2, 2, prompts=[prompt] * N, max_new_tokens=T, seed=7)
    codes = sequence_codes(result.tokens, V, T)
    assert chi_square_p_value(codes, _exact_law(draft, prompt, T)) < ALPHA


class _IgnoresCustomMasks(torch.nn.Module):
    """A causal LM whose forward drops 4D masks (as some implementations do): the probe must notice."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, attention_mask=None, cache=None, **kwargs):
        if attention_mask is not None and attention_mask.ndim == 4:
            attention_mask = None
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, cache=cache, **kwargs)


def test_a_model_without_custom_masks_falls_back_once(model_dirs):
    base = _load(model_dirs, "llama")
    lm = HFCausalLM(_IgnoresCustomMasks(base.model), name="mask-ignoring llama")
    with pytest.warns(RuntimeWarning, match="mask-ignoring llama: no cached tree pass .*recompute"):
        first = decode(lm, lm, "rrs", 2, 2, prompts=[[0, 1]], max_new_tokens=4, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per model: no second warning
        again = decode(lm, lm, "rrs", 2, 2, prompts=[[0, 1]], max_new_tokens=4, seed=0)
    assert first.metrics.target_tree == again.metrics.target_tree == "recompute"
    assert first.tokens == again.tokens


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("verifier", ["optimal", "rrs"])
def test_cuda_decode_keeps_laws_draws_and_verifier_on_the_device(model_dirs, verifier):
    """HF models on a GPU: every verifier call gets its p, q and drafts on the GPU, and the emitted stream has the
    target's law (the chi-square test above, against laws recomputed on the CPU)."""
    from otlp.verifiers import get

    devices = set()
    rule = get(verifier)

    def recording(p, q, drafts, generator):  # noqa: ANN001, ANN202
        devices.update(x.device.type for x in (p, q, drafts))
        devices.add(generator.device.type)
        return rule.sample(p, q, drafts, generator)

    recording.scheme = "iid"
    draft = HFCausalLM.from_pretrained(model_dirs["gpt2"], device="cuda")
    target = HFCausalLM.from_pretrained(model_dirs["llama"], device="cuda")
    T, N, prompt = 3, 2000, [0, 4, 1]
    result = decode(draft, target, recording, 3, 2, prompts=[prompt] * N, max_new_tokens=T, seed=7)
    assert devices == {"cuda"}
    assert result.metrics.target_tree == "cached"
    assert 0 < result.metrics.verifier_seconds < result.metrics.seconds
    codes = sequence_codes(result.tokens, V, T)
    assert chi_square_p_value(codes, _exact_law(_load(model_dirs, "llama"), prompt, T)) > ALPHA



@needs_cuda
def test_cuda_graphs_in_the_loop_emit_the_eager_loops_tokens(model_dirs):
    """The loop's default on a GPU (the optimal verifier replayed from CUDA graphs, one per call shape) emits the
    tokens of the loop that launches every call, for the same seed."""
    draft = HFCausalLM.from_pretrained(model_dirs["gpt2"], device="cuda")
    target = HFCausalLM.from_pretrained(model_dirs["qwen2"], device="cuda")
    prompts = [[0, 1, 2, 3, 4, 5, 1], [0], [0, 2, 4], [0, 3]]
    runs = [decode(draft, target, "optimal", 3, 3, prompts=prompts, max_new_tokens=24, seed=5, cuda_graphs=graphs)
            for graphs in (True, False)]
    assert runs[0].tokens == runs[1].tokens
    assert runs[0].metrics.verifier_calls == runs[1].metrics.verifier_calls > 0
