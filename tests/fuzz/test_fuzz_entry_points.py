"""Hypothesis over the entry points issue 44 names: the sweep's ``CaptureWriter.add`` and ``certify_callable``, at
least 10^4 generated inputs each. Malformed input gives ``InputError`` (one line), never another exception or a
leaked warning; ``add`` never writes into the caller's arrays; a registered (lossless) rule certified by exact
enumeration shows no bias."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otlp.certification.blackbox import SCHEME_CLASSES, certify_callable
from otlp.verifiers import get

from .conftest import contract, count
from .strategies import any_vector, distributions, ns

FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
RULES = ("sps", "rrs", "rrs_wor", "kseq", "spechub", "is", "weighted_is", "greedy", "optimal", "optimal_paths")
V_CAPTURE = 6


@st.composite
def law_rows(draw) -> object:
    """p or q for ``add``: valid rows [M, V] (float64 or float32, read-only or strided views, off by up to the
    writer's atol), one row [V], or something malformed (wrong V, NaN, negative, ragged, not numbers)."""
    kind = draw(st.sampled_from(["rows", "rows", "row", "malformed", "wrong_v", "bad_value"]))
    if kind == "malformed":
        return draw(any_vector(V_CAPTURE))
    M = draw(st.integers(0, 3))
    V = V_CAPTURE if kind != "wrong_v" else draw(st.sampled_from([1, V_CAPTURE - 1, V_CAPTURE + 1]))
    x = np.array([draw(distributions(V)) for _ in range(M)]).reshape(M, V)  # [M, V]
    x = x * (1.0 + draw(st.sampled_from([0.0, 5e-5, -5e-5, 1e-3])))  # 1e-3: over the default atol
    if kind == "bad_value" and M:
        x[draw(st.integers(0, M - 1)), draw(st.integers(0, V - 1))] = draw(st.sampled_from([np.nan, -0.1, np.inf]))
    if kind == "row":
        x = x[0] if M else np.full(V, 1.0 / V)
    x = x.astype(draw(st.sampled_from([np.float64, np.float64, np.float32])))
    if draw(st.booleans()) and x.ndim == 2:
        x = np.repeat(x, 2, axis=0)[::2]  # a strided view of a bigger array
    if draw(st.booleans()):
        x.flags.writeable = False
    return x


_WRITER: dict = {}


def _writer():  # noqa: ANN202 - one writer for the run: a folder per input would cost more than the input
    pytest.importorskip("pyarrow")
    from otlp.sweep import CaptureWriter

    if "w" not in _WRITER:
        _WRITER["dir"] = tempfile.TemporaryDirectory()
        _WRITER["w"] = CaptureWriter(_WRITER["dir"].name + "/c", V_CAPTURE, storage="sparse", top_k=3,
                                     shard_rows=4096)
    return _WRITER["w"]


@settings(FUZZ, max_examples=10_000)
@given(p=law_rows(), q=law_rows(), context=st.one_of(st.none(), st.integers(0, 9), st.lists(st.integers(0, 9))))
def test_capture_writer_add(p, q, context):  # noqa: ANN001
    count("entry: CaptureWriter.add")
    w = _writer()
    before = [x.tobytes() if isinstance(x, np.ndarray) and x.dtype != object else None for x in (p, q)]
    with contract():
        w.add(p, q, **({} if context is None else {"context_id": context}))
    for x, b in zip((p, q), before, strict=True):
        if b is not None:
            assert x.tobytes() == b  # never written into, whatever add decided


@settings(FUZZ, max_examples=10_000)
@given(rule=st.sampled_from(RULES), p=any_vector(4), q=any_vector(4), n=ns,
       scheme=st.one_of(st.sampled_from(sorted(SCHEME_CLASSES)), st.text(max_size=3)),
       tolerance=st.one_of(st.just(1e-3), st.floats(allow_nan=True), st.integers(-1, 2)),
       alpha=st.one_of(st.just(1e-3), st.floats(allow_nan=True), st.integers(-1, 2)))
def test_certify_callable(rule, p, q, n, scheme, tolerance, alpha):  # noqa: ANN001
    """Exact enumeration (mode="white": the sampled test is the slow part, and has its own tests): a registered
    rule's law on a scheme it is exact for is p, so its exact TV is rounding."""
    count("entry: certify_callable")
    with contract():
        report = certify_callable(get(rule), p, q=q, n=n, scheme=scheme, mode="white", tolerance=tolerance,
                                  alpha=alpha, progress=False)
        own = get(rule)
        if scheme == own.scheme or scheme in own.compatible_schemes:  # lossless there (another's draft: biased)
            assert report.tv <= 1e-9, (rule, scheme, report.tv)
