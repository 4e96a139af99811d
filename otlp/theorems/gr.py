"""Checks for "Global Resolution: Optimal Multi-Draft Speculative Sampling via Convex Minimization" (GR;
papers/000, notes/global-resolution.md §4). Typos the notes flag and that these checks correct: Sec. 6 prints
"alpha* = psi(H*)" (it is 1 + psi(H*)); App. D prints "+" before the quadratic term (it is "-")."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from otlp.theorems.common import TOL, inside, members, numbers, plan_value, scheme_stream, zero
from otlp.theorems.core import Check, Tally
from otlp.theorems.instances import Instance
from otlp.theorems.reference import (
    beta_objective,
    beta_program,
    bits_of,
    brute_min_psi,
    full_otlp,
    psi_values,
    relaxed_otlp,
    solve_lp,
)

ALL_SCHEMES = ("iid", "independent", "without_replacement", "spechub", "greedy")


def _alpha_lp(p: list, omegas: np.ndarray, probs: list, exact: bool) -> object:
    """alpha* by an LP: the Full OTLP (float, small) or the relaxed OTLP (larger, and always in exact mode: sympy's
    rational simplex is reliable on the inequality-only relaxed LP, whose value equals the Full OTLP's, GR §2.2)."""
    if len(p) * len(probs) <= 400 and not exact:
        return full_otlp(p, omegas, probs, exact)
    return relaxed_otlp(p, omegas, probs, exact)[0]


# -- Thm 3.1 ----------------------------------------------------------------------------------------------------------
def _gen_all(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    return scheme_stream(rng, count, exact, ALL_SCHEMES)


def verify_thm31(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    lp = _alpha_lp(p, omegas, probs, exact)
    best, _ = brute_min_psi(p, omegas, probs)
    t.equal("1 + min psi (brute force) vs Full OTLP LP", 1 + best, lp)
    draft = inst.draft()
    t.equal("optimal_acceptance vs Full OTLP LP", hooks["optimal_acceptance"](inst.p, draft), lp)
    value, mask = hooks["min_psi"](inst.p, draft)
    psi_all = psi_values(list(inst.p), omegas, [float(x) for x in probs])
    t.equal("min_psi value vs psi(its H)", value, psi_all[bits_of(mask)])
    t.equal("min_psi value vs brute-force min", value, best)
    product_formulation(inst, hooks["relaxed_otlp"], lp, exact, t, "RelaxedOTLP")
    return t.result()


def float_data(omegas: np.ndarray, probs: np.ndarray, inst: Instance) -> tuple[list, np.ndarray, list]:
    """The float data a product formulation solved, read as the exact rationals they are: ``(p, omegas, probs)``."""
    return [Fraction(float(x)) for x in inst.p], np.asarray(omegas), [Fraction(float(x)) for x in probs]


def product_formulation(inst: Instance, solve: object, truth: object, exact: bool, t: Tally, name: str) -> None:
    """otlp.lp.formulations' ``name`` solved by the product (``exact`` backend in exact mode, else ``highs``) vs the
    truth. Exact mode: the product reads its float inputs as exact rationals, so its Fraction value must EQUAL this
    module's sympy simplex on that same rational data (a hard equality), and match the instance's own rational
    alpha* within float rounding of the data."""
    value, omegas, probs = solve(inst.p, inst.draft(), exact)
    backend = "exact" if exact else "highs"
    t.equal(f"{name} (product, {backend} backend) vs reference alpha*", float(value), float(truth))
    if exact:
        p_f, om_f, pr_f = float_data(omegas, probs, inst)
        reference = relaxed_otlp(p_f, om_f, pr_f, exact=True)[0] if name == "RelaxedOTLP" else \
            beta_program(p_f, om_f, pr_f, exact=True)[0]
        if not isinstance(value, Fraction):
            t.holds(f"{name} exact backend returned {type(value).__name__}, not a Fraction", False)
        else:
            t.equal(f"{name} exact backend vs sympy simplex on the same rational data", value, reference)


THM31 = Check(
    name="gr.thm3.1",
    title="alpha* = 1 + min_H psi(H)",
    source="GR Thm 3.1 / eq. (4) (hu2025towards); SpecHub §2.3; CD Remark 2",
    statement="For every draft law, the Full OTLP optimum equals 1 + min_{H subset V} [p(H) - P_draft(omega in H^n)]; "
    "min_psi returns a set attaining its value.",
    printed="Sec. 6 writes alpha* = psi(H*)",
    counterexample="p = q: psi(H*) = 0 but alpha* = 1",
    generate=_gen_all,
    verify=verify_thm31,
    hooks={"optimal_acceptance": "otlp.core.subsets:optimal_acceptance", "min_psi": "otlp.core.subsets:min_psi",
           "relaxed_otlp": "otlp.theorems.adapters:relaxed_otlp_solve"},
    tolerance=TOL,
    exact_supported=True,
)


# -- Thm 4.1 / Thm B.1 ------------------------------------------------------------------------------------------------
def beta_from_plan(S: list[list], omegas: np.ndarray, exact: bool) -> list[list]:
    """GR Thm 4.1: beta(i | w) = S[i][w] / sum_j S[j][w]; uniform on set(w) where the column is all zero."""
    mem = members(omegas)
    V = len(S)
    beta = [[zero(exact)] * len(mem) for _ in range(V)]
    for m, mset in enumerate(mem):
        col = sum(S[i][m] for i in range(V))
        for i in mset:
            beta[i][m] = S[i][m] / col if col > 0 else (Fraction(1, len(mset)) if exact else 1.0 / len(mset))
    return beta


def verify_thm41(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    alpha = 1 + brute_min_psi(p, omegas, probs)[0]
    if exact:
        _, S = relaxed_otlp(p, omegas, probs, exact=True)  # a rational vertex of the relaxed LP
    else:
        omegas, probs_arr, S_arr = hooks["relaxed_plan"](inst.p, inst.draft())
        probs = [float(x) for x in probs_arr]
        S = S_arr.tolist()
        t.equal("relaxed plan value vs alpha*", plan_value(S, omegas), alpha)
    beta = beta_from_plan(S, omegas, exact)
    mem = members(omegas)
    for m, mset in enumerate(mem):
        t.equal(f"sum_i beta(i | w_{m})", sum(beta[i][m] for i in mset), Fraction(1) if exact else 1.0)
    t.equal("beta-program objective of beta(S*) vs alpha*", beta_objective(p, omegas, probs, beta), alpha)
    t.equal("beta program optimum (Thm B.1) vs alpha*", beta_program(p, omegas, probs, exact)[0], alpha)
    value, acceptance, omegas_f, probs_f = hooks["beta_program"](inst.p, inst.draft(), exact)
    product_formulation(inst, lambda *_: (value, omegas_f, probs_f), alpha, exact, t, "BetaProgram")
    t.equal("BetaProgram.acceptance(optimal_beta()) (product's Thm 4.1 map) vs alpha*", acceptance, float(alpha))
    return t.result()


THM41 = Check(
    name="gr.thm4.1",
    title="beta from the relaxed-LP S* is optimal for the beta program",
    source="GR Thm 4.1 and Thm B.1 (khisti2025multi eq. (19))",
    statement="With S* optimal for the relaxed OTLP, beta(i|w) = S*[i,w] / sum_j S*[j,w] (uniform on set(w) for an "
    "all-zero column) attains sum_i min(p(i), sum_w beta(i|w) P(w)) = alpha*, which is the beta program's optimum.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid", "independent", "without_replacement",
                                                                          "spechub")),
    verify=verify_thm41,
    hooks={"relaxed_plan": "otlp.theorems.adapters:relaxed_plan",
           "beta_program": "otlp.theorems.adapters:beta_program_solve"},
    tolerance=TOL,
    exact_supported=True,
)


# -- Thm 5.1 / Eq. 7 ---------------------------------------------------------------------------------------------------
def cs_residual(S: list[list], p: list, omegas: np.ndarray, probs: list, H: int) -> object:
    """The largest violation of the complementary-slackness system (6a)-(6c) for the minimiser H (bitmask)."""
    mem = members(omegas)
    V, M = len(p), len(probs)
    worst = 0 * p[0]
    inH = [bool(H >> i & 1) for i in range(V)]
    inHn = [inside(mset, H) for mset in mem]
    for i in range(V):
        if inH[i]:  # (6b) row equality over (H*)^n
            worst = max(worst, abs(sum(S[i][m] for m in range(M) if inHn[m]) - p[i]))
            worst = max(worst, max((abs(S[i][m]) for m in range(M) if not inHn[m]), default=worst))  # (6c)
        else:  # (6a) row inequality over the complement
            worst = max(worst, sum(S[i][m] for m in range(M) if not inHn[m]) - p[i])
    for m in range(M):
        if inHn[m]:  # (6b) column inequality
            worst = max(worst, sum(S[i][m] for i in range(V) if inH[i]) - probs[m])
        else:  # (6a) column equality
            worst = max(worst, abs(sum(S[i][m] for i in range(V) if not inH[i]) - probs[m]))
    return worst


def cs_plan(p: list, omegas: np.ndarray, probs: list, H: int, weights: list, exact: bool) -> list[list]:
    """A point of the CS system (6a)-(6c) for H, found as an LP vertex minimising ``weights`` (not the LP optimum
    direction, so "CS system => optimal" is tested on a plan no solver was asked to optimise)."""
    mem = members(omegas)
    V, M = len(p), len(probs)
    inH = [bool(H >> i & 1) for i in range(V)]
    inHn = [inside(mset, H) for mset in mem]
    pairs = [(i, m) for m in range(M) for i in sorted(mem[m]) if not (inH[i] and not inHn[m])]
    A_ub, b_ub, A_eq, b_eq = [], [], [], []
    for i in range(V):
        row = {k: 1 for k, (j, m) in enumerate(pairs) if j == i}
        (A_eq if inH[i] else A_ub).append(row)
        (b_eq if inH[i] else b_ub).append(p[i])
    for m in range(M):
        row = {k: 1 for k, (i, mm) in enumerate(pairs) if mm == m}
        (A_ub if inHn[m] else A_eq).append(row)
        (b_ub if inHn[m] else b_eq).append(probs[m])
    _, x = solve_lp([-w for w in weights[: len(pairs)]], A_ub, b_ub, A_eq, b_eq, len(pairs), exact)
    S = [[zero(exact)] * M for _ in range(V)]
    for k, (i, m) in enumerate(pairs):
        S[i][m] = x[k]
    return S


def verify_thm51(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    values = psi_values(p, omegas, probs)
    best = min(values)
    alpha = 1 + best
    tol = 0 if exact else 1e-9
    minimisers = [H for H, v in enumerate(values) if v - best <= tol]
    if exact:
        _, S_star = relaxed_otlp(p, omegas, probs, exact=True)
    else:
        omegas, probs_arr, S_arr = hooks["relaxed_plan"](inst.p, inst.draft())
        probs, S_star = [float(x) for x in probs_arr], S_arr.tolist()
        t.equal("relaxed plan value vs alpha*", plan_value(S_star, omegas), alpha)
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    weights = [Fraction(int(w)) if exact else float(w) for w in rng.integers(1, 10, size=len(p) * len(probs))]
    half = [[x / 2 for x in row] for row in S_star]
    candidates = [("optimal plan", S_star), ("half plan", half),
                  ("CS-system plan", cs_plan(p, omegas, probs, minimisers[0], weights, exact))]
    # exact: strict. float: HiGHS leaves ~1e-7 per row, so only clear disagreements count (a dead zone between
    # 1e-7 and 1e-5 on both sides; the "half plan" and the injected-bug tests sit far outside it).
    lo, hi = (0, 0) if exact else (1e-7, 1e-5)
    for name, S in candidates:
        gap = alpha - plan_value(S, omegas)
        for H in minimisers:
            res = cs_residual(S, p, omegas, probs, H)
            t.holds(f"{name}, H*={H:b}: CS residual {float(res):.3g} but optimality gap {float(gap):.3g}",
                    not ((res <= lo and gap > hi) or (res > hi and gap <= lo)))
    return t.result()


THM51 = Check(
    name="gr.thm5.1",
    title="complementary-slackness system <=> relaxed-OTLP optimality (any minimiser H*)",
    source="GR Thm 5.1, eq. (6a)-(6c), eq. (7)",
    statement="A feasible S is optimal for the relaxed OTLP iff it satisfies (6a)-(6c) for H* (for every minimiser "
    "H* of psi); in particular p^res = 0 on H* and p_draft^res = 0 off (H*)^n (eq. 7).",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid", "independent", "without_replacement",
                                                                          "spechub"), V_range=(2, 4)),
    verify=verify_thm51,
    hooks={"relaxed_plan": "otlp.theorems.adapters:relaxed_plan"},
    tolerance=TOL,
    exact_supported=True,
)


# -- Thm 6.1 / 6.2 -----------------------------------------------------------------------------------------------------
def hall_system(p: list, omegas: np.ndarray, probs: list, H: int, p_out: dict, t: Tally, label: str) -> None:
    """GR Thm 6.1 (eq. 9): 0 <= p_i <= p(i); sum_{i in S} p_i <= p(S) + psi(V \\ S) for all S subset V \\ H*, with
    equality at S = V \\ H*; and the outer transport system with those row sums is feasible (max-flow saturates)."""
    V = len(p)
    values = psi_values(p, omegas, probs)
    full = (1 << V) - 1
    outer = [i for i in range(V) if not H >> i & 1]
    for i in outer:
        t.leq(f"{label}: p_{i} >= 0", -p_out[i], 0 * p[0])
        t.leq(f"{label}: p_{i} <= p({i})", p_out[i], p[i])
    for sub in range(1, 1 << len(outer)):
        S = sum(1 << outer[k] for k in range(len(outer)) if sub >> k & 1)
        lhs = sum(p_out[i] for i in outer if S >> i & 1)
        rhs = sum(p[i] for i in range(V) if S >> i & 1) + values[full & ~S]
        if sub == (1 << len(outer)) - 1:
            t.equal(f"{label}: sum_(i not in H*) p_i = p(V minus H*) + psi(H*)", lhs, rhs)
        else:
            t.leq(f"{label}: Hall constraint S={S:b}", lhs, rhs)
    # outer transport: S[i, w] for i in set(w) minus H*, w not in (H*)^n; rows <= p_i, columns <= P(w)
    mem = members(omegas)
    cols = [m for m in range(len(probs)) if not inside(mem[m], H)]
    pairs = [(i, m) for m in cols for i in sorted(mem[m]) if not H >> i & 1]
    if not pairs:
        return
    A_ub = [{k: 1 for k, (j, _) in enumerate(pairs) if j == i} for i in outer]
    A_ub += [{k: 1 for k, (_, mm) in enumerate(pairs) if mm == m} for m in cols]
    exact = isinstance(p[0], Fraction)
    flow, _ = solve_lp([1] * len(pairs), A_ub, [p_out[i] for i in outer] + [probs[m] for m in cols], [], [],
                       len(pairs), exact)
    t.equal(f"{label}: outer max-flow saturates P_draft off (H*)^n", flow, sum(probs[m] for m in cols))


def verify_thm61(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, False)
    h, p_i, alpha = hooks["outer_residuals"](inst.p, inst.draft())
    H = bits_of(h)
    values = psi_values(p, omegas, probs)
    t.equal("psi(H*) of the solver's H* vs min psi", values[H], min(values))
    t.equal("solver alpha vs 1 + min psi", alpha, 1 + min(values))
    hall_system(p, omegas, probs, H, {i: float(p_i[i]) for i in range(len(p)) if not h[i]}, t, "solver residuals")
    return t.result()


THM61 = Check(
    name="gr.thm6.1",
    title="outer residual LP: the solver's p_i satisfy every Hall constraint, tight at V minus H*",
    source="GR Thm 6.1, eq. (9), eq. (50); Lemma G.1",
    statement="The production OT's outer row sums p_i = p(i) - (1 - alpha*) r(i) satisfy 0 <= p_i <= p(i), "
    "sum_{i in S} p_i <= p(S) + psi(V minus S) for all S subset V minus H*, with equality at S = V minus H*, and the "
    "outer transport with those row sums is feasible.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid", "iid", "independent",
                                                                          "without_replacement"), V_range=(2, 5)),
    verify=verify_thm61,
    hooks={"outer_residuals": "otlp.theorems.adapters:outer_residual_targets"},
    tolerance=1e-6,
)


def closed_form_outer(p: list, omegas: np.ndarray, probs: list, H: int, ordering: list[int]) -> dict:
    """GR Thm 6.2: p_{v_i} = p(v_i) + min_{T superset H_{i+1}} psi(T) - min_{T superset H_i} psi(T), where
    H_i = H* + {v_i..v_k} (brute force over supersets; generic in the number type)."""
    values = psi_values(p, omegas, probs)

    def min_above(A: int) -> object:
        return min(v for T, v in enumerate(values) if T & A == A)

    out = {}
    k = len(ordering)
    for idx in range(k):
        H_i = H | sum(1 << v for v in ordering[idx:])
        H_next = H | sum(1 << v for v in ordering[idx + 1:])
        out[ordering[idx]] = p[ordering[idx]] + min_above(H_next) - min_above(H_i)
    return out


def verify_thm62(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    _, mask = hooks["min_psi"](inst.p, inst.draft())
    H = bits_of(mask)
    values = psi_values(p, omegas, probs)
    t.equal("psi(H*) vs min psi", values[H], min(values))
    if exact and values[H] != min(values):
        H = values.index(min(values))  # keep testing Thm 6.2 itself on an exact minimiser
    outer = [i for i in range(len(p)) if not H >> i & 1]
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    for trial in range(2):  # two random orderings: "any ordering works"
        ordering = [outer[j] for j in rng.permutation(len(outer))]
        hall_system(p, omegas, probs, H, closed_form_outer(p, omegas, probs, H, ordering), t, f"ordering {trial}")
    return t.result()


THM62 = Check(
    name="gr.thm6.2",
    title="closed-form outer residuals (any ordering) solve Thm 6.1",
    source="GR Thm 6.2 (polymatroid greedy, App. H)",
    statement="For ANY ordering v_1..v_k of V minus H*, p_{v_i} = p(v_i) + min_{T superset H_{i+1}} psi(T) - "
    "min_{T superset H_i} psi(T) lies in [0, p(v_i)] and satisfies the Thm 6.1 system.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid", "independent", "without_replacement"),
                                                     V_range=(2, 5)),
    verify=verify_thm62,
    hooks={"min_psi": "otlp.core.subsets:min_psi"},
    tolerance=1e-6,
    exact_supported=True,
)


