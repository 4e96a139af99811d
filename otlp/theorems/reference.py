"""Independent routes to the truth, written here on purpose (not through otlp.lp.formulations / otlp.lp.solvers):

- small LPs built from scratch and solved by ``scipy.optimize.linprog`` (HiGHS, its own copy) in float mode, or by
  sympy's exact simplex in rational mode (``exact=True``: every coefficient a ``Fraction``);
- brute force over all 2^V subsets, generic in the number type (float or ``Fraction``);
- the Full OTLP (GR eq. (1)), the relaxed OTLP (GR eq. (2)) and the beta program (CD eq. (2)-(4)) over an explicit
  draft law ``(omegas [M, n], probs [M])``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

Number = float | Fraction


def to_fraction(x: object) -> Fraction:
    """A sympy Rational / int / Fraction -> Fraction."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    num, den = getattr(x, "p", None), getattr(x, "q", None)
    if num is not None and den is not None:
        return Fraction(int(num), int(den))
    return Fraction(str(x))


def solve_lp(c: list, A_ub: list[dict], b_ub: list, A_eq: list[dict], b_eq: list, num_vars: int,
             exact: bool) -> tuple[Number, list[Number]]:
    """max c.x s.t. A_ub x <= b_ub, A_eq x = b_eq, x >= 0. Rows are sparse ``{column: coefficient}`` dicts.

    Float: scipy HiGHS (raises RuntimeError unless optimal). Exact: sympy's rational simplex.
    Returns ``(value, x)``.
    """
    if exact:
        from sympy import Matrix, Rational
        from sympy.solvers.simplex import linprog as sym_linprog

        def dense(rows: list[dict]) -> list[list]:
            out = []
            for row in rows:
                r = [0] * num_vars
                for j, v in row.items():
                    r[j] = Rational(v.numerator, v.denominator) if isinstance(v, Fraction) else Rational(v)
                out.append(r)
            return out

        def rat(v: Number) -> object:
            return Rational(v.numerator, v.denominator) if isinstance(v, Fraction) else Rational(v)

        cc = Matrix([[-rat(v) for v in c]])  # sympy minimises
        # sympy (1.14) needs an inequality block: pad with the harmless row 0 <= 1.
        A = dense(A_ub) or [[0] * num_vars]
        b = [rat(v) for v in b_ub] or [1]
        kwargs = {}
        if A_eq:
            kwargs = {"A_eq": Matrix(dense(A_eq)), "b_eq": Matrix([rat(v) for v in b_eq])}
        value, x = sym_linprog(cc, Matrix(A), Matrix(b), **kwargs)
        return -to_fraction(value), [to_fraction(v) for v in x]

    def matrix(rows: list[dict]) -> sparse.csr_matrix | None:
        if not rows:
            return None
        r, k, v = [], [], []
        for i, row in enumerate(rows):
            for j, val in row.items():
                r.append(i)
                k.append(j)
                v.append(float(val))
        return sparse.csr_matrix((v, (r, k)), shape=(len(rows), num_vars))

    res = linprog(-np.asarray([float(v) for v in c]), A_ub=matrix(A_ub), b_ub=[float(v) for v in b_ub] or None,
                  A_eq=matrix(A_eq), b_eq=[float(v) for v in b_eq] or None, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"reference LP (scipy HiGHS) did not solve: {res.message}")
    return float(-res.fun), [float(v) for v in res.x]


