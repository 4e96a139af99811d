"""README tables owned by benchmark scripts: each script publishes the table it prints, and the README shows it.

A script calls :func:`publish` with the table's columns and rows (cells as the exact strings the README shows);
that writes ``benchmarks/published/<script>.json`` (committed, unlike ``benchmarks/results/``):

    {"script": "<script>", "tables": {"<table>": {"columns": [...], "rows": [[...], ...], "settings": {...}}}}

In README.md the table follows a marker line ``<!-- table: <script>/<table> -->``. ``tests/test_readme_tables.py``
parses every marked table and fails when a cell differs from the JSON, so a README number is always the one its
script printed last. To refresh: run the script, then paste :func:`markdown` output (the script prints it) under
the marker (or run the script with ``--update-readme`` where it offers one, which calls :func:`update_readme`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "benchmarks" / "published"
README = ROOT / "README.md"
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


def readme_tables(text: str) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """Every marked table of a README: ``(script, table, columns, rows)`` with the cells as written."""
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


def update_readme(script: str, table: str, readme: Path = README) -> None:
    """Replace the marked table ``script/table`` in the README by the published one."""
    data = load(script, table)
    lines = readme.read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if line.strip() == f"<!-- table: {script}/{table} -->")
    first = next(k for k in range(start + 1, len(lines)) if lines[k].strip().startswith("|"))
    last = first
    while last + 1 < len(lines) and lines[last + 1].strip().startswith("|"):
        last += 1
    lines[first:last + 1] = markdown(data["columns"], data["rows"]).splitlines()
    readme.write_text("\n".join(lines) + "\n")
