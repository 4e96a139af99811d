"""K-SEQ's rho* (SpecTr eq. 6): one bisection for numpy rows and torch batches, checked against its definition.

rho* = inf { rho in [1, n] : f(rho) <= 0 } with f(rho) = 1 - (1 - beta)^n - rho beta, beta = sum min(q, p / rho)
(the paper's form, evaluated here independently of the module's g = sum min(rho q, p)). The returned rho must be on
the valid side (f <= 0) and no valid point may lie below it by more than the bisection's resolution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otlp.verifiers.kseq import bisection_steps, rho_star

from .instances import KINDS, make_pair


def _f(p: np.ndarray, q: np.ndarray, n: int, rho: float) -> float:
    beta = float(np.minimum(q, p / rho).sum())
    return 1.0 - (1.0 - beta) ** n - rho * beta


@pytest.mark.parametrize("kind", KINDS)
def test_rho_star_is_the_left_end_of_the_valid_side(kind: str) -> None:
    rng = np.random.default_rng(17)
    for V in (2, 3, 5, 12):
        for n in (2, 3, 4, 8):
            for _ in range(8):
                p, q = make_pair(rng, V, kind)
                rho = float(rho_star(p, q, n))
                assert 1.0 <= rho <= n
                assert _f(p, q, n, rho) <= 1e-12
                below = rho - 1e-9 * n
                assert below < 1.0 or _f(p, q, n, below) > -1e-12  # nothing valid well below rho


def test_torch_batches_match_numpy_rows() -> None:
    """The same bisection on a float64 batch [B, V] (LM-like rows, V = 2000) and on each row as a numpy vector;
    float32 rows take 27 steps and stay within float32 resolution of the float64 answer."""
    g = torch.Generator().manual_seed(0)
    P = torch.softmax(torch.randn(6, 2000, generator=g, dtype=torch.float64) * 3, 1)
    Q = torch.softmax(torch.randn(6, 2000, generator=g, dtype=torch.float64) * 3 + 0.5 * torch.log(P), 1)
    for n in (2, 4, 8):
        batch = rho_star(P, Q, n)
        assert batch.shape == (6,)
        rows = np.array([float(rho_star(P[b].numpy(), Q[b].numpy(), n)) for b in range(6)])
        np.testing.assert_allclose(batch.numpy(), rows, rtol=0, atol=1e-13)
        low = rho_star(P.float(), Q.float(), n)
        assert low.dtype == torch.float32 and bisection_steps(torch.float32) < bisection_steps(torch.float64)
        np.testing.assert_allclose(low.double().numpy(), rows, rtol=1e-6)


@pytest.mark.parametrize("V", [3, 40, 6000])
def test_host_two_stage_bisection_matches_the_plain_one(monkeypatch: pytest.MonkeyPatch, V: int) -> None:
    """On the host, rows of any V are bisected in two stages (the bracket's inner tokens only after HOST_FULL_STEPS
    steps) and in chunks of rows (otlp.core.xp.row_chunks): float64 rho* equals the plain bisection over the whole rows
    to 1e-13, is valid (f <= 1e-12) and tight (no valid point 1e-9 n below it, by the paper's form of f), with
    chunks of 1 and 3 rows too (those of 3 rows on 3 host threads); float32 rows stay within 2e-6 of the plain
    float32 bisection (1e-4 with a few tokens)."""
    from otlp.backend import threads
    from otlp.core import xp
    from otlp.verifiers import kseq

    g = torch.Generator().manual_seed(1)
    P = torch.softmax(torch.randn(7, V, generator=g, dtype=torch.float64) * 3, 1)
    Q = torch.softmax(torch.randn(7, V, generator=g, dtype=torch.float64) * 3 + 0.5 * torch.log(P), 1)
    for n in (2, 4, 8):
        plain = kseq._bisect(P, Q, n, bisection_steps(P.dtype))[1][:, 0].numpy()
        for rows in (None, 1, 3):
            if rows is not None:
                monkeypatch.setattr(xp, "HOST_CHUNK", rows * V)
                assert len(xp.row_chunks(P)) == -(-7 // rows)
                monkeypatch.setattr(threads, "count", lambda rows=rows: rows)  # chunks of 3 rows on 3 threads
            for p, q in ((P, Q), (P.numpy(), Q.numpy())):
                rho = np.asarray(rho_star(p, q, n))
                assert rho.shape == (7,) and rho.dtype == np.float64
                np.testing.assert_allclose(rho, plain, rtol=0, atol=1e-13)
                for b in range(7):
                    assert _f(P[b].numpy(), Q[b].numpy(), n, rho[b]) <= 1e-12
                    assert _f(P[b].numpy(), Q[b].numpy(), n, rho[b] - 1e-9 * n) > -1e-12
            low = rho_star(P.float(), Q.float(), n)
            assert low.dtype == torch.float32
            plain32 = kseq._bisect(P.float(), Q.float(), n, bisection_steps(torch.float32))[1][:, 0]
            # with a few tokens f is flat near rho*: float32 rounding moves both bisections by up to ~3e-5 (measured
            # against float64 at V = 3, n = 8), and they differ by the rounding of their sums
            np.testing.assert_allclose(low.numpy(), plain32.numpy(), rtol=2e-6 if V > 100 else 1e-4)
        monkeypatch.undo()
