"""The full-order rule in one Triton program per undecided row (otlp/optimal/device_fallback.py), and the Triton route
of ``get("optimal")`` it completes (otlp/optimal/sampler.py ``backend="triton"``).

Without CUDA the kernels run under ``TRITON_INTERPRET=1``; without Triton installed these tests are skipped (by name:
"triton is not installed").

* Every row flagged: the same token and slot as the reference (:mod:`otlp.optimal.chains`: the ratio sort, the tuple
  rule, the draw) for the same uniforms, on every drafted tuple of small instances of every family (zeros, ties,
  near-ties, point masses; u[:, 0] at random and 1e-7 to one side of one of the slots' ends), and on LM-like rows
  (loose and close drafts, tied ratios, float32 / bfloat16 / float64, V not a power of two, n = 2 to 8, targets
  filtered to their top-k / top-p tokens).
* Some rows flagged: the others keep the values given, and no input is written.
* Inside :func:`.device_buckets.decide` (``fallback_rows="kernel"``) with a selection the certificate cannot decide
  from: every row exact, nothing counted as overflow.
* ``get("optimal").sample(..., backend="triton")``: the CPU route's tokens, with and without ``widths``, and no
  synchronising aten op (the torch operations around the kernels); its errors.
* The kernels compile for sm_90 (PTX and a cubin) without a GPU: the compiled route, which the interpreter does not
  check (loop-carried types, constexpr branches, combine functions).
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.errors import InputError
from otlp.optimal import chains as C

from ..kernels import compile_sm90, fresh
from .instances import draw, lm_rows

torch = pytest.importorskip("torch")

from otlp.optimal import device_buckets as DB  # noqa: E402
from otlp.verifiers import get  # noqa: E402


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """:mod:`.device_fallback` with its kernel made afresh, interpreted on the CPU where there is no CUDA device."""
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    from otlp.optimal import device_fallback as DF
    from otlp.optimal import device_passes as DP
    from otlp.optimal import triton_roots as TR

    with fresh(monkeypatch, DF._kernel, DP._kernels, TR._kernel):
        yield DF


def _reference(p, q, w, U):  # noqa: ANN001, ANN202
    """The rule's definition on the rows normalised as the device routes normalise them."""
    inv_p, inv_q = DB.inverse_sums(p), DB.inverse_sums(q)
    pre = C.prefix(DB._normalised(p, inv_p), DB._normalised(q, inv_q), w.shape[1])
    accept, reject = C.tuple_rule(pre, w, steps=C.NEWTON_STEPS)
    return C.sample(pre, accept, reject, w, U)


def _every_row(DF, p, q, w, U):  # noqa: ANN001, ANN202
    B = p.shape[0]
    none = torch.full((B,), -7, dtype=torch.int64)
    return DF.decide_rows(p, q, DB.inverse_sums(p), DB.inverse_sums(q), w, U, torch.ones(B, dtype=torch.bool),
                          none, none.clone())


