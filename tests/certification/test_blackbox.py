"""Black-box certify: deliberately biased rules are flagged with a TV interval that covers their exact TV (computed
here by enumerating each rule's pi(. | omega)), every registered rule wrapped as a plain function passes, the white
box is exact, the false-alarm rate is within its level, and the CLI imports a user function.

Each biased rule is written twice, as the verifier modules are: a torch sampler with the bug (what certify sees,
through a plain function) and the exact numpy law of the same buggy rule (what the test enumerates). The printed
SpecHub Algorithm 3 and the flipped K-SEQ bracket are the misprints of /work/shared/notes (spechub.md §3.3,
spectr.md §7.2); the corrected rules are the registered ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from unittest.mock import patch

import numpy as np
import pytest
import torch

import otlp
import otlp.verifiers.kseq as kseq_mod
import otlp.verifiers.spechub as spechub_mod
from otlp.certification.blackbox import cell_map, certify_callable
from otlp.core.errors import InputError
from otlp.verifiers import NAMES, get
from otlp.verifiers.base import (
    accept_probability,
    check_tensors,
    coins,
    finish,
    gather,
    normalize_or,
    sample_categorical,
    sequential_law,
)
from otlp.verifiers.exact import output_law
from otlp.verifiers.kseq import KSeq
from otlp.verifiers.rrs import RecursiveRejection, RecursiveRejectionWithoutReplacement
from otlp.verifiers.spechub import SpecHubVerifier
from otlp.verifiers.sps import SingleDraft

from .biased_laws import residual_after_removal_law

# ----------------------------------------------------------------------------------------------------------------------
# the biased rules
# ----------------------------------------------------------------------------------------------------------------------


class PrintedSpecHub(SpecHubVerifier):
    """SpecHub Algorithm 3 as printed: p'(a) = (p(a) - S2)^+ is computed only inside "if x1 = a", so a (x, a) pair
    tests the hub against p(a) instead of pa_rem (SpecHub note §3.3: over-generates a)."""

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN201
        B, n, V = check_tensors(p, q, drafts, fixed_n=2)
        a = torch.argmax(q, dim=1)
        others = torch.arange(V).unsqueeze(0) != a.unsqueeze(1)
        zero = torch.zeros_like(p)
        z = torch.where(others, q, zero).sum(dim=1, keepdim=True)
        row = torch.where(others, gather(q, a).unsqueeze(1) * q / z, zero)
        p1 = torch.where(others, torch.relu(p - q), p)
        s1 = torch.where(others, torch.relu(q - p), zero).sum(dim=1)
        p2 = torch.where(others, torch.relu(p1 - row), zero)
        s2 = torch.where(others, torch.relu(row - p1), zero).sum(dim=1)
        pa = gather(p, a)
        x1, x2 = drafts[:, 0], drafts[:, 1]
        column_pair = (x2 == a) & (x1 != a)
        row_pair = (x1 == a) & (x2 != a)
        u = coins(B, 2, p, generator)
        take_x1 = column_pair & (u[:, 0] * gather(q, x1) < gather(p, x1))
        take_x2 = row_pair & (u[:, 0] * gather(row, x2) < gather(p1, x2))
        hub_first = row_pair & ~take_x2 & (u[:, 1] * s2 < pa)
        hub_second = column_pair & ~take_x1 & (u[:, 1] * s1 < pa)  # the misprint: pa, not (pa - s2)^+
        first, second = take_x1 | hub_first, take_x2 | hub_second
        residual = sample_categorical(normalize_or(p2, p), generator)
        tokens = torch.where(first, x1, torch.where(second, x2, residual))
        return tokens, torch.where(first, 0, torch.where(second, 1, -1))

    def conditional(self, p, draft, omegas):  # noqa: ANN001, ANN201
        real = spechub_mod.hub_parts_numpy

        def printed(p_, q_):  # noqa: ANN001, ANN202
            return {**real(p_, q_), "pa_rem": float(p_[int(np.argmax(q_))])}

        with patch.object(spechub_mod, "hub_parts_numpy", printed):
            return super().conditional(p, draft, omegas)


def _flipped_rho(p, q, n: int, steps: int = 52):  # noqa: ANN001, ANN202 - numpy arrays or torch tensors
    """The bisection with the validity test flipped (SpecTr note §7.2): it keeps the f > 0 (invalid) end."""
    xp = torch if isinstance(p, torch.Tensor) else np
    lo = xp.ones_like(p[..., :1])
    hi = lo * float(n)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        beta = xp.minimum(q, p / mid).sum(-1)[..., None]
        invalid = 1.0 - (1.0 - beta) ** n - mid * beta > 0.0
        hi = xp.where(invalid, mid, hi)
        lo = xp.where(invalid, lo, mid)
    return lo[..., 0]


class FlippedKSeq(KSeq):
    """K-SEQ with the bracket of the rho* bisection flipped: rho < rho*, a clipped negative residual."""

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN201
        with patch.object(kseq_mod, "rho_star", _flipped_rho):
            return super().sample(p, q, drafts, generator)

    def conditional(self, p, draft, omegas):  # noqa: ANN001, ANN201
        with patch.object(kseq_mod, "rho_star", _flipped_rho):
            return super().conditional(p, draft, omegas)


class ResidualAfterRemoval(RecursiveRejectionWithoutReplacement):
    """RRS without replacement that removes the rejected draft from q before it forms the residual: the residual
    must be norm((p_cur - q_cur)^+) with the q_cur the draft was tested against (SpecHub note §3.1)."""

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN201
        B, n, V = check_tensors(p, q, drafts)
        u = coins(B, n, p, generator)
        accept = torch.empty((B, n), dtype=torch.bool)
        p_cur, q_cur = p, q
        for k in range(n):
            x = drafts[:, k]
            accept[:, k] = u[:, k] * gather(q_cur, x) < gather(p_cur, x)
            q_cur = normalize_or(q_cur.scatter(1, x.unsqueeze(1), 0.0), q_cur)  # the bug: removal first
            p_cur = normalize_or(torch.relu(p_cur - q_cur), p_cur)
        return finish(drafts, accept, sample_categorical(p_cur, generator))

    def conditional(self, p, draft, omegas):  # noqa: ANN001, ANN201
        return residual_after_removal_law(p, draft, omegas)


class WrongSupport(RecursiveRejection):
    """RRS whose residual renormalises p over the support {p_cur > q} instead of normalising (p_cur - q)^+."""

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN201
        B, n, V = check_tensors(p, q, drafts)
        u = coins(B, n, p, generator)
        accept = torch.empty((B, n), dtype=torch.bool)
        p_cur = p
        for k in range(n):
            x = drafts[:, k]
            accept[:, k] = u[:, k] * gather(q, x) < gather(p_cur, x)
            p_cur = normalize_or(torch.where(p_cur > q, p_cur, 0.0), p_cur)
        return finish(drafts, accept, sample_categorical(p_cur, generator))

    def residual_chain(self, p, q, n):  # noqa: ANN001, ANN201
        chain = [p]
        for _ in range(n):
            chain.append(normalize_or(np.where(chain[-1] > q, chain[-1], 0.0), chain[-1]))
        return np.stack(chain)


class SwappedRatio(SingleDraft):
    """Single-draft rejection with SpecTr's letters read as Leviathan's: accept with min(1, q(x) / p(x))."""

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN201
        B, n, V = check_tensors(p, q, drafts)
        x = drafts[:, 0]
        u = coins(B, 1, p, generator)
        accept = u * gather(p, x).unsqueeze(1) < gather(q, x).unsqueeze(1)
        return finish(drafts[:, :1], accept, sample_categorical(normalize_or(torch.relu(p - q), p), generator))

    def conditional(self, p, draft, omegas):  # noqa: ANN001, ANN201
        x = omegas[:, :1]
        accept = accept_probability(draft.q[x], p[x])
        return sequential_law(x, accept, normalize_or(np.maximum(p - draft.q, 0.0), p), p.size)


class SortedDrafts(RecursiveRejection):
    """RRS that tests the drafts in order of decreasing p/q instead of the order drawn (SpecTr note §7.5: a
    value-dependent order breaks the proof). (One coin reused for every draft, tried first, stays exact here.)"""

    @staticmethod
    def _order(ratio):  # noqa: ANN001, ANN205
        return torch.argsort(-ratio, dim=1, stable=True) if isinstance(ratio, torch.Tensor) else np.argsort(
            -ratio, axis=1, kind="stable")

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN201
        ratio = p.gather(1, drafts) / q.gather(1, drafts)
        return super().sample(p, q, drafts.gather(1, self._order(ratio)), generator)

    def conditional(self, p, draft, omegas):  # noqa: ANN001, ANN201
        ratio = p[omegas] / draft.q[omegas]
        return super().conditional(p, draft, np.take_along_axis(omegas, self._order(ratio), axis=1))


@pytest.fixture(autouse=True)
def _one_torch_thread():  # noqa: ANN202 - small tensors: thread hand-offs cost more than they save on a busy CPU
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


P2 = np.array([[0.1, 0.6, 0.3, 0.0], [0.35, 0.05, 0.2, 0.4]])
Q2 = np.array([[0.5, 0.3, 0.1, 0.1], [0.1, 0.45, 0.25, 0.2]])
BIASED = {
    "printed_spechub": (PrintedSpecHub(), 2),
    "kseq_flipped_bracket": (FlippedKSeq(), 2),
    "rrs_wor_residual_after_removal": (ResidualAfterRemoval(), 2),
    "rrs_residual_wrong_support": (WrongSupport(), 2),
    "sps_swapped_ratio": (SwappedRatio(), 1),
    "rrs_sorted_drafts": (SortedDrafts(), 3),
}


def _exact_tv(rule, drafts) -> float:  # noqa: ANN001
    """Mean over instances of TV(output law, p), by enumerating the rule's exact pi(. | omega)."""
    return float(np.mean([0.5 * np.abs(output_law(rule, p, d) - p).sum() for p, d in zip(P2, drafts, strict=True)]))


