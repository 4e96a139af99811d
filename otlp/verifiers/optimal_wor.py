"""The optimal rule for drafts sampled without replacement as a batched sampler (``get("optimal_wor")``, issue 45).

Each row's rule is :class:`otlp.optimal.OptimalTransport` for ``WithoutReplacement(q, n)`` (the Luce rule of
:mod:`otlp.optimal.wor`, acceptance alpha*) built on the **draft's support**: a without-replacement draft only ever
draws tokens of q > 0, so the instance is solved on those k tokens plus one token ``OTHER`` that holds the target's
mass outside them (q = 0 there). This is exact, not a truncation: no tuple covers a token of q = 0, so its acceptance
is 0 in every optimal plan and its only mass is the residual's, (p - R)_+ = p on it (GR eq. (3)); ``OTHER``'s
residual share is spread over those tokens in proportion to p.

The rule enumerates the k! / (k - n)! tuples of that support, so it suits drafts filtered to their top-k (or top-p)
tokens, as tree drafters sample their children, at any vocabulary size V; a row whose support has more than
``MAX_TUPLES`` tuples is refused before any work, with its size. The rows are solved one by one on the host
(a row at k = 20, n = 3 in ~10 ms; ``benchmarks/wor.py``): a decode-loop and certification sampler, not an engine
hot path; no vectorised rule over unfiltered vocabularies exists yet (issue 45).
"""

from __future__ import annotations

import math

import numpy as np

from otlp.core.drafts import DraftScheme, WithoutReplacement
from otlp.core.errors import InputError
from otlp.verifiers.base import check_tensors, check_uniforms, validation_enabled
from otlp.verifiers.optimal import Optimal, _check_widths

#: the most tuples (k! / (k - n)! for k tokens of q > 0) one row's rule may enumerate: k = 100 at n = 3, k = 30
#: at n = 4 (0.66 s a row), k = 12 at n = 8
MAX_TUPLES = 1_000_000


class OptimalWithoutReplacement(Optimal):
    """The optimal transport for without-replacement drafts (acceptance alpha*), with a batched sampler."""

    name = "optimal_wor"
    scheme = "without_replacement"
    compatible_schemes = ()
    torch_schemes = ("without_replacement",)

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return WithoutReplacement(q, n)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None, validate=None, widths=None):  # noqa: ANN001, ANN201
        """``p, q [B, V]`` (any float dtype, normalised per row in float64), ``drafts int [B, n]`` drawn from q
        without replacement (distinct per row) -> ``(tokens int64 [B], accepted_index int64 [B])``, -1 where the
        token came from the residual. ``uniforms [B, 2]`` (``[:, 0]`` picks the slot or the residual, ``[:, 1]`` the
        residual's token), else two per row from ``generator``. ``widths int64 [B]``: row b has only its first
        ``widths[b]`` drafts. Each row's rule is built on the host (module docstring)."""
        import torch

        if isinstance(q, torch.Tensor) and q.ndim == 3:
            raise InputError(f"the {self.name} sampler takes one draft law per row (q of shape [B, V]), got q of "
                             f"shape {tuple(q.shape)}")
        values = validation_enabled() if validate is None else validate
        B, n, V = check_tensors(p, q, drafts, validate=validate)
        U = (torch.rand((B, 2), generator=generator, device=p.device, dtype=torch.float64) if uniforms is None
             else check_uniforms(uniforms, B, p, validate))
        if widths is not None:
            _check_widths(widths, drafts, values)
        w = drafts.detach().to("cpu", torch.int64).numpy()  # [B, n]
        m = np.full(B, n) if widths is None else widths.detach().cpu().numpy().astype(np.int64)  # [B]
        u = U.detach().to("cpu", torch.float64).numpy()  # [B, 2]
        k = (q > 0).sum(1).cpu().numpy()  # [B]

        def row(x, b: int) -> np.ndarray:  # noqa: ANN001 - one row as float64 numpy (never the whole batch)
            return x[b].detach().to("cpu", torch.float64).numpy()

        for b in range(B):  # every row's size and drafts before any row's work
            count = math.perm(int(k[b]), int(m[b]))
            if count > MAX_TUPLES:
                raise InputError(f"{self.name}: row {b}'s draft has {k[b]:,} tokens of q > 0, so {count:,} tuples of "
                                 f"n = {m[b]} (at most {MAX_TUPLES:,}); filter the draft to its top-k tokens")
            drafted = w[b, : m[b]]
            if np.unique(drafted).size < drafted.size or (values and (row(q, b)[drafted] <= 0).any()):
                raise InputError(f"{self.name}: row {b}'s drafts {drafted.tolist()} are not distinct tokens of q > 0 "
                                 "(drafts sampled without replacement)")
        tokens, index = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64)
        rules: dict = {}  # one rule per distinct (p, q, width) in the call: a node's rows, or a repeated row
        for b in range(B):
            pb, qb = row(p, b), row(q, b)
            key = (pb.tobytes(), qb.tobytes(), int(m[b]))
            if key not in rules:
                rules[key] = SupportRule(pb, qb, int(m[b]))
            tokens[b], index[b] = rules[key].draw(w[b, : m[b]], u[b])
        return torch.from_numpy(tokens).to(p.device), torch.from_numpy(index).to(p.device)


