"""Draft schemes: closed forms against enumeration, probabilities sum to 1, samplers reproduce the law."""

from __future__ import annotations

import numpy as np
import pytest

import otlp
from otlp.core.drafts import DraftScheme, all_tuples
from otlp.core.errors import InputError, ModelTooLargeError


def schemes(rng: np.random.Generator, V: int = 4):
    q = rng.dirichlet(np.ones(V))
    return [
        otlp.IID(q, 3),
        otlp.IID(q, 1),
        otlp.Independent([q, rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))]),
        otlp.WithoutReplacement(q, 3),
        otlp.WithoutReplacement(q, 2),
        otlp.Greedy(q, 3),
        otlp.Greedy(q, 1),
        otlp.SpecHub(q),
        otlp.Joint(rng.dirichlet(np.ones(V**2)).reshape(V, V)),
    ]


def test_all_tuples_lexicographic():
    t = all_tuples(3, 2)
    assert t.shape == (9, 2)
    assert (t @ np.array([3, 1]) == np.arange(9)).all()


@pytest.mark.parametrize("seed", range(5))
def test_enumeration_sums_to_one_and_closed_forms_match(seed):
    rng = np.random.default_rng(seed)
    for scheme in schemes(rng):
        omegas, probs = scheme.enumerate()
        assert probs.sum() == pytest.approx(1.0, abs=1e-12), scheme
        assert (probs >= 0).all()
        masks = rng.random((20, scheme.V)) < 0.5
        by_enumeration = masks[:, omegas].all(axis=-1).astype(float) @ probs
        np.testing.assert_allclose(scheme.subset_probability(masks), by_enumeration, atol=1e-13, err_msg=str(scheme))
        np.testing.assert_allclose(scheme.marginals(), DraftScheme.marginals(scheme), atol=1e-13)
        sup_w, sup_p = scheme.support()
        assert (sup_p > 0).all() and sup_p.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_samplers_reproduce_the_law(seed):
    # Chi-square goodness of fit at level 1e-4 per scheme: false-failure rate about 8e-4 per seed.
    from scipy.stats import chisquare

    rng = np.random.default_rng(100 + seed)
    for scheme in schemes(rng, V=3):
        omegas, probs = scheme.enumerate()
        draws = scheme.sample(20000, rng)
        codes = draws @ (scheme.V ** np.arange(scheme.n)[::-1])
        counts = np.bincount(codes, minlength=probs.size)
        assert counts[probs == 0].sum() == 0, f"{scheme} drew an impossible tuple"
        keep = probs > 0
        if keep.sum() > 1:
            assert chisquare(counts[keep], probs[keep] * 20000).pvalue > 1e-4, scheme


def test_spechub_design_matches_the_paper():
    # SpecHub §4: Q(x, a) = q(x), Q(a, x) = q(a) q(x) / (1 - q(a)); hub = argmax q.
    q = np.array([0.5, 0.3, 0.2])
    s = otlp.SpecHub(q)
    assert s.hub == 0
    assert s.tuple_probabilities(np.array([[1, 0], [2, 0], [0, 1], [0, 2], [1, 2], [0, 0]])) == pytest.approx(
        [0.3, 0.2, 0.5 * 0.3 / 0.5, 0.5 * 0.2 / 0.5, 0.0, 0.0])


def test_without_replacement_formula():
    q = np.array([0.5, 0.3, 0.2])
    s = otlp.WithoutReplacement(q, 2)
    assert s.tuple_probabilities(np.array([[0, 1], [1, 1]])) == pytest.approx([0.5 * 0.3 / 0.5, 0.0])


def test_greedy_takes_the_top_tokens():
    q = np.array([0.1, 0.4, 0.2, 0.3])
    s = otlp.Greedy(q, 3)
    assert s.top.tolist() == [1, 3]
    w, p = s.support()
    assert w.tolist() == [[1, 3, 0], [1, 3, 2]]
    assert p == pytest.approx([1 / 3, 2 / 3])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: otlp.IID([0.5, 0.6], 2), "sums to"),
        (lambda: otlp.IID([0.5, 0.5], 0), "n must be >= 1"),
        (lambda: otlp.IID([1.5, -0.5], 2), "negative"),
        (lambda: otlp.Independent([[0.5, 0.5], [1.0]]), "length 1, expected 2"),
        (lambda: otlp.WithoutReplacement([1.0, 0.0], 2), "at least n tokens"),
        (lambda: otlp.SpecHub([0.5, 0.5], 3), "n = 2"),
        (lambda: otlp.SpecHub([1.0, 0.0]), "point mass"),
        (lambda: otlp.Greedy([1.0, 0.0], 2), "outside the top"),
        (lambda: otlp.Joint(np.ones((2, 3)) / 6), "all axes equal"),
    ],
)
def test_bad_schemes_are_refused_clearly(make, message):
    with pytest.raises(InputError, match=message):
        make()


