"""benchmarks/solve_times.py: its pieces compute the right things (no timings are asserted here).

The one-column residual completion of the outer/inner route is checked against OuterInnerNetworks.slice (the dense
GR eq. (8) plan); a tiny grid point runs every method and their values agree with otlp.optimal's alpha*; the
decode source's projection keeps the target's top k and renormalises.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import otlp

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "solve_times.py"


@pytest.fixture(scope="module")
def st():
    spec = importlib.util.spec_from_file_location("solve_times_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("V,n", [(6, 2), (5, 3)])
def test_outer_inner_column_matches_the_dense_slice(st, V, n):
    pytest.importorskip("ortools")
    from otlp.formulations import OuterInnerNetworks

    rng = np.random.default_rng([V, n])
    seen = set()
    for _ in range(6):
        p, q = st.heavy_tailed_pair(rng, V)
        model = OuterInnerNetworks(p, otlp.IID(q, n))
        sol = model.solve(backend="ortools")
        assert sol.status == "optimal"
        probs = model.draft.tuple_probabilities(model.omegas)  # [M]
        for omega in model.omegas[:: max(1, model.omegas.shape[0] // 12)]:
            seen.add(bool(model.h_star[omega].all()))
            ours = st.outer_inner_slice(model, sol, omega)
            assert np.allclose(ours, model.slice(sol, omega), atol=1e-12)
        # a tuple of mass below the flow's absolute tolerance (1e-9; OR-Tools' quantum 2^-51) may be left
        # unsaturated, so its slice need not sum to 1: check the mass only on tuples well above it
        for omega in model.omegas[probs > 1e-6]:
            ours = st.outer_inner_slice(model, sol, omega)
            assert abs(ours.sum() - 1) < 1e-8 and ours.min() >= 0
    assert seen == {True, False}  # both the inner (residual-completed) and the outer branch were exercised


def test_tiny_grid_point_runs_every_method_and_they_agree(st):
    pytest.importorskip("ortools")
    rng = np.random.default_rng(3)
    pairs = [st.heavy_tailed_pair(rng, 6) for _ in range(3)]
    omegas = [rng.choice(6, size=2, p=q) for _, q in pairs]
    args = argparse.Namespace(limit=60.0, max_vars=1e6, baseline_pairs=3)
    row = st.grid_point(pairs, omegas, 6, 2, args, True, {})
    assert row["optimal"]["success"] == 1.0 and row["optimal"]["max_law_error"] < 1e-12
    for name in st.BASELINES:
        assert row[name]["status"] == "ok" and row[name]["solved"] == 3
        assert row[name]["max_value_error"] < 1e-8  # max-flow rounds capacities to 2^-40
    assert row["outer_inner"]["max_slice_mass_error"] < 1e-12


def test_a_model_over_the_limit_skips_bigger_ones(st):
    rng = np.random.default_rng(4)
    pairs = [st.heavy_tailed_pair(rng, 6) for _ in range(2)]
    omegas = [rng.choice(6, size=2, p=q) for _, q in pairs]
    args = argparse.Namespace(limit=60.0, max_vars=1e6, baseline_pairs=2)
    over = {name: (10, 3, 1) for name in st.BASELINES}  # pretend a 10-variable model was over the limit
    row = st.grid_point(pairs, omegas, 6, 2, args, False, over)
    assert row["highs"]["status"] == "> limit" and "not smaller" in row["highs"]["reason"]


def test_top_k_projection(st):
    p = np.array([0.1, 0.4, 0.2, 0.3])
    q = np.array([0.25, 0.25, 0.5, 0.0])
    pk, qk, tokens = st.project_top_k(p, q, 2)
    assert tokens.tolist() == [1, 3]
    assert np.allclose(pk, [0.4 / 0.7, 0.3 / 0.7]) and np.allclose(qk, [1.0, 0.0])
    assert st.project_top_k(p, np.array([0.5, 0.0, 0.5, 0.0]), 2) is None  # no draft mass on the top 2


def test_decode_laws_are_real_padded_contexts(st):
    from otlp.decode.ngram import embedded_models

    ctx, P, Q = st.decode_laws(0, 5)
    again = st.decode_laws(0, 5)
    assert np.array_equal(ctx, again[0]) and np.array_equal(P, again[1])  # seeded
    assert ctx.shape == (5, 3) and P.shape == Q.shape == (5, 2000)
    assert np.allclose(P.sum(1), 1) and np.allclose(Q.sum(1), 1) and (Q > 0).all()
    bos = embedded_models().tokenizer.bos_id
    for row in ctx:  # <s> only as left padding / the document start, never inside the context
        first_real = np.flatnonzero(row != bos)
        assert first_real.size == 0 or (row[first_real[0]:] != bos).all()
    pairs, rows = st.decode_pairs((ctx, P, Q), 10, 5)
    assert len(pairs) == 5 and rows == list(range(5))
    assert all(abs(p.sum() - 1) < 1e-12 and abs(q.sum() - 1) < 1e-12 and p.size == 10 for p, q in pairs)
