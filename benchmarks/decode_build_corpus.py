"""Rebuild otlp/decode/data/stdlib_docstrings.txt.gz from the installed Python's standard library docstrings.

The embedded n-gram models (otlp.decode.ngram) train on this file. The docstrings are Python's own, under the
Python Software Foundation License. Run: python benchmarks/decode_build_corpus.py
"""

from __future__ import annotations

import gzip
import platform
from pathlib import Path

from otlp.decode.corpus import CORPUS_FILE, DOCUMENT_SEPARATOR, stdlib_docstrings

MAX_GZ_BYTES = 1_000_000


def main() -> None:
    documents = stdlib_docstrings(max_chars=2_500_000)
    raw = DOCUMENT_SEPARATOR.join(documents).encode("utf-8")
    packed = gzip.compress(raw, compresslevel=9, mtime=0)
    if len(packed) > MAX_GZ_BYTES:
        raise SystemExit(f"corpus is {len(packed)} bytes compressed, over the {MAX_GZ_BYTES} byte budget")
    out = Path(__file__).resolve().parents[1] / "otlp" / "decode" / "data" / CORPUS_FILE
    out.write_bytes(packed)
    print(f"{len(documents)} docstrings from Python {platform.python_version()}: "
          f"{len(raw)} chars, {len(packed)} bytes gz -> {out}")


if __name__ == "__main__":
    main()
