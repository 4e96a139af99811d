"""Issue 44, "silent surprises": options the CLI used to ignore or misreport. Each bad-input case runs the real
``python -m otlp.cli`` in a subprocess: exit status 2, one ``otlp: error:`` line, done within 3 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from otlp.cli.commands import main
from tests.cli.test_cli import requires_torch

ROOT = Path(__file__).resolve().parents[2]




def cli(argv: list[str], cwd: Path | None = None, timeout: float = 3.0) -> subprocess.CompletedProcess:
    """``python -m otlp.cli *argv`` with this checkout first on the path; a run over ``timeout`` s fails the test."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd or ROOT)])}
    return subprocess.run([sys.executable, "-m", "otlp.cli", *argv], cwd=cwd or ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def assert_refused(argv: list[str], message: str, cwd: Path | None = None) -> str:
    """Exit 2, exactly one line ``otlp: error: ...`` containing ``message``, within 3 s. Returns the line."""
    done = cli(argv, cwd)
    assert done.returncode == 2, (argv, done.returncode, done.stderr)
    assert done.stderr.startswith("otlp: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr, done.stderr
    return done.stderr


# -- otlp certify: the exit status says whether the rule passed ---------------------------------------------------
EXAMPLE = ["--p", "0.1,0.6,0.3", "--q", "0.5,0.3,0.2", "--n", "2"]
RULES = '''
import numpy as np


class WhiteBox:
    def sample(self, p, q, drafts, generator=None):
        raise AssertionError("certified by its exact conditional law: never sampled")


class AlwaysFirst(WhiteBox):
    """Outputs the first draft: its law is q's, not p's (white box, exact)."""

    def conditional(self, p, draft, omegas):
        law = np.zeros((omegas.shape[0], p.size))
        law[np.arange(omegas.shape[0]), omegas[:, 0]] = 1.0
        return law


class Exact(WhiteBox):
    """Outputs the target itself, ignoring the drafts: lossless."""

    def conditional(self, p, draft, omegas):
        return np.tile(p, (omegas.shape[0], 1))


always_first = AlwaysFirst()
exact = Exact()
'''


@pytest.fixture
def rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "my_rules_44.py").write_text(RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_certify_exits_1_when_the_rule_does_not_preserve_the_target(rules: Path, capsys) -> None:  # noqa: ANN001
    assert main(["certify", "--verifier", "my_rules_44:always_first", *EXAMPLE]) == 1
    assert "preserves target    NO" in capsys.readouterr().out
    assert main(["certify", "--verifier", "my_rules_44:always_first", *EXAMPLE, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["preserves_target"] is False
    assert main(["certify", "--verifier", "my_rules_44:exact", *EXAMPLE]) == 0
    assert "preserves target    yes" in capsys.readouterr().out


def test_certify_exit_status_of_registered_rules_and_the_table(capsys) -> None:  # noqa: ANN001
    assert main(["certify", "--verifier", "rrs", *EXAMPLE, "--no-certificate"]) == 0
    assert main(["certify", "--verifier", "all", *EXAMPLE]) == 0  # spechub etc. apply; none fails


def test_certify_exit_code_counts_failures_and_inconclusive_runs() -> None:
    from types import SimpleNamespace

    from otlp.certification.rule import certify_exit_code

    ok, bad, unsure = (SimpleNamespace(preserves_target=v) for v in (True, False, None))
    assert certify_exit_code([ok, {"verifier": "spechub", "error": "n = 3"}]) == 0
    assert certify_exit_code([ok, bad]) == 1
    assert certify_exit_code([unsure]) == 1


def test_certify_help_documents_the_exit_status() -> None:
    done = cli(["certify", "--help"], timeout=10)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "exit status (pytest-style): 0 the rule preserves the target" in text and "2 bad input" in text


@pytest.mark.parametrize("extra, message", [
    (["--tolerance", "2"], "--tolerance must be a total-variation distance in [0, 1], got 2"),
    (["--tolerance", "nan"], "--tolerance must be"),
    (["--alpha", "0"], "--alpha must be an error rate in (0, 1), got 0"),
    (["--alpha", "1"], "--alpha must be"),
])
@pytest.mark.parametrize("verifier", ["rrs", "all", "my_rules_44:exact"])
def test_certify_refuses_out_of_range_tolerance_and_alpha(verifier: str, extra: list[str], message: str,
                                                          rules: Path) -> None:
    assert_refused(["certify", "--verifier", verifier, *EXAMPLE, *extra], message, cwd=rules)


@pytest.mark.parametrize("extra", [["--tolerance", "0.01"], ["--alpha", "0.01"], ["--scheme", "greedy"],
                                   ["--mode", "black"]])
def test_certify_refuses_sequential_test_options_for_registered_rules(extra: list[str]) -> None:
    line = assert_refused(["certify", "--verifier", "rrs", *EXAMPLE, *extra],
                          f"{extra[0]} only applies to --verifier package.module:function")
    assert f"drop {extra[0]}" in line


def test_certify_applies_tolerance_to_a_callable(rules: Path, capsys) -> None:  # noqa: ANN001
    assert main(["certify", "--verifier", "my_rules_44:exact", *EXAMPLE, "--tolerance", "0.25", "--alpha", "0.01",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tolerance"] == 0.25 and out["alpha"] == 0.01


# -- otlp decode / bench acceptance --------------------------------------------------------------------------------
@requires_torch
def test_decode_headline_names_its_denominator_and_the_tokens_kept(capsys) -> None:  # noqa: ANN001
    """Issue 44: "block efficiency 2.4212 tokens per target call (1029 tokens, 58 batched target calls)", where
    1029 / 58 = 17.7, and 1029 tokens for 8 x 128 asked. The line now shows the division it makes, and the tokens
    the rule emitted past --max-new-tokens are counted and said to be dropped."""
    import re

    argv = ["decode", "--n", "2", "--L", "4", "--max-new-tokens", "9", "--batch", "3", "--no-baseline",
            "--no-progress"]
    assert main([*argv, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    assert m["tokens_kept"] == 3 * 9 and m["max_new_tokens"] == 9 and m["tokens"] >= m["tokens_kept"]
    assert m["block_efficiency"] == m["tokens"] / m["sequence_steps"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    head = re.search(r"block efficiency +([\d.]+) tokens per sequence per target call = (\d+) tokens / (\d+) "
                     r"sequence-steps \(.*; (\d+) batched target calls", out)
    assert head, out
    value, tokens, steps, calls = float(head[1]), int(head[2]), int(head[3]), int(head[4])
    assert (tokens, steps, calls) == (m["tokens"], m["sequence_steps"], m["target_calls"])
    assert value == round(tokens / steps, 4) and calls <= steps <= 3 * calls
    assert re.search(r"output +27 tokens = 3 prompts x 9 \(--max-new-tokens\)", out)
    if tokens > 27:
        assert f"the rule emitted {tokens}: a prompt's last step can accept past 9, and those {tokens - 27} " in out


def test_decode_output_line_for_both_cases() -> None:
    from otlp.cli.decode import _output_line

    m = {"tokens": 1029, "tokens_kept": 1024, "batch": 8, "max_new_tokens": 128}
    line = _output_line(m)
    assert "1024 tokens = 8 prompts x 128 (--max-new-tokens); the rule emitted 1029" in line
    assert "those 5 tokens are dropped from the output" in line
    assert _output_line({**m, "tokens": 1024}).endswith("1024 tokens = 8 prompts x 128 (--max-new-tokens)")


@pytest.mark.parametrize("argv, message", [
    (["decode", "--vocab-size", "10000000"], "--vocab-size 10000000 exceeds the 9344 distinct tokens of the embedded"),
    (["decode", "--vocab-size", "2"], "--vocab-size must be an integer >= 3"),
    (["decode", "--draft", "/no/hf/draft", "--target", "/no/hf/target", "--vocab-size", "100"],
     "a Hugging Face pair (--draft / --target directories) has its tokenizer's: drop --vocab-size"),
    (["bench", "acceptance", "--vocab-size", "10000000"], "--vocab-size 10000000 exceeds the 9344 distinct"),
    (["bench", "acceptance", "--top-ks", "10,0"], "--top-ks: values must be >= 1 (or 'all' for no truncation)"),
])
def test_decode_vocab_size_is_refused_not_capped(argv: list[str], message: str) -> None:
    assert_refused(argv, message)


def test_the_corpus_vocabulary_bound_is_the_one_the_help_states() -> None:
    from otlp.decode.corpus import WordTokenizer, check_vocab_size, load_corpus, max_vocab_size

    top = max_vocab_size()
    assert top == 9344 and check_vocab_size(top) == top
    assert WordTokenizer.fit(load_corpus(), top + 1000).vocab_size == top  # what the old cap silently gave


@pytest.mark.parametrize("command", [["decode"], ["bench", "acceptance"]])
def test_every_decode_and_bench_option_has_help(command: list[str]) -> None:
    from otlp.cli.commands import build_parser

    parser = build_parser(command)
    sub = parser._subparsers._group_actions[0].choices[command[0]]  # noqa: SLF001 - argparse has no public walk
    if len(command) > 1:
        sub = sub._subparsers._group_actions[0].choices[command[1]]  # noqa: SLF001
    bare = [a.option_strings[0] for a in sub._actions if a.option_strings and not a.help]  # noqa: SLF001
    assert bare == []


# -- otlp certify-block: checked before torch loads; its hint names its own flags ----------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--V", "0"], "--V must be an integer >= 2, got 0"),
    (["--L", "0"], "--L must be an integer >= 1, got 0"),
    (["--K", "0"], "--K must be an integer >= 1, got 0"),
    (["--rule", "nope"], "unknown --rule 'nope'"),
    (["--closeness", "1.5"], "--closeness must be in [0, 1), got 1.5"),
    (["--closeness", "nan"], "--closeness must be in [0, 1)"),
    (["--V", "50", "--L", "6"], "an ARModel with V=50, depth=6 would need about 5.7 TiB"),
    (["--V", "2", "--L", "100000000"], "would need about 7.2e+289 PiB"),
])
def test_certify_block_refuses_before_torch_loads(argv: list[str], message: str) -> None:
    line = assert_refused(["certify-block", *argv], message)
    assert "top-k" not in line and " n," not in line and "smaller V or n" not in line
    if "ARModel" in message:
        assert line.rstrip().endswith("use a smaller V or depth (L)")
    probe = ("import sys; from otlp.cli.commands import main; code = main(['certify-block', *sys.argv[1:]]); "
             "print('torch' in sys.modules, code)")
    done = subprocess.run([sys.executable, "-c", probe, *argv], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["False", "2"], done.stdout + done.stderr


def test_model_too_large_hints_name_the_sizes_of_their_models() -> None:
    from otlp.core.errors import ModelTooLargeError
    from otlp.multistep.armodel import check_table_size

    with pytest.raises(ModelTooLargeError) as info:
        check_table_size(40, 5)
    assert info.value.hint.endswith("use a smaller V or depth (L)") and info.value.what.startswith("an ARModel")
    check_table_size(2, 20)  # 2 (2^21 - 1) = 4.2e6 entries: under the limit
    check_table_size(1, 1000)
    with pytest.raises(ModelTooLargeError):
        check_table_size(1, 10**12)  # V = 1: depth + 1 entries, counted without a sum over 10^12 depths
    default = ModelTooLargeError("x", 1, 0)
    assert str(default).endswith(ModelTooLargeError.DEFAULT_HINT)


# -- otlp check --exact: "(exact)" only next to an exact 0 ----------------------------------------------------------
def test_check_exact_never_prints_exact_next_to_a_float_violation(capsys) -> None:  # noqa: ANN001
    """Issue 44: "PASS (exact)" was printed next to a 1.67e-16 violation (a float implementation's, compared
    within tolerance, while the rational parts held exactly)."""
    argv = ["check", "--exact", "--instances", "3", "--theorem", "gr.thm3.1", "--theorem", "gr.thm5.1",
            "--theorem", "gr.thm6.1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    import re

    rows = {}
    for line in out.splitlines():
        row = re.match(r"(gr\.\S+) .* (\d+) +([0-9.e+-]+) +(PASS|FAIL)(?: \(([^)]*)\))? *$", line)
        if row:
            rows[row[1]] = (float(row[3]), row[4], row[5])
    assert set(rows) == {"gr.thm3.1", "gr.thm5.1", "gr.thm6.1"}, out
    for worst, _, mode in rows.values():
        assert mode != "exact" or worst == 0.0, out
    assert rows["gr.thm3.1"][2] == "exact + float" and rows["gr.thm3.1"][0] > 0
    assert rows["gr.thm5.1"] == (0.0, "PASS", "exact") and rows["gr.thm6.1"][2] is None
    assert "(exact + float): every rational part held exactly; the worst violation shown is a float " in out
    assert "a status without (exact) ran in floating point only" in out
    assert main([*argv, "--json"]) == 0
    modes = {r["name"]: (r["mode"], r["worst_violation"]) for r in json.loads(capsys.readouterr().out)}
    assert modes["gr.thm5.1"] == ("exact", 0.0) and modes["gr.thm6.1"][0] == "float"
    assert modes["gr.thm3.1"][0] == "exact + float" and modes["gr.thm3.1"][1] > 0


def test_check_result_mode() -> None:
    from otlp.theorems.core import FAIL, PASS, CheckResult

    def result(worst: float, exact: bool, hard: bool = False) -> CheckResult:
        return CheckResult("c", "t", "s", 3, worst, 1e-9, FAIL if hard else PASS, "", exact, 0.0, "", hard)

    assert result(0.0, True).mode == "exact" and result(1.7e-16, True).mode == "exact + float"
    assert result(0.25, True, hard=True).mode == "exact" and result(1e-16, False).mode == "float"


# -- otlp solve --example with --p / --q: say where each came from -------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--p", "0.5,0.5"], "p has length 2 (--p) but q has length 3 (from --example's q = 0.5,0.3,0.2); both must "
                         "cover the same vocabulary; --example fills in only what is not given: pass --q as well, "
                         "or drop --p"),
    (["--q", "0.5,0.5"], "p has length 3 (from --example's p = 0.1,0.6,0.3) but q has length 2 (--q)"),
])
def test_solve_example_mixed_with_p_or_q_names_the_source(argv: list[str], message: str) -> None:
    assert_refused(["solve", "--example", *argv], message)


def test_solve_example_header_says_what_it_filled_in(capsys) -> None:  # noqa: ANN001
    assert main(["solve", "--example", "--n", "3", "--formulation", "optimal"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("(--p, --q from the built-in example; the rest as given)") and "Figs." not in head
    assert main(["solve", "--example", "--formulation", "optimal"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("(built-in example: SpecHub paper, Figs. 4-5)")


# -- otlp solve --json: q, and a real certificate field -------------------------------------------------------------
def test_solve_json_has_q_and_real_certificates(capsys) -> None:  # noqa: ANN001
    """Issue 44: the solve JSON had no q, and "certificate": "-" on every row."""
    assert main(["solve", "--example", "--formulation", "optimal", "--formulation", "relaxed", "--backend", "highs",
                 "--backend", "exact", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["p"] == [0.1, 0.6, 0.3] and data["q"] == [0.5, 0.3, 0.2]
    rows = {(r["formulation"], r["backend"]): r for r in data["results"]}
    closed = rows["closed_form", "otlp"]["certificate"]
    assert closed["kind"] == "rational" and closed["ok"] and closed["optimal"] and closed["agrees"]
    assert closed["alpha_star"] == "17/20" and closed["h_star"] == [0]  # SpecHub Fig. 5: alpha* = 0.85
    for backend in ("highs", "exact"):
        lp = rows["relaxed", backend]["certificate"]
        assert lp["kind"] == "lp" and lp["ok"] and abs(lp["primal_value"] - 0.85) < 1e-9
    assert rows["relaxed", "exact"]["certificate"]["exact"] is True
    from fractions import Fraction  # the exact backend takes p and q's binary values exactly: 0.85 up to 2^-55

    assert abs(Fraction(rows["relaxed", "exact"]["certificate"]["exact_values"]["primal_value"]) - Fraction(17, 20)) \
        < Fraction(1, 2**50)
    assert rows["optimal", "otlp.optimal"]["certificate"] is None  # none of its own: not a "-" string
    assert all(r["certificate"] != "-" for r in data["results"])


def test_solve_json_independent_drafts_give_qs_and_large_problems_say_why_no_certificate(capsys) -> None:  # noqa: ANN001
    assert main(["solve", "--p", "0.2,0.3,0.5", "--q", "0.5,0.3,0.2", "--q-other", "0.1,0.1,0.8", "--n", "2",
                 "--scheme", "independent", "--formulation", "relaxed", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["qs"] == [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]] and "q" not in data
    V = 40
    p = ",".join(["0.025"] * V)
    assert main(["solve", "--p", p, "--q", p, "--n", "2", "--formulation", "optimal", "--json"]) == 0
    closed = json.loads(capsys.readouterr().out)["results"][0]["certificate"]
    assert closed["computed"] is False and "V^n = 40^2 draft tuples, over the 256" in closed["reason"]


def test_bench_acceptance_says_when_a_top_k_keeps_all_of_q(tmp_path: Path) -> None:
    """A --top-ks value >= V ran silently as untruncated; it now says so on stderr and in the JSON's notes."""
    import json

    proc = cli(["bench", "acceptance", "--pairs", "4", "--ns", "1", "--top-ks", "10,5000", "--json",
                "--out", str(tmp_path)], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "top-k 5000 >= V = 2000 keeps all of q" in proc.stderr
    assert json.loads(proc.stdout)["notes"] == ["top-k 5000 >= V = 2000 keeps all of q: run as untruncated "
                                                "(the same as 'all')"]
