"""Which sampler the large-V target-law test runs: a rule's torch sampler only for the draft schemes it implements
(``Verifier.torch_sampler_schemes()``), an exact numpy sampler (``Verifier.sample_exact``) for the others. The optimal
rule's torch sampler is the i.i.d. rule only (``solve_batch(p, q, n)``), although the rule itself (numpy,
``OptimalTransport(p, draft)``) is exact for every enumerable scheme."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import otlp
import otlp.certification.rule as certify_module
from otlp.certification.rule import certify, sampler_test
from otlp.core.errors import InputError
from otlp.verifiers import get
from otlp.verifiers.optimal import Optimal
from otlp.verifiers.rrs import RecursiveRejection

SCHEMES = {
    "iid": lambda p, q: otlp.IID(q, 2),
    "independent": lambda p, q: otlp.Independent([q, p]),
    "without_replacement": lambda p, q: otlp.WithoutReplacement(q, 2),
    "greedy": lambda p, q: otlp.Greedy(q, 2),
    "spechub": lambda p, q: otlp.SpecHub(q),
    "joint": lambda p, q: otlp.Joint(np.outer(q, p)),
    "without_replacement_3": lambda p, q: otlp.WithoutReplacement(q, 3),
    "greedy_3": lambda p, q: otlp.Greedy(q, 3),
}


def _pair(V: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_optimal_certify_chi_square_path_every_scheme(monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    """The chi-square path of certify("optimal", ...) at V = 5 (EXACT_CELLS lowered so that the path is taken; the
    i.i.d. torch rule is off by up to 0.04 in law on these drafts, which 3000 samples detect)."""
    monkeypatch.setattr(certify_module, "EXACT_CELLS", 0)
    p, q = _pair(5)
    r = certify("optimal", p, SCHEMES[scheme](p, q), certificate=False, samples=3000)
    assert "chi-square" in r.target_check and r.preserves_target, r.target_check
    assert r.acceptance == pytest.approx(otlp.optimal_acceptance(p, SCHEMES[scheme](p, q)), abs=1e-9)
    used = r.method["target_law"]
    assert used in r.target_check
    if scheme == "iid":
        assert used.startswith("torch sampler Optimal.sample")
    else:
        assert used.startswith("exact numpy sampler Optimal.sample_exact")


@pytest.mark.parametrize("scheme", ["greedy", "spechub"])
def test_optimal_certify_large_vocabulary_small_support(scheme: str) -> None:
    """The unpatched chi-square path (V = 300, n = 2: 2.7e7 cells > EXACT_CELLS): Greedy and SpecHub drafts have
    about V tuples of positive probability, so their LP route stays small."""
    p, q = _pair(300)
    draft = SCHEMES[scheme](p, q)
    assert draft.num_tuples() * draft.V > certify_module.EXACT_CELLS
    r = certify("optimal", p, draft, certificate=False, samples=4000)
    assert "chi-square" in r.target_check and r.preserves_target, r.target_check
    assert "numpy" in r.method["target_law"]


def test_optimal_torch_sampler_is_the_iid_rule() -> None:
    v = get("optimal")
    assert v.torch_sampler_schemes() == ("iid",)
    assert set(v.torch_sampler_schemes()) < {v.scheme, *v.compatible_schemes}
    assert get("rrs").torch_sampler_schemes() == ("iid",)
    assert get("weighted_is").torch_sampler_schemes() == ("independent", "iid")
    p = torch.full((2, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(InputError, match="i.i.d."):
        v.sample(p, p.unsqueeze(1).expand(2, 2, 3), torch.zeros(2, 2, dtype=torch.int64))


def test_generic_exact_sampler_draws_from_the_conditional() -> None:
    """Verifier.sample_exact (base class: inverse CDF of ``conditional``, in chunks) against the exact law of one
    tuple repeated 20000 times; chunks of 7 rows exercise the chunk boundaries."""
    v = RecursiveRejection()
    p, q = _pair(6, seed=3)
    draft = otlp.IID(q, 2)
    omegas = np.tile(np.array([[1, 4]]), (20_000, 1))
    tokens, accepts = v.sample_exact(p, draft, omegas, np.random.default_rng(0), max_cells=7 * 6)
    law, rule_accepts = v.conditional(p, draft, omegas[:1])
    freq = np.bincount(tokens, minlength=6) / tokens.size
    assert np.abs(freq - law[0]).max() <= 5 * np.sqrt(0.25 / tokens.size)
    assert np.allclose(accepts, rule_accepts[0], atol=1e-15)


def test_sampler_test_uses_the_numpy_path_outside_torch_schemes() -> None:
    class NumpyOnly(RecursiveRejection):
        torch_schemes = ()

    p, q = _pair(40, seed=4)
    t = sampler_test(NumpyOnly(), p, otlp.IID(q, 3), 3000, max_cells=400)
    assert t.passed and t.sampler.startswith("exact numpy sampler NumpyOnly.sample_exact")
    assert sampler_test(RecursiveRejection(), p, otlp.IID(q, 3), 3000).sampler.startswith("torch sampler")

    class Biased(NumpyOnly):  # negative control: the numpy path still tests something
        def conditional(self, p, draft, omegas):  # noqa: ANN001, ANN202
            law = np.zeros((omegas.shape[0], p.size))
            law[np.arange(omegas.shape[0]), omegas[:, 0]] = 1.0
            return law, np.ones(omegas.shape[0])

    assert not sampler_test(Biased(), p, otlp.IID(q, 3), 3000).passed


def test_sampler_test_per_draft_q_rule_on_a_scheme_without_q() -> None:
    """A per-draft-q rule whose torch sampler claims Joint drafts: Joint carries no q, so the numpy path runs."""

    class PerDraft(Optimal):
        per_draft_q = True
        torch_schemes = ("iid", "joint")

    p, q = _pair(5)
    t = sampler_test(PerDraft(), p, otlp.Joint(np.outer(q, p)), 2000)
    assert t.passed and "numpy" in t.sampler
    with pytest.raises(InputError, match="expects a 'independent' draft scheme"):
        sampler_test(get("weighted_is"), p, otlp.Joint(np.outer(q, p)), 100)


def test_optimal_transport_reused_for_the_same_instance() -> None:
    v = get("optimal")
    p, q = _pair(5)
    draft = otlp.Independent([q, p])
    ot = v.transport(p, draft)
    assert v.transport(p.copy(), draft) is ot
    assert v.transport(p[::-1].copy(), draft) is not ot
    assert v.transport(p, otlp.Independent([q, p])) is not v.transport(p, draft)
