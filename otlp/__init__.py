"""otlp: optimal multi-draft speculative sampling.

The public API is kept short: the draft schemes, ``optimal_acceptance`` (alpha*), ``certify`` and the errors.
Everything else lives in the subpackages, which load on first use (``otlp.formulations``, ``otlp.solvers``,
``otlp.optimal``, ``otlp.verifiers``, ``otlp.proofs_check``, ``otlp.decode``, ``otlp.multistep``), so
``import otlp`` stays light and never imports torch.
"""

from __future__ import annotations

import importlib

from otlp.drafts import IID, Greedy, Independent, Joint, SpecHub, WithoutReplacement
from otlp.errors import InputError, MissingDependencyError, ModelTooLargeError
from otlp.subsets import optimal_acceptance

__version__ = "0.1.0"

_SUBPACKAGES = ("formulations", "solvers", "optimal", "verifiers", "proofs_check", "decode", "multistep")

__all__ = [
    "IID",
    "Greedy",
    "Independent",
    "InputError",
    "Joint",
    "MissingDependencyError",
    "ModelTooLargeError",
    "SpecHub",
    "WithoutReplacement",
    "certify",
    "optimal_acceptance",
    *_SUBPACKAGES,
]


def certify(name: str, p: object, draft: object = None, **kwargs: object):  # noqa: ANN201 - CertifyReport
    """How far verifier ``name`` is from the optimum for ``draft``: see :func:`otlp.verifiers.certification.certify`.

    The report has ``.acceptance`` (P(output in set(omega))), ``.verifier_acceptance``, ``.optimum`` (alpha*),
    ``.gap`` and ``.preserves_target``.
    """
    from otlp.verifiers.certification import certify as _certify

    return _certify(name, p, draft, **kwargs)


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES:
        module = importlib.import_module(f"otlp.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'otlp' has no attribute {name!r}")
