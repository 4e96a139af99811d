"""The block rules' explicit-uniforms path (``sample(..., uniforms=u)``, as serving engines pass randomness): bv and gbv
take ``[B, 2]`` (tau's coin, the correction's uniform), optimal_block ``[B, 3]`` (the ranking's first).

* Coupling: the generator path draws exactly those numbers in that order, so uniforms taken from a generator seeded
  alike give the same (path, tau, Y) bit for bit: the two paths have the same law.
* Law: with uniforms from an unrelated source (float32 torch.rand, cast), the output sequences follow the exact
  enumerated law (Pearson chi-square at level ALPHA = 1e-6 as tests/multistep/stats.py: a correct sampler fails
  this seeded test with probability 1e-6).
* Replay: fixed uniforms give the same output on every call; bad uniforms get a one-line InputError.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chi2

import otlp.verifiers as zoo
from otlp.core.errors import InputError
from otlp.multistep import output_law, random_pair
from otlp.multistep.armodel import num_nodes, prefix_nodes

ALPHA = 1e-6
RULES = ["bv", "gbv", "optimal_block"]


def _step(name: str, size: int, seed: int, V: int = 3, L: int = 2, K: int = 2):  # noqa: ANN202
    target, draft = random_pair(V, L, np.random.default_rng(seed))
    v = zoo.get(name)
    K = v.fixed_paths or K
    tokens = draft.sample_paths(L, (size, K), torch.Generator().manual_seed(seed))  # [size, K, L]
    p, q = target.on_path(tokens, L + 1), draft.on_path(tokens, L)
    kw = {"rule": v.prepare(target, draft, L, K)} if name == "optimal_block" else {}
    if v.fixed_paths == 1:
        tokens, p, q = tokens[:, 0], p[:, 0], q[:, 0]

    def run(generator=None, uniforms=None):  # noqa: ANN001, ANN202
        return v.sample(tokens, p, q, generator, uniforms=uniforms, **kw)

    return v, target, draft, tokens, run


@pytest.mark.parametrize("name", RULES)
def test_uniforms_from_a_generator_give_the_generator_paths_output(name):
    v, _, _, tokens, run = _step(name, 500, seed=1)
    B = tokens.shape[0]
    want = run(generator=torch.Generator().manual_seed(9))
    g = torch.Generator().manual_seed(9)
    u = torch.stack([torch.rand(B, generator=g, dtype=torch.float64) for _ in range(v.UNIFORM_COLUMNS)], dim=1)
    got = run(uniforms=u)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    again = run(uniforms=u.clone())  # fixed uniforms replay bit for bit
    for a, b in zip(again, got, strict=True):
        assert torch.equal(a, b)
    assert int(got.tau.max()) > 0 and int(got.tau.min()) < tokens.shape[-1]  # both outcomes occurred


@pytest.mark.parametrize("name", RULES)
def test_the_uniforms_path_follows_the_exact_law(name):
    size = 60_000
    v, target, draft, tokens, run = _step(name, size, seed=4)
    L = tokens.shape[-1]
    u = torch.rand(size, v.UNIFORM_COLUMNS, generator=torch.Generator().manual_seed(5)).double()  # float32 grid
    out = run(uniforms=u)
    paths = tokens if tokens.dim() == 3 else tokens[:, None]
    chosen = paths[torch.arange(size), out.path_index]  # [size, L]
    nodes = prefix_nodes(chosen, target.V).gather(1, out.tau[:, None])[:, 0] * target.V + 1 + out.correction
    K = 1 if tokens.dim() == 2 else tokens.shape[1]
    R = output_law("optimal" if name == "optimal_block" else name, target, draft, L, K)
    observed = np.bincount(nodes.numpy(), minlength=num_nodes(target.V, L + 1))
    support = R > 1e-15
    assert observed[~support].sum() == 0
    expected = size * R[support]
    stat = float(((observed[support] - expected) ** 2 / expected).sum())
    assert chi2.sf(stat, int(support.sum()) - 1) > ALPHA


@pytest.mark.parametrize("name", RULES)
def test_bad_uniforms_are_refused_in_one_line(name):
    v, _, _, tokens, run = _step(name, 8, seed=2)
    B, k = tokens.shape[0], v.UNIFORM_COLUMNS
    for bad, match in ((torch.rand(B, k + 1), f"shape \\[{B}, {k}\\]"), (torch.ones(B, k), r"in \[0, 1\)"),
                       (torch.zeros(B, k, dtype=torch.long), "floating point")):
        with pytest.raises(InputError, match=match) as err:
            run(uniforms=bad)
        assert "\n" not in str(err.value)
