"""The host kernels read an engine's strided rows in place: one position ``t[:, j]`` of a ``[B, n + 1, V]`` tensor (the
layout of FlashInfer's and SGLang's ``target_probs``) gives the same sums, tokens and statuses as its contiguous copy,
and is not copied (:func:`otlp.backend.native.rows_in_place`; the adapters' overhead, benchmarks/engines.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otlp.backend import native
from otlp.optimal import buckets as BK
from otlp.optimal.sampler import verify

pytestmark = pytest.mark.skipif(native.library() is None, reason="the C kernels are not built in this checkout")


def _lm_rows(g: torch.Generator, B: int, K: int, V: int, dtype=torch.float32):  # noqa: ANN001, ANN202
    """``(target, draft)``, each ``[B, K, V]``: LM-like rows (softmax of scaled Gaussian logits) and a draft close to
    them (the logits perturbed), K positions per request, as an engine lays them out."""
    logits = torch.randn(B, K, V, generator=g, dtype=torch.float64) * 3.0
    noisy = logits + torch.randn(B, K, V, generator=g, dtype=torch.float64)
    return torch.softmax(logits, dim=-1).to(dtype), torch.softmax(noisy, dim=-1).to(dtype)


def test_a_position_of_an_engine_tensor_is_read_in_place() -> None:
    x = np.zeros((5, 3, 7), dtype=np.float32)
    view = x[:, 1]  # [5, 7], rows 21 entries apart
    got, ld = native.rows_in_place(view)
    assert got is view and ld == 21
    got, ld = native.rows_in_place(x[:, 0, :4])  # rows shorter than their spacing: still in place
    assert got.base is x and ld == 21
    got, ld = native.rows_in_place(x[:, :, 2])  # entries not adjacent within a row: a contiguous copy
    assert got.flags.c_contiguous and ld == 3 and not np.shares_memory(got, x)
    got, ld = native.rows_in_place(x[::-1, 0])  # rows in reverse: a copy
    assert got.flags.c_contiguous and ld == 7 and not np.shares_memory(got, x)
    c = np.zeros((4, 6))
    assert native.rows_in_place(c) == (c, 6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_strided_rows_give_the_contiguous_rows_sums_and_tokens(dtype) -> None:  # noqa: ANN001
    g = torch.Generator().manual_seed(3)
    B, V = 9, 3000
    target, draft = _lm_rows(g, B, 3, V, dtype)  # [B, 3, V] each
    p, q = target[:, 1].numpy(), draft[:, 1].numpy()  # strided views
    pc, qc = np.ascontiguousarray(p), np.ascontiguousarray(q)
    for a, b in zip(native.row_stats(p), native.row_stats(pc), strict=True):
        np.testing.assert_array_equal(a, b)
    inv_p, inv_q = BK.inverse_sums(pc), BK.inverse_sums(qc)
    u = torch.rand(B, 2, generator=g, dtype=torch.float64).numpy()
    w = torch.multinomial(draft[:, 1].double(), 4, replacement=True, generator=g).numpy()  # [B, 4]
    one = native.single_draft(p, q, inv_p, inv_q, w[:, :1], u)
    ref = native.single_draft(pc, qc, inv_p, inv_q, w[:, :1], u)
    assert all(np.array_equal(a, b) for a, b in zip(one, ref, strict=True))
    assert (one[1] < 0).any() and (one[1] == 0).any()  # rejected rows (read whole) and accepted ones
    sc = BK.scheme(BK.bits_for(V))
    for team in (1, 2):
        got = BK._native_rows(p, q, inv_p, inv_q, w, u, 4, sc, threads=team)
        want = BK._native_rows(pc, qc, inv_p, inv_q, w, u, 4, sc, threads=team)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True)), team
        assert (got[2] > 0).any()  # some rows certified by the bucket rule (not all left to the full sort)


@pytest.mark.parametrize("n", [1, 4])
def test_the_sampler_on_a_position_view_draws_the_contiguous_rows_tokens(n: int) -> None:
    g = torch.Generator().manual_seed(11 + n)
    B, V = 16, 4096
    target, draft = _lm_rows(g, B, n + 1, V)  # [B, n + 1, V]: the engines' target layout
    p, q = target[:, n], draft[:, n]  # strided [B, V] views
    assert not p.is_contiguous() and not q.is_contiguous()
    drafts = torch.multinomial(q.double(), n, replacement=True, generator=g)
    u = torch.rand(B, 2, generator=g, dtype=torch.float64)
    for threads in (1, 2):
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            got = verify(p, q, drafts, u)
            want = verify(p.contiguous(), q.contiguous(), drafts, u)
        finally:
            torch.set_num_threads(previous)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
