"""The otlp command: exit codes, messages and JSON output."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from otlp.cli.commands import main


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


#: for the commands whose module needs torch (decode, bench acceptance, certify-block): in a core-only install
#: they answer every argument with the one-line "needs the optional package 'torch'" error instead
requires_torch = pytest.mark.skipif(not _has("torch"), reason="needs the optional package 'torch' (otlp[torch])")


def run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("problem", "alpha"), [
    (["--example"], 0.85),
    (["--p", "0.7,0.2,0.1", "--q", "0.1,0.3,0.6", "--n", "2", "--scheme", "without_replacement"], 0.592857142857143),
])
def test_solve_json_agrees_across_routes(capsys, problem: list[str], alpha: float):
    """The closed form, the exact rule (class chains for i.i.d. drafts, otlp/optimal/wor.py's Luce rule without
    replacement) and the relaxed LP give one alpha*."""
    code, out, _ = run(["solve", *problem, "--formulation", "optimal", "--formulation", "relaxed", "--backend",
                        "highs", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    values = [r["value"] for r in data["results"]]
    assert [r["formulation"] for r in data["results"]] == ["closed_form", "optimal", "relaxed"]
    assert max(values) - min(values) < 1e-9
    assert values[0] == pytest.approx(alpha)


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
    (["solve", "--example", "--scheme", "spechub", "--formulation", "optimal"], "iid or without_replacement"),
    # an explicit --n 0 is refused, even with --example (which only fills in what is absent)
    (["solve", "--example", "--n", "0"], "n must be >= 1"),
    (["solve", "--example", "--n", "-3", "--formulation", "relaxed"], "n must be >= 1"),
    # --q-other only means something for independent drafts; elsewhere it would be silently ignored
    (["solve", "--example", "--q-other", "0.2,0.3,0.5"], "--q-other is only used by --scheme independent"),
    (["solve", "--example", "--scheme", "greedy", "--q-other", "0.2,0.3,0.5"], "got --scheme greedy"),
    # a formulation none of the requested backends can solve is refused, naming the backends that can
    (["solve", "--example", "--formulation", "subset", "--backend", "highs"],
     "--formulation subset can only be solved by --backend ortools or networkx; --backend highs cannot solve it"),
    (["solve", "--example", "--formulation", "full", "--formulation", "subset", "--backend", "highs",
      "--backend", "pulp"], "--backend highs, pulp cannot solve it"),
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
    code = ("import sys; from otlp.cli.commands import main; main(['solve', '--example', '--formulation', 'subset']); "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("False")


def test_subset_formulation_without_backend_uses_a_min_cut_backend(capsys):
    # highs (the default backend) cannot return a min cut: rather than printing no subset row at all, the first
    # installed backend that can solve the formulation is used.
    code, out, _ = run(["solve", "--p", "0.1,0.6,0.3", "--q", "0.5,0.3,0.2", "--n", "2", "--formulation", "subset",
                        "--json"], capsys)
    assert code == 0
    rows = [r for r in json.loads(out)["results"] if r["formulation"] == "subset"]
    assert len(rows) == 1 and rows[0]["backend"] in ("ortools", "networkx")
    assert rows[0]["value"] == pytest.approx(0.85)


def test_default_formulations_skip_backends_that_cannot_take_them(capsys):
    # formulations the user did not name are not requested work: pot solves only the full LP, so the defaults
    # relaxed and maxflow are left out rather than refused
    pytest.importorskip("ot", reason="POT not installed")
    code, out, _ = run(["solve", "--example", "--backend", "pot", "--json"], capsys)
    assert code == 0
    assert {r["formulation"] for r in json.loads(out)["results"]} == {"closed_form", "optimal", "full"}


def test_q_other_with_independent_still_works(capsys):
    code, out, _ = run(["solve", "--example", "--scheme", "independent", "--q-other", "0.2,0.3,0.5",
                        "--formulation", "relaxed", "--backend", "highs", "--json"], capsys)
    assert code == 0 and len(json.loads(out)["results"]) == 2


@requires_torch
@pytest.mark.parametrize("argv, message", [
    (["--pairs", "0"], "--pairs must be an integer >= 1, got 0"),
    (["--pairs", "-5"], "--pairs must be an integer >= 1, got -5"),
    (["--out", "/dev/null/x"], "--out '/dev/null/x' is not a writable folder"),
])
def test_bench_acceptance_bad_input_exits_2_before_any_work(argv, message, tmp_path, capsys):
    # checked before the models load or any pair is collected: each case takes milliseconds
    code, _, err = run(["bench", "acceptance", "--pairs", "4", "--ns", "1", "--top-ks", "all", "--vocab-size", "50",
                        "--out", str(tmp_path), *argv], capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@requires_torch
def test_bench_acceptance_out_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(["bench", "acceptance", "--pairs", "4", "--ns", "1", "--out", str(blocker / "sub")], capsys)
    assert code == 2 and "is not a writable folder" in err and len(err.strip().splitlines()) == 1


def test_a_closed_pipe_ends_quietly() -> None:
    """``otlp solve ... | head``: the reader goes away; exit 141 (as SIGPIPE would) with no traceback."""
    import subprocess
    import sys

    argv = ["solve", "--p", "0.1,0.6,0.3", "--q", "0.5,0.3,0.2", "--n", "2"]
    code = f"import sys\nfrom otlp.cli.commands import main\nsys.exit(main({argv!r}))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and "Traceback" not in err, err


# -- the one-line contract ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["solve", "--n", "2.5"], "argument --n: invalid int value: '2.5'"),
    (["solve", "--scheme", "bogus"], "invalid choice: 'bogus'"),
    (["solve", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["nope"], "invalid choice: 'nope'"),
    ([], "missing COMMAND"),
    (["bench"], "missing BENCHMARK"),
    (["check", "--instances", "x"], "argument --instances: invalid int value"),
    pytest.param(["certify-block", "--V", "1.5"], "argument --V: invalid int value", marks=requires_torch),
])
def test_argparse_errors_are_one_line_with_exit_2(argv, message, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith("otlp: error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["solve", "--p", "0.5,0.6", "--q", "0.5,0.5", "--n", "2", "--json"],
    ["solve", "--n", "2.5", "--json"],
    ["check", "--theorem", "no.such", "--json"],
    pytest.param(["certify-block", "--V", "1", "--json"], marks=requires_torch),
])
def test_json_errors_are_a_json_object_on_stdout(argv, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and err.startswith("otlp: error: ") and err.count("\n") == 1
    data = json.loads(out)
    assert data["error"]["exit_code"] == 2 and data["error"]["message"] == err[len("otlp: error: "):].strip()


BLOCK_OPTIONAL = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "tqdm", "matplotlib", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Block())
from otlp.cli.commands import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv, extra", [
    (["decode"], "decode"), (["bench", "acceptance"], "decode"),
])
def test_a_missing_optional_dependency_is_one_line_naming_the_extra(argv, extra):
    """(``otlp decode --help`` and its argument errors need no torch: they answer without it.)"""
    proc = subprocess.run([sys.executable, "-c", BLOCK_OPTIONAL, *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("otlp: error: ") and proc.stderr.count("\n") == 1
    assert "needs the optional package 'torch'" in proc.stderr and f"otlp[{extra}]" in proc.stderr


def test_check_without_torch_skips_and_exits_0():
    proc = subprocess.run([sys.executable, "-c", BLOCK_OPTIONAL, "check", "--theorem", "gbv.", "--instances", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # each of the three gbv checks either runs without torch (the numpy AR model needs none) or is a named skip
    skipped = proc.stdout.count("skipped: needs the optional package 'torch' (pip install 'otlp[torch]')")
    passed = sum(line.split()[0].startswith("gbv.") and line.rstrip().endswith("PASS")
                 for line in proc.stdout.splitlines() if line.strip())
    assert skipped >= 1 and skipped + passed == 3 and "ERROR" not in proc.stdout, proc.stdout


# -- otlp solve: fast rows first, size guard, narrow output ------------------------------------------------------
def test_solve_skips_an_lp_over_its_time_limit_without_starting_it(capsys, monkeypatch, tmp_path):
    import otlp.lp.formulations.base as base

    def never(*args, **kwargs):
        raise AssertionError("an LP over the limit was started")

    monkeypatch.setattr(base.Formulation, "solve", never)
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(500)), rng.dirichlet(np.ones(500))
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "q.npy", q)
    argv = ["solve", "--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.npy"), "--n", "2"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    lines = out.splitlines()
    closed = next(k for k, line in enumerate(lines) if line.startswith("closed_form"))
    skipped = next(k for k, line in enumerate(lines) if line.startswith("relaxed") and "skipped [1]" in line)
    assert closed < skipped  # the closed form prints first
    assert any(re.match(r"\[1\] [\d,]+ constraint nonzeros: about [\d.]+ s by highs, over --time-limit 10 s", line)
               for line in lines)
    assert max(len(line) for line in lines[1:]) <= 120  # a reason goes under the table, not into it
    code, out, _ = run([*argv, "--json"], capsys)
    data = json.loads(out)
    assert data["results"][-1]["status"] == "skipped" and "p" not in data  # V = 500: p is summarised
    assert data["p_summary"]["V"] == 500 and data["p_summary"]["sum"] == pytest.approx(1.0)


def test_solve_time_limit_is_checked_and_raising_it_runs_the_lp(capsys):
    code, _, err = run(["solve", "--example", "--time-limit", "0"], capsys)
    assert code == 2 and "--time-limit must be a number of seconds > 0" in err
    code, out, _ = run(["solve", "--example", "--formulation", "relaxed", "--time-limit", "inf", "--json"], capsys)
    assert code == 0 and json.loads(out)["results"][-1]["status"] == "optimal"


def test_solve_example_prints_p_and_q(capsys):
    code, out, _ = run(["solve", "--example", "--formulation", "relaxed", "--backend", "highs"], capsys)
    assert code == 0
    assert "p = [0.1, 0.6, 0.3], q = [0.5, 0.3, 0.2]" in out.splitlines()[0]


def test_the_one_comma_list_parser() -> None:
    """``otlp sweep --n/--top-k`` and ``otlp bench acceptance --ns/--top-ks`` share it: repeats dropped, the words
    for "no truncation" only where allowed, and an empty entry is an error (it was silently skipped)."""
    from otlp.cli.util import int_list
    from otlp.core.errors import InputError

    assert int_list("1, 2,4,2", "--n") == (1, 2, 4)
    assert int_list("all,10,V", "--top-k", allow_all=True, all_value=0) == (0, 10)
    assert int_list("none,10", "--top-ks", allow_all=True) == (None, 10)
    for bad, match in (("1,,2", "empty entry"), ("1,x", "'x' is not an integer"), ("0", ">= 1"), ("all", "'all'")):
        with pytest.raises(InputError, match=match):
            int_list(bad, "--n")
