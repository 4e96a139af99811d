"""The ``otlp`` command line: solve, certify, check, bench, decode.

Every subcommand takes ``--json``. Bad input prints one line ``otlp: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from otlp._cli_util import CLIParser, as_missing_dependency, report_error, wants_json
from otlp.errors import InputError

#: --formulation name -> (attribute of otlp.formulations, draft schemes it accepts or None for all)
FORMULATIONS: dict[str, str] = {
    "full": "FullOTLP",
    "relaxed": "RelaxedOTLP",
    "maxflow": "MaxFlowNetwork",
    "outer_inner": "OuterInnerNetworks",
    "beta": "BetaProgram",
    "subset": "SubsetSelection",
}
SCHEMES = ("iid", "independent", "without_replacement", "greedy", "spechub")
EXAMPLE = {"p": "0.1,0.6,0.3", "q": "0.5,0.3,0.2", "n": 2}  # SpecHub paper, Figs. 4 and 5


def build_draft(scheme: str, q: np.ndarray, n: int, extra_qs: Sequence[np.ndarray] = ()):  # -> DraftScheme
    """The draft scheme named on the command line."""
    import otlp

    if scheme == "iid":
        return otlp.IID(q, n)
    if scheme == "independent":
        qs = [q, *extra_qs]
        if len(qs) != n:
            raise InputError(f"--scheme independent with --n {n} needs {n} draft distributions (--q and "
                             f"{n - 1} more via --q-other), got {len(qs)}")
        return otlp.Independent(qs)
    if scheme == "without_replacement":
        return otlp.WithoutReplacement(q, n)
    if scheme == "greedy":
        return otlp.Greedy(q, n)
    if scheme == "spechub":
        return otlp.SpecHub(q, n)
    raise InputError(f"unknown --scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")


def add_problem_arguments(parser: argparse.ArgumentParser, *, example: bool = True) -> None:
    """--p, --q, --n, --scheme, --q-other, --renormalize (shared by solve and certify)."""
    parser.add_argument("--p", help="target distribution: comma-separated numbers, or a .json / .npy file")
    parser.add_argument("--q", help="draft distribution (same forms as --p)")
    parser.add_argument("--n", type=int, help="number of drafted tokens per step (n >= 1)")
    parser.add_argument("--scheme", choices=SCHEMES, default="iid", help="draft scheme (default: iid)")
    parser.add_argument("--q-other", action="append", default=[], metavar="Q",
                        help="further draft distributions for --scheme independent (repeat)")
    parser.add_argument("--renormalize", action="store_true", help="divide p and q by their sums instead of refusing")
    if example:
        parser.add_argument("--example", action="store_true",
                            help="use the built-in example p=(.1,.6,.3), q=(.5,.3,.2), n=2 (SpecHub paper, Fig. 5)")


def read_problem(args: argparse.Namespace):  # -> (p, draft)
    from otlp.distributions import load_distribution

    if getattr(args, "example", False):  # fills in only what is absent: an explicit --n 0 is refused below
        args.p = EXAMPLE["p"] if args.p is None else args.p
        args.q = EXAMPLE["q"] if args.q is None else args.q
        args.n = EXAMPLE["n"] if args.n is None else args.n
    missing = [flag for flag, value in (("--p", args.p), ("--q", args.q), ("--n", args.n)) if value is None]
    if missing:
        raise InputError(f"missing {', '.join(missing)} (or pass --example for the built-in example)")
    if args.q_other and args.scheme != "independent":
        raise InputError(f"--q-other is only used by --scheme independent (got --scheme {args.scheme}); "
                         "drop --q-other or pass --scheme independent")
    p = load_distribution(args.p, "p", renormalize=args.renormalize)
    q = load_distribution(args.q, "q", renormalize=args.renormalize)
    others = [load_distribution(x, f"q[{k + 1}]", renormalize=args.renormalize) for k, x in enumerate(args.q_other)]
    draft = build_draft(args.scheme, q, args.n, others)
    if p.size != draft.V:
        raise InputError(f"p has length {p.size} but q has length {draft.V}; both must cover the same vocabulary")
    return p, draft


# -- otlp solve ------------------------------------------------------------------------------------------------
def _solve_rows(p: np.ndarray, draft, formulations: list[str], backends: list[str], *,  # noqa: ANN001 - draft
                requested: Sequence[str] = (), backends_given: bool = True) -> list[dict]:
    """One row per (formulation, backend) that can be paired, after the closed form (and the block solver).

    A formulation named in ``requested`` that none of ``backends`` can solve is refused (``InputError`` naming the
    backends that can), before any solve runs; other formulations simply skip the backends that do not take them
    (pot takes only FullOTLP). When ``backends_given`` is False the backends are a default, and a formulation none
    of them takes is solved by the first installed backend, in ``BACKENDS`` order, that takes it (highs cannot
    return the min cut SubsetSelection reads H* from, so ``--formulation subset`` alone uses ortools or networkx).
    """
    import otlp
    import otlp.formulations as F
    from otlp.errors import MissingDependencyError
    from otlp.solvers import BACKENDS

    for backend in backends:
        if backend not in BACKENDS:
            raise InputError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")

    def takes(model, backend: str) -> bool:  # noqa: ANN001
        try:
            model.kind_for(backend)
        except InputError:
            return False
        return True

    plans: list[tuple[str, object, list[str], bool]] = []  # (formulation, model, backends, first installed only)
    for name in formulations:
        if name == "optimal":
            continue
        model = getattr(F, FORMULATIONS[name])(p, draft)
        able = [b for b in backends if takes(model, b)]
        if able:
            plans.append((name, model, able, False))
            continue
        others = [b for b in BACKENDS if takes(model, b)]
        if not backends_given and others:
            plans.append((name, model, others, True))
        elif name in requested:
            route = f"can only be solved by --backend {' or '.join(others)}" if others else "has no backend"
            raise InputError(f"--formulation {name} {route}; --backend {', '.join(backends)} cannot solve it")

    rows: list[dict] = []
    start = time.perf_counter()
    alpha = otlp.optimal_acceptance(p, draft)
    rows.append({"formulation": "closed_form", "backend": "otlp", "value": alpha, "status": "optimal",
                 "build_ms": 0.0, "solve_ms": 1e3 * (time.perf_counter() - start), "certificate": "-"})
    if "optimal" in formulations:
        from otlp.optimal import OptimalTransport

        start = time.perf_counter()
        ot = OptimalTransport(p, draft)
        rows.append({"formulation": "optimal", "backend": "otlp.optimal", "value": float(ot.alpha),
                     "status": "optimal", "build_ms": 0.0, "solve_ms": 1e3 * (time.perf_counter() - start),
                     "certificate": "-"})
    for name, model, able, first_installed in plans:
        for k, backend in enumerate(able):
            try:
                sol = model.solve(backend=backend)
            except InputError as exc:
                if first_installed and isinstance(exc, MissingDependencyError) and k + 1 < len(able):
                    continue  # a default route: try the next backend that takes this formulation
                rows.append({"formulation": name, "backend": backend, "value": None, "status": f"refused: {exc}",
                             "build_ms": None, "solve_ms": None, "certificate": "-"})
                if first_installed:
                    break
                continue
            cert = "-"
            if getattr(sol, "model", None) is not None:
                try:
                    c = sol.certificate()
                    cert = "OK" if c.ok else f"FAILED ({c})"
                except (ValueError, TypeError):
                    cert = "-"
            rows.append({"formulation": name, "backend": backend, "value": float(getattr(sol, "alpha", sol.value)),
                         "status": sol.status,
                         "build_ms": 1e3 * sol.seconds.get("build", 0.0),
                         "solve_ms": 1e3 * sol.seconds.get("solve", 0.0),
                         "certificate": cert, "value_bound": sol.value_bound})
            if first_installed:
                break
    return rows


def _format_table(rows: list[dict], columns: list[tuple[str, str, Callable[[object], str]]]) -> str:
    cells = [[fmt(row.get(key)) for _, key, fmt in columns] for row in rows]
    widths = [max(len(title), *(len(c[i]) for c in cells)) if cells else len(title)
              for i, (title, _, _) in enumerate(columns)]
    line = "  ".join(title.ljust(w) for (title, _, _), w in zip(columns, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) for cell in cells]
    return "\n".join(out)


def _num(fmt: str) -> Callable[[object], str]:
    return lambda v: "-" if v is None else format(v, fmt)


def cmd_solve(args: argparse.Namespace) -> int:
    p, draft = read_problem(args)
    formulations = args.formulation or (["optimal", "relaxed", "full", "maxflow"] if args.example
                                        else ["optimal", "relaxed"])
    if args.scheme != "iid":
        if formulations == ["optimal"]:
            raise InputError("--formulation optimal is the i.i.d. block solver; use --scheme iid or an LP formulation")
        formulations = [f for f in formulations if f != "optimal"]
    backends = args.backend or (["highs", "cvxpy", "pulp", "ortools", "networkx", "pot", "exact"] if args.example
                                else ["highs"])
    rows = _solve_rows(p, draft, formulations, backends, requested=args.formulation or (),
                       backends_given=bool(args.backend))
    if args.json:
        print(json.dumps({"p": p.tolist(), "scheme": draft.name, "n": draft.n, "results": rows}, indent=2))
        return 0
    print(f"alpha* for {draft!r} ({draft.name}), V = {p.size}:")
    print(_format_table(rows, [("formulation", "formulation", str), ("backend", "backend", str),
                               ("alpha", "value", _num(".12f")), ("status", "status", str),
                               ("build ms", "build_ms", _num(".2f")), ("solve ms", "solve_ms", _num(".2f")),
                               ("certificate", "certificate", str)]))
    values = [r["value"] for r in rows if r["value"] is not None]
    print(f"max spread between routes: {max(values) - min(values):.2e}")
    return 0


def _add_solve(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("solve", help="alpha* and the optimal plan by every formulation and backend asked for",
                            description="Compute alpha* = 1 + min_H psi(H) for a target p and a draft scheme, by the "
                                        "closed form, the exact block solver and LP/flow formulations.")
    add_problem_arguments(parser)
    parser.add_argument("--formulation", action="append", choices=["optimal", *FORMULATIONS],
                        help="formulation to solve (repeat; default: optimal and relaxed)")
    parser.add_argument("--backend", action="append",
                        help="backend: highs, cvxpy, pulp, ortools, networkx, pot, exact (repeat; default: highs, "
                             "and for a formulation highs cannot solve, such as subset, the first installed backend "
                             "that can); a --formulation none of the given backends can solve is refused")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=cmd_solve)


# -- wiring ------------------------------------------------------------------------------------------------------
def _add_lazy(sub: argparse._SubParsersAction, name: str, help_text: str, module: str, adder: str, runner: str,
              selected: bool) -> None:
    """A subcommand whose arguments and work live in ``module``. Only the ``selected`` one imports its module (some
    import torch), so ``otlp solve`` and ``otlp --help`` start without loading the others."""
    import importlib

    parser = sub.add_parser(name, help=help_text, description=help_text)
    if selected:
        mod = importlib.import_module(module)
        getattr(mod, adder)(parser)
        parser.set_defaults(func=lambda args: getattr(mod, runner)(args))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; with ``argv``, only the subcommand it names loads its module and arguments."""
    from otlp import __version__

    parser = CLIParser(
        prog="otlp", description="Optimal multi-draft speculative sampling: solve the OTLP, certify verifiers, "
                                 "check the papers' theorems, run a decode loop.")
    parser.add_argument("--version", action="version", version=f"otlp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_solve(sub)
    words = set(sys.argv[1:] if argv is None else argv)
    for name, help_text, module, adder, runner in SUBCOMMANDS:
        _add_lazy(sub, name, help_text, module, adder, runner, name in words)
    bench = sub.add_parser("bench", help="benchmarks that need the package only (the full comparisons live in "
                                         "benchmarks/ of the source tree)",
                           description="Benchmarks shipped with the package; the side-by-side solver and verifier "
                                       "comparisons are scripts under benchmarks/ in the source tree.")
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    for name, help_text, module, adder, runner in BENCHMARKS:
        _add_lazy(bench_sub, name, help_text, module, adder, runner, name in words)
    bench.set_defaults(func=lambda args: _missing_benchmark(bench))
    return parser


def _missing_benchmark(parser: argparse.ArgumentParser) -> int:
    names = ", ".join(name for name, *_ in BENCHMARKS)
    raise InputError(f"missing BENCHMARK after 'otlp bench'; expected one of {names} (see 'otlp bench --help')")


#: (name, help, module, argument adder, runner) of the subcommands that live in their packages.
SUBCOMMANDS: list[tuple[str, str, str, str, str]] = [
    ("certify", "how far a verifier is from the optimum: acceptance, alpha*, gap, target law, exact certificate",
     "otlp.verifiers.certification", "add_certify_arguments", "run_certify_cli"),
    ("certify-block", "multi-step rules (sps, bv, gbv, token_tree) on random small AR models: block efficiency, "
     "multi-path LP optimum, gap, target law", "otlp.multistep.certify", "add_multistep_arguments",
     "run_multistep_cli"),
    ("check", "run the five papers' theorems as checks (exit 1 on any violation)",
     "otlp.proofs_check.cli", "add_check_arguments", "run_check_cli"),
    ("decode", "speculative decode loop (embedded n-gram pair by default): block efficiency, acceptance, tokens/s",
     "otlp.decode.cli", "add_decode_arguments", "run_decode_cli"),
    ("sweep", "alpha*, every rule's exact acceptance and the gaps over a capture of (p, q) pairs (otlp decode "
     "--capture), by depth, entropy and n; local cores or a Dask cluster", "otlp.sweep.cli", "add_sweep_arguments",
     "run_sweep_cli"),
]

#: the extra of pyproject.toml that installs everything a command needs (named when a package is missing)
COMMAND_EXTRAS = {"otlp decode": "decode", "otlp bench acceptance": "decode", "otlp sweep": "sweep"}

#: (name, help, module, argument adder, runner) of the ``otlp bench`` benchmarks.
BENCHMARKS: list[tuple[str, str, str, str, str]] = [
    ("acceptance", "alpha* over (n, top-k) on distributions collected from the decode loop: table, JSON and PNG "
     "(GR Figure 1)", "otlp.decode.cli", "add_acceptance_arguments", "run_acceptance_cli"),
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``otlp`` command. Bad input (argparse's refusals included) and a missing optional dependency print
    one line ``otlp: error: ...`` and return 2; with ``--json`` the error is also a JSON object on stdout."""
    argv = list(sys.argv[1:] if argv is None else argv)
    json_output = wants_json(argv)
    try:
        try:
            parser = build_parser(argv)  # imports the chosen subcommand's module (torch for decode)
            args = parser.parse_args(argv)
            json_output = bool(getattr(args, "json", json_output))
            if not getattr(args, "func", None):
                names = ", ".join(["solve", *(name for name, *_ in SUBCOMMANDS), "bench"])
                raise InputError(f"missing COMMAND; expected one of {names} (see 'otlp --help')")
            return int(args.func(args) or 0)
        except ImportError as exc:
            words = [w for w in argv if not w.startswith("-")][:2]
            command = " ".join(["otlp", *words[:2 if words[:1] == ["bench"] else 1]])
            missing = as_missing_dependency(exc, f"'{command}'", COMMAND_EXTRAS.get(command))
            if missing is None:
                raise
            raise missing from None
    except InputError as exc:
        return report_error(exc, json_output=json_output)
    except KeyboardInterrupt:
        print("otlp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``otlp solve ... | head``): stop quietly, as cat does
        sys.stdout = None  # nothing more may be flushed to the closed pipe at exit
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