@pytest.mark.parametrize("name", list(BIASED))
def test_biased_rule_is_flagged_and_the_tv_interval_covers_the_exact_tv(name: str) -> None:
    rule, n = BIASED[name]
    drafts = [rule.make_draft(q, n) for q in Q2]
    exact = _exact_tv(rule, drafts)
    assert exact > 5e-3, f"{name}: the instance shows no bias (exact TV {exact})"

    def fn(p, q, omegas, generator):  # noqa: ANN001, ANN202 - a plain function: certify sees no conditional
        return rule.sample(p, q, omegas, generator)

    r = certify_callable(fn, P2, drafts, samples=2_000_000, seed=1)
    assert r.mode == "black box" and r.preserves_target is False and r.stopped == "bias detected", str(r)
    assert r.tv_lower <= exact <= r.tv_upper, (name, r.tv_lower, exact, r.tv_upper)
    assert 0 < r.tv_lower and r.p_value <= r.alpha
    assert r.samples < 2_000_000 and r.instances == 2
    white = certify_callable(rule, P2, drafts)  # the same rule as an object: white box, exact
    assert white.mode.startswith("white") and white.preserves_target is False
    assert white.tv == pytest.approx(exact, abs=1e-12)


def test_small_bias_needs_more_samples_and_is_still_covered() -> None:
    """A rule that emits the argmax of p instead of the verified token 1% of the time: TV = 0.01 (1 - max p)."""
    rule = get("rrs")
    p, q = np.array([0.1, 0.6, 0.3]), np.array([0.5, 0.3, 0.2])
    draft = rule.make_draft(q, 2)

    def leaky(p_, q_, omegas, generator):  # noqa: ANN001, ANN202
        tokens, index = rule.sample(p_, q_, omegas, generator)
        leak = torch.rand(tokens.shape, generator=generator, dtype=p_.dtype) < 0.01
        return torch.where(leak, torch.argmax(p_, dim=1), tokens), index

    r = certify_callable(leaky, p, draft, seed=3)
    exact = 0.01 * (1 - p.max())
    assert r.preserves_target is False and r.tv_lower <= exact <= r.tv_upper


