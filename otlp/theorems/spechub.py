"""Checks for "SpecHub: Provable Acceleration to Multi-Draft Speculative Decoding" (papers/001, notes/spechub.md §4).
Letters as in the project (p target, q draft). The printed Algorithm 3 computes the hub's remaining target mass only
inside "if x1 = a"; read literally it over-generates the hub (notes §3.3): the verifier under test is the corrected
rule, and the printed one is what the injected-bug test feeds to spechub.thm2. SpecHub's dominance results are
CONDITIONAL; the conditions are part of each statement and the generators only produce instances meeting them."""

from __future__ import annotations

import numpy as np

from otlp.theorems.common import members, numbers, scheme_stream
from otlp.theorems.core import Check, Tally
from otlp.theorems.instances import Instance, pairs
from otlp.theorems.reference import full_otlp, relaxed_otlp


def _hub(q: list) -> int:
    return max(range(len(q)), key=lambda i: (q[i], -i))


def alpha_spechub(p: list, q: list) -> object:
    """alpha_SH = p(a) + sum_{x != a} min(p(x), q(x) / (1 - q(a))) (SpecHub §4, App. C.1; notes §2.4)."""
    a = _hub(q)
    z = sum(q[x] for x in range(len(q)) if x != a)
    return p[a] + sum(min(p[x], q[x] / z) for x in range(len(q)) if x != a)


