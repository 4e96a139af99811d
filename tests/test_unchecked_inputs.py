"""What the optimal rule's sampler does with caller uniforms and draft ids that validation would refuse: refused
with the argument's name when validation is on; with it off, uniforms clamped to [0, 1 - 2^-53] (NaN read as 0) and
draft ids clamped to [0, V - 1], the same on every route (C kernels, numpy, torch ops), never a crash or a token of
probability zero (issue 44; :func:`otlp.optimal.sampler.guard`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from otlp.core.errors import InputError  # noqa: E402
from otlp.optimal.sampler import U_MAX  # noqa: E402
from otlp.verifiers import get  # noqa: E402

ROUTES = [("native", {"OTLP_NATIVE": "1"}, "auto"), ("numpy", {"OTLP_NATIVE": "0"}, "auto"),
          ("torch", {"OTLP_NATIVE": "0"}, "torch")]
RULES = ["optimal", "optimal_paths"]


def _sample(rule: str, backend: str, p, q, drafts, u, **kw):  # noqa: ANN001, ANN202
    if backend == "torch":
        from otlp.optimal.sampler import verify

        return verify(p, q, drafts.long(), u, backend="torch")
    return get(rule).sample(p, q, drafts, uniforms=u, **kw)


def _lm_rows(B: int, V: int, zeros: int, seed: int):  # noqa: ANN202 - rows with exact zeros: p [B, V], q [B, V]
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(3 * torch.randn(B, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(3 * torch.randn(B, V, generator=g, dtype=torch.float64), -1)
    p[:, torch.randperm(V, generator=g)[:zeros]] = 0.0  # tokens the target never emits
    return p / p.sum(-1, keepdim=True), q


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("bad", [1.0, -1e-300, float("nan"), float("inf")])
def test_uniforms_outside_zero_one_are_refused_by_name_when_validating(rule, bad):  # noqa: ANN001
    p = torch.zeros(2, 1000, dtype=torch.float64)
    p[:, 0] = 1
    u = torch.full((2, 2), 0.5, dtype=torch.float64)
    u[1, 1] = bad
    with pytest.raises(InputError, match=r"^uniforms must be in \[0, 1\)"):
        get(rule).sample(p, p.clone(), torch.zeros(2, 2, dtype=torch.long), uniforms=u)


@pytest.mark.parametrize("name, env, backend", ROUTES)
@pytest.mark.parametrize("value", [1.0, float("nan"), -1.0, 2.0, float("-inf")])
def test_the_issue_reproducer_never_emits_a_zero_probability_token_unvalidated(name, env, backend, value,
                                                                               monkeypatch):  # noqa: ANN001
    """Issue 44: p = q = the point mass on token 0, uniforms 1.0: token 999 (p = 0) came out on every row."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for n in (1, 2, 3):
        p = torch.zeros(2, 1000, dtype=torch.float64)
        p[:, 0] = 1
        u = torch.full((2, 2), value, dtype=torch.float64)
        u_before = u.clone()
        tokens, index = _sample("optimal", backend, p, p.clone(), torch.zeros(2, n, dtype=torch.long), u,
                                validate=False)
        assert tokens.tolist() == [0, 0] and index.tolist() == [0, 0], (name, n, value)
        assert torch.equal(u.nan_to_num(7.0), u_before.nan_to_num(7.0))  # the caller's uniforms are not written


@pytest.mark.parametrize("name, env, backend, rule", [r + (rule,) for r in ROUTES[:2] for rule in RULES]
                         + [ROUTES[2] + ("optimal",)])  # verify's torch ops: the default rule
