"""Batched exact OT: many (p, q) pairs with the same V and n solved together (one drafted tuple per row).

Every group of every row is a water-filling class chain computed on ``[B, V]`` arrays
(:mod:`.chains`): no per-pair Python work (a row's :class:`OptimalTransport` is built only when indexed);
benchmarks/solve_times.py measures it against looping over :class:`OptimalTransport`.
:class:`TransportBatch` then evaluates or samples the rule for one tuple per row, vectorised.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from otlp.core.distributions import check_n, check_token_tuples
from otlp.core.drafts import WithoutReplacement
from otlp.core.errors import InputError
from otlp.lp.formulations.completion import residual_law
from otlp.optimal import chains, host
from otlp.optimal.transport import OptimalTransport, truncate_top_k


class TransportBatch(Sequence):
    """B solved instances (a sequence of :class:`OptimalTransport`, each built only when indexed) plus row-wise
    vectorised rule evaluation on the batch's class chains (:mod:`.chains`)."""

    def __init__(self, ch: chains.Chains, P: np.ndarray, Q: np.ndarray):
        B, V = P.shape
        self.n, self.V = ch.pre.n, V
        self._chains, self._P, self._Q, self._items = ch, P, Q, [None] * B
        self._rows = np.arange(B)
        self.alpha = np.asarray(ch.pre.alpha)  # [B]
        r = np.zeros((B, V))
        np.put_along_axis(r, ch.pre.order, ch.residual, axis=1)  # by token
        self.residual = residual_law(r, P)  # [B, V]

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
            item = self._items[i] = OptimalTransport.from_arrays(self._P[b], self._Q[b], self.n)
        return item

    def rule(self, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``omegas int [B, n]`` (one tuple per row) -> ``(accept [B, n], reject [B])``, as OptimalTransport.rule."""
        w = check_token_tuples(omegas, self.n, self.V, rows=len(self))  # [B, n]
        return chains.evaluate(self._chains, w)

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


class RowBatch(TransportBatch):
    """B solved instances of a scheme with no batched rule (drafts without replacement): one
    :class:`OptimalTransport` per row, built at once, with :class:`TransportBatch`'s ``alpha``, ``residual``,
    ``rule``, ``slices`` and ``sample`` evaluated row by row."""

    def __init__(self, items: list[OptimalTransport]):
        self._items, self.n, self.V = items, items[0].n, items[0].V
        self._rows = np.arange(len(items))
        self.alpha = np.array([ot.alpha for ot in items])  # [B]
        self.residual = np.stack([ot.residual for ot in items])  # [B, V]

    def rule(self, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = check_token_tuples(omegas, self.n, self.V, rows=len(self))  # [B, n]
        got = [ot.rule(w[b:b + 1]) for b, ot in enumerate(self._items)]
        return np.concatenate([a for a, _ in got]), np.concatenate([r for _, r in got])


def solve_batch(p: np.ndarray, q: np.ndarray, n: int, *, top_k: int | None = None,
                scheme: str = "iid") -> TransportBatch:
    """The exact optimal rule for ``p[b], IID(q[b], n)`` for every row b at once.

    ``p, q: float [B, V]`` (each row a distribution). Every group of every row is a water-filling class chain,
    vectorised over the whole batch (:mod:`.chains`; at n = 1 every group is a single token or a tie, and the chain
    is classic speculative sampling): the rule of :class:`OptimalTransport` row by row. Returns a
    :class:`TransportBatch`. ``scheme="without_replacement"``: ``WithoutReplacement(q[b], n)`` drafts instead, each
    row's rule built on its draft's support (:mod:`.wor`, one row at a time; a :class:`RowBatch`).
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
    if scheme == "without_replacement":
        if top_k is not None:
            raise InputError("top_k truncation is only defined here for IID drafts (GR App. N); filter q instead")
        return RowBatch([OptimalTransport(p[b], WithoutReplacement(q[b], n)) for b in range(p.shape[0])])
    if scheme != "iid":
        raise InputError(f"scheme must be 'iid' or 'without_replacement', got {scheme!r}")
    q = truncate_top_k(q, top_k)
    return TransportBatch(host.build(p, q, n), p, q)


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
