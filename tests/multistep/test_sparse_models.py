"""Every multi-step rule on SPARSE autoregressive models: zero conditionals in the draft and/or the target.

``random_ar_model`` floors every entry at 1e-12, so the other tests never see an exact zero.  With zeros, a
draft tuple of probability 0 must contribute nothing to the output law (not 0 * NaN), a drafted token the target
forbids must be rejected, and the output must still have exactly the target's law (papers/002 Def. 3.1).
Independent routes: the target's own prefix marginals (``target_matching_error``), the closed-form block
efficiencies (tree recursions, no enumeration), and for the samplers a seeded chi-square test.
"""

import warnings

import numpy as np
import pytest
import torch

from otlp.multistep import (
    RULES,
    ARModel,
    certify_multistep,
    efficiency_from_law,
    output_law,
    target_matching_error,
)
from otlp.multistep.armodel import num_nodes
from otlp.multistep.token_wise import sps_path_law

from .stats import ALPHA, sampled_law_pvalue
from .test_target_law import _closed_form

EXACT = 1e-12


def _sparse_rows(V: int, depth: int, rng: np.random.Generator, zero_fraction: float) -> np.ndarray:
    """Dirichlet rows, about ``zero_fraction`` of the entries exactly 0 (at least one kept per row).  # [n, V]"""
    n = num_nodes(V, depth)
    rows = rng.dirichlet(np.ones(V), size=n) * (rng.random((n, V)) >= zero_fraction)
    empty = rows.sum(1) == 0
    rows[empty, rng.integers(0, V, int(empty.sum()))] = 1.0
    return rows / rows.sum(1, keepdims=True)


def _sparse_instances(seed: int, count: int):
    """(V, L, K, target, draft, kind): zeros in the draft only, the target only, both, or p == q sparse."""
    rng = np.random.default_rng(seed)
    kinds = ("draft", "target", "both", "equal")
    for n in range(count):
        kind = kinds[n % len(kinds)]
        V = int(rng.integers(2, 4))
        L = int(rng.integers(1, 4)) if V == 2 else int(rng.integers(1, 3))
        K = int(rng.integers(1, 4)) if V**L <= 9 else 2
        zf = float(rng.choice([0.3, 0.5, 0.7]))
        p = _sparse_rows(V, L, rng, zf if kind in ("target", "both", "equal") else 0.0)
        q = p if kind == "equal" else _sparse_rows(V, L, rng, zf if kind in ("draft", "both") else 0.0)
        yield V, L, K, ARModel(p, V, "target"), ARModel(q, V, "draft"), kind



def _check_law(R, rule, target, draft, L, K, where):
    V = target.V
    assert np.all(np.isfinite(R)), (rule, where, R)
    assert R[0] == 0.0 and np.all(R >= -1e-15), (rule, where)
    assert abs(R.sum() - 1.0) < EXACT, (rule, where, R.sum())
    err = target_matching_error(R, target, L)
    assert err < EXACT, (rule, where, err)
    closed = _closed_form(rule, target, draft, L, K)
    if closed is not None:
        assert np.isfinite(closed), (rule, where)
        assert efficiency_from_law(R, V, L) == pytest.approx(closed, abs=EXACT), (rule, where)


def test_bug_sweep_example_equal_sparse_models():
    # the reported case: p == q with a zero conditional at the root; every rule used to give NaN except the tree
    cond = [[0.0, 1.0], [0.5, 0.5], [0.5, 0.5]]
    t, d = ARModel(cond, 2), ARModel(cond, 2)
    for rule in RULES:
        R = output_law(rule, t, d, 1)
        _check_law(R, rule, t, d, 1, 1, "example")
        if rule != "gbv":  # q = p: every drafted token is accepted (GBV with K = 1 is BV)
            assert efficiency_from_law(R, 2, 1) == pytest.approx(2.0, abs=EXACT)
        np.testing.assert_allclose(R, [0, 0, 0, 0, 0, 0.5, 0.5], atol=EXACT)  # a_1 = 1 surely, then Y ~ (1/2, 1/2)
        assert certify_multistep(rule, t, d, 1).preserves_target is True, rule


