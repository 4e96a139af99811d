"""The theorem registry: a :class:`Check` per theorem, lemma or closed form, and the runner.

A check holds
- a **statement** (as corrected where the paper is misprinted; ``printed`` and ``counterexample`` record the printed
  version and an instance on which it fails),
- an **instance generator** ``generate(rng, count, exact) -> list[Instance]`` (random and adversarial: ties, zeros,
  point masses, p = q, near-degenerate; seeded),
- a **verify** function ``verify(instance, impl, exact) -> float``: the violation of the statement on one instance,
  computed against an independent route to the truth (an LP, brute force over subsets, rationals, enumeration);
  0 (or below the tolerance) means the statement holds,
- **hooks**: the implementation under test, by name (``"optimal_acceptance"``, ``"verifier:kseq"``, ...), resolved
  lazily from ``otlp`` so a test can inject a deliberately broken one (``run(..., impl={"min_psi": broken})``).

In exact mode the instances are rational with V <= 5 and the truth side is computed in rational arithmetic
(fractions / sympy's exact simplex); equalities between two rational quantities must then hold exactly (violation
reported as 0 or as the exact gap), while a float implementation under test is still compared within ``tolerance``.
"""

from __future__ import annotations

import importlib
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from fractions import Fraction

import numpy as np

PASS, FAIL, ERROR = "pass", "fail", "error"
#: instances generated per call of a check's generator (see Check._instances)
GENERATE_CHUNK = 10_000


@dataclass(frozen=True)
class CheckResult:
    """The outcome of running one check.

    instances: how many instances were tried; worst_violation: the largest violation seen (0 = holds exactly);
    status: "pass", "fail" (a violation above the tolerance) or "error" (the check itself raised);
    details: where the worst violation happened (instance label), or the error message;
    stopped: why fewer instances than asked were tried (the time limit), else "";
    hard: an exact (rational) equality failed. In exact mode a rational gap is always hard, so a result that is
    not hard with worst_violation > 0 got it from a float part (the implementation under test): see ``mode``.
    """

    name: str
    title: str
    source: str
    instances: int
    worst_violation: float
    tolerance: float
    status: str
    details: str
    exact: bool
    seconds: float
    stopped: str = ""
    hard: bool = False

    @property
    def ok(self) -> bool:
        return self.status == PASS

    @property
    def mode(self) -> str:
        """How the worst violation was measured: "float" (no exact mode), "exact" (exact mode, and the worst
        violation is an exact rational gap: 0 when it holds), or "exact + float" (exact mode, every rational part
        held exactly, and the nonzero worst violation is a float implementation's, compared within tolerance)."""
        if not self.exact:
            return "float"
        return "exact" if self.hard or self.worst_violation == 0 else "exact + float"

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "mode": self.mode}


class Violation(float):
    """A float violation carrying a note on what failed (shown in ``CheckResult.details``).

    ``hard``: an exact (rational) equality failed; the check fails whatever the float tolerance.
    """

    note: str
    hard: bool

    def __new__(cls, value: float, note: str = "", hard: bool = False) -> Violation:
        obj = super().__new__(cls, value)
        obj.note = note
        obj.hard = hard
        return obj


class Tally:
    """Collects the parts of one instance's verification and keeps the worst.

    ``equal(what, a, b)``: |a - b|; when both sides are ``Fraction`` (exact mode) any nonzero gap is a hard failure.
    ``leq(what, a, b)``: max(a - b, 0), same exactness rule. ``holds(what, cond)``: 1.0 when ``cond`` is false.
    """

    def __init__(self) -> None:
        self.worst = 0.0
        self.note = ""
        self.hard = False

    def _add(self, what: str, value: float, hard: bool = False) -> None:
        if value != value:  # NaN: the comparison itself broke down, which must fail the check, not pass it
            value = float("inf")
        if hard and not self.hard:
            self.hard = True
            self.worst, self.note = max(value, self.worst), f"{what} (exact equality fails, gap {value:.3g})"
            return
        if value > self.worst and not self.hard:
            self.worst, self.note = value, f"{what} off by {value:.3g}"

    def equal(self, what: str, a: object, b: object) -> None:
        if isinstance(a, Fraction) and isinstance(b, Fraction):
            gap = abs(a - b)
            self._add(what, float(gap), hard=gap != 0)
        else:
            self._add(what, abs(float(a) - float(b)))

    def leq(self, what: str, a: object, b: object) -> None:
        if isinstance(a, Fraction) and isinstance(b, Fraction):
            excess = a - b
            self._add(what, float(max(excess, 0)), hard=excess > 0)
        else:
            self._add(what, max(float(a) - float(b), 0.0))

    def holds(self, what: str, condition: bool) -> None:
        if not condition:
            self._add(what, 1.0)

    def result(self) -> Violation:
        return Violation(self.worst, self.note, self.hard)


