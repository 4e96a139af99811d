"""The cell rule's fused Triton root kernel (otlp/optimal/triton_roots.py) pinned to the torch reference: the roots
equal :func:`otlp.optimal.chains.slot_mass`'s to rounding, and the rule decides the same slots and tokens with them.
Without CUDA the kernel runs under ``TRITON_INTERPRET=1``; without Triton installed these tests are skipped (by
name: "triton")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")

from otlp.optimal import chains as C  # noqa: E402
from otlp.optimal import sortfree as SF  # noqa: E402
from otlp.optimal import triton_roots as TR  # noqa: E402

from ..kernels import fresh  # noqa: E402
from .instances import lm_rows  # noqa: E402


@pytest.fixture(autouse=True)
def _interpreted(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    """The kernel made afresh for each test, interpreted on the CPU where there is no CUDA device."""
    with fresh(monkeypatch, TR._kernel):
        yield


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 16])
def test_roots_equal_the_torch_roots(n: int) -> None:
    """Random and edge entries (H = 0, L = 0, gap = 0, r = 0, the clamp at L binding): relative 1e-12 (a root of
    gap = 0 is y D(y) = r y, conditioned ~1e3 eps at small y: the two sums of D differ by rounding)."""
    g = torch.Generator().manual_seed(n)
    N = 2000
    H = torch.rand(N, generator=g, dtype=torch.float64) * 0.95
    L = (1.0 - H) * torch.rand(N, generator=g, dtype=torch.float64)
    r = torch.rand(N, generator=g, dtype=torch.float64) * 3.0
    gap = torch.rand(N, generator=g, dtype=torch.float64) * 0.2
    H[:50], L[50:100], gap[100:150], r[150:200] = 0.0, 0.0, 0.0, 0.0
    gap[200:250] = 10.0  # no root below L: the clamp
    with torch.no_grad():
        got, want = TR.slot_mass(H, L, r, gap, n, C.NEWTON_STEPS), C.slot_mass(H, L, r, gap, n, C.NEWTON_STEPS)
    assert ((got - want).abs() <= 1e-12 * want.abs() + 1e-300).all()


@pytest.mark.parametrize("draft", ["loose", "1", "0.5", "ties"])
def test_the_rule_with_the_kernel_decides_alike(draft: str) -> None:
    """The certificate with the kernel's roots certifies the same rows at the same rounds and picks the same tokens
    as with torch's (n = 2, 4, 8, V = 2k)."""
    from otlp.optimal.sampler import _normalised

    for n in (2, 4, 8):
        p, q, drafts, u = lm_rows(8, 2000, 50 + n, draft, 8)
        P, Q, w = _normalised(p), _normalised(q), drafts[:, :n]
        want = SF.decide(P, Q, w, u, fallback=False)
        got = SF.decide(P, Q, w, u, fallback=False, roots=TR.slot_mass)
        for a, b in ((got.tokens, want.tokens), (got.index, want.index), (got.rounds, want.rounds)):
            assert torch.equal(a, b), (n, draft)