@pytest.mark.parametrize("n", [1, 2, 3])
def test_extreme_uniforms_draw_only_tokens_of_positive_probability(name, env, backend, rule, n, monkeypatch):  # noqa: ANN001
    """Rows with zero-probability tokens (also among the drafts), uniforms at and beyond the top of [0, 1]: every
    token drawn has p > 0, and u = 1.0 (or more) draws as U_MAX does; NaN and negative values draw as 0 does.

    (u_0 at 0 itself is left out of the p > 0 check: where every draft has p = 0, the rule's accept of slot 0 can
    be a rounding residue, 1.4e-15 in this set, which u_0 below it selects: a pre-existing event of probability
    about 1e-15 a row, reported on issue 44.)"""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    B, V = (64, 40) if rule == "optimal" or n < 3 else (2, 12)  # optimal_paths at n >= 3: an LP a row, on the host
    p, q = _lm_rows(B, V, zeros=V * 3 // 8, seed=3)
    drafts = torch.multinomial(q, n, replacement=True, generator=torch.Generator().manual_seed(4))

    def run(a: float, b: float):  # noqa: ANN202
        u = torch.tensor([[a, b]], dtype=torch.float64).expand(B, 2).contiguous()
        return _sample(rule, backend, p, q, drafts, u, validate=False)[0]

    for a in (0.5, U_MAX, 1.0, 5.0, float("inf")):
        for b in (0.0, 0.5, U_MAX, 1.0, -3.0, float("nan")):
            tokens = run(a, b)
            assert bool((p.gather(1, tokens[:, None]) > 0).all()), (a, b)
            assert torch.equal(tokens, run(min(a, U_MAX), min(max(b, 0.0), U_MAX) if b == b else 0.0)), (a, b)
    for a in (-1.0, float("nan"), float("-inf")):
        assert torch.equal(run(a, 0.5), run(0.0, 0.5))


_OUT_OF_RANGE = textwrap.dedent("""
    import sys, torch
    from otlp.optimal import sampler
    from otlp.verifiers import get
    if sys.argv[2] == "kernels":  # the C kernels' own clamp: sampler.guard's on the uniforms only
        guard = sampler.guard
        sampler.guard = lambda u, w, V: (guard(u, w, V)[0], w.long())
    V, n = 100_000, int(sys.argv[1])
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(4, V, generator=g, dtype=torch.float64), -1)
    u = torch.rand(4, 2, generator=g, dtype=torch.float64)
    w = torch.randint(0, V, (4, n), generator=g)
    w[0, 0], w[1, -1], w[2, 0] = 10**9, -5, 10**18
    t, i = get("optimal").sample(p, q, w, uniforms=u, validate=False)
    t2, i2 = get("optimal").sample(p, q, w.clamp(0, V - 1), uniforms=u, validate=False)
    assert torch.equal(t, t2) and torch.equal(i, i2), (t, t2, i, i2)
    print(t.tolist(), i.tolist())
""")


@pytest.mark.parametrize("native, clamp", [("1", "guard"), ("0", "guard"), ("1", "kernels")])
@pytest.mark.parametrize("n", [1, 3])
def test_an_out_of_range_draft_id_unvalidated_is_clamped_not_a_crash(native, clamp, n):  # noqa: ANN001
    """validate=False with a draft id of 10^9 at V = 100k killed the process (SIGSEGV in the C kernels; IndexError on
    numpy's route). Now the id reads as the nearest token id on both routes: the same tokens as clamped ids. A child
    process, so that a crash fails the test instead of the run. ``clamp="kernels"``: the ids reach the C loops
    unclamped (their own compare per draft)."""
    env = dict(os.environ, OTLP_NATIVE=native)
    got = subprocess.run([sys.executable, "-c", _OUT_OF_RANGE, str(n), clamp], env=env, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, (got.returncode, got.stderr[-2000:])


@pytest.mark.parametrize("n", [1, 3])
def test_out_of_range_ids_give_the_same_tokens_on_both_cpu_routes(n, monkeypatch):  # noqa: ANN001
    g = torch.Generator().manual_seed(1)
    V = 3000
    p, q = _lm_rows(32, V, zeros=100, seed=5)
    u = torch.rand(32, 2, generator=g, dtype=torch.float64)
    w = torch.randint(-2 * V, 2 * V, (32, n), generator=g)
    out = []
    for native in ("1", "0"):
        monkeypatch.setenv("OTLP_NATIVE", native)
        out.append(get("optimal").sample(p, q, w, uniforms=u, validate=False))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    with pytest.raises(InputError, match=r"^drafts must be token ids in \[0, 3000\)"):
        get("optimal").sample(p, q, w, uniforms=u)


SINGLE_TOKEN = ["sps", "rrs", "rrs_wor", "kseq", "spechub", "is", "weighted_is", "greedy"]


@pytest.mark.parametrize("rule", SINGLE_TOKEN)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_rules_uniforms_are_checked_and_clamped_as_the_optimal_rules(rule, dtype):  # noqa: ANN001
    """Every registered one-token rule takes caller uniforms (issue 43) under the same contract: refused outside
    [0, 1) by name when validating; with validation off, u = 1.0 (or NaN, or -1) never gives a token of p = 0."""
    from otlp.verifiers.base import validation

    V = 1000
    p = torch.zeros(2, V, dtype=dtype)
    p[:, 0] = 1
    drafts = torch.zeros(2, 2, dtype=torch.long)
    if rule in ("sps",):
        drafts = drafts[:, :1]
    for value in (1.0, float("nan"), -1.0):
        u = torch.full((2, 2), value, dtype=dtype)
        with pytest.raises(InputError, match=r"^uniforms must be in \[0, 1\)"):
            get(rule).sample(p, p.clone(), drafts, uniforms=u)
        with validation(False):
            tokens, _ = get(rule).sample(p, p.clone(), drafts, uniforms=u)
        assert tokens.tolist() == [0, 0]
        assert u.isnan().all() or bool((u == value).all())  # the caller's tensor is not written