@dataclass
class Check:
    """One runnable theorem. See the module docstring for the fields' roles."""

    name: str
    title: str
    source: str
    statement: str
    generate: Callable[[np.random.Generator, int, bool], list]
    verify: Callable[[object, Mapping[str, Callable], bool], float]
    hooks: Mapping[str, str] = field(default_factory=dict)
    tolerance: float = 1e-7
    exact_supported: bool = False
    printed: str | None = None
    counterexample: str | None = None
    conditions: str | None = None

    def resolve(self, impl: Mapping[str, Callable] | None = None) -> dict[str, Callable]:
        """The implementation under test: the default hooks (``"module:attr"``) overridden by ``impl``."""
        impl = dict(impl or {})
        unknown = set(impl) - set(self.hooks)
        if unknown:
            raise KeyError(f"check {self.name} has no hook(s) {sorted(unknown)}; its hooks are {sorted(self.hooks)}")
        out: dict[str, Callable] = {}
        for key, path in self.hooks.items():
            out[key] = impl[key] if key in impl else load_hook(path)
        return out

    def _instances(self, rng: np.random.Generator, instances: int, exact: bool):  # noqa: ANN202 - a generator
        """The generated instances, in lists of at most GENERATE_CHUNK, so that a time limit also bounds the
        generation (a million instances took 40 s to generate before the first was checked)."""
        for start in range(0, instances, GENERATE_CHUNK):
            yield from self.generate(rng, min(GENERATE_CHUNK, instances - start), exact)

    def run(self, instances: int = 20, seed: int = 0, exact: bool = False,
            impl: Mapping[str, Callable] | None = None, time_limit: float | None = None,
            on_instance: Callable[[int], None] | None = None) -> CheckResult:
        """Try the statement on ``instances`` generated instances (seeded) and report the worst violation.

        ``time_limit`` (seconds): stop after the instance that crosses it (``instances`` in the result says how
        many ran, ``details`` says it stopped); ``on_instance(tried)`` is called after each instance (progress)."""
        start = time.perf_counter()
        stopped = ""
        exact = bool(exact and self.exact_supported)
        worst, where, tried, hard = 0.0, "", 0, False
        try:
            hooks = self.resolve(impl)
            rng = np.random.default_rng(seed)
            for instance in self._instances(rng, int(instances), exact):
                raw = self.verify(instance, hooks, exact)
                value = float(raw)
                tried += 1
                if not value == value:  # NaN: the comparison itself broke down, count it as a violation
                    value = float("inf")
                if getattr(raw, "hard", False) and not hard:
                    hard, worst = True, value
                    where = f"{getattr(instance, 'label', instance)}: {getattr(raw, 'note', '')}"
                elif (tried == 1 or value > worst) and not hard:
                    note = getattr(raw, "note", "")
                    worst, where = value, f"{getattr(instance, 'label', instance)}" + (f": {note}" if note else "")
                if on_instance is not None:
                    on_instance(tried)
                if time_limit is not None and tried < instances and time.perf_counter() - start > time_limit:
                    stopped = f"stopped at the {time_limit:g} s time limit after {tried} of {int(instances)} instances"
                    break
        except Exception as exc:  # noqa: BLE001 - a check that raises is reported, never crashes the run
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            return CheckResult(self.name, self.title, self.source, tried, float("nan"), self.tolerance, ERROR,
                               f"{type(exc).__name__}: {exc} (at {tb.name}:{tb.lineno})", exact,
                               time.perf_counter() - start)
        status = PASS if worst <= self.tolerance and not hard else FAIL
        return CheckResult(self.name, self.title, self.source, tried, worst, self.tolerance, status,
                           where if status == FAIL or worst > 0 else "", exact, time.perf_counter() - start, stopped,
                           hard)


def load_hook(path: str) -> Callable:
    """Import ``"package.module:attr"`` (``attr`` may be dotted) lazily, so a missing module errors only its check."""
    module_name, _, attr = path.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


class Registry:
    """Checks by name, in registration order."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def register(self, check: Check) -> Check:
        if check.name in self._checks:
            raise ValueError(f"duplicate check name {check.name!r}")
        self._checks[check.name] = check
        return check

    def extend(self, checks: Iterable[Check]) -> None:
        for check in checks:
            self.register(check)

    def names(self) -> list[str]:
        return list(self._checks)

    def __getitem__(self, name: str) -> Check:
        return self._checks[name]

    def __contains__(self, name: object) -> bool:
        return name in self._checks

    def __iter__(self):  # noqa: ANN204
        return iter(self._checks.values())

    def __len__(self) -> int:
        return len(self._checks)

    def select(self, names: Iterable[str] | None) -> list[Check]:
        """Checks matching ``names``: exact names, or prefixes ending in "." / "*" (``gr.`` selects every GR check)."""
        if names is None:
            return list(self._checks.values())
        chosen: list[Check] = []
        for raw in names:
            key = raw.strip()
            if key in self._checks:
                matched = [self._checks[key]]
            else:
                prefix = key.rstrip("*")
                matched = [c for c in self._checks.values() if prefix and c.name.startswith(prefix)]
            if not matched:
                from otlp.core.errors import InputError

                raise InputError(f"unknown theorem {key!r}; known checks: {', '.join(self._checks)}")
            chosen.extend(c for c in matched if c not in chosen)
        return chosen
