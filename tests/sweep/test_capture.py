"""The capture format: sparse storage and its tail-mass bound against dense storage, the writer's checks, the npz
example, and one-line refusals of bad captures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.sweep.conftest import assert_identical, lm_pairs, results, write_capture

pytest.importorskip("pyarrow")


def test_sparse_rows_keep_the_top_k_of_p_and_q_and_the_tails(tmp_path):  # noqa: ANN001
    from otlp.sweep import open_capture

    rng = np.random.default_rng(1)
    p, q = lm_pairs(rng, 40, 300)
    p[0] = 0.0
    p[0, :4] = 0.25  # ties at the boundary: all four kept at k = 2
    write_capture(tmp_path / "s", p, q, storage="sparse", top_k=2, shard_rows=100)
    block = open_capture(tmp_path / "s").read(0)
    assert block.sparse and block.p.shape[0] == 40
    for m in range(40):
        stored_p = set(np.flatnonzero(block.p[m, 1:] > 0))  # columns of S holding p mass
        assert len(stored_p) >= 2
        top_p = np.sort(p[m])[::-1]
        assert abs(block.p_tail[m] - (1.0 - np.sort(block.p[m, 1:])[::-1].sum())) < 1e-12
        assert block.p_tail[m] <= 1.0 - top_p[:2].sum() + 1e-12
        assert block.q_tail[m] <= 1.0 - np.sort(q[m])[::-1][:2].sum() + 1e-12
    assert (block.p[0, 1:] == 0.25).sum() == 4 and block.p_tail[0] == 0.0


@pytest.mark.parametrize("k", [4, 32])
def test_sparse_alpha_star_is_within_the_stated_tail_bound_of_the_dense_one(tmp_path, k):  # noqa: ANN001
    """alpha*' - min(P_T, 1 - (1 - Q_T)^n) <= alpha* <= alpha*' (proof: otlp/sweep/capture.py), and exact with a
    draft top-k <= the stored k."""
    from otlp.sweep import run_sweep

    rng = np.random.default_rng(k)
    p, q = lm_pairs(rng, 120, 500, noise=1.5)
    flat_p, flat_q = rng.dirichlet(np.ones(500), 8), rng.dirichlet(np.ones(500), 8)  # heavy tails: a wide interval
    p, q = np.vstack([p, flat_p]), np.vstack([q, flat_q])
    write_capture(tmp_path / "d", p, q, storage="dense", shard_rows=64)
    write_capture(tmp_path / "s", p, q, storage="sparse", top_k=k, shard_rows=64)
    kw = {"ns": (1, 2, 3, 8), "verifiers": "none", "top_ks": (0, min(k, 4)), "workers": 1, "plots": False}
    dense = results(run_sweep(tmp_path / "d", out=tmp_path / "od", **kw).pairs_path)
    sparse = results(run_sweep(tmp_path / "s", out=tmp_path / "os", **kw).pairs_path)
    assert np.array_equal(dense["n"], sparse["n"]) and np.array_equal(dense["row"], sparse["row"])
    full = dense["q_top_k"] == 0
    exact, upper, lower = dense["alpha_star"], sparse["alpha_star"], sparse["alpha_star_lower"]
    assert (exact[full] <= upper[full] + 1e-12).all()
    assert (exact[full] >= lower[full] - 1e-12).all()
    assert (upper[full] - exact[full]).max() > 1e-6  # the tail does move alpha* (the bound is not idle)
    bound = upper - lower
    n = sparse["n"].astype(float)
    assert (bound[full] <= n[full] * 1.0).all()
    # q truncated to at most the stored top-k: no q mass in the tail, so the collapsed pair gives alpha* exactly
    assert np.allclose(exact[~full], upper[~full], rtol=0, atol=1e-12)
    assert np.array_equal(upper[~full], lower[~full])


def test_writer_refuses_bad_rows_in_one_line(tmp_path):  # noqa: ANN001
    from otlp.core.errors import InputError
    from otlp.sweep import CaptureWriter

    rng = np.random.default_rng(2)
    p, q = lm_pairs(rng, 3, 50)
    with CaptureWriter(tmp_path / "w", 50) as w:
        with pytest.raises(InputError, match=r"q has V = 49 entries per row, expected V = 50.*p has 50, q has 49"):
            w.add(p, q[:, :49])
        with pytest.raises(InputError, match="p has 3 rows and q has 2"):
            w.add(p, q[:2])
        bad = p.copy()
        bad[1, 0] = -0.1
        with pytest.raises(InputError, match="p row 1 has a negative entry"):
            w.add(bad, q)
        with pytest.raises(InputError, match="q row 0 sums to"):
            w.add(p, q * 1.01)
        with pytest.raises(InputError, match="unknown capture column"):
            w.add(p, q, layer=3)
        w.add(p, q * (1 + 1e-6), depth=[0, 1, 2])  # float32-level rounding is renormalised
    with pytest.raises(InputError, match="exists and is not empty"):
        CaptureWriter(tmp_path / "w", 50)


def test_npz_example_converts_and_sweeps(tmp_path, capsys):  # noqa: ANN001
    from otlp.cli.commands import main
    from otlp.sweep import open_capture
    from otlp.sweep.npz_example import main as convert_main

    rng = np.random.default_rng(3)
    p, q = lm_pairs(rng, 30, 64)
    np.savez(tmp_path / "pairs.npz", p=p.astype(np.float32), q=q.astype(np.float32), depth=np.arange(30) % 3)
    assert convert_main([str(tmp_path / "pairs.npz"), str(tmp_path / "cap"), "--storage", "dense"]) == 0
    assert "wrote 30 pairs" in capsys.readouterr().out
    cap = open_capture(tmp_path / "cap")
    assert cap.rows == 30 and cap.manifest["provenance"]["source"] == "npz pairs.npz"
    assert main(["sweep", str(tmp_path / "cap"), "--n", "2", "--verifiers", "rrs", "--workers", "1", "--no-plots",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["depth"] for r in report["summary"]["by_depth"]] == [0, 1, 2]
    np.savez(tmp_path / "bad.npz", p=p, q=q[:, :63])
    assert convert_main([str(tmp_path / "bad.npz"), str(tmp_path / "cap2")]) == 2
    assert "p and q must be arrays [M, V] of one shape" in capsys.readouterr().err


def _one_line_error(capsys, argv) -> str:  # noqa: ANN001
    from otlp.cli.commands import main

    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otlp: error: "), captured.err
    assert captured.out == ""
    return lines[0]


@pytest.fixture()
def small_capture(tmp_path):  # noqa: ANN001, ANN201
    rng = np.random.default_rng(4)
    p, q = lm_pairs(rng, 40, 32)
    return write_capture(tmp_path / "cap", p, q, storage="dense", shard_rows=10)


def test_missing_shard(small_capture, capsys, tmp_path):  # noqa: ANN001
    (small_capture / "shard-00002.parquet").unlink()
    line = _one_line_error(capsys, ["sweep", str(small_capture), "--out", str(tmp_path / "o")])
    assert "shard shard-00002.parquet listed in manifest.json is missing" in line
    assert not (tmp_path / "o" / "pairs.parquet").exists()


def test_corrupt_shard(small_capture, capsys, tmp_path):  # noqa: ANN001
    f = small_capture / "shard-00001.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different content
    f.write_bytes(bytes(data))
    line = _one_line_error(capsys, ["sweep", str(small_capture), "--workers", "1", "--out", str(tmp_path / "o")])
    assert "shard shard-00001.parquet is corrupt: its SHA-256 differs" in line
    assert not (tmp_path / "o" / "pairs.parquet").exists()
    f.write_bytes(b"not parquet")
    line = _one_line_error(capsys, ["sweep", str(small_capture), "--out", str(tmp_path / "o")])
    assert "has 11 bytes, the manifest lists" in line


@pytest.mark.parametrize("workers", ["1", "2"])
def test_bad_shards_are_all_reported_after_the_good_ones_are_computed(small_capture, capsys, tmp_path,  # noqa: ANN001
                                                                      workers):
    """Issue 44: a corrupt shard no longer stops the sweep at the first failure. Every good shard is computed and
    saved, every bad one is named, the line says the results were kept, and the re-run resumes from them."""
    originals = {name: (small_capture / name).read_bytes() for name in ("shard-00001.parquet", "shard-00003.parquet")}
    flipped = bytearray(originals["shard-00001.parquet"])
    flipped[len(flipped) // 2] ^= 0xFF  # same size: only the SHA-256 (read in a worker) sees it
    (small_capture / "shard-00001.parquet").write_bytes(bytes(flipped))
    (small_capture / "shard-00003.parquet").write_bytes(b"short")  # seen by a stat, before any work
    out = tmp_path / "o"
    argv = ["sweep", str(small_capture), "--workers", workers, "--no-plots", "--out", str(out)]
    line = _one_line_error(capsys, argv)
    assert "2 of 4 shards are bad: shard shard-00001.parquet is corrupt: its SHA-256 differs" in line
    assert "shard shard-00003.parquet has 5 bytes, the manifest lists" in line
    assert f"The other 2 shards' results are saved under {out / 'results'} (2 computed now, 0 reused)" in line
    assert "run the same command again, it resumes and computes only those" in line
    assert len(list((out / "results").glob("*.parquet"))) == 2 and not (out / "pairs.parquet").exists()

    for name, data in originals.items():
        (small_capture / name).write_bytes(data)
    from otlp.cli.commands import main

    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["computed"], report["reused"]) == (2, 2)
    fresh = tmp_path / "fresh"
    assert main(["sweep", str(small_capture), "--workers", "1", "--no-plots", "--out", str(fresh), "--json"]) == 0
    capsys.readouterr()
    assert_identical(results(out / "pairs.parquet"), results(fresh / "pairs.parquet"))


def test_open_capture_names_every_missing_or_resized_shard(small_capture):  # noqa: ANN001
    from otlp.core.errors import InputError
    from otlp.sweep import open_capture

    (small_capture / "shard-00000.parquet").unlink()
    (small_capture / "shard-00002.parquet").write_bytes(b"x")
    with pytest.raises(InputError, match="shard shard-00000.parquet listed in manifest.json is missing; "
                                         "shard shard-00002.parquet has 1 bytes"):
        open_capture(small_capture)
    assert len(open_capture(small_capture, check_shards=False).shards) == 4


def test_top_k_zero_is_refused_and_top_k_at_least_v_is_said(small_capture, tmp_path):  # noqa: ANN001
    """Issue 44: --top-k 0 was taken silently as "untruncated" (0 is the internal code), and so was a top-k >= V."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}

    def sweep(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "otlp.cli", "sweep", str(small_capture), "--workers", "1",
                               "--n", "1,2", "--no-plots", "--out", str(tmp_path / "o"), *extra], env=env,
                              capture_output=True, text=True, timeout=60)

    for value in ("0", "4,0", "-3"):
        done = subprocess.run([sys.executable, "-m", "otlp.cli", "sweep", str(small_capture), "--top-k", value],
                              env=env, capture_output=True, text=True, timeout=3)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("otlp: error: --top-k: values must be >= 1 (or 'all' for no truncation)")
    done = sweep("--top-k", "5000,4", "--json")
    assert done.returncode == 0, done.stderr
    note = "otlp sweep: note: --top-k 5000 >= V = 32 keeps all of q: run as untruncated (q_top_k 0, the same as 'all')"
    assert done.stderr.strip() == note
    report = json.loads(done.stdout)
    assert report["q_top_ks"] == [0, 4] and report["notes"] == [note.removeprefix("otlp sweep: note: ")]
    assert sweep("--top-k", "31").stderr == ""  # below V: truncated, nothing to say


