"""The multi-step verifier objects behind ``otlp.verifiers.get("bv")`` / ``get("gbv")``.

The registry entries are added by the lead in ``otlp/verifiers/__init__.py``; until then this test registers the
objects itself (and removes them again afterwards, so other tests see the registry unchanged).
"""

from collections.abc import Iterator

import numpy as np
import pytest
import torch

import otlp.verifiers as zoo
from otlp.core.errors import InputError
from otlp.multistep import bv_efficiency, gbv_efficiency, output_law, random_pair
from otlp.multistep.bv import bv
from otlp.multistep.gbv import gbv
from otlp.verifiers.multistep import BlockVerification, GreedyBlockVerification


@pytest.fixture
def registry() -> Iterator[None]:
    added = []
    for name, factory in (("bv", BlockVerification), ("gbv", GreedyBlockVerification)):
        if name not in zoo.NAMES:
            zoo.register(name, factory)
            added.append(name)
    yield
    for name in added:  # undo only what this test added
        zoo.NAMES.remove(name)
        zoo._FACTORIES.pop(name)


def test_get_returns_the_multistep_objects(registry: None) -> None:
    v, g = zoo.get("bv"), zoo.get("gbv")
    assert isinstance(v, BlockVerification) and isinstance(g, GreedyBlockVerification)
    assert (v.name, v.scheme, v.kind) == ("bv", "block", "multistep")
    assert (g.name, g.scheme, g.kind) == ("gbv", "block_multipath", "multistep")
    with pytest.raises(InputError, match="multi-step"):
        v.make_draft([0.5, 0.5], 2)  # single-token tables skip it as "not applicable"


def test_exact_quantities_agree_with_the_multistep_functions(registry: None) -> None:
    rng = np.random.default_rng(0)
    v, g = zoo.get("bv"), zoo.get("gbv")
    for V, L, K in ((2, 2, 2), (3, 2, 2), (2, 3, 1)):
        target, draft = random_pair(V, L, rng)
        assert v.block_efficiency(target, draft, L) == bv_efficiency(target, draft, L)
        assert g.block_efficiency(target, draft, L, K) == gbv_efficiency(target, draft, L, K)
        assert g.block_efficiency(target, draft, L, 1) == pytest.approx(v.block_efficiency(target, draft, L),
                                                                        abs=1e-12)
        np.testing.assert_array_equal(g.output_law(target, draft, L, K), output_law("gbv", target, draft, L, K))
        np.testing.assert_array_equal(v.output_law(target, draft, L), output_law("bv", target, draft, L, 1))
        with pytest.raises(InputError, match="gbv"):
            v.block_efficiency(target, draft, L, 2)  # BV verifies exactly one path


def test_sample_delegates_to_the_torch_samplers(registry: None) -> None:
    rng = np.random.default_rng(1)
    V, L, K, B = 3, 2, 2, 64
    target, draft = random_pair(V, L, rng)
    tokens = draft.sample_paths(L, (B, K), torch.Generator().manual_seed(0))  # [B, K, L]
    p_paths, q_paths = target.on_path(tokens, L + 1), draft.on_path(tokens, L)
    got = zoo.get("gbv").sample(tokens, p_paths, q_paths, torch.Generator().manual_seed(5))
    want = gbv(tokens, p_paths, q_paths, torch.Generator().manual_seed(5))
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    got = zoo.get("bv").sample(tokens[:, 0], p_paths[:, 0], q_paths[:, 0], torch.Generator().manual_seed(6))
    want = bv(tokens[:, 0], p_paths[:, 0], q_paths[:, 0], torch.Generator().manual_seed(6))
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert bool((got.tau >= 0).all() and (got.tau <= L).all())


def test_fresh_process_imports_in_any_order() -> None:
    # the objects must load and sample before anything else of otlp.multistep is imported (import-cycle guard)
    import subprocess
    import sys

    code = ("import otlp.verifiers.multistep as m, torch\n"
            "d = torch.zeros(2, 2, dtype=torch.int64); p = torch.full((2, 3, 2), 0.5); q = torch.full((2, 2, 2), 0.5)\n"
            "out = m.BlockVerification().sample(d, p, q, torch.Generator().manual_seed(0))\n"
            "assert out.tau.tolist() == [2, 2], out\n"
            "out = m.GreedyBlockVerification().sample(d[:, None], p[:, None], q[:, None])\n"
            "assert out.tau.tolist() == [2, 2], out\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
