"""Probability vectors: validation, logits -> probabilities, loading; bad input fuzzed with hypothesis."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otlp.core.distributions import check_distribution, keep_top_k, load_distribution, probabilities_from_logits
from otlp.core.errors import InputError


def test_valid_vector_is_copied():
    x = np.array([0.25, 0.75])
    out = check_distribution(x)
    out[0] = 9
    assert x[0] == 0.25


def test_renormalise_only_when_asked():
    with pytest.raises(InputError, match="sums to 2"):
        check_distribution([1.0, 1.0])
    assert check_distribution([1.0, 1.0], renormalize=True).tolist() == [0.5, 0.5]


@pytest.mark.parametrize(("values", "msg"), [
    ([0.5, float("nan"), 0.5], r"p\[1\] = nan is not finite"),
    ([0.5, float("inf")], r"p\[1\] = inf is not finite"),
    ([1.5, -0.5], r"p\[1\] = -0.5 is negative"),
    ([1e308, 1e308], "sum overflows"),
])
def test_each_bad_entry_is_named(values, msg):
    for renormalize in (False, True):
        with pytest.raises(InputError, match=msg):
            check_distribution(values, renormalize=renormalize)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5)), max_size=8))
def test_fuzzed_vectors_either_validate_or_raise_input_error(values):
    try:
        out = check_distribution(values)
    except InputError as exc:
        assert str(exc)  # a message, never a bare error
        return
    assert np.all(out >= 0) and abs(out.sum() - 1) <= 1e-9


def _numbers(text: str) -> bool:
    """Whether ``text`` reads as inline numbers ("1", " 0.5,0.5"): a distribution or a wrong one, not garbage."""
    try:
        [float(x) for x in text.split(",")]
    except ValueError:
        return False
    return True


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=20).filter(lambda s: not _numbers(s)), st.none(),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_fuzzed_garbage_gives_input_error(garbage):
    with pytest.raises(InputError):
        load_distribution(garbage) if isinstance(garbage, str) else check_distribution(garbage)


def test_logits_top_k_top_p_temperature():
    z = np.array([2.0, 1.0, 0.0, -1.0])
    full = probabilities_from_logits(z)
    np.testing.assert_allclose(full, np.exp(z) / np.exp(z).sum())
    top2 = probabilities_from_logits(z, top_k=2)
    np.testing.assert_allclose(top2, np.r_[np.exp(z[:2]) / np.exp(z[:2]).sum(), 0, 0])
    # top-p: the smallest prefix whose mass reaches top_p; here the first token alone has 0.64 < 0.7.
    nucleus = probabilities_from_logits(z, top_p=0.7)
    assert (nucleus > 0).tolist() == [True, True, False, False]
    assert probabilities_from_logits(z, temperature=0).tolist() == [1, 0, 0, 0]
    cold = probabilities_from_logits(z, temperature=0.5)
    np.testing.assert_allclose(cold, np.exp(2 * z) / np.exp(2 * z).sum())


def test_logits_torch_matches_numpy():
    torch = pytest.importorskip("torch", reason="torch extra not installed")
    z = np.random.default_rng(0).normal(size=(3, 50))
    for kw in ({}, {"top_k": 5}, {"top_p": 0.8, "temperature": 0.7}, {"temperature": 0}):
        np.testing.assert_allclose(
            probabilities_from_logits(torch.tensor(z), **kw).numpy(), probabilities_from_logits(z, **kw), atol=1e-12)


@pytest.mark.parametrize("kw, msg", [({"temperature": -1}, "temperature"), ({"top_k": 0}, "top_k"),
                                     ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p")])
def test_bad_sampling_parameters(kw, msg):
    with pytest.raises(InputError, match=msg):
        probabilities_from_logits([0.0, 1.0], **kw)


@pytest.mark.parametrize("kw, msg", [
    ({"temperature": None}, "temperature must be a finite number >= 0.*got None"),
    ({"temperature": "1"}, "temperature must be a finite number >= 0.*got '1'"),
    ({"temperature": True}, "temperature must be a finite number >= 0.*got True"),
    ({"temperature": float("nan")}, "temperature must be a finite number >= 0.*got nan"),
    ({"top_k": "a"}, "top_k must be an integer >= 1.*got 'a'"),
    ({"top_k": float("inf")}, "top_k must be an integer >= 1.*got inf"),
    ({"top_k": True}, "top_k must be an integer >= 1.*got True"),
    ({"top_p": "a"}, r"top_p must be a number in \(0, 1\].*got 'a'"),
    ({"top_p": float("nan")}, r"top_p must be a number in \(0, 1\].*got nan"),
])
def test_wrongly_typed_sampling_parameters_are_input_errors(kw, msg):
    with pytest.raises(InputError, match=msg):
        probabilities_from_logits([0.0, 1.0], **kw)


def _backends():
    yield np.asarray
    try:
        import torch
    except ImportError:
        return
    yield lambda x: torch.tensor(x, dtype=torch.float64)
    yield lambda x: torch.tensor(x, dtype=torch.float32)


INF = float("inf")


@pytest.mark.parametrize("logits, msg", [
    ([-INF, -INF, -INF], "all -inf"),
    ([[0.0, 1.0, 2.0], [-INF, -INF, -INF]], r"row \(1,\) is all -inf"),
    ([0.0, INF, 1.0], r"\+inf"),
    ([0.0, float("nan"), 1.0], "NaN"),
])
@pytest.mark.parametrize("kw", [{}, {"temperature": 0}, {"top_k": 2}, {"top_p": 0.5}])
def test_non_finite_logits_raise_instead_of_returning_nan(logits, msg, kw):
    for as_array in _backends():
        with pytest.raises(InputError, match=msg):
            probabilities_from_logits(as_array(logits), **kw)


def test_non_numeric_logits_are_input_errors():
    with pytest.raises(InputError, match="logits must be an array"):
        probabilities_from_logits(["a", "b"])


@pytest.mark.parametrize("temperature", [1e-320, 1e-300, 1e-40])
def test_tiny_temperature_is_the_greedy_limit(temperature):
    # softmax(z / T) as T -> 0+ is uniform on the argmax set; z / T overflowing must not turn that into NaN.
    for as_array in _backends():
        out = probabilities_from_logits(as_array([1.0, 3.0, 3.0, -INF, 0.0]), temperature=temperature)
        np.testing.assert_allclose(np.asarray(out, dtype=np.float64), [0, 0.5, 0.5, 0, 0])


def test_masked_minus_inf_logits_are_fine():
    for as_array in _backends():
        out = probabilities_from_logits(as_array([0.0, -INF, 0.0]))
        np.testing.assert_allclose(np.asarray(out, dtype=np.float64), [0.5, 0, 0.5])


def test_load_inline_json_npy(tmp_path):
    assert load_distribution("0.5, 0.3,0.2").tolist() == [0.5, 0.3, 0.2]
    (tmp_path / "p.json").write_text(json.dumps([0.25, 0.75]))
    assert load_distribution(str(tmp_path / "p.json")).tolist() == [0.25, 0.75]
    np.save(tmp_path / "p.npy", np.array([0.5, 0.5]))
    assert load_distribution(str(tmp_path / "p.npy")).tolist() == [0.5, 0.5]
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="npy"):
        load_distribution(str(tmp_path / "obj.npy"))
    with pytest.raises(InputError, match="does not exist"):
        load_distribution(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        load_distribution(str(tmp_path / "bad.json"))


def test_plus_and_minus_inf_entries_raise_without_a_runtime_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inf + (-inf) in the sum must not warn (or, under -W error, escape as one)
        with pytest.raises(InputError, match="not finite"):
            check_distribution([float("inf"), -float("inf")])


# -- accepted though wrong (issue 17): refused now, with what was expected ------------------------------------------
@pytest.mark.parametrize("x, message", [
    ([True, False], "boolean, string or other non-number"),
    (["0.5", "0.5"], "boolean, string or other non-number"),
    ([0.5, True, 0.5], "boolean, string or other non-number"),
    (range(2), "got range"),
    ((v for v in (0.5, 0.5)), "got generator"),
    ({0.25, 0.75}, "got set"),
    (np.array([True, False]), "dtype bool"),
    (np.array(["0.5", "0.5"]), "dtype <U3"),
    (np.array([0.5 + 0j, 0.5]), "dtype complex128"),
    ([[0.5], [0.25, 0.25]], "equal-length rows"),
    ("0.5,0.5", "got str"),
])
def test_non_numbers_are_refused(x, message):
    from otlp.core.distributions import check_distribution

    with pytest.raises(InputError, match=re.escape(message)):
        check_distribution(x)


@pytest.mark.parametrize("x", [[0.5, 0.5], (0.5, 0.5), [1, 0], np.array([0.5, 0.5], dtype=np.float32),
                               np.array([1, 0], dtype=np.int64), [np.float64(0.5), np.float32(0.5)]])
def test_real_vectors_are_accepted(x):
    from otlp.core.distributions import check_distribution

    assert check_distribution(x).tolist() == [float(v) for v in np.asarray(x, dtype=np.float64)]


@pytest.mark.parametrize("spec", ["0.5,,0.5", "0.5,0.5,", ",0.5,0.5", "0.5;;0.5"])
def test_an_empty_field_is_refused(spec):
    from otlp.core.distributions import load_distribution

    with pytest.raises(InputError, match="empty field"):
        load_distribution(spec)


@pytest.mark.parametrize("text", ["[true, false]", '["0.5", "0.5"]', "[0.5, null, 0.5]", "[[0.5], [0.5, 0]]"])
def test_json_files_hold_numbers_only(tmp_path, text):
    from otlp.core.distributions import load_distribution

    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(InputError):
        load_distribution(str(path))


def test_an_empty_npy_file_is_an_input_error(tmp_path):
    from otlp.core.distributions import load_distribution

    (tmp_path / "p.npy").write_bytes(b"")
    with pytest.raises(InputError, match="is empty"):
        load_distribution(str(tmp_path / "p.npy"))
    np.save(tmp_path / "b.npy", np.array([True, False]))
    with pytest.raises(InputError, match="dtype bool"):
        load_distribution(str(tmp_path / "b.npy"))


def test_token_tuples_checker():
    from otlp.core.distributions import check_token_tuples

    assert check_token_tuples([[0, 1], [2, 2]], 2, 3).dtype == np.int64
    assert check_token_tuples([0, 1], 2, 3).shape == (1, 2)
    for bad, message in [([[0, 1], [2]], "rows of different lengths"), ([[0, 3]], r"\[0, 3\)"),
                         ([[0.0, 1.0]], "integer token ids"), ([[True, False]], "integer token ids"),
                         ([[0, 1, 2]], "shape"), ([["0", "1"]], "integer token ids")]:
        with pytest.raises(InputError, match=message):
            check_token_tuples(bad, 2, 3)


def test_as_generator():
    from otlp.core.distributions import as_generator

    g = np.random.default_rng(1)
    assert as_generator(g) is g
    assert as_generator(0).random() == np.random.default_rng(0).random()
    assert isinstance(as_generator(None), np.random.Generator)
    for bad in (-1, True, 1.5, "0"):
        with pytest.raises(InputError):
            as_generator(bad)


def test_keep_top_k_keeps_the_k_largest_lower_ids_first():
    q = np.array([[0.1, 0.3, 0.2, 0.3, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2]])
    np.testing.assert_array_equal(keep_top_k(q, 2), [[0, 0.3, 0, 0.3, 0], [0.2, 0.2, 0, 0, 0]])
    np.testing.assert_array_equal(keep_top_k(q, 3), [[0, 0.3, 0.2, 0.3, 0], [0.2, 0.2, 0.2, 0, 0]])
    np.testing.assert_array_equal(keep_top_k(q[0], 1), [0, 0.3, 0, 0, 0])  # one row
    whole = keep_top_k(q, 5)
    np.testing.assert_array_equal(whole, q)
    assert whole is not q  # a new array: callers may write into it
