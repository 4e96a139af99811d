"""Checks for "Multi-Draft Speculative Sampling: Canonical Decomposition and Theoretical Limits" (CD; papers/003,
notes/canonical-decomposition.md §4). The paper's letters are swapped: its p (draft) / q (target) are this
project's q / p; statements below are in the project's letters (p target, q draft)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from otlp.theorems.common import TOL, members, numbers, scheme_stream
from otlp.theorems.core import Check, Tally
from otlp.theorems.instances import Instance, normalize
from otlp.theorems.reference import beta_program, brute_min_psi, full_otlp, relaxed_otlp


def _alpha_lp(p: list, omegas: np.ndarray, probs: list, exact: bool) -> object:
    if exact or len(p) * len(probs) > 400:
        return relaxed_otlp(p, omegas, probs, exact)[0]
    return full_otlp(p, omegas, probs, False)


# -- Thm 1 ---------------------------------------------------------------------------------------------------------
def canonical_scheme(p: list, omegas: np.ndarray, probs: list, beta: list[list]) -> tuple[list, object]:
    """The two-step canonical scheme (CD Fig. 1): Y ~ beta(.|w), then single-draft SS of Y with draft law p_I against
    p. Returns (output law [V], membership acceptance P(Z in set(w))), generic in the number type."""
    V, M = len(p), len(probs)
    mem = members(omegas)
    zero = 0 * p[0]
    p_I = [sum((beta[i][m] * probs[m] for m in range(M)), start=zero) for i in range(V)]
    accept = [min(1, p[i] / p_I[i]) if p_I[i] > 0 else zero for i in range(V)]
    res = [max(p[i] - p_I[i], zero) for i in range(V)]
    total = sum(res, start=zero)
    res = [x / total for x in res] if total > 0 else res
    law = [zero] * V
    member = zero
    for m in range(M):
        kept = sum((beta[y][m] * accept[y] for y in mem[m]), start=zero)  # step 2 accepts Y
        for y in mem[m]:
            law[y] += probs[m] * beta[y][m] * accept[y]
            member += probs[m] * beta[y][m] * accept[y]
        for i in range(V):
            law[i] += probs[m] * (1 - kept) * res[i]
            if i in mem[m]:
                member += probs[m] * (1 - kept) * res[i]
    return law, member


def _gen_thm1(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    """Half i.i.d. with K = 2 (where the 'is' verifier applies), half K in {2, 3} over the other schemes."""
    iid = scheme_stream(rng, (count + 1) // 2, exact, ("iid",), V_range=(2, 4), n_range=(2, 2))
    rest = scheme_stream(rng, count // 2, exact, ("independent", "without_replacement", "iid"), V_range=(2, 4),
                         n_range=(2, 3))
    mixed = [x for pair in zip(iid, rest, strict=False) for x in pair] + iid[len(rest):]
    return mixed[:count]


def verify_thm1(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    lp = _alpha_lp(p, omegas, probs, exact)
    value, beta = beta_program(p, omegas, probs, exact)
    t.equal("beta program optimum vs OTLP optimum", value, lp)
    law, member = canonical_scheme(p, omegas, probs, beta)
    for i in range(len(p)):
        t.equal(f"canonical scheme output law at token {i} vs p", law[i], p[i])
    t.equal("canonical scheme acceptance vs OTLP optimum", member, lp)
    if inst.scheme == "iid" and inst.n == 2:  # the otlp "is" verifier with s >= V is the exact canonical scheme
        verifier = hooks["is_verifier"](s=inst.V)
        draft = inst.draft()
        t.equal("'is' verifier (s = V) acceptance vs OTLP optimum", verifier.verifier_acceptance(inst.p, draft), lp)
        t.equal("'is' verifier output law vs p (L1)",
                float(np.abs(verifier.output_law(inst.p, draft) - inst.p).sum()), 0.0)
    return t.result()


THM1 = Check(
    name="cd.thm1",
    title="canonical decomposition: IS selection + single-draft SS attains the OTLP optimum",
    source="CD Thm 1 (eqs. 2-4) and Thm 4 (any joint draft law)",
    statement="max_beta sum_i min(p(i), sum_w beta(i|w) P(w)) equals the OTLP optimum, and the two-step scheme with "
    "an optimal beta outputs exactly p with membership acceptance equal to it.",
    printed="eqs. (22)/(40) normalise beta over w (sum_w beta_y(w) = 1)",
    counterexample="with that normalisation beta(.|w) is not a law on set(w); the correct constraint is eq. (3): "
    "sum_y beta_y(w) = 1 for every w (used here)",
    generate=lambda rng, count, exact: _gen_thm1(rng, count, exact),
    verify=verify_thm1,
    hooks={"is_verifier": "otlp.theorems.adapters:is_verifier"},
    tolerance=1e-6,
    exact_supported=True,
)


# -- Thm 2 and its K-draft extension ------------------------------------------------------------------------------
def _boundary_instances(rng: np.random.Generator, count: int, K_choices: tuple[int, ...]) -> list[Instance]:
    """Instances on and near the boundary alpha* = 1 (Example 1, Fig. 2 families, p = q, mixtures), any K."""
    out: list[Instance] = []
    k = 0
    while len(out) < count:
        K = K_choices[k % len(K_choices)]
        family = k % 5
        if family == 0:  # Example 1: q = (1/2, 1/2), p = (t, 1 - t); alpha* = 1 iff 1/4 <= t <= 3/4 (K = 2)
            t = [Fraction(1, 4), Fraction(3, 4), Fraction(1, 4) - Fraction(1, 100), Fraction(3, 4) + Fraction(1, 100),
                 Fraction(1, 2), Fraction(1, 8)][int(rng.integers(6))]
            p, q = (t, 1 - t), (Fraction(1, 2), Fraction(1, 2))
        elif family == 1:  # Fig. 2 left: q uniform on 3, p = (1/3, t, 2/3 - t); alpha* = 1 iff t in [1/9, 5/9]
            t = [Fraction(1, 9), Fraction(5, 9), Fraction(0), Fraction(3, 5), Fraction(1, 5)][int(rng.integers(5))]
            p, q = (Fraction(1, 3), t, Fraction(2, 3) - t), (Fraction(1, 3),) * 3
        elif family == 2:  # p = q
            p = q = normalize(rng.integers(1, 10, size=int(rng.integers(2, 5))))
        elif family == 3:  # p = a mixture of q with the law of one of K draws: often inside the region
            q = normalize(rng.integers(1, 10, size=int(rng.integers(2, 5))))
            lam = Fraction(int(rng.integers(0, 5)), 4)
            p = tuple((1 - lam) * x + lam * (1 - (1 - x) ** K) / sum(1 - (1 - y) ** K for y in q) for x in q)
        else:
            p, q = normalize(rng.integers(1, 10, size=3)), normalize(rng.integers(1, 10, size=3))
        out.append(Instance(f"#{len(out)} family {family} K={K}", tuple(p), (tuple(q),), K, "iid"))
        k += 1
    return out


def verify_thm2(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    V, K = len(p), inst.n
    q = list(inst.q_exact) if exact else list(inst.q)
    slack = min(sum(p[i] for i in range(V) if S >> i & 1) - sum(q[i] for i in range(V) if S >> i & 1) ** K
                for S in range(1 << V))  # >= 0 iff the condition holds
    lp = relaxed_otlp(p, omegas, probs, exact)[0]
    tol = 0 if exact else 1e-9
    condition = slack >= -tol
    t.holds(f"condition p(S) >= q(S)^{K} for all S is {condition} but the LP optimum is {float(lp):.12g}",
            condition == (lp >= 1 - tol))
    impl = hooks["optimal_acceptance"](inst.p, inst.draft())
    t.holds(f"condition is {condition} but optimal_acceptance = {impl:.12g}", condition == (impl >= 1 - 1e-9))
    return t.result()


THM2 = Check(
    name="cd.thm2",
    title="acceptance 1 iff p(S) >= q(S)^K for every S (K = 2 proven; K > 2 extension)",
    source="CD Thm 2 (K = 2), Example 1, App. D.1 (K-draft analogue)",
    statement="alpha* = 1 iff sum_{x in S} p(x) >= (sum_{x in S} q(x))^K for every subset S (paper letters: "
    "q(S) >= p(S)^K). Proven for K = 2; the K > 2 analogue follows from alpha* = 1 + min_S [p(S) - q(S)^K].",
    printed="App. D.1 states the K = 3, |Omega| = 3 condition with a strict 'q_i > p_i^3'",
    counterexample="the boundary p = (1/4, 3/4), q = (1/2, 1/2), K = 2 has p(S) = q(S)^2 for S = {0} and alpha* = 1: "
    "the inequality must be non-strict",
    generate=lambda rng, count, exact: _boundary_instances(rng, count, (2, 2, 3)),
    verify=verify_thm2,
    hooks={"optimal_acceptance": "otlp.core.subsets:optimal_acceptance"},
    tolerance=0.0,
    exact_supported=True,
)


# -- Thm 3 (K = 2) and Remark 2 (K drafts) ------------------------------------------------------------------------
def verify_thm3(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    V, K = len(p), inst.n
    q = list(inst.q_exact) if exact else list(inst.q)
    lp = _alpha_lp(p, omegas, probs, exact)
    eq7 = 1 + min(sum(p[i] for i in range(V) if S >> i & 1) - sum(q[i] for i in range(V) if S >> i & 1) ** K
                  for S in range(1 << V))
    t.equal(f"1 + min_S [p(S) - q(S)^{K}] vs OTLP optimum", eq7, lp)
    if K == 2:  # eq. (6) as printed (paper letters swapped back): min_S { p(S) + q(S^c)^2 + 2 q(S) q(S^c) }
        eq6 = min(sum(p[i] for i in range(V) if S >> i & 1)
                  + (1 - sum(q[i] for i in range(V) if S >> i & 1)) ** 2
                  + 2 * sum(q[i] for i in range(V) if S >> i & 1) * (1 - sum(q[i] for i in range(V) if S >> i & 1))
                  for S in range(1 << V))
        t.equal("eq. (6) vs OTLP optimum", eq6, lp)
    t.equal("optimal_acceptance vs OTLP optimum", hooks["optimal_acceptance"](inst.p, inst.draft()), lp)
    return t.result()


THM3 = Check(
    name="cd.thm3",
    title="closed form for two identical drafts: alpha* = min_S {p(S) + q(S^c)^2 + 2 q(S) q(S^c)}",
    source="CD Thm 3, eqs. (6)-(7)",
    statement="For K = 2 i.i.d. drafts, alpha* = min_S {p(S) + q(S^c)^2 + 2 q(S) q(S^c)} = 1 + min_S {p(S) - q(S)^2}.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid",), V_range=(2, 6), n_range=(2, 2)),
    verify=verify_thm3,
    hooks={"optimal_acceptance": "otlp.core.subsets:optimal_acceptance"},
    tolerance=TOL,
    exact_supported=True,
)

REMARK2 = Check(
    name="cd.remark2",
    title="K-draft extension: alpha* = 1 + min_S {p(S) - q(S)^K}",
    source="CD Remark 2 (stated as a conjecture; true by max-flow/min-cut, notes §4)",
    statement="For K i.i.d. drafts, alpha* = 1 + min_S {p(S) - q(S)^K}.",
    printed="Remark 2 presents the K > 2 formula as a conjecture",
    counterexample="none: it holds on every instance (proof: min cut of the relaxed OTLP network, GR §2.6)",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid",), V_range=(2, 4), n_range=(3, 4),
                                                     exact_V=3, exact_n=3),
    verify=verify_thm3,
    hooks={"optimal_acceptance": "otlp.core.subsets:optimal_acceptance"},
    tolerance=TOL,
    exact_supported=True,
)


# -- eq. (12): the truncated-LP loss bound -------------------------------------------------------------------------
def verify_eq12(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, q = inst.p, inst.q
    draft = inst.draft()
    omegas, probs = inst.law(False)
    alpha = 1 + brute_min_psi(list(p), omegas, probs)[0]
    rank = np.argsort(-(p - q**2), kind="stable")  # decreasing p - q^2 (paper: q_i - p_i^2)
    for s in range(0, inst.V + 1):
        verifier = hooks["is_verifier"](s=s)
        acc = verifier.verifier_acceptance(p, draft)
        omega2 = rank[s:]
        bound = alpha - float(np.maximum(p[omega2] - q[omega2] ** 2, 0.0).sum())
        t.leq(f"s={s}: truncated-LP acceptance >= alpha* - sum_Omega2 (p - q^2)^+", bound, acc + 1e-9)
        t.leq(f"s={s}: truncated-LP acceptance <= alpha*", acc, alpha + 1e-9)
        t.equal(f"s={s}: output law vs p (L1)", float(np.abs(verifier.output_law(p, draft) - p).sum()), 0.0)
    return t.result()


EQ12 = Check(
    name="cd.eq12",
    title="truncated LP: acceptance >= alpha* - sum_{x in Omega_2} (p(x) - q(x)^2)^+",
    source="CD eq. (12), App. F, Algorithm 2",
    statement="For K = 2 i.i.d. drafts and every s, the truncated-LP IS scheme (Omega_1 = top s tokens by p - q^2) "
    "is exact (outputs p) and its step-2 acceptance is >= alpha* - sum_{x in Omega_2} (p(x) - q(x)^2)^+.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid",), V_range=(2, 6), n_range=(2, 2)),
    verify=verify_eq12,
    hooks={"is_verifier": "otlp.theorems.adapters:is_verifier"},
    tolerance=1e-7,
)

CHECKS = [THM1, THM2, THM3, REMARK2, EQ12]
