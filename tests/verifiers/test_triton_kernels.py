"""The fused Triton kernels of the baselines (otlp/verifiers/triton_kernels.py) pinned to their torch references:
the same tokens and accepted indices as :func:`otlp.verifiers.rrs.verify_uniforms` (rrs, with its ``widths``) and
:func:`otlp.optimal.chains.single_draft` (sps) for the same uniforms, on rows with zeros, ties p = q, drafts of
q = 0 and point masses, float32 and float64 (and the 16-bit dtypes once); the coin at the thresholds of the numpy
residual chain; the routes of ``get("rrs")`` / ``get("sps")``; the law by a seeded chi-square; and the kernel
compiled for an H100/H200 (sm_90) where no GPU runs it. Without CUDA the kernels run under ``TRITON_INTERPRET=1``
(slow: small V and B); without Triton installed these tests are skipped (by name: "triton")."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")

from otlp.core.errors import InputError  # noqa: E402
from otlp.optimal.chains import single_draft  # noqa: E402
from otlp.verifiers import get  # noqa: E402
from otlp.verifiers import triton_kernels as TK  # noqa: E402
from otlp.verifiers.rrs import verify_uniforms  # noqa: E402

from ..kernels import compile_sm90, fresh  # noqa: E402
from .instances import KINDS, make_pair  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _interpreted(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    """The kernel made afresh for each test, interpreted on the CPU where there is no CUDA device."""
    with fresh(monkeypatch, TK._kernel):
        yield


def edge_rows(seed: int, B: int, V: int, n: int, dtype: torch.dtype):  # noqa: ANN201
    """``p, q [B, V]`` cycling through the edge kinds of tests/verifiers/instances.py (dirichlet, sparse zeros,
    quarter-grid ties, p = q, point masses, flat q) and, every third row, an LM-like close draft (softmax of 3 z, its
    logits plus noise); drafts ``[B, n]`` from q, one in four replaced by a token anywhere (q = 0 drafts on sparse
    rows); ``u [B, 2]`` float64 uniforms with a few exact zeros."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in range(B):
        if b % 3 == 2:
            logits = 3.0 * rng.standard_normal(V)
            p = np.exp(logits - logits.max())
            q = np.exp(logits + rng.standard_normal(V) - logits.max())
            p, q = p / p.sum(), q / q.sum()
        else:
            p, q = make_pair(rng, V, KINDS[b % len(KINDS)])
        rows.append((p, q))
    p = torch.tensor(np.stack([r[0] for r in rows]), dtype=dtype)
    q = torch.tensor(np.stack([r[1] for r in rows]), dtype=dtype)
    drafts = torch.tensor(np.stack([rng.choice(V, n, p=r[1]) for r in rows]))
    anywhere = torch.tensor(rng.random((B, n)) < 0.25)
    drafts = torch.where(anywhere, torch.tensor(rng.integers(0, V, (B, n))), drafts)
    u = torch.tensor(rng.random((B, 2)))
    u[:2, 0] = 0.0  # a coin of 0 (u q < p: accepts wherever p > 0)
    return p, q, drafts, u


def kernel(fn, *args):  # noqa: ANN001, ANN201
    """``fn`` (``TK.rrs`` or ``TK.sps``) on copies of the CPU tensors ``args`` on ``DEVICE``, its outputs back on
    the CPU: on a GPU the compiled kernel against the CPU's torch route, whose roundings it follows (torch's CUDA
    running sums are float32)."""
    out = fn(*(a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args))
    return tuple(x.cpu() for x in out)


def assert_same(got, want, where) -> None:  # noqa: ANN001
    assert torch.equal(got[0], want[0]), (where, got[0], want[0])
    assert torch.equal(got[1], want[1]), (where, got[1], want[1])


def check_rrs(p, q, drafts, u, widths=None, where=None, rows=None) -> None:  # noqa: ANN001
    """The kernel on ``rows`` (default ``p, q, drafts``) equals the torch route on ``p, q, drafts``."""
    want = verify_uniforms(p, q, drafts, u, widths, backend="torch")
    assert_same(kernel(TK.rrs, *(rows or (p, q, drafts)), u, widths), want, where)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n, V", [(1, 64), (2, 300), (4, 2048), (8, 700)])
def test_rrs_equals_the_torch_route(dtype: torch.dtype, n: int, V: int) -> None:
    """Token for token, index for index, with float64 and float32 uniforms (the first test in their promoted
    dtype)."""
    p, q, drafts, u = edge_rows(n * 1000 + V, 16, V, n, dtype)
    for uu in (u, u.float()):
        check_rrs(p, q, drafts, uu, where=(n, V, uu.dtype))


