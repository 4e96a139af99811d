"""Seeded instance generators: rational (p, q) pairs, random and adversarial.

Every instance is rational (``fractions.Fraction``) so that exact mode can compute the truth side in rational
arithmetic; the float view (``p``, ``q``) is what the implementation under test receives. Kinds, cycled so that even
a handful of instances covers each (notes: GR §7 P4-P6, CD §7.10-11):

- ``random``: Dirichlet-like integer weights, full support;
- ``zeros``: zeros in p and in q (p = 0 < q, q = 0 < p, both 0);
- ``ties``: weights from {1, 2}, so q/p ratios and psi prefixes tie;
- ``point_mass``: p or q a point mass;
- ``p_eq_q``: q = p (alpha* = 1);
- ``near_degenerate``: q = p perturbed by ~1e-6 and masses ~1e-9;
- ``disjoint``: disjoint supports (TV = 1, alpha* = 0 for n = 1);
- ``hub``: q with a dominant token q(a) > 1/2 (SpecHub Thm 4 regime).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

KINDS = ("random", "zeros", "ties", "point_mass", "p_eq_q", "near_degenerate", "disjoint", "hub")

Rational = tuple[Fraction, ...]


def normalize(weights: list[int] | np.ndarray) -> Rational:
    """Integer weights -> an exact distribution (weights must not all be 0)."""
    w = [int(x) for x in weights]
    total = sum(w)
    if total <= 0:
        raise ValueError("weights must have a positive sum")
    return tuple(Fraction(x, total) for x in w)


def to_float(x: Rational) -> np.ndarray:
    return np.array([float(v) for v in x], dtype=np.float64)


@dataclass(frozen=True)
class Instance:
    """One (p, drafts) instance. ``qs`` holds one draft law per position for ``independent``, else one law."""

    label: str
    p_exact: Rational
    qs_exact: tuple[Rational, ...]
    n: int
    scheme: str = "iid"  # "iid" | "independent" | "without_replacement" | "spechub" | "greedy"
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def V(self) -> int:
        return len(self.p_exact)

    @property
    def p(self) -> np.ndarray:
        return to_float(self.p_exact)

    @property
    def q(self) -> np.ndarray:
        return to_float(self.qs_exact[0])

    @property
    def q_exact(self) -> Rational:
        return self.qs_exact[0]

    def draft(self):  # noqa: ANN201 - an otlp.core.drafts.DraftScheme
        """The otlp draft scheme (float) for this instance."""
        from otlp.core import drafts

        if self.scheme == "iid":
            return drafts.IID(self.q, self.n)
        if self.scheme == "independent":
            return drafts.Independent([to_float(q) for q in self.qs_exact])
        if self.scheme == "without_replacement":
            return drafts.WithoutReplacement(self.q, self.n)
        if self.scheme == "spechub":
            return drafts.SpecHub(self.q)
        if self.scheme == "greedy":
            return drafts.Greedy(self.q, self.n)
        raise ValueError(f"unknown scheme {self.scheme!r}")

    def exact_law(self) -> tuple[np.ndarray, list[Fraction]]:
        """The draft law in rationals over its support: ``(omegas int [M, n], probs)``, lexicographic order."""
        return exact_tuple_law(self.scheme, self.qs_exact, self.n)

    def law(self, exact: bool) -> tuple[np.ndarray, list]:
        """``(omegas, probs)``: rational when ``exact``, else float from the otlp scheme's own support."""
        if exact:
            return self.exact_law()
        omegas, probs = self.exact_law()
        return omegas, [float(x) for x in probs]

    def with_scheme(self, scheme: str, n: int | None = None, label: str | None = None) -> Instance:
        return Instance(label or f"{self.label}/{scheme}", self.p_exact, self.qs_exact, self.n if n is None else n,
                        scheme, dict(self.extra))


def exact_tuple_law(scheme: str, qs: tuple[Rational, ...], n: int) -> tuple[np.ndarray, list[Fraction]]:
    """P_draft(omega) in rationals for the supported schemes (independent of otlp.core.drafts, on purpose)."""
    V = len(qs[0])
    omegas, probs = [], []
    if scheme == "spechub":
        q = qs[0]
        hub = max(range(V), key=lambda i: (q[i], -i))
        z = sum(q[x] for x in range(V) if x != hub)
        for x in range(V):  # (x, a): q(x)
            if x != hub and q[x] > 0:
                omegas.append((x, hub))
                probs.append(q[x])
        for x in range(V):  # (a, x): q(a) q(x) / Z
            if x != hub and q[x] > 0:
                omegas.append((hub, x))
                probs.append(q[hub] * q[x] / z)
        order = sorted(range(len(omegas)), key=lambda k: omegas[k])
        return np.array([omegas[k] for k in order], dtype=np.int64).reshape(-1, 2), [probs[k] for k in order]
    if scheme == "greedy":
        q = qs[0]
        top = sorted(range(V), key=lambda i: (-q[i], i))[: n - 1]
        rest = [x for x in range(V) if x not in top]
        mass = sum(q[x] for x in rest)
        for x in rest:
            if q[x] > 0:
                omegas.append((*top, x))
                probs.append(q[x] / mass)
        return np.array(omegas, dtype=np.int64).reshape(-1, n), probs
    for omega in itertools.product(range(V), repeat=n):
        if scheme == "iid":
            pr = Fraction(1)
            for t in omega:
                pr *= qs[0][t]
        elif scheme == "independent":
            pr = Fraction(1)
            for k, t in enumerate(omega):
                pr *= qs[k][t]
        elif scheme == "without_replacement":
            if len(set(omega)) < n:
                continue
            pr, used = Fraction(1), Fraction(0)
            for t in omega:
                if used >= 1:
                    pr = Fraction(0)
                    break
                pr *= qs[0][t] / (1 - used)
                used += qs[0][t]
        else:
            raise ValueError(f"unknown scheme {scheme!r}")
        if pr > 0:
            omegas.append(omega)
            probs.append(pr)
    return np.array(omegas, dtype=np.int64).reshape(-1, n), probs


