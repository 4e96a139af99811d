"""Hypothesis over the engine adapters (issue 44 asks the fuzz to cover them once they land): at least 10^4 generated
inputs over vLLM's, FlashInfer's and SGLang's contracts, valid and malformed. Malformed input gives a one-line
``InputError``; valid input gives the engine's outputs: int32 tokens in [0, V) with -1 placeholders only after the
emitted ones, counters that match the tokens, and the caller's input tensors unchanged."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import contract, count

torch = pytest.importorskip("torch")

from otlp.engines import flashinfer, sglang, vllm  # noqa: E402

FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
METHODS = ("rrs", "optimal")


@st.composite
def rows(draw, shape: tuple, V: int) -> torch.Tensor:
    """Probability rows ``[*shape, V]`` float32: random weights with zeros, or (rarely) a malformed entry."""
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    w = torch.rand((*shape, V), generator=g) * (torch.rand((*shape, V), generator=g) > 0.3)
    w[..., 0] += (w.sum(-1) == 0).float()
    x = w / w.sum(-1, keepdim=True)
    bad = draw(st.sampled_from([None] * 8 + ["nan", "negative", "unnormalised"]))
    if bad and x.numel():
        flat = x.view(-1)
        flat[draw(st.integers(0, flat.numel() - 1))] = {"nan": float("nan"), "negative": -0.5,
                                                         "unnormalised": 3.0}[bad]
    return x


def ids(draw, shape: tuple, V: int) -> torch.Tensor:
    high = V + draw(st.sampled_from([0, 0, 0, 0, 1, 100]))  # sometimes out of range
    low = draw(st.sampled_from([0, 0, 0, 0, -1]))
    return torch.randint(low, max(high, low + 1), shape, generator=torch.Generator().manual_seed(
        draw(st.integers(0, 2**31 - 1))))


def _check_chain_output(out: torch.Tensor, B: int, n: int, V: int) -> torch.Tensor:
    assert out.dtype == torch.int32 and tuple(out.shape) == (B, n + 1)
    emitted = (out != -1).int()
    assert bool(((out >= 0) & (out < V) | (out == -1)).all())
    assert bool((emitted[:, 1:] <= emitted[:, :-1]).all())  # -1 only after the emitted tokens
    return emitted.sum(1)


@settings(FUZZ, max_examples=3_500)
@given(data=st.data(), B=st.integers(0, 3), n=st.integers(1, 3), V=st.integers(1, 6),
       method=st.sampled_from(METHODS))
def test_flashinfer_chain(data, B, n, V, method):  # noqa: ANN001
    count("engines: flashinfer.chain_speculative_sampling")
    q = data.draw(rows((B, n), V))
    p = data.draw(rows((B, n + 1), V))
    drafts = ids(data.draw, (B, n), V)
    if data.draw(st.booleans()):
        drafts = drafts.int()
    uniforms = data.draw(st.sampled_from([None, "given", "short"]))
    u = None if uniforms is None else torch.rand((B, n + 2 if uniforms == "given" else n - 1 if n > 1 else 7))
    before = [t.clone() for t in (q, p, drafts)]
    accepted = torch.zeros(B, dtype=torch.int32)
    emitted = torch.zeros(B, dtype=torch.int32)
    with contract():
        out, acc, emi = flashinfer.chain_speculative_sampling(
            q, drafts, p, accepted, emitted, generator=torch.Generator().manual_seed(0), method=method, uniforms=u)
        kept = _check_chain_output(out, B, n, V)
        assert torch.equal(emi + 1, kept) and acc is accepted and emi is emitted  # counters in place
        assert bool((acc >= emi).all()) and bool((acc <= n).all())
    for t, b in zip((q, p, drafts), before, strict=True):
        assert torch.equal(t, b) or bool(t.isnan().any())


@settings(FUZZ, max_examples=3_500)
@given(data=st.data(), lengths=st.lists(st.integers(0, 3), min_size=0, max_size=3), V=st.integers(1, 6),
       method=st.sampled_from(METHODS), with_q=st.booleans(), greedy=st.booleans())
def test_vllm_rejection_sample(data, lengths, V, method, with_q, greedy):  # noqa: ANN001
    count("engines: vllm.rejection_sample")
    B, T = len(lengths), sum(lengths)
    k = max(lengths, default=0) + data.draw(st.sampled_from([0, 0, 1]))
    cu = torch.tensor(lengths, dtype=torch.int32).cumsum(0).int() if lengths else torch.zeros(0, dtype=torch.int32)
    if data.draw(st.integers(0, 9)) == 0 and B:  # ragged sizes that disagree
        cu = cu + 1
    target = data.draw(rows((T,), V))
    draft = data.draw(rows((T,), V)) if with_q else None
    draft_ids = ids(data.draw, (T,), V).int()
    bonus = ids(data.draw, (B, 1), V).int()
    temperature = torch.zeros(B) if greedy else torch.ones(B)
    meta = type("Meta", (), {"all_greedy": greedy and B > 0, "all_random": not greedy, "temperature": temperature,
                             "generators": {}})()
    before = target.clone()
    with contract():
        out = vllm.rejection_sample(draft_ids, lengths, k, cu, draft, target, bonus, meta, method=method)
        assert out.dtype == torch.int32 and tuple(out.shape) == (B, k + 1)
        assert bool(((out >= 0) & (out < V) | (out == -1)).all())
        for b, m in enumerate(lengths):  # at most m drafts and the bonus or a recovered token
            assert int((out[b] != -1).sum()) <= m + 1 and bool((out[b, m + 1:] == -1).all())
    assert torch.equal(target, before) or bool(target.isnan().any())


@settings(FUZZ, max_examples=3_500)
@given(data=st.data(), bs=st.integers(0, 2), N=st.integers(1, 5), V=st.integers(1, 6),
       method=st.sampled_from(("rrs", "optimal", "target_only")))
def test_sglang_tree(data, bs, N, V, method):  # noqa: ANN001
    count("engines: sglang.tree_speculative_sampling")
    from tests.engines.helpers import tree_batch

    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    next_token, next_sibling, depths = tree_batch(g, bs, N) if bs else (torch.zeros(0, N, dtype=torch.long),) * 3
    if data.draw(st.integers(0, 9)) == 0 and bs:  # a link out of range
        next_token[0, 0] = N + 3
    S = int(depths.max()) + 1 if bs else 1
    candidates = ids(data.draw, (bs, N), V)
    retrive_index = torch.arange(bs * N).view(bs, N)
    p = data.draw(rows((bs, N), V))
    q = data.draw(rows((bs, N), V)) if method != "target_only" else torch.zeros(bs, N, V)
    predicts = torch.full((bs * N,), -7, dtype=torch.int32)
    accept_index = torch.full((bs, S), -7, dtype=torch.int32)
    accept_num = torch.full((bs,), -7, dtype=torch.int32)
    coins, finals = torch.rand((bs, N), generator=g), torch.rand((bs,), generator=g)
    with contract():
        sglang.tree_speculative_sampling(predicts, accept_index, accept_num, candidates, retrive_index, next_token,
                                         next_sibling, coins, finals, p, q, method=method)
        for b in range(bs):
            k = int(accept_num[b])
            assert 0 <= k <= S - 1
            path = accept_index[b, : k + 1].long()
            assert int(path[0]) == b * N and bool((path >= b * N).all()) and bool((path < (b + 1) * N).all())
            written = predicts[b * N:(b + 1) * N]
            assert bool(((written >= 0) & (written < V) | (written == -7)).all())
            assert int((written != -7).sum()) == k + 1  # one token per node on the path: the drafts and the last draw
