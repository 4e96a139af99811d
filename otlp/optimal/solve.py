"""Solve the block programs of one or many i.i.d. instances: closed forms for singletons, Newton for the rest.

Design note §2-§3. The output is, per instance, the log-weight alpha_i of every token (the rule's softmax
weights), the row sums R_i of the rule (re-evaluated from the final alpha) and the convergence record of every
non-singleton block. Blocks of all instances are solved together: for n = 2 they are padded into size buckets
and one batched Newton runs per bucket; for n >= 3 each block gets its own subset-term Newton.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from otlp.optimal.blocks import BlockCuts, cut_at_records
from otlp.optimal.chains import power_gap
from otlp.optimal.coefficients import block_terms, subset_terms
from otlp.optimal.newton import PairwiseN2, SubsetTerms, initial_alpha, newton
from otlp.optimal.peeling import ALL_PAIRS_MAX, peel_group
from otlp.optimal.waterfill import class_chain
from otlp.subsets import sorted_prefix_arrays

#: at n >= 3 a group with a leaf of more subset terms than this is solved as a class chain (:mod:`.waterfill`)
#: rather than by Newton on the terms (decode pairs, V = 2000: the slowest n = 3 solve 16 s -> 39 ms, n = 4
#: 0.8 s -> 62 ms); far below the memory limit of :func:`otlp.optimal.coefficients.check_block_size`.
CLASS_CHAIN_TERMS = 100_000


#: how many times a leaf left by a peel may itself be peeled (nested chains, evaluated level by level).
MAX_PEEL_DEPTH = 4


@dataclass
class InstanceSolution:
    """Everything the rule needs for one (p, q, n). Positions are 1-based in ``cuts.order``.

    The blocks of ``cuts`` are the *groups* of the rule (strict priority by the highest-positioned token). A group
    (inner or outer) may be peeled (:mod:`.peeling`): a chain of priority tokens, then the remainder cut into
    sub-blocks. The softmax programs are solved on the *leaves*: leaf j < K is group j itself (or the first
    sub-block of a peeled group), leaves >= K are the further sub-blocks of peeled groups.
    """

    p: np.ndarray  # [V]
    q: np.ndarray  # [V]
    n: int
    cuts: BlockCuts
    position: np.ndarray  # [V] 1-based position of each token in the q/p order
    block_of_position: np.ndarray  # [V + 1] group index of each position (entry 0 unused)
    null_mass: np.ndarray  # [K] Q_s of each group
    targets: np.ndarray  # [V] t_i (p_i in inner blocks; the GR Thm 6.2 vertex in outer blocks)
    log_weight: np.ndarray  # [V] alpha_i; -inf for a token the rule never outputs from its leaf
    row_sums: np.ndarray  # [V] R_i of the rule
    leaf_of_token: np.ndarray = field(default=None)  # [V] leaf index (-1 for a peeled token)
    leaf_null: np.ndarray = field(default=None)  # [L] null mass of each leaf
    leaf_inner: np.ndarray = field(default=None)  # [L] bool
    leaf_group: np.ndarray = field(default=None)  # [L] group of each leaf
    leaf_tokens: dict = field(default_factory=dict)  # leaf -> token ids (q/p order), for leaves of size >= 2
    fire: np.ndarray = field(default=None)  # [V] fire probability per draw (0 unless peeled)
    chain_node: np.ndarray = field(default=None)  # [V] the peel node whose chain holds the token (-1: a leaf token)
    path: np.ndarray = field(default=None)  # [V, D] the peel node at each depth (root = the group; -1 below)
    node_fallback: np.ndarray = field(default=None)  # [nodes] bool: the node's chain is of the fallback kind
    node_depth: np.ndarray = field(default=None)  # [nodes]
    peel_rank: np.ndarray = field(default=None)  # [V] rank in its group's chain (-1 unless peeled)
    chain_error: np.ndarray = field(default=None)  # [K] sum |R - p| over the group's chain tokens
    class_rank: np.ndarray = field(default=None)  # [V] rank in its group's class chain (-1: not a class-chain group)
    class_lam: np.ndarray = field(default=None)  # [V] finite hazard of the class-chain slots above the token
    class_certain: np.ndarray = field(default=None)  # [V] how many of those slots fire for sure (a = 1)
    node_class: np.ndarray = field(default=None)  # [nodes] bool: the group (root node) is one class chain
    node_beta: np.ndarray = field(default=None)  # [nodes] final acceptance of a class chain
    node_hazard: np.ndarray = field(default=None)  # [nodes] total finite hazard of a class chain
    node_certain: np.ndarray = field(default=None)  # [nodes] its number of certain slots
    gradient_norm: np.ndarray = field(default=None)  # [L] ||R - t||_1 per leaf (0 for closed forms)
    iterations: np.ndarray = field(default=None)  # [L] Newton iterations per leaf (0 for closed forms)


def prepare(p: np.ndarray, q: np.ndarray, n: int, peel: bool = True, peel_min: int = 2,
            class_chains: bool = False) -> InstanceSolution:
    """Records, groups, peeling, targets and the closed forms for singleton leaves; leaves of size >= 2 are left
    at 0 for :func:`solve_instances`. Only groups and leaves of at least ``peel_min`` tokens are peeled (the
    batched path leaves small ones to the batched Newton, which is cheaper there). A group becomes one water-filling
    class chain (:mod:`.waterfill`) when, after peeling, it keeps a leaf of more than ``ALL_PAIRS_MAX`` tokens (only
    with ``peel``), or at n >= 3 one of more than ``CLASS_CHAIN_TERMS`` subset terms; ``class_chains=True`` does that
    for every group of two or more tokens."""
    order, psi, ps, qs, prefix_q = sorted_prefix_arrays(p, q, n)  # [V], [V + 1], [V] x 2 in position order, [V + 1]
    cuts = cut_at_records(order, psi)
    V = p.size
    rec = cuts.records
    starts, stops = rec[:-1], rec[1:]  # [K]
    sizes = stops - starts
    K = sizes.size
    null_mass = prefix_q[starts]  # [K]
    block_of_position = np.full(V + 1, -1, dtype=np.int64)  # [V + 1] (entry 0 unused)
    block_of_position[1:] = np.repeat(np.arange(K), sizes)
    position = np.empty(V, dtype=np.int64)
    position[order] = np.arange(1, V + 1)

    # per-position working arrays, as rows of one float and one int block: one scatter maps each to tokens
    fpos = np.zeros((4, V))  # [4, V]
    t_pos, log_w_pos, rows_pos, fire_pos = fpos
    ipos = np.full((3, V), -1, dtype=np.int64)  # [3, V]
    leaf_of_pos, rank_pos, chain_node_pos = ipos  # leaf; rank in its chain; the node whose chain holds it

    # targets: inner t = p; outer t = p except t_{s+1} = p_{s+1} - (psi_e - psi_s)   (note §2 (ii), GR Thm 6.2)
    t_pos[:] = ps
    outer = ~cuts.inner
    t_pos[starts[outer]] -= psi[stops[outer]] - psi[starts[outer]]
    np.maximum(t_pos, 0.0, out=t_pos)

    # leaves: by default leaf j = group j; peeled inner groups replace it by their sub-blocks
    leaf_of_pos[:] = block_of_position[1:]
    leaf_null, leaf_inner, leaf_start, leaf_stop = null_mass.copy(), cuts.inner.copy(), starts.copy(), stops.copy()
    extra: list[list] = []  # [null, inner, group, start, stop] of each leaf >= K (further sub-blocks of peels)

    def set_leaf(lf: int, null: float, inner: bool, start: int, stop: int) -> None:
        if lf < K:
            leaf_null[lf], leaf_inner[lf], leaf_start[lf], leaf_stop[lf] = null, inner, start, stop
        else:
            extra[lf - K][0:2], extra[lf - K][3:5] = (null, inner), (start, stop)

    chain_error = np.zeros(K)
    # peel nodes: node j < K is the root of group j; a peeled leaf of size >= 2 may become a child node, peeled again
    node_fallback = [False] * K
    node_depth = [0] * K
    path_pos = np.full((V, MAX_PEEL_DEPTH + 1), -1, dtype=np.int64)  # [V, D]: node at each depth
    path_pos[:, 0] = block_of_position[1:]

    def visit(node: int, leaf: int, group: int, s: int, e: int, null: float, slack: float, inner: bool,
              depth: int) -> bool:
        """Peel positions [s, e) (a group, or a leaf of a peeled node) as ``node``; recurse into its leaves."""
        cut = peel_group(t_pos[s:e], qs[s:e], null, n, slack, inner)
        if cut is None:
            return False
        chain = s + cut.chain
        fire_pos[chain] = cut.fire
        rank_pos[chain] = np.arange(chain.size)
        rows_pos[chain] = cut.rows
        chain_node_pos[chain] = node
        log_w_pos[chain] = -np.inf
        leaf_of_pos[chain] = -1
        node_fallback[node] = cut.fallback
        chain_error[group] += np.abs(cut.rows - t_pos[chain]).sum()
        inner_here = inner and cut.leaf_inner
        for i, ((a, b), nm, sl) in enumerate(zip(cut.leaves, cut.leaf_null, cut.leaf_slack, strict=True)):
            lf = leaf
            if i > 0:
                lf = K + len(extra)
                extra.append([0.0, False, group, 0, 0])
            set_leaf(lf, float(nm), inner_here, s + a, s + b)
            leaf_of_pos[s + a : s + b] = lf
            if b - a >= max(peel_min, 2) and depth + 1 <= MAX_PEEL_DEPTH:
                child = len(node_fallback)
                node_fallback.append(False)
                node_depth.append(depth + 1)
                path_pos[s + a : s + b, depth + 1] = child
                if not visit(child, lf, group, s + a, s + b, float(nm), float(sl) if inner_here else 0.0,
                             inner_here, depth + 1):
                    node_fallback.pop()  # nothing peeled: no node was added below it
                    node_depth.pop()
                    path_pos[s + a : s + b, depth + 1] = -1
        return True

    if peel and n >= 2:
        for j in np.flatnonzero(sizes >= max(peel_min, 2)):
            s, e = int(starts[j]), int(stops[j])
            inner_j = bool(cuts.inner[j])
            slack = float(psi[s] - psi[e]) if inner_j else 0.0  # c(G) - p(G), stable (suffix form of psi)
            visit(int(j), int(j), int(j), s, e, float(null_mass[j]), slack, inner_j, 0)
    depth_used = 1 + max(node_depth[K:], default=0)  # nodes below the roots are the kept children
    path_pos = path_pos[:, :depth_used]
    node_fallback = np.asarray(node_fallback, dtype=bool)
    leaf_group = np.arange(K)
    if extra:
        null_x, inner_x, group_x, start_x, stop_x = zip(*extra, strict=True)
        leaf_null = np.concatenate([leaf_null, np.asarray(null_x, dtype=np.float64)])
        leaf_inner = np.concatenate([leaf_inner, np.asarray(inner_x, dtype=bool)])
        leaf_group = np.concatenate([leaf_group, np.asarray(group_x, dtype=np.int64)])
        leaf_start = np.concatenate([leaf_start, np.asarray(start_x, dtype=np.int64)])
        leaf_stop = np.concatenate([leaf_stop, np.asarray(stop_x, dtype=np.int64)])
    leaf_size = leaf_stop - leaf_start

    # closed forms (note §2 "Singleton blocks"): outer {m}: output m; inner {m}: accept w.p. p_m / d_m
    single = leaf_size == 1
    m0 = leaf_start[single]  # 0-based position of each singleton leaf
    d = power_gap(leaf_null[single], qs[m0], n)  # (Q0 + q)^n - Q0^n, positive form
    pm = ps[m0]
    inner_single = leaf_inner[single]
    with np.errstate(divide="ignore", invalid="ignore"):
        acc_w = np.log(pm) - np.log(np.maximum(d - pm, 1e-300 * d + 1e-300))
        accept = np.where(d > 0, pm / np.where(d > 0, d, 1.0), 0.0)
    log_w_pos[m0] = np.where(inner_single, np.where(pm > 0, acc_w, -np.inf), 0.0)
    rows_pos[m0] = np.where(inner_single, d * np.minimum(accept, 1.0), d)

    if n == 1:  # only singleton terms: every token is its own closed form even inside a larger block
        multi = np.flatnonzero(~single)
        for j in multi:  # blocks (not tokens); with n = 1 these come only from exact ties in q/p
            m = np.arange(starts[j], stops[j])
            if cuts.inner[j]:
                with np.errstate(divide="ignore"):
                    log_w_pos[m] = np.log(ps[m]) - np.log(np.maximum(qs[m] - ps[m], 1e-300))
                rows_pos[m] = ps[m]
            else:
                rows_pos[m] = qs[m]
        leaf_tokens = {}
    else:
        leaf_tokens = {int(j): order[leaf_start[j] : leaf_start[j] + leaf_size[j]] for j in np.flatnonzero(~single)}
    ftok = np.empty_like(fpos)
    ftok[:, order] = fpos
    itok = np.empty_like(ipos)
    itok[:, order] = ipos
    L = leaf_null.size
    sol = InstanceSolution(
        p=p, q=q, n=n, cuts=cuts, position=position, block_of_position=block_of_position, null_mass=null_mass,
        targets=ftok[0], log_weight=ftok[1], row_sums=ftok[2], leaf_of_token=itok[0], leaf_null=leaf_null,
        leaf_inner=leaf_inner, leaf_group=leaf_group, leaf_tokens=leaf_tokens, fire=ftok[3], peel_rank=itok[1],
        chain_error=chain_error, chain_node=itok[2], path=_to_tokens(path_pos, order), node_fallback=node_fallback,
        node_depth=np.asarray(node_depth, dtype=np.int64),
        class_rank=np.full(V, -1, dtype=np.int64), class_lam=np.zeros(V), class_certain=np.zeros(V),
        node_class=np.zeros(node_fallback.size, bool), node_beta=np.ones(node_fallback.size),
        node_hazard=np.zeros(node_fallback.size), node_certain=np.zeros(node_fallback.size),
        gradient_norm=np.zeros(L), iterations=np.zeros(L, dtype=np.int64),
    )
    if n >= 2:
        if class_chains:
            chained = set(np.flatnonzero(sizes >= 2).tolist())
        else:  # groups keeping a leaf too big for Newton
            chained = {int(sol.leaf_group[leaf]) for leaf, tokens in leaf_tokens.items()
                       if (n >= 3 and subset_terms(len(tokens), n) > CLASS_CHAIN_TERMS)
                       or (peel and len(tokens) > ALL_PAIRS_MAX)}
        for j in sorted(chained):
            use_class_chain(sol, j)
    return sol


def use_class_chain(inst: InstanceSolution, group: int) -> bool:
    """Replace group ``group`` of a prepared instance by its water-filling class chain (:mod:`.waterfill`), in
    place: its chains, leaves and Newton jobs are dropped. False (nothing changed) if a token of the group has q = 0."""
    cuts = inst.cuts
    s, e = int(cuts.records[group]), int(cuts.records[group + 1])
    tokens = cuts.order[s:e]
    q = inst.q[tokens]
    if tokens.size < 2 or inst.n < 2 or q.min() <= 0:
        return False
    t = inst.targets[tokens]
    inner = bool(cuts.inner[group])
    slack = float(cuts.psi[s] - cuts.psi[e]) if inner else 0.0
    chain = class_chain(t, q, float(inst.null_mass[group]), inst.n, slack)
    inst.class_rank[tokens] = chain.rank
    inst.class_lam[tokens] = chain.lam_above
    inst.class_certain[tokens] = chain.certain_above
    inst.node_class[group] = True
    inst.node_beta[group] = chain.beta
    inst.node_hazard[group] = chain.total
    inst.node_certain[group] = chain.total_certain
    inst.chain_node[tokens] = -1
    inst.peel_rank[tokens] = -1
    inst.fire[tokens] = chain.fire
    inst.leaf_of_token[tokens] = -1
    inst.log_weight[tokens] = -np.inf
    inst.path[tokens, 1:] = -1
    inst.row_sums[tokens] = chain.rows
    inst.chain_error[group] = float(np.abs(chain.rows - t).sum())
    for leaf in np.flatnonzero(inst.leaf_group == group):
        inst.leaf_tokens.pop(int(leaf), None)
        inst.gradient_norm[leaf] = 0.0
        inst.iterations[leaf] = 0
    return True


def _to_tokens(values_by_position: np.ndarray, order: np.ndarray) -> np.ndarray:
    out = np.empty_like(values_by_position)
    out[order] = values_by_position
    return out


def solve_instances(instances: list[InstanceSolution], tol_scale: float = 1.0) -> None:
    """Run Newton on every non-singleton block of every instance (in place)."""
    jobs = []  # (instance, leaf, tokens, sigma)
    for inst in instances:
        for j, tokens in inst.leaf_tokens.items():
            jobs.append((inst, j, tokens, 1.0 if inst.leaf_inner[j] else 0.0))
    if not jobs:
        return
    n2 = [job for job in jobs if job[0].n == 2]
    rest = [job for job in jobs if job[0].n != 2]
    if n2:
        buckets: dict[int, list] = {}
        for job in n2:
            size = job[2].size
            buckets.setdefault(int(2 ** np.ceil(np.log2(size))), []).append(job)
        for group in buckets.values():
            _solve_pairwise(group, tol_scale)
    for job in rest:
        _solve_subsets(job, tol_scale)
    # a leaf Newton could not bring to machine precision (weights beyond float64, e.g. psi flat to 1e-13 across
    # the block): its group takes the class chain, which needs no weights
    for inst in {id(job[0]): job[0] for job in jobs}.values():
        failed = np.flatnonzero(inst.gradient_norm > SUCCESS_TOLERANCE)
        for group in np.unique(inst.leaf_group[failed]):
            use_class_chain(inst, int(group))


#: ||R - t||_1 per leaf above which Newton counts as failed (as ``OptimalTransport.success``).
SUCCESS_TOLERANCE = 1e-12


#: below this ||g||_1 (relative to the block's mass) a stalled Newton is at its rounding floor and stops.
STALL_LEVEL = 1e-13


#: absolute ||R - t||_1 at which a block counts as solved whatever its mass.
ABSOLUTE_TOL = 1e-18


def _tolerance(mass: np.ndarray, k: np.ndarray, tol_scale: float) -> np.ndarray:
    # ||g||_1 at about the rounding level of the row sums (note §3: 4e-17 k)
    # floored at ABSOLUTE_TOL: an L1 row-sum error of 1e-18 is far below every exactness check (1e-12) and
    # below the rounding of p itself; blocks of tiny mass otherwise chase a relative floor they cannot reach
    return np.maximum(tol_scale * 4e-17 * np.maximum(k, 1) * np.maximum(mass, 1e-300), ABSOLUTE_TOL)


def _solve_pairwise(group: list, tol_scale: float) -> None:
    nb = len(group)
    K = max(job[2].size for job in group)
    q = np.zeros((nb, K))
    t = np.zeros((nb, K))
    mask = np.zeros((nb, K), dtype=bool)
    null = np.empty(nb)
    sigma = np.empty(nb)
    for b, (inst, j, tokens, sig) in enumerate(group):
        k = tokens.size
        q[b, :k] = inst.q[tokens]
        t[b, :k] = inst.targets[tokens]
        mask[b, :k] = True
        null[b] = inst.leaf_null[j]
        sigma[b] = sig
    ev = PairwiseN2(q, null, t, sigma)
    alpha0 = np.where(mask, initial_alpha(ev.mass, t, sigma > 0), 0.0)
    free = mask.copy()
    sizes = mask.sum(1)
    outer = sigma == 0
    ref = sizes - 1  # outer blocks: alpha of the last token is fixed (softmax shift)
    free[outer, ref[outer]] = False
    alpha0[outer] -= np.where(mask[outer], alpha0[outer, ref[outer]][:, None], 0.0)
    tol = _tolerance(t.sum(1), sizes, tol_scale)
    alpha, gnorm, its = newton(ev, alpha0, free, tol, STALL_LEVEL * t.sum(1))
    rows = ev.row_sums(alpha)
    for b, (inst, j, tokens, _sig) in enumerate(group):
        k = tokens.size
        inst.log_weight[tokens] = alpha[b, :k]
        inst.row_sums[tokens] = rows[b, :k]
        inst.gradient_norm[j] = np.abs(rows[b, :k] - t[b, :k]).sum()
        inst.iterations[j] = its


def _solve_subsets(job: tuple, tol_scale: float) -> None:
    inst, j, tokens, sig = job
    k = tokens.size
    terms = block_terms(inst.q[tokens], float(inst.leaf_null[j]), inst.n)
    t = inst.targets[tokens]
    ev = SubsetTerms(terms, t, sig)
    alpha0 = initial_alpha(ev.mass, t[None], np.array([sig > 0]))
    free = np.ones((1, k), dtype=bool)
    if sig == 0:
        free[0, k - 1] = False
        alpha0 = alpha0 - alpha0[0, k - 1]
    tol = _tolerance(np.array([t.sum()]), np.array([k]), tol_scale)
    alpha, _gnorm, its = newton(ev, alpha0, free, tol, np.array([STALL_LEVEL * t.sum()]))
    rows = ev.row_sums(alpha)[0]
    inst.log_weight[tokens] = alpha[0]
    inst.row_sums[tokens] = rows
    inst.gradient_norm[j] = np.abs(rows - t).sum()
    inst.iterations[j] = its


def solve_iid(p: np.ndarray, q: np.ndarray, n: int) -> InstanceSolution:
    """Prepare and solve one instance."""
    inst = prepare(p, q, n)
    solve_instances([inst])
    return inst
