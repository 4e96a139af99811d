"""benchmarks/device_buckets_rates.py on a tiny size: the device bucket rule gives the CPU route's tokens on every
row of every draft kind and dtype (the script's exit status and totals), each batch has its own seed, and a row that
differs is printed with its reproducer and fails the run (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from ..kernels import fresh

torch = pytest.importorskip("torch")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = ["--B", "6", "--V", "600", "--n", "2", "3", "--threads", "0", "--progress", "0"]


@pytest.fixture()
def rates():
    spec = importlib.util.spec_from_file_location("device_buckets_rates", BENCH / "device_buckets_rates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_run_agrees_with_the_cpu_route_on_every_row(rates, capsys):
    with pytest.raises(SystemExit) as end:
        rates.main([*TINY, "--dtype", "float32", "bfloat16", "float64", "--batches", "2"])
    out = capsys.readouterr().out
    rows = 6 * 2 * 2 * 4 * 3  # B, batches, n, drafts, dtypes
    assert end.value.code == 0, out
    assert f"0 of {rows} rows differ from the CPU route" in out
    totals = [line for line in out.splitlines() if "rows differ; round 0" in line]
    assert len(totals) == 4 * 3  # a total per (V, draft, dtype), its counts adding up to its rows
    for line in totals:
        found = re.search(r"(\d+) of (\d+) rows differ; round 0 (\d+), round 1 (\d+), fallback (\d+)", line)
        differ, rows_, *rounds = map(int, found.groups())
        assert differ == 0 and rows_ == 6 * 2 * 2 and sum(rounds) == rows_, line
    assert "rows done" in out and "DIFFER" not in out


def test_every_batch_has_its_own_seed(rates):
    keys = list(itertools.product([2048, 32_000, 128_000], [2, 4, 8], rates.DTYPES, range(200)))
    assert len({rates.seed(0, *k) for k in keys}) == len(keys)
    assert rates.seed(0, 32_000, 4, "float32", 0) == 31 * 4 + 32_000  # the earlier runs' rows


def test_a_differing_row_is_reported_and_fails_the_run(rates, monkeypatch, capsys):
    decide = rates.DB.decide

    def off_by_one(p, q, w, U, **options):  # noqa: ANN001, ANN003, ANN202 - the rule with row 1's token moved
        d = decide(p, q, w, U, **options)
        tokens = d.tokens.clone()
        tokens[1] = (tokens[1] + 1) % p.shape[1]
        return rates.DB.Decision(tokens, d.index, d.rounds, d.spilled, d.overflow, d.selected)

    monkeypatch.setattr(rates.DB, "decide", off_by_one)
    with pytest.raises(SystemExit) as end:
        rates.main([*TINY, "--n", "2", "--drafts", "0.5", "--start", "3"])
    out = capsys.readouterr().out
    assert end.value.code == 1
    s = rates.seed(0, 600, 2, "float32", 3)
    assert f"DIFFER V 600 n 2 draft 0.5 dtype float32 seed {s} B 6 row 1:" in out
    assert "1 of 6 rows differ from the CPU route" in out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on masked-out lanes
def test_the_cuda_route_runs_interpreted_and_agrees(rates, monkeypatch, capsys):
    """``--passes route`` (get("optimal")'s CUDA route, its fallback kernel included) under ``TRITON_INTERPRET=1``:
    every row agrees with the CPU route, the tied rows through the fallback kernel."""
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; torch's CUDA builds ship it)")
    from otlp.optimal import device_fallback, device_passes, triton_roots

    with fresh(monkeypatch, device_fallback._kernel, device_passes._kernels, triton_roots._kernel):
        with pytest.raises(SystemExit) as end:
            rates.main([*TINY, "--n", "2", "--drafts", "0.5", "ties", "--passes", "route"])
    out = capsys.readouterr().out
    assert end.value.code == 0 and "0 of 12 rows differ from the CPU route" in out, out
    ties = re.search(r"draft  ties  float32: 0 of 6 rows differ; round 0 \d+, round 1 \d+, fallback (\d+)", out)
    assert ties and int(ties.group(1)) > 0, out