@pytest.mark.parametrize("name", [k for k in NAMES if getattr(get(k), "kind", "token") != "multistep"])
def test_every_registered_rule_as_a_plain_callable_passes(name: str) -> None:
    v = get(name)
    drafts = [v.make_draft(q, 2) for q in Q2]

    def fn(p, q, omegas, generator):  # noqa: ANN001, ANN202
        return v.sample(p, q, omegas, generator)

    r = certify_callable(fn, P2, drafts, tolerance=2e-2, per_draft_q=v.per_draft_q, seed=2)
    assert r.preserves_target is True and r.stopped == "tolerance reached" and r.tv_upper <= 2e-2, str(r)
    assert r.tv_lower == 0 and r.p_value > r.alpha
    exact = float(np.mean([v.acceptance(p, d) for p, d in zip(P2, drafts, strict=True)]))
    lo, hi = r.acceptance_interval
    assert lo <= exact <= hi
    alpha_star = float(np.mean([otlp.optimal_acceptance(p, d) for p, d in zip(P2, drafts, strict=True)]))
    assert r.optimum == pytest.approx(alpha_star) and r.gap_interval[0] <= alpha_star - exact <= r.gap_interval[1]


def test_white_box_matches_the_name_path_and_refuses_nothing_it_can_enumerate() -> None:
    p, q = [0.1, 0.6, 0.3], [0.5, 0.3, 0.2]
    for name in ("rrs", "kseq", "spechub", "optimal"):
        v = get(name)
        draft = v.make_draft(q, 2)
        r = otlp.certify(v, p, draft)
        ref = otlp.certify(name, p, draft)
        assert r.mode.startswith("white") and r.preserves_target is True
        assert r.acceptance == pytest.approx(ref.acceptance, abs=1e-12)
        assert r.optimum == pytest.approx(ref.optimum, abs=1e-12) and r.tv <= 1e-12
        assert otlp.certify(v.sample, p, draft).mode.startswith("white")  # a bound method: its owner's law
    black = otlp.certify(get("rrs"), p, get("rrs").make_draft(q, 2), mode="black", tolerance=0.05)
    assert black.mode == "black box" and black.preserves_target is True


