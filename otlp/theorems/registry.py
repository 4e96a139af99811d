"""The registry of every check, the runner and the table formatter."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from otlp.core.distributions import check_int
from otlp.theorems.core import CheckResult, Registry


def build_registry() -> Registry:
    """All registered checks, paper by paper (imported lazily: no module-level side effects)."""
    from otlp.theorems import cd, cd_truncation, gbv, gr, gr_convex, spechub, spectr

    registry = Registry()
    for module in (gr, gr_convex, cd, cd_truncation, spectr, spechub, gbv):
        registry.extend(module.CHECKS)
    return registry


def run_checks(names: Iterable[str] | None = None, instances: int = 20, seed: int = 0, exact: bool = False,
               impl: dict | None = None, time_limit: float | None = None,
               on_instance: Callable[[int], None] | None = None) -> list[CheckResult]:
    """Run the selected checks (all by default; names may be prefixes like ``"gr."``) and return their results.

    ``impl`` maps a hook name to an implementation injected into every selected check that has that hook.
    ``time_limit`` and ``on_instance`` apply to each check (see :meth:`otlp.theorems.core.Check.run`).
    """
    check_int(seed, "seed", 0)
    registry = build_registry()
    results = []
    for check in registry.select(None if names is None else list(names)):
        own = {k: v for k, v in (impl or {}).items() if k in check.hooks}
        results.append(check.run(instances=instances, seed=seed, exact=exact, impl=own, time_limit=time_limit,
                                 on_instance=on_instance))
    return results


def format_table(results: list[CheckResult], width: int = 60) -> str:
    """A plain-text table: theorem, source, instances tried, worst violation, status (and details on failure)."""
    header = ("theorem", "source", "instances", "worst violation", "status")
    rows = []
    for r in results:
        worst = "n/a" if r.worst_violation != r.worst_violation else f"{r.worst_violation:.2e}"
        status = r.status.upper() + ("" if r.mode == "float" else f" ({r.mode})")
        rows.append((r.name, _clip(r.source, width), str(r.instances), worst, status))
    widths = [max(len(h), *(len(row[k]) for row in rows)) if rows else len(h) for k, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    failed = [r for r in results if not r.ok]
    for r in failed:
        lines.append(f"{r.name}: {r.status}: {r.details}")
    lines.append(f"{len(results) - len(failed)}/{len(results)} checks passed")
    if any(r.mode == "exact + float" for r in results):
        lines.append("(exact + float): every rational part held exactly; the worst violation shown is a float "
                     "implementation's, compared within the check's tolerance")
    if any(r.exact for r in results) and not all(r.exact for r in results):
        lines.append("a status without (exact) ran in floating point only: that check has no rational mode")
    return "\n".join(lines)


def results_json(results: list[CheckResult]) -> str:
    return json.dumps([r.to_dict() for r in results], indent=2, default=float)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
