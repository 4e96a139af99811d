"""Solution.certificate(): it recomputes feasibility and the duality gap itself, so wrong duals, an infeasible
primal or a wrong-signed multiplier are caught; exact mode is exact; a flow is checked against a cut."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from otlp.lp.ir import FlowNetwork
from otlp.lp.solution import Solution
from tests.lp.formulations.lp_instances import zoo_min


def solution(primal: dict, dual: dict | None, value: float = 1.25) -> Solution:
    return Solution(value, "optimal", primal, dual, {"build": 0.0, "solve": 0.0}, "hand", model=zoo_min())


def test_optimal_pair_has_zero_gap():
    cert = solution({"x": np.array([0.75, 0.25])}, {"cover": np.array([1.5]), "tilt": np.array([-0.5])}).certificate()
    assert cert.ok and cert.gap == pytest.approx(0.0) and cert.dual_value == pytest.approx(1.25)


def test_wrong_duals_leave_a_gap():
    cert = solution({"x": np.array([0.75, 0.25])}, {"cover": np.array([1.0]), "tilt": np.array([0.0])}).certificate()
    assert not cert.ok and abs(cert.gap) > 0.1  # a weaker bound: 1.0 + reduced-cost terms


def test_wrong_sign_on_an_infinite_side_is_a_dual_violation():
    # "cover" is x0 + x1 >= 1 (upper side infinite): in a min problem its multiplier must be >= 0
    cert = solution({"x": np.array([0.75, 0.25])}, {"cover": np.array([-1.0]), "tilt": np.array([0.0])}).certificate()
    assert not cert.ok and cert.dual_violation > 0


def test_infeasible_primal_is_reported():
    cert = solution({"x": np.array([0.2, 0.2])}, None, value=0.6).certificate()
    assert not cert.ok and cert.primal_violation == pytest.approx(0.6) and cert.gap is None


def test_exact_mode_is_exact():
    f = Fraction
    primal = {"x": np.array([f(3, 4), f(1, 4)], dtype=object)}
    dual = {"cover": np.array([f(3, 2)], dtype=object), "tilt": np.array([f(-1, 2)], dtype=object)}
    cert = solution(primal, dual, value=f(5, 4)).certificate()
    assert cert.exact and cert.ok and cert.gap == 0 and cert.primal_value == f(5, 4)
    off = {"x": np.array([f(3, 4), f(1, 4) - f(1, 10**30)], dtype=object)}
    assert not solution(off, dual, value=f(5, 4)).certificate().ok  # 1e-30 infeasible is infeasible


def test_network_certificate_uses_the_cut():
    net = FlowNetwork("toy", 4, np.array([0, 0, 1, 2]), np.array([1, 2, 3, 3]), np.array([1.0, 2.0, 5.0, 1.0]),
                      source=0, sink=3, arc_blocks={"arcs": slice(0, 4)})
    flow = {"arcs": np.array([1.0, 1.0, 1.0, 1.0])}
    side = np.array([True, False, True, False])  # cut arcs s->a (1) and b->t (1): capacity 2 = flow value
    s = Solution(2.0, "optimal", flow, {"source_side": side}, {}, "hand", model=net)
    cert = s.certificate()
    assert cert.ok and cert.primal_value == 2.0 and cert.dual_value == 2.0
    bad = Solution(2.0, "optimal", flow, {"source_side": np.array([True, True, True, False])}, {}, "hand", model=net)
    assert not bad.certificate().ok  # that cut has capacity 6


def test_summary():
    s = solution({"x": np.array([0.75, 0.25])}, None)
    assert s.to_dict()["value"] == 1.25 and "zoo" not in repr(s) and "1.25" in repr(s)
