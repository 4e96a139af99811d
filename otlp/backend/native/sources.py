"""The C kernels' sources and their fingerprint, read by setup.py (by file path, before otlp is importable) and by
:mod:`otlp.backend.native`: a library built from other sources than those beside it (an in-place build not redone
after the C changed) is refused, since its functions' arguments may differ and a call would crash."""

from __future__ import annotations

import hashlib
from pathlib import Path

#: the translation units, in the order they are compiled (module.c: the extension module's entry point)
SOURCES = ("buckets.c", "chains.c", "bucket_rule.c", "kseq.c", "psi.c", "wor_plan.c", "module.c")
#: every file whose content the fingerprint covers
FINGERPRINTED = (*SOURCES, "kernels.h")


def fingerprint(folder: Path) -> str | None:
    """The first 16 hex digits of the SHA-256 of the files of :data:`FINGERPRINTED` in ``folder`` (their bytes, each
    after its name), or None where one of them is missing (an installed wheel carries no sources)."""
    digest = hashlib.sha256()
    for name in FINGERPRINTED:
        path = Path(folder) / name
        if not path.is_file():
            return None
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
