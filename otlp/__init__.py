"""otlp: optimal multi-draft speculative sampling.

The public API is kept short: the draft schemes, ``optimal_acceptance`` (alpha*), ``OptimalTransport`` (the exact
optimal rule), ``verifier(name)`` (a registered batched rule), ``certify`` (does a verifier preserve p, and how far is
it from alpha*) and the errors. Everything else lives in the subpackages, which load on first use, so
``import otlp`` stays light: it loads neither torch nor the C kernels. Bottom up (docs/ARCHITECTURE.md):
``core`` (the maths), ``backend`` (C kernels, threads, CUDA graphs), ``lp`` (IR, formulations, solvers), the rules
(``optimal``, ``verifiers``, ``certification``, ``multistep``, ``engines``) and the applications (``decode``,
``sweep``, ``theorems``, ``cli``).
"""

from __future__ import annotations

import importlib

from otlp.core.drafts import IID, Greedy, Independent, Joint, SpecHub, WithoutReplacement
from otlp.core.errors import InputError, MissingDependencyError, ModelTooLargeError
from otlp.core.subsets import optimal_acceptance

__version__ = "0.1.0"

_SUBPACKAGES = ("core", "backend", "lp", "optimal", "verifiers", "certification", "multistep", "engines", "decode",
                "sweep", "theorems", "cli")

__all__ = [
    "IID",
    "Greedy",
    "Independent",
    "InputError",
    "Joint",
    "MissingDependencyError",
    "ModelTooLargeError",
    "OptimalTransport",
    "SpecHub",
    "WithoutReplacement",
    "certify",
    "optimal_acceptance",
    "verifier",
    *_SUBPACKAGES,
]


def certify(fn_or_name: object, p: object, draft: object = None, **kwargs: object):  # noqa: ANN201 - a report
    """Does a verifier preserve p, and how far is it from alpha*? See :func:`otlp.certification.rule.certify`.

    ``fn_or_name``: a registered rule name, or any function ``fn(p [B, V], q, drafts [B, n], generator) -> tokens
    [B]`` or ``(tokens, accepted_index)`` (or ``"package.module:function"``), certified by a sequential test on
    samples (exactly by enumeration when it exposes ``conditional``): ``samples=`` is then the sample limit, and
    ``alpha=``, ``tolerance=`` the error rate and the TV to rule out. The report has ``.acceptance``, ``.optimum``
    (alpha*), ``.gap`` and ``.preserves_target`` (True / False, or None when inconclusive), and for a function also
    ``.tv``, ``.tv_lower``, ``.tv_upper``, ``.p_value``, ``.samples`` and ``.detectable_tv``.
    """
    from otlp.certification.rule import certify as _certify

    return _certify(fn_or_name, p, draft, **kwargs)


def verifier(name: str, **options: object):  # noqa: ANN201 - a Verifier
    """The registered verification rule ``name`` (one of ``otlp.verifiers.NAMES``), e.g. ``verifier("optimal")``:
    its ``sample(p, q, drafts, generator)`` is the batched torch sampler, ``acceptance(p, draft)`` its exact
    acceptance. Same as :func:`otlp.verifiers.get`."""
    from otlp.verifiers import get

    return get(name, **options)


def __getattr__(name: str) -> object:
    if name == "OptimalTransport":
        from otlp.optimal.transport import OptimalTransport

        globals()[name] = OptimalTransport
        return OptimalTransport
    if name in _SUBPACKAGES:
        module = importlib.import_module(f"otlp.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'otlp' has no attribute {name!r}")
