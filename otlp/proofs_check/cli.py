"""``otlp check``: argument wiring for the lead's otlp/cli.py (``add_check_arguments`` + ``run_check_cli``)."""

from __future__ import annotations

import argparse
import sys

from otlp.errors import InputError


def add_check_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--theorem NAME`` (repeatable; prefixes like ``gr.`` allowed), ``--instances N``, ``--seed S``,
    ``--exact``, ``--json``, ``--list`` to ``parser``."""
    parser.add_argument("--theorem", action="append", default=None, metavar="NAME",
                        help="check name or prefix (e.g. gr.thm3.1, spectr.); repeatable; default: all")
    parser.add_argument("--instances", type=int, default=20, metavar="N", help="instances per check (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance generators, >= 0 (default 0)")
    parser.add_argument("--exact", action="store_true",
                        help="rational arithmetic (V <= 5) for the checks that support it; equalities compared exactly")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--list", action="store_true", help="list the checks (name, source, statement) and exit")
    return parser


def run_check_cli(args: argparse.Namespace) -> int:
    """Run ``otlp check``; returns the exit code: 0 all passed, 1 a violation or error, 2 bad input."""
    from otlp.proofs_check.registry import build_registry, format_table, results_json, run_checks

    try:
        if args.instances < 1:
            raise InputError(f"--instances must be >= 1, got {args.instances}")
        if args.seed < 0:  # numpy seeds are >= 0 (run_checks refuses it too; here it also covers --list)
            raise InputError(f"--seed must be an integer >= 0, got {args.seed}")
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
        results = run_checks(args.theorem, instances=args.instances, seed=args.seed, exact=args.exact)
    except InputError as exc:
        print(f"otlp check: {exc}", file=sys.stderr)
        return 2
    print(results_json(results) if args.json else format_table(results))
    return 0 if all(r.ok for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = add_check_arguments(argparse.ArgumentParser(prog="otlp check", description="theorems as runnable checks"))
    return run_check_cli(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
