"""otlp.proofs_check: every theorem of the five papers as a runnable check.

>>> from otlp.proofs_check import run_checks, format_table
>>> results = run_checks(["gr.thm3.1"], instances=4)
>>> results[0].status
'pass'
"""

from otlp.proofs_check.cli import add_check_arguments, run_check_cli
from otlp.proofs_check.core import Check, CheckResult, Registry, Tally, Violation
from otlp.proofs_check.registry import build_registry, format_table, results_json, run_checks

__all__ = [
    "Check",
    "CheckResult",
    "Registry",
    "Tally",
    "Violation",
    "add_check_arguments",
    "build_registry",
    "format_table",
    "results_json",
    "run_check_cli",
    "run_checks",
]