# -- Lemma 6.3 ---------------------------------------------------------------------------------------------------------
def verify_lemma63(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    V = len(p)
    values = psi_values(p, omegas, probs)
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    for _ in range(3):
        B = int(rng.integers(1 << V))
        A = B & int(rng.integers(1 << V))
        brute = min(v for S, v in enumerate(values) if S & A == A and S | B == B)
        order = [int(i) for i in hooks["ratio_order"](inst.p, inst.q) if (B & ~A) >> int(i) & 1]
        prefix, best = A, values[A]
        for i in order:
            prefix |= 1 << i
            best = min(best, values[prefix])
        t.equal(f"A={A:b} B={B:b}: best sorted prefix vs brute-force constrained min", best, brute)
    return t.result()


LEMMA63 = Check(
    name="gr.lemma6.3",
    title="constrained min of psi over A <= S <= B is a sorted prefix of B minus A",
    source="GR Lemma 6.3 (i.i.d. drafts)",
    statement="For A subset B subset V, min_{A <= S <= B} psi(S) = min_i psi(A + L_i), L_i the first i tokens of "
    "B minus A sorted by decreasing q/p (any tie-break).",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid",), V_range=(2, 7), n_range=(1, 4),
                                                     exact_V=6, exact_n=3),
    verify=verify_lemma63,
    hooks={"ratio_order": "otlp.core.subsets:ratio_order"},
    tolerance=1e-9,
    exact_supported=True,
)


# -- Lemma 6.6 ---------------------------------------------------------------------------------------------------------
def verify_lemma66(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, False)
    p_arr = np.asarray(p)
    probs = np.asarray(probs)
    h, p_i, alpha = hooks["outer_residuals"](inst.p, inst.draft())
    if alpha >= 1 - 1e-12:
        return t.result()  # the lemma assumes psi(H*) < 0 (notes P5): nothing to check
    mem = members(omegas)
    V, M = len(p), len(mem)
    inHn = np.array([all(h[j] for j in mset) for mset in mem])
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    for trial, a_vec in enumerate([np.zeros(V), rng.normal(0, 2, V), rng.normal(0, 8, V)]):
        e = np.exp(a_vec - a_vec.max())
        S = np.zeros((V, M))
        for m, mset in enumerate(mem):
            if inHn[m]:  # inner rows (eq. 17), slack node with alpha = 0
                U = sorted(mset)
                z = np.exp(-a_vec.max()) + e[U].sum()
                S[U, m] = probs[m] * e[U] / z
            else:  # outer softmax over set(w) minus H* (eq. 14)
                U = [j for j in sorted(mset) if not h[j]]
                S[U, m] = probs[m] * e[U] / e[U].sum()
        rows = S.sum(axis=1)
        a = float(np.abs(rows[~h] - p_i[~h]).sum())
        b = float(np.abs(rows[h] - p_arr[h]).sum())
        C = S.copy()
        r = np.where(h, 0.0, p_arr - p_i)
        r = r / r.sum()
        left = probs - S.sum(axis=0)  # [M]
        C[:, inHn] += np.outer(r, np.where(inHn, left, 0.0))[:, inHn]  # eq. 18 residual completion, (H*)^n columns
        t.leq(f"alpha set {trial}: C >= 0", -float(C.min()), 0.0)
        t.equal(f"alpha set {trial}: column sums = P_draft", float(np.abs(C.sum(axis=0) - probs).max()), 0.0)
        t.leq(f"alpha set {trial}: p-marginal L1 deviation <= a + 2b", float(np.abs(C.sum(axis=1) - p_arr).sum()),
              a + 2 * b + 1e-12)
        acc = sum(C[j, m] for m in range(M) for j in mem[m])
        t.leq(f"alpha set {trial}: |acceptance - alpha*| <= a + b", abs(acc - alpha), a + b + 1e-12)
    return t.result()


LEMMA66 = Check(
    name="gr.lemma6.6",
    title="approximate OT from any alpha: marginal error <= a + 2b, acceptance error <= a + b",
    source="GR Lemma 6.6, eqs. (14), (17), (18)",
    statement="For any outer/inner alpha, C of eq. (18) (built on the solver's H* and p_i) is >= 0, meets the "
    "p_draft marginal exactly, deviates from p by at most a + 2b in L1 and from alpha* by at most a + b in "
    "acceptance (a, b: the outer/inner L1 row deviations). Assumes psi(H*) < 0.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid",), V_range=(2, 6), n_range=(1, 3)),
    verify=verify_lemma66,
    hooks={"outer_residuals": "otlp.theorems.adapters:outer_residual_targets"},
    tolerance=1e-9,
)


# -- Eq. 8: the production OT slice is an optimal coupling ---------------------------------------------------
def verify_eq8(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, False)
    probs = np.asarray(probs)
    slices = hooks["ot_slices"](inst.p, inst.draft(), omegas)  # [M, V]
    t.leq("pi(.|w) >= 0", -float(slices.min()), 0.0)
    t.equal("sum_i pi(i|w) = 1", float(np.abs(slices.sum(axis=1) - 1).max()), 0.0)
    t.equal("output law = p (L1)", float(np.abs(probs @ slices - np.asarray(p)).sum()), 0.0)
    mem = members(omegas)
    acc = sum(probs[m] * slices[m, sorted(mem[m])].sum() for m in range(len(mem)))
    t.equal("acceptance of the plan vs Full OTLP LP", acc, _alpha_lp(p, omegas, list(probs), False))
    return t.result()


EQ8 = Check(
    name="gr.eq8",
    title="the production OT slice pi(.|w) is an optimal coupling",
    source="GR eq. (8) (slice), eq. (3) (residual completion), Thm 3.1",
    statement="otlp.optimal.OptimalTransport's slices pi(.|w) are distributions whose mixture under P_draft is p "
    "and whose acceptance sum_w P(w) pi(set(w)|w) equals the Full OTLP optimum.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid", "iid", "independent", "spechub"),
                                                     V_range=(2, 6), n_range=(1, 3)),
    verify=verify_eq8,
    hooks={"ot_slices": "otlp.theorems.adapters:ot_slices"},
    tolerance=1e-7,
)

CHECKS = [THM31, THM41, THM51, THM61, THM62, LEMMA63, LEMMA66, EQ8]
