"""certify: report fields, the exact rational certificate (checked against brute force in Fractions), the statistical
path for large V, the table and the CLI, and bad input."""

from __future__ import annotations

import argparse
import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
import torch

import otlp
from otlp.certification.rule import (
    add_certify_arguments,
    certify,
    certify_table,
    format_table,
    rational_certificate,
    rational_tuple_probabilities,
    rationalise,
    run_certify_cli,
)
from otlp.core.errors import InputError
from otlp.verifiers import get
from tests.verifiers.instances import make_pair


def test_report_on_worked_example() -> None:
    r = certify("rrs_wor", [0.1, 0.6, 0.3], q=[0.5, 0.3, 0.2], n=2)
    assert r.acceptance == pytest.approx(0.94, abs=1e-15) and r.optimum == pytest.approx(1.0)
    assert r.gap == pytest.approx(0.06, abs=1e-12) and r.preserves_target
    assert r.verifier_acceptance <= r.acceptance + 1e-15
    assert r.certificate.optimal and r.certificate.dual_value == 1
    d = r.to_dict()
    assert json.loads(json.dumps(d))["certificate"]["optimal"] is True
    assert "certified optimal" in str(r)


def test_rational_certificate_equals_brute_force_in_fractions() -> None:
    """alpha* = 1 + min_H (p(H) - P(omega in H^n)) evaluated over all 2^V subsets in exact arithmetic, an
    independent route from the certificate's max flow."""
    rng = np.random.default_rng(0)
    schemes = [lambda q: otlp.IID(q, 2), lambda q: otlp.IID(q, 3), lambda q: otlp.WithoutReplacement(q, 2),
               lambda q: otlp.SpecHub(q), lambda q: otlp.Greedy(q, 2)]
    for trial in range(25):
        V = int(rng.integers(2, 5))
        p, q = make_pair(rng, V, ("dirichlet", "sparse", "ties")[trial % 3])
        p = np.round(p, 3)
        p[-1] = 1 - p[:-1].sum()
        if p.min() < 0:
            continue
        try:
            draft = schemes[trial % len(schemes)](q)
        except InputError:
            continue
        cert = rational_certificate(p, draft)
        assert cert.optimal and cert.dual_feasible and cert.primal_feasible
        omegas = np.array(list(itertools.product(range(V), repeat=draft.n)))
        probs, _ = rational_tuple_probabilities(draft, omegas)
        p_fr = [Fraction(x).limit_denominator(10**9) for x in p]
        p_fr = [x / sum(p_fr) for x in p_fr]
        best = Fraction(0)
        for mask in itertools.product((0, 1), repeat=V):
            inside = sum((pr for w, pr in zip(omegas, probs, strict=True) if all(mask[t] for t in w)), Fraction(0))
            best = min(best, sum((p_fr[i] for i in range(V) if mask[i]), Fraction(0)) - inside)
        assert cert.dual_value == 1 + best
        assert abs(float(cert.dual_value) - otlp.optimal_acceptance(p, draft)) <= 1e-9


def test_every_rule_in_the_table_is_exact_and_below_the_optimum() -> None:
    rows = certify_table([0.1, 0.6, 0.3], [0.5, 0.3, 0.2], 2, certificate=True)
    assert {r.verifier for r in rows if not isinstance(r, dict)} >= {"sps", "rrs", "kseq", "spechub", "optimal"}
    for r in rows:
        assert not isinstance(r, dict), r
        assert r.preserves_target and r.acceptance <= r.optimum + 1e-12 and r.certificate.optimal
    assert "spechub" in format_table(rows)
    three = certify_table([0.1, 0.6, 0.3], [0.5, 0.3, 0.2], 3)
    assert any(isinstance(r, dict) and r["verifier"] == "spechub" for r in three)  # n = 3: not applicable


