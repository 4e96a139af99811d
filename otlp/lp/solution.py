"""One result type for every backend, and an independent re-check of it.

A :class:`Solution` carries the value, the primal by block, the dual where the backend gives one, and timings.
:meth:`Solution.certificate` re-checks it without the solver: primal feasibility (bounds and rows), the objective
recomputed from the primal, and a dual bound computed from the duals alone, so the duality gap is measured, not
trusted. For rational (``fractions.Fraction``) solutions every check is exact.

Dual convention (LinearModel). For ``max c.x, l <= A x <= u, lb <= x <= ub`` and any row multipliers ``y``,
``c.x = y.(A x) + r.x`` with reduced costs ``r = c - A^T y``, hence the weak-duality bound
``c.x <= sum_r (y_r u_r if y_r > 0 else y_r l_r) + sum_j sup_{x_j in [lb_j, ub_j]} r_j x_j``.
Backends report ``y`` as the multipliers that make this bound tight (for ``min``, the mirror-image lower bound).
An infinite bound met with a wrong-signed multiplier is a *dual violation*, reported by its size.

FlowNetwork duals are a cut: ``dual["source_side"]`` (bool per node); its capacity bounds every flow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from otlp.lp.ir import FlowNetwork, LinearModel


@dataclass
class Certificate:
    """The outcome of an independent re-check. ``ok`` is True when every violation and the gap are within ``tol``
    (exactly zero in exact mode)."""

    primal_value: float | Fraction
    dual_value: float | Fraction | None
    gap: float | Fraction | None
    primal_violation: float | Fraction
    dual_violation: float | Fraction | None
    exact: bool
    tol: float

    @property
    def ok(self) -> bool:
        checks = [self.primal_violation]
        if self.gap is not None:
            checks.append(abs(self.gap))
        if self.dual_violation is not None:
            checks.append(self.dual_violation)
        if self.exact:
            return all(c == 0 for c in checks)
        return all(float(c) <= self.tol for c in checks)

    def __str__(self) -> str:
        mode = "exact" if self.exact else f"tol {self.tol:g}"
        gap = "n/a (no dual)" if self.gap is None else f"{float(self.gap):.3g}"
        return (f"certificate ({mode}): {'OK' if self.ok else 'FAILED'}; primal {float(self.primal_value):.12g}, "
                f"dual {'n/a' if self.dual_value is None else f'{float(self.dual_value):.12g}'}, gap {gap}, "
                f"primal violation {float(self.primal_violation):.3g}")


@dataclass
class Solution:
    """What every backend returns.

    Attributes
    ----------
    value : the optimal objective (alpha* for the OTLP family), a float (or Fraction from ``exact``).
    status : "optimal", "infeasible", "unbounded", "time_limit" or "error".
    primal : {block name: array}, by variable block (arc group for networks).
    dual : {row group: array} where the backend gives duals, else None.
    seconds : {"build": ..., "solve": ...}.
    backend : the backend's name.
    formulation : the formulation's name.
    model : the IR that was solved (for :meth:`certificate`).
    value_bound : a bound on |value - true optimum| due to the backend's arithmetic (e.g. OR-Tools int64
        capacity rounding); 0 when the backend solves in floating point to its own tolerance.
    info : backend-specific extras (iterations, scale factor, ...).
    """

    value: Any
    status: str
    primal: dict[str, np.ndarray]
    dual: dict[str, np.ndarray] | None
    seconds: dict[str, float]
    backend: str
    formulation: str = ""
    model: LinearModel | FlowNetwork | None = None
    value_bound: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    def certificate(self, tol: float = 1e-7) -> Certificate:
        """Re-check feasibility and the duality gap without the solver (exactly, for rational solutions)."""
        if isinstance(self.model, LinearModel):
            return _certify_linear(self, self.model, tol)
        if isinstance(self.model, FlowNetwork):
            return _certify_network(self, self.model, tol)
        raise ValueError(f"solution from backend {self.backend!r} carries no model to certify")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (no arrays)."""
        return {"formulation": self.formulation, "backend": self.backend, "status": self.status,
                "value": float(self.value), "value_bound": self.value_bound,
                "seconds": {k: round(v, 6) for k, v in self.seconds.items()}}

    def __repr__(self) -> str:
        build_ms = self.seconds.get("build", 0.0) * 1e3
        solve_ms = self.seconds.get("solve", 0.0) * 1e3
        return (f"Solution({self.formulation or 'model'} via {self.backend}: {self.status}, "
                f"value={float(self.value):.12g}, build {build_ms:.2f} ms, solve {solve_ms:.2f} ms)")


def _is_exact(values: dict[str, np.ndarray] | None) -> bool:
    if not values:
        return False
    return any(np.asarray(v).dtype == object for v in values.values())