def test_output_law_matches_target_on_random_sparse_instances():
    count = dict.fromkeys(("draft", "target", "both", "equal"), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 or log(0) warnings either
        for V, L, K, target, draft, kind in _sparse_instances(seed=20260917, count=240):
            count[kind] += 1
            for rule in RULES:
                R = output_law(rule, target, draft, L, K)
                _check_law(R, rule, target, draft, L, K, f"{kind} V={V} L={L} K={K}")
    assert min(count.values()) >= 60


def test_deterministic_rows_in_draft_and_target():
    # one-hot rows (a draft that can only propose one token, a target that forbids it) at every node
    V, L = 3, 2
    rng = np.random.default_rng(5)
    n = num_nodes(V, L)
    onehot = np.eye(V)[rng.integers(0, V, n)]  # [n, V]
    dense = rng.dirichlet(np.ones(V), size=n)
    for p, q in ((onehot, dense), (dense, onehot), (onehot, onehot), (onehot, np.eye(V)[(onehot.argmax(1) + 1) % V])):
        target, draft = ARModel(p, V), ARModel(q, V)
        for K in (1, 2):
            for rule in RULES:
                _check_law(output_law(rule, target, draft, L, K), rule, target, draft, L, K, f"one-hot K={K}")


def test_certify_preserves_target_on_sparse_instances():
    for V, L, K, target, draft, kind in _sparse_instances(seed=3, count=12):
        for rule in RULES:
            r = certify_multistep(rule, target, draft, L, K)
            assert r.preserves_target is True, (rule, kind, V, L, K, r.target_check)
            assert abs(r.block_efficiency - r.law_efficiency) < 1e-9, (rule, kind, r.notes)


def test_sps_path_law_with_an_undraftable_token_is_finite():
    # q(a_1) = 0 = p(a_1): the block can never be drafted, but its law must still be a finite distribution
    drafts = torch.tensor([[0, 1]])
    p_path = torch.tensor([[[0.0, 1.0], [0.5, 0.5], [0.3, 0.7]]], dtype=torch.float64)
    q_path = torch.tensor([[[0.0, 1.0], [0.2, 0.8]]], dtype=torch.float64)
    tau_probs, corrections = sps_path_law(drafts, p_path, q_path)
    assert torch.isfinite(tau_probs).all() and torch.isfinite(corrections).all()
    assert tau_probs.sum().item() == pytest.approx(1.0, abs=EXACT)


@pytest.mark.parametrize("rule", RULES)
def test_samplers_on_a_sparse_pair_match_the_exact_law(rule):
    # the samplers never output a sequence of probability 0 and agree with the enumerated law (seeded chi-square)
    rng = np.random.default_rng(17)
    V, L = 3, 2
    target = ARModel(_sparse_rows(V, L, rng, 0.4), V, "target")
    draft = ARModel(_sparse_rows(V, L, rng, 0.4), V, "draft")
    assert (target.conditionals == 0).any() and (draft.conditionals == 0).any()
    assert sampled_law_pvalue(rule, target, draft, L, 2, size=20_000, seed=1) > ALPHA


def test_bv_law_of_a_probability_zero_block_is_finite() -> None:
    """block_verification_law on a block the draft gives probability 0 (q_tok = 0, as an enumeration passes it):
    finite tau probabilities and corrections, not 0/0 = NaN (the ratio p/q is taken as 1 there)."""
    from otlp.multistep.bv import block_verification_law

    drafts = torch.tensor([[0]])
    p_path = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]], dtype=torch.float64)
    q_path = torch.tensor([[[0.0, 1.0]]], dtype=torch.float64)
    tau, corrections = block_verification_law(drafts, p_path, q_path)
    assert torch.isfinite(tau).all() and torch.isfinite(corrections).all()
    assert torch.allclose(tau.sum(-1), torch.ones(1, dtype=torch.float64))
