"""Exceptions raised on bad input. All are ``ValueError`` so callers can catch one type."""

from __future__ import annotations


class InputError(ValueError):
    """A user-supplied value is invalid: the message says what was wrong and what was expected."""


class ModelTooLargeError(InputError):
    """A model would not fit in memory; raised before anything is allocated.

    Attributes
    ----------
    size_bytes : estimated bytes the model would need.
    limit_bytes : the limit it exceeds.
    """

    def __init__(self, what: str, size_bytes: float, limit_bytes: float):
        self.size_bytes = float(min(size_bytes, 1e308))  # a count of tuples may exceed any float
        self.limit_bytes = float(limit_bytes)
        super().__init__(
            f"{what} would need about {_human(self.size_bytes)}, over the limit of {_human(self.limit_bytes)}; "
            "use a smaller V or n, or top-k truncation of q"
        )


class MissingDependencyError(InputError):
    """An optional dependency needed for the requested feature is not installed."""

    def __init__(self, package: str, feature: str, extra: str | None = None):
        hint = f"pip install 'otlp[{extra}]'" if extra else f"pip install {package}"
        super().__init__(f"{feature} needs the optional package '{package}', which is not installed ({hint})")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}" if n < 1e6 else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover
