"""benchmarks/solve_times.py: its pieces compute the right things (no timings are asserted here).

A tiny grid point runs every method (the outer/inner column uses OuterInnerNetworks.slice, tested with the
formulation) and their values agree with otlp.optimal's alpha*; the decode source's projection keeps the target's
top k and renormalises.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "solve_times.py"


@pytest.fixture(scope="module")
def st():
    spec = importlib.util.spec_from_file_location("solve_times_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_grid_point_runs_every_method_and_they_agree(st):
    pytest.importorskip("ortools")
    rng = np.random.default_rng(3)
    pairs = [st.heavy_tailed_pair(rng, 6) for _ in range(3)]
    omegas = [rng.choice(6, size=2, p=q) for _, q in pairs]
    args = argparse.Namespace(limit=60.0, max_vars=1e6, baseline_pairs=3, repeat=2)
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
    args = argparse.Namespace(limit=60.0, max_vars=1e6, baseline_pairs=2, repeat=1)
    over = {name: (10, 3, 1) for name in st.BASELINES}  # pretend a 10-variable model was over the limit
    row = st.grid_point(pairs, omegas, 6, 2, args, False, over)
    assert row["highs"]["status"] == "> limit" and "not smaller" in row["highs"]["reason"]


def test_best_of_keeps_the_fastest_call_and_does_not_repeat_slow_ones(st):
    times = iter([0.3, 0.1, 0.2])
    calls = []

    def method(tag):
        calls.append(tag)
        return next(times), tag

    assert st.best_of(method, ("a",), 3, cap=0.5) == (0.1, "a") and len(calls) == 3
    times, calls[:] = iter([0.9, 0.1]), []
    assert st.best_of(method, ("b",), 3, cap=0.5) == (0.9, "b") and len(calls) == 1  # over the cap: once


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