def test_large_vocabulary_uses_the_seeded_statistical_test() -> None:
    rng = np.random.default_rng(1)
    p, q = make_pair(rng, 3000, "dirichlet")
    r = certify("kseq", p, q=q, n=2, samples=4000)
    assert r.preserves_target and "chi-square" in r.target_check and r.certificate is None
    assert r.method["acceptance"] == "closed form"
    assert r.acceptance <= r.optimum + 1e-12
    r2 = certify("rrs_wor", p, q=q, n=2, samples=4000)  # exact over rejected histories (rrs_wor_acceptance)
    assert r2.method["acceptance"].startswith("exact (histories)") and r2.preserves_target
    # alpha* without enumeration (otlp.core.psi_wor), and the exact gap to it, an interval of the acceptance's width
    from otlp.core.psi_wor import wor_optimal_acceptance

    iv = get("rrs_wor").acceptance_interval(p, get("rrs_wor").make_draft(q, 2))
    assert r2.optimum == wor_optimal_acceptance(p, q, 2) and r2.gap == r2.optimum - r2.acceptance
    assert r2.acceptance == r2.verifier_acceptance == iv.value and iv.width <= 1e-12
    assert r2.gap >= -1e-12 and f"[{r2.optimum - iv.hi!r}, {r2.optimum - iv.lo!r}]" in r2.method["gap"]
    assert "exact: alpha* minus" in str(r2)


def test_a_top_k_draft_without_replacement_is_certified_by_enumeration_at_large_v() -> None:
    """V = 2000 with the draft filtered to its top 12 tokens: V^n x V is far over EXACT_CELLS, but its support
    (12 x 11 x 10 tuples) is not, so certify enumerates the law exactly for rrs_wor and optimal_wor; the optimal
    rule's gap is 0 to rounding and rrs_wor's positive."""
    from otlp.certification.rule import EXACT_CELLS

    rng = np.random.default_rng(3)
    V, n = 2000, 3
    z = rng.standard_normal(V) * 3
    p = np.exp(z) / np.exp(z).sum()
    q = np.exp(z + rng.standard_normal(V))
    q[np.argsort(-q)[12:]] = 0.0
    q /= q.sum()
    draft = otlp.WithoutReplacement(q, n)
    assert draft.num_tuples() * V > EXACT_CELLS >= draft.support_size() * V
    rules = {name: certify(name, p, draft, certificate=False) for name in ("rrs_wor", "optimal_wor")}
    for r in rules.values():
        assert r.preserves_target and r.method["target_law"] == "exact enumeration"
        assert "exact enumeration of 1320 tuples" in r.target_check
    assert abs(rules["optimal_wor"].gap) < 1e-12 < rules["rrs_wor"].gap


