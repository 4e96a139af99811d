"""Batched exact OT: many (p, q) pairs with the same V and n solved together (one drafted tuple per row).

By default every group of every row is a water-filling class chain computed on ``[B, V]`` arrays
(:mod:`.chains`): no per-pair Python work (a row's :class:`OptimalTransport` is built only when indexed),
about 6x less time per pair than looping over :class:`OptimalTransport` (itself the scalar class chains at this
size) at B = 64, V = 100, n = 2 (benchmarks/solve_times.py).
``method="blocks"`` pools the rows' block programs instead: peeling per row (blocks of at least ``BATCH_PEEL_MIN``
tokens at n = 2) and one batched Newton per size bucket.
:class:`TransportBatch` then evaluates or samples the rule for one tuple per row, vectorised.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from otlp.distributions import check_n, check_token_tuples
from otlp.errors import InputError
from otlp.formulations.completion import residual_law
from otlp.optimal import chains
from otlp.optimal.rule import evaluate_rule
from otlp.optimal.solve import prepare, solve_instances
from otlp.optimal.transport import OptimalTransport, truncate_top_k

#: ``method="blocks"`` at n = 2 peels only groups (and leaves) of at least this many tokens: smaller ones cost less
#: in the pooled Newton than in a per-group peel search (B = 64, V = 100, n = 2: 1.08 -> 0.81 ms per pair).
BATCH_PEEL_MIN = 33


class TransportBatch(Sequence):
    """B solved instances (a sequence of :class:`OptimalTransport`) plus row-wise vectorised rule evaluation."""

    def __init__(self, transports: list[OptimalTransport]):
        self._items = list(transports)
        if not self._items:
            raise InputError("an empty batch")
        self.n = self._items[0].n
        self.V = self._items[0].V
        B = len(self._items)
        self.alpha = np.array([t.alpha for t in self._items])  # [B]
        self._log_w = np.stack([t._log_w for t in self._items])  # [B, V]
        self._position = np.stack([t._position for t in self._items])  # [B, V]
        nleaves = np.array([t._leaf_inner.size for t in self._items])
        offsets = np.concatenate([[0], np.cumsum(nleaves)[:-1]])
        leaf = np.stack([t._leaf for t in self._items])  # [B, V]
        self._leaf = np.where(leaf >= 0, leaf + offsets[:, None], -1)  # global leaf ids
        self._leaf_inner = np.concatenate([t._leaf_inner for t in self._items])
        self._fire = np.stack([t._fire for t in self._items])  # [B, V]
        self._rank = np.stack([t._rank for t in self._items])  # [B, V]
        nnodes = np.array([t._node_fallback.size for t in self._items])
        node_off = np.concatenate([[0], np.cumsum(nnodes)[:-1]])  # [B]: global node ids
        self._node_fallback = np.concatenate([t._node_fallback for t in self._items])
        # class chains: per token [B, V] (rank, finite hazard above, certain slots above), per node (concatenated)
        self._class_tokens = [np.stack([t._class[i] for t in self._items]) for i in range(3)]
        self._class_nodes = [np.concatenate([t._class[i] for t in self._items]) for i in range(3, 7)]
        chain_node = np.stack([t._chain_node for t in self._items])  # [B, V]
        self._chain_node = np.where(chain_node >= 0, chain_node + node_off[:, None], -1)
        D = max(t._path.shape[1] for t in self._items)
        path = np.full((B, self.V, D), -1, dtype=np.int64)  # [B, V, D]
        for b, t in enumerate(self._items):
            path[b, :, : t._path.shape[1]] = t._path
        self._path = np.where(path >= 0, path + node_off[:, None, None], -1)
        self.residual = np.stack([t.residual for t in self._items])  # [B, V]
        self._rows = np.arange(B)

    @classmethod
    def _from_chains(cls, ch: chains.Chains, P: np.ndarray, Q: np.ndarray) -> TransportBatch:
        """The batch of :func:`.chains.build`; a row's :class:`OptimalTransport` is built only when indexed."""
        self = cls.__new__(cls)
        B, V = P.shape
        self.n, self.V = ch.pre.n, V
        self._chains, self._P, self._Q, self._items = ch, P, Q, [None] * B
        self._rows = np.arange(B)
        self.alpha = np.asarray(ch.pre.alpha)  # [B]
        r = np.zeros((B, V))
        np.put_along_axis(r, ch.pre.order, ch.residual, axis=1)  # by token
        self.residual = residual_law(r, P)  # [B, V]
        return self

    @cached_property
    def _residual_cdf(self) -> np.ndarray:
        """``[B, V]`` cumulative residual per row, for drawing rejected outputs (built on the first :meth:`sample`)."""
        return np.cumsum(self.residual, axis=1)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - Sequence protocol
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        item = self._items[i]  # IndexError past the end, as a list
        if item is None:
            b = range(len(self))[i]
            item = self._items[i] = OptimalTransport.from_arrays(self._P[b], self._Q[b], self.n,
                                                                 method="class_chains")
        return item

    def rule(self, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``omegas int [B, n]`` (one tuple per row) -> ``(accept [B, n], reject [B])``, as OptimalTransport.rule."""
        w = check_token_tuples(omegas, self.n, self.V, rows=len(self))  # [B, n]
        if self.__dict__.get("_chains") is not None:
            return chains.evaluate(self._chains, w)
        r = self._rows[:, None]
        class_data = None
        if self._class_nodes[0].any():
            class_data = (*(x[r, w] for x in self._class_tokens), *self._class_nodes)
        return evaluate_rule(w, self._position[r, w], self._path[r, w], self._chain_node[r, w], self._leaf[r, w],
                             self._log_w[r, w], self._fire[r, w], self._rank[r, w], self._leaf_inner,
                             self._node_fallback, class_data)

    def slices(self, omegas: np.ndarray) -> np.ndarray:
        """pi(· | omega_b) for one tuple per row: ``[B, n]`` -> ``float [B, V]``."""
        w = check_token_tuples(omegas, self.n, self.V, rows=len(self))
        accept, reject = self.rule(w)
        out = reject[:, None] * self.residual
        np.add.at(out, (np.repeat(self._rows, self.n), w.ravel()), accept.ravel())
        return out

    def sample(self, omegas: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One output token per row: ``[B, n]`` -> ``int64 [B]``."""
        w = check_token_tuples(omegas, self.n, self.V, rows=len(self))
        accept, reject = self.rule(w)
        u = rng.random(len(self))
        slot = (u[:, None] >= np.cumsum(accept, axis=1)).sum(1)
        out = w[self._rows, np.minimum(slot, self.n - 1)]
        rejected = np.flatnonzero(slot >= self.n)
        if rejected.size:
            cdf = self._residual_cdf[rejected]  # [R, V]
            v = rng.random(rejected.size) * cdf[:, -1]
            out[rejected] = np.minimum((v[:, None] >= cdf).sum(1), self.V - 1)
        return out


def solve_batch(p: np.ndarray, q: np.ndarray, n: int, *, top_k: int | None = None,
                method: str = "class_chains") -> TransportBatch:
    """The exact optimal rule for ``p[b], IID(q[b], n)`` for every row b at once.

    ``p, q: float [B, V]`` (each row a distribution). ``method="class_chains"`` (default) makes every group of every
    row a water-filling class chain, vectorised over the whole batch (:mod:`.chains`; at n = 1 every group is a
    single token or a tie, and the chain is classic speculative sampling);
    ``"blocks"`` solves each row's peeled softmax blocks (pooled Newton; at n = 2 groups under ``BATCH_PEEL_MIN``
    tokens stay unpeeled, so its plan can differ from ``OptimalTransport(method="blocks")``'s). All are exact optimal
    rules with the same alpha*, but not the same plan. Returns a :class:`TransportBatch`.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.ndim != 2 or p.shape != q.shape:
        raise InputError(f"p and q must both have shape [B, V], got {p.shape} and {q.shape}")
    n = check_n(n)
    if p.shape[0] == 0:
        raise InputError("an empty batch: p and q need at least one row")
    _check_rows(p, "p")
    _check_rows(q, "q")
    if top_k is not None:
        q = np.stack([truncate_top_k(row, top_k) for row in q])
    if method == "class_chains":
        return TransportBatch._from_chains(chains.build(p, q, n), p, q)
    if method == "blocks":
        peel_min = BATCH_PEEL_MIN if n == 2 else 2  # n >= 3 leaves are solved one by one: peel them all
        insts = [prepare(p[b], q[b], n, peel_min=peel_min) for b in range(p.shape[0])]
        solve_instances(insts)
        return TransportBatch([OptimalTransport._from_instance(inst) for inst in insts])
    raise InputError(f"method must be 'class_chains' or 'blocks', got {method!r}")


def slice_batch(batch: TransportBatch, omegas: np.ndarray) -> np.ndarray:
    """Shorthand for ``batch.slices(omegas)``: ``[B, n]`` -> ``[B, V]``."""
    return batch.slices(omegas)


def sample_batch(batch: TransportBatch, omegas: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shorthand for ``batch.sample(omegas, rng)``: ``[B, n]`` -> ``int64 [B]``."""
    return batch.sample(omegas, rng)


def _check_rows(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise InputError(f"{name} must be finite and non-negative in every row")
    bad = np.flatnonzero(np.abs(x.sum(1) - 1.0) > 1e-9)
    if bad.size:
        raise InputError(f"{name}[{bad[0]}] sums to {x[bad[0]].sum()!r}, expected 1 within 1e-9 (every row of [B, V])")
