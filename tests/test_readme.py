"""The README's example runs and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs_and_matches_its_comments():
    text = README.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert float(lines[0]) == 0.85
    assert abs(float(lines[1]) - 0.85) < 1e-12
    assert lines[2] == "0.85 True"
    assert float(lines[3]) == 1.0
    assert lines[4].startswith("0.85") and "[0. 1. 0.]" in lines[4]
    assert abs(float(lines[5]) - 0.0350) < 5e-5
