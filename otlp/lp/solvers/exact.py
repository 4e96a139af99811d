"""The ``exact`` backend: a :class:`LinearModel` solved in rational arithmetic (``fractions.Fraction``).

Route: HiGHS solves the model in floating point and hands over its optimal basis; the basic solution of that
basis is then recomputed exactly (the float data are read as the exact rationals they are) and checked. A float
basis can be off in exact arithmetic -- a basic value of -1e-17 where sum p and sum P_draft differ by rounding,
or a reduced cost of the wrong sign inside HiGHS's tolerance -- so the exact solve continues with a bounded
primal simplex in rationals (phase 1 on the sum of infeasibilities, then phase 2; Bland's rule, so degenerate
pivots cannot cycle) until the basis is exactly primal and dual feasible. From a near-optimal start that takes
a handful of pivots.

The result has ``value`` a ``Fraction``, ``primal`` and ``dual`` as object arrays of ``Fraction``, and
``Solution.certificate()`` then runs in exact mode: zero primal violation and zero duality gap, exactly.

Standard form used inside: variables ``z = (x [N], s [M])`` with ``A x - s = 0``, ``lower <= x <= upper``,
``row_lower <= s <= row_upper``; the duals ``y`` solve ``B^T y = c_B`` and ``c - A^T y`` are the reduced costs,
which is :mod:`otlp.lp.solution`'s convention.

Size limit: rational arithmetic is about three orders of magnitude slower than floating point, so models with
``ModelSize.bytes`` above ``EXACT_LIMIT_BYTES`` (2 MiB, roughly 20,000 nonzeros; FullOTLP at V = 6, n = 3 is
0.2 MiB) are refused with their size, before any rational work.
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

import numpy as np

from otlp.core.errors import InputError
from otlp.lp.ir import LinearModel
from otlp.lp.solution import Solution

CAPABILITIES = frozenset({"linear"})
NAME = "exact"
EXACT_LIMIT_BYTES = 2 * 1024**2
_OPTION_NAMES = {"max_iterations", "time_limit"}
_ZERO = Fraction(0)


class SingularBasisError(ArithmeticError):
    """The basis matrix handed over is singular in exact arithmetic."""


class RationalLU:
    """Sparse Gaussian elimination of a square rational matrix (Markowitz-style pivot choice), reusable for
    several right-hand sides. ``rows[r]`` is a dict {column: Fraction} of row r."""

    def __init__(self, rows: list[dict[int, Fraction]]):
        n = len(rows)
        self.n = n
        rows = [dict(r) for r in rows]
        col_rows: dict[int, set[int]] = {}
        for r, row in enumerate(rows):
            for c in row:
                col_rows.setdefault(c, set()).add(r)
        active = set(range(n))
        self.ops: list[tuple[int, int, list[tuple[int, Fraction]]]] = []
        while active:
            r = min(active, key=lambda i: (len(rows[i]), i))
            if not rows[r]:
                raise SingularBasisError("basis matrix is singular")
            c = min(rows[r], key=lambda j: (len(col_rows[j]), j))
            pivot = rows[r][c]
            active.discard(r)
            for j in rows[r]:
                col_rows[j].discard(r)
            targets = []
            for t in list(col_rows[c]):
                m = rows[t][c] / pivot
                row_t = rows[t]
                for j, v in rows[r].items():
                    nv = row_t.get(j, _ZERO) - m * v
                    if nv == 0:
                        if j in row_t:
                            del row_t[j]
                            col_rows[j].discard(t)
                    else:
                        if j not in row_t:
                            col_rows[j].add(t)
                        row_t[j] = nv
                targets.append((t, m))
            self.ops.append((r, c, targets))
        self.rows = rows

    def solve(self, b: list[Fraction]) -> list[Fraction]:
        """x with ``matrix @ x = b`` (b indexed by row, x by column)."""
        b = list(b)
        for r, _c, targets in self.ops:
            br = b[r]
            if br != 0:
                for t, m in targets:
                    b[t] -= m * br
        x = [_ZERO] * self.n
        for r, c, _ in reversed(self.ops):
            row = self.rows[r]
            acc = b[r]
            for j, v in row.items():
                if j != c:
                    acc -= v * x[j]
            x[c] = acc / row[c]
        return x


class _StandardForm:
    """``A x - s = 0`` with bounds, all in Fractions; a column k < N is x_k, k >= N is the slack of row k - N."""

    def __init__(self, model: LinearModel):
        A = model.A.tocsc()
        self.N, self.M = model.num_variables, model.num_constraints
        self.cols: list[dict[int, Fraction]] = []
        for j in range(self.N):
            s = slice(A.indptr[j], A.indptr[j + 1])
            self.cols.append({int(i): Fraction(float(v)) for i, v in zip(A.indices[s], A.data[s], strict=True)})
        for i in range(self.M):
            self.cols.append({i: Fraction(-1)})
        sign = 1 if model.sense == "max" else -1
        self.cost = [Fraction(float(v)) * sign for v in model.objective] + [_ZERO] * self.M  # max form
        self.lower = [_frac(v) for v in np.concatenate([model.lower, model.row_lower])]
        self.upper = [_frac(v) for v in np.concatenate([model.upper, model.row_upper])]


def _frac(v: float) -> Fraction | None:
    """None for an infinite bound."""
    return Fraction(float(v)) if np.isfinite(v) else None


class _Simplex:
    """Bounded primal simplex in rationals from a given basis (see the module docstring)."""

    def __init__(self, sf: _StandardForm, basis: list[int], at_upper: set[int], max_iterations: int,
                 deadline: float):
        self.sf = sf
        self.basis = list(basis)
        self.at_upper = set(at_upper)  # nonbasic variables sitting at their upper bound
        self.max_iterations = max_iterations
        self.deadline = deadline
        self.iterations = 0

    # -- linear algebra on the current basis -------------------------------------------------------------------
    def _factor(self) -> None:
        M = self.sf.M
        rows: list[dict[int, Fraction]] = [{} for _ in range(M)]
        for pos, k in enumerate(self.basis):
            for i, v in self.sf.cols[k].items():
                rows[i][pos] = v
        self.lu = RationalLU(rows)
        cols_t: list[dict[int, Fraction]] = [dict(self.sf.cols[k]) for k in self.basis]  # rows of B^T
        self.lu_t = RationalLU(cols_t)

    def nonbasic_value(self, k: int) -> Fraction:
        lo, up = self.sf.lower[k], self.sf.upper[k]
        if k in self.at_upper:
            return up
        if lo is not None:
            return lo
        return up if up is not None else _ZERO  # a free nonbasic variable sits at 0

    def values(self) -> list[Fraction]:
        """All of z: nonbasic at their bounds, basic from ``B z_B = -N z_N``."""
        sf = self.sf
        basic = set(self.basis)
        z = [_ZERO] * (sf.N + sf.M)
        rhs = [_ZERO] * sf.M
        for k in range(sf.N + sf.M):
            if k in basic:
                continue
            v = self.nonbasic_value(k)
            z[k] = v
            if v != 0:
                for i, a in sf.cols[k].items():
                    rhs[i] -= a * v
        for pos, v in enumerate(self.lu.solve(rhs)):
            z[self.basis[pos]] = v
        return z

    def duals(self, cost: list[Fraction]) -> list[Fraction]:
        return self.lu_t.solve([cost[k] for k in self.basis])

    def reduced(self, cost: list[Fraction], y: list[Fraction], k: int) -> Fraction:
        d = cost[k]
        for i, a in self.sf.cols[k].items():
            d -= y[i] * a
        return d

    # -- the method ----------------------------------------------------------------------------------------
    def run(self) -> str:
        """Iterate to optimality. Returns "optimal", "infeasible", "unbounded" or "iteration_limit"."""
        sf = self.sf
        while True:
            if self.iterations >= self.max_iterations or time.perf_counter() > self.deadline:
                return "iteration_limit"
            self._factor()
            z = self.values()
            infeasible = {k: (1 if sf.lower[k] is not None and z[k] < sf.lower[k] else -1)
                          for k in self.basis
                          if (sf.lower[k] is not None and z[k] < sf.lower[k])
                          or (sf.upper[k] is not None and z[k] > sf.upper[k])}
            phase1 = bool(infeasible)
            if phase1:  # maximise -(sum of infeasibilities): cost +1 below the lower bound, -1 above the upper
                cost = [_ZERO] * (sf.N + sf.M)
                for k, direction in infeasible.items():
                    cost[k] = Fraction(direction)
            else:
                cost = sf.cost
            y = self.duals(cost)
            entering, direction = self._price(cost, y)
            if entering is None:
                return "infeasible" if phase1 else "optimal"
            if not self._step(z, entering, direction, phase1):
                return "unbounded"
            self.iterations += 1

    def _price(self, cost: list[Fraction], y: list[Fraction]) -> tuple[int | None, int]:
        """Bland's rule: the lowest-index nonbasic variable whose move improves the objective."""
        sf = self.sf
        basic = set(self.basis)
        for k in range(sf.N + sf.M):
            if k in basic:
                continue
            d = self.reduced(cost, y, k)
            if d == 0:
                continue
            lo, up = sf.lower[k], sf.upper[k]
            value = self.nonbasic_value(k)
            if d > 0 and (up is None or value < up):
                return k, 1
            if d < 0 and (lo is None or value > lo):
                return k, -1
        return None, 0

    def _step(self, z: list[Fraction], entering: int, direction: int, phase1: bool) -> bool:
        """Ratio test and pivot (or bound flip). Returns False when the step is unbounded."""
        sf = self.sf
        rhs = [_ZERO] * sf.M
        for i, a in sf.cols[entering].items():
            rhs[i] = a
        w = self.lu.solve(rhs)  # B w = a_entering; z_B moves by -direction * t * w
        best_t: Fraction | None = None
        best: tuple[int, int] | None = None  # (variable, position in basis); position -1 = bound flip
        lo_e, up_e = sf.lower[entering], sf.upper[entering]
        if lo_e is not None and up_e is not None:
            best_t, best = up_e - lo_e, (entering, -1)
        for pos, k in enumerate(self.basis):
            rate = -direction * w[pos]
            if rate == 0:
                continue
            lo, up, v = sf.lower[k], sf.upper[k], z[k]
            t = None
            if rate > 0:
                if lo is not None and v < lo:
                    t = (lo - v) / rate  # becomes feasible at its lower bound
                elif up is not None and v <= up:
                    t = (up - v) / rate
            else:
                if up is not None and v > up:
                    t = (up - v) / rate
                elif lo is not None and v >= lo:
                    t = (lo - v) / rate
            if t is None:
                continue
            if best_t is None or t < best_t or (t == best_t and best is not None and k < best[0]):
                best_t, best = t, (k, pos)
        if best is None:
            return False
        k, pos = best
        if pos == -1:  # bound flip of the entering variable
            if direction > 0:
                self.at_upper.add(entering)
            else:
                self.at_upper.discard(entering)
            return True
        # k leaves at the bound it reached
        rate = -direction * w[pos]
        new_value = z[k] + rate * best_t
        self.basis[pos] = entering
        self.at_upper.discard(entering)
        if sf.upper[k] is not None and new_value == sf.upper[k] and (sf.lower[k] is None or sf.lower[k] != new_value):
            self.at_upper.add(k)
        else:
            self.at_upper.discard(k)
        return True