def test_unreadable_parquet_with_a_matching_manifest(tmp_path):  # noqa: ANN001
    """A shard that Parquet cannot parse is refused in one line even when the manifest was written for it."""
    from otlp.core.errors import InputError
    from otlp.sweep import open_capture
    from otlp.sweep.capture import sha256_bytes

    rng = np.random.default_rng(5)
    p, q = lm_pairs(rng, 5, 16)
    path = write_capture(tmp_path / "cap", p, q)
    shard = path / "shard-00000.parquet"
    data = b"PAR1" + bytes(100) + b"PAR1"
    shard.write_bytes(data)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["shards"][0].update(bytes=len(data), sha256=sha256_bytes(data))
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="is not a readable Parquet file"):
        open_capture(path).read(0)


def test_future_schema_version(small_capture, capsys):  # noqa: ANN001
    mpath = small_capture / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["schema_version"] = 99
    mpath.write_text(json.dumps(manifest))
    line = _one_line_error(capsys, ["sweep", str(small_capture)])
    assert "schema version 99 is newer than this otlp reads (up to 1); upgrade otlp" in line


def test_v_mismatch_between_p_and_q_in_a_shard(tmp_path, capsys):  # noqa: ANN001
    """A shard written by another tool with p and q of different lengths (the writer itself refuses such rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from otlp.sweep.capture import CaptureWriter, sha256_bytes

    rng = np.random.default_rng(6)
    p, q = lm_pairs(rng, 4, 16)
    path = tmp_path / "cap"
    CaptureWriter(path, 16, storage="dense").close()  # an empty capture: manifest only
    table = pa.table({"depth": pa.array([0] * 4, pa.int16()),
                      "p": pa.array([row.tolist() for row in p]), "q": pa.array([row[:15].tolist() for row in q])})
    pq.write_table(table, path / "shard-00000.parquet")
    data = (path / "shard-00000.parquet").read_bytes()
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["shards"] = [{"file": "shard-00000.parquet", "rows": 4, "bytes": len(data), "sha256": sha256_bytes(data)}]
    (path / "manifest.json").write_text(json.dumps(manifest))
    line = _one_line_error(capsys, ["sweep", str(path), "--workers", "1", "--out", str(tmp_path / "o")])
    assert "row 0 has 16 entries of p and 15 of q; p and q must have the same length (V mismatch" in line


def test_not_a_capture_and_bad_arguments(tmp_path, capsys, small_capture):  # noqa: ANN001
    (tmp_path / "empty").mkdir()
    assert "no manifest.json" in _one_line_error(capsys, ["sweep", str(tmp_path / "empty")])
    assert "--n: 'x' is not an integer" in _one_line_error(capsys, ["sweep", str(small_capture), "--n", "1,x"])
    assert "unknown verifier 'nope'" in _one_line_error(capsys, ["sweep", str(small_capture), "--verifiers", "nope"])
    assert "multi-step" in _one_line_error(capsys, ["sweep", str(small_capture), "--verifiers", "bv"])


def test_without_the_extra_one_line_names_otlp_sweep(small_capture, capsys, monkeypatch):  # noqa: ANN001
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    line = _one_line_error(capsys, ["sweep", str(small_capture)])
    assert "pip install 'otlp[sweep]'" in line and "pyarrow" in line


def test_gap_plot_gives_each_n_one_colour_and_says_which_panels_are_skipped():
    """Issue 44: sweep_gaps.png cycled colours per drawn line, so spechub's only curve (n = 2) took n = 1's colour,
    and the panel of a rule skipped at every n was empty with no note."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from otlp.sweep.report import GAP_BINS, gap_figure, gap_panels

    ns = [1, 2, 4]
    counts = np.ones(len(GAP_BINS) - 1)
    hist = {(0, n, "rrs"): counts for n in ns} | {(0, 2, "spechub"): counts}
    enum = "exact acceptance enumerates W^n = 32^4 tuples x W = 32 tokens = 3.4e+07 cells, over the limit 1e+06"
    report = {"verifiers": ["rrs", "spechub", "rrs_wor"], "n": ns, "q_top_ks": [0], "capture": {"rows": 40, "V": 32},
              "skipped": {"spechub": {"1": "defined for n = 2 only", "4": "defined for n = 2 only"},
                          "rrs_wor": {str(n): enum for n in ns}}}
    panels = {p["rule"]: p for p in gap_panels(report, hist)}
    assert [(n, c) for n, c, _ in panels["rrs"]["lines"]] == [(1, "C0"), (2, "C1"), (4, "C2")]
    assert [(n, c) for n, c, _ in panels["spechub"]["lines"]] == [(2, "C1")]
    assert panels["rrs"]["note"] == ""
    assert panels["spechub"]["note"] == "n = 1, 4: skipped, defined for n = 2 only"
    assert panels["rrs_wor"]["note"] == "n = 1, 2, 4: skipped for every n, over --max-enum-cells"

    fig = gap_figure(report, hist, plt)
    try:
        rrs, spechub, rrs_wor = fig.axes[:3]
        drawn = {ax.get_title(): [(line.get_label(), to_hex(line.get_color())) for line in ax.lines]
                 for ax in (rrs, spechub, rrs_wor)}
        assert drawn["gap alpha* - spechub"] == [("n = 2", to_hex("C1"))]
        assert drawn["gap alpha* - rrs"][1] == ("n = 2", to_hex("C1"))
        assert drawn["gap alpha* - rrs_wor"] == []
        assert [t.get_text().replace("\n", " ") for t in rrs_wor.texts] == [panels["rrs_wor"]["note"]]
        assert [t.get_text().replace("\n", " ") for t in spechub.texts] == [panels["spechub"]["note"]]
        assert len(rrs.texts) == 0
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["n = 1", "n = 2", "n = 4"]
    finally:
        plt.close(fig)


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_add_never_writes_into_the_callers_arrays_and_takes_read_only_ones(tmp_path, storage):  # noqa: ANN001
    """Rows off by up to atol are renormalised into new arrays: the caller's (live engine buffers, or read-only
    arrays from ``open_capture().read()``) stay bit-identical, and what is written is what was passed then."""
    from otlp.sweep import CaptureWriter, open_capture

    rng = np.random.default_rng(7)
    p, q = lm_pairs(rng, 6, 50)
    p *= 1.0 + 5e-5  # within the default atol 1e-4: renormalised when written
    q *= 1.0 - 5e-5
    p_bytes, q_bytes = p.tobytes(), q.tobytes()
    ro_p, ro_q = p.copy(), q.copy()
    ro_p.flags.writeable = False
    ro_q.flags.writeable = False
    with CaptureWriter(tmp_path / "c", 50, storage=storage, top_k=50, shard_rows=4) as w:
        w.add(p, q)
        assert p.tobytes() == p_bytes and q.tobytes() == q_bytes
        w.add(ro_p, ro_q)  # raised "output array is read-only" before
        assert ro_p.tobytes() == p_bytes and ro_q.tobytes() == q_bytes
        w.add(p[0], q[0])  # one [V] pair: also a view of the caller's array
        assert p.tobytes() == p_bytes and q.tobytes() == q_bytes
        p[:] = 0.0  # an engine reusing its buffer after add: what was added is already the capture's own copy
        q[:] = 0.0
    cap = open_capture(tmp_path / "c")
    blocks = [cap.read(i) for i in range(len(cap.shards))]
    assert sum(b.rows for b in blocks) == 13
    if storage == "dense":
        got = np.concatenate([b.p for b in blocks])  # [13, V]
        want = ro_p / ro_p.sum(axis=1, keepdims=True)  # np.sum's last bit can depend on the array's alignment
        assert np.array_equal(got[6:12], want) and np.allclose(got[:6], want, rtol=1e-15, atol=0)
        with CaptureWriter(tmp_path / "d", 50, storage=storage) as w2:  # the loader's blocks straight back in
            for b in blocks:
                before = b.p.tobytes()
                w2.add(b.p, b.q)
                assert b.p.tobytes() == before