def test_slots_at_the_chain_thresholds() -> None:
    """The coin against the thresholds of an independent route: draft k is taken iff u0 < T_k = 1 -
    prod_{i<=k} (1 - a_i), a_i = min(1, p_i(x_i) / q(x_i)) along :meth:`RecursiveRejection.residual_chain` (numpy,
    normalised); per row u0 just below and just above a T_k with k >= 1 and 0 < a_k < 1 (the rows where the
    product, not the first test, decides)."""
    from otlp.verifiers.base import accept_probability
    from otlp.verifiers.rrs import RecursiveRejection

    rng = np.random.default_rng(4)
    B, V, n = 24, 20, 4
    rows, us, want = [], [], []
    while len(rows) < B:
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        x = rng.choice(V, n, p=q)
        chain = RecursiveRejection().residual_chain(p, q, n)  # [n + 1, V]
        a = accept_probability(chain[np.arange(n), x], q[x])  # [n]
        T = 1.0 - np.cumprod(1.0 - a)
        inner = np.flatnonzero((np.arange(n) >= 1) & (a > 1e-6) & (a < 1 - 1e-6) & (T < 1 - 1e-6))
        if inner.size == 0:
            continue
        k = rng.choice(inner)
        for u0 in (T[k] - 1e-9, T[k] + 1e-9):
            rows.append((p, q, x))
            us.append(u0)
            later = np.flatnonzero(T > u0)
            want.append(int(later[0]) if later.size else -1)
    p, q, x = (torch.tensor(np.stack(c)) for c in zip(*rows, strict=True))
    u = torch.tensor(np.stack([us, np.full(len(us), 0.5)], axis=1))
    assert kernel(TK.rrs, p, q, x, u)[1].tolist() == want


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rrs_widths_and_blocks(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """``widths`` 0..n (0: the draw from p) as the torch route masks them, over rows of several blocks (BLOCK = 64:
    the running sum carried across blocks, the draw's early stop), and on strided rows and drafts."""
    monkeypatch.setattr(TK, "BLOCK", 64)
    n, V = 5, 300
    p, q, drafts, u = edge_rows(7, 16, V, n, dtype)
    widths = torch.arange(16) % (n + 1)
    check_rrs(p, q, drafts, u, widths, "widths")
    check_rrs(p, q, drafts, u, where="blocks")
    strided = (torch.cat([p, p], 1)[:, :V], torch.cat([q, q], 1)[:, :V], drafts.repeat_interleave(2, 1)[:, ::2])
    assert strided[0].stride(0) == 2 * V and strided[2].stride(1) == 2
    check_rrs(p, q, drafts, u, widths, "strides", rows=strided)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sps_equals_the_torch_route(dtype: torch.dtype) -> None:
    """sps on the first draft, float64 and float32 uniforms, and through ``get("sps").sample``."""
    p, q, drafts, u = edge_rows(11, 16, 500, 3, dtype)
    for uu in (u, u.float()):
        assert_same(kernel(TK.sps, p, q, drafts, uu), single_draft(p, q, drafts[:, :1], uu), uu.dtype)
    sps = get("sps")
    assert_same(kernel(lambda *a: sps.sample(*a, uniforms=u.to(DEVICE), backend="triton"), p, q, drafts),
                sps.sample(p, q, drafts, uniforms=u, backend="torch"), "sample")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_rows(dtype: torch.dtype) -> None:
    """bfloat16 and float16 rows: the chain rounded to the dtype after each float32 link, as torch's ops round;
    float64, float32 and the rows' own dtype of uniforms (the first test and sps's threshold in their promoted
    dtype)."""
    p, q, drafts, u = edge_rows(5, 12, 400, 4, dtype)
    for uu in (u, u.float(), u.to(dtype)):
        check_rrs(p, q, drafts, uu, where=("rrs", uu.dtype))
        assert_same(kernel(TK.sps, p, q, drafts, uu), single_draft(p, q, drafts[:, :1], uu), ("sps", uu.dtype))


def test_emptied_residual() -> None:
    """p = q with zeros: a rejected draft of q = 0 empties (p - q)^+, and the chain keeps p_1 = q (rrs.py's rule):
    the next draft is taken surely, or after all rejections the token is drawn from q; sps draws token 0 from the
    empty residual, as its torch route does."""
    base = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.125, 0.0, 0.125, 0.0], dtype=torch.float64)
    p = base.expand(4, 8).contiguous()
    drafts = torch.tensor([[0, 3], [2, 5], [7, 1], [1, 0]])  # q(0) = q(2) = q(5) = q(7) = 0
    u = torch.tensor([[0.3, 0.7], [0.9, 0.55], [0.0, 0.99], [0.5, 0.2]], dtype=torch.float64)
    got, want = kernel(TK.rrs, p, p, drafts, u), verify_uniforms(p, p, drafts, u, backend="torch")
    assert_same(got, want, "rrs")
    assert got[1].tolist() == [1, -1, 1, 0] and p[0, got[0][1]] > 0
    assert_same(kernel(TK.sps, p, p, drafts, u), single_draft(p, p, drafts[:, :1], u), "sps")