def test_false_alarm_rate_on_a_correct_rule_is_within_its_level() -> None:
    """150 seeds of a lossless rule run to the sample limit (tolerance 0: no early pass, every look is a chance to
    false-alarm) at alpha = 0.1. Within its level means: a Binomial(150, 0.1) exceeds 35 with probability 5.5e-7.
    (The union over events and looks makes the test conservative: 0 alarms are expected.)"""
    v = get("rrs")
    p, q = np.array([0.1, 0.6, 0.3]), np.array([0.5, 0.3, 0.2])
    draft = v.make_draft(q, 2)
    alarms = 0
    for seed in range(150):
        r = certify_callable(lambda a, b, c, g: v.sample(a, b, c, g), p, draft, samples=10_000, tolerance=0.0,
                             alpha=0.1, seed=seed)
        alarms += r.preserves_target is False
        assert r.preserves_target is False or (r.preserves_target is None and r.looks == 7)
    assert alarms <= 35


def test_inconclusive_run_says_what_it_ruled_out() -> None:
    v = get("rrs")
    r = certify_callable(lambda a, b, c, g: v.sample(a, b, c, g), [0.1, 0.6, 0.3], v.make_draft([0.5, 0.3, 0.2], 2),
                         samples=5000)
    assert r.preserves_target is None and r.stopped == "sample limit" and r.samples == 5000
    assert r.detectable_tv == r.tv_upper > 1e-3 and any("inconclusive" in x for x in r.notes)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["preserves_target"] is None and d["detectable_tv"] == r.tv_upper