def incidence(omegas: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (i, m) with i in set(omega_m), sorted by m then i."""
    return [(int(i), m) for m, omega in enumerate(np.asarray(omegas)) for i in sorted(set(omega.tolist()))]


def full_otlp(p: list, omegas: np.ndarray, probs: list, exact: bool = False) -> Number:
    """alpha* as the Full OTLP (GR eq. (1); SpecTr eq. (3)): max sum_{i in set(w)} C[i, w], C in Pi(p, P_draft).

    One marginal row (the last p row) is dropped: it is implied by the others (CD §2.1 pitfall).
    """
    V, M = len(p), len(probs)
    members = [set(w.tolist()) for w in np.asarray(omegas)]
    c = [1 if i in members[m] else 0 for i in range(V) for m in range(M)]
    A_eq = [{i * M + m: 1 for m in range(M)} for i in range(V - 1)]
    b_eq = list(p[: V - 1])
    A_eq += [{i * M + m: 1 for i in range(V)} for m in range(M)]
    b_eq += list(probs)
    value, _ = solve_lp(c, [], [], A_eq, b_eq, V * M, exact)
    return value


def relaxed_otlp(p: list, omegas: np.ndarray, probs: list, exact: bool = False) -> tuple[Number, list[list]]:
    """The relaxed OTLP (GR eq. (2)): ``(value, S [V][M])`` with S[i][m] = 0 off the incidence i in set(omega_m)."""
    V, M = len(p), len(probs)
    pairs = incidence(omegas)
    A_ub = [dict() for _ in range(V + M)]
    for k, (i, m) in enumerate(pairs):
        A_ub[i][k] = 1
        A_ub[V + m][k] = 1
    value, x = solve_lp([1] * len(pairs), A_ub, list(p) + list(probs), [], [], len(pairs), exact)
    zero = Fraction(0) if exact else 0.0
    S = [[zero] * M for _ in range(V)]
    for k, (i, m) in enumerate(pairs):
        S[i][m] = x[k]
    return value, S


def beta_program(p: list, omegas: np.ndarray, probs: list, exact: bool = False) -> tuple[Number, list[list]]:
    """The canonical-decomposition beta program (CD Thm 1, eq. (2)-(4); GR eq. (19)), linearised with t_i:

    max sum_i t_i  s.t.  t_i <= p(i),  t_i <= sum_w beta(i | w) P(w),  sum_{i in set(w)} beta(i | w) = 1.
    Returns ``(value, beta [V][M])``. (The printed CD eq. (22)/(40) normalises over w; the correct one, used
    here, is eq. (3): over i for every w.)
    """
    V, M = len(p), len(probs)
    pairs = incidence(omegas)
    nb = len(pairs)
    A_ub = [{nb + i: 1} for i in range(V)]  # t_i <= p(i)
    b_ub = list(p)
    link = [{nb + i: 1} for i in range(V)]  # t_i - sum_w beta P(w) <= 0
    for k, (i, m) in enumerate(pairs):
        link[i][k] = -probs[m]
    A_ub += link
    b_ub += [0] * V
    A_eq = [dict() for _ in range(M)]
    for k, (_, m) in enumerate(pairs):
        A_eq[m][k] = 1
    value, x = solve_lp([0] * nb + [1] * V, A_ub, b_ub, A_eq, [1] * M, nb + V, exact)
    zero = Fraction(0) if exact else 0.0
    beta = [[zero] * M for _ in range(V)]
    for k, (i, m) in enumerate(pairs):
        beta[i][m] = x[k]
    return value, beta


def beta_objective(p: list, omegas: np.ndarray, probs: list, beta: list[list]) -> Number:
    """sum_i min(p(i), sum_w beta(i | w) P(w)) (CD eq. (2); GR eq. (19)), in the numbers' own type."""
    V, M = len(p), len(probs)
    return sum(min(p[i], sum(beta[i][m] * probs[m] for m in range(M))) for i in range(V))


def psi_values(p: list, omegas: np.ndarray, probs: list) -> list[Number]:
    """psi(H) = p(H) - P(omega in H^n) for every H, indexed by the bitmask of H (brute force, GR eq. (4))."""
    V = len(p)
    set_masks = [sum(1 << int(t) for t in set(w.tolist())) for w in np.asarray(omegas)]
    out = []
    for H in range(1 << V):
        ph = sum((p[i] for i in range(V) if H >> i & 1), start=0 * p[0])
        inside = sum((pr for sm, pr in zip(set_masks, probs, strict=True) if sm & ~H == 0), start=0 * p[0])
        out.append(ph - inside)
    return out


def brute_min_psi(p: list, omegas: np.ndarray, probs: list) -> tuple[Number, int]:
    """``(min_H psi(H), bitmask of the smallest minimiser)``."""
    values = psi_values(p, omegas, probs)
    best = min(values)
    return best, values.index(best)


def mask_of(bits: int, V: int) -> np.ndarray:
    return np.array([(bits >> i) & 1 for i in range(V)], dtype=bool)


def bits_of(mask: np.ndarray) -> int:
    return int(sum(1 << i for i, b in enumerate(np.asarray(mask, dtype=bool)) if b))