def test_routes() -> None:
    """``get("rrs").sample(..., uniforms=, backend=)``: "triton" equals "torch"; "auto" takes the kernel only on CUDA
    (on CPU tensors it keeps the torch route, which the kernel's stand-in here would fail); rrs_wor has no kernel; a
    bad backend is one InputError."""
    p, q, drafts, u = edge_rows(3, 8, 128, 3, torch.float32)
    rrs, sps = get("rrs"), get("sps")
    want = rrs.sample(p, q, drafts, uniforms=u, backend="torch")
    for backend in ("triton", "auto"):
        assert_same(kernel(lambda *a, b=backend: rrs.sample(*a, uniforms=u.to(DEVICE), backend=b), p, q, drafts),
                    want, backend)
    assert TK.takes(p.to(DEVICE), q.to(DEVICE)) == (DEVICE == "cuda")
    assert not TK.takes(p, q) and not TK.takes(p.to(DEVICE), q.double().to(DEVICE))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TK, "rrs", None)  # "auto" on CPU tensors never calls it
        mp.setattr(TK, "sps", None)
        assert_same(rrs.sample(p, q, drafts, uniforms=u), want, "auto on the CPU")
        sps.sample(p, q, drafts, uniforms=u)
    with pytest.raises(InputError, match="with replacement only"):
        get("rrs_wor").sample(p, q, drafts, uniforms=u, backend="triton")
    for call in (lambda: rrs.sample(p, q, drafts, uniforms=u, backend="cuda"),
                 lambda: rrs.sample(p, q, drafts, backend="cuda"), lambda: sps.sample(p, q, drafts, backend="cuda")):
        with pytest.raises(InputError, match="backend must be one of"):
            call()
    with pytest.raises(InputError, match="one dtype"):
        TK.rrs(p, q.double(), drafts, u)


def test_law_chi_square() -> None:
    """M = 2000 rows of one instance (V = 5 with a zero, n = 3 drafts drawn i.i.d. from q, uniform u; the second
    draft's acceptance is 2/3 on token 1, the chain empties after two links): the tokens' counts against p by
    Pearson's chi-square and the accepted share against rrs's closed-form acceptance A(c_n)
    (:meth:`RecursiveRejection.verifier_acceptance`) by a two-sided z-test. Thresholds: the chi-square quantile
    1 - 1e-4 (3 degrees of freedom: the four tokens of p > 0) and |z| < 4.4 (two-sided 1e-5): a correct kernel
    fails either with probability about 1.1e-4 (fixed seeds: the outcome is reproducible)."""
    from scipy import stats

    from otlp.core.drafts import IID

    pv = np.array([0.3, 0.3, 0.3, 0.1, 0.0])
    qv = np.array([0.1, 0.25, 0.25, 0.2, 0.2])
    M, n = 2000, 3
    g = torch.Generator().manual_seed(41)
    p = torch.tensor(pv).expand(M, 5).contiguous()
    q = torch.tensor(qv).expand(M, 5).contiguous()
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    u = torch.rand(M, 2, generator=g, dtype=torch.float64)
    tokens, index = kernel(TK.rrs, p, q, drafts, u)
    counts = torch.bincount(tokens, minlength=5).numpy()
    assert counts[4] == 0
    chi2 = float(((counts[:4] - M * pv[:4]) ** 2 / (M * pv[:4])).sum())
    assert chi2 < stats.chi2.ppf(1 - 1e-4, df=3), (chi2, counts)
    alpha = get("rrs").verifier_acceptance(pv, IID(qv, n))
    z = (float((index >= 0).float().mean()) - alpha) / np.sqrt(alpha * (1 - alpha) / M)
    assert abs(z) < 4.4, (z, alpha)


@pytest.mark.parametrize("dtype, n, restore", [("*fp32", 4, True), ("*bf16", 1, False), ("*fp64", 8, True)])
def test_the_kernel_compiles_for_sm90(dtype: str, n: int, restore: bool, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The compiled route, which the interpreter does not exercise (types of loop-carried values, constexpr
    branches): Triton lowers the kernel to PTX and a cubin for sm_90 without a GPU."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    sig = {"p_ptr": dtype, "q_ptr": dtype, "d_ptr": "*i64", "u_ptr": "*fp64", "w_ptr": "*i64", "tok_ptr": "*i64",
           "idx_ptr": "*i64", "V": "i32", "sp": "i32", "sq": "i32", "sd": "i32", "su": "i32", "suc": "i32"}
    const = dict(N=n, NP=max(2, 1 << (n - 1).bit_length()), HAS_W=restore, RESTORE=restore, WIDE=dtype == "*fp64", T0=1,
                 TX=2, U1P=restore, BLOCK=TK.BLOCK)
    with fresh(monkeypatch, TK._kernel, compiled=True):
        kernel = compile_sm90(TK._kernel(), sig, const, num_warps=TK.WARPS)
    assert "cubin" in kernel.asm and ".entry fused" in kernel.asm["ptx"]
