"""OuterInnerNetworks (GR Thm 5.1): the two networks solved apart reach alpha*, satisfy the CS system (6), and the
residual completion (GR eq. (8)) is an optimal coupling."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.errors import InputError
from otlp.core.subsets import brute_force_min_psi, psi
from otlp.lp.formulations.completion import residual_completion
from otlp.lp.formulations.outer_inner import OuterInnerNetworks, as_subset
from otlp.lp.solvers import BACKENDS, capabilities
from tests.lp.formulations.instances import random_instances

NETWORK_BACKENDS = [b for b in BACKENDS if capabilities(b) & {"network", "linear"}]


def check_cs_system(p, draft, h, S, omegas, tol=1e-9):
    """GR Thm 5.1, eq. (6a)-(6c), for S [V, M] over the support tuples ``omegas``."""
    probs = draft.tuple_probabilities(omegas)
    inner_tuple = h[omegas].all(axis=1)
    rows, cols = S.sum(axis=1), S.sum(axis=0)
    assert S.min() >= -tol
    # (6a) outer: rows of V \ H* at most p, columns outside H*^n exactly P_draft
    assert np.all(S[~h][:, ~inner_tuple].sum(axis=1) <= p[~h] + tol)
    np.testing.assert_allclose(S[~h][:, ~inner_tuple].sum(axis=0), probs[~inner_tuple], atol=tol)
    # (6b) inner: rows of H* exactly p, columns in H*^n at most P_draft
    np.testing.assert_allclose(S[h][:, inner_tuple].sum(axis=1), p[h], atol=tol)
    assert np.all(S[h][:, inner_tuple].sum(axis=0) <= probs[inner_tuple] + tol)
    # (6c) no mass from H* to tuples outside H*^n, nor from V \ H* to tuples inside; none off set(omega)
    assert np.all(S[h][:, ~inner_tuple] == 0) and np.all(S[~h][:, inner_tuple] == 0)
    incident = np.array([[i in set(w.tolist()) for w in omegas] for i in range(p.size)])
    assert np.all(S[~incident] == 0)
    # and S is feasible for the relaxed OTLP (GR eq. (2))
    assert np.all(rows <= p + tol) and np.all(cols <= probs + tol)


def check_coupling(p, draft, C, omegas, alpha, tol=1e-9):
    """C is a coupling of p and P_draft whose acceptance P(i in set(omega)) is alpha*."""
    probs = draft.tuple_probabilities(omegas)
    assert C.min() >= -tol
    np.testing.assert_allclose(C.sum(axis=1), p, atol=tol)
    np.testing.assert_allclose(C.sum(axis=0), probs, atol=tol)
    incident = np.array([[i in set(w.tolist()) for w in omegas] for i in range(p.size)])
    assert abs(C[incident].sum() - alpha) <= tol


@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
def test_combination_reaches_alpha_and_solves_cs_system(backend):
    per_scheme = 2 if backend in ("exact", "cvxpy", "pulp") else 6
    for label, p, draft in random_instances(11, per_scheme):
        if backend == "exact" and draft.num_tuples() > 64:
            continue
        best, _ = brute_force_min_psi(p, draft)
        alpha = 1.0 + best
        model = OuterInnerNetworks(p, draft)
        assert abs(psi(p, draft, model.h_star) - best) <= 1e-12, label  # the default H* is a minimiser
        sol = model.solve(backend=backend)
        assert sol.optimal, (label, sol.info.get("message"))
        assert abs(sol.value - alpha) <= 1e-9 + sol.value_bound, (label, sol.value, alpha)
        assert sol.value_bound <= 1e-9
        # the two parts were solved apart: outer carries 1 - P(H*^n), inner p(H*) (GR Thm 5.1 saturation)
        h = model.h_star
        assert abs(sol.info["outer"].value - (1 - draft.subset_probability(h))) <= 1e-9 + sol.value_bound
        assert abs(sol.info["inner"].value - p[h].sum()) <= 1e-9 + sol.value_bound
        cert = sol.certificate(tol=1e-9)
        assert cert.ok, (label, str(cert))
        S = model.plan(sol)
        check_cs_system(p, draft, h, S, model.omegas)
        assert abs(S.sum() - alpha) <= 1e-9 + sol.value_bound
        check_coupling(p, draft, model.coupling(sol), model.omegas, alpha)


def test_any_minimiser_works_and_a_non_minimiser_is_flagged():
    # p and q with exact ties: psi has several minimisers (GR pitfall P4); Thm 5.1 holds for each of them
    p = np.array([0.5, 0.3, 0.2])
    draft = otlp.IID([0.2, 0.3, 0.5], 1)
    masks = ((np.arange(8)[:, None] >> np.arange(3)) & 1).astype(bool)
    values = psi(p, draft, masks)
    minimisers = masks[values <= values.min() + 1e-12]
    assert len(minimisers) >= 2
    for h in minimisers:
        sol = OuterInnerNetworks(p, draft, h_star=h).solve(backend="networkx")
        assert sol.optimal and abs(sol.value - (1 + values.min())) <= 1e-12
    # n = 1 never loses flow in the split (6c is void: set(omega) = {omega}), so use n = 2 for a wrong H:
    # H = {1, 2} in the worked example has psi = 0.65 > min psi = -0.15
    p2, draft2 = np.array([0.1, 0.6, 0.3]), otlp.IID([0.5, 0.3, 0.2], 2)
    sol = OuterInnerNetworks(p2, draft2, h_star=[1, 2]).solve(backend="networkx")
    assert sol.status == "infeasible" and "not a minimiser" in sol.info["message"]
    assert not sol.info["cs_outer"] and not sol.info["cs_inner"]
    assert abs(sol.value - (0.1 + 0.25)) <= 1e-12  # outer: p(0) = 0.1 at most; inner: P({1,2}^2) = 0.25 at most


def test_empty_and_full_h_star():
    q = np.array([0.2, 0.3, 0.5])
    # p = q: alpha* = 1 and H* = empty (everything is outer, no residual to complete)
    model = OuterInnerNetworks(q, otlp.IID(q, 2), h_star=[])
    sol = model.solve(backend="ortools")
    assert abs(sol.value - 1.0) <= 1e-12 + sol.value_bound
    check_coupling(q, model.draft, model.coupling(sol), model.omegas, 1.0)
    # H* = V is also a minimiser (psi(V) = 0): everything is inner
    sol = OuterInnerNetworks(q, otlp.IID(q, 2), h_star=np.ones(3, dtype=bool)).solve(backend="networkx")
    assert sol.optimal and abs(sol.value - 1.0) <= 1e-12


def test_slice_is_a_law_and_accepts_per_eq_8():
    p, draft = np.array([0.1, 0.6, 0.3]), otlp.IID([0.5, 0.3, 0.2], 2)
    model = OuterInnerNetworks(p, draft)
    sol = model.solve(backend="networkx")
    np.testing.assert_array_equal(model.h_star, [True, False, False])
    for omega in model.omegas:
        pi = model.slice(sol, omega)
        assert abs(pi.sum() - 1) <= 1e-12 and pi.min() >= 0
        if not model.h_star[omega].all():  # outer tuple: the output is always one of its tokens outside H*
            assert abs(pi[[i for i in set(omega.tolist()) if not model.h_star[i]]].sum() - 1) <= 1e-12
    with pytest.raises(InputError, match="no mass"):
        OuterInnerNetworks(p, otlp.Greedy([0.5, 0.3, 0.2], 2)).slice(sol, [1, 2])


def test_bad_h_star():
    with pytest.raises(InputError, match="shape"):
        as_subset(np.ones(4, dtype=bool), 3)
    with pytest.raises(InputError, match="lie in"):
        as_subset([0, 3], 3)
    with pytest.raises(InputError):
        as_subset([0.5], 3)


# -- slices of light tuples (tuple mass below the solver's quantum or the 1e-9 CS tolerance) ---------------------------
def light_tuple_instances(seed: int, per_scheme: int, max_V: int = 6):  # -> list of (label, p, draft)
    """Seeded V <= 6, n <= 3 instances whose supports hold tuples of mass far below 1e-9 (OR-Tools' quantum is
    ~2^-51): q with entries 1e-7 (n = 3: tuples of mass 1e-21), a p that vanishes where q is large, and the adversarial
    families of ``random_instances`` (its "skewed" q puts 1e-6 on all but one token)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(per_scheme):
        V, n = int(rng.integers(3, max_V + 1)), int(rng.integers(2, 4))
        q = rng.dirichlet(np.ones(V))
        q[rng.permutation(V)[: V // 2]] = 10.0 ** -rng.integers(5, 9, V // 2)  # [V], half the tokens light
        q /= q.sum()
        p = rng.dirichlet(np.ones(V) * 0.7)
        p[rng.integers(V)] = 1e-12 * rng.random()  # a target token of mass below the tolerance too
        p /= p.sum()
        out.append((f"light-iid-V{V}-n{n}-{k}", p, otlp.IID(q, n)))
        others = [rng.dirichlet(np.ones(V)) for _ in range(n - 1)]
        out.append((f"light-independent-V{V}-n{n}-{k}", p, otlp.Independent([q, *others])))
    skewed = [(label, p, d) for label, p, d in random_instances(seed, 6, max_V=max_V) if "skewed" in label]
    return out + skewed[: 2 * per_scheme]


def check_slices(model, sol, label, alpha):
    """Every slice is a distribution (sums to 1 within 1e-12), the output law sum_omega P(omega) pi(. | omega) is p,
    and the acceptance is alpha*."""
    probs = model.draft.tuple_probabilities(model.omegas)  # [M]
    slices = np.stack([model.slice(sol, omega) for omega in model.omegas])  # [M, V]
    sums = slices.sum(axis=1)
    worst = int(np.argmax(np.abs(sums - 1)))
    assert abs(sums[worst] - 1) <= 1e-12, (label, sol.backend, model.omegas[worst], probs[worst], sums[worst])
    assert slices.min() >= 0, label
    # the law can match p only as well as the two masses agree: WithoutReplacement's P_draft sums to 1 + 4e-11 for
    # q = (1e-6, ..., 1 - 4e-6) (1 - q(i) loses digits), so that mismatch is allowed on top of 1e-12
    mismatch = abs(probs.sum() - model.p.sum())
    np.testing.assert_allclose(probs @ slices, model.p, rtol=0, atol=1e-12 + mismatch, err_msg=label)
    incident = np.zeros_like(slices, dtype=bool)  # [M, V], i in set(omega)
    np.put_along_axis(incident, model.omegas, True, axis=1)
    assert abs(probs @ (slices * incident).sum(axis=1) - alpha) <= 1e-9 + sol.value_bound, label


@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
def test_every_slice_is_a_distribution_even_for_light_tuples(backend):
    """A tuple lighter than the solver's quantum is left (partly) unsaturated within the CS tolerance; its slice was
    S[:, omega] / P(omega) alone (GR eq. (8) read literally) and summed to as little as 0. The eq. (3) completion with
    the computed residuals makes every slice a law and keeps the output law p."""
    per_scheme, max_V = {"exact": (2, 4), "cvxpy": (1, 6), "pulp": (1, 6)}.get(backend, (4, 6))
    for label, p, draft in light_tuple_instances(7, per_scheme, max_V):
        model = OuterInnerNetworks(p, draft)
        sol = model.solve(backend=backend)
        assert sol.optimal, (label, sol.info.get("message"))
        check_slices(model, sol, label, 1.0 + brute_force_min_psi(p, draft)[0])


def test_slice_is_the_column_of_the_coupling():
    """slice() computes one column without the [V, M] plan; it is the same column of coupling() / P(omega)."""
    for backend in ("ortools", "networkx", "highs"):
        for label, p, draft in light_tuple_instances(3, 2) + list(random_instances(5, 1)):
            model = OuterInnerNetworks(p, draft)
            sol = model.solve(backend=backend)
            C = model.coupling(sol)  # [V, M]
            probs = model.draft.tuple_probabilities(model.omegas)
            for m, omega in enumerate(model.omegas):
                np.testing.assert_allclose(model.slice(sol, omega), C[:, m] / probs[m], rtol=1e-15, atol=0,
                                           err_msg=f"{label} {backend} {omega}")


def test_residual_completion_repairs_a_slightly_infeasible_plan():
    """An LP's plan may be off by its tolerance: a negative flow, a column above P_draft, a row above p; and a tuple of
    mass below the quantum may carry nothing. The completion still returns a coupling of p and P_draft exactly."""
    p = np.array([0.5, 0.3, 0.2])
    probs = np.array([0.4, 0.35, 0.25 - 1e-20, 1e-20])  # [M]
    arc_token = np.array([0, 1, 1, 2, 0, 2])  # [K]
    arc_tuple = np.array([0, 0, 1, 1, 2, 3])
    flow = np.array([0.3 + 1e-10, 0.1 + 1e-10, 0.2, -1e-12, 0.2 + 1e-9, 0.0])  # col 0 over, row 0 over, a negative
    S, w, d_res = residual_completion(p, probs, flow, arc_token, arc_tuple)
    C = np.zeros((3, 4))
    np.add.at(C, (arc_token, arc_tuple), S)
    C += np.outer(w, d_res)
    assert S.min() >= 0 and w.min() >= 0 and d_res.min() >= 0
    np.testing.assert_allclose(C.sum(axis=0) / probs, 1.0, rtol=0, atol=1e-15)  # every slice a law, the light one too
    np.testing.assert_allclose(C.sum(axis=1), p, rtol=0, atol=1e-15)
    # a plan that uses all of p (alpha* = 1 to the last bit) but leaves a light tuple short: w falls back to p
    full = np.array([0.5, 0.3, 0.0, 0.2, 0.0, 0.0])  # rows exactly p
    probs_eq = np.array([0.8, 0.2, 1e-30, 1e-30])
    S, w, d_res = residual_completion(p, probs_eq, full, arc_token, arc_tuple)
    np.testing.assert_array_equal(w, p)
    assert d_res[3] == 1e-30
