"""The samplers' reused work arrays (otlp/backend/scratch.py): reuse per name and thread, growth, release, and no result
that depends on what a buffer held before."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from otlp.backend import scratch

torch = pytest.importorskip("torch")

from otlp.optimal.sampler import verify  # noqa: E402


def test_a_name_reuses_its_buffer_grows_and_is_released() -> None:
    scratch.release()
    a = scratch.array("t", (4, 8), np.float64)
    b = scratch.array("t", (2, 8), np.float64)
    assert a.shape == (4, 8) and b.shape == (2, 8) and np.shares_memory(a, b)
    assert not np.shares_memory(a, scratch.array("u", (4, 8), np.float64))
    c = scratch.array("t", (5, 8), np.float64)  # larger: a new buffer
    assert c.shape == (5, 8) and not np.shares_memory(a, c)
    assert scratch.array("t", (3, 3), np.int64).dtype == np.int64  # another dtype: a new buffer
    scratch.release()
    assert not np.shares_memory(c, scratch.array("t", (5, 8), np.float64))


def test_like_reuses_a_cpu_tensor_per_name_and_dtype() -> None:
    scratch.release()
    t = torch.zeros(3, 5, dtype=torch.float32)
    a, b = scratch.like("r", t), scratch.like("r", t[:2])
    assert a.shape == (3, 5) and a.dtype == torch.float32 and a.is_contiguous() and a.data_ptr() == b.data_ptr()
    assert scratch.like("r", t.double()).dtype == torch.float64  # another dtype: a new buffer
    assert scratch.like("r", t.requires_grad_()).data_ptr() != scratch.like("r", t.detach()).data_ptr()


def test_each_thread_has_its_own_buffers() -> None:
    mine = scratch.array("t", (16,), np.float64)
    theirs = []
    th = threading.Thread(target=lambda: theirs.append(scratch.array("t", (16,), np.float64)))
    th.start()
    th.join()
    assert not np.shares_memory(mine, theirs[0])


def _lm(B: int, V: int, n: int, seed: int):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    return p, q, torch.multinomial(q, n, replacement=True, generator=g), torch.rand(B, 2, generator=g,
                                                                                    dtype=torch.float64)


@pytest.mark.parametrize("B,V", [(3, 300), (40, 2000), (2, 9000)])  # the full sort, the buckets by entries, by V
def test_results_do_not_depend_on_what_the_buffers_held(monkeypatch: pytest.MonkeyPatch, B: int, V: int) -> None:
    """Every call in a row of calls of other shapes draws what a call on fresh arrays filled with garbage draws."""
    calls = [_lm(B, V, 3, 0), _lm(B + 1, V, 3, 1), _lm(1, V, 3, 2), _lm(B, V, 3, 0)]
    reused = [verify(p, q, d, u) for p, q, d, u in calls]

    def garbage(name: str, shape: tuple, dtype) -> np.ndarray:  # noqa: ANN001
        out = np.empty(shape, dtype)
        out.view(np.uint8)[...] = 0xFF  # NaN for floats, -1 for ints, True for bools
        return out

    monkeypatch.setattr(scratch, "array", garbage)
    for (p, q, d, u), (t, i) in zip(calls, reused, strict=True):
        t2, i2 = verify(p, q, d, u)
        assert torch.equal(t, t2) and torch.equal(i, i2)
    assert torch.equal(reused[0][0], reused[3][0])


@pytest.mark.parametrize("name", ["sps", "rrs", "rrs_wor", "kseq", "spechub", "is", "greedy"])
def test_torch_samplers_do_not_depend_on_what_the_buffers_held(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A run of calls of several shapes draws with reused buffers what it draws with fresh buffers full of NaN."""
    from otlp.verifiers import get

    v = get(name)
    rng = np.random.default_rng(3)
    calls = []
    for B, V in ((50, 7), (20, 30), (50, 7)):
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        drafts = torch.as_tensor(v.make_draft(q, 2).sample(B, rng))
        calls.append((torch.as_tensor(p).expand(B, -1), torch.as_tensor(q).expand(B, -1), drafts))

    def run() -> list:
        return [v.sample(p, q, d, torch.Generator().manual_seed(i)) for i, (p, q, d) in enumerate(calls)]

    reused = run()
    monkeypatch.setattr(scratch, "like", lambda name, t: torch.full(t.shape, float("nan"), dtype=t.dtype))
    for a, b in zip(reused, run(), strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), name
