"""The ``otlp check`` wiring: table, JSON, --list, exit codes, exact-mode semantics of the violation tally."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction

import pytest

import otlp.theorems.registry as registry_mod
from otlp.cli.check import add_check_arguments, run_check_cli
from otlp.theorems import Check, Registry, Tally, format_table, run_checks


def _args(*argv):
    return add_check_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def test_table_and_exit_zero(capsys):
    assert run_check_cli(_args("--theorem", "gr.thm3.1", "--theorem", "cd.thm3", "--instances", "3")) == 0
    out = capsys.readouterr().out
    assert "gr.thm3.1" in out and "cd.thm3" in out and "2/2 checks passed" in out


def test_json_and_prefix_selection(capsys):
    assert run_check_cli(_args("--theorem", "spectr.", "--instances", "2", "--json")) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["name"].startswith("spectr.") and r["status"] == "pass" for r in rows)
    assert {"name", "source", "instances", "worst_violation", "status"} <= set(rows[0])


def test_list(capsys):
    assert run_check_cli(_args("--list", "--json")) == 0
    listed = json.loads(capsys.readouterr().out)
    assert any(c["name"] == "gr.thm3.1" and c["printed"] for c in listed)


def test_unknown_theorem_exits_2(capsys):
    from otlp.cli.commands import main

    assert main(["check", "--theorem", "no.such.theorem"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("otlp: error: unknown theorem") and err.count("\n") == 1


def _fake_registry(verify):
    def build():
        reg = Registry()
        reg.register(Check(name="fake.always", title="t", source="s", statement="x",
                           generate=lambda rng, count, exact: list(range(count)), verify=verify, hooks={}))
        return reg
    return build


def test_violation_exits_1(monkeypatch, capsys):
    monkeypatch.setattr(registry_mod, "build_registry", _fake_registry(lambda inst, hooks, exact: 0.5))
    assert run_check_cli(_args("--instances", "2")) == 1
    assert "FAIL" in capsys.readouterr().out


def test_time_limit_stops_a_check_and_says_after_how_many(monkeypatch, capsys):
    """Instances are generated in chunks, so the limit also bounds the generation; the check passes on the instances
    it tried and the table says it stopped."""
    import time

    import otlp.theorems.core as core

    generated = []

    def slow(inst, hooks, exact):
        time.sleep(0.002)
        return 0.0

    def build():
        reg = Registry()
        reg.register(Check(name="fake.slow", title="t", source="s", statement="x",
                           generate=lambda rng, count, exact: generated.append(count) or list(range(count)),
                           verify=slow, hooks={}))
        return reg

    monkeypatch.setattr(registry_mod, "build_registry", build)
    monkeypatch.setattr(core, "GENERATE_CHUNK", 50)
    assert run_check_cli(_args("--instances", "100000", "--time-limit", "0.05")) == 0
    out = capsys.readouterr().out
    (result,) = run_checks(instances=100000, time_limit=0.05)
    assert result.ok and 1 <= result.instances < 100000 and "time limit" in result.stopped
    assert "fake.slow: stopped at the 0.05 s time limit after" in out
    assert max(generated) == 50 and sum(generated) < 100000
    (full,) = run_checks(instances=30, time_limit=60)
    assert full.instances == 30 and full.stopped == ""


def test_error_is_reported_not_raised(monkeypatch):
    def boom(inst, hooks, exact):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(registry_mod, "build_registry", _fake_registry(boom))
    (result,) = run_checks(instances=2)
    assert result.status == "error" and "solver exploded" in result.details
    assert "error" in format_table([result]).lower()


def test_exact_gap_is_a_hard_failure_below_the_float_tolerance():
    t = Tally()
    t.equal("tiny rational gap", Fraction(1, 10**30), Fraction(0))
    v = t.result()
    assert v.hard and float(v) < 1e-20
    c = Check(name="x", title="t", source="s", statement="x", tolerance=1e-7,
              generate=lambda rng, count, exact: [0], verify=lambda i, h, e: v, hooks={})
    assert c.run(instances=1).status == "fail"
    t2 = Tally()
    t2.equal("float noise", 1.0, 1.0 + 1e-12)
    assert not t2.result().hard


def test_unknown_hook_is_refused():
    reg = registry_mod.build_registry()
    with pytest.raises(KeyError):
        reg["gr.thm3.1"].resolve({"no_such_hook": print})


@pytest.mark.parametrize("seed", ["-1", "-100"])
def test_negative_seed_exits_2_before_running(seed, capsys):
    # a negative seed is bad input (exit 2), not a theorem violation: it used to error inside every check (exit 1)
    from otlp.cli.commands import main

    assert main(["check", "--seed", seed, "--theorem", "gr.thm3.1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"otlp: error: --seed must be an integer >= 0, got {seed}"


def test_a_missing_optional_package_is_a_named_skip(monkeypatch, capsys):
    # a check whose hook needs torch in a core-only install is skipped (exit 0), not an ERROR (exit 1)
    def needs_torch(inst, hooks, exact):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(registry_mod, "build_registry", _fake_registry(needs_torch))
    assert run_check_cli(_args("--instances", "2")) == 0
    out = capsys.readouterr().out
    assert "fake.always: skipped: needs the optional package 'torch' (pip install 'otlp[torch]')" in out


def test_a_missing_non_optional_module_is_still_an_error(monkeypatch, capsys):
    def broken(inst, hooks, exact):
        raise ModuleNotFoundError("No module named 'otlp.nothing'", name="otlp.nothing")

    monkeypatch.setattr(registry_mod, "build_registry", _fake_registry(broken))
    assert run_check_cli(_args("--instances", "2")) == 1


def test_list_cites_only_files_in_the_repository(capsys):
    import re
    from pathlib import Path

    assert run_check_cli(_args("--list", "--json")) == 0
    text = capsys.readouterr().out
    root = Path(__file__).resolve().parents[2]
    cited = set(re.findall(r"[\w./-]+\.(?:md|py|txt|json)\b|\b(?:papers|notes)/[\w.-]+", text))
    assert [c for c in cited if not (root / c).exists()] == []


def test_run_checks_refuses_a_negative_seed() -> None:
    from otlp.core.errors import InputError

    with pytest.raises(InputError, match="seed must be an integer >= 0"):
        run_checks(["gr.thm3.1"], seed=-1)
