"""The optimal rule for drafts sampled without replacement as a batched sampler (``get("optimal_wor")``, issue 45).

Each row's rule is the rule :class:`otlp.optimal.OptimalTransport` takes for ``WithoutReplacement(q, n)`` (the
Luce rule, acceptance alpha*), solved on the draft's support: its k tokens of q > 0 and one token OTHER for the
target's mass off them (exact: :mod:`otlp.optimal.wor`). The rows of a call with the same width and support size go
to :class:`otlp.optimal.wor.SupportBatch` together (each distinct instance once, planned by the C kernels of
:func:`otlp.optimal.wor.host_plan`); only their k + 1 masses on the support are read into numpy, and a rejected row's
whole p for its residual draw.

The rule enumerates the C(k, n) sets of that support, so it suits drafts filtered to their top-k (or top-p) tokens,
as tree drafters sample their children, at any vocabulary size V; a row whose support has more than ``MAX_SETS``
sets is refused before any work, with its size. No rule for unfiltered drafts at vocabulary scale exists yet
(issue 45).

Three routes compute that rule (``backend=``):

* **host** (the default on the CPU): the row groups above (benchmarks/wor.py --top-k, docs/OPTIMAL.md: 0.5-1.4x
  ``rrs_wor`` at k = 10 and 0.8-8.5x at k = 20, where the sets' Newton steps cost more than reading the rows). On an
  accelerator it would synchronise.
* **torch** (the default on other devices, :func:`static_sample`): every row on the tensors' device with static
  shapes and no host sync when ``top_k=`` gives the support size K: ``torch.topk`` for the support, the same
  ``set_plan`` on tensors with a fixed number of Newton steps, the plan capped so that its law is p even where a row
  has not converged, the residual draw in token order; capturable in a CUDA graph (``graphs=True``). The same tokens
  as the host route on every test row. Its cost on a device is its kernel launches, not its bytes: at B = 64,
  V = 128k, K = 10 it moves 0.9 / 1.1 / 0.9x ``rrs_wor``'s bytes at n = 2 / 4 / 8 but makes 1,803 / 2,036 / 2,634
  ops against ``rrs_wor``'s 69 / 111 / 195 (``benchmarks/bytes_moved.py`` and ``--ops``, meta tensors).
* **triton** (the default on CUDA where Triton imports and the support has at most 62 tokens): the torch route with
  the plan's Newton steps in one Triton program per row (:mod:`otlp.optimal.wor_triton`): 254 / 343 / 653 ops at
  n = 2 / 4 / 8 (the kernel one of them). On the CPU it runs under ``TRITON_INTERPRET=1`` only (the tests).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from otlp.core import xp as X
from otlp.core.drafts import DraftScheme, WithoutReplacement
from otlp.core.errors import InputError
from otlp.optimal.sampler import _host
from otlp.optimal.wor import SupportBatch
from otlp.verifiers.base import _host_row_stats, check_tensors, check_uniforms, validation_enabled
from otlp.verifiers.optimal import Optimal, _check_widths

#: the most drafts a row: a set's probability sums 2^n n terms (otlp.core.drafts.set_probabilities; its C kernel
#: takes n up to 12)
MAX_N = 12
#: the static route plans at most this many entries (rows x (n + 1) x sets) at once, the rows in static slices:
#: its temporaries peak at about 300 bytes an entry (on the CPU: 317 at K = 20, n = 4; 274 at K = 10, n = 2), so
#: about 320 MB a plan
PLAN_ENTRIES = 1 << 20
#: the most drafted sets (C(k, n) for k tokens of q > 0) one row's rule may enumerate (about 2 us a set): k = 632 at
#: n = 2, k = 107 at n = 3, k = 48 at n = 4, k = 20 at n = 8
MAX_SETS = 200_000
#: ``sample``'s routes (its docstring)
BACKENDS = ("auto", "host", "torch", "triton")


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

    def sample(self, p, q, drafts, generator=None, *, uniforms=None, validate=None, widths=None,  # noqa: ANN001, ANN201
               top_k: int | None = None, backend: str = "auto", graphs: bool = False):
        """``p, q [B, V]`` (any float dtype, normalised per row in float64), ``drafts int [B, n]`` drawn from q
        without replacement (distinct per row) -> ``(tokens int64 [B], accepted_index int64 [B])``, -1 where the
        token came from the residual. ``uniforms [B, 2]`` (``[:, 0]`` picks the slot or the residual, ``[:, 1]`` the
        residual's token), else two per row from ``generator``. ``widths int64 [B]``: row b has only its first
        ``widths[b]`` drafts.

        ``backend``: ``"host"`` builds each row's rule on the host (a sync); ``"torch"`` plans every row on the
        tensors' device with static shapes (:func:`static_sample`: no host sync when ``top_k`` is given and
        validation is off); ``"triton"``: the same with the plan's Newton steps in one Triton kernel (CUDA, or the CPU
        under ``TRITON_INTERPRET=1``; ``top_k`` at most 62); ``"auto"``: the host on the CPU, ``"triton"`` on CUDA
        where Triton imports and ``top_k`` allows, ``"torch"`` elsewhere. ``top_k``: the torch route's
        support size K, at least each row's number of tokens of q > 0 (checked with validation on); None counts them
        (one host sync). ``graphs=True`` (the torch route on CUDA tensors; elsewhere ignored): replayed from a CUDA
        graph captured per shape (:class:`otlp.backend.cuda_graphs.GraphCache`: the same tokens, one launch for the
        route's small kernels, about 1,800-2,600 at n = 2-8 on the torch route and 250-650 on the Triton route)."""
        import torch

        if backend not in BACKENDS:
            raise InputError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise InputError(f"top_k must be a positive integer (the draft's support size), got {top_k!r}")

        if isinstance(q, torch.Tensor) and q.ndim == 3:
            raise InputError(f"the {self.name} sampler takes one draft law per row (q of shape [B, V]), got q of "
                             f"shape {tuple(q.shape)}")
        values = validation_enabled() if validate is None else validate
        totals: list = []  # the value check's float64 row sums, when it took them on the host
        B, n, V = check_tensors(p, q, drafts, validate=validate, totals=totals)
        if n > MAX_N:
            raise InputError(f"{self.name}: {n} drafts a row, above {MAX_N} (each drafted set's probability sums "
                             f"2^n n terms: {2 ** n * n:,} at n = {n})")
        U = (torch.rand((B, 2), generator=generator, device=p.device, dtype=torch.float64) if uniforms is None
             else check_uniforms(uniforms, B, p, validate))
        if widths is not None:
            _check_widths(widths, drafts, values)
        if backend in ("torch", "triton") or (backend == "auto" and p.device.type != "cpu"):
            K = support_size(q, top_k, n, values)
            kernel = _kernel_route(backend, p, K, n)
            if values and B:  # (a host read, as the value check's)
                d = drafts.long()
                _check_drafts(self.name, d, widths, q.gather(1, d.clamp(0, V - 1)) > 0)
            if B == 0:  # an empty batch: nothing to verify
                empty = torch.zeros(0, dtype=torch.long, device=p.device)
                return empty, empty.clone()
            if graphs and p.device.type == "cuda":
                from otlp.optimal.sampler import _graph_cache

                args = (p, q, drafts, U) if widths is None else (p, q, drafts, U, widths)
                return _graph_cache(p.device).run(_static_route(K, widths is not None, kernel), *args, rows=True)
            return static_sample(p, q, drafts, U, widths, K, kernel)
        w = drafts.detach().to("cpu", torch.int64).numpy()  # [B, n]
        m = np.full(B, n) if widths is None else widths.detach().cpu().numpy().astype(np.int64)  # [B]
        u = U.detach().to("cpu", torch.float64).numpy()  # [B, 2]
        support = torch.nonzero(q > 0).cpu().numpy()  # [nnz, 2] (row, token), by row then token
        k = np.bincount(support[:, 0], minlength=B)  # [B] each row's tokens of q > 0
        positive = (q.gather(1, drafts.long().clamp(0, V - 1)) > 0).cpu().numpy() if values else None  # [B, n]
        # every row's size and drafts before any row's work
        for size, width in np.unique(np.stack([k, m], 1), axis=0):
            count = math.comb(int(size), int(width))
            if count > MAX_SETS:
                b = int(np.flatnonzero((k == size) & (m == width))[0])
                raise InputError(f"{self.name}: row {b}'s draft has {size:,} tokens of q > 0, so {count:,} sets of "
                                 f"n = {width} (at most {MAX_SETS:,}); filter the draft to its top-k tokens")
        _check_drafts(self.name, w, m, positive)
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


def static_sample(p, q, drafts, uniforms, widths, K: int, kernel: bool = False):  # noqa: ANN001, ANN201
    """The sampler on the tensors' device with static shapes (``backend="torch"``), for drafts of at most ``K``
    tokens of q > 0 (:func:`support_size`): no host sync, so it can be captured in a CUDA graph. The rule is
    :func:`static_rule`'s; the slot by ``uniforms[:, 0]`` against its accept probabilities' running sum, as on the
    host; a rejected row's token by ``uniforms[:, 1]`` from its residual over all V, an inverse CDF in token order.
    Passes over ``[B, V]``: the top-k, the row sums, the residual's weights and its running sum; the rest works on
    ``[B, n + 1, C(K, n)]``. ``kernel``: the plan's Newton steps in one Triton program per row
    (:mod:`otlp.optimal.wor_triton`)."""
    import torch

    from otlp.core import xp as X

    B, n = drafts.shape
    accept, weights, m = static_rule(p, q, drafts, widths, K, kernel)
    slot = ((uniforms[:, :1].to(weights.dtype) >= accept.cumsum(1))
            & (torch.arange(n, device=p.device) < m[:, None])).sum(1)  # [B]
    rejected = slot >= m
    residual = X.inverse_cdf(weights, uniforms[:, 1:].to(weights.dtype))
    token = drafts.gather(1, slot.clamp(max=n - 1)[:, None])[:, 0].to(torch.int64)
    return torch.where(rejected, residual, token), torch.where(rejected, -1, slot)


def static_rule(p, q, drafts, widths, K: int, kernel: bool = False):  # noqa: ANN001, ANN201
    """The rule of :func:`static_sample` for each row: ``(accept float64 [B, n], weights float64 [B, V], widths
    [B])``, P(accept slot j) (0 past a row's width) and the residual's unnormalised weights over all V.

    The support: ``torch.topk(q, K)`` in token order (every row's tokens of q > 0 and, where a row has fewer, some
    of q = 0: elements the rule never accepts, so the law and alpha* are those of
    :class:`otlp.optimal.wor.SupportRule`), then OTHER, the target's mass off the K tokens. Every row is planned by
    :func:`otlp.optimal.wor.capped_plan` on the C(K, m) sets of each width m present (all m <= n with ``widths``):
    ``DEVICE_STEPS`` Newton steps, converged on every row of the benchmark grid to within rounding of the host's
    plan; a row that did not converge keeps the exact law p and accepts less than alpha*. The residual: its
    support's share, OTHER's spread over the other tokens in proportion to p."""
    import torch

    from otlp.optimal.wor import capped_plan

    B, n = drafts.shape
    f64 = torch.float64
    p_sum, q_sum = p.sum(1, keepdim=True, dtype=f64), q.sum(1, keepdim=True, dtype=f64)  # [B, 1]
    live = torch.topk(q, K, dim=1, sorted=False).indices.sort(1).values  # [B, K] in token order
    p_live, q_live = p.gather(1, live).to(f64) / p_sum, q.gather(1, live).to(f64) / q_sum  # [B, K]
    outside = (1.0 - p_live.sum(1, keepdim=True)).clamp(min=0.0)  # [B, 1] OTHER
    p1, q1 = torch.cat([p_live, outside], 1), torch.cat([q_live, torch.zeros_like(outside)], 1)  # [B, K + 1]
    local = (live[:, None, :] == drafts[:, :, None]).to(torch.int8).argmax(2)  # [B, n] each draft's support place
    m = torch.full((B,), n, dtype=torch.int64, device=p.device) if widths is None else widths.to(torch.int64)
    accept = p1.new_zeros(B, n)  # [B, n] P(accept slot j)
    accepted = p1.new_zeros(B, K + 1)  # [B, K + 1] each element's accepted mass
    rows = torch.arange(B, device=p.device)
    for width in range(1, n + 1) if widths is not None else (n,):
        sets, codes = _sets(K, width, p.device)
        own = local[:, :width]
        at = torch.searchsorted(codes, (own.sort(1).values * K ** torch.arange(width - 1, -1, -1, device=p.device))
                                .sum(1)).clamp(max=codes.numel() - 1)  # [B] each row's drafted set
        place = own.argsort(dim=1, stable=True).argsort(dim=1)  # [B, width] each slot's place in its set
        step = max(1, PLAN_ENTRIES // (sets.shape[0] * (width + 1)))  # rows a plan (static slices: no sync)
        chosen, got = [], []
        for lo in range(0, B, step):
            choice, mass, _ = capped_plan(p1[lo: lo + step], q1[lo: lo + step], sets,
                                          kernel=kernel)  # [r, U, width], [r, K + 1]
            chosen.append(choice[rows[: choice.shape[0]], at[lo: lo + step]].gather(1, place[lo: lo + step]))
            got.append(mass)
        mine = m == width
        accept[:, :width] = torch.where(mine[:, None], torch.cat(chosen), accept[:, :width])
        accepted = torch.where(mine[:, None], torch.cat(got), accepted)
    rest = (p1 - accepted).clamp(min=0.0)  # [B, K + 1] the residual (GR eq. (3)), unnormalised
    rest = torch.where(rest.sum(1, keepdim=True) > 0, rest, p1)  # (none left: a row rejected by rounding takes p)
    scale = rest[:, K:] / outside.clamp(min=torch.finfo(f64).tiny) / p_sum  # [B, 1] OTHER's share per unit of p
    return accept, (p.to(f64) * scale).scatter_(1, live, rest[:, :K]), m


def _kernel_route(backend: str, p, K: int, n: int) -> bool:  # noqa: ANN001
    """Whether the static route's plan takes its Newton steps in the Triton kernel (:mod:`otlp.optimal.wor_triton`):
    ``"triton"`` (refused where the kernel cannot take the rows), or ``"auto"`` on CUDA tensors where Triton
    imports and the kernel takes K + 2 elements and n drafts."""
    from otlp.backend import triton as TR
    from otlp.optimal import wor_triton

    fits = wor_triton.takes(K + 2, n)
    if backend == "triton":
        if not fits:
            raise InputError(f"optimal_wor: backend='triton' takes at most {wor_triton.MAX_G - 2} support tokens "
                             f"and {wor_triton.MAX_S - 1} drafts, got top_k = {K} and n = {n}")
        if not TR.available():
            raise InputError("backend='triton' needs Triton (pip install triton; torch's CUDA builds ship it)")
        return True
    return backend == "auto" and p.device.type == "cuda" and fits and TR.available()


def _check_drafts(name: str, drafts, widths, positive=None) -> None:  # noqa: ANN001
    """Each row's drafts within its width are distinct and, where ``positive`` (whether each draft has q > 0) is
    given, tokens of q > 0: ``drafts [B, n]``, ``widths [B]`` (None: every slot) and ``positive [B, n]`` all numpy
    arrays (the host route, whose call reads them anyway) or all tensors (the static route, with validation on: one
    host read)."""
    B, n = drafts.shape
    slot = X.arange_like(drafts, n)
    valid = slot < (X.full(drafts, (B, 1), n) if widths is None else widths[:, None])  # [B, n]
    later = (drafts[:, :, None] == drafts[:, None, :]) & (slot[:, None] < slot[None, :])  # [B, n, n] a repeat
    bad = (later & valid[:, :, None] & valid[:, None, :]).reshape(B, -1).any(1)  # [B]
    if positive is not None:
        bad = bad | (valid & ~positive).any(1)
    if bool(bad.any()):
        b = int(bad.nonzero()[0][0])
        raise InputError(f"{name}: row {b}'s drafts {drafts[b][valid[b]].tolist()} are not distinct tokens of q > 0 "
                         "(drafts sampled without replacement)")


def support_size(q, top_k: int | None, n: int, values: bool) -> int:  # noqa: ANN001
    """K of the static route: ``top_k`` (with ``values``, checked against each row's tokens of q > 0, a host read),
    else the largest row's count (one host sync); at most V, at least n; its C(K, n) sets at most ``MAX_SETS`` (and
    so, as n <= ``MAX_N``, the C(K, m) sets of every width m < n: they are at most C(K, n) where m < n <= K / 2, and
    past K / 2 a K of 21 or more has over 200,000 sets at n = 11 or 12)."""
    if top_k is None:
        top_k = max(int((q > 0).sum(1).max()), n) if q.shape[0] else n  # (the one host sync of this route)
    elif values and q.shape[0] and bool(((q > 0).sum(1) > top_k).any()):
        raise InputError(f"optimal_wor: top_k = {top_k} is below a row's number of tokens of q > 0 (the draft must "
                         "be filtered to its top-k tokens)")
    K = min(top_k, q.shape[1])
    if K < n:
        raise InputError(f"optimal_wor: top_k = {K} is below n = {n} drafts (they are distinct tokens of q > 0)")
    count = math.comb(K, n)
    if count > MAX_SETS:
        raise InputError(f"optimal_wor: top_k = {K} gives {count:,} sets of n = {n} (at most {MAX_SETS:,})")
    return K


@functools.lru_cache(maxsize=64)
def _static_route(K: int, with_widths: bool, kernel: bool):  # noqa: ANN202
    """:func:`static_sample` for support size K as a function of tensors only, one per (K, widths or not, kernel): a
    stable callable for the CUDA graph cache, which keys on it."""
    if with_widths:
        return lambda p, q, drafts, u, widths: static_sample(p, q, drafts, u, widths, K, kernel)
    return lambda p, q, drafts, u: static_sample(p, q, drafts, u, None, K, kernel)


@functools.lru_cache(maxsize=64)
def _sets(k: int, n: int, device: object):  # noqa: ANN202
    """``(sets int64 [C(k, n), n], codes [C(k, n)])`` on ``device``: every n of k local ids in lexicographic order
    and their base-k codes (increasing), copied to the device once per size (a call inside a CUDA graph capture finds
    them there after its warm-up)."""
    import torch

    from otlp.core.drafts import combinations

    sets = torch.from_numpy(combinations(k, n)).to(device)
    return sets, (sets * k ** torch.arange(n - 1, -1, -1, device=device)).sum(1)
