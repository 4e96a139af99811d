"""The ortools backend: scaled int64 capacities, the proven rounding bound, the min cut."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from otlp.core.errors import InputError
from otlp.lp.ir import FlowNetwork
from otlp.lp.solvers import solve
from otlp.lp.solvers.ortools_backend import default_scale, scale_capacities
from tests.lp.solvers.network_cases import random_network, scipy_max_flow


def test_matches_scipy_on_integer_networks_with_no_rounding():
    rng = np.random.default_rng(3)
    for _ in range(30):
        net = random_network(rng, num_nodes=int(rng.integers(3, 10)), num_arcs=int(rng.integers(3, 30)), divisor=8.0)
        sol = solve(net, "ortools")
        if sol.status == "unbounded":
            assert np.isinf(sol.value)
            continue
        assert sol.value == scipy_max_flow(net, divisor=8.0)  # k / 8 scales exactly: no rounding at all
        assert sol.value_bound == 0.0
        assert sol.certificate(tol=0.0).ok


@pytest.mark.parametrize("scale", [2.0**4, 2.0**20, 2.0**40, None])
def test_rounding_bound_holds_exactly(scale):
    # true max flow F from networkx in rationals; ortools must give F' <= F <= F' + value_bound
    rng = np.random.default_rng(4)
    for _ in range(15):
        net = random_network(rng, num_nodes=7, num_arcs=18, inf_share=0.15)
        net.capacities = np.where(np.isfinite(net.capacities), net.capacities * rng.random(net.num_arcs) / 7, np.inf)
        exact = solve(net, "networkx", exact=True)
        sol = solve(net, "ortools", scale=scale)
        if exact.status == "unbounded":
            assert sol.status == "unbounded"
            continue
        low = Fraction(sol.value)
        assert low <= exact.value <= low + Fraction(sol.value_bound)
        s = sol.info["scale"]
        assert sol.value_bound <= sol.info["cut_arcs"] / s  # at most one quantum per cut arc
        assert sol.certificate(tol=sol.value_bound + 1e-15).ok
    if scale == 2.0**40:  # the quantum at 2^40 keeps the bound far below 1e-9 on these networks
        assert sol.value_bound <= 18 / 2.0**40 < 1e-10


def test_default_scale_keeps_integers_exact():
    caps = np.array([0.25, 0.5, np.inf, 1.25])  # finite sum 2
    s = default_scale(caps)
    assert s == 2.0**51 and math.frexp(s)[0] == 0.5
    ints, fractional, big = scale_capacities(caps, s)
    assert ints[2] == big == int(2 * s) + 1 and not fractional.any()
    assert ints.max() < 2**53


def test_bad_scale_empty_and_isolated():
    net = FlowNetwork("one", 2, np.array([0]), np.array([1]), np.array([0.3]), 0, 1, arc_blocks={"f": slice(0, 1)})
    with pytest.raises(InputError, match="power of two"):
        solve(net, "ortools", scale=1000.0)
    with pytest.raises(InputError, match="int64"):
        solve(net, "ortools", scale=2.0**70)
    # the sink has no arc: OR-Tools does not know the node; the backend answers 0 with a valid cut
    lonely = FlowNetwork("lonely", 4, np.array([0, 0]), np.array([1, 2]), np.array([0.5, 0.5]), 0, 3,
                         arc_blocks={"f": slice(0, 2)})
    sol = solve(lonely, "ortools")
    assert sol.value == 0.0 and sol.dual["source_side"].tolist() == [True, True, True, False]
    assert sol.certificate(tol=0.0).ok


def test_unbounded():
    net = FlowNetwork("inf", 3, np.array([0, 1]), np.array([1, 2]), np.array([np.inf, np.inf]), 0, 2)
    assert solve(net, "ortools").status == "unbounded"
