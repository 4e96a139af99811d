"""Exact block efficiency of the multi-draft token tree with any single-step rule at its nodes (issue 18).

K i.i.d. drafted paths of L tokens form a token tree; the walk starts at the root with all K paths. At a node
a_{1:i} carrying m paths, their next tokens are m i.i.d. draws from q(. | a_{1:i}) (an ordered tuple omega) and the
node's rule outputs y ~ pi(. | omega) built for (p(. | a_{1:i}), q(. | a_{1:i}), m). If y is one of the drafted
tokens, the walk moves to node a_{1:i} y with the count_y(omega) paths that drafted it (also when y came from the
rule's residual: the loop of otlp.decode does the same); otherwise y is the correction and the block ends. After L
accepted tokens a bonus token follows. So E[tau + 1] = 1 + sum over nodes of depth 1..L of P(the walk reaches them),
computed by a forward recursion over (node, m) with every drafted tuple enumerated (V^m of them: small tables).

``rule(p, q, m)`` is any object with ``slices(omegas [M, m]) -> [M, V]`` (pi(. | omega) by tuple). ``RULES``
names two: the class-chain plan of ``optimal`` (:mod:`.chains`) and the path-aware plan of ``optimal_paths``
(:mod:`.paths`: ``TwoDraftPaths`` at m = 2, ``PathAwareTransport`` above); with RRS at
every node the recursion reproduces ``otlp.multistep.token_tree_output_law`` (tests/optimal/test_tree_law.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from otlp.core.drafts import IID


def _class_chains(p: np.ndarray, q: np.ndarray, m: int) -> object:
    from otlp.optimal import OptimalTransport

    return OptimalTransport.from_arrays(p, q, m)


def _paths(p: np.ndarray, q: np.ndarray, m: int) -> object:
    """The plan of the verifier ``optimal_paths``: the closed-form pair rule at m = 2, else the windowed LP."""
    from otlp.optimal.paths import PathAwareTransport, TwoDraftPaths

    return TwoDraftPaths(p, q) if m == 2 else PathAwareTransport(p, q, m)


#: rule name -> factory (p, q, m) -> object with slices(omegas)
RULES: dict[str, Callable[[np.ndarray, np.ndarray, int], object]] = {
    "class_chains": _class_chains,
    "paths": _paths,
}


def tree_reach(target: object, draft: object, L: int, K: int,
               rule: str | Callable[[np.ndarray, np.ndarray, int], object]) -> np.ndarray:
    """``reach [num_nodes(V, L), K + 1]``: P(the walk reaches node a with m paths through it), for ARModel tables
    ``target`` (depth >= L) and ``draft`` (depth >= L - 1); ``rule`` a name of ``RULES`` or a factory."""
    from otlp.multistep.armodel import depth_offsets, num_nodes
    from otlp.multistep.efficiency import _check_pair, check_K

    _check_pair(target, draft, L)
    K = check_K(K)
    make = RULES[rule] if isinstance(rule, str) else rule
    V = target.V
    off = depth_offsets(V, L)
    reach = np.zeros((num_nodes(V, L), K + 1))  # [nodes, m]
    reach[0, K] = 1.0
    for node in range(int(off[L])):  # internal nodes, parents before children
        if not reach[node, 1:].any():
            continue
        p = np.asarray(target.conditionals[node], dtype=np.float64)
        q = np.asarray(draft.conditionals[node], dtype=np.float64)
        children = node * V + 1 + np.arange(V)
        for m in range(1, K + 1):
            r = reach[node, m]
            if r == 0.0:
                continue
            omegas, probs = IID(q, m).support()  # [M, m], [M]
            law = make(p, q, m).slices(omegas)  # [M, V]
            counts = np.zeros((omegas.shape[0], V), dtype=np.int64)  # [M, V] multiplicity of each token
            np.add.at(counts, (np.repeat(np.arange(omegas.shape[0]), m), omegas.ravel()), 1)
            for c in range(1, m + 1):  # the walk continues with c paths into the children drafted c times
                reach[children, c] += r * (probs @ np.where(counts == c, law, 0.0))
    return reach


def tree_efficiency(target: object, draft: object, L: int, K: int,
                    rule: str | Callable[[np.ndarray, np.ndarray, int], object]) -> float:
    """E[tau + 1] of the token tree with ``rule`` at every node (module docstring)."""
    reach = tree_reach(target, draft, L, K, rule)
    return float(1.0 + reach[1:, 1:].sum())


__all__ = ["RULES", "tree_efficiency", "tree_reach"]
