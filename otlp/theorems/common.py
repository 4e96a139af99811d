"""Helpers shared by the check modules: instance streams by draft scheme, plan arithmetic generic in the number type."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from otlp.theorems.instances import KINDS, Instance, exact_sizes, pairs

#: Float tolerance for "equal" between two float routes (HiGHS is accurate to ~1e-9).
TOL = 1e-7


def scheme_stream(rng: np.random.Generator, count: int, exact: bool, schemes: tuple[str, ...],
                  V_range: tuple[int, int] = (2, 5), n_range: tuple[int, int] = (1, 3),
                  exact_V: int = 4, exact_n: int = 2, kinds: tuple[str, ...] = KINDS) -> list[Instance]:
    """``count`` instances cycling through ``schemes`` and ``kinds`` (sizes clipped in exact mode)."""
    V_range, n_range = exact_sizes(exact, V_range, n_range, exact_V, exact_n)
    out = []
    for k in range(count):
        scheme = schemes[k % len(schemes)]
        kind = kinds[(k // len(schemes) + k) % len(kinds)]
        nr = n_range
        if scheme == "independent":
            nr = (max(2, n_range[0]), max(2, n_range[1]))
        Vr = V_range
        if scheme in ("without_replacement", "greedy"):
            nr = (max(2, nr[0]), max(2, nr[1]))
            Vr = (max(V_range[0], nr[1]), max(V_range[1], nr[1]))
        (inst,) = pairs(rng, 1, Vr, nr, kinds=(kind,), scheme=scheme)
        out.append(Instance(f"#{k} {kind} V={inst.V} n={inst.n} {scheme}", inst.p_exact, inst.qs_exact, inst.n,
                            scheme, {"seed": int(rng.integers(2**31))}))
    return out


def numbers(inst: Instance, exact: bool) -> tuple[list, np.ndarray, list]:
    """``(p, omegas, probs)`` as Fractions (exact) or floats."""
    omegas, probs = inst.law(exact)
    p = list(inst.p_exact) if exact else [float(x) for x in inst.p_exact]
    return p, omegas, probs


def zero(exact: bool) -> Fraction | float:
    return Fraction(0) if exact else 0.0


def members(omegas: np.ndarray) -> list[set[int]]:
    return [set(int(t) for t in w) for w in np.asarray(omegas)]


def inside(member: set[int], H: int) -> bool:
    """set(omega) subset of H (bitmask), i.e. omega in H^n."""
    return all(H >> t & 1 for t in member)


def plan_value(S: list[list] | np.ndarray, omegas: np.ndarray) -> object:
    """sum of S[i][m] over i in set(omega_m)."""
    mem = members(omegas)
    return sum(S[i][m] for m in range(len(mem)) for i in mem[m])
