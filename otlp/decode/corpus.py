"""The offline text corpus behind the embedded n-gram models, and its word-level tokenizer.

The corpus is English prose about programming: the docstrings of the Python standard library. A fixed extract
ships as ``otlp/decode/data/stdlib_docstrings.txt.gz`` (built by ``benchmarks/decode_build_corpus.py``, under the
Python Software Foundation License like the docstrings themselves), so the embedded models are identical on every
machine; if that file is missing, the same extraction runs on the installed Python's standard library.
Nothing is downloaded.
"""

from __future__ import annotations

import ast
import functools
import gzip
import re
import sysconfig
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from otlp.core.errors import InputError

CORPUS_FILE = "stdlib_docstrings.txt.gz"
#: Documents in the corpus file are separated by this line.
DOCUMENT_SEPARATOR = "\n\x1e\n"
UNK, BOS = "<unk>", "<s>"
_TOKEN_RE = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "__pycache__"}


def stdlib_docstrings(max_chars: int = 2_000_000, root: str | Path | None = None) -> list[str]:
    """Docstrings of the standard library's ``.py`` files (module, class, function), in sorted path order.

    Files are parsed with :mod:`ast`, never imported. Stops once ``max_chars`` characters are collected.
    """
    base = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    documents: list[str] = []
    total = 0
    for path in sorted(base.rglob("*.py")):
        if _SKIP_DIRS.intersection(path.relative_to(base).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 40:
                    documents.append(doc)
                    total += len(doc)
                    if total >= max_chars:
                        return documents
    return documents


def load_corpus() -> list[str]:
    """The shipped corpus as a list of documents; falls back to :func:`stdlib_docstrings` if it is missing."""
    try:
        data = resources.files("otlp.decode").joinpath("data", CORPUS_FILE).read_bytes()
    except (FileNotFoundError, OSError):
        return stdlib_docstrings()
    text = gzip.decompress(data).decode("utf-8")
    return [doc for doc in text.split(DOCUMENT_SEPARATOR) if doc.strip()]


@functools.lru_cache(maxsize=1)
def max_vocab_size() -> int:
    """The largest vocabulary :meth:`WordTokenizer.fit` builds on the shipped corpus: its distinct words plus
    ``<unk>`` and ``<s>`` (a larger ``vocab_size`` would give no more). About 0.3 s on first use, then cached."""
    return len({w for doc in load_corpus() for w in words(doc)}) + 2


def check_vocab_size(vocab_size: object, flag: str = "--vocab-size") -> int:
    """``vocab_size`` for the embedded n-gram pair: an integer in [3, :func:`max_vocab_size`]; ``InputError``
    otherwise (it used to be capped silently to the corpus's distinct words)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 3:
        raise InputError(f"{flag} must be an integer >= 3 (<unk>, <s> and one word), got {vocab_size!r}")
    top = max_vocab_size()
    if vocab_size > top:
        raise InputError(f"{flag} {vocab_size} exceeds the {top} distinct tokens of the embedded corpus (its words "
                         f"plus <unk> and <s>); use at most {top}, or a Hugging Face pair (--draft / --target)")
    return int(vocab_size)


def words(text: str) -> list[str]:
    """Lower-cased words, numbers and single punctuation characters."""
    return _TOKEN_RE.findall(text.lower())


@dataclass(frozen=True)
class WordTokenizer:
    """A closed word-level vocabulary: id 0 is ``<unk>``, id 1 is ``<s>`` (document start), then words by
    decreasing corpus frequency (ties by spelling)."""

    vocabulary: tuple[str, ...]

    @classmethod
    def fit(cls, documents: Iterable[str], vocab_size: int) -> WordTokenizer:
        if vocab_size < 3:
            raise InputError(f"vocab_size must be >= 3 (<unk>, <s> and one word), got {vocab_size}")
        counts = Counter(w for doc in documents for w in words(doc))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 2]
        return cls((UNK, BOS) + tuple(w for w, _ in ranked))

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    @property
    def bos_id(self) -> int:
        return 1

    def _index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.vocabulary)}

    def encode(self, text: str) -> list[int]:
        index = self._index()
        return [index.get(w, 0) for w in words(text)]

    def encode_corpus(self, documents: Sequence[str]) -> np.ndarray:
        """One int64 stream: each document preceded by ``<s>``."""
        index = self._index()
        ids: list[int] = []
        for doc in documents:
            ids.append(self.bos_id)
            ids.extend(index.get(w, 0) for w in words(doc))
        return np.asarray(ids, dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        out: list[str] = []
        for i in ids:
            w = self.vocabulary[int(i)]
            if w == BOS:
                out.append("\n")
            elif out and (len(w) == 1 and not w.isalnum()) and w not in "([{":
                out[-1] = out[-1] + w  # no space before punctuation
            else:
                out.append(w)
        return " ".join(out).replace(" \n ", "\n")
