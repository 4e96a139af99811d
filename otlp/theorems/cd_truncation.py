"""Checks for the canonical-decomposition speed-ups of Section 4 and App. G.1 (CD; papers/003, notes
canonical-decomposition.md §2.5-2.7, pitfalls 5-8). Letters as in the project: p = target, q = draft (the paper
swaps them: its q(x) - p(x)^2 is our p(x) - q(x)^2).

- ``cd.truncated_alphabet`` (§2.7): run the IS scheme against the truncated target p~ = p|Omega_0 / p(Omega_0), then
  emit Y with probability p_a = p(Omega_0) (a coin independent of Y), else a token of Omega \\ Omega_0 drawn
  proportionally to p. The output is exactly p.
- ``cd.truncated_lp_g1`` (App. G.1, eqs. 195-196): Omega_1 beats Omega_2, and inside Omega_2 a pair is split 1/2-1/2.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from otlp.theorems.common import members, numbers, scheme_stream, zero
from otlp.theorems.core import Check, Tally
from otlp.theorems.instances import Instance
from otlp.theorems.reference import brute_min_psi, relaxed_otlp, solve_lp


def _alpha_star(p: list, omegas: np.ndarray, probs: list, exact: bool) -> object:
    """alpha* of (p, draft law): the relaxed-OTLP LP in exact mode, the brute-force 1 + min psi (GR Thm 3.1) else."""
    if exact:
        return relaxed_otlp(p, omegas, probs, True)[0]
    return 1 + brute_min_psi(p, omegas, probs)[0]


# -- Section 4: truncated alphabet ---------------------------------------------------------------------------------
def truncated_alphabet_conditional(p: np.ndarray, draft: object, omega0: np.ndarray, verifier: object,
                                   omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pi(. | omega) of the truncated-alphabet scheme (CD §4, "truncated alphabet"), ``omegas [M, n]`` ->
    ``(law [M, V], accepted [M])``:

        pi(. | w) = p_a * pi~(. | w) + (1 - p_a) * p|_{Omega \\ Omega_0} / p(Omega \\ Omega_0),   p_a = p(Omega_0),

    with pi~ the inner verifier against p~ = p|_{Omega_0} / p_a; accepted = p_a * (inner acceptance): the p_a coin
    is independent of Y (notes pitfall 8), so a draft is emitted only when the coin says "keep" and step 2 accepted.
    """
    p = np.asarray(p, dtype=np.float64)  # [V]
    mask = np.asarray(omega0, dtype=bool)  # [V]
    p_a = float(p[mask].sum())
    p_tilde = np.where(mask, p, 0.0) / p_a  # [V]
    law, accepted = verifier.conditional(p_tilde, draft, np.asarray(omegas, dtype=np.int64))  # [M, V], [M]
    outside = np.where(mask, 0.0, p)  # [V]
    rest = float(outside.sum())
    if rest > 0.0:
        law = (1.0 - rest) * law + rest * (outside / rest)[None, :]
    return law, (1.0 - rest) * accepted


def _gen_alphabet(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    """i.i.d. drafts, n in {2, 3} (n = 2 in exact mode), with Omega_0 cycling through: the top-m tokens of p, a
    random subset, all of Omega (p_a = 1), the single argmax, and top-m plus the zero-p tokens; s cycles 0, 1, 2, V."""
    base = scheme_stream(rng, count, exact, ("iid",), V_range=(2, 5), n_range=(2, 3), exact_V=4, exact_n=2)
    out = []
    for k, inst in enumerate(base):
        p = inst.p
        V = inst.V
        order = np.argsort(-p, kind="stable")
        mode = ("top", "random", "full", "single", "top_plus_zeros")[k % 5]
        mask = np.zeros(V, dtype=bool)
        if mode == "top":
            mask[order[: int(rng.integers(1, V + 1))]] = True
        elif mode == "random":
            mask = rng.random(V) < 0.5
        elif mode == "full":
            mask[:] = True
        elif mode == "single":
            mask[order[0]] = True
        else:
            mask[order[: int(rng.integers(1, V + 1))]] = True
            mask |= p == 0
        if not (p[mask] > 0).any():  # p(Omega_0) must be positive: add the argmax of p
            mask[order[0]] = True
        s = (0, 1, 2, V)[k % 4]
        extra = dict(inst.extra, omega0=tuple(bool(b) for b in mask), s=s)
        out.append(Instance(f"{inst.label} Omega0={mode}{np.flatnonzero(mask).tolist()} s={s}", inst.p_exact,
                            inst.qs_exact, inst.n, inst.scheme, extra))
    return out


def verify_alphabet(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    V, n = inst.V, inst.n
    mask = np.array(inst.extra["omega0"], dtype=bool)
    s = int(inst.extra["s"])
    q = list(inst.q_exact) if exact else [float(x) for x in inst.q_exact]
    p_a = sum((p[i] for i in range(V) if mask[i]), start=zero(exact))
    p_tilde = [p[i] / p_a if mask[i] else zero(exact) for i in range(V)]
    verifier = hooks["is_verifier"](s=s)
    draft = inst.draft()
    law, accepted = hooks["truncated_alphabet"](inst.p, draft, mask, verifier, omegas)  # [M, V], [M]
    t.holds("the scheme's law and acceptance are finite", bool(np.isfinite(law).all() and np.isfinite(accepted).all()))
    fprobs = np.array([float(x) for x in probs])  # [M]
    marginal = fprobs @ law  # [V]
    t.equal("output law vs p (L1)", float(np.abs(marginal - np.array([float(x) for x in p])).sum()), 0.0)
    t.equal("conditional laws sum to 1 (max gap)", float(np.abs(law.sum(axis=1) - 1.0).max()), 0.0)
    t.leq("conditional law is non-negative (-min)", float(-law.min()), 0.0)
    mem = members(omegas)
    on_drafts = np.array([law[m, sorted(mem[m])].sum() for m in range(len(mem))])  # [M]
    t.leq("accepted mass <= output mass on set(omega) (max excess)", float((accepted - on_drafts).max()), 1e-12)
    acc = float(fprobs @ accepted)
    alpha = _alpha_star(p, omegas, probs, exact)
    t.leq("truncated-alphabet acceptance <= alpha*(p)", acc, float(alpha) + 1e-9)
    inner = verifier.verifier_acceptance(np.array([float(x) for x in p_tilde]), draft)
    t.equal("acceptance vs p_a * inner step-2 acceptance sum_y min(p~(y), p_I(y)) (eq. 19-20)", acc,
            float(p_a) * inner)
    alpha_tilde = _alpha_star(p_tilde, omegas, probs, exact)
    if s >= V:  # the inner scheme is the exact canonical scheme (Thm 1): acceptance = p_a * alpha*(p~)
        t.equal("s >= V: acceptance vs p_a * alpha*(p~)", acc, float(p_a * alpha_tilde))
    elif n == 2:  # eq. (12) for the inner truncated LP, scaled by p_a
        key = [p_tilde[i] - q[i] ** 2 for i in range(V)]
        order = sorted(range(V), key=lambda i: -key[i])  # ties: equal keys, so the penalty does not depend on them
        penalty = sum((max(key[i], zero(exact)) for i in order[s:]), start=zero(exact))
        t.leq("acceptance >= p_a * (alpha*(p~) - sum_Omega2 (p~ - q^2)^+) (eq. 12 inside)",
              float(p_a * (alpha_tilde - penalty)), acc + 1e-9)
    return t.result()


def appendix_i_reading_law(p: np.ndarray, q: np.ndarray, omega0: np.ndarray) -> np.ndarray:
    """Output law [V] of App. I's description read literally (K = 2 i.i.d. drafts X1, X2 ~ q): compute p_I from the
    TRUNCATED draft law q~ = q|Omega_0 / q(Omega_0) with the optimal IS weights (s = V) against the untruncated
    target p, keep only the input tokens in Omega_0 (one kept: it is Y; none kept: reject), then single-draft SS of Y
    with draft law p_I. The real drafts are not ~ q~, so the output is not p (the recorded counterexample)."""
    from otlp.core.drafts import IID
    from otlp.verifiers.importance import ImportanceSampling, _pick_first_numpy

    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    mask = np.asarray(omega0, dtype=bool)
    V = p.size
    q_t = np.where(mask, q, 0.0) / q[mask].sum()
    rule = ImportanceSampling(s=V)
    plans, p_I = rule.plans(p, IID(q_t, 2))
    residual = np.maximum(p - p_I, 0.0)
    residual = residual / residual.sum() if residual.sum() > 0 else p
    accept = np.where(p_I > 0, np.minimum(1.0, p / np.where(p_I > 0, p_I, 1.0)), 0.0)
    pair = np.array([[x1, x2] for x1 in range(V) for x2 in range(V)])  # [V^2, 2]
    keep1 = _pick_first_numpy(plans[0], pair[:, 0], pair[:, 1])  # [V^2] P(Y = X1 | X1, X2) when both are kept
    out = np.zeros(V)
    for (x1, x2), k1 in zip(pair, keep1, strict=True):
        w = q[x1] * q[x2]
        ys = [(x1, k1), (x2, 1.0 - k1)] if mask[x1] and mask[x2] else [(x, 1.0) for x in (x1, x2) if mask[x]][:1]
        if not ys:
            out += w * residual
            continue
        for y, py in ys:
            out[y] += w * py * accept[y]
            out += w * py * (1.0 - accept[y]) * residual
    return out


TRUNCATED_ALPHABET = Check(
    name="cd.truncated_alphabet",
    title="truncated alphabet: IS against p|Omega_0, then an independent p(Omega_0) coin, outputs exactly p",
    source="CD Section 4 ('truncated alphabet'), notes §2.7 and pitfall 8",
    statement="For any Omega_0 with p(Omega_0) > 0 and any IS inner rule (truncated LP, any s), running it against "
    "p~ = p|Omega_0 / p(Omega_0), keeping Y w.p. p_a = p(Omega_0) (independently of Y) and else drawing from "
    "p|Omega\\Omega_0 outputs exactly p; its draft-acceptance is p_a * sum_y min(p~(y), p_I(y)) <= alpha*(p), equals "
    "p_a * alpha*(p~) for s >= V, and (K = 2) is >= p_a * (alpha*(p~) - sum_{Omega_2} (p~ - q^2)^+).",
    printed="App. I: 'only keeping those input tokens that belong to Omega_0 ... generate truncated distributions "
    "p~1, p~2 and apply the LP on these followed by speculative sampling using the target distribution q' (paper "
    "letters; it truncates the DRAFT laws, unlike Section 4, which truncates the target)",
    counterexample="read literally (K = 2 i.i.d., s = V, p_I from q~ = q|Omega_0, drop drafts outside Omega_0) the "
    "output is not p: p = (1/2, 1/2), q = (1/4, 3/4), Omega_0 = {0} gives the output law (0.21875, 0.78125) "
    "(appendix_i_reading_law); Section 4's target truncation (checked here) is exact",
    generate=_gen_alphabet,
    verify=verify_alphabet,
    hooks={"is_verifier": "otlp.theorems.adapters:is_verifier",
           "truncated_alphabet": "otlp.theorems.cd_truncation:truncated_alphabet_conditional"},
    tolerance=1e-7,
    exact_supported=True,
)


# -- App. G.1: the truncated-LP variant ----------------------------------------------------------------------------
def g1_law(q: list, omega1: list[int], W: list[list] | np.ndarray) -> list:
    """p_I of the App. G.1 variant (eq. 196 corrected), generic in the number type: ``omega1`` the Omega_1 tokens in
    the order of ``W [s, s]`` (W[a, b] = P(Y = omega1[a] | X1 = omega1[a], X2 = omega1[b]), a != b), then

        k in Omega_1: p_I(k) = q_k^2 + sum_{i in Omega_1, i != k} (q_k q_i W[k, i] + q_i q_k (1 - W[i, k]))
                               + 2 q_k q(Omega_2)
        k in Omega_2: p_I(k) = q_k^2 + sum_{i in Omega_2, i != k} q_i q_k   (printed: i over all of Omega, a typo)
    """
    V = len(q)
    pos = {tok: a for a, tok in enumerate(omega1)}
    z = 0 * q[0]
    q2 = sum((q[i] for i in range(V) if i not in pos), start=z)
    law = []
    for k in range(V):
        if k in pos:
            a = pos[k]
            val = q[k] ** 2 + 2 * q[k] * q2
            for b, i in enumerate(omega1):
                if i != k:
                    val += q[k] * q[i] * W[a][b] + q[i] * q[k] * (1 - W[b][a])
        else:
            val = q[k] ** 2 + q[k] * (q2 - q[k])
        law.append(val)
    return law


def g1_law_printed(q: list, omega1: list[int], W: list[list] | np.ndarray) -> list:
    """Eq. (196) as printed: the Omega_2 case sums over every i != k (Omega_1 partners included)."""
    law = g1_law(q, omega1, W)
    q1 = sum((q[i] for i in omega1), start=0 * q[0])
    return [law[k] + (q[k] * q1 if k not in omega1 else 0) for k in range(len(q))]


def g1_law_brute(q: list, omega1: list[int], W: list[list] | np.ndarray) -> list:
    """The law of the G.1 selection by enumeration of the ordered pair (X1, X2) ~ q x q (eq. 195's rule)."""
    V = len(q)
    pos = {tok: a for a, tok in enumerate(omega1)}
    half = Fraction(1, 2) if isinstance(q[0], Fraction) else 0.5
    law = [0 * q[0]] * V
    for x1 in range(V):
        for x2 in range(V):
            w = q[x1] * q[x2]
            if x1 == x2:
                law[x1] += w
            elif x1 in pos and x2 in pos:
                law[x1] += w * W[pos[x1]][pos[x2]]
                law[x2] += w * (1 - W[pos[x1]][pos[x2]])
            elif x1 in pos or x2 in pos:
                law[x1 if x1 in pos else x2] += w
            else:
                law[x1] += w * half
                law[x2] += w * half
    return law


def g1_truncated_lp(p: list, q: list, omega1: list[int], exact: bool) -> tuple[object, list[list]]:
    """The G.1 truncated LP, built here from scratch in the paper's unordered form (eq. 8 with eq. 195 fixed):
    variables w_{a,b} (a < b in Omega_1, w_{b,a} = 1 - w_{a,b}) and t_k (k in Omega_1),

        max sum_k t_k  s.t.  t_k <= p_k,  t_k <= p_I(k) (eq. 196),  w <= 1.

    Returns ``(acceptance = LP value + sum_{k in Omega_2} min(p_k, p_I(k)), W [s][s] ordered)``."""
    V, s = len(p), len(omega1)
    pairs = [(a, b) for a in range(s) for b in range(a + 1, s)]
    nw = len(pairs)
    z = zero(exact)
    q2 = sum((q[i] for i in range(V) if i not in omega1), start=z)
    A_ub: list[dict] = []
    b_ub: list = []
    for a, k in enumerate(omega1):
        A_ub.append({nw + a: 1})
        b_ub.append(p[k])
        row = {nw + a: 1}
        rhs = q[k] ** 2 + 2 * q[k] * q2
        for j, (x, y) in enumerate(pairs):  # pair {x, y} mass 2 q_x q_y; w_{x,y} goes to x, 1 - w_{x,y} to y
            mass = 2 * q[omega1[x]] * q[omega1[y]]
            if x == a:
                row[j] = -mass
            elif y == a:
                row[j] = mass
                rhs += mass
        A_ub.append(row)
        b_ub.append(rhs)
    for j in range(nw):
        A_ub.append({j: 1})
        b_ub.append(1)
    if s:
        value, x = solve_lp([0] * nw + [1] * s, A_ub, b_ub, [], [], nw + s, exact)
    else:
        value, x = z, []
    one = Fraction(1) if exact else 1.0
    W = [[z] * s for _ in range(s)]
    for j, (a, b) in enumerate(pairs):
        W[a][b], W[b][a] = x[j], one - x[j]
    law = g1_law(q, omega1, W)
    rest = sum((min(p[k], law[k]) for k in range(V) if k not in omega1), start=z)
    return value + rest, W


def _gen_g1(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    """K = 2 i.i.d.; s cycles over 0..V; Omega_1 = top-s by p - q^2 (stable), top-s with reversed tie-breaking (the
    O(ns) partial selection may break ties either way), or a random s-subset (the eq. 12 proof uses no order)."""
    base = scheme_stream(rng, count, exact, ("iid",), V_range=(2, 6), n_range=(2, 2), exact_V=4, exact_n=2)
    out = []
    for k, inst in enumerate(base):
        V = inst.V
        key = [inst.p_exact[i] - inst.q_exact[i] ** 2 for i in range(V)]
        s = k % (V + 1)
        mode = ("top", "top_reversed_ties", "random")[k % 3]
        if mode == "top":
            omega1 = sorted(range(V), key=lambda i: -key[i])[:s]
        elif mode == "top_reversed_ties":
            omega1 = sorted(range(V), key=lambda i: (-key[i], -i))[:s]
        else:
            omega1 = [int(x) for x in rng.permutation(V)[:s]]
        extra = dict(inst.extra, omega1=tuple(omega1))
        out.append(Instance(f"{inst.label} Omega1={mode}{list(omega1)}", inst.p_exact, inst.qs_exact, 2, "iid",
                            extra))
    return out


def verify_g1(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    V = inst.V
    q = list(inst.q_exact) if exact else [float(x) for x in inst.q_exact]
    omega1 = list(inst.extra["omega1"])
    s = len(omega1)
    value, W_lp = g1_truncated_lp(p, q, omega1, exact)
    law = g1_law(q, omega1, W_lp)
    brute = g1_law_brute(q, omega1, W_lp)
    for k in range(V):
        t.equal(f"eq. 196 (corrected) p_I({k}) vs enumeration of the selection rule", law[k], brute[k])
    t.equal("eq. 196 (corrected) total mass vs 1", sum(law, start=zero(exact)), 1 + zero(exact))
    # the implementation under test: otlp's Omega_1 LP (shared by the 'is' verifier) on the same partition
    qf, pf = np.array([float(x) for x in q]), np.array([float(x) for x in p])
    idx = np.array(omega1, dtype=np.int64)
    rest = float(qf.sum() - qf[idx].sum())
    W = np.asarray(hooks["omega1_weights"](qf[idx][None], qf[idx][None], pf[idx][None], np.array([rest]),
                                           np.array([rest]), True), dtype=np.float64)[0]  # [s, s]
    off = ~np.eye(s, dtype=bool)
    if s >= 2:
        t.leq("production W outside [0, 1]", float(max(-W.min(), W.max() - 1.0)), 0.0)
        t.equal("production W[i, j] + W[j, i] vs 1 (max gap)", float(np.abs((W + W.T - 1.0)[off]).max()), 0.0)
    impl_law = np.array(g1_law(list(qf), omega1, W))  # [V]
    impl_acc = float(np.minimum(pf, impl_law).sum())
    t.equal("acceptance with otlp's Omega_1 weights vs the independent truncated LP", impl_acc, value)
    alpha = _alpha_star(p, omegas, probs, exact)
    penalty = sum((max(p[i] - q[i] ** 2, zero(exact)) for i in range(V) if i not in omega1), start=zero(exact))
    t.leq("truncated-LP optimum >= alpha* - sum_Omega2 (p - q^2)^+ (eq. 12 for G.1)", alpha - penalty, value)
    t.leq("otlp weights: acceptance >= alpha* - penalty", float(alpha - penalty), impl_acc + 1e-9)
    t.leq("truncated-LP optimum <= alpha*", value, alpha)
    if s == 0:  # every pair split 1/2-1/2: p_I = q, acceptance 1 - TV(p, q)
        t.equal("s = 0: acceptance vs 1 - TV(p, q)", value, sum((min(p[i], q[i]) for i in range(V)), start=zero(exact)))
    if s == V:
        t.equal("s = V: acceptance vs alpha*", value, alpha)
    return t.result()


TRUNCATED_LP_G1 = Check(
    name="cd.truncated_lp_g1",
    title="App. G.1 truncated LP (Omega_2 pairs split 1/2-1/2): law eq. 196 and the eq. 12 bound",
    source="CD App. G.1, eqs. (195)-(196), with eq. (12) / App. F",
    statement="For K = 2 i.i.d. drafts and ANY partition Omega_1 | Omega_2 (in particular the top s by p - q^2), "
    "the G.1 selection has law p_I(k) = q_k^2 + sum_{Omega_1 pairs} + 2 q_k q(Omega_2) on Omega_1 and "
    "q_k^2 + q_k (q(Omega_2) - q_k) on Omega_2; its LP optimum lies in [alpha* - sum_{Omega_2} (p - q^2)^+, alpha*], "
    "is 1 - TV(p, q) for s = 0 and alpha* for s = V; otlp's Omega_1 LP attains it.",
    printed="eq. (196), k in Omega_2: p_I(k) = p_k^2 + sum_{i != k}^n p_i p_k (paper letters; i over all of Omega)",
    counterexample="q = (1/2, 1/2), Omega_1 = {0}: printed p_I = (3/4, 1/2) sums to 5/4; Omega_1 partners always win, "
    "so the sum runs over Omega_2 only: p_I = (3/4, 1/4)",
    generate=_gen_g1,
    verify=verify_g1,
    hooks={"omega1_weights": "otlp.verifiers.importance:solve_omega1_weights"},
    tolerance=1e-7,
    exact_supported=True,
)

CHECKS = [TRUNCATED_ALPHABET, TRUNCATED_LP_G1]