def _weights(rng: np.random.Generator, V: int, low: int = 1, high: int = 30) -> np.ndarray:
    return rng.integers(low, high + 1, size=V)


def random_pair(rng: np.random.Generator, V: int, kind: str) -> tuple[Rational, Rational]:
    """One (p, q) pair of the given kind over V tokens (V >= 2)."""
    if kind == "random":
        return normalize(_weights(rng, V)), normalize(_weights(rng, V))
    if kind == "zeros":
        pw, qw = _weights(rng, V, 0, 9), _weights(rng, V, 0, 9)
        pw[rng.integers(V)] = 0
        qw[rng.integers(V)] = 0
        if pw.sum() == 0:
            pw[0] = 1
        if np.count_nonzero(qw) < 2:
            qw[:2] = [1, 2]
        return normalize(pw), normalize(qw)
    if kind == "ties":
        w = _weights(rng, V, 1, 2)
        return normalize(w), normalize(rng.permutation(w) if rng.random() < 0.5 else 2 * w - 1)
    if kind == "point_mass":
        a = int(rng.integers(V))
        delta = [1 if i == a else 0 for i in range(V)]
        if rng.random() < 0.5:
            return normalize(delta), normalize(_weights(rng, V))
        return normalize(_weights(rng, V)), normalize(delta)
    if kind == "p_eq_q":
        w = _weights(rng, V)
        return normalize(w), normalize(w)
    if kind == "near_degenerate":
        scale = 10**6
        w = _weights(rng, V) * scale
        pw = w.copy()
        pw[0] += 1  # a 1e-6 relative perturbation: q = p up to one part in 10^6 ...
        qw = w.copy()
        qw[-1] = 1  # ... and a ~1e-9 mass on the last token of q
        return normalize(pw), normalize(qw)
    if kind == "disjoint":
        cut = int(rng.integers(1, V))
        perm = rng.permutation(V)
        pw, qw = np.zeros(V, dtype=int), np.zeros(V, dtype=int)
        pw[perm[:cut]] = _weights(rng, cut)
        qw[perm[cut:]] = _weights(rng, V - cut)
        return normalize(pw), normalize(qw)
    if kind == "hub":
        qw = _weights(rng, V, 1, 5)
        a = int(rng.integers(V))
        qw[a] = qw.sum() + int(rng.integers(1, 10))  # q(a) > 1/2
        return normalize(_weights(rng, V)), normalize(qw)
    raise ValueError(f"unknown kind {kind!r}")


def pairs(rng: np.random.Generator, count: int, V_range: tuple[int, int] = (2, 6), n_range: tuple[int, int] = (1, 3),
          kinds: tuple[str, ...] = KINDS, scheme: str = "iid") -> list[Instance]:
    """``count`` instances cycling through ``kinds``; V and n drawn uniformly from the (inclusive) ranges."""
    out = []
    for k in range(count):
        kind = kinds[k % len(kinds)]
        V = int(rng.integers(V_range[0], V_range[1] + 1))
        n = int(rng.integers(n_range[0], n_range[1] + 1))
        if scheme in ("without_replacement", "greedy"):
            n = min(n, V)
        p, q = random_pair(rng, V, kind)
        need = {"without_replacement": n, "greedy": n, "spechub": 2}.get(scheme, 1)
        if sum(1 for x in q if x > 0) < need:  # the scheme needs that many draft tokens: add mass 1/2 on zeros
            zeros = [i for i, x in enumerate(q) if x == 0][: need - sum(1 for x in q if x > 0)]
            q = tuple(x / 2 + (Fraction(1, 2 * len(zeros)) if i in zeros else 0) for i, x in enumerate(q))
        qs: tuple[Rational, ...] = (q,)
        if scheme == "independent":
            qs = (q,) + tuple(random_pair(rng, V, "random")[1] for _ in range(n - 1))
        if scheme in ("spechub",):
            n = 2
        out.append(Instance(f"#{k} {kind} V={V} n={n} {scheme}", p, qs, n, scheme))
    return out


def exact_sizes(exact: bool, V_range: tuple[int, int], n_range: tuple[int, int],
                max_V: int = 5, max_n: int = 2) -> tuple[tuple[int, int], tuple[int, int]]:
    """Clip the size ranges for exact mode (rational LPs: V <= 5, n <= 2 by default)."""
    if not exact:
        return V_range, n_range
    return (min(V_range[0], max_V), min(V_range[1], max_V)), (min(n_range[0], max_n), min(n_range[1], max_n))


def fractions_of(x: np.ndarray | list) -> Rational:
    return tuple(Fraction(v) if not isinstance(v, Fraction) else v for v in x)
