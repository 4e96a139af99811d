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
from otlp.core.psi_wor import wor_optimal_acceptance
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


@pytest.mark.parametrize(("backend", "top_k"), [("host", None), ("torch", None), ("torch", 11)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_batched_rows_are_the_reference_row_by_row(dtype: torch.dtype, backend: str, top_k: int | None) -> None:
    """One call on 32 rows of mixed support sizes (top-5 and top-8 drafts), widths and a repeated row, float32 or
    bfloat16 (ties): each row's token and slot are those of the reference rule on that row with its uniforms, on the
    host and by the static torch route (its support padded to the largest, 8, or to ``top_k`` = 11 tokens)."""
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
    tokens, index = get("optimal_wor").sample(p, q, drafts, uniforms=u, widths=widths, backend=backend, top_k=top_k)
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


def _enumerated_rows(V: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An instance with ties in q and in q/p, a drafted token of p = 0 and a token of p > 0 off the draft's k tokens,
    and every ordered tuple of n distinct drafts with its probability: ``(p [V], q [V], omegas [M, n], probs [M])``."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V))
    live = rng.choice(V, k, replace=False)
    q = np.zeros(V)
    q[live] = rng.dirichlet(np.ones(k))
    q[live[1]] = q[live[0]]  # a tie in q
    p[live[2]] = p[live[3]] * q[live[2]] / q[live[3]]  # a tie in q/p
    p[live[-1]] = 0.0  # drafted, never the target's
    p, q = p / p.sum(), q / q.sum()
    omegas, probs = otlp.WithoutReplacement(q, n).support()
    return p, q, omegas, probs


@pytest.mark.parametrize(("V", "k", "n", "K"), [(7, 4, 2, 4), (7, 5, 3, 6), (6, 4, 4, 4), (8, 5, 2, 7), (6, 5, 3, 5)])
@pytest.mark.parametrize("steps", [None, 0, 1])
def test_the_torch_routes_law_and_acceptance_by_enumeration(V: int, k: int, n: int, K: int, steps: int | None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The static route's rule (:func:`static_rule`) on every ordered tuple of an instance, each a row: the output
    law sum_omega P(omega) (accepted draws + rejection x residual) is p to 1e-12, and the acceptance is alpha* (from
    ``psi_wor``) with its Newton steps; cut to 0 or 1 step (rows that have not converged), the law is still p and
    the acceptance at most alpha*. A support padded past k (K > k) changes neither."""
    from otlp.optimal import wor as W
    from otlp.verifiers.optimal_wor import static_rule

    if steps is not None:
        monkeypatch.setattr(W, "DEVICE_STEPS", steps)
    p, q, omegas, probs = _enumerated_rows(V, k, n, seed=V * 100 + k * 10 + n)
    M = omegas.shape[0]
    P, Q = torch.from_numpy(p).expand(M, V), torch.from_numpy(q).expand(M, V)
    accept, weights, _ = static_rule(P, Q, torch.from_numpy(omegas), None, K)
    accept, weights = accept.numpy(), weights.numpy()
    assert (accept >= 0).all() and (accept.sum(1) <= 1 + 1e-12).all()
    law = np.bincount(omegas.ravel(), (probs[:, None] * accept).ravel(), V)
    law += ((probs * (1 - accept.sum(1)))[:, None] * weights / weights.sum(1, keepdims=True)).sum(0)
    np.testing.assert_allclose(law, p, rtol=0, atol=1e-12)
    acceptance = float(probs @ accept.sum(1))
    alpha = wor_optimal_acceptance(p, q, n)
    if steps is None:
        assert abs(acceptance - alpha) < 1e-10
    else:
        assert acceptance <= alpha + 1e-12


def test_the_torch_routes_widths_by_enumeration() -> None:
    """Rows of width m < n (the other drafts padding) take the rule of WithoutReplacement(q, m): law p to 1e-12 and
    acceptance alpha*(m) on every enumerated m-tuple, in one call with rows of every width."""
    from otlp.verifiers.optimal_wor import static_rule

    V, k, n = 7, 5, 3
    p, q, _, _ = _enumerated_rows(V, k, n, seed=4)
    parts = [otlp.WithoutReplacement(q, m).support() for m in range(1, n + 1)]
    drafts = np.concatenate([np.pad(o, ((0, 0), (0, n - o.shape[1])), constant_values=V - 1) for o, _ in parts])
    widths = np.concatenate([np.full(o.shape[0], o.shape[1]) for o, _ in parts])
    M = drafts.shape[0]
    accept, weights, _ = static_rule(torch.from_numpy(p).expand(M, V), torch.from_numpy(q).expand(M, V),
                                     torch.from_numpy(drafts), torch.from_numpy(widths), k)
    lo = 0
    for m, (omegas, probs) in enumerate(parts, start=1):
        a, w = accept[lo: lo + omegas.shape[0]].numpy(), weights[lo: lo + omegas.shape[0]].numpy()
        lo += omegas.shape[0]
        assert (a[:, m:] == 0).all()
        law = np.bincount(omegas.ravel(), (probs[:, None] * a[:, :m]).ravel(), V)
        law += ((probs * (1 - a.sum(1)))[:, None] * w / w.sum(1, keepdims=True)).sum(0)
        np.testing.assert_allclose(law, p, rtol=0, atol=1e-12)
        assert abs(float(probs @ a.sum(1)) - wor_optimal_acceptance(p, q, m)) < 1e-10


def test_the_torch_route_runs_on_meta_tensors() -> None:
    """With ``top_k`` given and validation off, the static route runs on ``device="meta"`` tensors (shapes only):
    nothing in it reads a value on the host, so on an accelerator it never synchronises."""
    from otlp.verifiers.base import validation

    B, V, n = 4, 1000, 3
    p, q = torch.empty(B, V, device="meta"), torch.empty(B, V, device="meta")
    drafts = torch.empty(B, n, device="meta", dtype=torch.int64)
    u = torch.empty(B, 2, device="meta", dtype=torch.float64)
    with validation(False):
        tokens, index = get("optimal_wor").sample(p, q, drafts, uniforms=u, top_k=6, backend="torch",
                                                  widths=torch.empty(B, device="meta", dtype=torch.int64))
    assert tokens.device.type == index.device.type == "meta" and tuple(tokens.shape) == (B,)


def test_the_torch_routes_refusals() -> None:
    v = get("optimal_wor")
    p, q, drafts, u = _wor_rows(2, 200, 6, 3, 0.5, seed=3)
    with pytest.raises(InputError, match="backend must be one of 'auto', 'host', 'torch', 'triton'"):
        v.sample(p, q, drafts, uniforms=u, backend="cuda")
    with pytest.raises(InputError, match="top_k must be a positive integer"):
        v.sample(p, q, drafts, uniforms=u, backend="torch", top_k=2.5)
    with pytest.raises(InputError, match="top_k = 5 is below a row's number of tokens of q > 0"):
        v.sample(p, q, drafts, uniforms=u, backend="torch", top_k=5)
    for bad in ([[0, 0, 1]], [[int(torch.nonzero(q[0] == 0)[0, 0]), 1, 2]]):  # repeated, or a draft of q = 0
        with pytest.raises(InputError, match="not distinct tokens of q > 0"):
            v.sample(p[:1], q[:1], torch.tensor(bad), uniforms=u[:1], backend="torch", top_k=6)
    with pytest.raises(InputError, match="top_k = 2 is below n = 3"):
        v.sample(p, q, drafts, uniforms=u, backend="torch", top_k=2, validate=False)
    with pytest.raises(InputError, match=r"top_k = 128 gives 341,376 sets of n = 3 \(at most 200,000\)"):
        v.sample(p, q, drafts, uniforms=u, backend="torch", top_k=128, validate=False)
    for backend in ("host", "torch"):  # 13 drafts a row: 2^13 x 13 terms a set's probability
        with pytest.raises(InputError, match=r"13 drafts a row, above 12 \(each drafted set's probability sums"):
            v.sample(p, q, torch.arange(13).expand(2, 13), uniforms=u, backend=backend, validate=False)


def test_the_graph_callables_are_the_torch_route() -> None:
    """``_static_route(K, widths, kernel)`` (what the CUDA graph cache captures; one stable callable per key, since
    the cache keys on it) returns the torch route's tokens and slots."""
    from otlp.verifiers.optimal_wor import _static_route

    p, q, drafts, u = _wor_rows(6, 300, 5, 3, 0.5, seed=21)
    widths = torch.tensor([1, 2, 3, 3, 2, 1])
    v = get("optimal_wor")
    assert _static_route(7, True, False) is _static_route(7, True, False)
    for fn, args, kw in ((_static_route(7, True, False), (widths,), {"widths": widths}),
                         (_static_route(7, False, False), (), {})):
        got = fn(p, q, drafts, u, *args)
        want = v.sample(p, q, drafts, uniforms=u, backend="torch", top_k=7, **kw)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("graphs", [False, True])
def test_on_cuda_the_device_route_is_the_host_route(graphs: bool) -> None:
    """On CUDA tensors (the static route by default, eager or replayed from CUDA graphs) the tokens and slots are the
    host route's on the same rows and uniforms, with widths, over three calls (the capture, then replays)."""
    p, q, drafts, u = _wor_rows(40, 5000, 8, 3, 0.7, seed=22)
    widths = torch.tensor([3, 2, 1, 3] * 10)
    v = get("optimal_wor")
    want = v.sample(p, q, drafts, uniforms=u, widths=widths, backend="host")
    for _ in range(3):
        got = v.sample(p.cuda(), q.cuda(), drafts.cuda(), uniforms=u.cuda(), widths=widths.cuda(), top_k=8,
                       graphs=graphs)
        assert all(torch.equal(a.cpu(), b) for a, b in zip(got, want, strict=True))


def test_the_torch_route_planned_in_row_slices_is_the_route_planned_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """PLAN_ENTRIES small enough for one row a plan (slices of the batch, as a large K x n x B is planned): the same
    tokens and slots as one plan of every row, with widths."""
    import otlp.verifiers.optimal_wor as OW

    p, q, drafts, u = _wor_rows(9, 500, 6, 3, 0.5, seed=31)
    widths = torch.tensor([3, 1, 2] * 3)
    v = get("optimal_wor")
    whole = v.sample(p, q, drafts, uniforms=u, widths=widths, backend="torch", top_k=7)
    monkeypatch.setattr(OW, "PLAN_ENTRIES", 1)
    sliced = v.sample(p, q, drafts, uniforms=u, widths=widths, backend="torch", top_k=7)
    assert all(torch.equal(a, b) for a, b in zip(whole, sliced, strict=True))
