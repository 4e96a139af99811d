"""The decode loop's step through the SGLang-style adapter (``decode(..., engine="sglang")``, otlp/decode/engine.py).

* The encoding: the loop's merged tree in first-child / next-sibling form, equal sibling tokens sharing one child
  list (checked on a hand-built step).
* Same tokens for the same uniforms: with ``engine="sglang"`` the run emits exactly the tokens (and the metrics) of
  the loop's own walk driven by the same per-step uniforms (``uniforms=True``), for every rule the adapter runs, on a
  toy pair with V = 5 where drafted paths repeat tokens (merged nodes) in most steps.
* The law: the accepted-length law of the engine path equals the loop's own generator path (a two-sample
  chi-square on the tau histogram of one step per prompt), and the emitted stream has the target's law (chi-square
  against the exact law of the first 3 tokens). Seeded, so deterministic; each test at level ALPHA = 1e-3, so a
  correct implementation fails a fresh seed with probability 1e-3 per test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from otlp.core.errors import InputError
from otlp.decode import engine as E
from otlp.decode.loop import decode

from .toy_models import TableLM, chi_square_p_value, exact_sequence_law, sequence_codes

ALPHA = 1e-3
V, T = 5, 3


@pytest.fixture(scope="module")
def toy_pair():
    rng = np.random.default_rng(17)
    target = TableLM.random(V, 2, rng)
    draft = TableLM.random(V, 1, rng, concentration=1.0)
    return draft, target, [1, 2]


def test_the_encoding_merges_equal_siblings_into_one_child_list():
    # three paths of two tokens: paths 0 and 1 share their first token 7, path 2 starts with 9
    drafts = torch.tensor([[[7, 3], [7, 4], [9, 5]]])  # [A = 1, n = 3, L = 2]
    candidates, next_token, next_sibling, first = E.encode(drafts)
    # node ids: 0 root; depth 0: 1, 2, 3 (paths 0, 1, 2); depth 1: 4, 5, 6
    assert candidates.tolist() == [[0, 7, 7, 9, 3, 4, 5]]
    assert next_token.tolist() == [[1, 4, 4, 6, -1, -1, -1]]  # nodes 1 and 2 (both token 7) share children 4, 5
    assert next_sibling.tolist() == [[-1, 2, 3, -1, 5, -1, -1]]
    assert first[0, :, 1].tolist() == [0, 0, 2] and first[0, :, 2].tolist() == [0, 1, 2]


def test_a_step_through_the_adapter_continues_into_every_path_of_the_accepted_token():
    # p puts all mass on the drafted tokens: the root accepts token 7 (paths 0 and 1), then either 3 or 4
    A, n, L = 1, 3, 2
    drafts = torch.tensor([[[7, 3], [7, 4], [9, 5]]])
    p_all = torch.zeros(A, n, L + 1, 10, dtype=torch.float64)
    p_all[:, :, 0, 7] = 1.0  # the root: 7 surely
    p_all[:, :, 1, 4] = 1.0  # after 7: 4 surely (path 1's token, the second child of the merged node)
    p_all[:, :, 2, 0] = 1.0  # the bonus
    q_all = torch.full((A, n, L, 10), 0.1, dtype=torch.float64)
    coins, finals = torch.full((A, n, L), 0.5, dtype=torch.float64), torch.full((A,), 0.5, dtype=torch.float64)
    for method in E.ENGINE_VERIFIERS:
        if method == "optimal_wor":  # its rule is for distinct children: the repeated 7 is refused, not verified
            with pytest.raises(InputError, match="not distinct"):
                E.sglang_step(p_all, q_all, drafts, coins, finals, method)
            continue
        out, tau, path = E.sglang_step(p_all, q_all, drafts, coins, finals, method)
        assert out.tolist() == [[7, 4, 0]] and tau.tolist() == [3] and path.tolist() == [1], method


@pytest.mark.parametrize("method", E.ENGINE_VERIFIERS)
def test_the_engine_path_emits_the_loops_tokens_for_the_same_uniforms(toy_pair, method):
    draft, target, prompt = toy_pair
    merged = []
    step = E.sglang_step

    def spy(p_all, q_all, drafts, *args):  # noqa: ANN001, ANN002, ANN202 - records repeated root tokens
        d = drafts[:, :, 0]
        merged.append(int((d[:, :, None] == d[:, None, :]).sum() - d.numel()))
        return step(p_all, q_all, drafts, *args)

    kw = dict(prompts=[prompt] * 60, max_new_tokens=12, seed=5)
    own = decode(draft, target, method, 3, 3, uniforms=True, **kw)
    E_step, E.sglang_step = E.sglang_step, spy
    import otlp.decode.loop as loop

    loop_step, loop.sglang_step = loop.sglang_step, spy
    try:
        via = decode(draft, target, method, 3, 3, engine="sglang", **kw)
    finally:
        E.sglang_step, loop.sglang_step = E_step, loop_step
    assert via.tokens == own.tokens
    for key in ("tokens", "sequence_steps", "block_efficiency", "acceptance_per_position", "rule_acceptance"):
        assert getattr(via.metrics, key) == getattr(own.metrics, key), key
    assert via.metrics.engine == "sglang" and own.metrics.engine is None
    if not method.endswith("_wor"):  # i.i.d. drafts: repeated tokens among the root's children (merged nodes) occurred
        assert sum(merged) > 0


def _tau_histogram(result, L: int) -> np.ndarray:
    """Counts of tau = 1..L + 1 from one step per prompt: #(tau > j) = reached[j] for j < L, and #(tau > L) = the
    walks that continued past depth L - 1."""
    m = result.metrics
    above = np.array(m.reached_per_position + [round(m.acceptance_per_position[L - 1] * m.reached_per_position[L - 1])])
    return np.append(above[:-1] - above[1:], above[-1])


@pytest.mark.parametrize("method", ["optimal", "rrs"])
def test_the_engine_paths_accepted_length_law_is_the_loops(toy_pair, method):
    """Two independent samples of tau (one step for each of 3000 prompts): the loop's own walk with its generator,
    and the engine path; a chi-square test of homogeneity on the 2 x (L + 1) table at level ALPHA."""
    draft, target, prompt = toy_pair
    L, prompts = 3, [prompt] * 3000
    own = decode(draft, target, method, 3, L, prompts=prompts, max_new_tokens=1, seed=21)
    via = decode(draft, target, method, 3, L, prompts=prompts, max_new_tokens=1, seed=22, engine="sglang")
    table = np.array([_tau_histogram(own, L), _tau_histogram(via, L)])
    assert table.sum(axis=1).tolist() == [3000, 3000]
    table = table[:, table.min(axis=0) > 0]
    p_value = stats.chi2_contingency(table)[1]
    assert p_value > ALPHA, (method, table.tolist(), p_value)


def test_the_engine_paths_stream_has_the_target_law(toy_pair):
    draft, target, prompt = toy_pair
    law = exact_sequence_law(target, prompt, T)
    result = decode(draft, target, "optimal", 3, 2, prompts=[prompt] * 3000, max_new_tokens=T, seed=9,
                    engine="sglang")
    p_value = chi_square_p_value(sequence_codes(result.tokens, V, T), law)
    assert p_value > ALPHA, p_value


@pytest.mark.parametrize("kwargs, match", [
    (dict(engine="vllm"), "engine must be one of"),
    (dict(engine="sglang", verifier="kseq"), "verifier among"),
    (dict(engine="sglang", capture=object()), "capture"),
    (dict(uniforms=True, verifier=lambda p, q, d, g: (d[:, 0], d[:, 0] * 0)), "takes uniforms"),
])
def test_bad_engine_settings_are_refused(toy_pair, kwargs, match):
    draft, target, prompt = toy_pair
    verifier = kwargs.pop("verifier", "optimal")
    with pytest.raises(InputError, match=match):
        decode(draft, target, verifier, 2, 2, prompts=[prompt], max_new_tokens=2, **kwargs)


def test_otlp_decode_runs_its_steps_through_the_engine(capsys):
    from otlp.cli.commands import main

    argv = ["decode", "--verifier", "optimal", "--n", "2", "--L", "3", "--max-new-tokens", "12", "--batch", "2",
            "--no-progress", "--no-baseline", "--json", "--seed", "4"]
    assert main([*argv, "--engine", "sglang"]) == 0
    import json

    m = json.loads(capsys.readouterr().out)["metrics"]
    assert m["engine"] == "sglang" and 1.0 <= m["block_efficiency"] <= 4.0 and m["verifier_calls"] == m["target_calls"]
    assert main(["decode", "--engine", "sglang", "--verifier", "kseq", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("otlp: error: --engine sglang") and err.count("\n") == 1
