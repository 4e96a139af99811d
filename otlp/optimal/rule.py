"""The rule pi(· | omega) of the block route, vectorised over tuples (shared by the single and batched paths).

For a drafted tuple omega (design note §2 and :mod:`.peeling`):

1. the group G of the highest-positioned token of omega serves it (strict priority between groups);
2. peeled tokens of G in omega fire in chain order: a draw of chain token j fires with probability a_j, and
   the first fired token (in chain rank) is output. Slot k with token x (first occurrence, c_x draws) is output
   with probability prod_{y before x} (1 - a_y)^{c_y} * (1 - (1 - a_x)^{c_x});
3. if nothing fired (probability prod over peeled draws of (1 - a)), the leaf of the highest-positioned
   non-peeled token of omega in G serves the set U of its non-peeled tokens in that leaf: outer leaf w_i / w(U),
   inner leaf w_i / (1 + w(U)) with the rest rejected; with no such token the tuple is rejected, except in a
   group with a fallback chain, where the last-ranked chain token of omega is output.
"""

from __future__ import annotations

import numpy as np


def evaluate_rule(w: np.ndarray, pos: np.ndarray, group: np.ndarray, leaf: np.ndarray, log_w: np.ndarray,
                  fire: np.ndarray, rank: np.ndarray, leaf_inner: np.ndarray,
                  fallback: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Accept probabilities per slot and the rejection probability.

    ``w, pos, group, leaf, log_w, fire, rank: [M, n]`` are the token ids and the per-token data gathered at
    them (leaf = -1 and rank >= 0 for a peeled token); ``leaf_inner: bool [L]`` (indexed by leaf);
    ``fallback: bool [M, n]`` marks peeled tokens of fallback chains (None: no fallback chains).
    Returns ``(accept [M, n], reject [M])``; a repeated token counts on its first slot only.
    """
    M, n = w.shape
    rows = np.arange(M)
    top = group[rows, pos.argmax(1)]  # [M]
    in_group = group == top[:, None]  # [M, n]
    dup = np.tril(w[:, :, None] == w[:, None, :], -1).any(2)  # [M, n] repeated token
    peeled = in_group & (rank >= 0)
    softmax_slots = in_group & ~peeled
    # the leaf: the one of the highest-positioned non-peeled token of omega in G
    leaf_pos = np.where(softmax_slots, pos, -1)
    has_leaf = softmax_slots.any(1)  # [M]
    top_leaf = np.where(has_leaf, leaf[rows, leaf_pos.argmax(1)], 0)  # [M]
    live = softmax_slots & (leaf == top_leaf[:, None]) & ~dup
    logits = np.where(live, log_w, -np.inf)  # [M, n]
    inner = np.where(has_leaf, leaf_inner[top_leaf], True)  # [M]
    peak = np.maximum(logits.max(1), np.where(inner, 0.0, -np.inf))  # [M]
    peak = np.where(np.isfinite(peak), peak, 0.0)
    ex = np.exp(logits - peak[:, None])  # [M, n]
    slack = np.where(inner, np.exp(-peak), 0.0)  # [M]
    z = ex.sum(1) + slack
    accept = ex / z[:, None]
    reject = slack / z
    if peeled.any():
        keep = np.where(peeled, 1.0 - fire, 1.0)  # [M, n]: per draw, the chance it does not fire
        r = np.where(peeled, rank, -1)
        before = r[:, None, :] < r[:, :, None]  # [M, k, l]: slot l fires earlier in the chain than slot k
        same = w[:, :, None] == w[:, None, :]
        ahead = np.where(before, keep[:, None, :], 1.0).prod(2)  # [M, n]
        own = np.where(same, keep[:, None, :], 1.0).prod(2)  # [M, n]: (1 - a_x)^{c_x}
        chain = np.where(peeled & ~dup, ahead * (1.0 - own), 0.0)
        survive = keep.prod(1)  # [M]
        if fallback is not None:  # no fire, no leaf token: the last-ranked chain token of a fallback group
            back = peeled & ~dup & fallback & ~has_leaf[:, None]  # [M, n]
            last = np.where(back, rank, -1)
            pick = back & (last == last.max(1, keepdims=True))  # [M, n]: one slot (first occurrences only)
            taken = pick.any(1)  # [M]
            accept = np.where(taken[:, None], pick.astype(accept.dtype), accept)
            reject = np.where(taken, 0.0, reject)
        accept = chain + survive[:, None] * accept
        reject = survive * reject
    return accept, reject
