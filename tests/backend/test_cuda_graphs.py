"""otlp.backend.cuda_graphs: one capture per call signature, fresh inputs copied in, outputs cloned out, LRU eviction,
row counts rounded up to powers of two (the optimal sampler's use of it is tested in
tests/optimal/test_sampler_device.py).

Each cache test runs on CUDA with real graphs and, where there is no GPU, on the CPU with a stand-in for capture
whose replay runs the function again on the captured tensors, into the captured outputs (what a graph's replay
does), so that the cache's bookkeeping is tested everywhere.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from otlp.backend import cuda_graphs  # noqa: E402
from otlp.backend.cuda_graphs import GraphCache, bucket, padded  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="needs a CUDA device"))]


class _Replay:
    def __init__(self, fn, static, outputs):  # noqa: ANN001
        self.fn, self.static, self.outputs = fn, static, outputs

    def replay(self) -> None:
        for slot, value in zip(self.outputs, self.fn(*self.static), strict=True):
            slot.copy_(value)

    def pool(self) -> None:
        return None


@pytest.fixture
def device(request, monkeypatch):  # noqa: ANN001, ANN201
    if request.param == "cpu":
        def capture(fn, *static, pool=None, warmup=2):  # noqa: ANN001, ANN202, ARG001
            outputs = fn(*static)
            return _Replay(fn, static, outputs), outputs

        monkeypatch.setattr(cuda_graphs, "capture", capture)
    return request.param


def _affine(x, y):  # noqa: ANN001, ANN202
    return (x * 2 + y, x.sum(0, keepdim=True))


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_each_signature_is_captured_once_and_replays_fresh_inputs(device: str) -> None:
    cache = GraphCache(max_graphs=2)
    results = []
    for size, offset in ((3, 0.0), (5, 1.0), (3, 7.0), (5, 2.0)):  # two signatures, each met twice
        x = torch.arange(size, device=device, dtype=torch.float32) + offset
        y = torch.full((size,), offset, device=device)
        out = cache.run(_affine, x, y)
        assert torch.equal(out[0], x * 2 + y) and torch.equal(out[1], x.sum(0, keepdim=True))
        results.append(out[0])
    assert cache.captures == 2 and len(cache) == 2
    assert torch.equal(results[0], torch.arange(3.0, device=device) * 2)  # a clone: later replays left it alone


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_the_least_recently_used_graph_is_dropped(device: str) -> None:
    cache = GraphCache(max_graphs=2)
    for size in (1, 2, 1, 3, 2):  # 2 is the least recently used when 3 arrives, so it is captured again
        x = torch.ones(size, device=device)
        assert torch.equal(cache.run(_affine, x, x)[0], x * 3)
    assert cache.captures == 4 and len(cache) == 2


def test_row_buckets_are_powers_of_two_and_padding_repeats_the_first_row() -> None:
    assert [bucket(r) for r in (0, 1, 2, 3, 4, 5, 8, 9, 33, 64)] == [1, 1, 2, 4, 4, 8, 8, 16, 64, 64]
    x = torch.arange(6.0).view(3, 2)
    assert torch.equal(padded(x, 5), torch.tensor([[0.0, 1], [2, 3], [4, 5], [0, 1], [0, 1]]))
    same = padded(x, 3)
    assert torch.equal(same, x) and same.data_ptr() != x.data_ptr()  # a copy even when no row is added


def _rowwise(x, w):  # noqa: ANN001, ANN202
    return (x.cumsum(1) * w[:, None], w + 1)


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_calls_with_rows_share_the_graph_of_their_power_of_two(device: str) -> None:
    cache = GraphCache()
    gen = torch.Generator(device=device).manual_seed(0)
    for R in (5, 7, 8, 6, 3, 5):  # buckets 8, 8, 8, 8, 4, 8: two captures
        x = torch.rand(R, 10, device=device, generator=gen)
        w = torch.rand(R, device=device, generator=gen)
        out = cache.run(_rowwise, x, w, rows=True)
        assert out[0].shape == (R, 10) and out[1].shape == (R,)
        assert torch.allclose(out[0], x.cumsum(1) * w[:, None], rtol=1e-6) and torch.equal(out[1], w + 1)
    assert cache.captures == 2


def _widths(x, d):  # noqa: ANN001, ANN202
    return (x.sum(1) + d.sum(1), d * 2)


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_graphs_share_the_captured_tensor_of_an_argument_with_the_same_signature(device: str) -> None:
    """Two graphs (drafts of width 1 and 2) over the same rows share x's captured tensor; calls alternating between
    them each see their own arguments (each copies all of its arguments in), and an empty batch runs as is."""
    cache = GraphCache()
    gen = torch.Generator(device=device).manual_seed(1)
    for R, m in ((3, 1), (4, 2), (4, 1), (3, 2), (3, 1)):  # all in the bucket of 4 rows
        x = torch.rand(R, 6, device=device, generator=gen)
        d = torch.rand(R, m, device=device, generator=gen)
        out = cache.run(_widths, x, d, rows=True)
        assert torch.allclose(out[0], x.sum(1) + d.sum(1), rtol=1e-6) and torch.equal(out[1], d * 2)
    assert cache.captures == 2 and len(cache._inputs) == 3  # x's tensor for both graphs, one d per width
    empty = cache.run(_widths, x[:0], d[:0], rows=True)
    assert empty[0].shape == (0,) and cache.captures == 2


def test_a_signature_whose_capture_fails_runs_eagerly_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture that fails after its warm-up calls (cuda_graphs.CaptureError) must not fail the call: the cache
    warns once, answers eagerly, and does not try that signature again; other signatures are still captured."""
    tried = []

    def capture(fn, *static, pool=None, warmup=2):  # noqa: ANN001, ANN202, ARG001
        tried.append(static[0].shape)
        if static[0].shape == (3,):
            raise cuda_graphs.CaptureError("RuntimeError: operation not permitted when stream is capturing")
        outputs = fn(*static)
        return _Replay(fn, static, outputs), outputs

    monkeypatch.setattr(cuda_graphs, "capture", capture)
    cache = GraphCache()
    with pytest.warns(RuntimeWarning, match="capture of _affine failed .*not permitted.*run eagerly"):
        out = cache.run(_affine, torch.arange(3.0), torch.ones(3))
    assert torch.equal(out[0], torch.arange(3.0) * 2 + 1)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        for offset in (1.0, 2.0):
            x = torch.arange(3.0) + offset
            assert torch.equal(cache.run(_affine, x, torch.ones(3))[0], x * 2 + 1)
        assert torch.equal(cache.run(_affine, torch.arange(5.0), torch.ones(5))[0], torch.arange(5.0) * 2 + 1)
    assert tried == [(3,), (5,)] and cache.captures == 1 and len(cache) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_host_synchronising_function_is_refused_by_the_capture_and_runs_eagerly() -> None:
    """On CUDA, a function that synchronises with the host (``.item()``) runs eagerly (its warm-ups) but cannot be
    captured: the cache answers eagerly with a warning, and the device stays usable."""
    def synced(x):  # noqa: ANN001, ANN202
        return (x * float(x.sum().item()),)

    x = torch.arange(4.0, device="cuda")
    with pytest.warns(RuntimeWarning, match="run eagerly"):
        out = GraphCache().run(synced, x)
    assert torch.equal(out[0], x * 6.0) and torch.equal((x + 1).cpu(), torch.arange(1.0, 5.0))
