"""otlp decode / otlp bench acceptance entry points, the alpha* sweep and the token-law comparison."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

import otlp
from otlp.cli.commands import main
from otlp.cli.decode import add_acceptance_arguments, add_decode_arguments, run_acceptance_cli, run_decode_cli
from otlp.core.subsets import brute_force_min_psi
from otlp.decode.acceptance import acceptance_sweep, iid_optimal_acceptance, top_k_draft
from otlp.decode.metrics import compare_token_laws


def test_iid_alpha_star_matches_otlp_and_brute_force():
    rng = np.random.default_rng(3)
    V, M = 7, 40
    p = rng.dirichlet(np.full(V, 0.4), size=M)
    q = rng.dirichlet(np.full(V, 0.4), size=M)
    p[:5, 0] = 0.0  # zeros on either side
    p[:5] /= p[:5].sum(1, keepdims=True)
    q[5:10, 1] = 0.0
    q[5:10] /= q[5:10].sum(1, keepdims=True)
    for n in (1, 2, 3, 5):
        got = iid_optimal_acceptance(p, q, n)
        want = [otlp.optimal_acceptance(p[m], otlp.IID(q[m], n)) for m in range(M)]
        brute = [1 + brute_force_min_psi(p[m], otlp.IID(q[m], n))[0] for m in range(M)]
        np.testing.assert_allclose(got, want, atol=1e-12)
        np.testing.assert_allclose(got, brute, atol=1e-12)
    np.testing.assert_allclose(iid_optimal_acceptance(p, q, 1), np.minimum(p, q).sum(1), atol=1e-12)


def test_top_k_truncates_q_only_and_sweep_is_monotone_in_n():
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.full(30, 0.3), size=20)
    q = rng.dirichlet(np.full(30, 0.3), size=20)
    qk = top_k_draft(q, 5)
    assert ((qk > 0).sum(1) <= 5).all() and np.allclose(qk.sum(1), 1)
    sweep = acceptance_sweep(p, q, [1, 2, 4], [5, None])
    alpha = np.array(sweep["alpha"])  # [K, N]
    assert (np.diff(alpha, axis=1) >= -1e-12).all()  # alpha*(n+1) >= alpha*(n) (GR identities)
    assert sweep["pairs"] == 20


def test_token_law_comparison():
    rng = np.random.default_rng(0)
    a = [rng.choice(5, size=2000, p=[0.4, 0.3, 0.2, 0.05, 0.05]).tolist()]
    b = [rng.choice(5, size=2000, p=[0.4, 0.3, 0.2, 0.05, 0.05]).tolist()]
    c = [rng.choice(5, size=2000, p=[0.2, 0.2, 0.2, 0.2, 0.2]).tolist()]
    assert compare_token_laws(a, b, 5)["p_value"] > 1e-3
    far = compare_token_laws(a, c, 5)
    assert far["p_value"] < 1e-6 and far["tv"] > 0.1


def _parse(adder, argv):
    return adder(argparse.ArgumentParser()).parse_args(argv)


def test_decode_cli_on_the_embedded_default(capsys):
    args = _parse(add_decode_arguments, ["--n", "2", "--L", "3", "--max-new-tokens", "24", "--batch", "2",
                                         "--no-progress", "--json"])
    assert run_decode_cli(args) == 0
    report = json.loads(capsys.readouterr().out)
    m = report["metrics"]
    assert m["n"] == 2 and m["L"] == 3 and m["verifier"] == "rrs" and m["scheme"] == "iid"
    assert 1.0 <= m["block_efficiency"] <= 4.0
    assert len(m["acceptance_per_position"]) == 3
    assert m["verifier_calls"] >= m["target_calls"] > 0  # one call per step at the root at least
    assert report["baseline"]["target_calls"] == 24
    assert set(report["baseline"]["token_law"]) >= {"tv", "p_value"}
    floor = report["baseline"]["token_law_plain_vs_plain"]  # two plain runs of the same law and length
    assert 0.0 < floor["tv"] < 1.0 and floor["tokens"] == report["baseline"]["token_law"]["tokens"][::-1]


def test_decode_cli_text_output_and_bad_input(capsys):
    args = _parse(add_decode_arguments, ["--verifier", "spechub", "--max-new-tokens", "8", "--batch", "1",
                                         "--no-progress", "--no-baseline", "--prompt", "the file",
                                         "--no-cuda-graphs"])  # (on the CPU the flag changes nothing)
    assert run_decode_cli(args) == 0
    out = capsys.readouterr().out
    assert "block efficiency" in out and "spechub" in out
    assert main(["decode", "--verifier", "nope", "--no-progress"]) == 2  # bad input: InputError -> one line, 2
    assert "unknown --verifier" in capsys.readouterr().err
    assert main(["decode", "--draft", "ngram:2", "--target", "/no/such/dir", "--no-progress"]) == 2


def test_bench_acceptance_writes_table_and_png(tmp_path, capsys):
    args = _parse(add_acceptance_arguments, ["--pairs", "24", "--ns", "1,2,4", "--top-ks", "10,all",
                                             "--out", str(tmp_path)])
    assert run_acceptance_cli(args) == 0
    out = capsys.readouterr().out
    assert "n=4" in out and "V=2000" in out
    sweep = json.loads((tmp_path / "acceptance_sweep.json").read_text())
    assert sweep["pairs"] == 24 and len(sweep["alpha"]) == 2
    assert (tmp_path / "acceptance_sweep.png").read_bytes()[:4] == b"\x89PNG"
    alpha = np.array(sweep["alpha"])
    assert (np.diff(alpha, axis=1) >= -1e-12).all()  # more drafts never hurt; top-k has no such guarantee
    assert main(["bench", "acceptance", "--ns", "0"]) == 2


@pytest.mark.parametrize("spec", ["ngram:x", "ngram:0"])
def test_bad_model_specs(spec, capsys):
    assert main(["decode", "--draft", spec, "--target", "ngram:3", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("otlp: error:") and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch must be an integer >= 1, got 0"),
    (["--batch", "-1"], "--batch must be an integer >= 1, got -1"),
    (["--device", "bogus"], "--device 'bogus' is not a torch device"),
    (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),
    (["--top-p", "0"], "--top-p must be"),
    (["--n", "0"], "--n must be an integer >= 1"),
])
def test_decode_arguments_are_checked_before_any_model_is_built(argv, message, capsys, monkeypatch):
    import otlp.cli.decode as cli

    def no_models(*a, **k):
        raise AssertionError("a model was built before the arguments were checked")

    monkeypatch.setattr(cli, "load_model_pair", no_models)
    assert main(["decode", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("otlp: error: ") and message in err and err.count("\n") == 1
