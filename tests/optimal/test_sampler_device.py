"""The optimal torch sampler (otlp/optimal/sampler.py) as a decode loop uses it: no host synchronisation on the device
route, caller-supplied uniforms, LM probabilities in float32 / bfloat16, and the sampled law at V = 32k.

Statistical tests fail only below p = 1e-6 (false-failure rate 1e-6 per assertion; the seeds are fixed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats

import otlp
from otlp.core import xp as X
from otlp.optimal import chains as C
from otlp.optimal.sampler import verify

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from otlp.verifiers import get  # noqa: E402
from otlp.verifiers.base import check_tensors  # noqa: E402

ALPHA = 1e-6
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
#: aten ops that read a device value on the host or build a data-dependent shape
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "masked_scatter", "unique", "item", "equal")


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops.add(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def _lm_pair(B: int, V: int, seed: int, dtype=None):  # noqa: ANN001, ANN202
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, dim=1)
    q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), dim=1)
    return (p, q) if dtype is None else (p.to(dtype), q.to(dtype))


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_device_route_never_synchronises(n: int) -> None:
    p, q = _lm_pair(4, 300, n)
    drafts = torch.multinomial(q, n, replacement=True, generator=torch.Generator().manual_seed(1))
    u = torch.rand(4, 2, dtype=torch.float64)
    with _Recorder() as rec:  # the verifier's boundary checks (values off) and the device route
        check_tensors(p, q, drafts, validate=False)
        tokens, index = verify(p, q, drafts, u, backend="torch")
    assert not rec.ops & set(SYNC_OPS), sorted(rec.ops & set(SYNC_OPS))
    # the recorder sees the rule's work (n = 1: the closed form, which needs no sort)
    assert "gather" in rec.ops and ("sort" in rec.ops) == (n > 1)
    assert tokens.shape == (4,) and index.shape == (4,)


def test_the_cpu_route_records_its_host_work() -> None:
    """Control for the test above: the recorder does see a host read (the CPU route's window is a host integer)."""
    p, q = _lm_pair(2, 50, 0)
    drafts = torch.multinomial(q, 2, replacement=True, generator=torch.Generator().manual_seed(1))
    with _Recorder() as rec:
        C.needed_window(C.prefix(p.double(), q.double(), 2), drafts)
    assert "_local_scalar_dense" in rec.ops


def test_uniforms_replay_bit_for_bit_and_both_routes_agree() -> None:
    p, q = _lm_pair(16, 2000, 3)
    drafts = torch.multinomial(q, 4, replacement=True, generator=torch.Generator().manual_seed(2))
    u = torch.rand(16, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    first = verify(p, q, drafts, u)
    again = verify(p, q, drafts, u)
    device = verify(p, q, drafts, u, backend="torch")
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert torch.equal(first[0], device[0]) and torch.equal(first[1], device[1])
    # the rule itself agrees between the numpy and torch routes to float64 rounding
    P, Q = p.double() / p.double().sum(1, keepdim=True), q.double() / q.double().sum(1, keepdim=True)
    pre = C.prefix(P.numpy(), Q.numpy(), 4)
    a, r = C.tuple_rule(pre, drafts.numpy(), window=C.needed_window(pre, drafts.numpy()))
    at, rt = C.tuple_rule(C.prefix(P, Q, 4), drafts, steps=C.NEWTON_STEPS)
    assert np.abs(a - at.numpy()).max() < 1e-12 and np.abs(r - rt.numpy()).max() < 1e-12


def test_the_full_sorts_chunks_on_host_threads_answer_as_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU route's full-sort chunks (rows the buckets leave, here every row) side by side on 3 host threads, a
    row per chunk, with and without a width mask: the tokens and slots of one thread, chunk after chunk."""
    from otlp.backend import threads
    from otlp.optimal import buckets as BK
    from otlp.optimal import sampler as S

    p, q = _lm_pair(12, 3000, 5)
    drafts = torch.multinomial(q, 4, replacement=True, generator=torch.Generator().manual_seed(6))
    u = torch.rand(12, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    widths = torch.tensor([1, 2, 3, 4] * 3)
    monkeypatch.setattr(BK, "takes", lambda B, V: False)
    monkeypatch.setattr(S, "CPU_CHUNK", 3000)
    monkeypatch.setattr(S, "FULL_SORT_THREADS_MIN", 0)
    spread = []
    monkeypatch.setattr(threads, "map_chunks", lambda fn, items, run=threads.map_chunks: (
        spread.append(len(items)), run(fn, items))[1])
    got = {}
    for workers in (1, 3):
        monkeypatch.setattr(threads, "count", lambda workers=workers: workers)
        got[workers] = (verify(p, q, drafts, u), verify(p, q, drafts, u, widths=widths))
    assert spread == [12, 3, 3, 3, 3]  # the pool at 3 threads only, a chunk a row: all 12, then each width's 3
    for one, three in zip(got[1], got[3], strict=True):
        assert torch.equal(one[0], three[0]) and torch.equal(one[1], three[1])


def test_calls_from_several_threads_at_once_answer_as_one_at_a_time() -> None:
    """A server may verify from several Python threads at once: each call keeps its own work arrays (per-thread
    scratch buffers, each thread's own OpenMP team in the C route), so concurrent calls on different shapes (the
    bucketed route and the full sort, one row to sixteen) give what each gives alone."""
    import threading

    cases = []
    for i, (B, V) in enumerate([(8, 2000), (4, 32000), (4, 32000), (1, 3000), (6, 900), (3, 32000)]):
        p, q = _lm_pair(B, V, 20 + i)
        if i % 3 == 1:  # a draft close to its target: most rows take the full sort, in longer C calls
            g = torch.Generator().manual_seed(i)
            q = torch.softmax(torch.log(p) + 0.5 * torch.randn(B, V, generator=g), dim=1)
        drafts = torch.multinomial(q, 4, replacement=True, generator=torch.Generator().manual_seed(i))
        cases.append((p, q, drafts, torch.rand(B, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(i))))
    alone = [verify(*case) for case in cases]
    wrong = []

    def run(i: int) -> None:
        for _ in range(5):
            tokens, index = verify(*cases[i])
            if not (torch.equal(tokens, alone[i][0]) and torch.equal(index, alone[i][1])):
                wrong.append(i)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not wrong


@pytest.mark.parametrize("backend", ["auto", "torch", pytest.param("cuda", marks=needs_cuda)])
def test_a_width_mask_gives_each_row_the_rule_for_its_own_width(backend: str) -> None:
    """widths [B]: row b is verified with its first widths[b] drafts by the n = widths[b] rule, exactly the unmasked
    call on drafts[b, :widths[b]] with the same uniforms (whose law is tested by enumeration above), and the padding
    slots are never read ("cuda": the tensors on the GPU)."""
    B, n = 24, 4
    p, q = _lm_pair(B, 60, 7)
    g = torch.Generator().manual_seed(8)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    u = torch.rand(B, 2, dtype=torch.float64, generator=g)
    widths = torch.arange(B) % n + 1  # every width, interleaved
    if backend == "cuda":
        p, q, drafts, u, widths, backend = p.cuda(), q.cuda(), drafts.cuda(), u.cuda(), widths.cuda(), "auto"
    tokens, index = verify(p, q, drafts, u, backend=backend, widths=widths)
    padded = drafts.clone()
    padded[torch.arange(n, device=widths.device)[None, :] >= widths[:, None]] = 59  # other padding: same result
    again = verify(p, q, padded, u, backend=backend, widths=widths)
    assert torch.equal(tokens, again[0]) and torch.equal(index, again[1])
    for b in range(B):
        m = int(widths[b])
        t, i = verify(p[b:b + 1], q[b:b + 1], drafts[b:b + 1, :m], u[b:b + 1], backend=backend)
        assert (int(tokens[b]), int(index[b])) == (int(t[0]), int(i[0])), b
        assert int(index[b]) < m


def test_the_width_mask_never_synchronises_and_bad_widths_are_refused() -> None:
    p, q = _lm_pair(6, 200, 9)
    drafts = torch.multinomial(q, 3, replacement=True, generator=torch.Generator().manual_seed(1))
    u = torch.rand(6, 2, dtype=torch.float64)
    widths = torch.tensor([1, 2, 3, 3, 2, 1])
    with _Recorder() as rec:
        verify(p, q, drafts, u, backend="torch", widths=widths)
    assert not rec.ops & set(SYNC_OPS), sorted(rec.ops & set(SYNC_OPS))
    optimal = get("optimal")
    tokens, _ = optimal.sample(p, q, drafts, uniforms=u, widths=widths)
    assert torch.equal(tokens, verify(p, q, drafts, u, widths=widths)[0])
    for bad, match in ((torch.tensor([1, 2, 3]), "shape"), (widths.double(), "integer"),
                       (torch.tensor([1, 2, 4, 3, 2, 1]), "between 1 and n = 3"),
                       (torch.tensor([0, 2, 3, 3, 2, 1]), "between 1 and n = 3")):
        with pytest.raises(otlp.InputError, match=match):
            optimal.sample(p, q, drafts, uniforms=u, widths=bad)


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_one_draft_law_is_exact_over_the_uniforms(backend: str) -> None:
    """n = 1 takes its closed form (chains.single_draft, no sort). Its output is constant on the cells that the
    acceptance threshold min(1, p_x / q_x) (in u[:, 0]) and the residual's CDF (in u[:, 1]) cut the unit square
    into, so evaluating the sampler at each cell's centre, weighted by its area and by q_x, integrates the law
    exactly: it must be p, and the accepted mass alpha* = sum min(p, q), within 1e-12, on every instance family."""
    from tests.optimal.instances import FAMILIES, draw

    rng = np.random.default_rng(5)
    for family in FAMILIES:
        for _ in range(6):
            V = int(rng.integers(2, 9))
            P, Q = draw(family, rng, V, 1)
            resid = np.maximum(P - Q, 0.0)
            cuts1 = np.unique(np.r_[0.0, np.cumsum(resid) / resid.sum() if resid.sum() > 0 else [], 1.0])
            cuts1 = cuts1[(cuts1 >= 0) & (cuts1 <= 1)]
            u1, w1 = (cuts1[1:] + cuts1[:-1]) / 2, np.diff(cuts1)
            law, accepted = np.zeros(V), 0.0
            for x in np.flatnonzero(Q > 0):
                cuts0 = np.unique([0.0, min(1.0, P[x] / Q[x]), 1.0])
                u0, w0 = (cuts0[1:] + cuts0[:-1]) / 2, np.diff(cuts0)
                U = torch.from_numpy(np.stack(np.broadcast_arrays(u0[:, None], u1[None, :]), -1).reshape(-1, 2))
                area = (w0[:, None] * w1[None, :]).reshape(-1)
                k = U.shape[0]
                tokens, index = verify(torch.from_numpy(P).expand(k, V), torch.from_numpy(Q).expand(k, V),
                                       torch.full((k, 1), int(x)), U, backend=backend)
                np.add.at(law, tokens.numpy(), Q[x] * area)
                accepted += Q[x] * area[index.numpy() >= 0].sum()
            assert np.abs(law - P).max() < 1e-12, (family, P, Q, law)
            assert abs(accepted - otlp.optimal_acceptance(P, otlp.IID(Q, 1))) < 1e-12, family


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_lm_probabilities_are_normalised_and_the_law_is_exact(dtype: str) -> None:
    """Rows that sum to 1 only within their dtype's rounding are accepted; the rule's law (by enumeration over V^n)
    is the normalised row within 1e-12 (the 1e-6 asked of float32 inputs, with room)."""
    dt = getattr(torch, dtype)
    for seed in range(20):
        p, q = _lm_pair(1, 6, seed, dt)
        assert abs(float(p.double().sum()) - 1.0) < 1e-2
        n = 1 + seed % 3
        omegas = torch.tensor(list(itertools.product(range(6), repeat=n)))
        M = omegas.shape[0]
        P, Q = p.double() / p.double().sum(), q.double() / q.double().sum()
        pre = C.prefix(P.expand(M, 6), Q.expand(M, 6), n)
        accept, reject = C.tuple_rule(pre, omegas, steps=C.NEWTON_STEPS)
        probs = torch.from_numpy(otlp.IID(Q[0].numpy(), n).tuple_probabilities(omegas.numpy()))
        F = C.residual_cdf(pre)[0]
        res = torch.zeros(6, dtype=torch.float64)
        res[pre.order[0]] = torch.diff(F, prepend=F.new_zeros(1))
        res = res / res.sum() if float(res.sum()) > 0 else res
        law = (probs * reject)[:, None] * res[None, :]
        law = law.sum(0).index_add(0, omegas.reshape(-1), (probs[:, None] * accept).reshape(-1))
        assert float((law - P[0]).abs().max()) < 1e-12
        # and the sampler takes the raw rows without refusing them
        tokens, _ = get("optimal").sample(p, q, omegas[:1], generator=torch.Generator().manual_seed(seed))
        assert 0 <= int(tokens[0]) < 6


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_the_host_normalisation_is_the_float64_rows_times_their_reciprocal_sums(dtype: str) -> None:
    """The CPU route normalises with numpy (it runs on host threads): each entry converted exactly to float64 and
    multiplied by 1 / the row's float64 sum, as the device route's torch code does, up to the order of that sum's
    terms."""
    from otlp.optimal import buckets as BK
    from otlp.optimal.sampler import _host, _normalised

    p, _ = _lm_pair(5, 40_000, 3, getattr(torch, dtype))
    p[2] = 0.0  # a row without mass is left as is (validation refuses it before)
    host = _host(p)
    assert host.dtype == (np.float64 if dtype == "float64" else np.float32)
    out = BK.normalised(host, BK.inverse_sums(host), np.full((5, 40_000), np.nan))
    exact = p.double().numpy()  # bfloat16 and float16 convert exactly
    total = exact.sum(1, keepdims=True)
    np.testing.assert_array_equal(out[2], 0.0)
    keep = np.arange(5) != 2
    np.testing.assert_allclose(out[keep] * total[keep], exact[keep], rtol=1e-15, atol=0)
    np.testing.assert_allclose(out, _normalised(p).numpy(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_sampled_law_at_a_real_vocabulary(device: str) -> None:
    """V = 32,000, n = 4, 3,000 verified rows of one (p, q) pair (a sharp target, a broad draft): the output
    tokens follow p (chi-square over the 40 heaviest tokens and the rest) and the accepted fraction is alpha*
    (binomial z-test); on the CPU route and on the GPU (the device route)."""
    V, n, B, reps = 32_000, 4, 1_000, 3
    g = torch.Generator().manual_seed(11)
    p = torch.softmax(torch.randn(V, generator=g) * 2.5, 0)
    q = torch.softmax(torch.randn(V, generator=g) * 2.5 + 0.5 * torch.log(p), 0)
    P, Q = p.expand(B, V).to(device), q.expand(B, V).to(device)
    counts = torch.zeros(V, dtype=torch.float64)
    accepted = 0
    v = get("optimal")
    gd = torch.Generator(device=device).manual_seed(12)
    for _ in range(reps):
        drafts = torch.multinomial(Q, n, replacement=True, generator=gd)
        tokens, index = v.sample(P, Q, drafts, generator=gd)
        counts += torch.bincount(tokens.cpu(), minlength=V).double()
        accepted += int((index >= 0).sum())
    p64 = p.double() / p.double().sum()
    top = torch.argsort(p64, descending=True)[:40]
    expected = torch.cat([p64[top], (1 - p64[top].sum()).reshape(1)]) * B * reps
    observed = torch.cat([counts[top], (counts.sum() - counts[top].sum()).reshape(1)])
    stat = float(((observed - expected) ** 2 / expected).sum())
    assert scipy.stats.chi2.sf(stat, 40) > ALPHA
    alpha = otlp.optimal_acceptance(p64.numpy(), otlp.IID((q.double() / q.double().sum()).numpy(), n))
    N = B * reps
    z = (accepted - N * alpha) / np.sqrt(N * alpha * (1 - alpha))
    assert abs(z) < scipy.stats.norm.isf(ALPHA / 2), (accepted / N, alpha)


def _cuda_case(B: int, V: int, n: int, seed: int):  # noqa: ANN202
    p, q = _lm_pair(B, V, seed)
    g = torch.Generator().manual_seed(seed + 1)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    u = torch.rand(B, 2, dtype=torch.float64, generator=g)
    return p, q, drafts, u


@needs_cuda
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_the_cuda_route_never_synchronises(n: int) -> None:
    """On the GPU itself: CUDA's sync debug mode raises on any synchronising call (a device-to-host copy, .item(),
    nonzero) inside the sampler, with and without a width mask."""
    p, q, drafts, u = (t.cuda() for t in _cuda_case(8, 3000, n, n))
    widths = (torch.arange(8, device="cuda") % n + 1)
    verify(p, q, drafts, u)  # warm-up: lazy CUDA initialisation synchronises once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tokens, index = verify(p, q, drafts, u)
        verify(p, q, drafts, u, widths=widths)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert tokens.device.type == "cuda" and tokens.shape == (8,) and int(index.max()) < n


@needs_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("two_level", [False, True])
def test_the_cuda_route_agrees_with_the_cpu_route(dtype: str, two_level: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rows and uniforms on the GPU and on the CPU (numpy route, data-dependent windows): the same tokens
    and accepted slots, and the tuple rule's accept / reject within 1e-10. Not 1e-12: psi's prefix sums over 5,000
    positions carry about 1e-14 of rounding, which the GPU's parallel scans associate differently from the CPU's
    sequential ones, and the slot roots amplify it (4e-12 seen on an H200; re-associating the CPU's own prefix sums
    in blocks of 32 moves its answer by 5e-13). The 1e-12 agreement with the exact law is the enumeration test of
    tests/optimal/test_chains.py on CUDA. ``two_level``: the GPU's scans in two levels (:func:`otlp.core.xp._scan`,
    which long rows take), here from 1,024 entries."""
    if two_level:
        monkeypatch.setattr(X, "TWO_LEVEL_SCAN_MIN", 1024)
    p, q, drafts, u = _cuda_case(64, 5000, 4, 21)
    p, q = p.to(getattr(torch, dtype)), q.to(getattr(torch, dtype))
    cpu = verify(p, q, drafts, u)
    for backend in ("auto", "torch"):  # the Triton route where Triton imports, and the sorted torch route
        gpu = verify(p.cuda(), q.cuda(), drafts.cuda(), u.cuda(), backend=backend)
        assert torch.equal(cpu[0], gpu[0].cpu()) and torch.equal(cpu[1], gpu[1].cpu()), backend
    P, Q = p.double() / p.double().sum(1, keepdim=True), q.double() / q.double().sum(1, keepdim=True)
    pre = C.prefix(P.numpy(), Q.numpy(), 4)
    a, r = C.tuple_rule(pre, drafts.numpy(), window="auto")
    at, rt = C.tuple_rule(C.prefix(P.cuda(), Q.cuda(), 4), drafts.cuda(), steps=C.NEWTON_STEPS)
    assert np.abs(a - at.cpu().numpy()).max() < 1e-10 and np.abs(r - rt.cpu().numpy()).max() < 1e-10


@needs_cuda
def test_a_cuda_graph_of_the_sampler_replays_bit_for_bit() -> None:
    """Static shapes and caller-supplied uniforms: the sampler is captured once in a CUDA graph, and replaying it on
    new inputs copied into the captured tensors gives the eager call's tokens and slots."""
    from otlp.backend.cuda_graphs import capture

    static = [t.cuda() for t in _cuda_case(16, 4000, 4, 31)]
    graph, out = capture(verify, *static)
    for seed in (32, 33, 34):
        fresh = [t.cuda() for t in _cuda_case(16, 4000, 4, seed)]
        for dst, src in zip(static, fresh, strict=True):
            dst.copy_(src)
        graph.replay()
        eager = verify(*fresh)
        assert torch.equal(out[0], eager[0]) and torch.equal(out[1], eager[1]), seed


@needs_cuda
def test_graphs_true_replays_the_eager_routes_tokens() -> None:
    """graphs=True (the decode loop's setting on a GPU): for several call signatures (widths n, batch sizes, input
    dtypes, a width mask), each met again with fresh inputs and other row counts of the same power of two (copied
    into the captured tensors' first rows), the tokens and slots of the eager call for the same uniforms; one capture
    per signature."""
    from otlp.optimal.sampler import _graph_cache

    cases = [((16, 13, 9), 4000, 4, torch.float32, False), ((3, 4, 3), 4000, 2, torch.float32, False),
             ((16, 11, 16), 4000, 4, torch.float32, True), ((8, 8, 5), 32000, 8, torch.float64, False)]
    cache = _graph_cache(torch.empty(0, device="cuda").device)
    before = cache.captures
    for k, seed in enumerate((32, 33, 34)):
        for sizes, V, n, dtype, masked in cases:
            B = sizes[k]
            p, q, drafts, u = (t.cuda() for t in _cuda_case(B, V, n, seed))
            p, q = p.to(dtype), q.to(dtype)
            widths = torch.arange(B, device="cuda") % n + 1 if masked else None
            graphed = verify(p, q, drafts, u, widths=widths, graphs=True)
            eager = verify(p, q, drafts, u, widths=widths)
            assert torch.equal(graphed[0], eager[0]) and torch.equal(graphed[1], eager[1]), (seed, B, n, masked)
    assert cache.captures - before == len(cases)


def test_the_sorted_route_traces_as_one_graph() -> None:
    """compile=True's route (:func:`otlp.optimal.sampler._device_route`, every width of a mask too) traces whole
    under torch.compile (``fullgraph=True`` raises at a graph break; it had two, at the normalisation's data-pointer
    test), and the traced graph run without inductor gives the eager tokens and slots."""
    from otlp.optimal.sampler import _device_route

    p, q, drafts, u = _cuda_case(6, 3000, 4, 7)
    U = u.double()
    widths = torch.arange(6) % 4 + 1
    torch._dynamo.reset()
    try:
        traced = torch.compile(_device_route, backend="eager", fullgraph=True, dynamic=False)
        for w in (None, widths):
            got, want = traced(p, q, drafts, U, w), _device_route(p, q, drafts, U, w)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    finally:
        torch._dynamo.reset()


@needs_cuda
def test_the_compiled_triton_route_gives_the_eager_routes_tokens() -> None:
    """compile=True on the Triton route (the default on CUDA): the torch operations compiled by inductor, the Triton
    launches between its graphs, torch's roots in place of the roots kernel; the same tokens and slots as the eager
    Triton route, with and without a width mask (its numerics move at rounding level only, inside the certificate's
    margins)."""
    pytest.importorskip("triton", reason="triton is not installed (torch's CUDA builds ship it)")
    p, q, drafts, u = (t.cuda() for t in _cuda_case(64, 20_000, 4, 43))
    widths = torch.arange(64, device="cuda") % 4 + 1
    for w in (None, widths):
        compiled = verify(p, q, drafts, u, widths=w, compile=True)
        eager = verify(p, q, drafts, u, widths=w)
        assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])


