"""Laws of the adapters' rules: the output law is the target's (chi-square, every method, chains and trees with 2-3
children per node), the root acceptance is the closed form for rrs and alpha* for optimal, and optimal accepts at
least as often as rrs; the verifiers' explicit-uniforms paths keep the target law.

False-failure rate: every chi-square check rejects at p < 1e-4 and every acceptance check at |z| > 4.4 (two-sided
1e-5); this file makes about 150 checks, so a fresh seed fails one with probability below 1.5%. The seeds are fixed,
so the outcome is reproducible."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import otlp
from otlp.engines import flashinfer, sglang, vllm
from otlp.verifiers import get

P_MIN, Z_MAX = 1e-4, 4.4


def _assert_law(tokens: torch.Tensor, law: np.ndarray, what: str) -> None:
    counts = np.bincount(tokens.numpy(), minlength=law.size).astype(float)
    expected = law * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0, f"{what}: tokens outside the target's support"
    if counts.sum() == 0 or keep.sum() <= 1:  # one possible token: the support check is the whole test
        return
    p_value = chisquare(counts[keep], expected[keep]).pvalue
    assert p_value > P_MIN, f"{what}: chi-square p = {p_value:.3g}"


def _assert_rate(hits: torch.Tensor, rate: float, what: str) -> None:
    n = hits.numel()
    z = (float(hits.float().mean()) - rate) / max(np.sqrt(rate * (1 - rate) / n), 1e-12)
    assert abs(z) < Z_MAX, f"{what}: rate {float(hits.float().mean()):.5f} vs {rate:.5f} (z = {z:.2f})"


def _rows(rng: np.random.Generator, k: int, V: int) -> np.ndarray:
    x = rng.dirichlet(np.ones(V) * 0.8, size=k)
    x[:, rng.integers(V)] += 0.05  # some shared mass, so drafts are accepted often but not always
    return x / x.sum(1, keepdims=True)


# ------------------------------------------------------------------------------------------------------- chains
@pytest.mark.parametrize("engine", ["flashinfer", "vllm", "sglang"])
@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_chain_law(engine, method):
    """Draft x_0 ~ q_0, x_1 ~ q_1 per request: the first output token ~ p_0; given x_0 accepted, the second ~ p_1."""
    rng = np.random.default_rng(11)
    V, B, n = 6, 30000, 2
    P, Q = _rows(rng, n + 1, V), _rows(rng, n, V)
    g = torch.Generator().manual_seed(12)
    x = torch.stack([torch.multinomial(torch.tensor(Q[i]), B, replacement=True, generator=g) for i in range(n)], 1)
    target = torch.tensor(P, dtype=torch.float32).expand(B, n + 1, V).contiguous()
    draft = torch.tensor(Q, dtype=torch.float32).expand(B, n, V).contiguous()
    if engine == "flashinfer":
        out = flashinfer.chain_speculative_sampling(draft, x, target, generator=g, method=method)[0]
    elif engine == "vllm":
        bonus = torch.multinomial(torch.tensor(P[n]), B, replacement=True, generator=g)[:, None]
        torch.manual_seed(13)
        out = vllm.rejection_sample(x.reshape(-1), [n] * B, n, torch.full((B,), n).cumsum(0),
                                    draft.reshape(-1, V), target[:, :n].reshape(-1, V), bonus, method=method)
    else:
        N = n + 1
        predicts = torch.full((B * N,), -1, dtype=torch.int32)
        accept_index = torch.full((B, N), -1, dtype=torch.int32)
        num = torch.zeros(B, dtype=torch.int32)
        cand = torch.cat([torch.zeros(B, 1, dtype=torch.long), x], 1)
        sglang.chain_speculative_sampling(
            predicts, accept_index, num, cand, torch.arange(B * N).reshape(B, N), None, None,
            torch.rand(B, n, generator=g), torch.rand(B, generator=g), target, draft, method=method)
        out = predicts.reshape(B, N)
    _assert_law(out[:, 0].long(), P[0], f"{engine}/{method} first token")
    accepted = out[:, 0] == x[:, 0]
    _assert_law(out[accepted, 1].long(), P[1], f"{engine}/{method} second token")
    _assert_rate(accepted, float(np.minimum(P[0], Q[0]).sum()), f"{engine}/{method} first acceptance")


# -------------------------------------------------------------------------------------------------------- trees
def _tree_case(method: str, m_root: int, m_child: int, B: int, seed: int):
    """B requests, each a root with m_root children, each child with m_child children (N = 1 + m_root (1 + m_child)).
    Node rows depend on the token only: p_0 = P0, q_0 = Q0; a child with token t has p = P1[t], q = Q1[t]; leaves
    p = P1[t]. Children drawn i.i.d. from their parent's q (without replacement for rrs_wor)."""
    rng = np.random.default_rng(seed)
    V = 6
    P0, Q0 = _rows(rng, 1, V)[0], _rows(rng, 1, V)[0]
    P1, Q1 = _rows(rng, V, V), _rows(rng, V, V)
    g = torch.Generator().manual_seed(seed)
    N = 1 + m_root * (1 + m_child)
    wor = method in ("rrs_wor", "optimal_wor", "target_only")  # SGLang's rule is exact for distinct children

    def children(q_rows: torch.Tensor, m: int) -> torch.Tensor:  # [B, V] -> [B, m]
        return torch.multinomial(q_rows, m, replacement=not wor, generator=g)

    first = torch.full((N,), -1)
    sibling = torch.full((N,), -1)
    kids_of_root = [1 + i * (1 + m_child) for i in range(m_root)]
    first[0] = kids_of_root[0]
    for i, c in enumerate(kids_of_root):
        sibling[c] = kids_of_root[i + 1] if i + 1 < m_root else -1
        grand = [c + 1 + k for k in range(m_child)]
        first[c] = grand[0]
        for k, gc in enumerate(grand):
            sibling[gc] = grand[k + 1] if k + 1 < m_child else -1
    cand = torch.zeros((B, N), dtype=torch.long)
    cand[:, kids_of_root] = children(torch.tensor(Q0).expand(B, V), m_root)
    target = torch.zeros((B, N, V))
    draft = torch.zeros((B, N, V))
    target[:, 0], draft[:, 0] = torch.tensor(P0, dtype=torch.float32), torch.tensor(Q0, dtype=torch.float32)
    P1t, Q1t = torch.tensor(P1, dtype=torch.float32), torch.tensor(Q1, dtype=torch.float32)
    for c in kids_of_root:
        t = cand[:, c]
        target[:, c], draft[:, c] = P1t[t], Q1t[t]
        grand = list(range(c + 1, c + 1 + m_child))
        cand[:, grand] = children(Q1t[t], m_child)
        for gc in grand:
            target[:, gc] = P1t[cand[:, gc]]
    args = dict(candidates=cand, retrive_index=torch.arange(B * N).reshape(B, N),
                retrive_next_token=first.expand(B, N).contiguous(),
                retrive_next_sibling=sibling.expand(B, N).contiguous(), uniform_samples=torch.rand(B, N, generator=g),
                uniform_samples_for_final_sampling=torch.rand(B, generator=g),
                target_probs=target, draft_probs=draft)
    out = (torch.full((B * N,), -1, dtype=torch.int32), torch.full((B, 3), -1, dtype=torch.int32),
           torch.zeros(B, dtype=torch.int32))
    if method == "target_only":
        args["draft_probs"] = torch.zeros_like(draft)  # SGLang's zeroed scratch, not q
    sglang.tree_speculative_sampling(*out, **args, method=method)
    return out, args, (P0, Q0, P1)


