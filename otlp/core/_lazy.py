"""Lazy package exports (PEP 562): a package lists its public names and the modules that define them; a name is
imported on first use and cached in the package, so importing the package imports none of those modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str], namespace: dict[str, object]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: ``exports`` maps each public name to the module that defines it;
    the value is imported on first use and cached in ``namespace`` (the package's ``globals()``), so later lookups
    skip this function. Any other name raises ``AttributeError``."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    return __getattr__
