"""The otlp command: exit codes, messages and JSON output."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from otlp.cli import main


def run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_solve_json_agrees_across_routes(capsys):
    code, out, _ = run(["solve", "--example", "--formulation", "optimal", "--formulation", "relaxed",
                        "--backend", "highs", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    values = [r["value"] for r in data["results"]]
    assert len(values) == 3  # closed form, optimal, relaxed/highs
    assert max(values) - min(values) < 1e-9
    assert values[0] == pytest.approx(0.85)


def test_solve_reads_files(tmp_path, capsys):
    np.save(tmp_path / "p.npy", np.array([0.1, 0.6, 0.3]))
    (tmp_path / "q.json").write_text("[0.5, 0.3, 0.2]")
    code, out, _ = run(["solve", "--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.json"), "--n", "2",
                        "--scheme", "spechub", "--formulation", "relaxed", "--json"], capsys)
    assert code == 0
    assert all(r["value"] == pytest.approx(1.0) for r in json.loads(out)["results"])


@pytest.mark.parametrize("argv, message", [
    (["solve", "--p", "0.5,0.6", "--q", "0.5,0.5", "--n", "2"], "sums to"),
    (["solve", "--p", "0.5,0.5", "--q", "0.5,0.5", "--n", "0"], "n must be >= 1"),
    (["solve", "--p", "0.5,0.5", "--q", "0.2,0.3,0.5", "--n", "2"], "same vocabulary"),
    (["solve", "--p", "a,b", "--q", "0.5,0.5", "--n", "2"], "cannot parse"),
    (["solve", "--p", "0.5,nan", "--q", "0.5,0.5", "--n", "2"], "not finite"),
    (["solve", "--example", "--backend", "gurobi", "--formulation", "relaxed"], "unknown backend"),
    (["solve", "--p", "0.5,0.5", "--q", "0.5,0.5"], "missing --n"),
    (["solve", "--example", "--scheme", "spechub", "--formulation", "optimal"], "i.i.d."),
])
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and err.startswith("otlp: error:")


def test_help_and_usage_errors_exit_cleanly():
    proc = subprocess.run([sys.executable, "-m", "otlp.cli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "solve" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "otlp.cli", "solve", "--scheme", "bogus"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_solve_does_not_load_the_other_subcommands():
    # Only the chosen subcommand imports its module: `otlp solve` must not pay for torch.
    code = ("import sys; from otlp.cli import main; main(['solve', '--example', '--formulation', 'subset']); "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("False")
