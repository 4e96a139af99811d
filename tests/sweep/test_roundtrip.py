"""capture -> sweep on the embedded n-gram pair, checked against the one-pair APIs (otlp.optimal_acceptance and
each verifier's acceptance), the aggregates against the per-pair table, and the CLI end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.sweep.conftest import results

pytest.importorskip("pyarrow")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def embedded_capture(tmp_path_factory):  # noqa: ANN001, ANN201
    from otlp.cli.decode import DEFAULT_PROMPTS, load_model_pair
    from otlp.decode.loop import decode
    from otlp.sweep import CaptureWriter

    pair = load_model_pair(None, None)
    prompts = [pair.encode(t) for t in DEFAULT_PROMPTS]
    path = tmp_path_factory.mktemp("cap") / "embedded"
    with CaptureWriter(path, pair.target.vocab_size, storage="dense", shard_rows=25) as w:
        result = decode(pair.draft, pair.target, "rrs", 2, 3, prompts=prompts, max_new_tokens=10, capture=w)
    return path, result


def test_capture_holds_every_verification_node(embedded_capture):  # noqa: ANN001
    from otlp.sweep import open_capture

    path, result = embedded_capture
    cap = open_capture(path)
    m = result.metrics
    assert cap.rows == sum(m.reached_per_position)  # one node per (walking prompt, depth) of every step
    assert cap.V == 2000 and cap.storage == "dense" and len(cap.shards) == -(-cap.rows // 25)
    blocks = [cap.read(i) for i in range(len(cap.shards))]
    depth = np.concatenate([b.meta["depth"] for b in blocks])
    assert [int((depth == j).sum()) for j in range(3)] == m.reached_per_position
    width = np.concatenate([b.meta["width"] for b in blocks])
    assert set(np.unique(width).tolist()) <= {1.0, 2.0} and (width[depth == 0] == 2).all()  # the root holds n
    assert blocks[0].models == [("embedded-kn2-v2000", "embedded-kn4-v2000")]
    assert (blocks[0].meta["temperature"] == 1.0).all() and np.isnan(blocks[0].meta["top_k"]).all()
    p = np.concatenate([b.p for b in blocks])
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-12)
    # step roots: context ids 0..A-1 of the first step are the prompts in order, at position 0
    first = blocks[0]
    roots = (first.meta["depth"] == 0) & (first.meta["position"] == 0)
    assert first.meta["sequence"][roots].tolist() == first.meta["context_id"][roots].tolist() == [0, 1, 2, 3]


def test_sweep_matches_the_one_pair_apis(embedded_capture, tmp_path):  # noqa: ANN001
    import otlp
    from otlp.sweep import open_capture, run_sweep
    from otlp.verifiers import get

    path, _ = embedded_capture
    rules = ["sps", "rrs", "kseq", "spechub", "greedy", "rrs_wor"]
    res = run_sweep(path, ns=(1, 2, 4), verifiers=rules, top_ks=(0, 8), out=tmp_path / "out", workers=1)
    cols = results(res.pairs_path)
    cap = open_capture(path)
    K, N = 2, 3
    assert len(cols["n"]) == cap.rows * K * N
    p = np.concatenate([cap.read(i).p for i in range(len(cap.shards))])
    q = np.concatenate([cap.read(i).q for i in range(len(cap.shards))])
    rng = np.random.default_rng(0)
    for r in rng.choice(len(cols["n"]), 12, replace=False):
        i = int(cols["shard"][r]) * 25 + int(cols["row"][r])
        n, k = int(cols["n"][r]), int(cols["q_top_k"][r])
        qk = q[i]
        if k:
            keep = np.argsort(-qk, kind="stable")[:k]
            qk = np.zeros_like(qk)
            qk[keep] = q[i][keep]
            qk /= qk.sum()
        assert abs(cols["alpha_star"][r] - otlp.optimal_acceptance(p[i], otlp.IID(qk, n))) < 1e-12
        for name in ("sps", "rrs", "kseq", "greedy"):
            rule = get(name)
            assert abs(cols[f"acc_{name}"][r] - rule.acceptance(p[i], rule.make_draft(qk, n))) < 1e-12
        assert np.isnan(cols["acc_spechub"][r]) == (n != 2)
        if n <= 2:  # rrs_wor's closed form (otlp/verifiers/rrs_wor_acceptance.py)
            rule = get("rrs_wor")
            assert abs(cols["acc_rrs_wor"][r] - rule.acceptance(p[i], rule.make_draft(qk, n))) < 1e-12
    # alpha* is the optimum for i.i.d. drafts: no i.i.d. rule beats it
    for name in ("sps", "rrs", "kseq"):
        assert np.nanmin(cols[f"gap_{name}"]) > -1e-12
    assert np.array_equal(cols["alpha_star"], cols["alpha_star_lower"])  # dense: no tail
    # rrs_wor at W = V = 2000: a closed form at n <= 2; at n = 4 enumeration (2000^4 tuples x 2000 tokens > 2^20
    # cells) is skipped and said so
    assert set(res.report["skipped"]["rrs_wor"]) == {"4"}
    assert "enumerates W^n = 2000^4 tuples" in res.report["skipped"]["rrs_wor"]["4"]
    assert np.isnan(cols["acc_rrs_wor"]).any() and np.isnan(cols["acc_rrs_wor"][cols["n"] == 4]).all()
    assert not np.isnan(cols["acc_rrs_wor"][cols["n"] <= 2]).any()
    # aggregates = means of the per-pair table
    by_n = {(r["q_top_k"], r["n"]): r for r in res.report["summary"]["by_n"]}
    for (k, n), row in by_n.items():
        sel = (cols["q_top_k"] == k) & (cols["n"] == n)
        assert row["pairs"] == cap.rows
        assert abs(row["alpha_star"] - cols["alpha_star"][sel].mean()) < 1e-12
        assert abs(row["gap_kseq"] - cols["gap_kseq"][sel].mean()) < 1e-12
    depth_rows = [r for r in res.report["summary"]["by_depth"] if r["q_top_k"] == 0 and r["n"] == 4]
    assert sum(r["pairs"] for r in depth_rows) == cap.rows
    assert all((tmp_path / "out" / f).is_file() for f in ("sweep_acceptance.png", "sweep_gaps.png", "sweep.json"))
    assert "mean acceptance by n" in res.table()


def test_cli_decode_capture_then_sweep(tmp_path, capsys):  # noqa: ANN001
    from otlp.cli.commands import main

    cap = tmp_path / "cap"
    assert main(["decode", "--batch", "2", "--max-new-tokens", "6", "--L", "2", "--no-baseline", "--no-progress",
                 "--capture", str(cap), "--capture-top-k", "32", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["capture"]["nodes"] > 0 and report["capture"]["storage"] == "sparse"
    assert main(["sweep", str(cap), "--n", "1,2", "--verifiers", "rrs", "--top-k", "all,32", "--json",
                 "--workers", "1", "--no-plots"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["computed"] == out["shards"] == 1 and out["capture"]["rows"] == report["capture"]["nodes"]
    assert out["capture"]["provenance"]["source"] == "otlp decode"
    assert main(["decode", "--batch", "1", "--max-new-tokens", "2", "--no-baseline", "--capture", str(cap)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("otlp: error: ") and "not empty" in err[0]
