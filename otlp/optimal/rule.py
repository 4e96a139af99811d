"""The rule pi(· | omega) of the block route, vectorised over tuples (shared by the single and batched paths).

For a drafted tuple omega (design note §2 and :mod:`.peeling`), starting at the root node of the group G of the
highest-positioned token of omega (strict priority between groups), at each peel node c:

1. the chain tokens of c in omega fire in chain order: a draw of chain token j fires with probability a_j, and
   the first fired token (in chain rank) is output. Slot k with token x (first occurrence, c_x draws) is output
   with probability prod_{y before x} (1 - a_y)^{c_y} * (1 - (1 - a_x)^{c_x});
2. if nothing fired, the tokens of omega in c's remainder decide: with none, a fallback chain outputs its
   last-ranked drafted token and a fire chain rejects; otherwise the highest-positioned of them leads to the
   child it lies in: a peeled child is the next node (step 1 again), a leaf serves the set U of omega's tokens
   in it: outer leaf w_i / w(U), inner leaf w_i / (1 + w(U)) with the rest rejected.

An unpeeled group is a root node with an empty chain and one leaf. The loop runs over the nesting depth (at
most ``MAX_PEEL_DEPTH + 1`` levels), never over tokens. A group solved as one water-filling class chain
(:mod:`.waterfill`) is evaluated by :func:`class_chain_rule` instead.
"""

from __future__ import annotations

import numpy as np


def _first_occurrence(same: np.ndarray) -> np.ndarray:
    """``same [M, n, n]`` (w_k == w_l) -> ``bool [M, n]``: slot k holds the first occurrence of its token, i.e. the
    first l with w_l == w_k (argmax of a bool row; same[k, k] holds, so it is at most k) is k itself."""
    return same.argmax(2) == np.arange(same.shape[-1])