def test_rrs_wor_certify_at_n_3_reports_the_exact_acceptance_and_gap(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path) -> None:  # noqa: ANN001
    """V = 2048, n = 3: the acceptance over rejected histories (width <= 1e-9) replaces the Monte Carlo one, and
    the CLI prints it with the gap's interval (exit 0)."""
    rng = np.random.default_rng(4)
    z = rng.standard_normal(2048)
    p = np.exp(2.5 * z - 2.5 * z.max())
    p /= p.sum()
    q = np.exp(np.log(p) + rng.standard_normal(2048))
    q /= q.sum()
    r = certify("rrs_wor", p, q=q, n=3, samples=2000, certificate=False)
    iv = get("rrs_wor").acceptance_interval(p, get("rrs_wor").make_draft(q, 3))
    assert r.method["acceptance"].startswith("exact (histories), width") and iv.width <= 1e-9
    assert abs(r.acceptance - iv.value) <= 1e-9 and r.gap == r.optimum - r.acceptance and r.gap > 0
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "q.npy", q)
    args = _cli("--verifier", "rrs_wor", "--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.npy"), "--n", "3",
                "--samples", "2000", "--no-certificate", "--json")
    assert run_certify_cli(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"]["acceptance"].startswith("exact (histories)") and out["method"]["gap"].startswith("exact")


def test_rrs_wor_interval_wider_than_the_monte_carlo_error_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """With almost no time for the walk (n = 6), the interval stays wider than the sample's standard error: the
    acceptance is the Monte Carlo one and a note gives the exact interval, which holds it up to 5 s.e."""
    import otlp.certification.rule as rule

    monkeypatch.setattr(rule, "EXACT_ACCEPTANCE_SECONDS", 1e-3)
    rng = np.random.default_rng(5)
    z, y = 2.5 * rng.standard_normal(2048), 2.5 * rng.standard_normal(2048)  # loose drafts: q unrelated to p
    p, q = np.exp(z - z.max()), np.exp(y - y.max())
    r = certify("rrs_wor", p / p.sum(), q=q / q.sum(), n=6, samples=2000, certificate=False)
    assert r.method["acceptance"].startswith("Monte Carlo") and "gap" not in r.method
    note = next(x for x in r.notes if x.startswith("the exact acceptance lies in ["))
    lo, hi = (float(v) for v in note.split("[", 1)[1].split("]", 1)[0].split(","))
    se = float(r.method["acceptance"].split("s.e.")[1])
    assert lo - 5 * se <= r.acceptance <= hi + 5 * se and hi - lo > se


def test_long_certify_reports_each_stage_to_its_progress_line() -> None:
    """At a large V the chi-square test runs in row chunks; the progress line names the rows done and each later
    stage (alpha*, certificate), and is cleared at the end."""
    import io

    from otlp.cli.util import Progress

    rng = np.random.default_rng(3)
    p, q = make_pair(rng, 3000, "dirichlet")
    stream = io.StringIO()
    with Progress("otlp certify", stream=stream, force=True) as bar:
        r = certify("rrs", p, q=q, n=2, samples=8000, progress=bar)
    text = stream.getvalue()
    assert r.preserves_target
    assert "rrs: chi-square test, 8,000 / 8,000 rows" in text and "rrs: alpha*" in text
    assert "rrs: exact rational certificate" in text and text.endswith("\r")
    quiet = io.StringIO()
    with Progress("otlp certify", stream=quiet, enabled=False) as bar:  # --json: nothing drawn
        certify("rrs", p, q=q, n=2, samples=100, progress=bar)
    assert quiet.getvalue() == ""


def test_statistical_test_catches_a_biased_sampler() -> None:
    """Negative control for the large-V path: a rule that skips the residual correction (emits the first draft
    always) must fail the chi-square test."""
    from otlp.certification.rule import sampler_test
    from otlp.verifiers.sps import SingleDraft

    class AlwaysAccept(SingleDraft):
        def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN202
            return drafts[:, 0].clone(), torch.zeros_like(drafts[:, 0])

    rng = np.random.default_rng(2)
    p, q = make_pair(rng, 500, "dirichlet")
    assert not sampler_test(AlwaysAccept(), p, otlp.IID(q, 2), 4000).passed
    assert sampler_test(SingleDraft(), p, otlp.IID(q, 2), 4000).passed


def _cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_certify_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_certify_cli(_cli("--verifier", "spechub", "--p", "0.1,0.6,0.3", "--q", "0.5,0.3,0.2", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["acceptance"] == pytest.approx(1.0) and out["certificate"]["optimal"]
    assert run_certify_cli(_cli("--verifier", "all", "--p", "0.1,0.6,0.3", "--q", "0.5,0.3,0.2", "--n", "2")) == 0
    assert "rrs_wor" in capsys.readouterr().out
    assert run_certify_cli(_cli("--verifier", "nope", "--p", "0.1,0.6,0.3", "--q", "0.5,0.3,0.2")) == 2
    assert "unknown verifier" in capsys.readouterr().err
    assert run_certify_cli(_cli("--verifier", "rrs", "--p", "0.1,0.6,0.3", "--q", "0.5,0.5")) == 2
    assert run_certify_cli(_cli("--verifier", "rrs", "--p", "0.1,0.6,0.2", "--q", "0.5,0.3,0.2")) == 2


def test_bad_input() -> None:
    with pytest.raises(InputError, match="expects a 'spechub' draft scheme"):
        certify("spechub", [0.5, 0.5], otlp.IID([0.5, 0.5], 2))
    with pytest.raises(InputError, match="n = 2"):
        get("spechub").make_draft([0.5, 0.3, 0.2], 3)
    with pytest.raises(InputError, match="needs a draft scheme"):
        certify("rrs", [0.5, 0.5])
    v = get("rrs")
    p = torch.full((2, 3), 1 / 3)
    with pytest.raises(InputError, match="drafts must have shape"):
        v.sample(p, p, torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(InputError, match="q must have shape"):
        v.sample(p, torch.full((2, 4), 0.25), torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(InputError, match="integer"):
        v.sample(p, p, torch.zeros(2, 2))
    with pytest.raises(InputError, match="n = 2 drafts"):
        get("spechub").sample(p, p, torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(InputError, match="s"):
        get("is", s=-1)


@pytest.mark.parametrize(("name", "n"), [("greedy", 2), ("rrs_wor", 2), ("rrs_wor", 3), ("spechub", 2)])
def test_certificate_with_entries_below_the_rationalisation_grid(name: str, n: int) -> None:
    """q entries of 1e-12 are below the 1e-9 grid of limit_denominator; rationalised to 0 they made the greedy rest
    mass, the without-replacement 1 - used and the SpecHub Z vanish (ZeroDivisionError). Positive entries keep their
    exact binary value, so the certificate stays exact and agrees with the float alpha*."""
    p, q = [0.1, 0.6, 0.3], [1 - 2e-12, 1e-12, 1e-12]
    r = certify(name, p, get(name).make_draft(q, n))
    assert r.certificate.optimal and r.preserves_target
    assert abs(float(r.certificate.dual_value) - r.optimum) <= 1e-9
    assert r.certificate.rationalisation_error <= 1e-15
    fr, err = rationalise(np.array(q))
    assert all(x > 0 for x in fr) and sum(fr) == 1 and err <= 1e-15


def test_cli_tiny_q_entries_give_a_certificate(capsys: pytest.CaptureFixture[str]) -> None:
    args = _cli("--verifier", "greedy", "--p", "0.1,0.6,0.3", "--q", "0.999999999998,0.000000000001,0.000000000001",
                "--n", "2", "--json")
    assert run_certify_cli(args) == 0
    assert json.loads(capsys.readouterr().out)["certificate"]["optimal"] is True


@pytest.mark.parametrize(("flag", "value", "message"), [("--samples", "0", "samples must be an integer >= 1"),
                                                        ("--samples", "-1", "samples must be an integer >= 1"),
                                                        ("--seed", "-1", "--seed must be an integer >= 0"),
                                                        ("--n", "0", "--n must be an integer >= 1")])
@pytest.mark.parametrize("verifier", ["rrs", "all"])
def test_cli_bad_numbers_exit_2(capsys: pytest.CaptureFixture[str], tmp_path, flag: str, value: str,  # noqa: ANN001
                                message: str, verifier: str) -> None:
    """Large V (the statistical path, where --samples and --seed are used) and the table: one line, exit 2."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "p.npy", rng.dirichlet(np.ones(300)))
    np.save(tmp_path / "q.npy", rng.dirichlet(np.ones(300)))
    args = _cli("--verifier", verifier, "--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.npy"), "--n", "3",
                flag, value)
    assert run_certify_cli(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_samples_and_seed_checked_in_the_library() -> None:
    with pytest.raises(InputError, match="samples must be an integer >= 1"):
        certify("rrs", [0.1, 0.6, 0.3], q=[0.5, 0.3, 0.2], n=2, samples=0)
    with pytest.raises(InputError, match="n must be an integer >= 1"):
        certify_table([0.1, 0.6, 0.3], [0.5, 0.3, 0.2], 0)
    with pytest.raises(InputError, match="seed must be an integer >= 0"):
        certify("rrs", [0.1, 0.6, 0.3], q=[0.5, 0.3, 0.2], n=2, seed=-1)
    with pytest.raises(InputError, match="samples must be an integer >= 1"):
        certify_table([0.1, 0.6, 0.3], [0.5, 0.3, 0.2], 2, samples=0)


@pytest.mark.parametrize("name", ["bv", "gbv"])
def test_multistep_rule_refused_with_a_pointer(name: str) -> None:
    with pytest.raises(InputError, match="certify-block"):
        certify(name, [0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    with pytest.raises(InputError, match="certify_multistep"):
        certify(name, [0.1, 0.6, 0.3], q=[0.5, 0.3, 0.2], n=2)


def test_the_top_level_certify_stays_a_function_after_the_package_is_imported() -> None:
    """``otlp.certify`` (the function) and ``otlp.certification`` (the package, not ``otlp.certify``: importing a
    submodule of that name would replace the function with the module) stay apart."""
    import otlp.certification.rule  # noqa: F401

    assert callable(otlp.certify) and otlp.certify.__module__ == "otlp"


def test_huge_n_is_refused_before_allocating(capsys) -> None:  # noqa: ANN001
    """otlp certify --n 1e9 used to try to allocate 728 TiB of drafted tuples (a traceback); and a count of tuples
    beyond any float used to overflow ModelTooLargeError itself."""
    from otlp.cli.commands import main
    from otlp.core.errors import ModelTooLargeError

    assert main(["certify", "--verifier", "rrs", "--p", "0.5,0.5", "--q", "0.4,0.6", "--n", "1000000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("otlp: error:") and "over certify's limit of 10,000" in err[0]
    assert "PiB" in str(ModelTooLargeError("x", 10**400, 1 << 30))