def _initial_basis(model: LinearModel, h) -> tuple[list[int], set[int]]:  # noqa: ANN001
    """HiGHS's basis as (basic variables, nonbasic at upper) in the standard form's numbering."""
    import highspy

    S = highspy.HighsBasisStatus
    basis = h.getBasis()
    statuses = list(basis.col_status) + list(basis.row_status)
    upper = np.concatenate([model.upper, model.row_upper])
    basic = [k for k, s in enumerate(statuses) if s == S.kBasic]
    at_upper = {k for k, s in enumerate(statuses) if s == S.kUpper and np.isfinite(upper[k])}
    return basic, at_upper


def solve_linear(model: LinearModel, **options: Any) -> Solution:
    """Solve ``model`` exactly; see the module docstring. Options: ``max_iterations`` (exact pivots, default
    ``10 * (N + M) + 100``) and ``time_limit`` (seconds for the exact phase, default none)."""
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise InputError(f"unknown option(s) for the exact backend: {sorted(unknown)}; "
                         f"expected some of {sorted(_OPTION_NAMES)}")
    size = model.size()
    size.check(f"exact rational solve of {model.name} (limit otlp.lp.solvers.exact.EXACT_LIMIT_BYTES)",
               EXACT_LIMIT_BYTES)
    from otlp.lp.solvers import highs

    start = time.perf_counter()
    h, status, float_seconds = highs.run(model)
    info: dict[str, Any] = {"float_status": status}
    if status != "optimal":
        seconds = {"build": float_seconds["build"], "solve": time.perf_counter() - start - float_seconds["build"]}
        return Solution(float("nan"), status, {}, None, seconds, NAME, model=model, info=info)
    info["float_value"] = float(h.getInfo().objective_function_value)
    basis, at_upper = _initial_basis(model, h)
    built = time.perf_counter()
    sf = _StandardForm(model)
    if len(basis) != sf.M:
        raise InputError(f"HiGHS returned a basis of {len(basis)} variables for {sf.M} rows; cannot solve exactly")
    limit = options.get("time_limit")
    deadline = time.perf_counter() + (float(limit) if limit is not None else float("inf"))
    max_iterations = int(options.get("max_iterations") or 10 * (sf.N + sf.M) + 100)
    simplex = _Simplex(sf, basis, at_upper, max_iterations, deadline)
    outcome = simplex.run()
    info["exact_pivots"] = simplex.iterations
    seconds = {"build": built - start, "solve": time.perf_counter() - built}
    if outcome != "optimal":
        status = {"iteration_limit": "time_limit"}.get(outcome, outcome)
        return Solution(float("nan"), status, {}, None, seconds, NAME, model=model, info=info)
    z = simplex.values()
    y_max = simplex.duals(sf.cost)  # max-form multipliers
    _verify(sf, simplex, z, y_max)
    sign = 1 if model.sense == "max" else -1
    x = np.empty(sf.N, dtype=object)
    x[:] = z[: sf.N]
    y = np.empty(sf.M, dtype=object)
    y[:] = [sign * v for v in y_max]
    value = sum((Fraction(float(c)) * xj for c, xj in zip(model.objective.tolist(), z[: sf.N], strict=True) if c != 0),
                _ZERO) + Fraction(float(model.constant))
    seconds["solve"] = time.perf_counter() - built
    return Solution(value, "optimal", model.split(x), model.split_rows(y), seconds, NAME, model=model, info=info)


def _verify(sf: _StandardForm, simplex: _Simplex, z: list[Fraction], y: list[Fraction]) -> None:
    """Exact checks of the final basis: every variable within its bounds, every nonbasic reduced cost of the
    sign its bound allows. Raises ``ArithmeticError`` if not (a bug, never a tolerance)."""
    for k, v in enumerate(z):
        if (sf.lower[k] is not None and v < sf.lower[k]) or (sf.upper[k] is not None and v > sf.upper[k]):
            raise ArithmeticError(f"exact basis is primal infeasible at variable {k}")
    basic = set(simplex.basis)
    for k in range(sf.N + sf.M):
        if k in basic:
            continue
        d = simplex.reduced(sf.cost, y, k)
        v = z[k]
        if (d > 0 and (sf.upper[k] is None or v < sf.upper[k])) or (d < 0 and (sf.lower[k] is None or v > sf.lower[k])):
            raise ArithmeticError(f"exact basis is dual infeasible at variable {k}")
