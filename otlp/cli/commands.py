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

from otlp.cli.util import CLIParser, as_missing_dependency, report_error, wants_json
from otlp.core.errors import InputError

#: --formulation name -> (attribute of otlp.lp.formulations, draft schemes it accepts or None for all)
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
    from otlp.core.distributions import load_distribution

    args.example_filled = []  # the flags --example supplied (the others were given): named in messages
    if getattr(args, "example", False):  # fills in only what is absent: an explicit --n 0 is refused below
        for flag in ("p", "q", "n"):
            if getattr(args, flag) is None:
                setattr(args, flag, EXAMPLE[flag])
                args.example_filled.append(flag)
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
        def source(flag: str) -> str:
            return f"from --example's {flag} = {EXAMPLE[flag]}" if flag in args.example_filled else f"--{flag}"

        fix = (f"; --example fills in only what is not given: pass --{args.example_filled[0]} as well, or drop "
               f"--{'q' if args.example_filled[0] == 'p' else 'p'}" if args.example_filled else "")
        raise InputError(f"p has length {p.size} ({source('p')}) but q has length {draft.V} ({source('q')}); both "
                         f"must cover the same vocabulary{fix}")
    return p, draft


# -- otlp solve ------------------------------------------------------------------------------------------------
#: default --time-limit of ``otlp solve``: seconds per LP / flow solve
SOLVE_TIME_LIMIT = 10.0
#: constraint-matrix nonzeros per second each backend sustains on the OTLP formulations, measured on a 2-core CPU
#: (IID drafts, V = 30-200, n = 2) and taken at the slow end (networkx grows faster than linearly; HiGHS on
#: degenerate instances such as V = 10, n = 4 is ~10x slower than the median), so that an estimate above the time
#: limit means the solve would not finish: the size guard skips it instead of starting it.
SOLVE_RATES = {"highs": 7e4, "cvxpy": 8e3, "pulp": 3.5e4, "ortools": 2e5, "networkx": 3.6e3, "pot": 7e4,
               "exact": 1e3}
#: with more entries than this, ``solve --json`` gives a summary of p instead of the whole vector
JSON_FULL_P = 100


def estimated_seconds(model, backend: str) -> tuple[float, int]:  # noqa: ANN001 - a Formulation
    """(estimated seconds, constraint-matrix nonzeros) of solving ``model`` with ``backend``, from its size alone
    (nothing is built)."""
    size = model.size(model.kind_for(backend))
    nonzeros = int(getattr(size, "nonzeros", 0) or getattr(size, "variables", 0))
    rate = SOLVE_RATES.get(backend, 1e3)
    return (nonzeros / rate if nonzeros < 10**300 else float("inf")), nonzeros  # V^n can exceed any float


def _count_text(k: int) -> str:
    """A count for a message: ``1,234,567``, or ``about 10^480`` when it is astronomical."""
    return f"{k:,}" if k < 10**15 else f"about 10^{len(str(k)) - 1}"


def _takes_time_limit(backend: str) -> bool:
    from otlp.lp.solvers import backend_module

    return "time_limit" in getattr(backend_module(backend), "_OPTION_NAMES", ())


def _solve_rows(p: np.ndarray, draft, formulations: list[str], backends: list[str], *,  # noqa: ANN001 - draft
                requested: Sequence[str] = (), backends_given: bool = True,
                time_limit: float = SOLVE_TIME_LIMIT) -> list[dict]:
    """All rows of :func:`iter_solve_rows` as a list."""
    return list(iter_solve_rows(p, draft, formulations, backends, requested=requested, backends_given=backends_given,
                                time_limit=time_limit))


