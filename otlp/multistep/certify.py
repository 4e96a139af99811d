"""``certify`` for multi-step rules: block efficiency, the LP optimum, the gap, and target-law preservation.

For a rule in ``RULES`` ("sps", "bv", "gbv", "token_tree", "optimal") on explicit autoregressive models
(papers/002):

- block efficiency E[tau + 1], exact: the closed forms of ``otlp.multistep.efficiency`` (SpS, BV Eq. 83, GBV
  with q^Gamma of Eqs. 22-23; the optimal K-path rule: Eq. 83 with its realised q^Gamma) or, for the token
  tree, its forward-recursion law; the output law's E[length] is recorded beside it as a second route
  (``law_efficiency``).
- the optimum over ALL valid rules drafting the same number of paths: the multi-path LP (Thm 3.3 for one path,
  Thm 4.3 antichain LP for K paths; ``otlp.lp.formulations.MultiPathLP``), when it converges.
- target preservation of the output (X_{1:tau}, Y) as the paper defines validity (Def. 3.1 / Def. 4.1):
  * target-matching: appending L - tau target tokens gives exactly p_{L+1}; measured by
    ``target_matching_error`` (max over a_{1:L+1} of the absolute law error; must be < 1e-9);
  * prefix-matching: only the last output token may leave a drafted path.  From the law alone this is checked
    through the node budgets, D(a_{1:i}) p(a_{1:i}) = P(output strictly extends a_{1:i}) (notes/gbv.md §1):
    a prefix-matching rule on K i.i.d. paths has, for every antichain T of V^{<=L},
        sum_{a in T} D(a) p(a) <= psi(T) = 1 - (1 - q(T))^K        (Eq. 9 for K = 1, Eq. 12 for K >= 1)
    because the output can strictly extend a node of T only if some drafted path passes through T.  The most
    violated antichain is found exactly by the separation routine of the LP (a tree DP over tangents of psi).
    A law that is target-matching but not prefix-matching (e.g. "output a whole block from p") fails here.

Single-path rules ("sps", "bv") draft ONE path whatever K is asked; they are certified with K = 1 (a note
says so), so their optimum is the single-path LP's and BV's gap is Thm 3.4's zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from otlp.core.errors import InputError
from otlp.multistep.armodel import ARModel, depth_offsets, num_nodes
from otlp.multistep.efficiency import _check_pair, bv_efficiency, check_K, gbv_efficiency, sps_efficiency
from otlp.multistep.enumeration import RULES, efficiency_from_law, output_law, target_matching_error

if TYPE_CHECKING:
    from otlp.cli.util import Progress

SINGLE_PATH_RULES = ("sps", "bv")
LAW_TOLERANCE = 1e-9  # target-matching error and antichain-cap violation accepted as exact (float64 roundoff)


@dataclass
class MultiStepReport:
    """What ``certify_multistep`` found.  ``method`` says how each number was obtained.

    K is the number of drafted paths the rule was certified with (1 for the single-path rules).
    preserves_target is None when the output law could not be enumerated (``target_check`` says why).
    """

    rule: str
    V: int
    L: int
    K: int
    block_efficiency: float | None  # None: the rule could not be built (``target_check`` says why)
    optimum: float | None
    gap: float | None
    preserves_target: bool | None
    target_matching_error: float | None
    prefix_matching_violation: float | None = None
    law_efficiency: float | None = None
    target_check: str = ""
    method: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule, "V": self.V, "L": self.L, "K": self.K, "block_efficiency": self.block_efficiency,
            "optimum": self.optimum, "gap": self.gap, "preserves_target": self.preserves_target,
            "target_matching_error": self.target_matching_error,
            "prefix_matching_violation": self.prefix_matching_violation, "law_efficiency": self.law_efficiency,
            "target_check": self.target_check, "method": dict(self.method), "notes": list(self.notes),
        }

    def __str__(self) -> str:
        def fmt(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.12g}"

        verdict = {True: "yes", False: "NO", None: "not checked"}[self.preserves_target]
        lines = [
            f"rule                {self.rule} (V = {self.V}, L = {self.L}, K = {self.K} drafted path(s))",
            f"block efficiency    {fmt(self.block_efficiency)}   [{self.method.get('block_efficiency', '')}]",
            f"LP optimum          {fmt(self.optimum)}   [{self.method.get('optimum', '')}]",
            f"gap                 {fmt(self.gap)}",
            f"preserves target    {verdict}   [{self.target_check}]",
        ]
        lines += [f"note                {x}" for x in self.notes]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------------
# the law checks
# ----------------------------------------------------------------------------------------------------------------------


def budget_mass(R: np.ndarray, V: int, L: int) -> np.ndarray:
    """D(a_{1:i}) p(a_{1:i}) = P(output strictly extends a_{1:i}) on every node of V^{<=L}  # [num_nodes(V, L)]

    (papers/002 Eq. 6 telescoped; notes/gbv.md §1): the sum of R over the strict descendants, one depth at a time
    bottom-up.  R: the output law on V^{<=L+1}, [num_nodes(V, L + 1)].
    """
    off = depth_offsets(V, L + 1)
    subtree = R[off[L + 1] : off[L + 2]].astype(np.float64)  # R summed over each node's subtree, depth L+1
    mass = np.empty(num_nodes(V, L))
    for i in range(L, -1, -1):
        strict = subtree.reshape(-1, V).sum(1)  # [V^i]: mass strictly below each node of depth i
        mass[off[i] : off[i + 1]] = strict
        subtree = strict + R[off[i] : off[i + 1]]
    return mass


def prefix_matching_violation(R: np.ndarray, draft: ARModel, L: int, K: int) -> float:
    """max(0, max over antichains T of V^{<=L} of [sum_T D p - psi(T)]), psi(T) = 1 - (1 - q(T))^K (Eqs. 9, 12);
    0 (up to roundoff) for a prefix-matching rule on K i.i.d. drafted paths.  Exact whenever some cap is violated,
    by the LP's separation routine (``otlp.lp.formulations.multipath.most_violated_antichains``); the empty antichain
    (value 0) stands in when none is, hence the clamp at 0."""
    from otlp.lp.formulations.multipath import most_violated_antichains

    mass = budget_mass(R, draft.V, L)
    q_prefix = draft.prefix_probabilities(L)
    cuts = most_violated_antichains(mass, q_prefix, draft.V, L, K)
    return max(float(cuts[0][0]), 0.0) if cuts else 0.0


def _law_checks(R: np.ndarray, target: ARModel, draft: ARModel, L: int, K: int) -> tuple[bool, float, float, str]:
    """(ok, target-matching error, prefix-matching violation, description) of an output law R."""
    tm = target_matching_error(R, target, L)
    pm = prefix_matching_violation(R, draft, L, K)
    negative = float(-min(R[1:].min(), 0.0))
    ok = tm < LAW_TOLERANCE and pm <= LAW_TOLERANCE and negative <= 1e-12
    text = (f"exact output law: target-matching error {tm:.2e}, largest antichain-cap violation {pm:.2e} "
            f"(prefix-matching, K = {K})")
    if negative > 1e-12:
        text += f", negative output probability {-negative:.2e}"
    return ok, tm, pm, text


def _lp_rounds(progress: Progress | None, what: str):  # noqa: ANN202 - a callback or None
    """An ``on_round`` callback that names the LP's round and violation on the progress line."""
    if progress is None:
        return None
    return lambda rounds, violation: progress.set_note(f"{what}: round {rounds}, cap violation {violation:.1e}")