@pytest.mark.parametrize("m_root, m_child", [(2, 3), (3, 2)])
def test_tree_law_target_only_distinct_children(m_root, m_child):
    """SGLang's q-free rule (thresholds 1, 1) with distinct children: child k is accepted with probability p(c_k)
    and the residual is p off the children, so the law is p and the root acceptance is E[sum_k p(c_k)]."""
    B = 24000
    (predicts, accept_index, num), args, (P0, Q0, P1) = _tree_case("target_only", m_root, m_child, B, seed=41)
    N = args["candidates"].shape[1]
    first = predicts.reshape(B, N)[:, 0].long()
    _assert_law(first, P0, "target_only root token")
    kids = args["retrive_next_token"][0, 0]
    siblings = [int(kids)]
    while int(args["retrive_next_sibling"][0, siblings[-1]]) >= 0:
        siblings.append(int(args["retrive_next_sibling"][0, siblings[-1]]))
    covered = torch.tensor(P0)[args["candidates"][:, siblings]].sum(1)  # [B] sum_k p(c_k)
    rate, hits = float(covered.mean()), (num >= 1).double()
    z = (float(hits.mean()) - rate) / float(((covered * (1 - covered)).sum() ** 0.5 / B).clamp(min=1e-12))
    assert abs(z) < Z_MAX, f"target_only root acceptance {float(hits.mean()):.5f} vs {rate:.5f}"
    child = accept_index[:, 1].long() % N
    second = predicts.reshape(B, N).gather(1, child.clamp(min=0)[:, None])[:, 0].long()
    for t in range(P0.size):
        rows = (num >= 1) & (first == t)
        if int(rows.sum()) > 500:
            _assert_law(second[rows], P1[t], f"target_only second token after {t}")


