"""``optimal_paths``: an alpha*-optimal rule for i.i.d. drafts that keeps the most drafted paths alive (issue 18).

The rule of :class:`otlp.optimal.paths.PathAwareTransport`: the class-chain plan of ``optimal``, with the tuples
drawn from the ``max_tuples``-multiset window of the likeliest draft tokens re-planned by a linear program that
maximises E[number of drafted paths that continue] at acceptance alpha*. Law = p and acceptance = alpha* exactly
(to the LP's tolerance, 1e-10); the path count is the lexicographic optimum when the window holds every token of
positive q (small V), else between the class chains' and that optimum.

For n = 2 there is no LP: :class:`otlp.optimal.paths.TwoDraftPaths` is the exact path-optimal rule (the class
chains with the doubled tuples of H* accepted at min(1, p_a / q_a^2) and the mixed tuples scaled to keep the row
sums), and ``sample`` runs it vectorised over the batch (:func:`otlp.optimal.paths.two_draft_tuple_rule`): numpy
on the CPU, torch operations with static shapes on an accelerator, like ``optimal``'s sampler.

For n >= 3 the torch ``sample`` is a host-side reference: it solves one LP per distinct (p, q) row on the CPU
(milliseconds; the last ``CACHE_SIZE`` plans are kept, so repeated rows reuse theirs) and synchronises with the
device. It is for measuring block efficiency (``otlp decode --verifier optimal_paths``), not for serving.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from otlp.core.drafts import DraftScheme
from otlp.verifiers.optimal import Optimal

#: plans kept by one verifier instance (keyed by the exact bytes of p, q and n)
CACHE_SIZE = 256


class OptimalPaths(Optimal):
    """The path-aware optimal transport (acceptance alpha*, then the most continuing drafted paths): ``optimal``
    with another plan (``transport``), i.i.d. drafts only. ``conditional`` and ``acceptance`` are optimal's, on
    this plan."""

    name = "optimal_paths"
    compatible_schemes = ()

    def __init__(self, max_tuples: int | None = None):
        from otlp.optimal.paths import MAX_TUPLES

        self.max_tuples = MAX_TUPLES if max_tuples is None else max_tuples
        self._cache: OrderedDict[bytes, object] = OrderedDict()

    def plan(self, p: np.ndarray, q: np.ndarray, n: int):  # noqa: ANN201
        """The :class:`~otlp.optimal.paths.PathAwareTransport` of (p, q, n), cached."""
        from otlp.optimal.paths import PathAwareTransport, TwoDraftPaths

        key = p.tobytes() + q.tobytes() + int(n).to_bytes(4, "little")
        rule = self._cache.get(key)
        if rule is None:
            rule = TwoDraftPaths(p, q) if n == 2 else PathAwareTransport(p, q, n, max_tuples=self.max_tuples)
            self._cache[key] = rule
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return rule

    def transport(self, p: object, draft: DraftScheme):  # noqa: ANN201
        p, draft = self.check_draft(p, draft)
        return self.plan(p, np.asarray(draft.q, dtype=np.float64), draft.n)

    def sample_exact(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray, rng: np.random.Generator,
                     max_cells: int = 1 << 23) -> tuple[np.ndarray, np.ndarray]:
        rule = self.transport(p, draft)
        tokens, _ = rule.sample(omegas, rng)
        _, reject = rule.rule(omegas)
        return tokens, 1.0 - reject

    def sample(self, p, q, drafts, generator=None, *, uniforms=None, validate=None):  # noqa: ANN001, ANN201
        """``p [B, V]``, ``q [B, V]``, ``drafts [B, n]`` (i.i.d. from q) -> ``(tokens [B], accepted_index [B])``;
        ``uniforms [B, 2]`` as for ``get("optimal").sample`` (else drawn from ``generator``). n = 1: the optimal
        rule's (the same draws); n = 2: vectorised; n >= 3: one plan per row, on the host (module docstring)."""
        import torch

        from otlp.optimal.paths import two_draft_tuple_rule
        from otlp.optimal.sampler import guard, verify
        from otlp.verifiers.optimal import iid_batch_uniforms

        uniforms = iid_batch_uniforms(self.name, p, q, drafts, generator, uniforms, validate)
        B, n = drafts.shape
        if n == 1:  # one draft: the acceptance min(1, p/q) is forced, every alpha*-rule keeps the same one path
            return verify(p, q, drafts.long(), uniforms)
        if n == 2:
            return verify(p, q, drafts.long(), uniforms, rule=two_draft_tuple_rule)
        P = p.detach().to("cpu", torch.float64).numpy()
        Q = q.detach().to("cpu", torch.float64).numpy()
        uniforms, drafts = guard(uniforms, drafts, p.shape[1])  # as verify reads them (unchecked input clamped)
        W = drafts.detach().to("cpu", torch.int64).numpy()
        U = uniforms.detach().to("cpu", torch.float64).numpy()
        tokens, index = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64)
        for b in range(B):  # one LP-backed plan per row (host side)
            pb, qb = P[b] / P[b].sum(), Q[b] / Q[b].sum()
            t, i = self.plan(pb, qb, n).sample(W[b : b + 1], uniforms=U[b : b + 1])
            tokens[b], index[b] = t[0], i[0]
        return torch.from_numpy(tokens).to(p.device), torch.from_numpy(index).to(p.device)


__all__ = ["OptimalPaths"]
