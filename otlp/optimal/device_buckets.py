"""The optimal rule on the device without the ratio sort: the bucket rule on torch tensors (issue 41).

The device route (:func:`.sampler._device`) sorts every row by ratio and runs the class chain with Newton steps at
every position. Here the host's sort-free algorithm (:mod:`.buckets`, ``bucket_rule.c``) runs as torch operations on
the tensors' device, with static shapes and no host synchronisation (design note ``sortfree-rule.md`` §2-§4):

1. *Histogram* (pass 1 over ``[B, V]``): each token's ratio key q/p (:func:`otlp.core.psi.ratio_keys` on the rows
   normalised as :func:`.chains.normalised_rows`) goes to a bucket of :class:`.buckets.Scheme`; per row and bucket the
   count and the float64 sums of P and Q (:func:`histogram`: ``scatter_add_``, or one Triton kernel,
   :mod:`.device_passes`).
2. *Selection* on ``[B, NB]`` (:func:`select`): psi at every bucket edge and each bucket's interior lower bound
   (:func:`.buckets.psi_interior_bound`), then ``bucket_rule.c``'s ``row_select`` with its bounded window: the
   buckets that may hold m*, the served group's ends s and e (both hypotheses), the residual index M and the row's
   first nonempty bucket.
3. *Compaction* (pass 2): the selected buckets' tokens into a static ``[B, K]`` buffer in token order
   (:func:`compact`: mask, cumsum, scatter; or one Triton kernel). A row with more than K such tokens is *spilled*:
   it takes the fallback. *Segments* (pass 3, ``partial``; note §6 remedy (a), ``bucket_rule.c``'s partial
   buckets): a draft's bucket not selected is not compacted; its drafts are tokens of their own and its other
   tokens are summed by segment between consecutive drafts (:func:`segments`, or one Triton kernel): on close
   drafts the drafts' buckets were nearly all of the compacted tokens (V = 128k, sigma 0.5, n = 8: 11,151 of 11,163).
4. *Compressed instance* ``[B, K + NB + 3n]``: the K token columns, then each unselected nonempty bucket as one entry
   (its sums; its key the lower edge of its ratio keys, which lies between its neighbours' keys; its ratio r the
   largest its tokens may have, 1 / that edge) and, with ``partial``, the drafts and their segments (a segment's
   keys lie between its two drafts' or its bucket's edge; ties by token id, a segment just after its draft), sorted
   by key: psi on its prefixes is psi of the full order at the matching prefixes. The rule on it is
   :mod:`.sortfree`'s cell rule (:class:`.sortfree._Group`, with its refinement of the widest cells) with each
   merged entry (bucket or segment) a position whose hazard is bounded, never exact (its exclusive sums (Qa, Pa),
   mass qb, ratios from the previous entry's r to its own: the bound of note §3; the token after it reads r_{j-1} =
   the entry's largest ratio, and the part of its hazard over [r_b, r] that this moves is inside the entry's bound,
   since the point after the entry lies between the same two fixed points). It is certified as
   ``bucket_rule.c``'s ``row_rule`` certifies with ``bound``: no merged entry's interior may hold m*, s, e or M
   (:func:`.buckets.psi_interior_bound` on its keys' range), s and the residual's drawn position are tokens, and the
   slot is certified by the cell rule's intervals with ``u[:, 0]``.
5. *Refinement* (``rounds``; every row, or ``refine_rows`` gathered rows): the failing buckets, and on an
   uncertified slot the ``REFINE`` widest bucket entries inside the served window, are selected too, and 3-4 run
   again. *Fallback*: a row still undecided or spilled takes the full device route (:func:`.chains.prefix` with the
   sort, :func:`.chains.tuple_rule`, :func:`.chains.sample`) on every row (``fallback_rows`` None: exact, and as
   costly as the old route) or on the first ``fallback_rows`` such rows gathered into an ``[F, V]`` batch (rows past
   them are counted in ``Decision.overflow`` and keep a guess: exact only while at most F rows a call need it). With
   ``fallback_rows="kernel"`` the undecided rows, however many, take the full-order rule inside one Triton kernel
   that returns at once on the others (:mod:`.device_fallback`): exact, static shapes, no host synchronisation, and
   its cost proportional to the rows that need it. This is ``get("optimal")``'s route on CUDA tensors
   (:data:`ROUTE`, :func:`.sampler.verify`). On host tensors ``refine_rows="gather"`` and ``fallback_rows="gather"``
   take exactly the rows that need them (a data-dependent shape, so a host synchronisation:
   :func:`_fallback_gathered`; tests pin the C route to this mode).

Rates (benchmarks/device_buckets_rates.py, B = 64 rows per point, n = 2, 4, 8, float32, K = V / 16): at V = 32k
and 128k, 1,149 of 1,152 loose and close (sigma 1, 0.5) rows certified at round 0, 2 at round 1, 1 took the fallback,
none spilled; rows of tied ratios (``lm_rows`` "ties": a few ratio values, so a few buckets of thousands of tokens)
all spill and take the fallback (a bucket of one ratio value needs no sort, its hazard being exact: not done). Against
the CPU route (``get("optimal").sample``, same uniforms) on 114,432 rows (V = 32k and 128k, loose, sigma 1 and 0.5 and
tied drafts, float32 / bfloat16 / float64; docs/OPTIMAL.md), 2 differ: tied float64 rows whose row sums torch and
numpy round an ulp apart, which reorders exact ratio ties (with the CPU route's row sums, ``inverse=``, they agree);
none of the 90,767 certified rows differs.

Targets filtered by top-k / top-p (p = 0 < q on most tokens, ratio +inf: the top bucket) take the host's strict
bound on that run (:func:`inf_runs`, ``bucket_rule.c``'s ``inf_run``): before it every such row spilled K and took
the fallback; on top-k 50, 1000 and top-p 0.9 rows at V = 32k, B = 64, n = 4 (CPU tensors) 189 of 192 rows are
certified at round 0 and 3 at round 1, none spilled (tests/optimal/test_filtered_targets.py).

One draft (n = 1) takes the closed form :func:`.chains.single_draft`, as the device route.
Cost: 3 passes over p and q with the Triton kernels (histogram, compaction, segments) plus the row sums, then
O(B (K + NB)) work: the sort of the compressed instance, psi, and the cell rule's roots on it. Bytes over the read
floor at B = 64, V = 128k, n = 2 / 4 / 8 (benchmarks/bytes_moved.py, meta tensors): 36 / 46 / 55x with the Triton
passes, fused roots, the refinement on 4 gathered rows and the fallback on 1 (30 / 32 / 34x without those rows),
against the device route's 285 / 828 / 1162x and rrs's 11 / 17 / 29x; with torch's passes 190 / 258 / 363x (the
segments' torch pass compares every token with each draft).
"""