def iter_solve_rows(p: np.ndarray, draft, formulations: list[str], backends: list[str], *,  # noqa: ANN001 - draft
                    requested: Sequence[str] = (), backends_given: bool = True,
                    time_limit: float = SOLVE_TIME_LIMIT, on_start: Callable[[str], None] | None = None):
    """One row per (formulation, backend) that can be paired, after the closed form (and the block solver), yielded
    as each finishes: the sub-millisecond rows come first.

    A formulation named in ``requested`` that none of ``backends`` can solve is refused (``InputError`` naming the
    backends that can), before any solve runs; other formulations simply skip the backends that do not take them
    (pot takes only FullOTLP). When ``backends_given`` is False the backends are a default, and a formulation none
    of them takes is solved by the first installed backend, in ``BACKENDS`` order, that takes it (highs cannot
    return the min cut SubsetSelection reads H* from, so ``--formulation subset`` alone uses ortools or networkx).

    Size guard: a solve whose estimated time (:func:`estimated_seconds`) exceeds ``time_limit`` is not started; its
    row has status ``skipped`` and a ``reason`` stating the size. Backends that take a time limit get
    ``time_limit`` too. ``on_start(label)`` is called before each solve (for a progress line).
    """
    import otlp
    import otlp.lp.formulations as F
    from otlp.core.errors import MissingDependencyError
    from otlp.lp.solvers import BACKENDS

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

    start = time.perf_counter()
    alpha = otlp.optimal_acceptance(p, draft)
    yield {"formulation": "closed_form", "backend": "otlp", "value": alpha, "status": "optimal",
           "build_ms": 0.0, "solve_ms": 1e3 * (time.perf_counter() - start),
           "certificate": alpha_certificate(p, draft, alpha)}
    if "optimal" in formulations:
        from otlp.optimal import OptimalTransport

        start = time.perf_counter()
        ot = OptimalTransport(p, draft)
        yield {"formulation": "optimal", "backend": "otlp.optimal", "value": float(ot.alpha),
               "status": "optimal", "build_ms": 0.0, "solve_ms": 1e3 * (time.perf_counter() - start),
               "certificate": None}
    for name, model, able, first_installed in plans:
        for k, backend in enumerate(able):
            blank = {"formulation": name, "backend": backend, "value": None, "build_ms": None, "solve_ms": None,
                     "certificate": None}
            try:
                estimate, nonzeros = estimated_seconds(model, backend)
                if estimate > time_limit:
                    yield {**blank, "status": "skipped",
                           "reason": f"{_count_text(nonzeros)} constraint nonzeros: "
                                     + (f"about {estimate:.3g} s" if estimate < np.inf else "far too long")
                                     + f" by {backend}, over --time-limit {time_limit:g} s (raise it to run this "
                                       "solve)"}
                    if first_installed:
                        break
                    continue
                if on_start is not None:
                    on_start(f"{name}/{backend}")
                options = {"time_limit": time_limit} if _takes_time_limit(backend) and time_limit < np.inf else {}
                sol = model.solve(backend=backend, **options)
            except InputError as exc:
                if first_installed and isinstance(exc, MissingDependencyError) and k + 1 < len(able):
                    continue  # a default route: try the next backend that takes this formulation
                yield {**blank, "status": "refused", "reason": str(exc)}
                if first_installed:
                    break
                continue
            cert = None
            if getattr(sol, "model", None) is not None:
                try:
                    cert = lp_certificate(sol.certificate())
                except (ValueError, TypeError):
                    cert = None
            value = getattr(sol, "alpha", sol.value)
            yield {"formulation": name, "backend": backend, "value": None if value is None else float(value),
                   "status": sol.status, "build_ms": 1e3 * sol.seconds.get("build", 0.0),
                   "solve_ms": 1e3 * sol.seconds.get("solve", 0.0), "certificate": cert,
                   "value_bound": sol.value_bound}
            if first_installed:
                break


#: ``solve`` certifies alpha* exactly (``otlp.certification.rule.rational_certificate``) up to this many draft
#: tuples V^n: about 0.3 s at 256 on a 2-core CPU (V = 16, n = 2); its cost grows fast beyond (145 s at 63^2)
SOLVE_CERTIFICATE_TUPLES = 256


def alpha_certificate(p: np.ndarray, draft, value: float) -> dict:  # noqa: ANN001 - a DraftScheme
    """The closed-form row's certificate: the exact rational primal/dual pair of alpha* (H*, alpha* as a fraction,
    both feasible, equal objectives) when V^n <= :data:`SOLVE_CERTIFICATE_TUPLES`, with ``agrees``: whether the
    row's float ``value`` is within 1e-9 (plus the rationalisation error) of it; else ``computed: False`` and why.
    The size is compared in logarithms, so no V^n is ever formed."""
    import math

    limit = SOLVE_CERTIFICATE_TUPLES
    if draft.n * math.log(max(draft.V, 1)) > math.log(limit) + 1e-9:
        return {"kind": "rational", "computed": False,
                "reason": f"V^n = {draft.V}^{draft.n} draft tuples, over the {limit} solve certifies exactly (otlp "
                          "certify gives the certificate up to 4000)"}
    from otlp.certification.rule import rational_certificate

    try:
        cert = rational_certificate(p, draft)
    except InputError as exc:
        return {"kind": "rational", "computed": False, "reason": str(exc)}
    agrees = abs(float(cert.dual_value) - value) <= 1e-9 + 4 * cert.rationalisation_error
    return {"kind": "rational", "computed": True, "ok": bool(cert.optimal and agrees), "agrees": bool(agrees),
            **cert.to_dict()}