def _optimum(target: ARModel, draft: ARModel, L: int, K: int, backend: str, time_limit: float | None,
             optima: dict | None = None, progress: Progress | None = None) -> tuple[float | None, str, list[str]]:
    """(optimum or None, method, notes) from the multi-path LP; ``optima`` (keyed by K) holds the results of
    earlier calls on the same pair, so that a table of rules solves each LP once."""
    from otlp.lp.formulations.multipath import MultiPathLP

    if optima is not None and K in optima:
        value, method, notes = optima[K]
        return value, method, list(notes)
    try:
        lp = MultiPathLP(target, draft, L, K)
        sol = lp.solve(backend=backend, time_limit=time_limit,
                       on_round=_lp_rounds(progress, f"multi-path LP optimum (K = {K})"))
    except InputError as exc:
        out = None, "multi-path LP", [f"LP optimum not computed: {exc}"]
    else:
        info = sol.info
        method = (f"MultiPathLP ({backend}, antichains {info.get('mode')}, {info.get('antichain_rows')} cap rows, "
                  f"{info.get('rounds')} round(s))")
        if not sol.optimal or not info.get("converged", False):
            bound = "" if sol.value is None else f"; upper bound {float(sol.value):.12g}"
            out = None, method, [f"LP optimum not certified: status {sol.status}, converged "
                                 f"{info.get('converged')}, max antichain violation {info.get('max_violation')}"
                                 f"{bound}"]
        else:
            out = float(sol.value), method, []
    if optima is not None:
        optima[K] = out
    return out[0], out[1], list(out[2])