@pytest.mark.parametrize("method", ["rrs", "optimal", "rrs_wor", "optimal_wor"])
@pytest.mark.parametrize("m_root, m_child", [(2, 3), (3, 2)])
def test_tree_law_and_root_acceptance(method, m_root, m_child):
    B = 24000
    (predicts, accept_index, num), args, (P0, Q0, P1) = _tree_case(method, m_root, m_child, B, seed=m_root * 10 + 1)
    N = args["candidates"].shape[1]
    first = predicts.reshape(B, N)[:, 0].long()
    _assert_law(first, P0, f"{method} root token")
    draft = otlp.WithoutReplacement(Q0, m_root) if method.endswith("_wor") else otlp.IID(Q0, m_root)
    alpha = (otlp.optimal_acceptance(P0, draft) if method.startswith("optimal")
             else get(method).verifier_acceptance(P0, draft))
    _assert_rate(num >= 1, alpha, f"{method} root acceptance")
    # second token given the accepted child's token t: the target after t, P1[t]
    child = accept_index[:, 1].long() % N
    second = predicts.reshape(B, N).gather(1, child.clamp(min=0)[:, None])[:, 0].long()
    for t in range(P0.size):
        rows = (num >= 1) & (first == t)
        if int(rows.sum()) > 500:
            _assert_law(second[rows], P1[t], f"{method} second token after {t}")


@pytest.mark.parametrize("m_root, m_child", [(2, 3), (3, 2)])
def test_optimal_wor_on_a_device_is_the_host_rule(monkeypatch, m_root, m_child):
    """The adapters' device branch for ``optimal_wor`` (every node row through the static route, a childless row as a
    one-child node at token 0 whose result is replaced), forced on CPU tensors, returns the host branch's outputs
    for the same trees and uniforms."""
    from otlp.engines import _common

    B = 400
    host, _, _ = _tree_case("optimal_wor", m_root, m_child, B, seed=7)
    monkeypatch.setattr(_common, "static_wor", lambda rows: True)
    static, _, _ = _tree_case("optimal_wor", m_root, m_child, B, seed=7)
    for a, b in zip(host, static, strict=True):
        assert torch.equal(a, b)


