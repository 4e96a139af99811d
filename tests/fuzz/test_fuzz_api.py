"""Hypothesis over the public API: malformed input gives ``InputError`` (one line), never another exception or a
leaked warning; valid input gives alpha* equal to an independent route (brute force over 2^V subsets, or the
relaxed LP). Counts of generated inputs are printed at the end of the run (tests/fuzz/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import otlp
from otlp.core.distributions import check_distribution, load_distribution, probabilities_from_logits
from otlp.core.subsets import brute_force_min_psi

from .conftest import contract, count
from .strategies import any_vector, distributions, large_distributions, malformed, ns

FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
SCHEMES = {"iid": otlp.IID, "without_replacement": otlp.WithoutReplacement, "greedy": otlp.Greedy,
           "spechub": lambda q, n: otlp.SpecHub(q, n),
           # a list of n drafts: n is fuzzed through the other schemes (10**9 copies would be 8 GB of references)
           "independent": lambda q, n: otlp.Independent([q] * n if isinstance(n, int) and 0 <= n <= 6 else [q, q])}


def _reference_alpha(p: np.ndarray, draft) -> float:  # noqa: ANN001
    """alpha* by a route the production code does not take: brute force over all 2^V subsets for the i.i.d.
    (production: the sorted prefix) and closed-form schemes, the relaxed LP (HiGHS) on the enumerated support for
    the others (production: brute force / submodular minimisation)."""
    if isinstance(draft, (otlp.IID, otlp.Greedy, otlp.SpecHub)):
        return 1.0 + brute_force_min_psi(p, draft)[0]
    from otlp.lp.formulations import RelaxedOTLP

    return float(RelaxedOTLP(p, draft).solve(backend="highs").value)


@settings(FUZZ, max_examples=2500)
@given(p=any_vector(), q=any_vector(), n=ns, scheme=st.sampled_from(sorted(SCHEMES)))
def test_optimal_acceptance(p, q, n, scheme):
    count("api: optimal_acceptance")
    with contract():
        draft = SCHEMES[scheme](q, n)
        alpha = otlp.optimal_acceptance(p, draft)
        assert 0.0 <= alpha <= 1.0
        small = draft.V <= 8 and (isinstance(draft, otlp.IID) or draft.V ** min(draft.n, 9) <= 400)
        if small:  # the brute-force reference raises a rounded q(H) to the n-th power: its error grows like n V ulp
            tol = 1e-9 + 4.4e-16 * min(draft.n, 10**12) * draft.V  # (n up to 10^9 here)
            assert alpha == pytest.approx(_reference_alpha(np.asarray(p, dtype=float), draft), abs=tol)


@settings(FUZZ, max_examples=1500)
@given(V=st.integers(1, 7), n=st.integers(1, 4), data=st.data())
def test_valid_pairs_agree_with_an_independent_route(V, n, data):
    count("api: valid pairs vs independent route")
    p, q = data.draw(distributions(V)), data.draw(distributions(V))
    scheme = data.draw(st.sampled_from(sorted(SCHEMES)))
    with contract():
        draft = SCHEMES[scheme](q, n)
        if draft.V ** draft.n > 2000:
            return
        alpha = otlp.optimal_acceptance(p, draft)
        assert alpha == pytest.approx(_reference_alpha(p, draft), abs=1e-9)
        if scheme == "iid":
            from otlp.optimal import OptimalTransport

            ot = OptimalTransport(p, draft)
            assert ot.alpha <= 1.0 and ot.alpha == pytest.approx(alpha, abs=1e-9)
            omegas, probs = draft.support()
            law = probs @ ot.slices(omegas)
            assert np.abs(law - p).max() < 1e-9


@settings(FUZZ, max_examples=40)
@given(p=large_distributions(), q=large_distributions(), n=st.sampled_from([1, 2, 4, 8]))
def test_large_vocabularies(p, q, n):
    count("api: V up to 1e5")
    from otlp.optimal import OptimalTransport

    with contract():
        draft = otlp.IID(q, n)
        alpha = otlp.optimal_acceptance(p, draft)
        if p.size == q.size:
            ot = OptimalTransport(p, draft)
            assert ot.alpha == pytest.approx(alpha, abs=1e-9) and 0.0 <= alpha <= 1.0


@settings(FUZZ, max_examples=1500)
@given(x=any_vector(8), renormalize=st.booleans())
def test_check_distribution(x, renormalize):
    count("api: check_distribution")
    with contract():
        out = check_distribution(x, renormalize=renormalize)
        assert out.dtype == np.float64 and out.ndim == 1 and np.all(out >= 0)
        assert abs(out.sum() - 1.0) <= 1e-9 or renormalize


@settings(FUZZ, max_examples=1000)
@given(text=st.one_of(st.text(max_size=20), st.lists(st.sampled_from(["0.5", "", " ", "nan", "1e-320", "-0", "1",
                                                                       "x", "inf", "0.25"]), max_size=5)
                      .map(lambda xs: ",".join(xs))))
def test_load_distribution_text(text):
    count("api: load_distribution")
    with contract():
        load_distribution(text)


@settings(FUZZ, max_examples=800)
@given(logits=malformed(6), temperature=st.one_of(st.floats(allow_nan=True), st.integers(-1, 3), st.none()),
       top_k=st.one_of(st.none(), st.integers(-1, 8), st.floats(allow_nan=True)),
       top_p=st.one_of(st.none(), st.floats(allow_nan=True)))
def test_probabilities_from_logits(logits, temperature, top_k, top_p):
    count("api: probabilities_from_logits")
    with contract():
        probs = probabilities_from_logits(logits, temperature, top_k, top_p)
        assert np.all(np.isfinite(probs)) and np.allclose(probs.sum(-1), 1.0)


@settings(FUZZ, max_examples=600)
@given(p=distributions(max_V=5), q=distributions(max_V=5), n=st.integers(1, 3),
       omegas=st.one_of(st.lists(st.lists(st.integers(-2, 6), min_size=1, max_size=4), max_size=4),
                        st.lists(st.integers(-2, 6), max_size=4)),
       seed=st.one_of(st.none(), st.integers(0, 10)))
def test_draft_schemes_and_psi(p, q, n, omegas, seed):
    count("api: draft schemes, psi")
    with contract():
        draft = otlp.IID(q, n)
        probs = draft.tuple_probabilities(omegas)  # ragged, out of range, wrong n: InputError
        assert np.all((probs >= 0) & (probs <= 1))
        flat = [v for row in omegas for v in (row if isinstance(row, list) else [row])]
        value = otlp.core.subsets.psi(p if seed is None else p, draft, [v > 0 for v in flat])  # a mask of any length
        assert -1.0 <= value <= 1.0