def _gen(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    return scheme_stream(rng, count, exact, ("spechub",), V_range=(2, 6), n_range=(2, 2), exact_V=5)


def verify_thm2(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    verifier, draft = hooks["spechub_verifier"](), inst.draft()
    p = inst.p
    t.equal("output law vs p (L1)", float(np.abs(verifier.output_law(p, draft) - p).sum()), 0.0)
    omegas, probs = draft.support()
    law, accepts = verifier.conditional(p, draft, omegas)  # [M, V], [M]
    mem = members(omegas)
    member = sum(probs[m] * law[m, sorted(mem[m])].sum() for m in range(len(mem)))
    t.equal("membership acceptance vs the rule's own acceptance (no residual mass on the hub, Cor. 1)",
            member, float(probs @ accepts))
    return t.result()


THM2 = Check(
    name="spechub.thm2",
    title="SpecHub outputs exactly p; the hub is served only by acceptance",
    source="SpecHub Thm 2 (correctness), Corollary 1 (top-token acceptance)",
    statement="The corrected SpecHub rule's output law is p; every drafted pair contains the hub a and the residual "
    "never outputs a draft token, so the hub is accepted with total probability p(a).",
    printed="Algorithm 3 computes p'(a) = max(p(a) - sum_x Q'(a, x), 0) only inside 'if x(1) = a'",
    counterexample="read literally, a pair (x1, a) tests the hub against p(a): output law on p = (.05, .15, .3, .5), "
    "q = (.2, .2, .2, .4)-type instances deviates from p by up to 0.38 (notes §3.3)",
    generate=_gen,
    verify=verify_thm2,
    hooks={"spechub_verifier": "otlp.theorems.adapters:spechub_verifier"},
    tolerance=1e-9,
)


def verify_closed_form(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    q = list(inst.q_exact) if exact else list(inst.q)
    lp = relaxed_otlp(p, omegas, probs, True)[0] if exact else full_otlp(p, omegas, probs)
    closed = alpha_spechub(p, q)
    t.equal("alpha_SH closed form vs OTLP optimum for SpecHub's Q", closed, lp)
    t.equal("verifier acceptance vs OTLP optimum", hooks["spechub_verifier"]().acceptance(inst.p, inst.draft()), lp)
    return t.result()


CLOSED_FORM = Check(
    name="spechub.closed_form",
    title="SpecHub's greedy plan is LP-optimal: alpha_SH = p(a) + sum_{x != a} min(p(x), q(x)/(1 - q(a)))",
    source="SpecHub §4, App. C.1 (greedy LP solution), Thm 1 (LP = OTM)",
    statement="For SpecHub's sparse Q, the OTLP optimum equals p(a) + sum_{x != a} min(p(x), q(x)/(1 - q(a))) and the "
    "verifier attains it.",
    generate=_gen,
    verify=verify_closed_form,
    hooks={"spechub_verifier": "otlp.theorems.adapters:spechub_verifier"},
    tolerance=1e-9,
    exact_supported=True,
)


def _conditional_stream(rng: np.random.Generator, count: int, condition: object, V_range: tuple[int, int]) -> list:
    out, tries = [], 0
    while len(out) < count and tries < 200 * count:
        tries += 1
        (inst,) = pairs(rng, 1, V_range, (2, 2), kinds=(("random", "hub", "ties", "zeros")[tries % 4],),
                        scheme="spechub")
        if condition(inst.p, inst.q):
            out.append(Instance(f"#{len(out)} {inst.label}", inst.p_exact, inst.qs_exact, 2, "spechub"))
    return out


def _thm3_condition(p: np.ndarray, q: np.ndarray) -> bool:
    a = int(np.argmax(q))
    alpha = float(np.minimum(p, q).sum())
    return q[a] / (1 - q[a]) > 1 - alpha + 1e-12 if q[a] < 1 else False


def verify_thm3(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, q = inst.p, inst.q
    sh = hooks["spechub_verifier"]().verifier_acceptance(p, inst.draft())
    rrs = hooks["rrs_verifier"]().verifier_acceptance(p, inst.with_scheme("iid").draft())
    alpha = float(np.minimum(p, q).sum())
    t.equal("RRS (k = 2) acceptance vs its closed form sum_x min(p, (2 - alpha) q)", rrs,
            float(np.minimum(p, (2 - alpha) * q).sum()))
    t.leq("alpha_SH >= alpha_RRS under q(a)/(1 - q(a)) > 1 - alpha", rrs, sh + 1e-12)
    return t.result()


THM3 = Check(
    name="spechub.thm3",
    title="SpecHub beats RRS (k = 2) when q(a)/(1 - q(a)) > 1 - alpha",
    source="SpecHub Thm 3 (superiority over RRS)",
    statement="If q(a)/(1 - q(a)) > 1 - alpha with alpha = sum_x min(p(x), q(x)) and a = argmax q, SpecHub's "
    "acceptance >= RRS with two i.i.d. drafts (whose acceptance is sum_x min(p(x), (2 - alpha) q(x))).",
    conditions="q(a)/(1 - q(a)) > 1 - alpha; only instances meeting it are generated",
    printed="§4 defines alpha = sum_x max(p(x), q(x))",
    counterexample="with max, alpha >= 1 and the condition is vacuous; without the (min) condition SpecHub can lose: "
    "in 27% of random cases (notes §4, e.g. TC5b 0.5797 vs 0.64)",
    generate=lambda rng, count, exact: _conditional_stream(rng, count, _thm3_condition, (2, 6)),
    verify=verify_thm3,
    hooks={"spechub_verifier": "otlp.theorems.adapters:spechub_verifier",
           "rrs_verifier": "otlp.theorems.adapters:rrs_verifier"},
    tolerance=1e-9,
)


def verify_thm4(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, exact)
    q = list(inst.q_exact) if exact else list(inst.q)
    iid = inst.with_scheme("iid")
    om2, pr2 = iid.law(exact)
    otm = relaxed_otlp(p, om2, pr2, exact)[0]
    t.leq("OTM (i.i.d., k = 2) <= alpha_SH when q(a) > 1/2", otm, alpha_spechub(p, q))
    t.leq("verifier: OTM (i.i.d.) <= SpecHub acceptance", float(otm),
          hooks["spechub_verifier"]().acceptance(inst.p, inst.draft()) + 1e-12)
    return t.result()


THM4 = Check(
    name="spechub.thm4",
    title="SpecHub beats the optimal i.i.d. transport (k = 2) when q(a) > 1/2",
    source="SpecHub Thm 4",
    statement="If q(a) > 1/2, alpha_SH >= alpha*(p, IID(q, 2)) (the OTLP optimum with two i.i.d. drafts).",
    conditions="q(a) > 1/2; only instances meeting it are generated (no guarantee otherwise)",
    generate=lambda rng, count, exact: [
        inst for inst in _conditional_stream(rng, count, lambda p, q: float(q.max()) > 0.5, (2, 5 if exact else 6))],
    verify=verify_thm4,
    hooks={"spechub_verifier": "otlp.theorems.adapters:spechub_verifier"},
    tolerance=1e-9,
    exact_supported=True,
)


# -- positional (first / second draft) acceptance, k = 2 ---------------------------------------------------------------
def positional_spechub(p: list, q: list) -> tuple[object, object]:
    """(first_SH, second_SH) (notes §3.3 "Positional acceptance", derived):
    first = sum_{x != a} min(p(x), q(x)) + min(p(a), S2), second = sum_{x != a} min((p(x) - q(x))^+, q(a) q(x) / Z)
    + (p(a) - S2)^+, with Z = sum_{x != a} q(x), S2 = sum_{x != a} (q(a) q(x) / Z - (p(x) - q(x))^+)^+."""
    a = _hub(q)
    z = sum(q[x] for x in range(len(q)) if x != a)
    others = [x for x in range(len(q)) if x != a]
    row = {x: q[a] * q[x] / z for x in others}
    p1 = {x: max(p[x] - q[x], 0 * p[x]) for x in others}
    s2 = sum((max(row[x] - p1[x], 0 * p[x]) for x in others), start=0 * p[0])
    first = sum((min(p[x], q[x]) for x in others), start=0 * p[0]) + min(p[a], s2)
    second = sum((min(p1[x], row[x]) for x in others), start=0 * p[0]) + max(p[a] - s2, 0 * p[0])
    return first, second


def positional_rrs_wor(p: list, q: list) -> tuple[object, object]:
    """(first, second) of RRS without replacement, k = 2 (notes §4, "RRSw k=2 exact"): first = alpha =
    sum min(p, q); second = sum_{x1} (q(x1) - p(x1))^+ sum_{x != x1} min(r(x), q(x) / (1 - q(x1))), r = (p - q)^+ /
    (1 - alpha)."""
    V = len(p)
    alpha = sum((min(p[x], q[x]) for x in range(V)), start=0 * p[0])
    if alpha == 1:
        return alpha, 0 * alpha
    r = [max(p[x] - q[x], 0 * p[x]) / (1 - alpha) for x in range(V)]
    second = sum((max(q[x1] - p[x1], 0 * p[x1]) * sum((min(r[x], q[x] / (1 - q[x1])) for x in range(V) if x != x1),
                                                       start=0 * p[0])
                  for x1 in range(V) if q[x1] < 1), start=0 * p[0])
    return alpha, second


def _positional_from_law(verifier: object, inst: Instance, t: Tally, name: str) -> tuple[float, float]:
    """first / second rates summed over the independent tuple law of ``inst``: P(output = omega_k) per tuple. This
    equals P(draft k accepted) for these rules because the drafts of a tuple are distinct and the residual puts no
    mass on a draft that can be rejected (checked here: law(omega_1) + law(omega_2) = the rule's own acceptance)."""
    omegas, probs = inst.law(False)
    probs = np.asarray(probs)
    law, accepts = verifier.conditional(inst.p, inst.draft(), omegas)  # [M, V], [M]
    rows = np.arange(len(probs))
    t.holds(f"{name}: the tuples have distinct drafts", bool(np.all(omegas[:, 0] != omegas[:, 1])))
    t.equal(f"{name}: law(omega_1) + law(omega_2) vs the rule's acceptance (max over tuples)",
            float(np.abs(law[rows, omegas[:, 0]] + law[rows, omegas[:, 1]] - accepts).max()), 0.0)
    return float(probs @ law[rows, omegas[:, 0]]), float(probs @ law[rows, omegas[:, 1]])


def verify_positional(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p = list(inst.p_exact) if exact else list(inst.p)
    q = list(inst.q_exact) if exact else list(inst.q)
    for name, closed, verifier, sub in (
            ("SpecHub", positional_spechub, hooks["spechub_verifier"](), inst),
            ("RRS w/o replacement", positional_rrs_wor, hooks["rrs_wor_verifier"](),
             inst.with_scheme("without_replacement"))):
        first, second = closed(p, q)
        f_law, s_law = _positional_from_law(verifier, sub, t, name)
        t.equal(f"{name}: first-draft rate, closed form vs enumeration", f_law, float(first))
        t.equal(f"{name}: second-draft rate, closed form vs enumeration", s_law, float(second))
        t.equal(f"{name}: first + second vs the verifier's acceptance", float(first + second),
                verifier.acceptance(inst.p, sub.draft()))
    first_sh, _ = positional_spechub(p, q)
    t.leq("first_SH <= alpha = sum min(p, q) (App. C.4 'rare first-draft decrease')", first_sh,
          positional_rrs_wor(p, q)[0])
    return t.result()


POSITIONAL = Check(
    name="spechub.positional",
    title="first/second-draft acceptance rates of SpecHub and RRS without replacement (k = 2)",
    source="SpecHub §3.3 'Positional acceptance' (notes, derived), Tables 1-3 rates, App. C.4; RRSw k=2 (notes §4)",
    statement="P(draft 1 accepted) and P(draft 2 accepted), from enumerating the verifiers' conditional laws over the "
    "draft tuples, equal the closed forms: SpecHub first = sum_{x != a} min(p, q) + min(p(a), S2), second = "
    "sum_{x != a} min((p - q)^+, q(a) q / Z) + (p(a) - S2)^+; RRSw first = alpha, second = sum_{x1} (q - p)^+(x1) "
    "sum_{x != x1} min(r(x), q(x)/(1 - q(x1))); and first_SH <= alpha.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("spechub",), V_range=(2, 6),
                                                     n_range=(2, 2), exact_V=5),
    verify=verify_positional,
    hooks={"spechub_verifier": "otlp.theorems.adapters:spechub_verifier",
           "rrs_wor_verifier": "otlp.theorems.adapters:rrs_wor_verifier"},
    tolerance=1e-9,
    exact_supported=True,
)

CHECKS = [THM2, CLOSED_FORM, THM3, THM4, POSITIONAL]
