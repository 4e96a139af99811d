"""Exceptions raised on bad input. All are ``ValueError`` so callers can catch one type."""

from __future__ import annotations

#: Default memory budget for one model (an LP's matrix and a backend's copy of it, a table of drafted tuples):
#: larger ones are refused with :class:`ModelTooLargeError` before anything is allocated.
MEMORY_LIMIT_BYTES = 4 * 1024**3


class InputError(ValueError):
    """A user-supplied value is invalid: the message says what was wrong and what was expected."""


class ModelTooLargeError(InputError):
    """A model would not fit in memory; raised before anything is allocated.

    Attributes
    ----------
    what : the model refused.
    size_bytes : estimated bytes the model would need.
    limit_bytes : the limit it exceeds.
    hint : what to change, in the caller's terms (default: the one-token problems' V, n and top-k).
    """

    #: the hint of the one-token problems (target p over V tokens, n drafts from q)
    DEFAULT_HINT = "use a smaller V or n, or top-k truncation of q"

    def __init__(self, what: str, size_bytes: float, limit_bytes: float, hint: str = DEFAULT_HINT):
        self.what, self.hint = what, hint
        self.size_bytes = float(min(size_bytes, 1e308))  # a count of tuples may exceed any float
        self.limit_bytes = float(limit_bytes)
        super().__init__(
            f"{what} would need about {_human(self.size_bytes)}, over the limit of {_human(self.limit_bytes)}; "
            f"{hint}"
        )


class MissingDependencyError(InputError):
    """An optional dependency needed for the requested feature is not installed."""

    def __init__(self, package: str, feature: str, extra: str | None = None):
        hint = f"pip install 'otlp[{extra}]'" if extra else f"pip install {package}"
        super().__init__(f"{feature} needs the optional package '{package}', which is not installed ({hint})")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            if unit == "PiB" and abs(n) >= 1e4:  # an astronomical model (V^n tuples): no 290-digit number
                return f"{n:.2g} PiB"
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover
