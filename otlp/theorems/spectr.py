"""Checks for "SpecTr: Fast Speculative Decoding via Optimal Transport" (papers/004, notes/spectr.md §4).
SpecTr's p (draft) / q (target) are this project's q / p; statements are in the project's letters.
Typos corrected here (notes): Lemma 4 prints "1 - d_TV^k >= 1 - d_TV^k" (it is 1 - d_TV^k >= 1 - d_TV); the proof
of Thm 1 prints the validity condition reversed (validity needs p_acc <= rho beta, i.e. rho >= rho*)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from otlp.theorems.common import TOL, numbers, scheme_stream
from otlp.theorems.core import Check, Tally
from otlp.theorems.instances import Instance
from otlp.theorems.reference import brute_min_psi, full_otlp, relaxed_otlp


def kseq_law(p: np.ndarray, q: np.ndarray, k: int, rho: float) -> tuple[np.ndarray, float, np.ndarray]:
    """SpecTr Algorithm 2 by enumeration of the k-tuples (written from the paper, independent of otlp.verifiers).

    Returns ``(output law [V], P(some draft accepted), unclipped residual p_res [V])`` with
    a(x) = min(1, p(x) / (rho q(x))), beta = sum_x min(q(x), p(x)/rho), p_acc = 1 - (1 - beta)^k and
    p_res(x) = (p(x) - min(q(x), p(x)/rho) p_acc / beta) / (1 - p_acc) (eq. 5).
    """
    V = p.size
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(q > 0, np.minimum(1.0, p / (rho * np.where(q > 0, q, 1.0))), 0.0)
    capped = np.minimum(q, p / rho)
    beta = float(capped.sum())
    p_acc = 1.0 - (1.0 - beta) ** k
    p_res = (p - capped * (p_acc / beta if beta > 0 else 0.0)) / (1.0 - p_acc) if p_acc < 1 else np.zeros(V)
    law = np.zeros(V)
    accepted = 0.0
    for omega in itertools.product(np.flatnonzero(q > 0), repeat=k):
        prob = float(np.prod(q[list(omega)]))
        alive = 1.0
        for x in omega:
            law[x] += prob * alive * a[x]
            accepted += prob * alive * a[x]
            alive *= 1.0 - a[x]
        law += prob * alive * p_res
    return law, accepted, p_res


def _f(p: np.ndarray, q: np.ndarray, k: int, rho: float) -> float:
    beta = float(np.minimum(q, p / rho).sum())
    return 1.0 - (1.0 - beta) ** k - rho * beta


def _gen(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    return scheme_stream(rng, count, exact, ("iid",), V_range=(2, 5), n_range=(1, 4))


def verify_validity(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, q, k = inst.p, inst.q, inst.n
    verifier, draft = hooks["kseq_verifier"](), inst.draft()
    rho_star = float(verifier.rho_star(p, draft))
    t.leq("f(rho*) <= 0 (rho* is on the valid side)", _f(p, q, k, rho_star), 1e-12)
    for rho in (rho_star, 0.5 * (rho_star + k), float(k)):
        law, _, p_res = kseq_law(p, q, k, rho)
        t.leq(f"rho={rho:.6g}: residual >= 0", -float(p_res.min()), 1e-9)
        t.equal(f"rho={rho:.6g}: output law vs p (L1)", float(np.abs(law - p).sum()), 0.0)
    if rho_star > 1 + 1e-6:  # below rho* the plan is invalid: the unclipped residual goes negative
        rho = 1 + 0.5 * (rho_star - 1)
        if _f(p, q, k, rho) > 1e-9:
            _, _, p_res = kseq_law(p, q, k, rho)
            t.holds(f"rho={rho:.6g} < rho* with f > 0 but the residual is nonnegative", float(p_res.min()) < 0)
    t.equal("kseq verifier output law vs p (L1)", float(np.abs(verifier.output_law(p, draft) - p).sum()), 0.0)
    return t.result()


VALIDITY = Check(
    name="spectr.thm1a",
    title="K-SEQ is a valid transport plan exactly for rho >= rho*",
    source="SpecTr Thm 1(a), Algorithm 2, eqs. (5)-(6)",
    statement="For rho >= rho* (f(rho*) = 0), K-SEQ's residual is a distribution and its output law is exactly p; "
    "the verifier's rho* is on the valid side and its exact output law is p.",
    printed="proof of Thm 1: 'when rho >= rho*, 1 - (1 - beta)^k >= rho beta'",
    counterexample="the inequality is reversed: validity needs p_acc <= rho beta (f <= 0); below rho* the residual "
    "has a negative entry (checked on every instance with rho* > 1)",
    generate=_gen,
    verify=verify_validity,
    hooks={"kseq_verifier": "otlp.theorems.adapters:kseq_verifier"},
    tolerance=1e-9,
)


def verify_acceptance(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, q, k = inst.p, inst.q, inst.n
    verifier, draft = hooks["kseq_verifier"](), inst.draft()
    rho = float(verifier.rho_star(p, draft))
    _, accepted, _ = kseq_law(p, q, k, rho)
    beta = float(np.minimum(q, p / rho).sum())
    t.equal("P(some draft accepted) by enumeration vs 1 - (1 - beta(rho*))^k", accepted, 1 - (1 - beta) ** k)
    p_acc = 1 - (1 - beta) ** k
    t.equal("verifier_acceptance vs 1 - (1 - beta(rho*))^k", verifier.verifier_acceptance(p, draft), p_acc)
    t.equal("membership acceptance = p_acc at rho* (notes §2.3)", verifier.acceptance(p, draft), p_acc)
    return t.result()


ACCEPTANCE = Check(
    name="spectr.thm1b",
    title="K-SEQ acceptance = 1 - (1 - beta(rho*))^k",
    source="SpecTr Thm 1(b), proof of Thm 1",
    statement="P(some draft accepted) = 1 - (1 - beta(rho))^k with beta(rho) = sum_x min(q(x), p(x)/rho); at rho* the "
    "membership acceptance P(Y in set(X)) equals it (the residual lives where every draft is accepted).",
    generate=_gen,
    verify=verify_acceptance,
    hooks={"kseq_verifier": "otlp.theorems.adapters:kseq_verifier"},
    tolerance=1e-9,
)


def verify_bound(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, q, k = inst.p, inst.q, inst.n
    verifier, draft = hooks["kseq_verifier"](), inst.draft()
    omegas, probs = inst.law(False)
    alpha_k = relaxed_otlp(list(p), omegas, probs)[0]
    c_k = 1 - (1 - 1 / k) ** k
    acc = verifier.acceptance(p, draft)
    ub1 = float(np.minimum(1 - (1 - q) ** k, p).sum())
    t.leq("alpha(K-SEQ) >= (1 - (1 - 1/k)^k) sum_x min(k q, p)", c_k * float(np.minimum(k * q, p).sum()), acc + 1e-12)
    t.leq("alpha_k <= sum_x min(1 - (1 - q)^k, p) (Lemma 3, Omega_0 = Omega)", alpha_k, ub1 + 1e-9)
    t.leq("alpha(K-SEQ) >= (1 - (1 - 1/k)^k) alpha_k", c_k * alpha_k, acc + 1e-9)
    t.leq("alpha(K-SEQ) <= alpha_k", acc, alpha_k + 1e-9)
    return t.result()


BOUND = Check(
    name="spectr.thm1c",
    title="K-SEQ acceptance >= (1 - (1 - 1/k)^k) alpha_k >= (1 - 1/e) alpha_k",
    source="SpecTr Thm 1(c), eqs. (11)-(12), Lemma 3",
    statement="alpha(K-SEQ at rho*) >= (1-(1-1/k)^k) sum_x min(k q(x), p(x)) >= (1-(1-1/k)^k) alpha_k, "
    "with alpha_k the OTLP optimum (LP), and alpha(K-SEQ) <= alpha_k.",
    generate=_gen,
    verify=verify_bound,
    hooks={"kseq_verifier": "otlp.theorems.adapters:kseq_verifier"},
    tolerance=1e-9,
)


def verify_lemma4(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, q, k = inst.p, inst.q, inst.n
    tv = 0.5 * float(np.abs(p - q).sum())
    if not 1e-12 < tv < 1 - 1e-12:
        return t.result()  # the lemma assumes d_TV in (0, 1)
    t.leq("f(1) >= 0", -_f(p, q, k, 1.0), 1e-12)
    t.leq("f(k) <= 0", _f(p, q, k, float(k)), 1e-12)
    grid = np.linspace(1.0, 2.0 * k, 41)
    values = [_f(p, q, k, r) for r in grid]
    t.leq("f non-increasing on [1, 2k]", max(float(b - a) for a, b in zip(values, values[1:], strict=False)), 1e-12)
    rho = float(hooks["kseq_verifier"]().rho_star(p, inst.draft()))
    with np.errstate(divide="ignore"):
        max_ratio = float(np.max(np.where(q > 0, p / np.where(q > 0, q, 1), np.inf)))
    t.leq("rho* >= 1", 1.0, rho + 1e-12)
    t.leq("rho* <= min(k, max p/q)", rho, min(k, max_ratio) + 1e-9)
    return t.result()


LEMMA4 = Check(
    name="spectr.lemma4",
    title="f(rho) = 1 - (1 - beta)^k - rho beta is non-increasing, f(1) >= 0 >= f(k)",
    source="SpecTr Lemma 4",
    statement="If d_TV(p, q) in (0, 1): f is non-increasing on [1, inf), f(1) >= 0, f(k) <= 0, so rho* in "
    "[1, min(k, max_x p(x)/q(x))].",
    printed="'f(1) >= 0 because 1 - d_TV^k >= 1 - d_TV^k'",
    counterexample="a tautology as printed; the needed inequality is 1 - d_TV^k >= 1 - d_TV (d_TV in (0,1))",
    generate=_gen,
    verify=verify_lemma4,
    hooks={"kseq_verifier": "otlp.theorems.adapters:kseq_verifier"},
    tolerance=1e-9,
)


def verify_lemmas13(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    V, k = len(p), inst.n
    q = list(inst.q_exact) if exact else list(inst.q)
    alpha_k = relaxed_otlp(p, omegas, probs, exact)[0]
    more = inst.with_scheme("iid", n=k + 1)
    om2, pr2 = more.law(exact)
    alpha_k1 = 1 + brute_min_psi(p, om2, pr2)[0]
    t.leq("Lemma 1: alpha_k <= alpha_{k+1}", alpha_k, alpha_k1)
    t.leq("Lemma 1: alpha_k <= sum_{q(x) > 0} p(x)", alpha_k, sum(p[i] for i in range(V) if q[i] > 0))
    bars = []
    for omega0 in range(1 << V):  # Lemma 3, eq. (9): the upper bound holds for every Omega_0
        bar = sum(min(p[y], 1 - (1 - q[y]) ** k) for y in range(V) if omega0 >> y & 1)
        for w, pr in zip(omegas, probs, strict=True):
            bar += min(pr, sum(p[y] for y in set(int(x) for x in w) if not omega0 >> y & 1))
        bars.append(bar)
        t.leq(f"Lemma 3: alpha_k <= alpha_bar(Omega_0={omega0:b})", alpha_k, bar)
    c_k = 1 - (Fraction(k - 1, k) if exact else (1 - 1 / k)) ** k
    t.leq("Lemma 3: (1 - (1 - 1/k)^k) alpha_bar_k <= alpha_k", c_k * min(bars), alpha_k)
    t.equal("optimal_acceptance vs LP", hooks["optimal_acceptance"](inst.p, inst.draft()), alpha_k)
    return t.result()


LEMMAS13 = Check(
    name="spectr.lemma1-3",
    title="alpha_k monotone in k, bounded by sum_{q>0} p; Lemma 3 upper/lower bounds",
    source="SpecTr Lemma 1, Lemma 2 (the OTLP LP), Lemma 3 / eq. (9)",
    statement="alpha_k (the LP optimum) <= alpha_{k+1}; alpha_k <= sum_{x: q(x)>0} p(x); alpha_k <= alpha_bar(Omega_0)"
    " for every Omega_0 and (1 - (1 - 1/k)^k) min_Omega_0 alpha_bar <= alpha_k.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid",), V_range=(2, 4), n_range=(1, 3),
                                                     exact_V=3, exact_n=2),
    verify=verify_lemmas13,
    hooks={"optimal_acceptance": "otlp.core.subsets:optimal_acceptance"},
    tolerance=TOL,
    exact_supported=True,
)


def _gen_appb(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    out = []
    for j in range(count):
        k = int(rng.integers(1, 4))
        if j % 2 == 0:  # Bernoulli: q = Ber(a), p = Ber(b) (index 1 is the "1" outcome)
            a, b = Fraction(int(rng.integers(0, 9)), 8), Fraction(int(rng.integers(0, 9)), 8)
            if a in (0, 1):
                a = Fraction(1, 4)
            out.append(Instance(f"#{j} Bernoulli a={a} b={b} k={k}", (1 - b, b), ((1 - a, a),), k, "iid",
                                {"family": "bernoulli", "a": a, "b": b}))
        else:  # uniform: q = U(d), p = U(d/r) on the first d/r tokens
            d, r = [(4, 2), (6, 2), (6, 3), (4, 4), (3, 3), (4, 1)][int(rng.integers(6))]
            m = d // r
            p = tuple(Fraction(1, m) if i < m else Fraction(0) for i in range(d))
            out.append(Instance(f"#{j} uniform d={d} r={r} k={k}", p, ((Fraction(1, d),) * d,), k, "iid",
                                {"family": "uniform", "r": r}))
    return out


def verify_appb(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    k = inst.n
    lp = full_otlp(p, omegas, probs, False) if not exact else relaxed_otlp(p, omegas, probs, True)[0]
    if inst.extra["family"] == "bernoulli":
        a, b = inst.extra["a"], inst.extra["b"]
        if not exact:
            a, b = float(a), float(b)
        closed = min(b, 1 - (1 - a) ** k) + min(1 - b, 1 - a**k)
        t.equal("alpha_k(Ber(a), Ber(b)) = min(b, 1-(1-a)^k) + min(1-b, 1-a^k)", closed, lp)
    else:
        r = inst.extra["r"]
        closed = 1 - (1 - Fraction(1, r)) ** k if exact else 1 - (1 - 1 / r) ** k
        t.equal("alpha_k(U(d), U(d/r)) = 1 - (1 - 1/r)^k", closed, lp)
        if r > 1:
            acc = hooks["kseq_verifier"]().acceptance(inst.p, inst.draft())
            t.equal("K-SEQ is optimal on the uniform pair (B.2)", acc, float(closed))
    return t.result()


APPB = Check(
    name="spectr.appB",
    title="closed forms: Bernoulli and uniform pairs; K-SEQ optimal on the uniform pair",
    source="SpecTr App. B.1 (eq. 10), B.2",
    statement="alpha_k(Ber(a), Ber(b)) = min(b, 1 - (1-a)^k) + min(1 - b, 1 - a^k) (q = Ber(a) draft, p = Ber(b) "
    "target); alpha_k(U(d), U(d/r)) = 1 - (1 - 1/r)^k, attained by K-SEQ.",
    generate=_gen_appb,
    verify=verify_appb,
    hooks={"kseq_verifier": "otlp.theorems.adapters:kseq_verifier"},
    tolerance=1e-9,
    exact_supported=True,
)

CHECKS = [VALIDITY, ACCEPTANCE, BOUND, LEMMA4, LEMMAS13, APPB]
