"""MaxFlowNetwork (GR §5.2): structure, and alpha* from every backend against brute-force 1 + min psi."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.errors import InputError, ModelTooLargeError
from otlp.core.subsets import brute_force_min_psi, psi
from otlp.lp.formulations.maxflow import MaxFlowNetwork, incidence_arcs, relaxed_network
from otlp.lp.solvers import BACKENDS, capabilities
from tests.lp.formulations.instances import random_instances

NETWORK_BACKENDS = [b for b in BACKENDS if capabilities(b) & {"network", "linear"}]


def test_every_backend_that_takes_networks_is_tested():
    assert {"ortools", "networkx", "highs"} <= set(NETWORK_BACKENDS)


def test_structure_iid():
    p, q = np.array([0.1, 0.6, 0.3]), np.array([0.5, 0.3, 0.2])
    net = relaxed_network(p, otlp.IID(q, 2))
    g = net.network
    M = 9  # every pair has mass
    assert g.num_nodes == 3 + M + 2
    assert g.arc_blocks == {"source": slice(0, 3), "S": slice(3, 3 + 15), "sink": slice(18, 27)}  # 15 = sum |set|
    np.testing.assert_array_equal(g.capacities[g.arc_blocks["source"]], p)
    assert np.isinf(g.capacities[g.arc_blocks["S"]]).all()
    np.testing.assert_allclose(g.capacities[g.arc_blocks["sink"]].sum(), 1.0)
    # every S arc joins a token to a tuple that contains it, and a tuple (1, 1) gets one arc, not two
    assert all(i in net.omegas[m] for i, m in zip(net.arc_token, net.arc_tuple, strict=True))
    assert np.sum(net.arc_tuple == 4) == 1 and tuple(net.omegas[4]) == (1, 1)


def test_incidence_arcs_respects_left_set():
    omegas = np.array([[0, 1, 1], [2, 2, 2], [1, 2, 0]])
    tok, row = incidence_arcs(omegas, np.array([True, False, True]))
    assert sorted(zip(tok.tolist(), row.tolist(), strict=True)) == [(0, 0), (0, 2), (2, 1), (2, 2)]


def test_only_support_tuples_become_nodes():
    draft = otlp.Greedy([0.5, 0.3, 0.2, 0.0], 3)  # top-2 fixed, the last from the rest: 1 tuple with mass
    net = relaxed_network(np.full(4, 0.25), draft).network
    assert net.num_nodes == 4 + 1 + 2


def test_worked_example_and_min_cut():
    # SpecHub paper example (p = (.1, .6, .3), q = (.5, .3, .2), n = 2 i.i.d.): alpha* = 0.85, H* = {0}
    model = MaxFlowNetwork([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    for backend in ("networkx", "ortools"):
        sol = model.solve(backend=backend)
        assert abs(sol.value - 0.85) <= 1e-12 + sol.value_bound
        np.testing.assert_array_equal(sol.info["h_star"], [True, False, False])


@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
def test_alpha_matches_brute_force_on_every_scheme(backend):
    per_scheme = 3 if backend in ("exact", "cvxpy", "pulp") else 8
    for label, p, draft in random_instances(7, per_scheme):
        if backend == "exact" and draft.num_tuples() > 64:
            continue  # rational simplex: tiny networks only
        best, _ = brute_force_min_psi(p, draft)
        alpha = 1.0 + best
        model = MaxFlowNetwork(p, draft)
        sol = model.solve(backend=backend)
        assert sol.optimal, label
        assert abs(float(sol.value) - alpha) <= 1e-9 + sol.value_bound, (label, sol.value, alpha)
        assert sol.value_bound <= 1e-9
        cert = sol.certificate(tol=1e-9)
        assert cert.ok, (label, str(cert))
        # the flows on the S arcs are a relaxed-OTLP plan of value alpha* (GR eq. (2))
        S = model.plan(sol)  # [V, M]
        omegas, probs = draft.support()
        np.testing.assert_array_equal(model.omegas, omegas)
        assert S.min() >= -1e-12
        assert np.all(S.sum(axis=1) <= p + 1e-9), label
        assert np.all(S.sum(axis=0) <= probs + 1e-9), label
        incident = np.zeros_like(S, dtype=bool)
        incident[model.bipartite.arc_token, model.bipartite.arc_tuple] = True
        assert np.all(S[~incident] == 0)
        assert abs(S.sum() - alpha) <= 1e-9 + sol.value_bound
        if "h_star" in sol.info:  # the min cut's sink-side tokens minimise psi
            assert abs(psi(p, draft, sol.info["h_star"]) - best) <= 1e-9, label


def test_bad_input():
    with pytest.raises(InputError, match="draft scheme"):
        MaxFlowNetwork([0.5, 0.5], [0.5, 0.5])
    with pytest.raises(InputError):
        MaxFlowNetwork([0.5, 0.5, 0.0], otlp.IID([0.5, 0.5], 2))
    with pytest.raises(InputError, match="backend"):
        MaxFlowNetwork([0.5, 0.5], otlp.IID([0.5, 0.5], 2)).solve(backend="nope")


def test_too_large_is_refused_before_building():
    q = np.full(400, 1 / 400)
    model = MaxFlowNetwork(q, otlp.IID(q, 3))  # 64e6 tuples
    assert model.size().variables > 2e8
    with pytest.raises(ModelTooLargeError, match="MaxFlowNetwork"):
        model.solve(backend="ortools")
