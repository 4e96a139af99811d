"""The Newton steps of the without-replacement rule's plan in one Triton program per row (otlp/optimal/wor_triton.py),
and ``get("optimal_wor")``'s route that takes them (``backend="triton"``, the default on CUDA where Triton imports).

Without CUDA the kernel runs under ``TRITON_INTERPRET=1``; without Triton installed these tests are skipped (by name:
"triton is not installed").

* The plan against :func:`otlp.optimal.wor.set_plan` on tensors, its reference, from the same setup: choices and
  acceptance to 1e-12 and the same rows converged, on instances with ties in q and in q/p, zeros in p, a target all
  on the support (OTHER of mass 0), a near point mass, n = 1 to 4 and 8; also cut to 0 and 1 Newton step (the same
  unconverged plan, so the same trajectory).
* The route's law and acceptance by enumeration of every ordered tuple (law p to 1e-12, acceptance alpha* to 1e-10).
* The route's tokens and slots equal the torch route's on LM-like rows (float32 and bfloat16, widths).
* Its refusals, and the kernel compiles for sm_90 (PTX and a cubin) without a GPU: the compiled route, which the
  interpreter does not check (loop-carried types, constexpr branches).
"""

from __future__ import annotations

import numpy as np
import pytest

from otlp.core.drafts import combinations, set_probabilities
from otlp.core.errors import InputError
from otlp.core.psi_wor import wor_optimal_acceptance

from ..kernels import compile_sm90, fresh
from ..verifiers.test_optimal_wor import _enumerated_rows, _wor_rows

torch = pytest.importorskip("torch")

from otlp.optimal import wor as W  # noqa: E402
from otlp.verifiers import get  # noqa: E402


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """:mod:`.wor_triton` with its kernel made afresh, interpreted on the CPU where there is no CUDA device."""
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    from otlp.optimal import wor_triton

    with fresh(monkeypatch, wor_triton._kernel):
        yield wor_triton


