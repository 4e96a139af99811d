"""Every README table marked ``<!-- table: <script>/<table> -->`` shows exactly what its benchmark script
published last (benchmarks/published/<script>.json; see benchmarks/readme_tables.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "benchmarks" / "readme_tables.py")
readme_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_tables)

TABLES = readme_tables.readme_tables((ROOT / "README.md").read_text())


def test_the_readme_has_published_tables():
    assert ("certify_example", "verifiers") in {(s, t) for s, t, _, _ in TABLES}


@pytest.mark.parametrize("script, table, columns, rows", TABLES, ids=[f"{s}/{t}" for s, t, _, _ in TABLES])
def test_readme_table_matches_its_script(script, table, columns, rows):
    path = ROOT / "benchmarks" / "published" / f"{script}.json"
    assert path.exists(), f"benchmarks/{script}.py has not published {path.name}"
    stored = json.loads(path.read_text())["tables"][table]
    assert columns == stored["columns"]
    assert len(rows) == len(stored["rows"]), f"README shows {len(rows)} rows, the script printed {len(stored['rows'])}"
    for k, (shown, printed) in enumerate(zip(rows, stored["rows"], strict=True)):
        assert shown == printed, f"row {k + 1} of {script}/{table}: README {shown} vs script {printed}"


def test_the_parser_catches_a_changed_number(tmp_path):
    text = "x\n<!-- table: demo/t -->\n| a | b |\n| --- | --- |\n| 1 | 0.50 |\n\nafter | not a table\n"
    ((script, table, columns, rows),) = readme_tables.readme_tables(text)
    assert (script, table, columns, rows) == ("demo", "t", ["a", "b"], [["1", "0.50"]])
    readme_tables.publish("demo", "t", ["a", "b"], [["1", "0.51"]], folder=tmp_path)
    assert readme_tables.load("demo", "t", folder=tmp_path)["rows"] != rows


def test_the_published_example_is_what_the_code_computes_now():
    # the cheap table is recomputed here (milliseconds), so a change in a verifier shows up as a stale README
    spec = importlib.util.spec_from_file_location("certify_example", ROOT / "benchmarks" / "certify_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.rows() == readme_tables.load("certify_example", "verifiers")["rows"]
