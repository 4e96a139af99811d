"""Autoregressive table models: explicit conditionals p(. | a_{1:i}) over a small vocabulary.

The prefixes a_{1:i} of V^{<=depth} are the nodes of the complete V-ary tree, numbered breadth first:
the root (empty prefix) is node 0 and the child of node ``n`` by token ``x`` is node ``n * V + 1 + x``,
so the nodes of depth i are ``offset(i) .. offset(i+1) - 1`` with ``offset(i) = (V^i - 1) / (V - 1)``
and a prefix's index inside its depth is its base-V number (first token most significant).

Notation follows the GBV paper (papers/002, Eq. 1): joint ("next-k-token") probabilities are products
of conditionals, p(a_{1:k}) = prod_{i<=k} p(a_i | a_{1:i-1}); on V^{<=L} they are prefix marginals.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from otlp.core.errors import InputError, ModelTooLargeError

if TYPE_CHECKING:  # torch is imported where a tensor is made: the numpy model (and MultiPathLP) need no torch
    import torch

MAX_NODES = 5_000_000  # tables of more nodes than this are refused before allocation


def depth_offsets(V: int, depth: int) -> np.ndarray:
    """offset(i) for i = 0..depth+1: the index of the first node of depth i.  # [depth + 2]"""
    counts = np.array([V**i for i in range(depth + 1)], dtype=np.int64)
    return np.concatenate([[0], np.cumsum(counts)])


def num_nodes(V: int, depth: int) -> int:
    """|V^{<=depth}|, the number of prefixes of length 0..depth."""
    return int(sum(V**i for i in range(depth + 1)))


def check_table_size(V: int, depth: int) -> None:
    """Refuse an ARModel table of V^0 + ... + V^depth rows of V entries above ``MAX_NODES`` entries, before
    anything is allocated or counted: the size is compared in logarithms first, so a huge depth costs nothing."""
    if V < 1 or depth < 0:
        raise InputError(f"an ARModel needs V >= 1 and depth >= 0, got V = {V}, depth = {depth}")
    log_entries = (depth + 1) * math.log(V)  # V^(depth+1) <= entries = V * num_nodes < 2 V^(depth+1)
    if log_entries <= math.log(MAX_NODES) + 1e-9:  # small: count exactly (V^(depth+1) <= ~5e6)
        entries = depth + 1 if V == 1 else V * num_nodes(V, depth)
        if entries <= MAX_NODES:
            return
        size = 8.0 * entries
    else:
        size = 8 * math.exp(min(log_entries, 700.0))
    raise ModelTooLargeError(f"an ARModel with V={V}, depth={depth}", size, MAX_NODES * 8,
                             hint="its table has V^0 + ... + V^depth rows of V probabilities: use a smaller V or "
                                  "depth (L)")


def node_depths(V: int, depth: int) -> np.ndarray:
    """Depth of every node of V^{<=depth}.  # [num_nodes]"""
    return np.repeat(np.arange(depth + 1), [V**i for i in range(depth + 1)])


