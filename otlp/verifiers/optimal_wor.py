"""The optimal rule for drafts sampled without replacement as a batched sampler (``get("optimal_wor")``, issue 45).

Each row's rule is :class:`otlp.optimal.wor.SupportRule`, the rule :class:`otlp.optimal.OptimalTransport` takes for
``WithoutReplacement(q, n)`` (the Luce rule, acceptance alpha*), solved on the draft's support: its k tokens of
q > 0 and one token OTHER for the target's mass off them (exact: :mod:`otlp.optimal.wor`).

The rule enumerates the C(k, n) sets of that support, so it suits drafts filtered to their top-k (or top-p) tokens,
as tree drafters sample their children, at any vocabulary size V; a row whose support has more than ``MAX_SETS``
sets is refused before any work, with its size. The rows are solved one by one on the host (about
2 ms a row at k = 20, n = 3, benchmarks/wor.py --top-k; one solve per distinct instance on the support): a decode-loop
and certification sampler, not an engine hot path. No rule for unfiltered drafts at vocabulary scale exists yet (issue
45).
"""

from __future__ import annotations

import math

import numpy as np

from otlp.core.drafts import DraftScheme, WithoutReplacement
from otlp.core.errors import InputError
from otlp.optimal.wor import SupportRule
from otlp.verifiers.base import check_tensors, check_uniforms, validation_enabled
from otlp.verifiers.optimal import Optimal, _check_widths

#: the most drafted sets (C(k, n) for k tokens of q > 0) one row's rule may enumerate (about 2 us a set): k = 632 at
#: n = 2, k = 107 at n = 3, k = 48 at n = 4, k = 20 at n = 8
MAX_SETS = 200_000


class OptimalWithoutReplacement(Optimal):
    """The optimal transport for without-replacement drafts (acceptance alpha*), with a batched sampler."""

    name = "optimal_wor"
    scheme = "without_replacement"
    compatible_schemes = ()
    torch_schemes = ("without_replacement",)
    #: the exact acceptance enumerates the draft's sets above n = 1 (``otlp.sweep.compute.closed_form`` reads this)
    closed_form_n = 1

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

        q_drafted = q.gather(1, drafts.long().clamp(0, V - 1)).detach().cpu().numpy() if values else None  # [B, n]
        for b in range(B):  # every row's size and drafts before any row's work
            count = math.comb(int(k[b]), int(m[b]))
            if count > MAX_SETS:
                raise InputError(f"{self.name}: row {b}'s draft has {k[b]:,} tokens of q > 0, so {count:,} sets of "
                                 f"n = {m[b]} (at most {MAX_SETS:,}); filter the draft to its top-k tokens")
            drafted = w[b, : m[b]]
            if np.unique(drafted).size < drafted.size or (values and (q_drafted[b, : m[b]] <= 0).any()):
                raise InputError(f"{self.name}: row {b}'s drafts {drafted.tolist()} are not distinct tokens of q > 0 "
                                 "(drafts sampled without replacement)")
        tokens, index = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64)
        cache: dict = {}  # rows with the same instance on their support (a node's rows) share its rule's solve
        for b in range(B):
            pb, qb = row(p, b), row(q, b)
            rule = SupportRule(pb / pb.sum(), qb / qb.sum(), int(m[b]), cache)
            tokens[b], index[b] = draw(rule, w[b, : m[b]], u[b])
        return torch.from_numpy(tokens).to(p.device), torch.from_numpy(index).to(p.device)


def draw(rule, drafts: np.ndarray, u: np.ndarray) -> tuple[int, int]:  # noqa: ANN001 - a wor.SupportRule
    """``(token, slot)`` for one row's ``drafts [n]`` and uniforms ``u [2]``: slot j where ``u[0]`` falls in its share
    of the rule's cumulative accept probabilities, else (slot -1) the inverse CDF of ``u[1]`` over its residual."""
    accept, _ = rule.rule(drafts[None])
    slot = int((u[0] >= np.cumsum(accept[0])).sum())
    if slot < drafts.size:
        return int(drafts[slot]), slot
    cdf = np.cumsum(rule.residual)
    token = int(np.searchsorted(cdf, u[1] * cdf[-1], side="right"))
    return min(token, cdf.size - 1), -1
