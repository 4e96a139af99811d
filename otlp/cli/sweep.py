"""``otlp sweep CAPTURE``: the arguments and the runner (wired in otlp/cli/commands.py)."""

from __future__ import annotations

import argparse
import json
import sys

from otlp.cli.util import int_list
from otlp.core.errors import InputError
from otlp.sweep.compute import MAX_ENUM_CELLS


def add_sweep_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("capture", help="capture folder (written by `otlp decode --capture DIR` or CaptureWriter)")
    parser.add_argument("--verifiers", default="all",
                        help="comma list of rules, 'all' (every one-token rule; optimal and optimal_paths are the "
                             "alpha* column) or 'none' (alpha* alone); default all")
    parser.add_argument("--n", default="1,2,4,8", help="comma list of draft counts (default 1,2,4,8)")
    parser.add_argument("--top-k", default="all",
                        help="comma list of draft top-k values >= 1, 'all' = q untruncated (default all); on a "
                             "sparse capture at most its stored top-k; a value >= V keeps all of q, so it runs as "
                             "'all' and a note on stderr says so")
    parser.add_argument("--out", help="results folder (default CAPTURE/sweep): results/, pairs.parquet, sweep.json, "
                                      "PNG plots; a re-run skips the shards saved there")
    parser.add_argument("--workers", type=int, default=None, help="local processes (default: all cores)")
    parser.add_argument("--scheduler", help="Dask scheduler address (tcp://host:8786): run the shards on that "
                                            "cluster (workers must see CAPTURE at the same path)")
    parser.add_argument("--max-enum-cells", type=float, default=float(MAX_ENUM_CELLS),
                        help="per-pair limit (tuples x tokens) for rules whose exact acceptance enumerates the "
                             f"draft support (default {MAX_ENUM_CELLS}); larger cells are skipped and listed")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress line")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    return parser


def run_sweep_cli(args: argparse.Namespace) -> int:
    """Run ``otlp sweep``; bad input raises ``InputError`` (``otlp.cli.commands`` prints the one line, exit 2)."""
    from otlp.cli.util import Progress
    from otlp.sweep.runner import SweepInterrupted, run_sweep

    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    if not args.max_enum_cells >= 1:
        raise InputError(f"--max-enum-cells must be >= 1, got {args.max_enum_cells}")
    ns = int_list(args.n, "--n")
    top_ks = int_list(args.top_k, "--top-k", allow_all=True, all_value=0)
    bar = Progress("sweep", enabled=not (args.no_progress or args.json))

    def show(state: dict) -> None:
        eta = state["eta"]
        bar.total = state["total_shards"]
        bar.count = state["shards"] - 1
        bar.update(1, f"shards, {state['pairs']}/{state['total_pairs']} pairs, {state['pairs_per_second']:.0f} "
                      f"pairs/s, ETA {'?' if eta != eta else f'{eta:.0f} s'}")

    try:
        with bar:
            result = run_sweep(args.capture, ns=ns, verifiers=args.verifiers, top_ks=top_ks, out=args.out,
                               workers=args.workers, scheduler=args.scheduler,
                               max_enum_cells=int(args.max_enum_cells), plots=not args.no_plots, progress=show)
    except SweepInterrupted as exc:
        print(f"otlp sweep: {exc}", file=sys.stderr)
        return 130
    for note in result.report.get("notes", []):
        print(f"otlp sweep: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.report, indent=1))
    else:
        print(result.table())
        print(f"wrote {', '.join([result.report['pairs_parquet'], *result.report['png']])}")
    return 0