from __future__ import annotations

from dataclasses import dataclass

from otlp.core import xp as X
from otlp.core.psi import ratio_keys, sorted_psi
from otlp.optimal import buckets as BK
from otlp.optimal import chains as C
from otlp.optimal import sortfree as SF

#: refinement rounds (the failing buckets selected) before the fallback.
ROUNDS = 1
#: bucket entries inside the served window that a refinement round sorts where the slot was not certified.
REFINE = 8
#: the options of the decode-loop route (:func:`.sampler.verify` on CUDA tensors where Triton imports, with the
#: Triton passes): the refinement round on 4 gathered rows (350 of 61,440 close-draft float32 rows at V = 32k need it,
#: docs/OPTIMAL.md), then every undecided row
#: in the fallback kernel
ROUTE = {"refine_rows": 4, "fallback_rows": "kernel"}
#: a padding entry's sort key: below every token's (p = q = 0 tokens have -1), so padding sorts last.
PAD_KEY = -2.0
#: a top bucket of p = 0 < q tokens takes the strict bound where its last token's q is at least TINY_Q 2^(n - 1) of
#: its mass Q_end, and Q_end <= 1/2 or Q_end - 1/2 >= TINY_MIX 2^(n - 1) V (``bucket_rule.c``'s ``inf_run``, ``TINY_Q``
#: and ``TINY_MIX``: then psi at the run's end is strictly its least, in floats too).
TINY_Q = 1e-13
TINY_MIX = 1e-15


def bits_for(V: int) -> int:
    """Bucket bits per octave for V tokens: one more than the host's (:func:`.buckets.bits_for`), at most 5 (2050
    buckets, AIR top-p's histogram size): the compressed instance is static, so finer buckets, which select fewer
    tokens on close drafts, keep more rows within K (at V = 32k and sigma = 0.5, 16 of 48 rows spilled K = V / 8 at 4
    bits, 1 at 5 bits)."""
    return min(BK.bits_for(V) + 1, 5)


