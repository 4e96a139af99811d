"""Engine parity: each adapter's engine rule (``method="rrs"`` / ``"target_only"``) agrees bit for bit with a pure
torch port of the engine's kernel (``ports.py``, written from the engines' sources) on random dyadic probabilities
and dyadic uniforms (no float ties), and ``method="optimal"`` makes the same decisions at one-child nodes."""

from __future__ import annotations

import pytest
import torch

from otlp.engines import flashinfer, sglang, vllm

from . import ports
from .helpers import dyadic_rows, dyadic_uniforms, tree_batch


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ngram", [False, True])
def test_vllm_matches_port(seed, ngram):
    g = torch.Generator().manual_seed(seed)
    B, V, K = 6, 17, 4
    num = [int(n) for n in torch.randint(0, K + 1, (B,), generator=g)]
    T = sum(num)
    target = dyadic_rows(g, (T,), V)
    draft = None if ngram else dyadic_rows(g, (T,), V)
    # drafts: half from q (accepted often), half uniform (rejected often)
    ids = torch.randint(0, V, (T,), generator=g)
    if draft is not None and T:
        ids = torch.where(torch.rand(T, generator=g) < 0.5, torch.multinomial(draft, 1, generator=g)[:, 0], ids)
    bonus = torch.randint(0, V, (B, 1), generator=g)
    greedy = torch.rand(B, generator=g) < 0.3
    u = dyadic_uniforms(g, (T,)).double()
    E = torch.empty(B, V).exponential_(generator=g)
    meta = type("M", (), dict(all_greedy=False, all_random=False, temperature=torch.where(greedy, 0.0, 1.0),
                              generators={}))()
    got = vllm.rejection_sample(ids, num, K, torch.tensor(num).cumsum(0), draft, target, bonus, meta,
                                uniform_probs=u, exponentials=E)
    want = ports.vllm_rejection_sample(ids, num, K, draft, target, bonus[:, 0], greedy, u, E)
    assert torch.equal(got, want)


def test_vllm_generators_replay():
    """Per-request generators: a seeded request's output is a function of its seed alone."""
    g = torch.Generator().manual_seed(1)
    B, V, K = 4, 33, 3
    num = [3, 0, 2, 3]
    target, draft = dyadic_rows(g, (8,), V), dyadic_rows(g, (8,), V)
    ids = torch.multinomial(draft, 1, generator=g)[:, 0]
    outs = []
    for rep in range(3):
        torch.manual_seed(100 + rep)  # the unseeded requests differ between repetitions
        meta = type("M", (), dict(all_greedy=False, all_random=True, temperature=torch.ones(B),
                                  generators={0: torch.Generator().manual_seed(7),
                                              3: torch.Generator().manual_seed(9)}))()
        outs.append(vllm.rejection_sample(ids, num, K, torch.tensor(num).cumsum(0), draft, target,
                                          torch.zeros(B, 1, dtype=torch.long), meta))
    for o in outs[1:]:
        assert torch.equal(o[0], outs[0][0]) and torch.equal(o[3], outs[0][3])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_flashinfer_matches_port(seed, stream, method):
    """FlashInfer's rule bit for bit; ``"optimal"`` (one-child nodes) the same decisions and draws on dyadic rows,
    its positions verified in place or on gathered rows as fewer requests remain (seed 0..3, 7 requests, 4 drafts)."""
    g = torch.Generator().manual_seed(seed)
    B, n, V = 7, 4, 19
    draft, target = dyadic_rows(g, (B, n), V), dyadic_rows(g, (B, n + 1), V)
    ids = torch.multinomial(draft.reshape(-1, V), 1, generator=g).reshape(B, n).int()
    u = dyadic_uniforms(g, (B, n + 2))
    acc0, emi0 = torch.randint(0, 5, (B,), generator=g).int(), torch.randint(0, 5, (B,), generator=g).int()
    acc, emi = acc0.clone(), emi0.clone()
    out, _, _ = flashinfer.chain_speculative_sampling(draft, ids, target, acc, emi, uniforms=u if stream else
                                                      torch.cat([u[:, :n], u[:, n + 1:]], dim=1), method=method)
    want, want_acc, want_emi = ports.flashinfer_chain(draft, ids, target, u)
    if stream:
        assert torch.equal(out, want)
        assert torch.equal(acc, acc0 + want_acc) and torch.equal(emi, emi0 + want_emi)
    else:  # coins and a final uniform: the same decisions; the final draw uses u[:, n + 1] on rejected rows only
        rejected = (want == -1).any(dim=1) | (emi - emi0 < n)
        assert torch.equal(emi, emi0 + want_emi)
        assert torch.equal(out[rejected], want[rejected])


