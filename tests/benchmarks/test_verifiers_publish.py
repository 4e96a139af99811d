"""benchmarks/verifiers.py: which docs/COST.md tables a finished run publishes, and which runs it refuses (no timings
are asserted here).

Eager and CUDA-graph rows are kept apart: a partial run (``--compile --V 128000 --B 64``, say) publishes only its
compiled table and never overwrites a whole-grid table with a few points; a rule that a CUDA graph could not capture
reads "-" in its column.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def vb(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports readme_tables from beside it
    spec = importlib.util.spec_from_file_location("verifiers_bench", BENCH / "verifiers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    published = {}
    monkeypatch.setattr(sys.modules["readme_tables"], "publish",
                        lambda script, name, cols, cells, settings: published.setdefault(name, (cols, cells)))
    module.published = published
    return module


def _row(vb, V: int, n: int, B: int, **extra) -> dict:
    return {"device": "cuda", "threads": 16, "V": V, "n": n, "B": B, "read_floor_ms": 0.1,
            **{f"{x}_ms": 1.0 + k for k, x in enumerate(vb.RULES)}, **extra}


def _grid(vb, **extra) -> list[dict]:
    return [_row(vb, V, n, B, **extra) for V in vb.SIZES for n in (2, 4, 8) for B in (1, 8, 64)]


def test_a_whole_grid_publishes_its_eager_and_its_graph_table_apart(vb, capsys) -> None:
    graphed = _grid(vb, graphs=True)
    del graphed[0]["kseq_ms"]
    graphed[0]["kseq_graph_error"] = "operation not permitted when stream is capturing"
    vb.publish(_grid(vb) + graphed, {})
    capsys.readouterr()
    assert set(vb.published) == {"cuda", "cuda_graphs"}
    cols, cells = vb.published["cuda_graphs"]
    assert len(cells) == 36 and cells[0][cols.index("kseq")] == "-" and cells[1][cols.index("kseq")] == "4.00"
    assert vb.published["cuda"][1][0][cols.index("kseq")] == "4.00"
    assert cells[0][-1] == f"{5.0 / 2.0:.2f}"  # optimal / rrs


def test_a_partial_compiled_run_publishes_only_its_compiled_tables(vb, capsys) -> None:
    extra = {"optimal_compiled_ms": 2.5, "optimal_compiled_mismatches": 0}
    rows = [_row(vb, 128_000, n, 64, **extra) for n in (2, 4, 8)]
    vb.publish(rows + [_row(vb, 128_000, n, 64, graphs=True, **extra) for n in (2, 4, 8)], {})
    capsys.readouterr()
    assert set(vb.published) == {"cuda_compiled", "cuda_graphs_compiled"}
    cols, cells = vb.published["cuda_graphs_compiled"]
    assert len(cells) == 3 and cells[0][cols.index("compiled / rrs")] == f"{2.5 / 2.0:.2f}"


def test_cuda_only_options_without_cuda_calls_are_refused(vb, capsys) -> None:
    import torch

    for argv in (["--device", "cpu", "--graph"], ["--device", "cpu", "--compile"]) + (
            () if torch.cuda.is_available() else (["--device", "cuda"],)):
        with pytest.raises(SystemExit) as exc:
            vb.main(argv)
        assert exc.value.code == 2
        assert "error: --" in capsys.readouterr().err