def _instances(k: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``p, q [6, k + 1]`` on a support of k tokens and OTHER (q = 0 there): plain, ties in q and in q/p, a
    token of p = 0, p all on the support (OTHER 0), a near point mass in p, heavy tails."""
    rows_p, rows_q = [], []
    for kind in range(6):
        q = rng.dirichlet(np.ones(k))
        p = rng.dirichlet(np.ones(k)) * 0.8
        if kind == 1:
            q[1] = q[0]
            p[3] = p[2] * q[3] / q[2]
        elif kind == 2:
            p[0] = 0.0
        elif kind == 3:
            p = p / p.sum()
        elif kind == 4:
            p = np.full(k, 1e-9)
            p[1] = 0.9
        elif kind == 5:
            z = rng.standard_normal(k)
            p, q = np.exp(3 * z) * 0.7 / np.exp(3 * z).sum(), np.exp(2 * z + rng.standard_normal(k))
            q = q / q.sum()
        rows_p.append(np.append(p, max(1.0 - p.sum(), 0.0)))
        rows_q.append(np.append(q, 0.0))
    return torch.tensor(np.array(rows_p)), torch.tensor(np.array(rows_q))


@pytest.mark.parametrize(("k", "n"), [(5, 1), (6, 2), (7, 3), (7, 4), (10, 8)])
def test_the_kernel_is_set_plan_to_rounding(kernel, k: int, n: int) -> None:  # noqa: ANN001
    rng = np.random.default_rng(100 + 10 * k + n)
    p, q = _instances(k, rng)
    sets = torch.from_numpy(combinations(k, n))
    probs = set_probabilities(q, sets)
    for steps in (0, 1, None):  # (last: DEVICE_STEPS)
        alpha, choice, residual = W.set_plan(p, q, sets, probs, steps=steps)
        alpha2, choice2, residual2 = W.set_plan(p, q, sets, probs, steps=steps, kernel=True)
        assert torch.equal(torch.isfinite(residual), torch.isfinite(residual2)), steps
        assert (choice - choice2).abs().max() <= 1e-12, steps
        assert (alpha - alpha2).abs().max() <= 1e-12, steps
    assert torch.isfinite(residual2).all()  # every row converged in DEVICE_STEPS
    assert alpha2.sum() > 0


@pytest.mark.parametrize(("V", "k", "n", "K"), [(7, 4, 2, 4), (7, 5, 3, 6), (6, 4, 4, 4)])
def test_the_routes_law_and_acceptance_by_enumeration(kernel, V: int, k: int, n: int, K: int) -> None:  # noqa: ANN001
    from otlp.verifiers.optimal_wor import static_rule

    p, q, omegas, probs = _enumerated_rows(V, k, n, seed=V * 100 + k * 10 + n)
    M = omegas.shape[0]
    P, Q = torch.from_numpy(p).expand(M, V), torch.from_numpy(q).expand(M, V)
    accept, weights, _ = static_rule(P, Q, torch.from_numpy(omegas), None, K, True)
    accept, weights = accept.numpy(), weights.numpy()
    assert (accept >= 0).all() and (accept.sum(1) <= 1 + 1e-12).all()
    law = np.bincount(omegas.ravel(), (probs[:, None] * accept).ravel(), V)
    law += ((probs * (1 - accept.sum(1)))[:, None] * weights / weights.sum(1, keepdims=True)).sum(0)
    np.testing.assert_allclose(law, p, rtol=0, atol=1e-12)
    assert abs(float(probs @ accept.sum(1)) - wor_optimal_acceptance(p, q, n)) < 1e-10


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_triton_route_is_the_torch_route(kernel, dtype: torch.dtype) -> None:  # noqa: ANN001
    p, q, drafts, u = _wor_rows(8, 500, 6, 3, 0.7, seed=31)
    p, q = p.to(dtype), q.to(dtype)
    q = torch.where(q.float() > 0, q, torch.zeros_like(q))
    widths = torch.tensor([3, 2, 1, 3] * 2)
    v = get("optimal_wor")
    for kw in ({}, {"widths": widths}):
        want = v.sample(p, q, drafts, uniforms=u, backend="torch", top_k=7, **kw)
        got = v.sample(p, q, drafts, uniforms=u, backend="triton", top_k=7, **kw)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_refusals() -> None:
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    from otlp.optimal import wor_triton

    p, q, drafts, u = _wor_rows(2, 200, 6, 2, 0.7, seed=32)
    v = get("optimal_wor")
    with pytest.raises(InputError, match="at most 62 support tokens"):
        v.sample(p, q, drafts, uniforms=u, backend="triton", top_k=wor_triton.MAX_G - 1, validate=False)
    assert not wor_triton.takes(wor_triton.MAX_G + 1, 2) and wor_triton.takes(wor_triton.MAX_G, 12)


@pytest.mark.parametrize(("n", "GP"), [(1, 16), (3, 64), (8, 32)])
def test_the_kernel_compiles_for_sm90(n: int, GP: int, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    from otlp.optimal import wor_triton

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    types = {"theta_ptr": "*fp64", "goal_ptr": "*fp64", "fixed_ptr": "*i8", "present_ptr": "*i8", "sets_ptr": "*i64",
             "live_ptr": "*i8", "probs_ptr": "*fp64", "failed_ptr": "*i8", "choice_ptr": "*fp64",
             "residual_ptr": "*fp64", "U": "i32", "E": "i32", "G": "i32", "tol": "fp64"}
    with fresh(monkeypatch, wor_triton._kernel, compiled=True):
        fn, helpers = wor_triton._kernel()
        const = dict(N=n, SP=max(2, 1 << n.bit_length()), GP=GP, BU=wor_triton.BU, STEPS=12, TRIALS=2, **helpers)
        compiled = compile_sm90(fn, types, const)
    assert "cubin" in compiled.asm and ".entry newton" in compiled.asm["ptx"]