SMALL = [("rational_ties", 4, 2), ("zeros", 5, 2), ("near_ties", 4, 3), ("identical_tokens", 3, 3),
         ("point_mass_q", 4, 2), ("point_mass_p", 4, 2), ("p_equals_q", 3, 3), ("heavy", 3, 3)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(("family", "V", "n"), SMALL)
def test_every_tuple_of_small_instances(kernel, family: str, V: int, n: int) -> None:  # noqa: ANN001
    """Each tuple twice: u[:, 0] 1e-7 to one side of one of its slots' ends (the side and the end at random), and at
    random."""
    rng = np.random.default_rng([11, SMALL.index((family, V, n))])
    p, q = draw(family, rng, V, n)
    omegas, _ = otlp.IID(q, n).support()
    T = omegas.shape[0]
    P = torch.from_numpy(np.asarray(p, dtype=np.float64))[None, :].expand(2 * T, -1).contiguous()
    Q = torch.from_numpy(np.asarray(q, dtype=np.float64))[None, :].expand(2 * T, -1).contiguous()
    w = torch.from_numpy(omegas).long().repeat(2, 1)
    pre = C.prefix(P[:T], Q[:T], n)
    accept, reject = C.tuple_rule(pre, w[:T], steps=C.NEWTON_STEPS)
    cw = torch.cat([accept, torch.where(pre.alpha < 1.0, reject, 0.0)[:, None]], 1).cumsum(1)  # [T, n + 1]
    g = torch.Generator().manual_seed(V * n)
    end = cw.gather(1, torch.randint(0, n + 1, (T, 1), generator=g))[:, 0]
    side = torch.where(torch.rand(T, generator=g) < 0.5, -1e-7, 1e-7)
    u0 = torch.cat([end + side, torch.rand(T, dtype=torch.float64, generator=g)]).clamp(0.0, 1.0 - 1e-12)
    U = torch.stack([u0, torch.rand(2 * T, dtype=torch.float64, generator=g)], 1)
    got = _every_row(kernel, P, Q, w, U)
    want = _reference(P, Q, w, U)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


LM = [(1000, "loose", 2, torch.float32, None), (2500, "0.5", 4, torch.float32, None),
      (1500, "1", 8, torch.float64, None), (777, "ties", 3, torch.float32, None),
      (2048, "0.5", 3, torch.bfloat16, None), (600, "ties", 8, torch.float64, None),
      (1200, "1", 4, torch.float32, 50), (1200, "loose", 2, torch.float32, 0.9)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(("V", "draft", "n", "dtype", "topk"), LM)
def test_lm_rows(kernel, V: int, draft: str, n: int, dtype, topk) -> None:  # noqa: ANN001
    """``topk``: the target filtered to its top-k / top-p tokens as engines pass it (p = 0 < q: ratio +inf, the
    order's first run)."""
    p, q, w, U = lm_rows(6, V, 40 + n, draft, n, dtype, topk=topk)
    got = _every_row(kernel, p, q, w, U)
    want = _reference(p, q, w, U)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    cpu = get("optimal").sample(p, q, w, None, uniforms=U)  # the host's route (C where built) agrees too
    assert torch.equal(got[0], cpu[0]) and torch.equal(got[1], cpu[1])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_only_flagged_rows_are_decided_and_inputs_are_not_written(kernel) -> None:  # noqa: ANN001
    p, q, w, U = lm_rows(8, 900, 3, "1", 4)
    before = [x.clone() for x in (p, q, w, U)]
    todo = torch.tensor([True, False, False, True, False, True, False, False])
    tokens, index = torch.arange(8) + 100, -torch.arange(8) - 2
    inv_p, inv_q = DB.inverse_sums(p), DB.inverse_sums(q)
    got = kernel.decide_rows(p, q, inv_p, inv_q, w, U, todo, tokens, index, programs=3)
    want = _reference(p, q, w, U)
    assert torch.equal(got[0][todo], want[0][todo]) and torch.equal(got[1][todo], want[1][todo])
    assert torch.equal(got[0][~todo], tokens[~todo]) and torch.equal(got[1][~todo], index[~todo])
    assert torch.equal(tokens, torch.arange(8) + 100) and torch.equal(index, -torch.arange(8) - 2)
    assert all(torch.equal(a, b) for a, b in zip(before, (p, q, w, U), strict=True))
    with pytest.raises(ValueError, match="2 <= n <= 64"):
        kernel.decide_rows(p, q, inv_p, inv_q, w[:, :1], U, todo, tokens, index)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_inside_the_bucket_rule(kernel) -> None:  # noqa: ANN001
    """With the least selection (no bucket sorted) and no refinement most rows are undecided; the kernel takes all of
    them, whatever their number, and the call is exact."""
    from otlp.optimal import buckets as BK
    from otlp.optimal.device_passes import TRITON

    p, q, w, U = lm_rows(12, 1200, 9, "0.5", 4)
    least = torch.zeros(12, BK.scheme(0).NB, dtype=torch.bool)
    d = DB.decide(p, q, w, U, bits=0, rounds=0, selection=least, fallback_rows="kernel", passes=TRITON)
    want = _reference(p, q, w, U)
    assert int((d.rounds > 0).sum()) >= 6  # the kernel decided at least half of the rows
    assert torch.equal(d.tokens, want[0]) and torch.equal(d.index, want[1]) and int(d.overflow) == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_triton_route_of_the_sampler(kernel) -> None:  # noqa: ANN001
    from otlp.optimal.sampler import verify

    from .test_sampler_device import SYNC_OPS, _Recorder

    opt = get("optimal")
    for V, draft, n in ((2000, "0.5", 4), (1100, "ties", 3), (900, "loose", 1)):
        p, q, w, U = lm_rows(10, V, 5, draft, n)
        want = opt.sample(p, q, w, None, uniforms=U)
        got = opt.sample(p, q, w, None, uniforms=U, backend="triton")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        widths = torch.randint(1, n + 1, (10,), generator=torch.Generator().manual_seed(V))
        want = opt.sample(p, q, w, None, uniforms=U, widths=widths)
        with _Recorder() as rec:  # no synchronising op (the tied rows take the kernel)
            got = verify(p, q, w, U, widths=widths, backend="triton")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert not rec.ops & set(SYNC_OPS), rec.ops & set(SYNC_OPS)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_compiled_triton_route(kernel) -> None:  # noqa: ANN001
    """compile=True's Triton route (:func:`otlp.optimal.sampler._compiled_bucket_route`): torch.compile traces its
    torch operations in at most 7 graphs, broken only at the 6 Triton launches (the histogram, the compaction and the
    segments of both attempts, the fallback kernel: ``otlp.backend.triton.opaque``), never into a launch or the
    interpreter; the traced route, run without inductor (``backend="eager"``), gives the eager route's tokens and
    slots, with a width mask too (every width traced)."""
    import functools

    from otlp.optimal import sampler as S

    p, q, w, U = lm_rows(8, 2000, 5, "0.5", 4)
    U = U.double()
    widths = torch.randint(1, 5, (8,), generator=torch.Generator().manual_seed(3))
    graphs = []

    def count(gm, example_inputs):  # noqa: ANN001, ANN202, ARG001 - a torch.compile backend: each graph it is given
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        traced = torch.compile(functools.partial(S._bucket_route, roots=C.slot_mass), backend=count, dynamic=False)
        got, want = traced(p, q, w, U), S._bucket_route(p, q, w, U)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert len(graphs) <= 7  # at most one per stretch between launches (an empty stretch compiles none)
        got, want = traced(p, q, w, U, widths), S._bucket_route(p, q, w, U, widths)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    finally:
        torch._dynamo.reset()


def test_triton_route_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from otlp.optimal.sampler import verify

    p, q, w, U = lm_rows(2, 50, 1, "1", 2)
    with pytest.raises(InputError, match="backend must be one of"):
        verify(p, q, w, U, backend="cuda")
    with pytest.raises(InputError, match="default tuple rule only"):
        verify(p, q, w, U, backend="triton", rule=lambda pre, w, window=None: None)
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InputError, match="runs on CUDA tensors"):
        verify(p, q, w, U, backend="triton")
    many = torch.zeros(2, 65, dtype=torch.int64)
    with pytest.raises(InputError, match="at most 64 drafts"):
        verify(p, q, many, U, backend="triton")


@pytest.mark.parametrize(("dtype", "n"), [("*fp32", 2), ("*bf16", 3), ("*fp64", 8)])
def test_the_kernels_compile_for_sm90(dtype: str, n: int, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    from otlp.optimal import buckets as BK
    from otlp.optimal import device_fallback as DF
    from otlp.optimal import device_passes as DP
    from otlp.optimal import triton_roots as TR

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    with fresh(monkeypatch, DF._kernel, DP._kernels, TR._kernel, compiled=True):
        rule, helpers = DF._kernel()
        ptr = dict.fromkeys(["p_ptr", "q_ptr"], dtype) | dict.fromkeys(["ip_ptr", "iq_ptr", "u_ptr"], "*fp64")
        ptr |= {"w_ptr": "*i64", "todo_ptr": "*u8", "tok_ptr": "*i64", "idx_ptr": "*i64", "ord_s": "*i64",
                "pos_s": "*i64"}
        ptr |= dict.fromkeys(["key_s", "ps_s", "qs_s", "pp_s", "pq_s", "psi_s", "sq_s", "y_s", "binom_ptr",
                              "dco_ptr"], "*fp64") | dict.fromkeys(["B", "V", "Vp", "G"], "i32")
        const = dict(N=n, NP=max(2, 1 << (n - 1).bit_length()), BLOCK=DF.BLOCK, LIMIT=DF.NEWTON_LIMIT, **helpers)
        kernel = compile_sm90(rule, {k: ptr[k] for k in rule.arg_names if k not in const}, const)
        assert "cubin" in kernel.asm and ".entry rule" in kernel.asm["ptx"]
        consts = DP._constants(BK.scheme(4))
        hist, gather, segs, _ = DP._kernels()
        rows = dict.fromkeys(["p_ptr", "q_ptr"], dtype) | dict.fromkeys(["ip_ptr", "iq_ptr"], "*fp64")
        for fn, extra, more in (
                (hist, {"count_ptr": "*i64", "Pb_ptr": "*fp64", "Qb_ptr": "*fp64", "V": "i32", "NB": "i32"},
                 {"BLOCK": DP.BLOCK, "KA": 0, "KB": BK.scheme(4).NB - 1}),
                (gather, {"sel_ptr": "*u8", "ids_ptr": "*i64", "Pc_ptr": "*fp64", "Qc_ptr": "*fp64",
                          "count_ptr": "*i64", "V": "i32", "NB": "i32", "K": "i32"}, {"BLOCK": DP.BLOCK}),
                (segs, {"part_ptr": "*u8", "act_ptr": "*u8", "dkey_ptr": "*fp64", "did_ptr": "*i64",
                        "dbucket_ptr": "*i64", "drank_ptr": "*i64", "dfirst_ptr": "*i64", "Ps_ptr": "*fp64",
                        "Qs_ptr": "*fp64", "cs_ptr": "*i64", "V": "i32", "NB": "i32"},
                 {"BLOCK": DP.SEG_BLOCK, "N": n, "S": max(2, 1 << (2 * n - 1).bit_length())})):
            const = consts | more
            types = rows | extra
            compiled = compile_sm90(fn, {k: types[k] for k in fn.arg_names if k not in const}, const)
            assert "cubin" in compiled.asm
        roots = TR._kernel()
        const = {"n": n, "steps": C.NEWTON_STEPS, "BLOCK": TR.BLOCK}
        types = dict.fromkeys(["H_ptr", "L_ptr", "r_ptr", "gap_ptr", "out_ptr"], "*fp64") | {"N": "i32"}
        assert "cubin" in compile_sm90(roots, types, const).asm
