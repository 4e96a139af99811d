"""The optimal rule for drafts sampled without replacement as a batched sampler (``get("optimal_wor")``, issue 45).

Each row's rule is the rule :class:`otlp.optimal.OptimalTransport` takes for ``WithoutReplacement(q, n)`` (the
Luce rule, acceptance alpha*), solved on the draft's support: its k tokens of q > 0 and one token OTHER for the
target's mass off them (exact: :mod:`otlp.optimal.wor`). The rows of a call with the same width and support size go
to :class:`otlp.optimal.wor.SupportBatch` together (each distinct instance once, their Newton steps in one batch);
only their k + 1 masses on the support are read into numpy, and a rejected row's whole p for its residual draw.

The rule enumerates the C(k, n) sets of that support, so it suits drafts filtered to their top-k (or top-p) tokens,
as tree drafters sample their children, at any vocabulary size V; a row whose support has more than ``MAX_SETS``
sets is refused before any work, with its size. It runs on the host, so on an accelerator a call synchronises
(benchmarks/wor.py --top-k, docs/OPTIMAL.md: 0.8-3.4x ``rrs_wor`` at k = 10 and 1.2-49x at k = 20, where the sets'
Newton steps cost more than reading the rows). No rule for unfiltered drafts at vocabulary scale exists yet (issue 45).
"""

from __future__ import annotations

import math

import numpy as np

from otlp.core.drafts import DraftScheme, WithoutReplacement
from otlp.core.errors import InputError
from otlp.optimal.sampler import _host
from otlp.optimal.wor import SupportBatch
from otlp.verifiers.base import _host_row_stats, check_tensors, check_uniforms, validation_enabled
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
        totals: list = []  # the value check's float64 row sums, when it took them on the host
        B, n, V = check_tensors(p, q, drafts, validate=validate, totals=totals)
        U = (torch.rand((B, 2), generator=generator, device=p.device, dtype=torch.float64) if uniforms is None
             else check_uniforms(uniforms, B, p, validate))
        if widths is not None:
            _check_widths(widths, drafts, values)
        w = drafts.detach().to("cpu", torch.int64).numpy()  # [B, n]
        m = np.full(B, n) if widths is None else widths.detach().cpu().numpy().astype(np.int64)  # [B]
        u = U.detach().to("cpu", torch.float64).numpy()  # [B, 2]
        support = torch.nonzero(q > 0).cpu().numpy()  # [nnz, 2] (row, token), by row then token
        k = np.bincount(support[:, 0], minlength=B)  # [B] each row's tokens of q > 0
        drafted_ok = (q.gather(1, drafts.long().clamp(0, V - 1)) > 0).cpu().numpy() if values else None  # [B, n]
        for b in range(B):  # every row's size and drafts before any row's work
            count = math.comb(int(k[b]), int(m[b]))
            if count > MAX_SETS:
                raise InputError(f"{self.name}: row {b}'s draft has {k[b]:,} tokens of q > 0, so {count:,} sets of "
                                 f"n = {m[b]} (at most {MAX_SETS:,}); filter the draft to its top-k tokens")
            drafted = w[b, : m[b]]
            if np.unique(drafted).size < drafted.size or (values and not drafted_ok[b, : m[b]].all()):
                raise InputError(f"{self.name}: row {b}'s drafts {drafted.tolist()} are not distinct tokens of q > 0 "
                                 "(drafts sampled without replacement)")
        if not totals:  # validation off: the value check's C pass here, else torch's float64 sum
            for x in (p, q):
                got = _host_row_stats(x)
                totals.append(got[0] if got is not None else x.sum(1, dtype=torch.float64).cpu().numpy())
        p_sum, q_sum = totals  # [B] float64
        first = np.cumsum(k) - k  # [B] each row's first entry in support
        tokens, index = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64)
        groups = np.stack([m, k], 1)
        for width, size in np.unique(groups, axis=0):  # rows of the same width and support size: one batch
            rows = np.flatnonzero((groups[:, 0] == width) & (groups[:, 1] == size))
            live = support[first[rows, None] + np.arange(size), 1]  # [r, k] the tokens of q > 0, in token order
            at, cols = torch.from_numpy(rows).to(p.device)[:, None], torch.from_numpy(live).to(p.device)
            p_live, q_live = (x[at, cols].detach().to("cpu", torch.float64).numpy() / total[rows, None]
                              for x, total in ((p, p_sum), (q, q_sum)))  # [r, k] normalised
            outside = np.maximum(1.0 - p_live.sum(1, keepdims=True), 0.0)  # [r, 1] OTHER: the mass off the support
            batch = SupportBatch(live, np.concatenate([p_live, outside], 1),
                                 np.concatenate([q_live, np.zeros_like(outside)], 1), int(width))
            drafted = w[rows, :width]
            slot = (u[rows, :1] >= np.cumsum(batch.accept(drafted), axis=1)).sum(1)  # [r]
            tokens[rows], index[rows] = np.take_along_axis(drafted, np.minimum(slot, width - 1)[:, None], 1)[:, 0], slot
            for i in np.flatnonzero(slot >= width):  # rejected: the residual's token at u[:, 1]
                b = int(rows[i])
                own = batch.residual(i)  # [k + 1]: the support's tokens, then OTHER, spread in proportion to p
                scale = own[-1] / max(float(outside[i, 0]), np.finfo(np.float64).tiny) / p_sum[b]
                tokens[b], index[b] = residual_token(_host(p[b].cpu()), live[i], own[:-1], scale, u[b, 1]), -1
        return torch.from_numpy(tokens).to(p.device), torch.from_numpy(index).to(p.device)


#: tokens per block of :func:`residual_token`'s two-level inverse CDF
BLOCK = 4096


def residual_token(row: np.ndarray, live: np.ndarray, own: np.ndarray, scale: float, u: float) -> int:
    """The token at ``u`` of the inverse CDF, in token order, of the law ``own [k]`` on the tokens ``live [k]`` and
    ``scale * row`` on the others (``row [V]``: p, float32 or float64, as the caller has it). Two levels: the law's
    sums over blocks of ``BLOCK`` tokens (one pass over the row, no [V] temporary), then the cumulative sum inside
    the block that holds ``u`` times the total."""
    V = row.size
    starts = np.arange(0, V, BLOCK)
    block = live // BLOCK
    sums = scale * np.add.reduceat(row, starts, dtype=np.float64)  # [blocks]
    sums += np.bincount(block, own - scale * row[live].astype(np.float64), starts.size)
    cum = np.cumsum(sums)
    x = u * cum[-1]
    j = min(int(np.searchsorted(cum, x, side="right")), starts.size - 1)
    seg = scale * row[starts[j]: starts[j] + BLOCK].astype(np.float64)  # [BLOCK]
    seg[live[block == j] - starts[j]] = own[block == j]
    inside = np.cumsum(seg) + (cum[j - 1] if j else 0.0)
    t = int(np.searchsorted(inside, x, side="right"))
    if t >= seg.size:  # x past the block's own sum by rounding: its last token of positive mass
        t = int(np.flatnonzero(seg > 0)[-1]) if (seg > 0).any() else seg.size - 1
    return int(starts[j]) + t