class SupportRule:
    """One row's rule on its draft's support (module docstring): ``p, q [V]`` (normalised here), ``n`` drafts.
    ``live [k]`` the tokens of q > 0; ``transport`` the :class:`otlp.optimal.OptimalTransport` of
    ``WithoutReplacement`` on them and ``OTHER`` (last, where the target has mass off the support)."""

    def __init__(self, p: np.ndarray, q: np.ndarray, n: int):
        from otlp.optimal import OptimalTransport

        self.p, q = p / p.sum(), q / q.sum()
        on = q > 0
        self.live = np.flatnonzero(on)  # [k]
        self.off = np.flatnonzero(~on)  # [V - k]
        self.outside = float(self.p[self.off].sum())
        p1, q1 = self.p[self.live], q[self.live]
        if self.outside > 0:  # OTHER: the target's mass off the support, never drafted
            p1, q1 = np.append(p1, self.outside), np.append(q1, 0.0)
        self.transport = OptimalTransport(p1, WithoutReplacement(q1, n))

    def rule(self, drafts: np.ndarray) -> tuple[np.ndarray, float]:
        """``drafts [n]`` distinct tokens of q > 0 -> ``(accept [n], reject)`` (:meth:`OptimalTransport.rule`)."""
        local = np.minimum(np.searchsorted(self.live, drafts), self.live.size - 1)  # [n] places on the support
        accept, reject = self.transport.rule(local[None])
        return accept[0], float(reject[0])

    def residual(self) -> np.ndarray:
        """``[V]`` the law of a rejected tuple's token: the support's residual, ``OTHER``'s share spread over the
        tokens of q = 0 in proportion to p."""
        r = np.zeros(self.p.size)
        own = self.transport.residual  # [k (+ 1)]
        r[self.live] = own[: self.live.size]
        if self.outside > 0:
            r[self.off] = own[-1] * self.p[self.off] / self.outside
        return r

    def draw(self, drafts: np.ndarray, u: np.ndarray) -> tuple[int, int]:
        """``(token, slot)`` for ``drafts [n]`` and uniforms ``u [2]``: slot j where ``u[0]`` falls in its share of
        the cumulative accept probabilities, else (slot -1) the inverse CDF of ``u[1]`` over :meth:`residual`."""
        accept, _ = self.rule(drafts)
        slot = int((u[0] >= np.cumsum(accept)).sum())
        if slot < drafts.size:
            return int(drafts[slot]), slot
        cdf = np.cumsum(self.residual())
        token = int(np.searchsorted(cdf, u[1] * cdf[-1], side="right"))
        return min(token, self.p.size - 1), -1