def test_optimal_accepts_at_least_rrs():
    rng = np.random.default_rng(5)
    for _ in range(20):
        p, q = _rows(rng, 1, 8)[0], _rows(rng, 1, 8)[0]
        for m in (2, 3):
            assert otlp.optimal_acceptance(p, otlp.IID(q, m)) >= get("rrs").acceptance(p, otlp.IID(q, m)) - 1e-12
    B = 24000
    rates = {}
    for method in ("rrs", "optimal"):
        (_, _, num), _, (P0, Q0, _) = _tree_case(method, 3, 2, B, seed=31)
        rates[method] = float((num >= 1).float().mean())
    assert rates["optimal"] >= rates["rrs"] - Z_MAX * np.sqrt(2 * 0.25 / B)


# ------------------------------------------------------------------------------------------ verifiers' uniforms
UNIFORM_VERIFIERS = ["sps", "rrs", "rrs_wor", "kseq", "spechub", "is", "weighted_is", "greedy", "optimal",
                     "optimal_wor", "optimal_paths"]


def _uniform_case(name: str, V: int = 7, n: int = 3, B: int = 30000, seed: int = 3):
    rng = np.random.default_rng(seed)
    p, q = _rows(rng, 2, V)
    v = get(name)
    n = v.fixed_n or (2 if name == "optimal_paths" else n)  # optimal_paths at n >= 3 plans row by row (slow)
    draft = v.make_draft(q, n)
    return v, p, q, draft, rng


@pytest.mark.parametrize("name", UNIFORM_VERIFIERS)
def test_verifier_uniforms_keep_the_target_law(name):
    """Drafts from the rule's own scheme, one coin and one final uniform per row: the output law is p and the
    rule's acceptance is its exact verifier acceptance."""
    v, p, q, draft, rng = _uniform_case(name)
    B, V = 30000, p.size
    drafts = torch.from_numpy(draft.sample(B, rng)).long()
    P = torch.tensor(p, dtype=torch.float32).expand(B, V).contiguous()
    Q = torch.tensor(q, dtype=torch.float32).expand(B, V).contiguous()
    u = torch.rand(B, 2, generator=torch.Generator().manual_seed(4))
    tokens, index = v.sample(P, Q, drafts, uniforms=u)
    _assert_law(tokens, p, f"{name} with uniforms")
    _assert_rate(index >= 0, v.verifier_acceptance(p, draft), f"{name} acceptance with uniforms")


@pytest.mark.parametrize("name", UNIFORM_VERIFIERS)
def test_verifier_uniforms_conditional_law(name):
    """For a fixed drafted tuple omega the uniforms path draws from the rule's exact pi(. | omega)
    (``conditional``): the one coin decides the node with the rule's outcome law."""
    v, p, q, draft, rng = _uniform_case(name, seed=8)
    B, V = 20000, p.size
    omegas = draft.sample(3, rng)
    laws, _ = v.conditional(p, draft, omegas)
    P = torch.tensor(p, dtype=torch.float32).expand(B, V).contiguous()
    Q = torch.tensor(q, dtype=torch.float32).expand(B, V).contiguous()
    for k, omega in enumerate(omegas):
        drafts = torch.from_numpy(omega).long().expand(B, omega.size).contiguous()
        u = torch.rand(B, 2, generator=torch.Generator().manual_seed(10 + k))
        tokens, _ = v.sample(P, Q, drafts, uniforms=u)
        _assert_law(tokens, np.maximum(laws[k], 0.0) / np.maximum(laws[k], 0.0).sum(), f"{name} given {omega}")


def test_every_registered_verifier_has_an_explicit_uniforms_path():
    """Every rule of the zoo takes the engines' randomness: the single-token rules ``uniforms [B, 2]`` (tested
    above), the block rules ``[B, UNIFORM_COLUMNS]`` (tests/multistep/test_uniforms.py)."""
    import inspect

    from otlp import verifiers

    block = {name for name in verifiers.NAMES if getattr(get(name), "kind", None) == "multistep"}
    assert block == {"bv", "gbv", "optimal_block"}
    assert set(UNIFORM_VERIFIERS) | block == set(verifiers.NAMES)
    for name in verifiers.NAMES:
        assert "uniforms" in inspect.signature(get(name).sample).parameters, name
