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
most ``MAX_PEEL_DEPTH + 1`` levels), never over tokens.
"""

from __future__ import annotations

import numpy as np


def evaluate_rule(w: np.ndarray, pos: np.ndarray, path: np.ndarray, chain_node: np.ndarray, leaf: np.ndarray,
                  log_w: np.ndarray, fire: np.ndarray, rank: np.ndarray, leaf_inner: np.ndarray,
                  node_fallback: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Accept probabilities per slot and the rejection probability.

    ``w, pos, chain_node, leaf, log_w, fire, rank: [M, n]`` are the token ids and the per-token data gathered at
    them (leaf = -1 for a chain token, chain_node = -1 for a leaf token); ``path: [M, n, D]`` the peel node of
    each token at each depth (depth 0: the root node of its group, ids unique across groups; -1 below the
    token's deepest node); ``leaf_inner: bool [L]`` by leaf, ``node_fallback: bool [nodes]`` by node.
    Returns ``(accept [M, n], reject [M])``; a repeated token counts on its first slot only.
    """
    M, n = w.shape
    D = path.shape[2]
    rows = np.arange(M)
    current = path[rows, pos.argmax(1), 0]  # [M]: the root node of the top group
    in_group = path[:, :, 0] == current[:, None]  # [M, n]
    first = ~np.tril(w[:, :, None] == w[:, None, :], -1).any(2)  # [M, n] first occurrence of its token
    same = w[:, :, None] == w[:, None, :]  # [M, n, n]
    alive = np.ones(M)  # probability that no decision was taken yet
    active = np.ones(M, dtype=bool)
    accept = np.zeros((M, n))
    reject = np.zeros(M)
    for d in range(D):
        mine = in_group & (path[:, :, d] == current[:, None]) & active[:, None]  # slots in the node's subtree
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
        current = np.where(active, child, current)
    return accept, reject