def evaluate_rule(w: np.ndarray, pos: np.ndarray, path: np.ndarray, chain_node: np.ndarray, leaf: np.ndarray,
                  log_w: np.ndarray, fire: np.ndarray, rank: np.ndarray, leaf_inner: np.ndarray,
                  node_fallback: np.ndarray, class_data: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Accept probabilities per slot and the rejection probability.

    ``w, pos, chain_node, leaf, log_w, fire, rank: [M, n]`` are the token ids and the per-token data gathered at
    them (leaf = -1 for a chain token, chain_node = -1 for a leaf token); ``path: [M, n, D]`` the peel node of
    each token at each depth (depth 0: the root node of its group, ids unique across groups; -1 below the
    token's deepest node); ``leaf_inner: bool [L]`` by leaf, ``node_fallback: bool [nodes]`` by node.
    ``class_data = (class_rank, class_lam, class_certain [M, n], node_class, node_beta, node_hazard, node_certain
    [nodes])`` for instances with class-chain groups (None: none; :func:`class_chain_rule` for their meaning).
    Returns ``(accept [M, n], reject [M])``; a repeated token counts on its first slot only.
    """
    M, n = w.shape
    D = path.shape[2]
    rows = np.arange(M)
    root = path[rows, pos.argmax(1), 0]  # [M]: the root node of the top group
    in_group = path[:, :, 0] == root[:, None]  # [M, n]
    cls = None
    if class_data is not None:  # tuples served by a class-chain group
        class_rank, class_lam, class_certain, node_class, node_beta, node_hazard, node_certain = class_data
        cls = node_class[root]  # [M]
        if cls.any():
            acc_c, rej_c = class_chain_rule(w, in_group & cls[:, None], class_rank, class_lam, class_certain,
                                            node_beta[root], node_hazard[root], node_certain[root])
            if cls.all():
                return acc_c, rej_c
    current = root
    same = w[:, :, None] == w[:, None, :]  # [M, n, n]
    first = _first_occurrence(same)  # [M, n]
    alive = np.ones(M)  # probability that no decision was taken yet
    active = np.ones(M, dtype=bool)
    accept = np.zeros((M, n))
    reject = np.zeros(M)
    for d in range(D):
        # slots in the node's subtree (node ids are unique across groups, so this implies in_group)
        mine = (path[:, :, d] == current[:, None]) & active[:, None]
        chain = mine & (chain_node == current[:, None])  # [M, n]
        if chain.any():
            keep = np.where(chain, 1.0 - fire, 1.0)  # [M, n]: per draw, the chance it does not fire
            r = np.where(chain, rank, -1)
            before = r[:, None, :] < r[:, :, None]  # [M, k, l]: slot l fires earlier in the chain than slot k
            ahead = np.where(before, keep[:, None, :], 1.0).prod(2)  # [M, n]
            own = np.where(same, keep[:, None, :], 1.0).prod(2)  # [M, n]: (1 - a_x)^{c_x}
            accept += alive[:, None] * np.where(chain & first, ahead * (1.0 - own), 0.0)
            alive = alive * keep.prod(1)
        cand = mine & ~chain
        stop = active & ~cand.any(1)  # nothing of the remainder drafted: fallback or reject
        if stop.any():
            back = chain & first & (stop & node_fallback[np.maximum(current, 0)])[:, None]
            last = np.where(back, rank, -1)
            pick = back & (last == last.max(1, keepdims=True))  # [M, n]: one slot at most
            taken = pick.any(1)
            accept += np.where(pick, alive[:, None], 0.0)
            reject += np.where(stop & ~taken, alive, 0.0)
            active &= ~stop
        if not active.any():
            break
        top = np.where(cand, pos, -1).argmax(1)  # [M]: slot of the highest-positioned remainder token
        child = path[rows, top, d + 1] if d + 1 < D else np.full(M, -1)
        to_leaf = active & (child < 0)
        if to_leaf.any():
            top_leaf = np.where(to_leaf, leaf[rows, top], 0)  # [M]
            live = cand & to_leaf[:, None] & first & (leaf == top_leaf[:, None])
            logits = np.where(live, log_w, -np.inf)  # [M, n]
            inner = leaf_inner[top_leaf]  # [M]
            peak = np.maximum(logits.max(1), np.where(inner, 0.0, -np.inf))
            peak = np.where(np.isfinite(peak), peak, 0.0)
            ex = np.exp(logits - peak[:, None])  # [M, n]
            slack = np.where(inner, np.exp(-peak), 0.0)  # [M]
            z = ex.sum(1) + slack
            z = np.where(z > 0, z, 1.0)
            accept += np.where(to_leaf[:, None], alive[:, None] * ex / z[:, None], 0.0)
            reject += np.where(to_leaf, alive * slack / z, 0.0)
            active &= ~to_leaf
            if not active.any():
                break
        current = np.where(active, child, current)
    if cls is not None and cls.any():
        accept = np.where(cls[:, None], acc_c, accept)
        reject = np.where(cls, rej_c, reject)
    return accept, reject


def class_chain_rule(w: np.ndarray, in_group: np.ndarray, class_rank: np.ndarray, class_lam: np.ndarray,
                     class_certain: np.ndarray, beta: np.ndarray, total: np.ndarray,
                     total_certain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The water-filling class chain on tuples (:mod:`.waterfill`): ``w, in_group, class_rank: [M, n]`` (the
    group's draws and their ranks by ratio), ``class_lam, class_certain: [M, n]`` (finite hazard and number of
    certain slots above each draw), ``beta, total, total_certain: [M]``.

    With the group's draws sorted by rank d_1 >= ... >= d_c, piece k holds the top k draws with hazard
    h_k = Lambda(d_{k+1} + 1) - Lambda(d_k + 1) (Lambda(d_{c+1} + 1) = total; infinite if the piece holds a
    certain slot) and fires with probability reach_k (1 - e^{-k h_k}), shared equally; what is left gives each
    draw beta / c and rejects 1 - beta. Returns ``(accept [M, n], reject [M])`` with a repeated token's draws
    summed on its first slot.
    """
    M, n = w.shape
    key = np.where(in_group, class_rank, -1)
    order = np.argsort(-key, axis=1, kind="stable")  # [M, n]: the group's draws by rank, descending, then the rest
    c = in_group.sum(1)  # [M]
    valid = np.arange(1, n + 1)[None, :] <= c[:, None]  # [M, n]: sorted position k is a group draw
    hazard = []
    for per_token, whole in ((class_lam, total), (class_certain, total_certain)):
        at = np.where(valid, np.take_along_axis(per_token, order, axis=1), whole[:, None])  # Lambda(d_k + 1)
        nxt = np.concatenate([at[:, 1:], whole[:, None]], axis=1)  # Lambda(d_{k+1} + 1)
        hazard.append(np.where(valid, np.maximum(nxt - at, 0.0), 0.0))
    h = np.where(hazard[1] > 0, np.inf, hazard[0])  # [M, n]
    per_draw = np.zeros((M, n))  # by sorted position
    log_reach = np.zeros(M)
    for k in range(1, n + 1):  # loop over the n pieces, not tokens
        hk = h[:, k - 1]
        fired = np.exp(log_reach) * -np.expm1(-k * hk)  # [M]
        per_draw[:, :k] += (fired / k)[:, None]
        log_reach = log_reach - k * hk
    left = np.exp(log_reach)  # [M]
    per_draw += np.where(valid, (left * beta / np.maximum(c, 1))[:, None], 0.0)
    per_draw = np.where(valid, per_draw, 0.0)
    slot = np.zeros((M, n))
    np.put_along_axis(slot, order, per_draw, axis=1)  # [M, n] by slot
    same = w[:, :, None] == w[:, None, :]
    first = _first_occurrence(same)
    accept = np.where(first, (same * slot[:, None, :]).sum(2), 0.0)
    reject = np.where(c > 0, left * (1.0 - beta), 1.0)
    return accept, reject
