"""Bad input, fuzzed: every public entry point answers with InputError (CLI: exit 2 and one line), never a
traceback from inside a solver."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import otlp
from otlp.cli.commands import main
from otlp.core.errors import InputError

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-3, 3))
vectors = st.lists(numbers, min_size=0, max_size=5)
text_vectors = st.one_of(vectors.map(lambda v: ",".join(str(x) for x in v)), st.text(max_size=12))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(p=text_vectors, q=text_vectors, n=st.integers(-2, 4),
       scheme=st.sampled_from(["iid", "without_replacement", "greedy", "spechub", "independent"]))
def test_cli_solve_never_tracebacks(p, q, n, scheme, capsys):
    if p.startswith("-") or q.startswith("-"):
        return  # argparse would read these as options; covered by its own usage errors (exit 2)
    code = main(["solve", "--p", p, "--q", q, "--n", str(n), "--scheme", scheme, "--formulation", "relaxed",
                 "--json"])
    err = capsys.readouterr().err
    assert code in (0, 2)
    if code == 2:
        assert err.startswith("otlp: error:") and err.count("\n") == 1


schemes = st.sampled_from([otlp.IID, otlp.WithoutReplacement, otlp.Greedy])


@settings(max_examples=150, deadline=None)
@given(p=vectors, q=vectors, n=st.integers(-1, 4), scheme=schemes,
       formulation=st.sampled_from(["FullOTLP", "RelaxedOTLP", "MaxFlowNetwork", "BetaProgram"]))
def test_formulations_refuse_bad_input_clearly(p, q, n, scheme, formulation):
    import otlp.lp.formulations as F

    try:
        draft = scheme(q, n)
        value = getattr(F, formulation)(p, draft).solve(backend="highs").value
    except InputError as exc:
        assert str(exc)
        return
    assert 0.0 <= value <= 1.0 + 1e-9
    assert value == pytest.approx(otlp.optimal_acceptance(p, draft), abs=1e-8)


@settings(max_examples=100, deadline=None)
@given(p=vectors, q=vectors, n=st.integers(-1, 4))
def test_optimal_solver_refuses_bad_input_clearly(p, q, n):
    from otlp.optimal import OptimalTransport

    try:
        ot = OptimalTransport(p, otlp.IID(q, n))
    except InputError as exc:
        assert str(exc)
        return
    assert ot.alpha == pytest.approx(otlp.optimal_acceptance(p, otlp.IID(q, n)), abs=1e-12)


def test_model_too_big_is_refused_before_building():
    p = np.ones(200) / 200
    with pytest.raises(otlp.ModelTooLargeError, match="FullOTLP .* variables.* would need about"):
        otlp.lp.formulations.FullOTLP(p, otlp.IID(p, 4)).solve(backend="highs")