def capacity(V: int) -> int:
    """The default compaction buffer K for V tokens: V / 16, at least 512 (and at most V)."""
    return min(V, max(512, V // 16))


@dataclass(frozen=True)
class Decision:
    """:func:`decide`'s result: ``tokens, index int64 [B]`` (as :func:`.chains.sample`), ``rounds int64 [B]`` the round
    that certified the row (0 .. ``rounds``; ``rounds + 1``: the fallback), ``spilled bool [B]`` the rows whose
    first round's selected tokens did not fit K, ``overflow int64 []`` the undecided rows past
    ``fallback_rows`` (0 when the fallback took every row), ``selected int64 [B]`` the tokens compacted per row in
    the first round (at most K)."""

    tokens: object
    index: object
    rounds: object
    spilled: object
    overflow: object
    selected: object


# -- pass 1 and pass 2 on torch ops ----------------------------------------------------------------------------------


def inverse_sums(p):  # noqa: ANN001, ANN201 - [B, V] any float dtype -> float64 [B, 1]
    """The reciprocal of each row's float64 sum, as :func:`.chains.normalised_rows` forms it (a zero row: 1)."""
    import torch

    total = p.to(torch.float64).sum(-1, keepdim=True)
    return 1.0 / total.where(total > 0, total.new_ones(()))


def inverse_sums_one_read(p):  # noqa: ANN001, ANN201 - [B, V] any float dtype -> float64 [B, 1]
    """:func:`inverse_sums` reading p once in its dtype (float64 accumulation, no float64 copy of the rows; the same
    sums on torch's CPU kernels, the same to rounding elsewhere)."""
    import torch

    total = p.sum(-1, keepdim=True, dtype=torch.float64)
    return 1.0 / total.where(total > 0, total.new_ones(()))


def _normalised(p, inv):  # noqa: ANN001, ANN202
    import torch

    return p.to(torch.float64) * inv  # [B, V] float64, the values of chains.normalised_rows


def token_buckets(P, Q, sc: BK.Scheme):  # noqa: ANN001, ANN201 - normalised float64 [B, V] -> (key, bucket) [B, V]
    """Each token's ratio key (:func:`otlp.core.psi.ratio_keys`) and its bucket of ``sc`` (as
    ``buckets.c``'s ``bucket_of``: the key clamped to [just below 2^-octaves, 2^octaves], the leading bits of
    its float64 pattern; p = q = 0 in the bottom bucket)."""
    key = ratio_keys(P, Q)  # [B, V]
    clamped = key.clamp(min=sc.below, max=sc.above)
    return key, sc.top - (clamped.view(_int64()) >> (52 - sc.bits))


def _int64():  # noqa: ANN202
    import torch

    return torch.int64


def histogram(p, q, inv_p, inv_q, sc: BK.Scheme):  # noqa: ANN001, ANN201
    """Pass 1 on torch ops: ``(count int64, Pb, Qb float64)`` ``[B, NB]`` per bucket of ``sc``, for rows ``p, q
    [B, V]`` (any float dtype) normalised by ``inv_p, inv_q [B, 1]``."""
    import torch

    P, Q = _normalised(p, inv_p), _normalised(q, inv_q)
    _, bucket = token_buckets(P, Q, sc)
    B = P.shape[0]
    count = torch.zeros(B, sc.NB, dtype=torch.int64, device=P.device).scatter_add_(1, bucket, torch.ones_like(bucket))
    Pb = torch.zeros(B, sc.NB, dtype=torch.float64, device=P.device).scatter_add_(1, bucket, P)
    Qb = torch.zeros(B, sc.NB, dtype=torch.float64, device=P.device).scatter_add_(1, bucket, Q)
    return count, Pb, Qb


def compact(p, q, inv_p, inv_q, sel, sc: BK.Scheme, K: int):  # noqa: ANN001, ANN201
    """Pass 2 on torch ops: the tokens of the buckets ``sel bool [B, NB]`` in token order, the first K of each row:
    ``(ids int64, P, Q float64)`` ``[B, K]`` (columns past a row's count: id -1, P = Q = 0) and ``count int64 [B]``
    (all of the row's selected tokens, K or more where it spilled)."""
    import torch

    P, Q = _normalised(p, inv_p), _normalised(q, inv_q)
    _, bucket = token_buckets(P, Q, sc)
    B, V = P.shape
    keep = sel.gather(1, bucket)  # [B, V]
    col = keep.cumsum(1)  # [B, V] 1 + the column of a kept token
    count = col[:, -1]
    dest = torch.where(keep & (col <= K), col - 1, K)  # [B, V] column K: discarded
    ids = torch.full((B, K + 1), -1, dtype=torch.int64, device=P.device)
    ids = ids.scatter_(1, dest, torch.arange(V, device=P.device).expand(B, V))[:, :K]
    real = ids >= 0
    at = ids.clamp(min=0)
    zero = torch.zeros((), dtype=torch.float64, device=P.device)
    return ids, torch.where(real, P.gather(1, at), zero), torch.where(real, Q.gather(1, at), zero), count


@dataclass(frozen=True)
class Passes:
    """The passes over ``[B, V]``: ``inverse(p)`` the rows' normalisation (:func:`inverse_sums`),
    ``histogram(p, q, inv_p, inv_q, sc)``, ``compact(p, q, inv_p, inv_q, sel, sc, K)`` and ``segments(p, q, inv_p,
    inv_q, part, sc, dr)`` with the signatures and values of :func:`histogram`, :func:`compact` and :func:`segments`
    (run only with ``partial``)."""

    inverse: object
    histogram: object
    compact: object
    segments: object


# -- the selection on [B, NB] ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """psi at the bucket edges ``psi [B, NB + 1]``, each bucket's interior bound ``f`` and the bound ``low`` (inside
    and at both ends) ``[B, NB]``; ``inf_ok bool [B, 1]`` the rows whose top
    bucket is a run of p = 0 < q tokens with the strict bound (:func:`inf_runs`)."""

    Pb: object
    Qb: object
    psi: object
    f: object
    low: object
    inf_ok: object


def inf_runs(p, q, inv_q, Pb, Qb, n: int):  # noqa: ANN001, ANN201 - [B, V] rows, [B, 1], [B, NB] sums -> bool [B, 1]
    """The rows whose top bucket holds only p = 0 < q tokens (ratio +inf; a target filtered by top-k / top-p) and
    whose last such token by id has q above rounding (``TINY_Q``, ``TINY_MIX``): along that run psi falls strictly
    (P constant, each step adds q > 0 to Q), and with the last step above rounding psi at the run's end is below every
    prefix inside it in floats too, so none of m*, s, e, M lies inside it, a draft inside it is below s or is the
    top draw (then every draw has p = 0 and the row rejects): the proof is ``bucket_rule.c``'s at ``inf_run``. One
    read of p and q (the last p = 0 < q token of each row)."""
    import torch

    V = p.shape[1]
    ids = torch.arange(V, device=p.device)[None, :]
    last = torch.where((p == 0) & (q > 0), ids, -1).amax(-1, keepdim=True)  # [B, 1]
    q_last = _normalised(q.gather(1, last.clamp(min=0)), inv_q)  # [B, 1]
    scale, Qe = 2.0 ** (n - 1), Qb[:, :1]
    return ((Pb[:, :1] == 0) & (Qe > 0) & (last >= 0) & (q_last >= TINY_Q * scale * Qe)
            & ((Qe <= 0.5) | (Qe - 0.5 >= TINY_MIX * scale * V)))


def level(Pb, Qb, n: int, sc: BK.Scheme, inf_ok=None) -> Level:  # noqa: ANN001
    """:class:`Level` of the bucket sums ``Pb, Qb [B, NB]`` (in decreasing-ratio order); ``inf_ok [B, 1]``
    (:func:`inf_runs`, default none): those rows' top bucket bounded strictly, just above psi at its end."""
    import torch

    NB = Pb.shape[1]
    LO, HI = (torch.as_tensor(x, device=Pb.device) for x in (sc.LO, sc.HI))  # (float64 [NB])
    Pa, Qa, _, psi = sorted_psi(Pb, Qb, n)  # [B, NB + 1]
    f = BK.psi_interior_bound(Pa[:, :NB], Qa[:, :NB], Pb, Qb, LO, HI, n) - BK.BOUND_MARGIN
    if inf_ok is None:
        inf_ok = torch.zeros_like(Pb[:, :1], dtype=torch.bool)
    strict = torch.nextafter(psi[:, 1:2], psi.new_tensor(float("inf")))
    f = torch.cat([torch.where(inf_ok, strict, f[:, :1]), f[:, 1:]], 1)
    low = X.minimum(X.minimum(psi[:, :-1], psi[:, 1:]), f)
    return Level(Pb=Pb, Qb=Qb, psi=psi, f=f, low=low, inf_ok=inf_ok)


def select(lv: Level, draft_buckets, u1):  # noqa: ANN001, ANN201
    """``bool [B, NB]``: the buckets to compact, ``bucket_rule.c``'s ``row_select`` with ``bound`` (the drafts'
    buckets not selected: :func:`_attempt` adds them, or sums them by segment) as ``[B, NB]`` operations, for the
    drafts' buckets ``[B, n]`` and the residual's uniforms ``u1 [B]``. The certificate decides either way; the
    selection only makes it likely to pass."""
    import torch

    psi, f, low = lv.psi, lv.f, lv.low
    B, NB = f.shape
    inf = psi.new_full((), float("inf"))  # a fill, not a host-to-device copy (CUDA graphs capture no such copy)
    idx = X.arange_like(psi, NB + 1)[None, :]  # [1, NB + 1] edges
    j = idx[:, :NB]  # [1, NB] buckets
    best = psi.amin(-1, keepdim=True)  # [B, 1] >= psi*
    cand = f <= best  # may hold m* (or tie it)
    b_star = X.argmin_rows(psi)[:, None]
    m_lo = torch.minimum(b_star, torch.where(cand, j, NB).amin(-1, keepdim=True))
    m_hi = torch.maximum(b_star, torch.where(cand, j + 1, 0).amax(-1, keepdim=True))
    lowest = torch.minimum(best, torch.where(cand, f, inf).amin(-1, keepdim=True))  # <= psi*
    keep = (1.0 - u1)[:, None]
    tau_lo, tau_hi = lowest * keep, best * keep  # tau = psi* (1 - u1) lies between
    last = torch.where(psi <= tau_lo, idx, 0).amax(-1, keepdim=True)  # M >= last
    sel = cand | ((j >= last) & (low <= tau_hi))
    d = draft_buckets.amax(-1, keepdim=True)  # [B, 1] the top draw's bucket
    psi_d = X.take(X.cummin(psi), d)  # the least psi at an edge up to d's start
    after = torch.where(idx > d, psi, inf).amin(-1, keepdim=True)  # the least psi at an edge after d
    inner, outer = d < m_lo, m_hi <= d
    sel |= inner & (j < d) & (f <= psi_d)  # s, inner
    sel |= outer & (j > d) & (f <= after)  # e, outer
    # the other end: inner, e lies before the first edge after d below s_lo (<= psi_s), where the inside may fall
    # below psi_d; outer, s lies at or after the last edge up to d at or below e_lo (<= psi_e)
    s_lo = torch.minimum(psi_d, torch.where((j < d) & (f <= psi_d), f, inf).amin(-1, keepdim=True))
    stop = X.first_true(X.pad_last((idx > d) & (psi < s_lo), True))[:, None]  # [B, 1]
    sel |= inner & (j > d) & (j < stop) & (low < psi_d)
    e_lo = torch.minimum(after, torch.where((j > d) & (f <= after), f, inf).amin(-1, keepdim=True))
    i_s = torch.where((idx <= d) & (psi <= e_lo), idx, 0).amax(-1, keepdim=True)
    sel |= outer & (j >= i_s) & (j < d) & (low <= after)
    nonempty = ((lv.Pb != 0) | (lv.Qb != 0)) & ~(lv.inf_ok & (j == 0))  # (after a p = 0 run: s = its end reads it)
    first = X.first_true(X.pad_last(nonempty[:, :-1], True))[:, None]  # the row's first position (s = 0 reads it)
    sel |= j == first
    return sel


# -- the compressed instance and the rule on it -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Attempt:
    """One try on every row: ``slot [B]`` (0 .. n - 1 a draft, n the residual), ``token [B]``, ``ok [B]`` certified,
    ``bad bool [B, NB]`` the unselected buckets to select for the next try, ``count [B]`` the row's selected
    tokens."""

    token: object
    slot: object
    ok: object
    bad: object
    count: object


@dataclass(frozen=True)
class Draws:
    """The drafted tokens of each row as the compressed instance reads them (``[B, n]``): ``w`` ids, ``P, Q`` masses,
    ``key`` ratio keys, ``bucket``; ``rank`` the place among the row's draws in the ratio order (by decreasing key,
    then id), ``first`` the first occurrence of its token among the drafts."""

    w: object
    P: object
    Q: object
    key: object
    bucket: object
    rank: object
    first: object


def draws(p, q, inv_p, inv_q, w, sc: BK.Scheme) -> Draws:  # noqa: ANN001
    """:class:`Draws` of drafts ``w [B, n]`` in rows ``p, q`` (normalised by ``inv_p, inv_q``)."""
    P, Q = _normalised(p.gather(1, w), inv_p), _normalised(q.gather(1, w), inv_q)  # [B, n]
    key, bucket = token_buckets(P, Q, sc)
    ka, kb = key[:, :, None], key[:, None, :]
    before = (ka > kb) | ((ka == kb) & (w[:, :, None] < w[:, None, :]))  # [B, n, n] draw a before draw b
    same = w[:, :, None] == w[:, None, :]
    ks = X.arange_like(w, w.shape[1])
    first = X.first_true(same) == ks[None, :]
    return Draws(w=w, P=P, Q=Q, key=key, bucket=bucket, rank=before.sum(1), first=first)


def segments(p, q, inv_p, inv_q, part, sc: BK.Scheme, dr: Draws):  # noqa: ANN001, ANN201
    """The drafts' unsorted buckets' other tokens summed by segment, on torch ops: ``(P, Q float64, count int64)``
    ``[B, 2n]``. The buckets ``part bool [B, NB]`` each hold drafts (``dr``); entry k < n sums the tokens of draft k's
    bucket after it and before the bucket's next draft in the ratio order, entry n + k those before draft k where it
    is the first of its bucket (empty entries: 0). A token lies after draft d where key_d > key, or key_d = key and
    d < its id (the order's stable ties)."""
    import torch

    P, Q = _normalised(p, inv_p), _normalised(q, inv_q)
    key, bucket = token_buckets(P, Q, sc)
    B, V = P.shape
    n = dr.w.shape[1]
    tok = torch.arange(V, device=P.device)[None, :]
    act = dr.first & part.gather(1, dr.bucket)  # [B, n] the drafts of unsorted buckets, once each
    best = torch.full((B, V), -1, dtype=torch.int64, device=P.device)  # the rank of the last draft before
    slot = torch.full((B, V), 2 * n, dtype=torch.int64, device=P.device)  # 2n: no segment
    head = slot.clone()
    is_draw = torch.zeros(B, V, dtype=torch.bool, device=P.device)
    for k in range(n):  # the n drafts, not tokens
        inb = act[:, k:k + 1] & (bucket == dr.bucket[:, k:k + 1])  # [B, V]
        kd = dr.key[:, k:k + 1]
        bef = inb & ((kd > key) | ((kd == key) & (dr.w[:, k:k + 1] < tok)))
        later = bef & (dr.rank[:, k:k + 1] > best)
        best = torch.where(later, dr.rank[:, k:k + 1], best)
        slot = torch.where(later, k, slot)
        head = torch.where(inb & ~bef & (head == 2 * n), n + k, head)  # (refined below to the bucket's first)
        is_draw |= tok == dr.w[:, k:k + 1]
    # a token before every draft of its bucket: the head of the bucket's first draft (its least rank)
    first_k = _first_of_bucket(dr, act)  # [B, n] the bucket's first active draft, by draft
    head = torch.where(head < 2 * n, n + first_k.gather(1, (head - n).clamp(0, n - 1)), head)
    slot = torch.where(best >= 0, slot, head)
    slot = torch.where(is_draw | ~part.gather(1, bucket), 2 * n, slot)
    z = torch.zeros(B, 2 * n + 1, dtype=torch.float64, device=P.device)
    count = torch.zeros(B, 2 * n + 1, dtype=torch.int64, device=P.device).scatter_add_(1, slot, torch.ones_like(slot))
    return z.scatter_add(1, slot, P)[:, :-1], z.scatter_add(1, slot, Q)[:, :-1], count[:, :-1]


#: the passes on torch ops (any device)
TORCH = Passes(inverse_sums, histogram, compact, segments)


def _first_of_bucket(dr: Draws, act):  # noqa: ANN001, ANN202 - [B, n] -> [B, n]
    """For each draft, the index of the first active draft (least rank) of its bucket (itself where none)."""
    import torch

    n = dr.w.shape[1]
    same = (dr.bucket[:, :, None] == dr.bucket[:, None, :]) & act[:, None, :]  # [B, k, j] j active in k's bucket
    score = torch.where(same, dr.rank[:, None, :] * n + X.arange_like(dr.w, n)[None, None, :], n * n + n)
    return torch.where(same.any(-1), score.argmin(-1), X.arange_like(dr.w, n)[None, :])


def _attempt(p, q, inv_p, inv_q, dr: Draws, U, lv: Level, sel, sc: BK.Scheme, K: int,  # noqa: ANN001
             passes: Passes, cell: int | None, roots, partial: bool) -> _Attempt:  # noqa: ANN001
    import torch

    w = dr.w
    B, n = w.shape
    NB = sc.NB
    dev = lv.psi.device
    if not partial:
        sel = sel.scatter(1, dr.bucket, True)
    ids, Pt, Qt, count = passes.compact(p, q, inv_p, inv_q, sel, sc, K)  # [B, K] x 3, [B]
    real = ids >= 0
    inf = float("inf")
    f64 = {"dtype": torch.float64, "device": dev}
    KEY, LO, HI = (torch.as_tensor(x, device=dev).expand(B, -1) for x in (sc.KEY, sc.LO, sc.HI))
    bucket_ids = X.arange_like(ids, NB)[None, :].expand(B, -1)
    # columns: the K tokens; each unselected nonempty bucket one entry (its sums, its key the lower edge of its
    # keys, its ratio the largest its tokens may have, its keys' range for the interior bound); with ``partial``
    # the drafts of unsorted buckets (once each) and their buckets' segments (:func:`segments`)
    part = torch.zeros_like(sel).scatter(1, dr.bucket, True) & ~sel  # the drafts' buckets not sorted (partial)
    runs = ~sel & ~part & ((lv.Pb != 0) | (lv.Qb != 0))  # [B, NB]
    q_pos = Qt > 0
    cols = {  # name -> [tokens, buckets, ...] pieces
        "P": [Pt, torch.where(runs, lv.Pb, 0.0)], "Q": [Qt, torch.where(runs, lv.Qb, 0.0)],
        "key": [torch.where(real, ratio_keys(Pt, Qt), PAD_KEY), torch.where(runs, KEY, PAD_KEY)],
        "tie": [ids.double(), torch.zeros(B, NB, **f64)],
        "r": [torch.where(q_pos, 1.0 / (torch.where(q_pos, Qt, 1.0) / Pt), 0.0), torch.where(runs, 1.0 / LO, 0.0)],
        "merged": [torch.zeros_like(real), runs],
        "lo": [torch.zeros(B, K, **f64), LO], "hi": [torch.zeros(B, K, **f64), HI],
        "bucket": [torch.zeros_like(ids), bucket_ids], "id": [ids, torch.full_like(bucket_ids, -1)],
    }
    w2 = torch.searchsorted(torch.where(real, ids, torch.iinfo(torch.int64).max), w.contiguous()).clamp(max=K - 1)
    if partial:
        act = dr.first & part.gather(1, dr.bucket)  # [B, n]
        Ps, Qs, cs = passes.segments(p, q, inv_p, inv_q, part, sc, dr)  # [B, 2n]
        seg = cs > 0
        # the next active draft after each in its bucket: the largest key below it (else the bucket's lower edge)
        same = (dr.bucket[:, :, None] == dr.bucket[:, None, :]) & act[:, None, :]
        after = same & (dr.rank[:, None, :] > dr.rank[:, :, None])  # [B, k, j] j after k in k's bucket
        lo_after = torch.maximum(LO.gather(1, dr.bucket), torch.where(after, dr.key[:, None, :], -inf).amax(-1))
        hi_b = HI.gather(1, dr.bucket)
        wd = w.double()
        cols["P"] += [torch.where(act, dr.P, 0.0), torch.where(seg, Ps, 0.0)]
        cols["Q"] += [torch.where(act, dr.Q, 0.0), torch.where(seg, Qs, 0.0)]
        cols["key"] += [torch.where(act, dr.key, PAD_KEY), torch.where(seg, dr.key.repeat(1, 2), PAD_KEY)]
        cols["tie"] += [wd, torch.cat([wd + 0.5, wd - 0.5], 1)]
        rq = dr.Q > 0
        cols["r"] += [torch.where(rq, 1.0 / (torch.where(rq, dr.Q, 1.0) / dr.P), 0.0),
                      torch.where(seg, 1.0 / torch.cat([lo_after, dr.key], 1), 0.0)]
        cols["merged"] += [torch.zeros_like(act), seg]
        cols["lo"] += [torch.zeros(B, n, **f64), torch.cat([lo_after, dr.key], 1)]
        cols["hi"] += [torch.zeros(B, n, **f64), torch.cat([torch.minimum(hi_b, dr.key), hi_b], 1)]
        cols["bucket"] += [dr.bucket, dr.bucket.repeat(1, 2)]
        cols["id"] += [torch.where(act, w, -1), torch.full((B, 2 * n), -1, dtype=torch.int64, device=dev)]
        first_at = X.first_true(w[:, :, None] == w[:, None, :])  # [B, n] the first occurrence of each draft
        w2 = torch.where(part.gather(1, dr.bucket), K + NB + first_at, w2)
    col = {name: torch.cat(pieces, 1) for name, pieces in cols.items()}  # [B, W] each, by column
    W = col["P"].shape[1]
    # the ratio order of the compressed instance: by decreasing key, ties by the tie-break (token ids; a segment
    # just after or before its draft)
    by_tie = X.stable_descending(-col["tie"])
    order = X.take(by_tie, X.stable_descending(X.take(col["key"], by_tie)))  # [B, W] column at each position
    pre = C.prefix(col["P"], col["Q"], n, order=order)
    at = {name: X.take(x, order) for name, x in col.items()}  # [B, W] each, by position
    ratio, merged = at["r"], at["merged"]
    spilled = count > K
    g = SF._Group(pre, w2, cell or SF.cell_size(W), roots, ratio=ratio, merged=merged)
    lo, hi, exact = g.cell_bounds()
    slot, certified = g.certify(lo, hi, U[:, :1])
    for _ in range(SF.ROUNDS):  # the cell rule's own refinement: its widest cells position by position
        lo, hi, exact = g.refine(lo, hi, exact, SF.REFINE)
        s2, ok2 = g.certify(lo, hi, U[:, :1])
        slot, certified = torch.where(certified, slot, s2), certified | ok2
    # the certificate (bucket_rule.c's row_rule with bound), by compressed position j
    j = X.arange_like(order, W)[None, :]
    psi = pre.psi
    m = pre.m_star[:, None]
    s, e, top = g.s, g.e, g.top
    Pa = X.padded_cumsum(pre.ps)[:, :W]
    low = BK.psi_interior_bound(Pa, pre.prefix_q[:, :W], pre.ps, pre.qs, at["lo"], at["hi"], n) - BK.BOUND_MARGIN
    # one ratio in the entry (its keys' range a point: a segment between drafts of equal keys): psi is concave along
    # it, so at least its value at an end; a NaN bound (none computed) reads as no bound
    low = torch.where(at["lo"] >= at["hi"], X.minimum(psi[:, :-1], psi[:, 1:]) - BK.BOUND_MARGIN, low)
    # a run of p = 0 < q tokens (the top bucket where lv.inf_ok, or a segment of it): inside strictly above its end
    zero_run = merged & lv.inf_ok & (at["bucket"] == 0) & (at["P"] == 0) & (at["Q"] > 0)
    low = torch.where(zero_run, torch.nextafter(psi[:, 1:], psi.new_tensor(inf)), low)
    low = torch.where(merged, low.nan_to_num(-inf), inf)
    ends = X.minimum(psi[:, :-1], psi[:, 1:])
    # the top draw of p = 0 < q: every draw has p = 0 (all precede it), the row rejects; no group to read (where u0
    # >= SF.MARGIN: the reference's float chain may leave those draws weights of rounding that a u0 below them picks)
    dead = (lv.inf_ok & (X.take(at["P"], top) == 0) & (X.take(at["Q"], top) > 0) & (U[:, :1] >= SF.MARGIN))[:, 0]
    slot, certified = torch.where(dead, n, slot), certified | dead

    def below(thr):  # noqa: ANN001, ANN202 - some prefix inside a merged entry may be < thr
        return merged & (X.minimum(ends, low) < thr)

    def at_or_below(thr):  # noqa: ANN001, ANN202 - some prefix inside a merged entry may be <= thr
        return merged & ((ends < thr) | (low <= thr))

    psi_star, v = C.residual_threshold(pre, U[:, 1:])  # [B, 1]
    bad = torch.where(j < m, at_or_below(psi_star), below(psi_star))
    live = ~dead[:, None]
    bad |= live & merged & (j == s)
    inside = (j > s) & (j < top)
    rest = (j > top) & (j < e)
    psi_s, psi_e = g.psi_s, g.psi_e
    inner = top < m
    bad |= live & inner & ((at_or_below(psi_s) & (j < s)) | (below(psi_s) & (inside | rest)))
    bad |= live & ~inner & ((at_or_below(psi_e) & (inside | rest)) | (below(psi_e) & (j >= e)))
    rejected = slot == n
    M = C.residual_index(pre, U[:, 1:])[:, None]  # [B, 1]
    bad |= rejected[:, None] & merged & (j >= M) & ((ends - psi_star < v) | (low - psi_star <= v))
    drawn_id = X.take(at["id"], M.clamp(max=W - 1))[:, 0]  # [B] the token at position M (-1: not a token)
    ok = certified & ~bad.any(1) & ~spilled & (~rejected | (drawn_id >= 0))
    token = torch.where(rejected, drawn_id, X.take(w, slot.clamp(max=n - 1)[:, None])[:, 0])
    # what the next try selects: the failing entries' buckets; on an uncertified slot, the buckets of the REFINE
    # merged entries inside the window of widest bound (by its first-order width, the ratio span times the mass)
    span = torch.where(merged & inside, pre.qs * (ratio - X.pad_first(ratio[:, :-1], 0.0)), -1.0)
    widest = span.topk(min(REFINE, W), dim=1)
    wide = torch.zeros_like(merged).scatter_(1, widest.indices, widest.values >= 0)
    fail = bad | (~certified[:, None] & wide & live)
    bad = torch.zeros(B, NB, dtype=torch.int64, device=dev).scatter_add_(1, at["bucket"], fail.long()) > 0
    return _Attempt(token=token, slot=slot, ok=ok, bad=bad, count=count)


def verify(p, q, drafts, u, **options):  # noqa: ANN001, ANN003, ANN201 - tensors
    """``(tokens int64 [B], accepted_index int64 [B])`` for ``p, q [B, V]`` (any float dtype, normalised as the device
    route does), ``drafts int64 [B, n]``, ``u [B, 2]``: :func:`decide`."""
    d = decide(p, q, drafts.long(), u.double(), **options)
    return d.tokens, d.index


def decide(p, q, w, U, *, bits: int | None = None, octaves: int = BK.OCTAVES, K: int | None = None,  # noqa: ANN001
           rounds: int = ROUNDS, refine_rows: int | str | None = None, fallback_rows: int | str | None = None,
           fallback: bool = True, passes: Passes = TORCH, cell: int | None = None, roots=None, selection=None,  # noqa: ANN001
           partial: bool = True, inverse=None) -> Decision:  # noqa: ANN001
    """The rule (module docstring) on rows ``p, q [B, V]`` (any float dtype), drafts ``w int64 [B, n]`` and uniforms
    ``U float64 [B, 2]``. ``bits``: the buckets' bits per octave (default :func:`bits_for`), over ``octaves`` each
    side of 1 (:func:`.buckets.scheme`; :func:`.buckets.zoom` is one with ``octaves=1``); ``K``: the
    compaction buffer (default :func:`capacity`); ``refine_rows``: the rows each refinement round takes (None: every
    row; else the first ``refine_rows`` undecided rows, gathered; the others go on to the fallback);
    ``fallback_rows``: None, a number of gathered rows, ``"kernel"`` or ``"gather"`` (module docstring, 5.);
    ``passes``: :data:`TORCH` or the Triton kernels (:data:`.device_passes.TRITON`); ``cell``, ``roots``: as
    :func:`.sortfree.decide` on the compressed instance; ``fallback=False`` leaves undecided rows at the certificate's
    best guess (tests); ``selection``: the buckets of the first try ``bool [B, NB]`` (tests: fewer buckets than
    :func:`select` takes, so that runs are bounded). ``fallback_rows="gather"`` (host tensors: it reads how many rows
    are undecided, a host synchronisation and a data-dependent shape) gives the fallback exactly the undecided rows,
    gathered (:func:`_fallback_gathered`), and ``refine_rows="gather"`` likewise the refinement rounds (no round where
    every row is certified). ``inverse``: the reciprocals of the rows' float64 sums ``(inv_p, inv_q)`` ``[B, 1]``
    where the caller has them (the CPU sampler's, :func:`.buckets.inverse_sums`), else ``passes.inverse``."""
    import torch

    B, V = p.shape
    n = w.shape[1]
    inv_p, inv_q = (passes.inverse(p), passes.inverse(q)) if inverse is None else inverse  # [B, 1]
    if n == 1:  # the closed form needs no order (chains.single_draft), as the device route
        tokens, index = C.single_draft(_normalised(p, inv_p), _normalised(q, inv_q), w, U)
        zero = torch.zeros(B, dtype=torch.int64, device=p.device)
        return Decision(tokens.long(), index.long(), zero, zero.bool(), zero.sum(), zero)
    sc = BK.scheme(bits_for(V) if bits is None else bits, octaves)
    K = min(capacity(V) if K is None else K, V)
    roots = roots or C.slot_mass
    _, Pb, Qb = passes.histogram(p, q, inv_p, inv_q, sc)  # [B, NB] x 3 (the counts: unused here)
    lv = level(Pb, Qb, n, sc, inf_runs(p, q, inv_q, Pb, Qb, n))
    dr = draws(p, q, inv_p, inv_q, w, sc)  # [B, n] the drafts' masses, keys and buckets
    sel = select(lv, dr.bucket, U[:, 1]) if selection is None else selection
    got = _attempt(p, q, inv_p, inv_q, dr, U, lv, sel, sc, K, passes, cell, roots, partial)
    token, slot, ok, bad, count = got.token, got.slot, got.ok, got.bad, got.count
    done = torch.zeros(B, dtype=torch.int64, device=p.device)
    for r in range(1, rounds + 1):  # static shapes: a certified row keeps its first answer
        sel = sel | bad
        if refine_rows is None:  # every row tries again (views, not copies)
            pick = slice(None)
        elif refine_rows == "gather":  # exactly the undecided rows (host: a data-dependent shape)
            pick = (~ok).nonzero()[:, 0]
            if pick.numel() == 0:
                break
        else:  # the first refine_rows undecided rows, gathered
            pick = torch.sort(ok.to(torch.int8), stable=True).indices[:min(refine_rows, B)]
        sub = Level(*(x[pick] for x in (lv.Pb, lv.Qb, lv.psi, lv.f, lv.low, lv.inf_ok)))
        sub_dr = Draws(*(x[pick] for x in (dr.w, dr.P, dr.Q, dr.key, dr.bucket, dr.rank, dr.first)))
        got = _attempt(p[pick], q[pick], inv_p[pick], inv_q[pick], sub_dr, U[pick], sub, sel[pick], sc, K, passes,
                       cell, roots, partial)
        new = got.ok & ~ok[pick]  # [F] rows certified now
        token, slot, done, bad = token.clone(), slot.clone(), done.clone(), torch.zeros_like(bad)
        token[pick] = torch.where(new, got.token, token[pick])
        slot[pick] = torch.where(new, got.slot, slot[pick])
        done[pick] = torch.where(new, r, done[pick])
        bad[pick] = got.bad
        ok = ok.clone()
        ok[pick] = ok[pick] | new
    done = torch.where(ok, done, rounds + 1)
    index = torch.where(slot < n, slot, -1)
    spilled = count > K
    overflow = done.new_zeros(())
    if fallback and fallback_rows == "kernel":
        from otlp.optimal import device_fallback

        token, index = device_fallback.decide_rows(p, q, inv_p, inv_q, w, U, ~ok, token, index)
    elif fallback and fallback_rows == "gather":
        token, index = _fallback_gathered(p, q, inv_p, inv_q, w, U, ~ok, token, index)
    elif fallback:
        token, index, overflow = _fallback(p, q, inv_p, inv_q, w, U, ~ok, token, index, fallback_rows)
    return Decision(token, index, done, spilled, overflow, count.clamp(max=K))


def _fallback(p, q, inv_p, inv_q, w, U, todo, tokens, index, rows: int | None):  # noqa: ANN001, ANN202
    """The full device route (:func:`.chains.prefix` with the ratio sort, :func:`.chains.tuple_rule`,
    :func:`.chains.sample`) where ``todo [B]``: on every row (``rows`` None) or on the first ``rows`` rows of ``todo``
    gathered into an ``[F, V]`` batch (static shapes either way: :func:`.sortfree.full_rule_where`)."""
    def full(pick):  # noqa: ANN001, ANN202
        pre = C.prefix(_normalised(p[pick], inv_p[pick]), _normalised(q[pick], inv_q[pick]), w.shape[1])
        accept, reject = C.tuple_rule(pre, w[pick], steps=C.NEWTON_STEPS)
        return C.sample(pre, accept, reject, w[pick], U[pick])

    return SF.full_rule_where(full, todo, tokens, index, rows)


def _fallback_gathered(p, q, inv_p, inv_q, w, U, todo, tokens, index):  # noqa: ANN001, ANN202
    """The host mode of the fallback: :func:`_fallback` on exactly the rows of ``todo [B]``, gathered into an
    ``[F, V]`` batch (F read on the host: a data-dependent shape, for CPU tensors), ``(tokens, index)`` new tensors."""
    pick = todo.nonzero()[:, 0]  # [F]
    if pick.numel() == 0:
        return tokens, index
    t, i, _ = _fallback(p[pick], q[pick], inv_p[pick], inv_q[pick], w[pick], U[pick], todo[pick], tokens[pick],
                        index[pick], None)
    tokens, index = tokens.clone(), index.clone()
    tokens[pick], index[pick] = t, i
    return tokens, index
