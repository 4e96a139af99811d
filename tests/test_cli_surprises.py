"""Issue 44, "silent surprises": options the CLI used to ignore or misreport. Each bad-input case runs the real
``python -m otlp.cli`` in a subprocess: exit status 2, one ``otlp: error:`` line, done within 3 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from otlp.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


requires_torch = pytest.mark.skipif(not _has("torch"), reason="needs the optional package 'torch' (otlp[torch])")


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

    from otlp.verifiers.certification import certify_exit_code

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
