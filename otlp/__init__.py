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


def certify(fn_or_name: object, p: object, draft: object = None, **kwargs: object):  # noqa: ANN201 - a report
    """Does a verifier preserve p, and how far is it from alpha*? See :func:`otlp.verifiers.certification.certify`.

    ``fn_or_name``: a registered rule name, or any function ``fn(p [B, V], q, drafts [B, n], generator) -> tokens
    [B]`` or ``(tokens, accepted_index)`` (or ``"package.module:function"``), certified by a sequential test on
    samples (exactly by enumeration when it exposes ``conditional``): ``samples=`` is then the sample limit, and
    ``alpha=``, ``tolerance=`` the error rate and the TV to rule out. The report has ``.acceptance``, ``.optimum``
    (alpha*), ``.gap`` and ``.preserves_target`` (True / False, or None when inconclusive), and for a function also
    ``.tv``, ``.tv_lower``, ``.tv_upper``, ``.p_value``, ``.samples`` and ``.detectable_tv``.
    """
    from otlp.verifiers.certification import certify as _certify

    return _certify(fn_or_name, p, draft, **kwargs)


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES:
        module = importlib.import_module(f"otlp.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'otlp' has no attribute {name!r}")
