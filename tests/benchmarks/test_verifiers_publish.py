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


def test_the_grid_with_three_drafts_publishes_one_table_with_a_draft_column(vb, capsys) -> None:
    drafts = [(0.5, 0.81), (None, 0.1), (1.0, 0.64)]  # run order need not be the table's
    rows = [r for noise, tv in drafts for r in _grid(vb, draft_noise=noise, draft_acceptance=tv)]
    vb.publish(rows, {})
    capsys.readouterr()
    assert set(vb.published) == {"cuda"}
    cols, cells = vb.published["cuda"]
    assert cols[:2] == ["draft", "1 - TV"] and len(cells) == 3 * 36
    assert [c[0] for c in cells[::36]] == ["loose", "sigma 1", "sigma 0.5"]
    assert [c[1] for c in cells[::36]] == ["0.10", "0.64", "0.81"]
    assert [c[2:5] for c in cells[:2]] == [["2,000", "2", "1"], ["2,000", "2", "8"]]  # the grid's order inside
    vb.published.clear()
    vb.publish(rows[:-1], {})  # one draft's grid short of a point: no table
    capsys.readouterr()
    assert vb.published == {}


def test_a_draft_that_is_neither_loose_nor_a_sigma_is_refused(vb, capsys) -> None:
    for bad in ("close", "-1"):
        with pytest.raises(SystemExit) as exc:
            vb.main(["--device", "cpu", "--drafts", "loose", bad])
        assert exc.value.code == 2
        assert "error: --drafts" in capsys.readouterr().err


def test_a_draft_top_k_run_times_optimal_wor_and_publishes_nothing(vb, tmp_path, capsys) -> None:
    """--draft-top-k: drafts of the filtered draft, distinct per row, so optimal_wor runs beside rrs_wor; the run is
    saved, never published; optimal_wor without it, or a K below n, is refused in one line."""
    vb.main(["--draft-top-k", "5", "--rules", "rrs_wor", "optimal_wor", "--device", "cpu", "--threads", "1",
             "--drafts", "1", "--V", "300", "--B", "4", "--n", "3", "--reps", "1", "--out", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert "optimal_wor / rrs_wor" in out and vb.published == {}
    p, q, drafts = vb._inputs(4, 300, 3, "cpu", noise=1.0)
    assert ((q > 0).sum(1) == 5).all() and (q.gather(1, drafts) > 0).all()
    assert all(len(set(row)) == 3 for row in drafts.tolist())
    for argv, message in ((["--rules", "optimal_wor"], "needs --draft-top-k"),
                          (["--draft-top-k", "2", "--n", "3"], "fewer tokens than n = 3")):
        with pytest.raises(SystemExit):
            vb.main(argv)
        assert message in capsys.readouterr().err
