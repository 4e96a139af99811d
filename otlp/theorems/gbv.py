"""Checks for greedy multi-path block verification (GBV; papers/002, notes/gbv.md §4).
Printed typos corrected (notes §7): BV's eq. 4 uses unweighted residual sums (the weighted form is the valid one);
"GBV >= BV" and "GBV monotone in K" are NOT theorems (p = q is a counterexample, notes §2.8), so only the provable
chain GBV(K) <= OPT(K), OPT(K) nondecreasing in K, OPT(K) >= BV, GBV(1) = BV is checked."""

from __future__ import annotations

import numpy as np

from otlp.theorems.core import Check, Tally


class BlockInstance:
    """A (target, draft) pair of autoregressive table models with block length L."""

    def __init__(self, label: str, target: object, draft: object, L: int):
        self.label, self.target, self.draft, self.L = label, target, draft, L


def _gen(rng: np.random.Generator, count: int, exact: bool) -> list[BlockInstance]:
    from otlp.multistep.armodel import ARModel, random_pair

    out = []
    for k in range(count):
        V, L = [(2, 1), (2, 2), (3, 1), (2, 3), (3, 2)][k % 5]
        closeness = [0.0, 0.5, 0.9][k % 3]
        target, draft = random_pair(V, L, rng, concentration=[1.0, 0.3][k % 2], closeness=closeness)
        if k % 7 == 6:  # p = q: BV reaches L + 1
            draft = ARModel(target.conditionals.copy(), V, name="draft")
        out.append(BlockInstance(f"#{k} V={V} L={L} closeness={closeness}", target, draft, L))
    return out


def bv_closed_form(target: object, draft: object, L: int) -> float:
    """sum over a_{1:i} in V^{<=L} of p(a_{1:i}) min_{k<=i} q(a_{1:k}) / p(a_{1:k}) (notes §3.2; Thm 3.4)."""
    from otlp.multistep.armodel import node_parents

    p = target.prefix_probabilities(L)
    q = draft.prefix_probabilities(L)
    parents = node_parents(target.V, L)
    ratio = np.empty_like(p)
    ratio[0] = 1.0
    for node in range(1, p.size):  # parents precede children in the node order
        ratio[node] = min(ratio[parents[node]], q[node] / p[node])
    return float((p * ratio).sum())


def verify_bv(inst: BlockInstance, hooks: dict, exact: bool) -> float:
    t = Tally()
    target, draft, L = inst.target, inst.draft, inst.L
    bv = hooks["bv_efficiency"](target, draft, L)
    t.equal("BV efficiency vs sum p min_k q/p (closed form)", bv, bv_closed_form(target, draft, L))
    t.equal("BV efficiency vs single-path LP optimum", bv, hooks["multipath_lp"](target, draft, L, 1))
    t.leq("token-wise SD efficiency <= BV", hooks["sps_efficiency"](target, draft, L), bv + 1e-12)
    t.equal("BV target-matching error (exact law)", hooks["target_matching_error"]("bv", target, draft, L, 1), 0.0)
    return t.result()


BV = Check(
    name="gbv.thm3.4",
    title="block verification is optimal among all valid single-path verifiers",
    source="GBV paper Thm 3.3 (single-path LP), Thm 3.4 (BV optimality)",
    statement="BV is target-matching and its block efficiency sum_{a} p(a) min_k q(a_{1:k})/p(a_{1:k}) equals the "
    "single-path LP optimum (>= token-wise speculative sampling).",
    printed="eq. 4 computes BV's acceptance h_i with UNWEIGHTED sums sum_x max(p - q, 0)",
    counterexample="with the printed eq. 4 the exact output law violates target-matching (0.20 on the notes' T1); the "
    "weighted R_i = sum_x max(w_i p - q, 0) is the valid rule (checked here through the exact law)",
    generate=_gen,
    verify=verify_bv,
    hooks={"bv_efficiency": "otlp.multistep.efficiency:bv_efficiency",
           "sps_efficiency": "otlp.multistep.efficiency:sps_efficiency",
           "multipath_lp": "otlp.theorems.adapters:multipath_lp_value",
           "target_matching_error": "otlp.theorems.adapters:target_matching_error"},
    tolerance=1e-7,
)


def verify_gbv(inst: BlockInstance, hooks: dict, exact: bool) -> float:
    t = Tally()
    target, draft, L = inst.target, inst.draft, inst.L
    bv = hooks["bv_efficiency"](target, draft, L)
    t.equal("GBV(K = 1) vs BV", hooks["gbv_efficiency"](target, draft, L, 1), bv)
    previous = bv
    for K in (2, 3):
        gbv = hooks["gbv_efficiency"](target, draft, L, K)
        opt = hooks["multipath_lp"](target, draft, L, K)
        t.leq(f"K={K}: GBV <= OPT (antichain LP)", gbv, opt + 1e-7)
        t.leq(f"K={K}: OPT(K-1) <= OPT(K)", previous, opt + 1e-7)
        previous = opt
        t.equal(f"K={K}: GBV target-matching error", hooks["target_matching_error"]("gbv", target, draft, L, K), 0.0)
    return t.result()


