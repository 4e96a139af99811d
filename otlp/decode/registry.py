"""Turn a verifier given by name or as a callable into ``sample(p, q, drafts, generator)`` and its draft scheme.

Names are looked up in the verifier zoo (``otlp.verifiers.get(name)``); the block verifiers are refused (the loop
verifies token by token).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from otlp.core.errors import InputError
from otlp.decode.draft_sampling import SCHEMES

Verifier = Callable[..., tuple]

#: The draft scheme each zoo verifier expects (SPEC.md: each verifier is paired with its draft scheme).
DEFAULT_SCHEMES = {
    "sps": "iid",
    "rrs": "iid",
    "rrs_wor": "without_replacement",
    "kseq": "iid",
    "spechub": "spechub",
    "is": "iid",
    "weighted_is": "iid",
    "greedy": "greedy",
    "optimal": "iid",
    "optimal_wor": "without_replacement",
    "optimal_paths": "iid",
}
#: Block verifiers decide on whole paths, not token by token; the tree loop does not drive them.
BLOCK_VERIFIERS = ("bv", "gbv", "optimal_block")  # the multi-step rules (kind "multistep" in otlp.verifiers)
_SCHEME_ALIASES = {"IID": "iid", "WithoutReplacement": "without_replacement", "Greedy": "greedy",
                   "SpecHub": "spechub", "wor": "without_replacement"}


@dataclass(frozen=True)
class ResolvedVerifier:
    sample: Verifier
    name: str
    scheme: str
    per_draft_q: bool = False  # sample() takes q as [B, n, V] (one law per draft)


def _zoo_get(name: str) -> object | None:
    from otlp import verifiers  # here, not at import: ``otlp decode --help`` stays free of torch

    return verifiers.get(name) if name in verifiers.NAMES else None


def _scheme_of(obj: object) -> str | None:
    for attr in ("scheme", "draft_scheme"):
        value = getattr(obj, attr, None)
        if isinstance(value, str):
            return _SCHEME_ALIASES.get(value, value)
        if isinstance(value, type):
            return _SCHEME_ALIASES.get(value.__name__)
    return None


def resolve_verifier(verifier: str | Verifier, scheme: str | None = None) -> ResolvedVerifier:
    """The callable, its name and the draft scheme to use (``scheme`` overrides the verifier's own)."""
    if scheme is not None and scheme not in SCHEMES:
        raise InputError(f"unknown draft scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    if callable(verifier) and not isinstance(verifier, str):
        name = getattr(verifier, "name", getattr(verifier, "__name__", type(verifier).__name__))
        return ResolvedVerifier(verifier, str(name), scheme or _scheme_of(verifier) or "iid")
    if not isinstance(verifier, str):
        raise InputError(f"verifier must be a name or a callable, got {type(verifier).__name__}")
    name = verifier.strip().lower()
    if name in BLOCK_VERIFIERS:
        raise InputError(f"{name!r} is a block verifier; the decode loop verifies token by token, use one of "
                         f"{', '.join(sorted(DEFAULT_SCHEMES))}")
    found = _zoo_get(name)
    if found is not None:
        sample = found if callable(found) else getattr(found, "sample", None)
        if sample is None:
            raise InputError(f"otlp.verifiers.get({name!r}) returned {type(found).__name__}, which has no sample()")
        return ResolvedVerifier(sample, name, _zoo_scheme(found, name, scheme),
                                bool(getattr(found, "per_draft_q", False)))
    raise InputError(f"unknown verifier {verifier!r}; available here: {', '.join(available_verifiers())}")


def _zoo_scheme(found: object, name: str, requested: str | None) -> str:
    """The scheme to draft with for a zoo rule: its own, or "iid" for rules that are exact for i.i.d. drafts but
    declare a wider own scheme (weighted IS: independent drafts). A request for any other scheme is refused: the
    zoo samplers only know their own scheme's law (e.g. "optimal" solves the i.i.d. transport)."""
    own = _scheme_of(found) or DEFAULT_SCHEMES.get(name, "iid")
    usable = own if own in SCHEMES else ("iid" if "iid" in getattr(found, "compatible_schemes", ()) else None)
    if usable is None:
        raise InputError(f"verifier {name!r} expects {own!r} drafts, which the decode loop cannot draw")
    if requested is not None and requested != usable:
        raise InputError(f"verifier {name!r} is exact for {usable!r} drafts only, not {requested!r}; "
                         "leave the scheme unset or pick another verifier")
    return usable


def available_verifiers() -> list[str]:
    """Names the loop can run: the zoo's (``otlp.verifiers.NAMES``) but the block verifiers."""
    from otlp import verifiers

    return sorted(n for n in verifiers.NAMES if n not in BLOCK_VERIFIERS)
