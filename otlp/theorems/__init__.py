"""otlp.theorems: every theorem of the five papers as a runnable check.

>>> from otlp.theorems import run_checks, format_table
>>> results = run_checks(["gr.thm3.1"], instances=4)
>>> results[0].status
'pass'
"""

from otlp.theorems.core import Check, CheckResult, Registry, Tally, Violation
from otlp.theorems.registry import build_registry, format_table, results_json, run_checks

__all__ = [
    "Check",
    "CheckResult",
    "Registry",
    "Tally",
    "Violation",
    "build_registry",
    "format_table",
    "results_json",
    "run_checks",
]
