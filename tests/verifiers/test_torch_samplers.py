"""The batched torch samplers reproduce their exact laws (Monte Carlo, seeded).

Each check compares a frequency over N = 20 000 rows with its exact value within 4 standard deviations
(binomial). For a correct sampler one such comparison fails with probability about 6.3e-5; this file makes about
250 comparisons, so a correct implementation fails a fresh seed with probability below 2% (the seeds are fixed,
so the outcome is deterministic)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import otlp
from otlp.core.errors import InputError
from otlp.verifiers import get
from otlp.verifiers.exact import summary

from .instances import make_pair

N = 20_000
RULES = ("sps", "rrs", "rrs_wor", "kseq", "spechub", "is", "weighted_is", "greedy", "optimal")


def _case(name: str, seed: int, kind: str):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    v = get(name)
    n = 2 if v.fixed_n == 2 else 3
    while True:
        p, q = make_pair(rng, 5, kind)
        try:
            if name == "weighted_is":
                return v, p, v.make_draft(np.stack([q, make_pair(rng, 5, "dirichlet")[1], q]), n)
            return v, p, v.make_draft(q, n)
        except InputError:
            continue


def _run(v, p, draft, seed: int, device: str = "cpu"):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(seed)
    omegas = torch.as_tensor(draft.sample(N, rng), device=device)
    q = draft.qs if v.per_draft_q else draft.q
    q_t = torch.as_tensor(q, dtype=torch.float64, device=device)
    p_t = torch.as_tensor(p, dtype=torch.float64, device=device).expand(N, -1)
    gen = torch.Generator(device=device).manual_seed(seed)
    tokens, index = v.sample(p_t, q_t.expand(N, *q_t.shape), omegas, gen)
    return omegas.cpu(), tokens.cpu(), index.cpu()


def _within_4_sigma(freq: float, exact: float) -> bool:
    sigma = np.sqrt(max(exact * (1 - exact), 1e-12) / N)
    return abs(freq - exact) <= 4 * sigma + 1e-12


@pytest.mark.parametrize("name", RULES)
@pytest.mark.parametrize(("seed", "kind"), [(11, "dirichlet"), (12, "sparse"), (13, "ties")])
def test_sampler_matches_exact_law(name: str, seed: int, kind: str) -> None:
    v, p, draft = _case(name, seed, kind)
    exact = summary(v, p, draft)
    omegas, tokens, index = _run(v, p, draft, seed)
    assert tokens.shape == (N,) and index.shape == (N,)
    assert tokens.dtype == torch.int64 and index.dtype == torch.int64
    # an accepted index names the draft that was output
    acc = index >= 0
    assert torch.equal(omegas[acc, index[acc]], tokens[acc])
    freq = np.bincount(tokens.numpy(), minlength=p.size) / N
    assert np.all(freq[p == 0] == 0)
    for y in range(p.size):
        assert _within_4_sigma(freq[y], p[y]), (y, freq, p)
    member = float((omegas == tokens[:, None]).any(1).double().mean())
    assert _within_4_sigma(member, exact["acceptance"]), (member, exact["acceptance"])
    assert _within_4_sigma(float(acc.double().mean()), exact["verifier_acceptance"])


@pytest.mark.parametrize("name", RULES)
def test_sampler_is_deterministic_under_a_seeded_generator(name: str) -> None:
    v, p, draft = _case(name, 21, "dirichlet")
    a = _run(v, p, draft, 5)
    b = _run(v, p, draft, 5)
    assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])


def test_batch_rows_are_independent_instances() -> None:
    """Different (p, q) per row: each row's output law is its own p (K-SEQ and SpecHub, two rows interleaved)."""
    rng = np.random.default_rng(7)
    for name in ("kseq", "spechub"):
        v = get(name)
        pairs = [make_pair(rng, 4, "dirichlet") for _ in range(2)]
        drafts = [v.make_draft(q, 2) for _, q in pairs]
        half = N // 2
        omegas = np.empty((N, 2), dtype=np.int64)
        omegas[0::2] = drafts[0].sample(half, rng)
        omegas[1::2] = drafts[1].sample(half, rng)
        p_t = torch.as_tensor(np.stack([pairs[i % 2][0] for i in range(N)]))
        q_t = torch.as_tensor(np.stack([pairs[i % 2][1] for i in range(N)]))
        tokens, _ = v.sample(p_t, q_t, torch.as_tensor(omegas), torch.Generator().manual_seed(1))
        for r in range(2):
            freq = np.bincount(tokens[r::2].numpy(), minlength=4) / half
            sigma = np.sqrt(pairs[r][0] * (1 - pairs[r][0]) / half)
            assert np.all(np.abs(freq - pairs[r][0]) <= 4 * sigma + 1e-12)


def test_float32_inputs_run() -> None:
    v = get("rrs")
    p, q = make_pair(np.random.default_rng(0), 50, "dirichlet")
    draft = otlp.IID(q, 4)
    omegas = torch.as_tensor(draft.sample(64, np.random.default_rng(0)))
    tokens, index = v.sample(torch.as_tensor(p, dtype=torch.float32).expand(64, -1),
                             torch.as_tensor(q, dtype=torch.float32).expand(64, -1), omegas,
                             torch.Generator().manual_seed(0))
    assert tokens.min() >= 0 and tokens.max() < 50 and index.min() >= -1 and index.max() < 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", RULES)