@needs_cuda
@pytest.mark.parametrize("two_level", [False, True])
def test_the_compiled_cuda_route_gives_the_eager_routes_tokens(two_level: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """compile=True (torch.compile of the sorted torch route, ``backend="torch"``: the Triton route, the default on
    CUDA, ignores it; at n = 4, and with a width mask at n = 2): for the same
    uniforms, the same tokens and slots as the eager route (its numerics move at rounding level only, so a flip would
    need a uniform within ~1e-15 of a boundary). It used to differ on most rows: an argmax over a mask, which
    torch.compile did not resolve to the first True on CUDA (otlp.core.xp.first_true is now a min-reduction).
    ``two_level``: the scans in two levels (long rows take them; here from 4,096 entries), which inductor failed to
    compile while a padded two-level sum fed a search as a non-contiguous view."""
    if two_level:
        monkeypatch.setattr(X, "TWO_LEVEL_SCAN_MIN", 4096)
    p, q, drafts, u = (t.cuda() for t in _cuda_case(64, 20_000, 4, 41))
    widths = torch.arange(64, device="cuda") % 2 + 1
    for seed in range(3):
        u = torch.rand(64, 2, dtype=torch.float64, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        for w, m in ((None, 4), (widths, 2)):
            compiled = verify(p, q, drafts[:, :m], u, widths=w, compile=True, backend="torch")
            eager = verify(p, q, drafts[:, :m], u, widths=w, backend="torch")
            assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1]), (seed, m)
