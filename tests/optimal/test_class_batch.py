"""solve_batch's default route (otlp.optimal.class_batch): every group of every row a class chain, vectorised.

Independent routes: each row's law and acceptance by enumeration over V^n, alpha* against the single path
(OptimalTransport, a different optimal plan); the segmented scan against a plain loop; the "blocks" route too.
"""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.optimal import OptimalTransport, solve_batch
from otlp.optimal.waterfill import segmented_scan

from .instances import FAMILIES, draw
from .test_exact_enumeration import TOL, enumerate_rule


def _batch(rng, family, B, V, n):
    pairs = [draw(family, rng, V, n) for _ in range(B)]
    return np.stack([a for a, _ in pairs]), np.stack([b for _, b in pairs])


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_row_is_exact_on_every_family(n: int) -> None:
    rng = np.random.default_rng([44, n])
    for family in sorted(FAMILIES):
        P, Q = _batch(rng, family, 8, 6 if n < 4 else 5, n)
        batch = solve_batch(P, Q, n)
        for b in range(P.shape[0]):
            law, acceptance = enumerate_rule(batch[b], otlp.IID(Q[b], n))
            single = OptimalTransport.from_arrays(P[b], Q[b], n)
            where = f"{family} row {b}"
            assert batch[b].success and np.abs(law - P[b]).sum() < TOL, where
            assert abs(acceptance - single.alpha) < TOL and abs(batch.alpha[b] - single.alpha) < TOL, where


@pytest.mark.parametrize("method", ["class_chains", "blocks"])
def test_larger_rows_and_both_methods(method: str) -> None:
    rng = np.random.default_rng(45)
    for family in ("heavy", "zeros", "near_ties", "p_equals_q", "skewed_q"):
        for n, V in ((2, 60), (3, 22)):
            P, Q = _batch(rng, family, 3, V, n)
            batch = solve_batch(P, Q, n, method=method)
            omegas = np.stack([rng.choice(V, size=n, p=q) for q in Q])
            slices = batch.slices(omegas)
            for b in range(3):
                law, acceptance = enumerate_rule(batch[b], otlp.IID(Q[b], n))
                assert batch[b].success and np.abs(law - P[b]).sum() < TOL, (family, n, b)
                assert abs(acceptance - batch.alpha[b]) < TOL
                np.testing.assert_allclose(slices[b], batch[b].slice(omegas[b]), atol=1e-13)


def test_segmented_scan_matches_a_loop() -> None:
    rng = np.random.default_rng(46)
    share, keep = rng.random((5, 37)), rng.random((5, 37))
    keep[rng.random((5, 37)) < 0.1] = 0.0
    first = rng.random((5, 37)) < 0.2
    first[:, 0] = True
    S, F = segmented_scan(share, keep, first)
    for b in range(5):
        s_, f_ = 0.0, 1.0
        for i in range(37):
            if first[b, i]:
                s_, f_ = 0.0, 1.0
            s_, f_ = share[b, i] + keep[b, i] * s_, keep[b, i] * f_
            assert abs(S[b, i] - s_) <= 1e-14 and abs(F[b, i] - f_) <= 1e-15


def test_unknown_method_is_refused() -> None:
    with pytest.raises(otlp.InputError, match="method"):
        solve_batch(np.full((1, 2), 0.5), np.full((1, 2), 0.5), 2, method="nope")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_direct_batch_arrays_equal_the_rows_stacked(n: int) -> None:
    """solve_batch builds the batch's [B, V] arrays straight from the class chains; they must equal what stacking
    the rows' OptimalTransport objects gives (TransportBatch.__init__), attribute by attribute, on every family."""
    from otlp.optimal.batch import TransportBatch

    rng = np.random.default_rng([47, n])
    for family in sorted(FAMILIES):
        P, Q = _batch(rng, family, 5, 7, n)
        direct = solve_batch(P, Q, n)
        stacked = TransportBatch([direct[b] for b in range(len(direct))])  # the rows, built on demand
        for name in ("alpha", "_position", "_log_w", "_leaf", "_leaf_inner", "_fire", "_rank", "_node_fallback",
                     "_chain_node", "_path", "residual", "_residual_cdf"):
            np.testing.assert_array_equal(getattr(direct, name), getattr(stacked, name), err_msg=f"{family} {name}")
        for a, b in zip(direct._class_tokens + direct._class_nodes, stacked._class_tokens + stacked._class_nodes,
                        strict=True):
            np.testing.assert_array_equal(a, b, err_msg=family)
        omegas = np.stack([rng.choice(7, size=n, p=q) for q in Q])
        np.testing.assert_array_equal(direct.slices(omegas), stacked.slices(omegas))
    assert direct[-1] is direct[len(direct) - 1] and len(direct[1:3]) == 2  # rows are cached; slices are lists
    with pytest.raises(IndexError):
        direct[len(direct)]
