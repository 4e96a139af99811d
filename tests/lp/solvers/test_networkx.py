"""The networkx backend against scipy's max flow, in float and exact (Fraction) mode, and its min cut."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from otlp.core.errors import InputError
from otlp.lp.ir import FlowNetwork
from otlp.lp.solvers import solve
from otlp.lp.solvers.networkx_backend import FLOW_FUNCS
from tests.lp.solvers.network_cases import random_network, scipy_max_flow


@pytest.mark.parametrize("flow_func", ["edmonds_karp", "shortest_augmenting_path", "dinitz", "boykov_kolmogorov"])
def test_matches_scipy_on_random_networks(flow_func):
    rng = np.random.default_rng(1)
    for _ in range(25):
        net = random_network(rng, num_nodes=int(rng.integers(3, 10)), num_arcs=int(rng.integers(3, 30)),
                             divisor=7.0)
        sol = solve(net, "networkx", flow_func=flow_func)
        reference = scipy_max_flow(net, divisor=7.0)
        if np.isinf(sol.value):  # an all-infinite s-t path
            assert sol.status == "unbounded"
            continue
        assert sol.optimal
        assert abs(sol.value - reference) <= 1e-12
        cert = sol.certificate(tol=1e-12)
        assert cert.ok, str(cert)  # conservation, capacities, and the cut's capacity equals the flow


def test_exact_mode_is_rational():
    rng = np.random.default_rng(2)
    for _ in range(10):
        net = random_network(rng, divisor=3.0, inf_share=0.0)  # k / 3 in float: exact mode solves those floats
        sol = solve(net, "networkx", exact=True)
        assert isinstance(sol.value, Fraction)
        assert abs(sol.value - Fraction(round(scipy_max_flow(net, divisor=3.0) * 3), 3)) <= Fraction(1, 2**50)
        side = sol.dual["source_side"]
        cut = sum(Fraction(c) for c, a, b in zip(net.capacities, side[net.tails], ~side[net.heads], strict=True)
                  if a and b)
        assert cut == sol.value  # max-flow min-cut, exactly


def test_parallel_antiparallel_and_zero_arcs():
    # two parallel arcs 0 -> 1 (1 and 2), antiparallel 1 <-> 2, a zero arc and an infinite arc 2 -> 3
    net = FlowNetwork("multi", 4, np.array([0, 0, 1, 2, 1, 2]), np.array([1, 1, 2, 1, 3, 3]),
                      np.array([1.0, 2.0, 1.5, 4.0, 0.0, np.inf]), 0, 3, arc_blocks={"flow": slice(0, 6)})
    sol = solve(net, "networkx")
    assert sol.value == 1.5
    assert sol.certificate(tol=1e-12).ok


def test_unbounded_and_bad_input():
    net = FlowNetwork("inf", 3, np.array([0, 1]), np.array([1, 2]), np.array([np.inf, np.inf]), 0, 2)
    assert solve(net, "networkx").status == "unbounded"
    bad = FlowNetwork("neg", 2, np.array([0]), np.array([1]), np.array([-1.0]), 0, 1)
    with pytest.raises(InputError, match=">= 0"):
        solve(bad, "networkx")
    with pytest.raises(InputError, match="flow_func"):
        solve(FlowNetwork("ok", 2, np.array([0]), np.array([1]), np.array([1.0]), 0, 1), "networkx", flow_func="x")
    assert "edmonds_karp" in FLOW_FUNCS