def test_enumeration_refused_before_allocation():
    scheme = otlp.IID(np.ones(1000) / 1000, 4)
    with pytest.raises(ModelTooLargeError, match=r"1000\^4"):
        scheme.enumerate()


def test_tuple_range_checked():
    with pytest.raises(InputError, match=r"draft tuples: token ids must lie in \[0, 2\)"):
        otlp.IID([0.5, 0.5], 2).tuple_probabilities(np.array([[0, 2]]))


def test_subset_probability_by_enumeration_is_refused_when_too_big():
    scheme = otlp.WithoutReplacement(np.ones(400) / 400, 3)  # 6.4e7 tuples x 1000 masks: refused before enumerating
    with pytest.raises(ModelTooLargeError, match="P\\(omega in H\\^n\\)"):
        scheme.subset_probability(np.ones((1000, 400), dtype=bool))


def test_without_replacement_is_accurate_near_a_point_mass():
    """q with one token near 1: P(omega) against exact rationals (Fraction) to 1e-14 relative and the n = 2
    subset formula against enumeration to 1e-15 (1 - q_i computed naively cancels there: sums were off by 4e-11)."""
    from fractions import Fraction

    rng = np.random.default_rng(41)
    cases = [np.array([1e-6, 1e-6, 1e-6, 1e-6, 1 - 4e-6])]
    for _ in range(60):
        q = rng.dirichlet(np.full(int(rng.integers(3, 7)), 0.2))
        q = np.maximum(q, 1e-12)
        cases.append(q / q.sum())
    for q in cases:
        qf = [Fraction(x) for x in q]
        total = sum(qf)
        for n in range(2, min(q.size, 4) + 1):
            draft = otlp.WithoutReplacement(q, n)
            omegas, probs = draft.enumerate()
            assert abs(probs.sum() - 1.0) <= 1e-14
            for omega, prob in zip(omegas, probs, strict=True):
                if len(set(omega.tolist())) < n:
                    assert prob == 0.0
                    continue
                exact, used = Fraction(1), Fraction(0)
                for x in omega.tolist():
                    exact *= qf[x] / (total - used)
                    used += qf[x]
                assert abs(Fraction(float(prob)) - exact) <= Fraction(1, 10**14) * exact
            if n == 2:
                masks = rng.random((6, q.size)) < 0.6
                inside = np.all(masks[:, omegas], axis=2)  # [6, M]
                np.testing.assert_allclose(draft.subset_probability(masks), inside @ probs, rtol=0, atol=1e-15)


@pytest.mark.parametrize("qs, message", [(None, "got NoneType"), (3, "got int"), ("abc", "got str"),
                                            (np.array(3), "got ndarray")])
def test_independent_refuses_a_non_sequence(qs, message):
    with pytest.raises(InputError, match=f"Independent needs a sequence of draft distributions.*{message}"):
        otlp.Independent(qs)


@pytest.mark.parametrize("size, message", [(-1, "got -1"), (1.5, "got 1.5"), (True, "got True"), ("3", "got '3'")])
def test_sample_size_must_be_a_non_negative_integer(size, message):
    for scheme in schemes(np.random.default_rng(0)):
        with pytest.raises(InputError, match=f"size must be a non-negative integer.*{message}"):
            scheme.sample(size, np.random.default_rng(0))


@pytest.mark.parametrize("rng", [None, 0, np.random.RandomState(0)])
def test_sample_rng_must_be_a_generator(rng):
    # None is refused rather than replaced by an unseeded generator: draws stay reproducible by construction.
    for scheme in schemes(np.random.default_rng(0)):
        with pytest.raises(InputError, match="rng must be a numpy.random.Generator"):
            scheme.sample(3, rng)


def test_sample_zero_and_numpy_integer_sizes():
    for scheme in schemes(np.random.default_rng(0)):
        assert scheme.sample(0, np.random.default_rng(0)).shape == (0, scheme.n)
        assert scheme.sample(np.int64(2), np.random.default_rng(0)).shape == (2, scheme.n)