# ----------------------------------------------------------------------------------------------------------------------
# certify
# ----------------------------------------------------------------------------------------------------------------------


def certify_output_law(R: np.ndarray, target: ARModel, draft: ARModel, L: int, K: int = 1, *,
                       rule: str = "law", block_efficiency: float | None = None, backend: str = "highs",
                       time_limit: float | None = 60.0, optima: dict | None = None,
                       progress: Progress | None = None) -> MultiStepReport:
    """Certify an output law R on V^{<=L+1} (R[root] = 0) of a rule drafting K i.i.d. paths.

    ``block_efficiency`` defaults to E[length] of R.  This is the route for rules outside ``RULES``.
    ``optima``: see :func:`certify_multistep`; ``progress`` (an ``otlp.cli.util.Progress``) names the LP's rounds.
    """
    _check_pair(target, draft, L)
    K = check_K(K)
    R = np.asarray(R, dtype=np.float64)
    if R.shape != (num_nodes(target.V, L + 1),):
        raise InputError(f"R must be the output law on V^(<=L+1), shape ({num_nodes(target.V, L + 1)},) for "
                         f"V={target.V}, L={L}; got {R.shape}")
    method: dict[str, str] = {}
    law_eff = efficiency_from_law(R, target.V, L)
    if block_efficiency is None:
        block_efficiency, method["block_efficiency"] = law_eff, "E[length] of the output law"
    ok, tm, pm, text = _law_checks(R, target, draft, L, K)
    optimum, method["optimum"], notes = _optimum(target, draft, L, K, backend, time_limit, optima, progress)
    gap = None if optimum is None else optimum - float(block_efficiency)
    return MultiStepReport(rule, target.V, int(L), K, float(block_efficiency), optimum, gap, bool(ok), tm, pm,
                           law_eff, text, method, notes)


def certify_multistep(rule: str, target: ARModel, draft: ARModel, L: int, K: int = 1, *, backend: str = "highs",
                      time_limit: float | None = 60.0, optima: dict | None = None,
                      progress: Progress | None = None) -> MultiStepReport:
    """Certify the multi-step rule ``rule`` in RULES on (target, draft) with block length L and K drafted paths.

    ``time_limit`` bounds each LP's constraint generation (checked between rounds). ``optima``, a dict passed to
    several calls on the same (target, draft, L), keeps the multi-path LP optimum per K so that it is solved once.
    ``progress`` (an ``otlp.cli.util.Progress``) names the LP rounds as they run.

    Examples
    --------
    >>> import numpy as np
    >>> from otlp.multistep import random_pair
    >>> target, draft = random_pair(2, 2, np.random.default_rng(0))
    >>> r = certify_multistep("bv", target, draft, 2)
    >>> abs(r.gap) < 1e-7, r.preserves_target          # Thm 3.4: BV attains the single-path LP optimum
    (True, True)
    """
    if rule not in RULES:
        raise InputError(f"unknown multi-step rule {rule!r}; expected one of {', '.join(RULES)}")
    _check_pair(target, draft, L)
    K = check_K(K)
    notes: list[str] = []
    if rule in SINGLE_PATH_RULES and K != 1:
        notes.append(f"{rule} drafts one path; certified with K = 1 (asked K = {K})")
        K = 1
    method: dict[str, str] = {}
    if rule == "sps":
        eff, method["block_efficiency"] = sps_efficiency(target, draft, L), "closed form prod min(p, q)"
    elif rule == "bv":
        eff, method["block_efficiency"] = bv_efficiency(target, draft, L), "closed form (Eq. 83)"
    elif rule == "gbv":
        eff = gbv_efficiency(target, draft, L, K)
        method["block_efficiency"] = "closed form (Eq. 83 with q^Gamma, Eqs. 22-23)"
    elif rule == "optimal":  # one LP solve serves the efficiency and the law
        from otlp.multistep.optimal_rule import optimal_k_path_rule

        opt = optimal_k_path_rule(target, draft, L, K, backend=backend, time_limit=time_limit,
                                  on_round=_lp_rounds(progress, f"Thm 4.6 LP of the optimal rule (K = {K})"))
        eff = opt.block_efficiency
        method["block_efficiency"] = (f"Eq. 83 with the realised q^Gamma* (Thm 4.6 LP, {opt.info['rounds']} "
                                      f"round(s); {opt.mixture.num_rankings} greedy rankings)")
        R = opt.output_law(target)
        report = certify_output_law(R, target, draft, L, K, rule=rule, block_efficiency=eff, backend=backend,
                                    time_limit=time_limit, optima=optima, progress=progress)
        report.method.update(method)
        report.target_check += "; law = selection law (rankings mixture) x BV's law per path"
        return report
    else:
        eff = None  # the token tree's law comes from its forward recursion: E[length] of it below
        method["block_efficiency"] = "E[length] of the forward-recursion output law"
    try:
        R = output_law(rule, target, draft, L, K)
    except InputError as exc:  # ModelTooLargeError: too many draft tuples to enumerate
        if eff is None:
            raise
        optimum, method["optimum"], lp_notes = _optimum(target, draft, L, K, backend, time_limit, optima, progress)
        return MultiStepReport(rule, target.V, int(L), K, float(eff), optimum,
                               None if optimum is None else optimum - eff, None, None,
                               target_check=f"not checked: {exc}", method=method, notes=notes + lp_notes)
    report = certify_output_law(R, target, draft, L, K, rule=rule, block_efficiency=eff, backend=backend,
                                time_limit=time_limit, optima=optima, progress=progress)
    report.method.update(method)
    report.notes = notes + report.notes
    if abs(report.block_efficiency - report.law_efficiency) > 1e-9:
        report.notes.append(f"closed form {report.block_efficiency!r} differs from the enumerated law's "
                            f"E[tau + 1] {report.law_efficiency!r}")
    return report


