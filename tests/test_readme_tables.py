"""Every table marked ``<!-- table: <script>/<table> -->`` in README.md or a page of docs/ shows exactly what its
benchmark script published last (benchmarks/published/<script>.json; see benchmarks/readme_tables.py); the README
stays a short front door whose relative links, and those of docs/, lead somewhere."""

from __future__ import annotations

import importlib.util
import json
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "benchmarks" / "readme_tables.py")
readme_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_tables)

TABLES = readme_tables.all_tables(ROOT)
PAGES = readme_tables.marked_files(ROOT)
README_MAX_LINES = 250
#: [text](target) and ![alt](target), the target up to a space (a title may follow) or the closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def test_the_readme_has_published_tables():
    assert ("README.md", "certify_example", "verifiers") in {(f, s, t) for f, s, t, _, _ in TABLES}


def test_the_docs_pages_are_read():
    files = {f for f, *_ in TABLES}
    assert "docs/COST.md" in files and "docs/OPTIMAL.md" in files, sorted(files)


@pytest.mark.parametrize("file, script, table, columns, rows", TABLES,
                         ids=[f"{f}:{s}/{t}" for f, s, t, _, _ in TABLES])
def test_marked_table_matches_its_script(file, script, table, columns, rows):
    path = ROOT / "benchmarks" / "published" / f"{script}.json"
    assert path.exists(), f"benchmarks/{script}.py has not published {path.name}"
    stored = json.loads(path.read_text())["tables"][table]
    assert columns == stored["columns"]
    assert len(rows) == len(stored["rows"]), f"{file} shows {len(rows)} rows, the script printed {len(stored['rows'])}"
    for k, (shown, printed) in enumerate(zip(rows, stored["rows"], strict=True)):
        assert shown == printed, f"row {k + 1} of {script}/{table}: {file} {shown} vs script {printed}"


def test_every_published_table_is_shown_somewhere():
    shown = {(s, t) for _, s, t, _, _ in TABLES}
    for path in sorted((ROOT / "benchmarks" / "published").glob("*.json")):
        data = json.loads(path.read_text())
        missing = sorted(set(data["tables"]) - {t for s, t in shown if s == data["script"]})
        assert not missing, f"{path.name}: tables {missing} are in no marked table of README.md or docs/"


def test_the_parser_catches_a_changed_number(tmp_path):
    text = "x\n<!-- table: demo/t -->\n| a | b |\n| --- | --- |\n| 1 | 0.50 |\n\nafter | not a table\n"
    ((script, table, columns, rows),) = readme_tables.readme_tables(text)
    assert (script, table, columns, rows) == ("demo", "t", ["a", "b"], [["1", "0.50"]])
    readme_tables.publish("demo", "t", ["a", "b"], [["1", "0.51"]], folder=tmp_path)
    assert readme_tables.load("demo", "t", folder=tmp_path)["rows"] != rows


def test_update_rewrites_the_table_in_every_file_that_holds_it(tmp_path):
    table = "<!-- table: demo/t -->\n| a | b |\n| --- | --- |\n| 1 | 0.50 |\n"
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# r\n\n" + table + "\ntext\n")
    (tmp_path / "docs" / "A.md").write_text("# a\n" + table)
    (tmp_path / "docs" / "B.md").write_text("# b, no table\n")
    published = tmp_path / "published"
    readme_tables.publish("demo", "t", ["a", "b"], [["1", "0.51"], ["2", "0.52"]], folder=published)
    written = readme_tables.update_readme("demo", "t", root=tmp_path, folder=published)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == ["README.md", "docs/A.md"]
    found = readme_tables.all_tables(tmp_path)
    assert [(f, rows) for f, _, _, _, rows in found] == [("README.md", [["1", "0.51"], ["2", "0.52"]]),
                                                         ("docs/A.md", [["1", "0.51"], ["2", "0.52"]])]
    assert (tmp_path / "README.md").read_text().endswith("| 2 | 0.52 |\n\ntext\n")
    assert (tmp_path / "docs" / "B.md").read_text() == "# b, no table\n"
    readme_tables.publish("demo", "gone", ["a"], [["1"]], folder=published)
    with pytest.raises(ValueError, match="no marker"):
        readme_tables.update_readme("demo", "gone", root=tmp_path, folder=published)


def test_the_published_example_is_what_the_code_computes_now():
    # the cheap table is recomputed here (milliseconds), so a change in a verifier shows up as a stale README
    spec = importlib.util.spec_from_file_location("certify_example", ROOT / "benchmarks" / "certify_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.rows() == readme_tables.load("certify_example", "verifiers")["rows"]


def test_the_readme_is_a_short_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped (letters, digits, _ and - kept), spaces to -,
    a repeated heading numbered -1, -2, ..."""
    anchors, seen = set(), {}
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = "".join(c for c in match.group(1).lower()
                       if c in "_- " or unicodedata.category(c)[0] in "LN").replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_leads_to_a_file(page):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target} (no file)")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path.read_text(encoding="utf-8")):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_link_check_sees_a_broken_link(tmp_path):
    assert LINK.findall("see [a](docs/X.md#y-z) and ![p](img.png \"t\") and [w](https://e.org)") == [
        "docs/X.md#y-z", "img.png", "https://e.org"]
    assert _anchors("# Cost per step (`benchmarks/verifiers.py`)\n## CPU, the grid's drafts\n## CPU, the grid's drafts"
                    ) == {"cost-per-step-benchmarksverifierspy", "cpu-the-grids-drafts", "cpu-the-grids-drafts-1"}


def test_the_readme_pins_are_the_packages_pins():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    pins = re.findall(r"`((?:torch|highspy)[<>=!~][^`]*)`", readme)
    assert {pin.split("=")[0].rstrip("<>!~") for pin in pins} == {"torch", "highspy"}, pins
    for pin in pins:
        assert f'"{pin}"' in pyproject, f"README.md pins {pin}, pyproject.toml does not"
