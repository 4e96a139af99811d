"""``otlp check``: argument wiring for the lead's otlp/cli/commands.py (``add_check_arguments`` + ``run_check_cli``)."""

from __future__ import annotations

import argparse


def add_check_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--theorem NAME`` (repeatable; prefixes like ``gr.`` allowed), ``--instances N``, ``--seed S``,
    ``--exact``, ``--json``, ``--list`` to ``parser``."""
    parser.add_argument("--theorem", action="append", default=None, metavar="NAME",
                        help="check name or prefix (e.g. gr.thm3.1, spectr.); repeatable; default: all")
    parser.add_argument("--instances", type=int, default=20, metavar="N", help="instances per check (default 20)")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS",
                        help="each check stops generating instances after this many seconds and says how many it "
                             "tried (default 60; inf for none)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance generators, >= 0 (default 0)")
    parser.add_argument("--exact", action="store_true",
                        help="rational arithmetic (V <= 5) for the checks that support it; equalities compared exactly")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--list", action="store_true", help="list the checks (name, source, statement) and exit")
    return parser


def run_check_cli(args: argparse.Namespace) -> int:
    """Run ``otlp check``; returns the exit code: 0 all passed (checks whose optional package is not installed are
    skipped and named), 1 a violation or error. Bad input raises InputError (``otlp.cli.commands`` prints it, exit
    2)."""
    from otlp.core.distributions import check_int
    from otlp.theorems.registry import build_registry, format_table, results_json, run_checks

    check_int(args.instances, "--instances", 1)
    check_int(args.seed, "--seed", 0)  # numpy seeds are >= 0 (run_checks refuses it too; here it also covers --list)
    from otlp.cli.util import check_time_limit

    time_limit = check_time_limit(args.time_limit, "--time-limit")
    if args.list:
        checks = build_registry().select(args.theorem)
        if args.json:
            import json

            print(json.dumps([{"name": c.name, "title": c.title, "source": c.source, "statement": c.statement,
                               "printed": c.printed, "counterexample": c.counterexample,
                               "conditions": c.conditions, "exact_supported": c.exact_supported}
                              for c in checks], indent=2))
        else:
            for c in checks:
                print(f"{c.name:24s} {c.source}\n{'':24s} {c.statement}")
        return 0
    from otlp.cli.util import Progress

    names = [c.name for c in build_registry().select(args.theorem)]
    results = []
    with Progress("otlp check", total=len(names), enabled=not args.json) as bar:
        for name in names:  # one at a time, for the progress line; run_checks validates and seeds each the same
            bar.set_note(name)
            results.extend(_skip_missing(r) for r in run_checks(
                [name], instances=args.instances, seed=args.seed, exact=args.exact, time_limit=time_limit,
                on_instance=lambda k, name=name: bar.update(0, f"{name}: {k} / {args.instances} instances")))
            bar.update(1)
    skipped = [r for r in results if r.status == SKIP]
    if args.json:
        print(results_json(results))
    else:
        ran = [r for r in results if r.status != SKIP]
        table = format_table(ran) if ran else "no check ran"
        print(table)
        for r in ran:
            if r.stopped:
                print(f"{r.name}: {r.stopped}")
        for r in skipped:
            print(f"{r.name}: skipped: {r.details}")
    return 0 if all(r.ok or r.status == SKIP for r in results) else 1


SKIP = "skip"


def _skip_missing(result):  # noqa: ANN001, ANN202 - CheckResult
    """A check that errored only because an optional package is missing becomes a named skip (not a violation)."""
    import dataclasses
    import re

    from otlp.cli.util import OPTIONAL_MODULES
    from otlp.theorems.core import ERROR

    match = re.match(r"ModuleNotFoundError: No module named '([\w.]+)'", result.details or "")
    if result.status != ERROR or not match or match.group(1).split(".")[0] not in OPTIONAL_MODULES:
        return result
    package, extra = OPTIONAL_MODULES[match.group(1).split(".")[0]]
    return dataclasses.replace(result, status=SKIP,
                               details=f"needs the optional package '{package}' (pip install 'otlp[{extra}]')")


def main(argv: list[str] | None = None) -> int:
    """``python -m otlp.cli.check ...`` = ``otlp check ...``."""
    from otlp.cli.commands import main as otlp_main

    return otlp_main(["check", *(argv or [])])


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
