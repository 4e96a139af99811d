"""``get("optimal_wor")``: the optimal rule for without-replacement drafts as a batched sampler.

The rule itself (on the draft's support) is tested by enumeration in tests/optimal/test_wor.py; here the sampler's
law, by seeded chi-square tests that fail only below p = 1e-6 (false-failure rate 1e-6 per assertion), at V = 32k on
an LM-like row whose draft is filtered to its top-k tokens, and its batch handling and refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch

import otlp
from otlp.core.errors import InputError
from otlp.verifiers import get
from otlp.verifiers.optimal_wor import MAX_SETS

P_MIN = 1e-6


def _wor_rows(B: int, V: int, k: int, n: int, sigma: float, seed: int, scale: float = 3.0):
    """LM-like float32 rows (p = softmax(scale z), a close draft softmax(log p + sigma z')), the draft filtered to
    its top k tokens, n drafts per row from it without replacement (Gumbel top-n), and float64 uniforms."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g, dtype=torch.float64) * scale, 1)
    q = torch.softmax(torch.log(p) + sigma * torch.randn(B, V, generator=g, dtype=torch.float64), 1)
    top = torch.topk(q, k, dim=1).indices  # [B, k]
    q = torch.zeros_like(q).scatter_(1, top, q.gather(1, top))
    q = q / q.sum(1, keepdim=True)
    keys = torch.log(q) - torch.log(-torch.log(torch.rand(q.shape, generator=g, dtype=torch.float64)))
    drafts = torch.topk(keys, n, dim=1).indices  # [B, n] in order: a successive sample without replacement
    u = torch.rand(B, 2, generator=g, dtype=torch.float64)
    return p.float(), q.float(), drafts, u


def test_sampler_law_at_32k() -> None:
    """One LM-like row at V = 32k (p = softmax(5 z), top-20 draft, sigma 1, n = 3) verified 10,000 times with fresh
    drafts and uniforms: the tokens follow p (chi-square over the support's tokens and ten p-mass bins of the rest),
    and the acceptance is alpha* within 5 standard errors."""
    V, k, n, N = 32_000, 20, 3, 10_000
    p, q, _, _ = _wor_rows(1, V, k, n, 1.0, seed=5, scale=5.0)
    p64, q64 = p[0].double().numpy(), q[0].double().numpy()
    p64, q64 = p64 / p64.sum(), q64 / q64.sum()
    d = otlp.WithoutReplacement(q64, n)
    rng = np.random.default_rng(6)
    drafts = torch.from_numpy(np.concatenate([d.sample(1000, rng) for _ in range(N // 1000)]))  # ([1000, V] keys)
    P, Q = p.expand(N, V), q.expand(N, V)
    u = torch.rand(N, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    tokens, index = get("optimal_wor").sample(P, Q, drafts, uniforms=u)
    live = np.flatnonzero(q64 > 0)
    cells = np.full(V, -1)
    cells[live] = np.arange(k)
    rest = np.setdiff1d(np.arange(V), live)
    rest = rest[np.argsort(p64[rest])]
    share = np.cumsum(p64[rest]) / p64[rest].sum()
    cells[rest] = k + np.minimum((share * 10).astype(int), 9)
    observed = np.bincount(cells[tokens.numpy()], minlength=k + 10)
    expected = np.bincount(cells, weights=p64, minlength=k + 10) * N
    keep = expected > 0
    assert observed[~keep].sum() == 0
    assert scipy.stats.chisquare(observed[keep], expected[keep] * N / expected[keep].sum()).pvalue > P_MIN
    alpha = otlp.optimal_acceptance(p64, d)
    assert 0.3 < alpha < p64[live].sum() - 0.01  # a row where the draws, not the support, bind the rule
    rate = float((index >= 0).double().mean())
    assert abs(rate - alpha) < 5 * np.sqrt(alpha * (1 - alpha) / N)


def test_rows_and_widths() -> None:
    """A batch of different rows (V = 4096, top-8 drafts, n = 3) with a widths mask: row b's result is the one-row
    call's on its first widths[b] drafts with the same uniforms, and an accepted index names that draft."""
    B, V, n = 12, 4096, 3
    p, q, drafts, u = _wor_rows(B, V, 8, n, 0.5, seed=9)
    widths = torch.tensor([1, 2, 3] * 4)
    v = get("optimal_wor")
    tokens, index = v.sample(p, q, drafts, uniforms=u, widths=widths)
    for b in range(B):
        m = int(widths[b])
        t1, i1 = v.sample(p[b:b + 1], q[b:b + 1], drafts[b:b + 1, :m], uniforms=u[b:b + 1])
        assert (int(tokens[b]), int(index[b])) == (int(t1[0]), int(i1[0]))
        if index[b] >= 0:
            assert int(drafts[b, index[b]]) == int(tokens[b])


def _reference(p: np.ndarray, q: np.ndarray, drafts: np.ndarray, u: np.ndarray) -> tuple[int, int]:
    """One row by the rule's reference, :class:`otlp.optimal.wor.SupportRule` on the float64 row normalised: slot j
    where u[0] falls in the cumulative accept probabilities, else the inverse CDF of u[1] over the residual."""
    from otlp.optimal.wor import SupportRule

    rule = SupportRule(p / p.sum(), q / q.sum(), drafts.size)
    slot = int((u[0] >= np.cumsum(rule.rule(drafts[None])[0][0])).sum())
    if slot < drafts.size:
        return int(drafts[slot]), slot
    cdf = np.cumsum(rule.residual)
    return min(int(np.searchsorted(cdf, u[1] * cdf[-1], side="right")), cdf.size - 1), -1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_batched_rows_are_the_reference_row_by_row(dtype: torch.dtype) -> None:
    """One call on 32 rows of mixed support sizes (top-5 and top-8 drafts), widths and a repeated row, float32 or
    bfloat16 (ties): each row's token and slot are those of the reference rule on that row with its uniforms."""
    B, V, n = 32, 2000, 3
    p, q, drafts, u = _wor_rows(B, V, 8, n, 0.7, seed=13)
    p5, q5, drafts5, _ = _wor_rows(B, V, 5, n, 0.7, seed=14)
    half = torch.arange(B) % 2 == 1
    p, q = torch.where(half[:, None], p5, p), torch.where(half[:, None], q5, q)
    drafts = torch.where(half[:, None], drafts5, drafts)
    p[3], q[3], drafts[3] = p[2], q[2], drafts[2]
    p, q = p.to(dtype), q.to(dtype)
    q = torch.where(q.float() > 0, q, torch.zeros_like(q))
    widths = torch.tensor([3, 2, 1, 3] * 8)
    tokens, index = get("optimal_wor").sample(p, q, drafts, uniforms=u, widths=widths)
    P, Q = p.double().numpy(), q.double().numpy()
    for b in range(B):
        m = int(widths[b])
        assert (int(tokens[b]), int(index[b])) == _reference(P[b], Q[b], drafts[b, :m].numpy(), u[b].numpy()), b


def test_the_residual_token_is_the_inverse_cdf_in_token_order() -> None:
    """residual_token (block sums, then one block's cumulative sum) against the inverse CDF of the whole law built
    and summed in token order: the same token for 2,000 uniforms (u = 0 and the support's tokens' edges among them),
    at V = 10,000 (not a multiple of the block) with support tokens in several blocks and float32 rows."""
    from otlp.verifiers.optimal_wor import BLOCK, residual_token

    rng = np.random.default_rng(3)
    V = 10_000
    assert V % BLOCK
    row = rng.dirichlet(np.full(V, 0.3)).astype(np.float32)
    live = np.sort(rng.choice(V, 12, replace=False))
    live[:2] = [0, V - 1]
    own, scale = rng.dirichlet(np.ones(12)) * 0.6, 0.4 / float(row.astype(np.float64).sum())
    law = scale * row.astype(np.float64)
    law[live] = own
    cdf = np.cumsum(law)
    us = np.concatenate([rng.random(1990), [0.0, 1 - 1e-12], cdf[live[:8]] / cdf[-1] * (1 + 1e-9)])
    for u in us:
        want = min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), V - 1)
        assert residual_token(row, live, own, scale, float(u)) == want, u


def test_refusals() -> None:
    v = get("optimal_wor")
    V = 128
    p = torch.full((1, V), 1 / V)
    assert 128 * 127 * 126 // 6 > MAX_SETS
    with pytest.raises(InputError, match=r"128 tokens of q > 0, so 341,376 sets of n = 3 \(at most 200,000\)"):
        v.sample(p, p, torch.tensor([[0, 1, 2]]), uniforms=torch.zeros(1, 2))
    q = torch.zeros(1, V)
    q[0, :4] = 0.25
    with pytest.raises(InputError, match="not distinct tokens of q > 0"):
        v.sample(p, q, torch.tensor([[0, 0]]), uniforms=torch.zeros(1, 2))
    with pytest.raises(InputError, match="not distinct tokens of q > 0"):
        v.sample(p, q, torch.tensor([[0, 9]]), uniforms=torch.zeros(1, 2))
    with pytest.raises(InputError, match=r"one draft law per row"):
        v.sample(p, q[:, None].expand(1, 2, V), torch.tensor([[0, 1]]))