def certify_rules(target: ARModel, draft: ARModel, L: int, K: int, rules: tuple[str, ...] = RULES, *,
                  progress: Progress | None = None, **options: object) -> list[MultiStepReport]:
    """``certify_multistep`` for each rule (the table across rules), with one multi-path LP solve per K shared by
    all. A rule that cannot be built (the optimal rule's LP not converging in time, too many paths) gives a row
    with ``block_efficiency`` None and the reason in ``target_check``, so the other rows still come out."""
    optima: dict = {}
    reports = []
    if progress is not None:
        progress.total = len(rules)
    for rule in rules:
        if progress is not None:
            progress.set_note(rule)
        try:
            reports.append(certify_multistep(rule, target, draft, L, K, optima=optima, progress=progress,
                                             **options))
        except InputError as exc:
            if len(rules) == 1:
                raise
            k = 1 if rule in SINGLE_PATH_RULES else check_K(K)
            optimum, method, notes = optima.get(k, (None, "", []))
            reports.append(MultiStepReport(rule, target.V, int(L), k, None, optimum, None, None, None,
                                           target_check=f"not computed: {exc}", method={"optimum": method},
                                           notes=list(notes)))
        if progress is not None:
            progress.update(1)
    return reports


def format_multistep_table(reports: list[MultiStepReport]) -> str:
    head = (f"{'rule':<11} {'K':>2} {'E[tau+1]':>14} {'LP optimum':>14} {'gap':>12} {'TM error':>9} "
            f"{'PM viol.':>9}  target")
    out = [head, "-" * len(head)]
    for r in reports:
        if r.block_efficiency is None:
            out.append(f"{r.rule:<11} {r.K:>2} {'n/a':>14} {'':>14} {'':>12} {'':>9} {'':>9}  {r.target_check}")
            continue
        opt = "n/a" if r.optimum is None else f"{r.optimum:14.10f}"
        gap = "n/a" if r.gap is None else f"{r.gap:12.4e}"
        tm = "n/a" if r.target_matching_error is None else f"{r.target_matching_error:9.1e}"
        pm = "n/a" if r.prefix_matching_violation is None else f"{r.prefix_matching_violation:9.1e}"
        verdict = {True: "exact", False: "FAILED", None: "not checked"}[r.preserves_target]
        out.append(f"{r.rule:<11} {r.K:>2} {r.block_efficiency:14.10f} {opt:>14} {gap:>12} {tm:>9} {pm:>9}  {verdict}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------------------
# CLI: otlp certify-block
# ----------------------------------------------------------------------------------------------------------------------


__all__ = [
    "MultiStepReport",
    "budget_mass",
    "certify_multistep",
    "certify_output_law",
    "certify_rules",
    "format_multistep_table",
    "prefix_matching_violation",
]