def test_large_vocabulary_bins_and_a_biased_hub_is_caught() -> None:
    """V = 120 > 64: tokens are binned (p = 0 tokens in a cell of their own); the printed SpecHub rule on a
    strong hub is still flagged, with a TV lower bound below the exact token-level TV (the binned TV is smaller)."""
    rng = np.random.default_rng(0)
    V = 120
    p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
    q[0] += 1.0
    q /= q.sum()
    p[7] = 0.0
    p /= p.sum()
    cmap, k, desc = cell_map(p, q)
    assert k <= 64 and cmap[7] == k - 1 and np.bincount(cmap, minlength=k).min() >= 1 and "cells" in desc
    white = certify_callable(PrintedSpecHub(), p, otlp.SpecHub(q))
    r = certify_callable(PrintedSpecHub(), p, otlp.SpecHub(q), mode="black", samples=200_000)
    assert white.tv > 5e-3 and r.preserves_target is False and r.tv_lower <= white.tv
    assert any("binned" in x for x in r.notes)


def test_progress_goes_to_stderr_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    import time

    v = get("rrs")
    draft = v.make_draft([0.5, 0.3, 0.2], 2)

    def slow(p, q, omegas, generator):  # noqa: ANN001, ANN202
        time.sleep(0.2)
        return v.sample(p, q, omegas, generator)

    certify_callable(slow, [0.1, 0.6, 0.3], draft, samples=3000, batch=1000, tolerance=0.0, progress=True)
    captured = capsys.readouterr()
    assert "samples" in captured.err and "/3000" in captured.err and captured.out == ""
    certify_callable(slow, [0.1, 0.6, 0.3], draft, samples=3000, batch=1000, tolerance=0.0)  # not a terminal
    assert capsys.readouterr().err == ""


def test_bad_input() -> None:
    v = get("rrs")
    draft = v.make_draft([0.5, 0.5], 2)
    with pytest.raises(InputError, match="raised ValueError: boom"):
        certify_callable(lambda *a: (_ for _ in ()).throw(ValueError("boom")), [0.5, 0.5], draft)
    with pytest.raises(InputError, match="integer tokens of shape"):
        certify_callable(lambda p, q, d, g: torch.zeros(3), [0.5, 0.5], draft)
    with pytest.raises(InputError, match="outside"):
        certify_callable(lambda p, q, d, g: torch.full((p.shape[0],), 7), [0.5, 0.5], draft)
    with pytest.raises(InputError, match="needs a draft scheme"):
        certify_callable(v.sample, [0.5, 0.5])
    with pytest.raises(InputError, match="target rows"):
        certify_callable(v.sample, P2, [v.make_draft(q, 2) for q in [*Q2, Q2[0]]])
    with pytest.raises(InputError, match="alpha"):
        certify_callable(v.sample, [0.5, 0.5], draft, alpha=0)
    with pytest.raises(InputError, match="cannot import module"):
        otlp.certify("no_such_module_xyz:f", [0.5, 0.5], draft)
    with pytest.raises(InputError, match="mode='white'"):
        certify_callable(lambda p, q, d, g: d[:, 0], [0.5, 0.5], draft, mode="white")


def test_q_and_n_with_a_scheme_name() -> None:
    v = get("rrs_wor")
    r = otlp.certify(lambda a, b, c, g: v.sample(a, b, c, g), [0.1, 0.6, 0.3], q=[0.5, 0.3, 0.2], n=2,
                     scheme="without_replacement", tolerance=0.03)
    assert r.preserves_target is True and r.schemes == ["without_replacement"]


def test_cli_imports_a_user_function(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "my_rules.py").write_text(
        "from otlp.verifiers import get\n_v = get('rrs')\n"
        "def verify(p, q, drafts, generator=None):\n    return _v.sample(p, q, drafts, generator)\n")
    base = [sys.executable, "-m", "otlp.cli", "certify", "--p", "0.1,0.6,0.3", "--q", "0.5,0.3,0.2", "--n", "2"]
    ok = subprocess.run([*base, "--verifier", "my_rules:verify", "--tolerance", "0.03", "--json"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["preserves_target"] is True and out["mode"] == "black box" and out["optimum"] == pytest.approx(0.85)
    bad = subprocess.run([*base, "--verifier", "my_rules_missing:verify"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("otlp: error: cannot import module")
    assert bad.stderr.count("\n") == 1