def lp_certificate(c) -> dict:  # noqa: ANN001 - an otlp.lp.solution.Certificate
    """An LP / flow solution's re-check (``Solution.certificate``) as JSON: ``ok``, exact or within ``tol``, the
    primal and dual values, the gap and the violations (floats; exact ones also as fractions)."""
    def number(x: object) -> float | None:
        return None if x is None else float(x)

    out = {"kind": "lp", "computed": True, "ok": bool(c.ok), "exact": bool(c.exact), "tol": c.tol,
           **{k: number(getattr(c, k)) for k in ("primal_value", "dual_value", "gap", "primal_violation",
                                                 "dual_violation")}}
    if c.exact:
        out["exact_values"] = {k: str(getattr(c, k)) for k in ("primal_value", "dual_value", "gap")}
    return out


def certificate_text(cert: dict | None) -> str:
    """The table's certificate cell: OK / FAILED (LP re-check), exact OK / exact FAILED (rational), or -."""
    if not cert or not cert.get("computed"):
        return "-"
    return ("exact " if cert["kind"] == "rational" else "") + ("OK" if cert["ok"] else "FAILED")


def _num(fmt: str) -> Callable[[object], str]:
    return lambda v: "-" if v is None else format(v, fmt)


#: the columns of the solve table: (title, key, width, format); fixed widths so rows print as they finish
SOLVE_COLUMNS: list[tuple[str, str, int, Callable[[object], str]]] = [
    ("formulation", "formulation", 11, str), ("backend", "backend", 12, str),
    ("alpha", "value", 14, _num(".12f")), ("status", "status", 11, str),
    ("build ms", "build_ms", 9, _num(".2f")), ("solve ms", "solve_ms", 9, _num(".2f")),
    ("certificate", "certificate", 11, lambda c: certificate_text(c)),
]


def _format_row(row: dict, note: str = "") -> str:
    cells = []
    for _, key, width, fmt in SOLVE_COLUMNS:
        text = fmt(row.get(key))
        if key == "status" and note:
            text = f"{text} {note}"
        cells.append(text[:40].ljust(width))
    return "  ".join(cells).rstrip()


def _format_table(rows: list[dict]) -> str:
    """The solve table (header, rows, then the reasons of skipped / refused rows as numbered notes)."""
    lines = ["  ".join(title.ljust(width) for title, _, width, _ in SOLVE_COLUMNS).rstrip(),
             "  ".join("-" * width for _, _, width, _ in SOLVE_COLUMNS)]
    notes = []
    for row in rows:
        note = ""
        if row.get("reason"):
            notes.append(row["reason"])
            note = f"[{len(notes)}]"
        lines.append(_format_row(row, note))
    lines += [f"[{k}] {reason}" for k, reason in enumerate(notes, 1)]
    return "\n".join(lines)


def _short_vector(x: np.ndarray, limit: int = 6) -> str:
    shown = ", ".join(f"{v:.4g}" for v in x[:limit])
    return f"[{shown}{', ...' if x.size > limit else ''}]"


def _draft_laws(draft) -> dict[str, np.ndarray]:  # noqa: ANN001 - a DraftScheme
    """The draft law(s) the JSON reports: ``q`` (one law for all n drafts) or ``qs`` (Independent: one per draft)."""
    if getattr(draft, "qs", None) is not None:
        return {"qs": np.asarray(draft.qs)}
    q = getattr(draft, "q", None)
    return {} if q is None else {"q": np.asarray(q)}


def _p_summary(p: np.ndarray) -> dict:
    return {"V": int(p.size), "sum": float(p.sum()), "min": float(p.min()), "max": float(p.max()),
            "nonzero": int(np.count_nonzero(p)), "head": p[:8].tolist()}


def _example_note(args: argparse.Namespace) -> str:
    """What --example contributed to the problem line: the whole example, or the flags it filled in."""
    filled = getattr(args, "example_filled", [])
    if len(filled) == 3:
        return " (built-in example: SpecHub paper, Figs. 4-5)"
    if filled:
        return f" (--{', --'.join(filled)} from the built-in example; the rest as given)"
    return ""