def test_flashinfer_seed_offset_replay():
    g = torch.Generator().manual_seed(3)
    B, n, V = 5, 3, 11
    draft, target = dyadic_rows(g, (B, n), V), dyadic_rows(g, (B, n + 1), V)
    ids = torch.randint(0, V, (B, n), generator=g).int()
    a = flashinfer.chain_speculative_sampling(draft, ids, target, seed=5, offset=2)[0]
    b = flashinfer.chain_speculative_sampling(draft, ids, target, seed=torch.tensor([5]), offset=2)[0]
    assert torch.equal(a, b)


def _tree_inputs(g, bs, N, V, max_children=3, chain=False):
    if chain:
        nt = torch.tensor([[j + 1 if j + 1 < N else -1 for j in range(N)]] * bs)
        ns = torch.full((bs, N), -1)
        depth = torch.arange(N).expand(bs, N)
    else:
        nt, ns, depth = tree_batch(g, bs, N, max_children)
    target, draft = dyadic_rows(g, (bs, N), V), dyadic_rows(g, (bs, N), V)
    # each node's children drawn from its parent's q (some replaced by uniform tokens, rejected more often)
    cand = torch.randint(0, V, (bs, N), generator=g)
    for b in range(bs):
        for j in range(N):
            c = int(nt[b, j])
            while c >= 0:
                if torch.rand(1, generator=g) < 0.7:
                    cand[b, c] = int(torch.multinomial(draft[b, j], 1, generator=g))
                c = int(ns[b, c])
    S = int(depth.max()) + 1
    return dict(candidates=cand, retrive_index=torch.arange(bs * N).reshape(bs, N), retrive_next_token=nt,
                retrive_next_sibling=ns, uniform_samples=dyadic_uniforms(g, (bs, N)),
                uniform_samples_for_final_sampling=dyadic_uniforms(g, (bs,)), target_probs=target,
                draft_probs=draft), S


def _outputs(bs, N, S, fill=-7):
    return (torch.full((bs * N,), fill, dtype=torch.int32), torch.full((bs, S), fill, dtype=torch.int32),
            torch.full((bs,), fill, dtype=torch.int32))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.5, 0.75), (0.0, 0.0)])
