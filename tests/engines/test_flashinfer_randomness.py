"""FlashInfer's randomness as the adapter reproduces it: ``(seed, offset)`` counters (ints or per-row tensors) replay
bit for bit without a host read, rows are independent streams, and a generator advances per call as FlashInfer's
``get_seed_and_offset`` advances its Philox offset. The uniformity check is a chi-square at level 1e-6 (a correct
stream fails this seeded test with probability 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from otlp.core.errors import InputError
from otlp.engines import flashinfer
from otlp.engines.flashinfer import _splitmix64, counter_uniforms

from .helpers import dyadic_rows

ALPHA = 1e-6


def _splitmix64_reference(x: int) -> int:
    """splitmix64 on Python ints (Steele, Lea and Flood 2014), an independent route."""
    m = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_the_int64_splitmix64_is_the_unsigned_one():
    rng = np.random.default_rng(0)
    xs = [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, *(int(v) for v in rng.integers(0, 1 << 63, 50))]
    t = torch.tensor([x - (1 << 64) if x >= 1 << 63 else x for x in xs], dtype=torch.int64)
    assert [int(v) % (1 << 64) for v in _splitmix64(t)] == [_splitmix64_reference(x) for x in xs]


def test_counters_replay_and_advance():
    u = counter_uniforms(7, 10, 5, 6, "cpu")  # [5, 6]
    assert torch.equal(u, counter_uniforms(torch.tensor([7]), torch.tensor([10] * 5), 5, 6, "cpu"))
    assert torch.equal(counter_uniforms(7, 11, 5, 5, "cpu"), u[:, 1:])  # offset counts the numbers used
    assert not torch.equal(counter_uniforms(7, 16, 5, 6, "cpu"), u)  # advanced past them: fresh numbers
    seeds = torch.tensor([3, 7, 9, 7, 1])  # one seed per row: row b depends on (seed_b, b, offset_b) only
    per_row = counter_uniforms(seeds, torch.tensor([10]), 5, 6, "cpu")
    for b, s in enumerate(seeds.tolist()):
        assert torch.equal(per_row[b], counter_uniforms(s, 10, 5, 6, "cpu")[b])
    assert u.dtype == torch.float32 and bool(((u >= 0) & (u < 1)).all())


def test_counters_are_uniform_and_rows_independent():
    N = 200_000
    u = counter_uniforms(12345, 0, N, 2, "cpu").double().numpy()  # [N, 2]
    counts = np.histogram(u[:, 0], bins=50, range=(0, 1))[0]
    assert stats.chisquare(counts).pvalue > ALPHA
    pairs = np.histogram2d(u[:, 0], u[:, 1], bins=10, range=[[0, 1], [0, 1]])[0].ravel()  # within a row
    assert stats.chisquare(pairs).pvalue > ALPHA
    rows = np.histogram2d(u[:-1, 0], u[1:, 0], bins=10, range=[[0, 1], [0, 1]])[0].ravel()  # adjacent rows
    assert stats.chisquare(rows).pvalue > ALPHA


def _inputs(B: int = 6, n: int = 3, V: int = 9):  # noqa: ANN202
    g = torch.Generator().manual_seed(2)
    draft, target = dyadic_rows(g, (B, n), V), dyadic_rows(g, (B, n + 1), V)
    return draft, torch.randint(0, V, (B, n), generator=g), target


@pytest.mark.parametrize("method", ["rrs", "optimal"])
def test_seed_and_offset_replay_per_row(method):
    draft, ids, target = _inputs()
    seeds, offsets = torch.tensor([4, 8, 15, 16, 23, 42]), torch.tensor([0, 5, 0, 5, 0, 5])
    out = flashinfer.chain_speculative_sampling(draft, ids, target, seed=seeds, offset=offsets, method=method)
    again = flashinfer.chain_speculative_sampling(draft, ids, target, seed=seeds.clone(), offset=offsets.clone(),
                                                  method=method)
    for a, b in zip(out, again, strict=True):
        assert torch.equal(a, b)
    for b in range(6):  # each row's output is its own (seed, offset)'s
        one = flashinfer.chain_speculative_sampling(draft, ids, target, seed=int(seeds[b]), offset=int(offsets[b]),
                                                    method=method)
        assert torch.equal(one[0][b], out[0][b])
    u = counter_uniforms(seeds, offsets, 6, 3 + 2, "cpu")  # the stream the call used, passed explicitly
    assert torch.equal(flashinfer.chain_speculative_sampling(draft, ids, target, uniforms=u, method=method)[0],
                       out[0])


def test_a_generator_advances_per_call_and_replays():
    draft, ids, target = _inputs(B=40, V=5)
    g = torch.Generator().manual_seed(11)
    first = flashinfer.chain_speculative_sampling(draft, ids, target, generator=g)[0]
    second = flashinfer.chain_speculative_sampling(draft, ids, target, generator=g)[0]
    assert not torch.equal(first, second)  # the state advanced (40 rows: equal outputs would be a fluke)
    g.manual_seed(11)
    assert torch.equal(flashinfer.chain_speculative_sampling(draft, ids, target, generator=g)[0], first)
    assert torch.equal(flashinfer.chain_speculative_sampling(draft, ids, target, generator=g)[0], second)
    g.manual_seed(11)  # a seed without an offset is not used (FlashInfer): the generator draws
    assert torch.equal(flashinfer.chain_speculative_sampling(draft, ids, target, generator=g, seed=3)[0], first)


@pytest.mark.parametrize("seed, offset", [(1.5, 0), (torch.tensor([1, 2]), 0), (torch.tensor([1.0]), 0),
                                          (0, "x")])
def test_bad_seed_or_offset_is_refused_in_one_line(seed, offset):
    draft, ids, target = _inputs()
    with pytest.raises(InputError) as err:
        flashinfer.chain_speculative_sampling(draft, ids, target, seed=seed, offset=offset)
    assert "\n" not in str(err.value) and ("seed" in str(err.value) or "offset" in str(err.value))
