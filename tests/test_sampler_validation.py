"""The torch samplers refuse values that are not distributions (by default), accept float32 softmax rows, and skip
the check (and its host sync) when asked."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from otlp.core.errors import InputError  # noqa: E402
from otlp.verifiers import base, get  # noqa: E402

RULES = ["rrs", "kseq", "sps", "is", "spechub", "greedy"]
V = 6


def _inputs(B: int = 4, V: int = V, n: int = 2, dtype=torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g, dtype=dtype), -1)
    q = torch.softmax(torch.randn(B, V, generator=g, dtype=dtype), -1)
    return p, q, torch.randint(0, V, (B, n), generator=g), g


def _bad(kind: str, p):
    if kind == "nan":
        return torch.where(torch.arange(p.shape[1]) == 1, float("nan"), p)
    if kind == "negative":
        return p - 0.05
    if kind == "sums_to_2":
        return 2 * p
    return p * 0.9


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("kind, message", [("nan", "is not finite"), ("negative", "has a negative entry"),
                                           ("sums_to_2", r"sums to (2|1\.99)"),  # float16's sum of 2 p: 1.9998
                                           ("sums_to_0.9", r"sums to 0\.(9|8999)")])
@pytest.mark.parametrize("dtype, kernels", [(torch.float64, True), (torch.float32, True), (torch.float32, False),
                                            (torch.float16, True)])
def test_bad_p_and_q_are_refused(rule, kind, message, dtype, kernels, monkeypatch):
    """On the host float32 and float64 rows are checked by otlp.backend.native's one-pass row stats where they are
    built, other dtypes (and every row without the kernels) by torch's sum and amin: the same refusals."""
    if not kernels:
        monkeypatch.setenv("OTLP_NATIVE", "0")
    p, q, drafts, g = _inputs(n=1 if rule == "sps" else 2, dtype=dtype)
    with pytest.raises(InputError, match=message):
        get(rule).sample(_bad(kind, p), q, drafts, g)
    with pytest.raises(InputError, match="^q"):
        get(rule).sample(p, _bad(kind, q), drafts, g)


@pytest.mark.parametrize("rule", RULES)
def test_rows_without_tokens_are_an_input_error(rule):
    p = torch.zeros(2, 0)
    with pytest.raises(InputError, match=r"at least one token per row \(V >= 1\), got shape \(2, 0\)"):
        get(rule).sample(p, p, torch.zeros(2, 1 if rule == "sps" else 2, dtype=torch.long))


@pytest.mark.parametrize("rule", RULES)
def test_a_draft_id_out_of_range_is_an_input_error(rule):
    p, q, drafts, g = _inputs(n=1 if rule == "sps" else 2)
    with pytest.raises(InputError, match=r"drafts must be token ids in \[0, 6\)"):
        get(rule).sample(p, q, drafts + V, g)
    with pytest.raises(InputError, match="drafts must be token ids"):
        get(rule).sample(p, q, drafts - V, g)


@pytest.mark.parametrize("rule", RULES)
def test_float32_softmax_rows_at_a_real_vocabulary_are_accepted(rule):
    # LM softmax output sums to 1 only within float32 rounding (here up to ~1e-5 at V = 152k)
    p, q, drafts, g = _inputs(B=3, V=152_064, n=1 if rule == "sps" else 2, dtype=torch.float32)
    tokens, index = get(rule).sample(p * 3.0 / 3.0, q, drafts, g)
    assert tokens.shape == (3,) and bool(((tokens >= 0) & (tokens < 152_064)).all())


def test_validation_can_be_skipped_without_touching_values(monkeypatch):
    def never(*a, **k):
        raise AssertionError("values checked although validation is off")

    monkeypatch.setattr(base, "_check_values", never)
    p, q, drafts, g = _inputs()
    with base.validation(False):
        get("rrs").sample(p, q, drafts, g)
    monkeypatch.setenv("OTLP_VALIDATE", "0")
    get("rrs").sample(p, q, drafts, g)
    assert base.check_tensors(p, q, drafts, validate=False) == (4, 2, V)
    monkeypatch.delenv("OTLP_VALIDATE")
    with pytest.raises(AssertionError, match="values checked"):
        get("rrs").sample(p, q, drafts, g)


def test_sum_tolerance():
    assert base.sum_tolerance(torch.float64, 152_064) == 1e-9
    assert 1e-4 < base.sum_tolerance(torch.float32, 152_064) < 1e-3