def _certify_linear(sol: Solution, model: LinearModel, tol: float) -> Certificate:
    exact = _is_exact(sol.primal)
    x = model.flatten(sol.primal)
    A = model.A.tocoo()
    c = model.objective
    lb, ub = model.lower, model.upper
    rl, ru = model.row_lower, model.row_upper
    sign = 1 if model.sense == "max" else -1
    if exact:
        zero = Fraction(0)
        act = [zero] * model.num_constraints
        for r, j, v in zip(A.row.tolist(), A.col.tolist(), A.data.tolist(), strict=True):
            act[r] += Fraction(v) * x[j]
        viol = zero
        for i, a in enumerate(act):
            if np.isfinite(ru[i]):
                viol = max(viol, a - Fraction(ru[i]))
            if np.isfinite(rl[i]):
                viol = max(viol, Fraction(rl[i]) - a)
        for j, xj in enumerate(x):
            if np.isfinite(ub[j]):
                viol = max(viol, xj - Fraction(ub[j]))
            if np.isfinite(lb[j]):
                viol = max(viol, Fraction(lb[j]) - xj)
        primal = sum((Fraction(cj) * xj for cj, xj in zip(c.tolist(), x, strict=True) if cj != 0), zero)
        primal += Fraction(model.constant)
    else:
        xf = x.astype(np.float64)
        act = A.tocsr() @ xf
        viol = float(max(0.0, np.max(act - ru, initial=0.0), np.max(rl - act, initial=0.0),
                         np.max(xf - ub, initial=0.0), np.max(lb - xf, initial=0.0)))
        primal = float(c @ xf) + model.constant
    if sol.dual is None:
        return Certificate(primal, None, None, viol, None, exact, tol)
    y = np.concatenate([np.asarray(sol.dual[name]).reshape(-1) for name in model.row_blocks]) if model.row_blocks \
        else np.zeros(0)
    # Work with the max form: max (sign*c).x, duals y (already in the max-form convention after the sign flip).
    if exact or y.dtype == object:
        ys = [Fraction(v) * sign for v in y.tolist()]
        reduced = [Fraction(cj) * sign for cj in c.tolist()]
        for r, j, v in zip(A.row.tolist(), A.col.tolist(), A.data.tolist(), strict=True):
            reduced[j] -= ys[r] * Fraction(v)
        row_bound, row_viol = _exact_side_bound(ys, ru, rl)
        col_bound, col_viol = _exact_side_bound(reduced, ub, lb)
        bound, dviol = row_bound + col_bound, max(row_viol, col_viol)
        dual = sign * bound + Fraction(model.constant)
        gap = sign * (dual - primal)
        return Certificate(primal, dual, gap, viol, dviol, True if exact else False, tol)
    ys = sign * y.astype(np.float64)
    reduced = sign * c - A.tocsr().T @ ys
    row_side = np.where(ys > 0, ru, rl)
    col_side = np.where(reduced > 0, ub, lb)
    row_bad = (ys != 0) & ~np.isfinite(row_side)
    col_bad = (reduced != 0) & ~np.isfinite(col_side)
    dviol = float(max(np.max(np.abs(ys[row_bad]), initial=0.0), np.max(np.abs(reduced[col_bad]), initial=0.0)))
    bound = float(np.sum(np.where(row_bad, 0.0, ys * np.where(np.isfinite(row_side), row_side, 0.0)))
                  + np.sum(np.where(col_bad, 0.0, reduced * np.where(np.isfinite(col_side), col_side, 0.0))))
    dual = sign * bound + model.constant
    gap = sign * (dual - primal)
    return Certificate(primal, dual, gap, viol, dviol, False, tol)


def _exact_side_bound(multipliers: list[Fraction], upper: np.ndarray, lower: np.ndarray) -> tuple[Fraction, Fraction]:
    """sum_k m_k * (upper_k if m_k > 0 else lower_k) in Fractions, and the largest |m_k| that meets an infinite side
    (a dual violation)."""
    bound, violation = Fraction(0), Fraction(0)
    for k, m in enumerate(multipliers):
        if m == 0:
            continue
        side = upper[k] if m > 0 else lower[k]
        if np.isfinite(side):
            bound += m * Fraction(side)
        else:
            violation = max(violation, abs(m))
    return bound, violation


def _certify_network(sol: Solution, net: FlowNetwork, tol: float) -> Certificate:
    flow = np.concatenate([np.asarray(sol.primal[name], dtype=np.float64).reshape(-1) for name in net.arc_blocks])
    order = np.concatenate([np.arange(s.start, s.stop) for s in net.arc_blocks.values()])
    f = np.zeros(net.num_arcs)
    f[order] = flow
    cap_viol = np.max(f - net.capacities, initial=0.0)
    neg = np.max(-f, initial=0.0)
    balance = np.bincount(net.tails, weights=f, minlength=net.num_nodes) - np.bincount(
        net.heads, weights=f, minlength=net.num_nodes)
    inner = np.ones(net.num_nodes, dtype=bool)
    inner[[net.source, net.sink]] = False
    viol = float(max(cap_viol, neg, np.max(np.abs(balance[inner]), initial=0.0)))
    primal = float(balance[net.source])
    if not sol.dual or "source_side" not in sol.dual:
        return Certificate(primal, None, None, viol, None, False, tol)
    side = np.asarray(sol.dual["source_side"], dtype=bool)
    crossing = side[net.tails] & ~side[net.heads]
    cut = float(net.capacities[crossing].sum())
    dviol = 0.0 if side[net.source] and not side[net.sink] else float("inf")
    return Certificate(primal, cut, cut - primal, viol, dviol, False, tol)
