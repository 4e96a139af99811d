"""``otlp certify-block``: its arguments, checked before torch loads, and the runner (wired in otlp/cli/commands.py).

This module imports neither torch nor the rules: a bad argument (``--V 0``) is answered in milliseconds; the work
(``otlp.multistep.certify``) is imported once every argument has passed.
"""

from __future__ import annotations

import argparse
import json
import math

from otlp.core.distributions import check_int
from otlp.core.errors import InputError
from otlp.multistep.armodel import check_table_size
from otlp.multistep.efficiency import RULES


def add_multistep_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``otlp certify-block``."""
    parser.add_argument("--rule", default="all", help=f"one of {', '.join(RULES)}, or 'all' (default)")
    parser.add_argument("--V", type=int, default=3, help="vocabulary size, >= 2 (default 3)")
    parser.add_argument("--L", type=int, default=2, help="block length, >= 1 (default 2)")
    parser.add_argument("--K", type=int, default=2, help="number of i.i.d. drafted paths, >= 1 (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random target/draft pair (default 0)")
    parser.add_argument("--concentration", type=float, default=1.0,
                        help="Dirichlet concentration of every conditional, finite and > 0 (default 1)")
    parser.add_argument("--closeness", type=float, default=0.0,
                        help="mix the draft towards the target, in [0, 1) (default 0: independent)")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS",
                        help="limit of each LP's constraint generation, checked between rounds, in seconds "
                             "(default 60); at most two LPs run: the multi-path LP optimum, shared by all rules, "
                             "and the optimal rule's Thm 4.6 LP")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def check_multistep_arguments(args: argparse.Namespace) -> tuple[int, int, int, int]:
    """Every argument of ``otlp certify-block``, without torch: ``(V, L, K, seed)``, or ``InputError`` naming the
    flag. The random pair's tables (V^0 + ... + V^L rows of V) are sized here too, before anything is built."""
    V = check_int(args.V, "--V", 2)
    L = check_int(args.L, "--L", 1)
    K = check_int(args.K, "--K", 1)
    if args.rule != "all" and args.rule not in RULES:
        raise InputError(f"unknown --rule {args.rule!r}; expected one of {', '.join(RULES)} or 'all'")
    if not 0 < args.concentration < math.inf:  # inf (or nan) would only fail later, as "conditionals must be finite"
        raise InputError(f"--concentration must be finite and > 0, got {args.concentration}")
    if not 0 <= args.closeness < 1:  # also refuses nan
        raise InputError(f"--closeness must be in [0, 1), got {args.closeness}")
    seed = check_int(args.seed, "--seed", 0)  # numpy's SeedSequence refuses negative seeds
    if not args.time_limit > 0:  # also refuses nan (no limit at all); inf means no limit
        raise InputError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    check_table_size(V, L)  # "use a smaller V or depth (L)": the flags this command has
    return V, L, K, seed


def run_multistep_cli(args: argparse.Namespace) -> int:
    """Run ``otlp certify-block``: 0 when every certified rule preserves the target, 1 otherwise.
    Bad input raises InputError (the ``otlp`` CLI prints it and exits 2), before torch is imported."""
    V, L, K, seed = check_multistep_arguments(args)
    import numpy as np

    from otlp.cli.util import Progress
    from otlp.multistep.armodel import random_pair
    from otlp.multistep.certify import certify_rules, format_multistep_table  # torch from here on

    target, draft = random_pair(V, L, np.random.default_rng(seed), args.concentration, args.closeness)
    rules = RULES if args.rule == "all" else (args.rule,)
    with Progress("otlp certify-block", enabled=not args.json) as bar:
        reports = certify_rules(target, draft, L, K, rules, time_limit=args.time_limit, progress=bar)
    if args.json:
        print(json.dumps({"V": V, "L": L, "K": K, "seed": args.seed, "concentration": args.concentration,
                          "closeness": args.closeness, "reports": [r.to_dict() for r in reports]}, indent=2))
    elif len(reports) == 1:
        print(f"random AR pair: V = {V}, L = {L}, seed {args.seed}, concentration {args.concentration:g}, "
              f"closeness {args.closeness:g}")
        print(reports[0])
    else:
        print(f"random AR pair: V = {V}, L = {L}, K = {K}, seed {args.seed}, concentration "
              f"{args.concentration:g}, closeness {args.closeness:g}")
        print(format_multistep_table(reports))
        for r in reports:
            for note in r.notes:
                print(f"note ({r.rule}): {note}")
    return 0 if all(r.preserves_target is not False for r in reports) else 1
