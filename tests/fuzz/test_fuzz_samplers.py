"""Hypothesis over the batched torch samplers: malformed p / q / drafts (NaN, negative, unnormalised, ids out of
range, wrong dtype or shape) are InputErrors; valid ones (float32 or float64) give tokens in [0, V)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import contract, count

torch = pytest.importorskip("torch")

FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None,
                max_examples=700)
RULES = ["rrs", "kseq", "sps", "is", "spechub", "greedy", "optimal"]
DAMAGE = ["none", "nan", "inf", "negative", "double", "half", "subnormal", "ids_high", "ids_negative", "int_p",
          "float_ids", "shape"]


@FUZZ
@given(rule=st.sampled_from(RULES), B=st.integers(0, 3), V=st.integers(2, 7), n=st.integers(1, 3),
       dtype=st.sampled_from(["float32", "float64"]), damage=st.sampled_from(DAMAGE), seed=st.integers(0, 2**31))
def test_samplers(rule, B, V, n, dtype, damage, seed):
    from otlp.verifiers import get

    count("torch samplers")
    verifier = get(rule)
    n = 1 if rule == "sps" else 2 if rule == "spechub" else n
    rng = np.random.default_rng(seed)
    dt = getattr(torch, dtype)
    p = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=B).reshape(B, V), dtype=dt)
    q = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=B).reshape(B, V), dtype=dt)
    drafts = torch.tensor(rng.integers(0, V, size=(B, n)), dtype=torch.int64)
    if damage == "nan" and B:
        p[0, 0] = float("nan")
    elif damage == "inf" and B:
        q[0, -1] = float("inf")
    elif damage == "negative" and B:
        p[0, 0] = -1e-3
    elif damage == "double":
        p = 2 * p
    elif damage == "half":
        q = q / 2
    elif damage == "subnormal" and B:
        p[0, 0] = 1e-40 if dtype == "float32" else 5e-324
    elif damage == "ids_high" and B:
        drafts[0, 0] = V
    elif damage == "ids_negative" and B:
        drafts[-1, -1] = -1
    elif damage == "int_p":
        p = p.to(torch.int64)
    elif damage == "float_ids":
        drafts = drafts.to(dt)
    elif damage == "shape":
        q = q[:, :-1]
    with contract():
        tokens, index = verifier.sample(p, q, drafts, torch.Generator().manual_seed(seed))
        assert tokens.shape == (B,) and bool(((tokens >= 0) & (tokens < V)).all())
        assert bool(((index >= -1) & (index < n)).all())