def test_cuda_sampler_matches_exact_law(name: str) -> None:
    v, p, draft = _case(name, 31, "dirichlet")
    exact = summary(v, p, draft)
    omegas, tokens, index = _run(v, p, draft, 31, device="cuda")
    freq = np.bincount(tokens.numpy(), minlength=p.size) / N
    assert all(_within_4_sigma(freq[y], p[y]) for y in range(p.size))
    assert _within_4_sigma(float((index >= 0).double().mean()), exact["verifier_acceptance"])


@pytest.mark.parametrize("V", [4, 10_000])
@pytest.mark.parametrize("name", ["sps", "rrs", "rrs_wor", "kseq", "spechub", "is", "weighted_is", "greedy", "optimal"])
def test_an_empty_batch_gives_empty_outputs(name: str, V: int) -> None:
    """B = 0 rows: every token-level sampler returns two empty tensors (optimal and the IS rules used to fail in
    their host solves; V = 10,000 takes the host's large-vocabulary paths, such as the two-level residual draw)."""
    v = get(name)
    n = 2
    q = torch.zeros(0, n, V, dtype=torch.float64) if v.per_draft_q else torch.zeros(0, V, dtype=torch.float64)
    tokens, index = v.sample(torch.zeros(0, V, dtype=torch.float64), q, torch.zeros(0, n, dtype=torch.long),
                             torch.Generator().manual_seed(0))
    assert tokens.shape == (0,) and index.shape == (0,)


@pytest.mark.parametrize("name", RULES)
def test_the_callers_tensors_are_not_written(name: str) -> None:
    """The sequential rules update their residuals in place: on their own buffers, never on p or q (contiguous or
    expanded views of one row)."""
    v, p, draft = _case(name, 41, "dirichlet")
    q = draft.qs if v.per_draft_q else draft.q
    rng = np.random.default_rng(0)
    omegas = torch.as_tensor(draft.sample(64, rng))
    for expand in (False, True):
        p_t = torch.as_tensor(p).expand(64, -1)
        q_t = torch.as_tensor(q).expand(64, *q.shape)
        if not expand:
            p_t, q_t = p_t.clone(), q_t.clone()
        p0, q0 = p_t.clone(), q_t.clone()
        v.sample(p_t, q_t, omegas, torch.Generator().manual_seed(0))
        assert torch.equal(p_t, p0) and torch.equal(q_t, q0)


@pytest.mark.parametrize("name", ["sps", "rrs", "rrs_wor", "kseq"])
def test_p_equal_to_q_accepts_the_first_draft(name: str) -> None:
    """p = q: the first draft is accepted surely (K-SEQ: with probability 1/rho*, rho* within 2^-52 of 1), and the
    residual, empty from the first step on, is never drawn from (the rules' frozen / fallback rows)."""
    v = get(name)
    p = make_pair(np.random.default_rng(3), 6, "dirichlet")[0]
    draft = v.make_draft(p, 3)
    omegas = torch.as_tensor(draft.sample(2000, np.random.default_rng(1)))
    p_t = torch.as_tensor(p).expand(2000, -1)
    tokens, index = v.sample(p_t, p_t, omegas, torch.Generator().manual_seed(2))
    assert torch.equal(index, torch.zeros_like(index)) and torch.equal(tokens, omegas[:, 0])


def test_sample_categorical_draws_only_tokens_with_mass(monkeypatch) -> None:  # noqa: ANN001
    """Inverse CDF on unnormalised weights with zero runs: every draw has positive weight, a row with no mass draws
    token 0, and a uniform at the top of [0, 1] (forced here) is clamped to the first token whose cumulative mass
    reaches the total (the last positive one), not to V."""
    from otlp.verifiers.base import sample_categorical

    rng = np.random.default_rng(5)
    w = rng.random((4000, 12)) * (rng.random((4000, 12)) < 0.3)
    w[0] = 0.0
    tokens = sample_categorical(torch.as_tensor(w), torch.Generator().manual_seed(0))
    mass = w.sum(1) > 0
    assert np.all(tokens.numpy()[~mass] == 0) and np.all(w[mass, tokens.numpy()[mass]] > 0)
    weights = torch.tensor([[1.0, 2.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.25]])
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    assert sample_categorical(weights).tolist() == [1, 3]


@pytest.mark.parametrize("name", ["sps", "rrs", "rrs_wor", "kseq", "optimal"])
def test_float32_rows_keep_the_target_law(name: str) -> None:
    """float32 p and q (the in-place residuals and rho*'s 27-step bisection run in float32): the output law is still
    p, each token's frequency over N rows within 4 standard deviations (5 comparisons per rule, a false failure
    about 3e-4 per rule)."""
    v, p, draft = _case(name, 51, "dirichlet")
    rng = np.random.default_rng(3)
    omegas = torch.as_tensor(draft.sample(N, rng))
    p32, q32 = torch.as_tensor(p, dtype=torch.float32), torch.as_tensor(draft.q, dtype=torch.float32)
    tokens, _ = v.sample(p32.expand(N, -1), q32.expand(N, -1), omegas, torch.Generator().manual_seed(4))
    freq = np.bincount(tokens.numpy(), minlength=p.size) / N
    assert all(_within_4_sigma(freq[y], p[y]) for y in range(p.size)), (freq, p)