def test_sglang_target_only_matches_port(seed, thresholds):
    g = torch.Generator().manual_seed(seed)
    bs, N, V = 5, 9, 13
    args, S = _tree_inputs(g, bs, N, V)
    args["draft_probs"] = torch.zeros_like(args["target_probs"])  # SGLang's scratch
    mine, theirs = _outputs(bs, N, S), _outputs(bs, N, S)
    scratch = args["draft_probs"].clone()
    sglang.tree_speculative_sampling_target_only(*mine, **args, threshold_single=thresholds[0],
                                                 threshold_acc=thresholds[1])
    ports.sglang_target_only(*theirs, args["candidates"], args["retrive_index"], args["retrive_next_token"],
                             args["retrive_next_sibling"], args["uniform_samples"],
                             args["uniform_samples_for_final_sampling"], args["target_probs"], scratch,
                             thresholds[0], thresholds[1])
    for a, b in zip(mine, theirs, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(args["draft_probs"], scratch)  # the scratch written where SGLang writes it


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_sglang_chain_matches_port(seed, method):
    """``chain_speculative_sampling`` and ``tree_speculative_sampling`` on the same chain (one child per node) both
    reproduce SGLang's chain kernel, for rrs and (one-child nodes: the same decisions) optimal."""
    g = torch.Generator().manual_seed(seed)
    bs, N, V = 6, 6, 15
    args, S = _tree_inputs(g, bs, N, V, chain=True)
    chain_args = dict(args, uniform_samples=args["uniform_samples"][:, :N - 1],
                      draft_probs=args["draft_probs"][:, :N - 1].contiguous())
    theirs = _outputs(bs, N, N)
    ports.sglang_chain(*theirs, args["candidates"], args["retrive_index"], chain_args["uniform_samples"],
                       args["uniform_samples_for_final_sampling"], args["target_probs"], chain_args["draft_probs"])
    mine = _outputs(bs, N, N)
    sglang.chain_speculative_sampling(*mine, **chain_args, method=method)
    for a, b in zip(mine, theirs, strict=True):
        assert torch.equal(a, b)
    tree = _outputs(bs, N, N)
    sglang.tree_speculative_sampling(*tree, **chain_args, method=method)  # [bs, N - 1] coins and rows: a chain
    for a, b in zip(tree, theirs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_cuda_matches_cpu(method):
    """Every adapter on CUDA tensors writes what it writes on the CPU for the same dyadic inputs and uniforms."""
    g = torch.Generator().manual_seed(5)
    bs, N, V = 6, 9, 13
    args, S = _tree_inputs(g, bs, N, V)
    cpu, gpu = _outputs(bs, N, S), tuple(t.cuda() for t in _outputs(bs, N, S))
    sglang.tree_speculative_sampling(*cpu, **args, method=method)
    sglang.tree_speculative_sampling(*gpu, **{k: v.cuda() for k, v in args.items()}, method=method)
    for a, b in zip(cpu, gpu, strict=True):
        assert torch.equal(a, b.cpu())
    B, n = 7, 4
    draft, target = dyadic_rows(g, (B, n), V), dyadic_rows(g, (B, n + 1), V)
    ids = torch.multinomial(draft.reshape(-1, V), 1, generator=g).reshape(B, n)
    u = dyadic_uniforms(g, (B, n + 2))
    a = flashinfer.chain_speculative_sampling(draft, ids, target, uniforms=u, method=method)
    b = flashinfer.chain_speculative_sampling(draft.cuda(), ids.cuda(), target.cuda(), uniforms=u.cuda(),
                                              method=method)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y.cpu())
    num = [4, 0, 2, 3]
    T = sum(num)
    vt, vd = dyadic_rows(g, (T,), V), dyadic_rows(g, (T,), V)
    vid = torch.multinomial(vd, 1, generator=g)[:, 0]
    vu, fu = dyadic_uniforms(g, (T,)).double(), dyadic_uniforms(g, (4,)).double()
    cu, bonus = torch.tensor(num).cumsum(0), torch.zeros(4, 1, dtype=torch.long)
    a = vllm.rejection_sample(vid, num, 4, cu, vd, vt, bonus, uniform_probs=vu, final_uniforms=fu, method=method)
    b = vllm.rejection_sample(vid.cuda(), num, 4, cu.cuda(), vd.cuda(), vt.cuda(), bonus.cuda(),
                              uniform_probs=vu.cuda(), final_uniforms=fu.cuda(), method=method)
    assert torch.equal(a, b.cpu())


@pytest.mark.parametrize("num", [[1, 1, 0, 1, 1], [3, 0, 2, 4, 1]])  # T <= B (every position's residual) and T > B
@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_vllm_final_uniforms_draw_the_residual(num, method):
    """``final_uniforms``: vLLM's accept decisions, the recovered token by the kernels' inverse CDF of (p - q)^+ at
    the request's final uniform (ports._sample_cdf on vLLM's rows); ``"optimal"`` (one-child positions) the same on
    dyadic rows, requests without drafts owning none of the ragged rows."""
    g = torch.Generator().manual_seed(sum(num))
    B, V, K = len(num), 11, 4
    T = sum(num)
    target, draft = dyadic_rows(g, (T,), V), dyadic_rows(g, (T,), V)
    ids = torch.randint(0, V, (T,), generator=g)
    u, f = dyadic_uniforms(g, (T,)).double(), dyadic_uniforms(g, (B,)).double()
    if method == "optimal":  # off the grid: vLLM accepts at p / q = u, the single-draft test u q < p does not;
        u = u + 2.0 ** -14  # and drafts of q(x) > 0 (vLLM rejects q(x) = 0, a draft the optimal rule never sees)
        ids = torch.where(draft.gather(1, ids[:, None])[:, 0] > 0, ids, draft.argmax(dim=1))
    bonus = torch.randint(0, V, (B, 1), generator=g)
    got = vllm.rejection_sample(ids, num, K, torch.tensor(num).cumsum(0), draft, target, bonus, uniform_probs=u,
                                final_uniforms=f, method=method)
    want = torch.full((B, K + 1), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(num):
        for j in range(n + 1):
            t = start + j
            if j == n:
                want[b, j] = int(bonus[b, 0])
            elif draft[t, ids[t]] > 0 and target[t, ids[t]] / draft[t, ids[t]] >= u[t]:  # vLLM's test
                want[b, j] = int(ids[t])
                continue
            else:
                relu = torch.clamp(target[t] - draft[t], min=0)
                want[b, j] = ports._sample_cdf(relu, float(f[b]) * float(relu.sum()))
            break
        start += n
    assert torch.equal(got, want)
