"""The highs backend: hand-built LPs (value, duals, certificate) against scipy's linprog, statuses, errors.
The OTLP formulations through highs are checked against brute force in tests/lp/formulations/test_agreement.py."""

from __future__ import annotations

from tests.lp.solvers.backend_checks import (
    check_hand_built_lps,
    check_missing_dependency,
    check_statuses,
    check_unknown_option,
)


def test_hand_built_lps():
    check_hand_built_lps("highs")


def test_statuses():
    check_statuses("highs")


def test_unknown_option():
    check_unknown_option("highs")


def test_missing_dependency(monkeypatch):
    check_missing_dependency("highs", "highspy", monkeypatch)


def test_options_reach_highs():
    import pytest

    from otlp.core.errors import InputError
    from otlp.lp.solvers import solve
    from tests.lp.formulations.lp_instances import zoo_max

    solution = solve(zoo_max(), "highs", time_limit=10.0, solver="simplex", presolve="off")
    assert solution.status == "optimal" and solution.value == 10.25
    with pytest.raises(InputError, match="HiGHS rejected option"):
        solve(zoo_max(), "highs", highs_options={"no_such_highs_option": 1})


def test_highs_lp_is_the_csr_matrix():
    import numpy as np

    from otlp.lp.solvers.highs import to_highs_lp
    from tests.lp.formulations.lp_instances import zoo_max

    model = zoo_max()
    lp = to_highs_lp(model)
    assert (lp.num_col_, lp.num_row_) == (3, 4)
    np.testing.assert_array_equal(np.asarray(lp.a_matrix_.start_), model.A.indptr)
    np.testing.assert_array_equal(np.asarray(lp.a_matrix_.value_), model.A.data)
