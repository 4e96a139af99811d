"""otlp.verifiers: batched torch verification rules with exact acceptance, and ``certify``.

>>> from otlp.verifiers import NAMES, get
>>> v = get("spechub")
>>> draft = v.make_draft([0.5, 0.3, 0.2], 2)
>>> round(v.acceptance([0.1, 0.6, 0.3], draft), 12)
1.0

``NAMES`` lists every registered rule; :func:`register` adds one. The multi-step rules ``"bv"``, ``"gbv"`` and
``"optimal_block"`` (``kind == "multistep"``) verify blocks of L tokens on one or K paths: see
:mod:`otlp.verifiers.multistep` and ``otlp.multistep.certify_multistep`` (``otlp certify-block``); the others
verify one token among n drafts.
"""

from __future__ import annotations

from collections.abc import Callable

from otlp.core.errors import InputError
from otlp.verifiers.base import Verifier
from otlp.verifiers.greedy import GreedyOptimal
from otlp.verifiers.importance import ImportanceSampling, WeightedImportanceSampling
from otlp.verifiers.kseq import KSeq
from otlp.verifiers.multistep import BlockVerification, GreedyBlockVerification, OptimalBlockVerification
from otlp.verifiers.optimal import Optimal
from otlp.verifiers.optimal_paths import OptimalPaths
from otlp.verifiers.optimal_wor import OptimalWithoutReplacement
from otlp.verifiers.rrs import RecursiveRejection, RecursiveRejectionWithoutReplacement
from otlp.verifiers.spechub import SpecHubVerifier
from otlp.verifiers.sps import SingleDraft

_FACTORIES: dict[str, Callable[..., object]] = {
    "sps": SingleDraft,
    "rrs": RecursiveRejection,
    "rrs_wor": RecursiveRejectionWithoutReplacement,
    "kseq": KSeq,
    "spechub": SpecHubVerifier,
    "is": ImportanceSampling,
    "weighted_is": WeightedImportanceSampling,
    "greedy": GreedyOptimal,
    "optimal": Optimal,
    "optimal_wor": OptimalWithoutReplacement,  # alpha* for drafts without replacement, on the draft's support
    "optimal_paths": OptimalPaths,  # alpha*, then the most continuing drafted paths (issue 18; LP-backed, host side)
    "bv": BlockVerification,  # multi-step: block verification (GBV paper, Sun et al. 2024b), one path of L tokens
    "gbv": GreedyBlockVerification,  # multi-step: greedy multi-path block verification, K paths of L tokens
    "optimal_block": OptimalBlockVerification,  # multi-step: the optimal K-path rule (Thm 4.6), table models
}

#: Registered rule names, in table order (a list, extended in place by :func:`register`).
NAMES: list[str] = list(_FACTORIES)


def register(name: str, factory: Callable[..., object]) -> None:
    """Add a verification rule under ``name`` (hook for ``"bv"`` / ``"gbv"``); ``factory(**options)`` builds it."""
    if name in _FACTORIES:
        raise InputError(f"a verifier named {name!r} is already registered")
    _FACTORIES[name] = factory
    NAMES.append(name)


def get(name: str, **options: object) -> Verifier:
    """The verifier registered as ``name`` (options, e.g. ``s`` for ``"is"``, go to its constructor)."""
    if name not in _FACTORIES:
        raise InputError(f"unknown verifier {name!r}; expected one of {', '.join(NAMES)}")
    return _FACTORIES[name](**options)


__all__ = ["NAMES", "Verifier", "get", "register"]
