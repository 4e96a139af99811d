"""Tables owned by benchmark scripts: each script publishes the table it prints, and README.md or a page of docs/
shows it.

A script calls :func:`publish` with the table's columns and rows (cells as the exact strings the page shows);
that writes ``benchmarks/published/<script>.json`` (committed, unlike ``benchmarks/results/``):

    {"script": "<script>", "tables": {"<table>": {"columns": [...], "rows": [[...], ...], "settings": {...}}}}

In README.md and in every ``docs/*.md`` (:func:`marked_files`) the table follows a marker line
``<!-- table: <script>/<table> -->``; a table may be shown in more than one file (the README's summary and its
page). ``tests/test_readme_tables.py`` parses every marked table of every such file and fails when a cell differs
from the JSON, so a number in a marked table is always the one its script printed last. To refresh: run the script,
then paste :func:`markdown` output (the script prints it) under the marker (or run the script with
``--update-readme`` where it offers one, which calls :func:`update_readme`: it rewrites the table in every file
that holds it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "benchmarks" / "published"
README = ROOT / "README.md"
DOCS = "docs"
MARKER = re.compile(r"^<!-- table: ([\w.-]+)/([\w.-]+) -->\s*$")


def publish(script: str, table: str, columns: list[str], rows: list[list[str]], settings: dict | None = None,
            folder: Path = PUBLISHED) -> Path:
    """Store one table of ``script`` (merged with its other tables) and return the JSON's path."""
    if any(len(row) != len(columns) for row in rows):
        raise ValueError(f"every row of {script}/{table} needs {len(columns)} cells")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{script}.json"
    data = json.loads(path.read_text()) if path.exists() else {"script": script, "tables": {}}
    data["tables"][table] = {"columns": list(columns), "rows": [[str(c) for c in row] for row in rows],
                             "settings": settings or {}}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def load(script: str, table: str, folder: Path = PUBLISHED) -> dict:
    return json.loads((folder / f"{script}.json").read_text())["tables"][table]


def markdown(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def marked_files(root: Path = ROOT) -> list[Path]:
    """The files that may hold marked tables: README.md, then every ``docs/*.md`` in name order."""
    return [root / "README.md", *sorted((root / DOCS).glob("*.md"))]


def readme_tables(text: str) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """Every marked table of one Markdown text: ``(script, table, columns, rows)`` with the cells as written."""
    out = []
    lines = text.splitlines()
    for k, line in enumerate(lines):
        match = MARKER.match(line.strip())
        if not match:
            continue
        body = []
        for row in lines[k + 1:]:
            if not row.strip().startswith("|"):
                if body:
                    break
                continue
            body.append([cell.strip() for cell in row.strip().strip("|").split("|")])
        out.append((match.group(1), match.group(2), body[0], [r for r in body[2:]]))
    return out


def all_tables(root: Path = ROOT) -> list[tuple[str, str, str, list[str], list[list[str]]]]:
    """Every marked table of :func:`marked_files`: ``(file relative to root, script, table, columns, rows)``."""
    return [(path.relative_to(root).as_posix(), *found) for path in marked_files(root)
            for found in readme_tables(path.read_text(encoding="utf-8"))]


def update_readme(script: str, table: str, readme: Path | None = None, root: Path = ROOT,
                  folder: Path = PUBLISHED) -> list[Path]:
    """Replace the marked table ``script/table`` by the published one in ``readme``, or (by default) in every file
    of :func:`marked_files` that holds it; return the files rewritten."""
    data = load(script, table, folder=folder)
    marker = f"<!-- table: {script}/{table} -->"
    paths = [readme] if readme is not None else marked_files(root)
    written = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").splitlines()
        starts = [k for k, line in enumerate(lines) if line.strip() == marker]
        for start in reversed(starts):
            first = next(k for k in range(start + 1, len(lines)) if lines[k].strip().startswith("|"))
            last = first
            while last + 1 < len(lines) and lines[last + 1].strip().startswith("|"):
                last += 1
            lines[first:last + 1] = markdown(data["columns"], data["rows"]).splitlines()
        if starts:
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            written.append(path)
    if not written:
        names = ", ".join(path.name for path in paths)
        raise ValueError(f"no marker {marker} in {names}")
    return written
