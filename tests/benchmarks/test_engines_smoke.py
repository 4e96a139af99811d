"""benchmarks/engines.py on a tiny size: every adapter and its ``sample`` twin run, the published table has one row
per (method, B, V) with the documented columns, and a table no page marks is printed with its marker instead of
failing (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def eb(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports readme_tables and verifiers from beside it
    spec = importlib.util.spec_from_file_location("engines_bench", BENCH / "engines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    published = {}
    tables = sys.modules["readme_tables"]
    monkeypatch.setattr(tables, "publish", lambda script, name, cols, cells, settings: published.update(
        {(script, name): (cols, cells, settings)}))

    def no_marker(script, name):  # noqa: ANN001, ANN202
        raise ValueError(f"no marker <!-- table: {script}/{name} -->")

    monkeypatch.setattr(tables, "update_readme", no_marker)
    module.published = published
    return module


def test_a_tiny_run_publishes_one_row_per_point(eb, tmp_path, capsys):
    out = tmp_path / "engines.json"
    eb.main(["--B", "3", "--V", "40", "--n", "2", "--reps", "1", "--threads", "1", "--publish", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["method"], r["B"], r["V"]) for r in rows] == [("rrs", 3, 40), ("optimal", 3, 40)]
    cols, cells, settings = eb.published[("engines", "cpu_1_threads")]
    assert cols == eb.COLUMNS and len(cells) == 2 and all(len(c) == len(cols) for c in cells)
    assert cells[0][:3] == ["rrs", "3", "40"] and settings["threads"] == 1 and settings["n"] == 2
    assert "<!-- table: engines/cpu_1_threads -->" in capsys.readouterr().out  # printed to paste, not lost