def node_parents(V: int, depth: int) -> np.ndarray:
    """Parent of every node (-1 for the root).  # [num_nodes]"""
    idx = np.arange(num_nodes(V, depth))
    return np.where(idx > 0, (idx - 1) // V, -1)


def node_last_tokens(V: int, depth: int) -> np.ndarray:
    """Last token a_i of every node a_{1:i} (-1 for the root).  # [num_nodes]"""
    idx = np.arange(num_nodes(V, depth))
    return np.where(idx > 0, (idx - 1) % V, -1)


def prefix_nodes(tokens: torch.Tensor, V: int) -> torch.Tensor:
    """Node index of every prefix a_{1:i}, i = 0..L, of each path.

    tokens: int64 [..., L] -> int64 [..., L + 1] (column i is the node of a_{1:i}; column 0 is the root).
    """
    import torch

    nodes = [torch.zeros(tokens.shape[:-1], dtype=torch.int64, device=tokens.device)]
    for i in range(tokens.shape[-1]):  # L steps, vectorised over the batch
        nodes.append(nodes[-1] * V + 1 + tokens[..., i])
    return torch.stack(nodes, dim=-1)


def all_paths(V: int, L: int) -> np.ndarray:
    """Every path of V^L in lexicographic order (row r is r written in base V).  # [V^L, L]"""
    r = np.arange(V**L)
    return np.stack([(r // V ** (L - 1 - i)) % V for i in range(L)], axis=1).astype(np.int64)


def categorical(probs: torch.Tensor, generator: torch.Generator | None, u: torch.Tensor | None = None
                ) -> torch.Tensor:
    """One draw per row by inverse CDF; ``probs`` [..., V] need not be normalised.  -> int64 [...]

    One uniform per row, so a seeded generator gives the same draws on every run; ``u [...]`` in [0, 1): the
    caller's uniforms instead (cast to ``probs``' dtype, as the generator's are drawn).
    """
    import torch

    cdf = probs.cumsum(-1)  # [..., V]
    if u is None:
        u = torch.rand(probs.shape[:-1], generator=generator, dtype=probs.dtype, device=probs.device)
    u = u.to(probs.dtype) * cdf[..., -1]
    idx = torch.searchsorted(cdf, u.unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp_(max=probs.shape[-1] - 1)


class ARModel:
    """An autoregressive model given by explicit conditional tables over V^{<=depth}.

    Parameters
    ----------
    conditionals : array [num_nodes(V, depth), V]; row n is p(. | prefix of node n) (see the module doc).
    V : vocabulary size (>= 2).
    name : a label for reports.

    ``depth`` is inferred from the number of rows: the model defines the law of sequences of length
    ``depth + 1``.  A block of L drafted tokens needs a draft of depth >= L - 1 and a target of depth >= L.
    """

    def __init__(self, conditionals: np.ndarray, V: int, name: str = "model"):
        cond = np.asarray(conditionals, dtype=np.float64)
        if isinstance(V, bool) or not isinstance(V, (int, np.integer)) or V < 2:
            raise InputError(f"V must be an integer >= 2 (the vocabulary size), got {V!r}")
        V = int(V)
        if cond.ndim != 2 or cond.shape[1] != V:
            raise InputError(f"{name}: conditionals must have shape [num_nodes, V={V}], got {cond.shape}")
        depth = 0
        while num_nodes(V, depth) < cond.shape[0]:
            depth += 1
        if num_nodes(V, depth) != cond.shape[0]:
            raise InputError(
                f"{name}: {cond.shape[0]} rows is not |V^(<=d)| for any depth d with V={V} "
                f"(expected one of {[num_nodes(V, d) for d in range(depth + 1)]})"
            )
        if not np.all(np.isfinite(cond)) or np.any(cond < 0):
            raise InputError(f"{name}: conditionals must be finite and >= 0")
        bad = np.flatnonzero(np.abs(cond.sum(1) - 1.0) > 1e-9)
        if bad.size:
            raise InputError(
                f"{name}: row {int(bad[0])} of the conditionals sums to {cond[bad[0]].sum()!r}, expected 1"
            )
        self.conditionals = cond  # [num_nodes, V]
        self.V = V
        self.depth = depth
        self.name = name

    def __repr__(self) -> str:
        return f"ARModel(name={self.name!r}, V={self.V}, depth={self.depth})"

    def require_depth(self, depth: int, role: str) -> None:
        if self.depth < depth:
            raise InputError(f"{role} {self.name!r} has tables to depth {self.depth}; depth {depth} is needed")

    def prefix_probabilities(self, L: int) -> np.ndarray:
        """Joint probability p(a_{1:i}) of every node of V^{<=L} (Eq. 1).  # [num_nodes(V, L)]"""
        self.require_depth(L - 1, "model")
        off = depth_offsets(self.V, L)
        out = np.empty(num_nodes(self.V, L))
        out[0] = 1.0
        for i in range(L):  # one vectorised step per depth
            parents = slice(off[i], off[i + 1])
            out[off[i + 1] : off[i + 2]] = (out[parents, None] * self.conditionals[parents]).ravel()
        return out

    def on_path(self, tokens: torch.Tensor, steps: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The conditionals at the prefixes a_{1:i}, i = 0..steps-1, of each path.

        tokens: int64 [..., L] with L >= steps - 1 -> [..., steps, V] in ``dtype`` (default float64).
        """
        import torch

        dtype = torch.float64 if dtype is None else dtype
        self.require_depth(steps - 1, "model")
        nodes = prefix_nodes(tokens[..., : steps - 1], self.V)  # [..., steps]
        table = torch.as_tensor(self.conditionals, dtype=dtype, device=tokens.device)
        return table[nodes]

    def sample_paths(self, L: int, size: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        """Draw paths a_{1:L} ~ the model, autoregressively.  -> int64 [*size, L]"""
        import torch

        self.require_depth(L - 1, "model")
        table = torch.as_tensor(self.conditionals)
        node = torch.zeros(size, dtype=torch.int64)
        tokens = []
        for _ in range(L):  # L sequential draft steps, vectorised over all paths
            x = categorical(table[node], generator)
            tokens.append(x)
            node = node * self.V + 1 + x
        return torch.stack(tokens, dim=-1)


def random_ar_model(
    V: int, depth: int, rng: np.random.Generator, concentration: float = 1.0, name: str = "random"
) -> ARModel:
    """Every conditional drawn i.i.d. from Dirichlet(concentration * 1_V) (strictly positive a.s.)."""
    check_table_size(V, depth)
    n = num_nodes(V, depth)
    cond = rng.dirichlet(np.full(V, float(concentration)), size=n)
    cond = np.maximum(cond, 1e-12)
    return ARModel(cond / cond.sum(1, keepdims=True), V, name=name)


def random_pair(
    V: int, L: int, rng: np.random.Generator, concentration: float = 1.0, closeness: float = 0.0
) -> tuple[ARModel, ARModel]:
    """A random (target of depth L, draft of depth L) pair.

    ``closeness`` in [0, 1) mixes the draft towards the target: q = closeness * p + (1 - closeness) * q0,
    mimicking a draft distilled from the target (0: independent draws).
    """
    if not 0.0 <= closeness < 1.0:
        raise InputError(f"closeness must be in [0, 1), got {closeness}")
    target = random_ar_model(V, L, rng, concentration, name="target")
    draft = random_ar_model(V, L, rng, concentration, name="draft")
    if closeness:
        draft = ARModel(closeness * target.conditionals + (1 - closeness) * draft.conditionals, V, name="draft")
    return target, draft


def markov_ar_model(initial: np.ndarray, transition: np.ndarray, depth: int, name: str = "markov") -> ARModel:
    """A bigram (first-order Markov) model unrolled to a table: p(. | a_{1:i}) = transition[a_i] (initial at i=0).

    This is how an n-gram decode-loop model becomes an explicit ARModel for exact evaluation.
    initial: [V]; transition: [V, V] (rows sum to 1).
    """
    transition = np.asarray(transition, dtype=np.float64)
    V = transition.shape[0]
    last = node_last_tokens(V, depth)
    rows = np.where(last[:, None] < 0, np.asarray(initial, dtype=np.float64)[None, :], transition[last])
    return ARModel(rows, V, name=name)


def tempered(model: ARModel, temperature: float, name: str | None = None) -> ARModel:
    """The same model at another temperature: p_T(x | .) proportional to p(x | .)^(1 / T)."""
    if temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature}")
    logits = np.log(np.maximum(model.conditionals, 1e-300)) / temperature
    logits -= logits.max(1, keepdims=True)
    rows = np.exp(logits)
    return ARModel(rows / rows.sum(1, keepdims=True), model.V, name=name or f"{model.name}@T={temperature}")
