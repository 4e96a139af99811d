"""Closed forms and theorems from the papers, each checked against an independent route (enumeration, alpha*, or the
numbers the notes recomputed)."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.verifiers import get
from otlp.verifiers.exact import summary
from otlp.verifiers.kseq import rho_star

from .instances import make_pair

P_EX, Q_EX = np.array([0.1, 0.6, 0.3]), np.array([0.5, 0.3, 0.2])


def test_worked_example_spechub_and_rrs_without_replacement() -> None:
    """SpecHub paper Fig. 4/5: q = (.5,.3,.2), p = (.1,.6,.3): SpecHub accepts with probability 1, RRS without
    replacement 0.94; alpha* for i.i.d. drafts is 0.85 (otlp.optimal_acceptance docstring)."""
    hub, wor = get("spechub"), get("rrs_wor")
    assert summary(hub, P_EX, hub.make_draft(Q_EX, 2))["acceptance"] == pytest.approx(1.0, abs=1e-15)
    assert summary(wor, P_EX, wor.make_draft(Q_EX, 2))["acceptance"] == pytest.approx(0.94, abs=1e-15)
    assert get("optimal").acceptance(P_EX, otlp.IID(Q_EX, 2)) == pytest.approx(0.85, abs=1e-12)


def test_kseq_matches_spechub_note_tc1() -> None:
    """SpecHub note §3.5, TC1 (the worked example): K-SEQ acceptance 0.815037 at rho* = 1.430074."""
    v = get("kseq")
    draft = otlp.IID(Q_EX, 2)
    assert v.rho_star(P_EX, draft) == pytest.approx(1.430074, abs=1e-6)
    assert summary(v, P_EX, draft)["acceptance"] == pytest.approx(0.815037, abs=1e-6)


@pytest.mark.parametrize(
    ("plot_q1", "q2", "p_star", "spectr", "specinfer"),
    [(1 / 3, 0.0, 0.888889, 0.811420, 0.777778), (1 / 3, 0.05, 0.938889, 0.847036, 0.811111),
     (1 / 3, 0.2, 1.0, 0.944907, 0.911111), (1 / 3, 0.6, 0.955556, 0.858654, 0.822222),
     (1 / 6, 0.1, 0.822222, 0.762460, 0.733333), (1 / 6, 0.7, 0.855556, 0.787127, 0.755556)],
)
def test_canonical_decomposition_fig2_points(plot_q1, q2, p_star, spectr, specinfer) -> None:  # noqa: ANN001
    """Canonical-decomposition note §5, Fig. 2 recomputed: draft uniform on 3 tokens, target (q1, q2, 1 - q1 - q2)
    (the paper's letters swapped), K = 2. SpecTr = K-SEQ, SpecInfer = RRS with replacement."""
    p = np.array([plot_q1, q2, 1 - plot_q1 - q2])
    draft = otlp.IID(np.full(3, 1 / 3), 2)
    assert otlp.optimal_acceptance(p, draft) == pytest.approx(p_star, abs=1e-6)
    assert get("kseq").acceptance(p, draft) == pytest.approx(spectr, abs=1e-6)
    assert get("rrs").acceptance(p, draft) == pytest.approx(specinfer, abs=1e-6)


def test_rrs_two_draft_closed_form() -> None:
    """SpecHub note §4: RRS with n = 2 accepts sum_x min(p(x), (2 - alpha) q(x)), alpha = sum min(p, q)."""
    rng = np.random.default_rng(1)
    v = get("rrs")
    for kind in ("dirichlet", "sparse", "ties", "equal", "p_point") * 20:
        p, q = make_pair(rng, int(rng.integers(2, 7)), kind)
        alpha = np.minimum(p, q).sum()
        enumerated = summary(v, p, otlp.IID(q, 2))["verifier_acceptance"]
        assert enumerated == pytest.approx(np.minimum(p, (2 - alpha) * q).sum(), abs=1e-12)


def test_spechub_closed_form() -> None:
    """alpha_SH = p(a) + sum_{x != a} min(p(x), q(x) / (1 - q(a))) (SpecHub note §2.4), against enumeration."""
    rng = np.random.default_rng(2)
    v = get("spechub")
    for kind in ("dirichlet", "sparse", "ties", "equal", "p_point", "q_flat") * 20:
        p, q = make_pair(rng, int(rng.integers(2, 7)), kind)
        if np.count_nonzero(q) < 2:
            continue
        a = int(np.argmax(q))
        closed = p[a] + sum(min(p[x], q[x] / (1 - q[a])) for x in range(p.size) if x != a)
        assert summary(v, p, otlp.SpecHub(q))["acceptance"] == pytest.approx(closed, abs=1e-12)


def test_kseq_rho_star_bracket_and_guarantee() -> None:
    """rho* is the valid (high) end: f(rho) <= 0 and f just below rho is > 0 unless rho = 1 (SpecTr Lemma 4, Thm 1);
    acceptance >= (1 - (1 - 1/n)^n) alpha* (Thm 1(c))."""
    rng = np.random.default_rng(3)
    v = get("kseq")
    for kind in ("dirichlet", "sparse", "ties", "q_flat") * 25:
        V, n = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        p, q = make_pair(rng, V, kind)

        def f(rho: float, p=p, q=q, n=n) -> float:  # noqa: ANN001
            beta = np.minimum(q, p / rho).sum()
            return 1 - (1 - beta) ** n - rho * beta

        rho = float(rho_star(p, q, n))
        assert 1.0 <= rho <= n and f(rho) <= 1e-15
        if rho > 1 + 1e-9:
            assert f(rho - 1e-9) > -1e-15
        draft = otlp.IID(q, n)
        bound = (1 - (1 - 1 / n) ** n) * otlp.optimal_acceptance(p, draft)
        assert v.verifier_acceptance(p, draft) >= bound - 1e-12


def test_kseq_optimal_on_uniform_pair() -> None:
    """SpecTr App. B.1/B.2 (letters swapped): draft uniform on d tokens, target uniform on d/r of them:
    K-SEQ = alpha* = 1 - (1 - 1/r)^n."""
    for d, r, n in ((6, 2, 2), (6, 3, 3), (8, 4, 2), (8, 2, 4)):
        q = np.full(d, 1 / d)
        p = np.where(np.arange(d) < d // r, r / d, 0.0)
        draft = otlp.IID(q, n)
        expected = 1 - (1 - 1 / r) ** n
        assert get("kseq").acceptance(p, draft) == pytest.approx(expected, abs=1e-12)
        assert otlp.optimal_acceptance(p, draft) == pytest.approx(expected, abs=1e-12)


def test_importance_sampling_full_lp_is_optimal_and_truncation_bound() -> None:
    """Canonical decomposition Thm 1: with s >= V the n = 2 IS reaches alpha*; eq. (12): with s < V its acceptance is
    at least alpha* - sum over Omega_2 of (p - q^2)^+ (letters swapped)."""
    rng = np.random.default_rng(4)
    for kind in ("dirichlet", "sparse", "ties", "equal", "p_point") * 8:
        V = int(rng.integers(2, 7))
        p, q = make_pair(rng, V, kind)
        draft = otlp.IID(q, 2)
        alpha_star = otlp.optimal_acceptance(p, draft)
        assert get("is", s=V).verifier_acceptance(p, draft) == pytest.approx(alpha_star, abs=1e-8)
        s = int(rng.integers(0, V))
        order = np.argsort(-(p - q * q), kind="stable")
        penalty = np.maximum(p - q * q, 0.0)[order[s:]].sum()
        assert get("is", s=s).verifier_acceptance(p, draft) >= alpha_star - penalty - 1e-8


def test_weighted_is_full_lp_is_optimal_for_different_drafts() -> None:
    """The ordered-pair LP (App. I) with s >= V equals alpha* for independent different drafts (note §2.4)."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        V = int(rng.integers(2, 6))
        p = rng.dirichlet(np.ones(V))
        draft = otlp.Independent([rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))])
        assert get("weighted_is", s=V).verifier_acceptance(p, draft) == pytest.approx(
            otlp.optimal_acceptance(p, draft), abs=1e-8)


def test_greedy_is_optimal_for_its_scheme() -> None:
    rng = np.random.default_rng(6)
    for kind in ("dirichlet", "sparse", "ties", "equal", "p_point") * 10:
        V, n = int(rng.integers(3, 8)), int(rng.integers(1, 4))
        p, q = make_pair(rng, V, kind)
        try:
            draft = otlp.Greedy(q, n)
        except otlp.InputError:
            continue
        assert get("greedy").acceptance(p, draft) == pytest.approx(otlp.optimal_acceptance(p, draft), abs=1e-12)


def test_distinct_rows_matches_numpy_unique():
    """verifiers.base.distinct_rows (byte hashing, used by the optimal and IS samplers to solve repeated rows once)
    against np.unique(axis=0): same partition of the rows, first occurrences as representatives."""
    import numpy as np

    from otlp.verifiers.base import distinct_rows

    rng = np.random.default_rng(47)
    a = rng.integers(0, 3, size=(40, 3)).astype(np.float64)
    b = rng.integers(0, 2, size=(40, 2)).astype(np.float64)
    first, inverse = distinct_rows(a, b)
    data = np.concatenate([a, b], axis=1)
    _, np_first, np_inverse = np.unique(data, axis=0, return_index=True, return_inverse=True)
    np_inverse = np_inverse.reshape(-1)
    assert first.size == np_first.size
    np.testing.assert_array_equal(data[first][inverse], data)  # every row maps to an equal representative
    assert np.all(np.diff(first) > 0) and np.all(inverse[first] == np.arange(first.size))  # first occurrences
    same = np_inverse[:, None] == np_inverse[None, :]
    np.testing.assert_array_equal(inverse[:, None] == inverse[None, :], same)