GBV = Check(
    name="gbv.thm4.6",
    title="GBV is valid and below the multi-path optimum, which grows with K",
    source="GBV paper Thm 4.3 (antichain LP), Lemma 4.4/4.5, Thm 4.6, Def. 5.2 / eqs. 22-23",
    statement="GBV is target-matching for every K, GBV(1) = BV, GBV(K) <= OPT(K) (antichain-LP optimum), and "
    "OPT(K) is nondecreasing in K with OPT(1) = BV.",
    printed="experiments suggest GBV >= BV and GBV increasing in K",
    counterexample="not theorems: with p = q, BV = L + 1 > GBV(K >= 2) (notes §2.8, §7.9); not asserted here",
    generate=_gen,
    verify=verify_gbv,
    hooks={"bv_efficiency": "otlp.multistep.efficiency:bv_efficiency",
           "gbv_efficiency": "otlp.multistep.efficiency:gbv_efficiency",
           "multipath_lp": "otlp.theorems.adapters:multipath_lp_value",
           "target_matching_error": "otlp.theorems.adapters:target_matching_error"},
    tolerance=1e-7,
)

CHECKS = [BV, GBV]


# -- Eqs. 19-23: the greedy skewed draft q^Gamma_g by brute force over K-tuples of paths-----------------------------
def verify_skewed(inst: BlockInstance, hooks: dict, exact: bool) -> float:
    import itertools

    from otlp.multistep.armodel import depth_offsets

    t = Tally()
    target, draft, L = inst.target, inst.draft, inst.L
    V = target.V
    off = depth_offsets(V, L)
    q_pre, p_cond, q_cond = draft.prefix_probabilities(L), target.conditionals, draft.conditionals

    def node(path: tuple[int, ...]) -> int:
        return int(off[len(path)] + sum(a * V ** (len(path) - 1 - j) for j, a in enumerate(path)))

    def key(path: tuple[int, ...]) -> tuple:  # O(a_{1:L}) of Def. 5.2 with Eq. 21's score, ties by token id
        out = []
        for i, a in enumerate(path):
            n = node(path[:i])
            qa, pa = q_cond[n, a], p_cond[n, a]
            out.append((pa / qa if qa > 0 else np.inf, a))
        return tuple(out)

    paths = sorted(itertools.product(range(V), repeat=L), key=key)  # P_1 < ... < P_M
    q_path = np.array([q_pre[node(P)] for P in paths])
    for K in (1, 2, 3):
        skewed = hooks["greedy_skewed_prefix"](target, draft, L, K)
        brute = np.zeros_like(skewed)
        for tup in itertools.product(range(len(paths)), repeat=K):  # the highest-ranked drafted path is selected
            mass = float(np.prod(q_path[list(tup)]))
            if mass > 0:
                P = paths[max(tup)]
                for i in range(L + 1):
                    brute[node(P[:i])] += mass
        t.equal(f"K={K}: q^Gamma_g on every prefix (Eqs. 22-23) vs brute force over K-tuples (max abs)",
                float(np.abs(skewed - brute).max()), 0.0)
        cum = np.concatenate([[0.0], np.cumsum(q_path)])
        eq19 = cum[1:] ** K - cum[:-1] ** K  # corrected Eq. 19: sums over j <= i of q(P_j)
        leaves = np.array([brute[node(P)] for P in paths])
        t.equal(f"K={K}: corrected Eq. 19 vs brute force (max abs)", float(np.abs(eq19 - leaves).max()), 0.0)
        ratio = leaves[q_path > 0] / q_path[q_path > 0]
        t.leq(f"K={K}: Eq. 20, q^Gamma(P_i)/q(P_i) nondecreasing along the ranking",
              float(max(np.max(ratio[:-1] - ratio[1:], initial=0.0), 0.0)), 1e-12)
    return t.result()


SKEWED = Check(
    name="gbv.eq19-23",
    title="GBV's skewed draft q^Gamma_g (Eqs. 22-23) = brute force over K drafted paths; Eq. 19 (corrected), Eq. 20",
    source="GBV Def. 5.1-5.2, Eqs. 19-23 (GBV design note §2.7, §3.4)",
    statement="Drafting K i.i.d. paths and keeping the highest-ranked one (ranking: lexicographic in the per-node "
    "score p/q, ties by token id) gives every prefix the law q^Gamma_g(a_{1:i}) = (q(a_{1:i}) + B)^K - B^K; on leaves "
    "q^Gamma(P_i) = (sum_{j<=i} q(P_j))^K - (sum_{j<i} q(P_j))^K and q^Gamma(P_i)/q(P_i) is nondecreasing in i.",
    printed="Eq. 19 prints q(P_i) inside both sums",
    counterexample="with q(P_i) inside the sums, q^Gamma(P_i) = (i q(P_i))^K - ((i-1) q(P_i))^K does not sum to 1: "
    "V = 2, L = 1, K = 2, q = (0.2, 0.8) gives 0.04 + 1.92 = 1.96 or 0.64 + 0.12 = 0.76 depending on the ranking",
    generate=_gen,
    verify=verify_skewed,
    hooks={"greedy_skewed_prefix": "otlp.multistep.efficiency:greedy_skewed_prefix"},
    tolerance=1e-12,
)

CHECKS = CHECKS + [SKEWED]
