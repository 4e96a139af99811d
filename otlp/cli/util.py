"""The command line's contract, in one place, for every ``otlp`` subcommand to reuse.

- Bad input: exactly one line ``otlp: error: <what was wrong, what was expected>`` on stderr and exit status 2
  (:data:`EXIT_BAD_INPUT`); with ``--json`` the same error also goes to stdout as ``{"error": {...}}``
  (:func:`report_error`). Argument errors go through :class:`CLIParser`, whose ``error`` raises
  :class:`UsageError` instead of printing argparse's multi-line usage.
- A missing optional dependency (torch, tqdm, cvxpy, ...) is one such line naming the extra to install
  (:func:`as_missing_dependency`).
- Work that can take more than a couple of seconds reports progress on stderr when stderr is a terminal and the
  output is not ``--json`` (:class:`Progress`), and states its limit in ``--help`` (:func:`check_time_limit`).

A subcommand's runner raises ``otlp.core.errors.InputError`` (or a subclass) and lets ``otlp.cli.commands`` print it; it
never prints its own error line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import IO, NoReturn

from otlp.core.errors import InputError, MissingDependencyError

EXIT_BAD_INPUT = 2
PREFIX = "otlp: error: "

#: top-level module of an optional dependency -> (pip package, extra of pyproject.toml that installs it)
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "torch": ("torch", "torch"),
    "tqdm": ("tqdm", "decode"),
    "matplotlib": ("matplotlib", "decode"),
    "transformers": ("transformers", "hf"),
    "cvxpy": ("cvxpy", "solvers"),
    "pulp": ("pulp", "solvers"),
    "ortools": ("ortools", "solvers"),
    "ot": ("POT", "solvers"),
}


class UsageError(InputError):
    """An argument the parser itself refused (unknown option, invalid int, invalid choice, missing value)."""


class CLIParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are :class:`UsageError` (one line, exit 2 via ``main``) instead of
    a usage block and ``SystemExit``. Subparsers made by ``add_subparsers`` inherit the class."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def one_line(message: object) -> str:
    """``message`` as a single line (newlines and runs of spaces collapsed)."""
    return " ".join(str(message).split())


def error_object(exc: BaseException, code: int = EXIT_BAD_INPUT) -> dict:
    """The ``--json`` form of an error: ``{"error": {"type", "message", "exit_code"}}``."""
    return {"error": {"type": type(exc).__name__, "message": one_line(exc), "exit_code": code}}


def report_error(exc: BaseException, *, json_output: bool = False, code: int = EXIT_BAD_INPUT,
                 stderr: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Print ``otlp: error: ...`` (one line) on stderr, and with ``json_output`` the JSON error object on stdout.
    Returns ``code`` (2 by default) for the caller to exit with."""
    print(PREFIX + one_line(exc), file=stderr or sys.stderr)
    if json_output:
        print(json.dumps(error_object(exc, code)), file=stdout or sys.stdout)
    return code


def as_missing_dependency(exc: ImportError, feature: str, extra: str | None = None) -> MissingDependencyError | None:
    """The ``MissingDependencyError`` for an ``ImportError`` of an optional package, else None (a real bug).
    ``extra``: the extra to name instead of the package's own (``decode`` for ``otlp decode``)."""
    name = getattr(exc, "name", None) or ""
    top = name.split(".")[0]
    if top not in OPTIONAL_MODULES:
        return None
    package, own_extra = OPTIONAL_MODULES[top]
    return MissingDependencyError(package, feature, extra or own_extra)


def int_list(text: object, name: str, *, allow_all: bool = False, all_value: object = None) -> tuple:
    """A comma list of integers >= 1 (``"1,2,4,8"`` -> ``(1, 2, 4, 8)``, repeats dropped); with ``allow_all`` the
    words all / none / V stand for "no truncation" and give ``all_value``. An empty entry (``"1,,2"``) is an error,
    not skipped, and so is 0 (not a stand-in for "all": a top-k of 0 keeps no token)."""
    out: list = []
    for tok in str(text).split(","):
        tok = tok.strip()
        if allow_all and tok.lower() in ("all", "none", "v"):
            out.append(all_value)
            continue
        try:
            value = int(tok)
        except ValueError:
            what = "an empty entry" if not tok else f"{tok!r} is not an integer"
            raise InputError(f"{name}: {what} in {str(text)!r} (expected a comma list such as 1,2,4,8)") from None
        if value < 1:
            untruncated = " (or 'all' for no truncation)" if allow_all else ""
            raise InputError(f"{name}: values must be >= 1{untruncated}, got {value}")
        out.append(value)
    return tuple(dict.fromkeys(out))


def wants_json(argv: Sequence[str]) -> bool:
    """Whether ``--json`` was asked for, read from the raw arguments (the parse itself may be what failed)."""
    return "--json" in argv


def check_time_limit(value: object, flag: str = "--time-limit") -> float:
    """A time limit in seconds: a number > 0 (``inf`` = no limit); ``InputError`` otherwise (nan included)."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{flag} must be a number of seconds > 0, got {value!r}") from None
    if not seconds > 0:
        raise InputError(f"{flag} must be a number of seconds > 0 (inf for no limit), got {value!r}")
    return seconds


class Progress:
    """A one-line progress report on stderr, shown only on a terminal and never with ``--json``.

    ``with Progress("solve", total=4, enabled=not args.json) as bar: ... bar.update(1, "relaxed/highs")``.
    Redraws at most every 0.1 s; the line is cleared on exit (so an error line printed after it starts clean).
    ``stream`` (default stderr) and ``force`` exist for tests.
    """

    def __init__(self, desc: str, total: int | None = None, *, enabled: bool = True, stream: IO[str] | None = None,
                 force: bool = False):
        self.desc = desc
        self.total = total
        self.count = 0
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(enabled and (force or (callable(isatty) and isatty())))
        self._start = time.perf_counter()
        self._last = -math.inf
        self._width = 0
        self.note = ""

    def __enter__(self) -> Progress:
        self._draw(force=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, k: int = 1, note: str | None = None) -> None:
        self.count += k
        if note is not None:
            self.note = note
        self._draw()

    def set_note(self, note: str) -> None:
        self.note = note
        self._draw(force=True)

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        done = f"{self.count}/{self.total}  " if self.total else (f"{self.count}  " if self.count else "")
        text = f"{self.desc}: {done}{now - self._start:.1f} s  {self.note}"[:150]
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