def cmd_solve(args: argparse.Namespace) -> int:
    from otlp.cli.util import Progress, check_time_limit

    time_limit = check_time_limit(args.time_limit)
    p, draft = read_problem(args)
    formulations = args.formulation or (["optimal", "relaxed", "full", "maxflow"] if args.example
                                        else ["optimal", "relaxed"])
    if args.scheme not in ("iid", "without_replacement"):  # the exact rule's routes (otlp/optimal: chains, wor)
        if formulations == ["optimal"]:
            raise InputError("--formulation optimal is the exact rule for --scheme iid or without_replacement; "
                             "use one of those or an LP formulation")
        formulations = [f for f in formulations if f != "optimal"]
    backends = args.backend or (["highs", "cvxpy", "pulp", "ortools", "networkx", "pot", "exact"] if args.example
                                else ["highs"])
    rows: list[dict] = []
    with Progress("otlp solve", enabled=not args.json) as bar:
        stream = iter_solve_rows(p, draft, formulations, backends, requested=args.formulation or (),
                                 backends_given=bool(args.backend), time_limit=time_limit,
                                 on_start=bar.set_note)
        if args.json:
            rows = list(stream)
        else:
            q = getattr(draft, "q", None)
            problem = f"p = {_short_vector(p)}" + ("" if q is None else f", q = {_short_vector(np.asarray(q))}")
            print(f"alpha* for {draft!r} ({draft.name}), V = {p.size}: {problem}" + _example_note(args))
            print(_format_table([]))
            for row in stream:  # each row as it finishes (the closed form first); reasons go below the table
                rows.append(row)
                bar.close()
                note = f"[{sum(1 for r in rows if r.get('reason'))}]" if row.get("reason") else ""
                print(_format_row(row, note), flush=True)
                bar.update(1)
    if args.json:
        problem = {"p": p.tolist()} if p.size <= JSON_FULL_P else {"p_summary": _p_summary(p)}
        for key, q in _draft_laws(draft).items():
            problem.update({key: q.tolist()} if p.size <= JSON_FULL_P else {f"{key}_summary": _p_summary(q)})
        print(json.dumps({**problem, "V": int(p.size), "scheme": draft.name, "n": draft.n,
                          "time_limit": time_limit, "results": rows}, indent=2))
        return 0
    reasons = [r["reason"] for r in rows if r.get("reason")]
    for k, reason in enumerate(reasons, 1):
        print(f"[{k}] {reason}")
    values = [r["value"] for r in rows if r["value"] is not None]
    print(f"max spread between routes: {max(values) - min(values):.2e}")
    return 0


def _add_solve(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("solve", help="alpha* and the optimal plan by every formulation and backend asked for",
                            description="Compute alpha* = 1 + min_H psi(H) for a target p and a draft scheme, by the "
                                        "closed form, the exact rule (formulation 'optimal': i.i.d. and "
                                        "without-replacement drafts) and LP/flow formulations. The closed "
                                        "form and exact-rule rows print first; each LP / flow solve is skipped "
                                        "(with its size) when its estimated time is over --time-limit.")
    add_problem_arguments(parser)
    parser.add_argument("--formulation", action="append", choices=["optimal", *FORMULATIONS],
                        help="formulation to solve (repeat; default: optimal and relaxed)")
    parser.add_argument("--backend", action="append",
                        help="backend: highs, cvxpy, pulp, ortools, networkx, pot, exact (repeat; default: highs, "
                             "and for a formulation highs cannot solve, such as subset, the first installed backend "
                             "that can); a --formulation none of the given backends can solve is refused")
    parser.add_argument("--time-limit", type=float, default=SOLVE_TIME_LIMIT, metavar="SECONDS",
                        help=f"limit per LP / flow solve (default {SOLVE_TIME_LIMIT:g} s; inf = none): a solve whose "
                             "size predicts more is skipped before it starts, and backends that take a limit get it")
    parser.add_argument("--json", action="store_true",
                        help=f"machine-readable output (p in full up to V = {JSON_FULL_P}, else a summary)")
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
    ("certify", "how far a verifier (a registered rule, or your package.module:function) is from the optimum: "
     "acceptance, alpha*, gap, target law (exact, or a sequential test with a TV bound), exact certificate",
     "otlp.certification.rule", "add_certify_arguments", "run_certify_cli"),
    ("certify-block", "multi-step rules (sps, bv, gbv, token_tree, optimal) on random small AR models: block "
     "efficiency, multi-path LP optimum, gap, target law", "otlp.cli.multistep", "add_multistep_arguments",
     "run_multistep_cli"),
    ("check", "run the five papers' theorems as checks (exit 1 on any violation)",
     "otlp.cli.check", "add_check_arguments", "run_check_cli"),
    ("decode", "speculative decode loop (embedded n-gram pair by default): block efficiency, acceptance, tokens/s",
     "otlp.cli.decode", "add_decode_arguments", "run_decode_cli"),
    ("sweep", "alpha*, every rule's exact acceptance and the gaps over a capture of (p, q) pairs (otlp decode "
     "--capture), by depth, entropy and n; local cores or a Dask cluster", "otlp.cli.sweep", "add_sweep_arguments",
     "run_sweep_cli"),
]

#: the extra of pyproject.toml that installs everything a command needs (named when a package is missing)
COMMAND_EXTRAS = {"otlp decode": "decode", "otlp bench acceptance": "decode", "otlp sweep": "sweep"}

#: (name, help, module, argument adder, runner) of the ``otlp bench`` benchmarks.
BENCHMARKS: list[tuple[str, str, str, str, str]] = [
    ("acceptance", "alpha* over (n, top-k) on distributions collected from the decode loop: table, JSON and PNG "
     "(GR Figure 1)", "otlp.cli.decode", "add_acceptance_arguments", "run_acceptance_cli"),
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