@pytest.mark.parametrize(("V", "n", "zeros"), [(5, 2, 1), (6, 3, 2), (7, 2, 3), (7, 4, 2), (6, 3, 0), (6, 5, 1)])
def test_without_replacement_support_is_the_positive_tokens_tuples(V: int, n: int, zeros: int) -> None:
    """WithoutReplacement.support enumerates the k! / (k - n)! tuples of the k tokens of q > 0: the same tuples,
    order and probabilities as the generic enumeration of V^n filtered to P > 0."""
    rng = np.random.default_rng(V + n)
    q = rng.dirichlet(np.full(V, 0.7))
    q[rng.choice(V, zeros, replace=False)] = 0.0
    d = otlp.WithoutReplacement(q / q.sum(), n)
    omegas, probs = d.support()
    ref_omegas, ref_probs = DraftScheme.support(d)
    assert d.support_size() == omegas.shape[0] == ref_omegas.shape[0]
    np.testing.assert_array_equal(omegas, ref_omegas)
    np.testing.assert_array_equal(probs, ref_probs)


def test_without_replacement_support_refused_before_allocation() -> None:
    q = np.full(3000, 1 / 3000)
    with pytest.raises(ModelTooLargeError, match="8,997,000 tuples of n = 2 distinct tokens among the 3,000 with q > 0 "
                                                 "would need"):
        otlp.WithoutReplacement(q, 2).support(max_tuples=1000)
    with pytest.raises(ModelTooLargeError, match="4,498,500 sets of n = 2 distinct tokens among the 3,000 with q > 0 "):
        otlp.WithoutReplacement(q, 2).set_support()  # over MAX_SETS


@pytest.mark.parametrize(("V", "n", "zeros"), [(5, 2, 1), (6, 3, 2), (7, 4, 1), (6, 5, 0), (8, 3, 3)])
def test_without_replacement_set_support_sums_the_orders(V: int, n: int, zeros: int) -> None:
    """set_support: the C(k, n) sets of tokens of q > 0 in lexicographic order, each with the summed probability of
    its n! ordered tuples of support() (to 1e-15 relative; the subset recursion adds the same terms in another
    order), also for a q with one token near 1 (a point mass, where 1 - q(T) would cancel)."""
    rng = np.random.default_rng(V * n)
    q = rng.dirichlet(np.full(V, 0.5))
    q[rng.choice(V, zeros, replace=False)] = 0.0
    for qq in (q / q.sum(), np.r_[np.full(V - 1, 1e-7), 1 - 1e-7 * (V - 1)]):
        d = otlp.WithoutReplacement(qq, n)
        sets, probs = d.set_support()
        omegas, tuple_probs = d.support()
        keys, back = np.unique(np.sort(omegas, axis=1), axis=0, return_inverse=True)
        np.testing.assert_array_equal(sets, keys)  # np.unique sorts rows lexicographically
        np.testing.assert_allclose(probs, np.bincount(back.ravel(), tuple_probs), rtol=1e-14, atol=0)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_set_probabilities_of_a_batch_against_exact_rationals(library: str) -> None:
    """set_probabilities on several rows at once (the rows' ranks, suffix sums and least undrawn ranks side by side)
    against the sum over the n! orders in exact rationals, P(S) = sum_sigma prod_k q_sigma(k) / (1 - q(first k - 1)):
    ties in q, a near point mass and zeros; n up to 5; to 1e-14 relative; on numpy arrays and on tensors (the
    sampler's static route)."""
    import itertools
    from fractions import Fraction

    from otlp.core.drafts import combinations, set_probabilities

    rng = np.random.default_rng(7)
    for V, n in ((6, 2), (7, 3), (7, 4), (8, 5)):
        rows = [rng.dirichlet(np.full(V, 0.5)), np.r_[np.full(V - 2, 0.1), np.zeros(2)],
                np.r_[np.full(V - 1, 1e-7), 0.0]]
        rows[1] /= rows[1].sum()
        rows[2][-1] = 1.0 - rows[2].sum()  # a near point mass
        q = np.stack(rows)  # [3, V]
        sets = combinations(V, n)
        if library == "torch":
            import torch

            got = set_probabilities(torch.from_numpy(q), torch.from_numpy(sets)).numpy()  # [3, U]
        else:
            got = set_probabilities(q, sets)  # [3, U]
        for b in range(3):
            exact = [Fraction(float(x)) for x in q[b]]
            total = sum(exact)
            for u, s in enumerate(sets):
                want = Fraction(0)
                for order in itertools.permutations(s.tolist()):
                    term, left = Fraction(1), total
                    for t in order:
                        term *= exact[t] / left if left else 0
                        left -= exact[t]
                    want += term
                assert abs(got[b, u] - float(want)) <= 1e-14 * float(want) + 1e-300, (V, n, b, s)
