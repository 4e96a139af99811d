"""The CPU sampler's partial order: the class-chain rule on a few sorted ratio buckets, certified by bounds on psi.

The tuple rule and its draw (:func:`.chains.tuple_rule`, :func:`.chains.sample`) read the decreasing-q/p order of a
row only at the first argmin m* of psi, at the drafted tokens' positions, on the served group (s, e] of the top draw
(the positions s .. top and psi at s and e), and at the residual index M (:func:`.chains.residual_index`). A full sort
of the row was the largest single cost of the CPU route (issue 19). Here instead, for rows ``P, Q: float64 [B, V]``:

1. *Buckets* (:class:`Scheme`). Each token goes to a bucket by the leading bits of its ratio's float64 pattern
   (monotone in the ratio): :func:`bits_for` bits per octave over [2^-OCTAVES, 2^OCTAVES), one bucket above it (+inf
   included) and one below it (0 and the p = q = 0 tokens included), numbered by decreasing ratio. The bucket sums
   (Pb, Qb) give psi exactly at every bucket boundary (:func:`otlp.core.psi.sorted_psi` on them, in bucket order).
2. *Bounds.* Every prefix ending inside bucket j has psi >= min(psi at the bucket's two ends, f_j)
   (:func:`psi_interior_bound`: psi over the masses a bucket of ratios in [lo, hi) allows, GR Lemma 6.3), and psi
   > t there when both ends are >= t and f_j > t (the bound is concave between each end and f_j's point). f_j is
   taken ``BOUND_MARGIN`` lower, for rounding.
3. *Selection* (:func:`.device_buckets.select`). Sorted token by token: the buckets whose inside may reach the best
   boundary psi (m*); the drafted tokens' buckets; when the top draw's bucket d lies certainly before m* (after it), the
   buckets before d whose inside may reach psi at d's start (after d, the least psi after d), which bound the
   served group's s (e); and the buckets that may hold the residual threshold tau = psi* (1 - u) (after the last
   boundary certainly at or below it).
4. *Compressed instance.* The selected buckets' tokens one by one and each run of unselected buckets as one entry
   (its sums; its sort key the lowest edge of its buckets, which lies between its neighbours' ratios), sorted, then
   the same chains code on it: psi at its prefixes is psi of the full order at the matching prefixes (the sums run
   in another order: equal to rounding).
5. *Certificate*. Nothing inside a merged run may change an answer: no prefix inside a run
   before m* at or below psi* (the first argmin), none after it below; the served group's positions s .. top hold no
   run, and no run's inside reaches psi_s (inner group) or psi_e (outer group) where that would move s or e; for a
   rejected tuple, no run's inside at or after M at or below tau, and position M a token. A row that fails gets the
   failing runs' buckets sorted too and is tried once more (``ATTEMPTS``); then the caller takes the full sort. A
   row whose compressed instance would hold more than 1 / ``FULL_SORT_SHARE`` of its tokens (a draft close to the
   target: its ratios fill a few octaves' buckets) takes the full sort without a try (some such
   rows, and rows that failed every try, take it in the call, :func:`whole_rows`: every bucket sorted and no run
   merged, which is its full order).

*Bounded window* (``BOUND``; issue 41). On a draft close to its target the served window
s .. top holds thousands of tokens, and requiring each to be a sorted token (5.) turned the row into a full sort
(4.5-26x RRS at V = 32k-128k). With ``BOUND``: the drafted tokens' buckets are gathered but not sorted (each draft
is a token of the compressed instance, the rest of its bucket one run before, between and after the drafts, with
an interior bound of its own); the s candidates of an inner group are the buckets whose bound reaches the least
boundary psi before the top draw's bucket (not psi at it), the buckets where the group's other end may lie are
selected too, and the row's first bucket; and a merged run may lie inside (s, top): its share of the chain's
hazard is bounded from its buckets' sums and ratio edges (design note sortfree-rule.md section 3, four roots a
bucket), the slot certified where ``u[:, 0]`` lies outside the bounds' uncertainty by 1e-9, else the row is retried
with those runs sorted (``bucket_rule.c``'s ``window_bound``). The same tokens and slots as without it
(tests/optimal/test_bounded_window.py; benchmarks/sortfree_agreement.py ``--route host``: 0 of 105,408 LM rows
differ).

*Runs of p = 0 < q* (the native route and :mod:`.device_buckets`; issue 41). A target filtered by top-k / top-p
before verification has p = 0 < q on most tokens: ratio +inf, the top bucket, whose interior bound above is only
psi at its end (its infimum, not attained), so the run stayed a candidate for m* and s and was sorted whole (top-k
50 at V = 32k, B = 64, n = 4, one thread: 40 ms against RRS's 3.9). Along the run psi falls strictly (P constant,
each step adds q > 0), so none of m*, s, e, M lies inside it; where its last token's q is above rounding the run
takes a strict bound (just above psi at its end), drafts in it enter first with one run of the rest, and a top draw
in it rejects (the proof and the rounding conditions: ``bucket_rule.c``'s ``inf_run``;
tests/optimal/test_filtered_targets.py).

*Crowded rows* (the native route). A draft within a percent of its target (1 - TV above 0.99) has its ratios within
a few percent of 1, in one or two of :func:`bits_for`'s buckets (4.4% wide at V = 32k), so its compressed instance
would hold most of the row: such rows took the full sort, 16-35x RRS (V = 32k-128k, B = 64, sigma 0.01 and
0.001, one thread). The kernel now leaves a row before its first gather where ``CROWD`` of 192 tokens spread over it
lie in buckets that gather would take (status ``CROWDED``; a row the sample misses is left after the gather, status
0, as before), and :func:`verify_chunks` tries those rows again on :func:`zoom`'s scheme: one octave each side of 1 in
about V / 32 buckets an octave, where they are certified (the sampler's rows at V = 32k and 128k, sigma 0.01 and
0.001: every one, at 2.1-6.1x RRS; benchmarks/verifiers.py ``--drafts 0.01 0.001 --rates``, column ``zoom``). A row
left before its gather that the finer buckets leave too takes the first scheme once more without the sample, as
before; exact ties (p = q) fill one bucket of any scheme and take their full order.

The route runs where :mod:`otlp.backend.native`'s kernels are built: a row takes all five steps at once in
``otlp_bucket_rule`` (``otlp/backend/native/bucket_rule.c``, one row at a time, its arrays in cache; from
``THREADS_MIN`` entries a call's rows taken one at a time by an OpenMP team of torch's thread count). Certified rows
draw the full sort's token and slot for the same uniforms (tests/optimal/test_buckets.py, on every instance family of
the exact tests and on LM rows), and the kernel is pinned token for token to the bucket rule's readable reference on
torch tensors, :func:`.device_buckets.decide`. Without the kernels every row takes the full sort (the reference,
:mod:`.chains`, in numpy): a numpy copy of these steps took 0.33-0.51x its time on loose drafts but 1.7-6.5x on close
ones (``benchmarks/no_compiler_route.py``, 16 points, V = 32k and 128k, B = 8 and 64, n = 2 and 4, one thread; at
B = 64, V = 128k, n = 4, sigma 0.5: 5.3 s against 0.81 s), and it was retired (issue 41).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from otlp.backend import native, threads
from otlp.core import xp as X
from otlp.core.psi import psi_head
from otlp.optimal import chains as C

#: ratios in [2^-OCTAVES, 2^OCTAVES) get 2^bits buckets per octave, the rest one bucket above and one below.
OCTAVES = 32
#: A bucket's lower bound on psi is trusted only this far above a threshold (rounding of either side is ~1e-15).
BOUND_MARGIN = 1e-12
#: the CPU sampler takes this route from this vocabulary size up, or from ``MIN_ENTRIES`` entries in a call (below
#: both the full sort is as cheap or cheaper; benchmarks/bucket_tuning.py, part "route").
MIN_V = 1000
MIN_ENTRIES = 1 << 15
#: rows tried again with the failing runs sorted, before the full sort.
ATTEMPTS = 2
#: rows whose ratios crowd a few buckets (status 0: a draft very close to its target) are tried once more on
#: :func:`zoom`'s finer buckets about 1, ``ZOOM_OCTAVES`` octave each side, before their full order
ZOOM = True
ZOOM_OCTAVES = 1
#: a row of which CROWD of 192 tokens spread over it lie in buckets its first attempt would gather is left before
#: that gather, status CROWDED, for the finer buckets (``bucket_rule.c``'s ``crowded``)
CROWD = 144
CROWDED = -(ATTEMPTS + 1)
#: a row whose compressed instance holds more than 1 / FULL_SORT_SHARE of its tokens takes the full sort at once: a
#: draft close to the target (ratios within a few octaves) selects most buckets, and its first attempt then fails
#: and its second is a full sort with the buckets' work on top. With the bounded window (``BOUND``) such rows
#: mostly certify: at V = 2k a close draft's served window fills the few octaves' buckets (4 an octave), 20-41 of 64
#: rows held more than a fifth of their tokens, and the caller's full sort of them took 1.6-2x the time of trying
#: them (one thread, optimal call, 2 against 5: V = 2k, B = 64, sigma 0.5 n = 2 0.50-0.62x, sigma 1 n = 4
#: 0.45-0.62x, n = 8 0.88x; B = 1-8 0.58-0.69x; V = 32k B = 64 0.96x; two threads, V = 2k B = 64 0.54-0.59x).
FULL_SORT_SHARE = 2
#: with one thread, where at most WHOLE_ROWS rows of a call are left by the buckets, they take their full order in a
#: second native call (every bucket selected), not the caller's full sort, which costs about 0.3 ms a call before its
#: first row and 0.8-0.95x the kernel's time a row after it (one thread, V = 2k, close drafts: B = 8 with one or two
#: such rows 0.58-0.98x the optimal call's time, B = 64 with one 0.86x; with 13 to 41 of 64 rows in C, 1.07-1.10x).
WHOLE_ROWS = 4
#: the native route lets merged runs lie inside the served window and bounds their share of the chain's hazard
#: (``bucket_rule.c``'s ``window_bound``, issue 41), deciding the slot where the bounds do; else it sorts them.
BOUND = True
#: the native route spreads a call's rows over an OpenMP team from this many entries (benchmarks/bucket_tuning.py,
#: part "threads"). The team is torch's (one libgomp per process), whose threads, right after torch's own parallel
#: work (as in a decode loop, or the benchmark's interleaved calls), still spin and take rows at once.
THREADS_MIN = 1 << 14


def takes(B: int, V: int) -> bool:
    """Whether the CPU sampler takes this route for ``B`` rows of V tokens."""
    return V >= MIN_V or B * V >= MIN_ENTRIES


def bits_for(V: int) -> int:
    """Bucket bits per octave for V tokens: 2^(bits + 6) buckets per row, 2 bits at V = 2k (one bucket per 8
    tokens), 4 at V = 32k (one per 32), 5 from V = 128k (one per 64): finer buckets select fewer tokens, coarser ones
    cost less per bucket (benchmarks/bucket_tuning.py, part "bits")."""
    return min(max((int(V).bit_length() - 7) // 2, 1), 5)


@dataclass(frozen=True)
class Scheme:
    """The buckets for ``bits`` bits per octave over [2^-octaves, 2^octaves): ``NB`` per row, bucket 0 the highest
    ratios; ``LO, HI [NB]`` each bucket's ratio range [LO, HI) (the top bucket's HI = inf takes +inf too; the bottom
    bucket's LO = 0, p = q = 0 tokens aside) and ``KEY [NB]`` a merged run's sort key (LO; -1, p = q = 0's key, for
    the bottom bucket); ``top`` the top bucket's pattern key, ``below`` and ``above`` the clamps of a token's ratio
    before its pattern is read (``buckets.c``'s ``bucket_of``)."""

    bits: int
    NB: int
    LO: np.ndarray
    HI: np.ndarray
    KEY: np.ndarray
    octaves: int
    top: int
    below: float
    above: float


def _top(bits: int, octaves: int) -> int:
    """The pattern key of the top bucket's lowest ratio, 2^octaves: its float64 bits (exponent 1023 + octaves, a zero
    mantissa) shifted right by 52 - bits."""
    return (1023 + octaves) << bits


#: the schemes made so far, by (bits, octaves): a plain dict, not functools.cache, so that torch.compile reads a made
#: scheme as a constant rather than tracing its numpy construction into the graph
_SCHEMES: dict = {}


def scheme(bits: int, octaves: int = OCTAVES) -> Scheme:
    """:class:`Scheme` of ``bits`` bits per octave over ``octaves`` octaves each side of 1 (made once)."""
    got = _SCHEMES.get((bits, octaves))
    if got is None:
        got = _SCHEMES[(bits, octaves)] = _scheme(bits, octaves)
    return got


def _scheme(bits: int, octaves: int) -> Scheme:
    NB = 2 * octaves * (1 << bits) + 2
    top = _top(bits, octaves)
    edges = ((top - np.arange(NB - 1, dtype=np.int64)) << (52 - bits)).view(np.float64)  # [NB - 1] lower edges
    return Scheme(bits=bits, NB=NB, LO=np.concatenate([edges, [0.0]]), HI=np.concatenate([[np.inf], edges]),
                  KEY=np.concatenate([edges, [-1.0]]), octaves=octaves, top=top,
                  below=float(np.nextafter(2.0**-octaves, 0.0)), above=2.0**octaves)


def zoom(V: int) -> Scheme:
    """The scheme of a row whose ratios fill so few of :func:`bits_for`'s buckets that its compressed instance would
    hold more than 1 / ``FULL_SORT_SHARE`` of its tokens (a draft very close to its target, 1 - TV above 0.99: its
    normalised ratios within a few percent of 1): ``ZOOM_OCTAVES`` octave each side of 1 in about V / 32 buckets an
    octave (2^round(log2(V / 32)), 2^4 to 2^12: NB about V / 16, room left in the instance for the tokens), the
    rest in the top and bottom buckets. At V = 4k, 32k and 128k, B = 64, n = 2 and 8, that many were the fastest or
    within 1.3x of the fastest of four widths on drafts of sigma 0.05, 0.01 and 0.001 (one thread; a draft of
    sigma 0.001 at V = 4k fills even those buckets' instances: the full sort)."""
    return scheme(min(max(round(math.log2(max(V, 1) / 32)), 4), 12), ZOOM_OCTAVES)


def psi_interior_bound(Pa, Qa, pb, qb, lo, hi, n: int):  # noqa: ANN001, ANN201 - numpy arrays or tensors
    """A lower bound of psi over the prefixes that end inside a bucket (GR Lemma 6.3's psi = P - Q^n).

    The bucket holds tokens of ratio q/p in [lo, hi) and masses (pb, qb); the buckets above it hold (Pa, Qa). A prefix
    ending inside holds a part of the bucket of q mass x in [0, qb] and p mass y: y >= x / hi and, the rest having
    p <= q / lo, y >= pb - (qb - x) / lo. So psi >= f(x) = Pa + max(x / hi, pb - (qb - x) / lo) - (Qa + x)^n: the
    first line minus (Qa + x)^n up to the crossing x_c = (qb / lo - pb) / (1 / lo - 1 / hi), the second after it;
    each piece is concave, so f >= min(f(0), f(x_c), f(qb)) with f(0) = psi at the bucket's start and f(qb) = psi at
    its end. Returns f(x_c) (lo = 0: only the first line, x_c = qb)."""
    tensors = not isinstance(Pa, (np.ndarray, np.generic, float))  # torch (otlp/optimal/device_buckets.py)
    with X.errstate(Pa, divide="ignore", invalid="ignore", over="ignore"):
        x_c = (X.namespace(Pa) if tensors else np).where(lo > 0, (qb / lo - pb) / (1.0 / lo - 1.0 / hi), qb)
        # (finite: hi > lo, and lo = 0 takes qb)
        x_c = x_c.clamp(min=0.0).minimum(qb) if tensors else np.minimum(np.maximum(x_c, 0.0), qb)
        return psi_head(Pa + x_c / hi, Qa + x_c, n)  # (products, not pow: otlp.core.psi.int_power)


def verify_rows(P: np.ndarray, Q: np.ndarray, w: np.ndarray, U: np.ndarray, n: int,
                bits: int | None = None):  # noqa: ANN201
    """The default tuple rule and its draw for rows ``P, Q float64 [B, V]`` (normalised), drafts ``w int64 [B, n]``
    and uniforms ``U [B, 2]``: ``(tokens [B], index [B], done bool [B])``; rows not ``done`` failed the certificate
    and need the full sort (their entries are meaningless). ``bits``: bucket bits per octave (default
    :func:`bits_for`). :func:`verify_chunks` on rows held in memory."""
    one = np.ones(P.shape[0])
    return verify_chunks(lambda rows: (P[rows], Q[rows], one[rows], one[rows]), P.shape[0], P.shape[1], w, U, n, bits)


def verify_chunks(load, B: int, V: int, w: np.ndarray, U: np.ndarray, n: int,  # noqa: ANN001, ANN201
                  bits: int | None = None, stats: dict | None = None):
    """:func:`verify_rows` on B rows of V tokens read through ``load(rows) -> (p, q, inv_p, inv_q)``: the rows ``rows``
    (a slice or an int64 index array) of the inputs as float32 or float64 arrays ``[rows, V]`` and the reciprocals of
    their sums ``[rows]``. Each row start to end in :func:`otlp.backend.native.bucket_rule` (:func:`_native_rows`),
    from ``THREADS_MIN`` entries its rows taken one at a time by an OpenMP team of :func:`otlp.backend.threads.count`
    threads inside the one call; rows whose ratios crowd a few buckets tried on :func:`zoom`'s (module docstring),
    where ``bits`` is not given; a few rows (``WHOLE_ROWS``, or all with a team) that are still left take their full
    order in a last native call. Without the kernels (or for inputs they do not take: n > 32, p and q of different
    dtypes) no row is done: the caller takes the full sort, which there is the faster route on close drafts (module
    docstring). ``stats``, a dict: how many rows were certified at the first attempt ("first"), on the retry with
    the failing buckets sorted ("retry"), on :func:`zoom`'s buckets ("zoom"), and how many were left to their full
    order ("full"; in the last native call or the caller's)."""
    sc = scheme(bits_for(V) if bits is None else bits)
    zoomed = ZOOM and bits is None
    got = (_native_rows(*load(slice(0, B)), w, U, n, sc, threads=team_for(B, V), whole=0, crowd=CROWD * zoomed)
           if native.library() else None)
    if got is None:
        return np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64), np.zeros(B, dtype=bool)
    tokens, index, status = got
    zoom_rows = np.zeros(B, dtype=bool)  # the rows certified on zoom's buckets
    if zoomed:  # rows whose ratios crowd a few buckets: tried on finer buckets about 1 (zoom)
        early = status == CROWDED  # (left before their gather: tried as before where the finer buckets fail too)
        crowded = np.flatnonzero((status == 0) | early)
        for sc_try in (zoom(V), sc):
            if not crowded.size:
                break
            tokens[crowded], index[crowded], status[crowded] = _native_rows(
                *load(_run(crowded)), w[crowded], U[crowded], n, sc_try, threads=team_for(crowded.size, V), whole=0)
            zoom_rows[crowded] |= (sc_try is not sc) & (status[crowded] > 0)
            crowded = crowded[(status[crowded] <= 0) & early[crowded]]
    left = np.flatnonzero(status <= 0)
    if stats is not None:
        stats.update(first=int(np.sum((status == 1) & ~zoom_rows)), retry=int(np.sum((status > 1) & ~zoom_rows)),
                     zoom=int(zoom_rows.sum()), full=int(left.size))
    team = team_for(left.size, V)
    if left.size and (team > 1 or left.size <= WHOLE_ROWS):  # their full order in C too, every bucket selected
        forced = np.ones((left.size, sc.NB), dtype=bool)
        tokens[left], index[left], status[left] = _native_rows(*load(_run(left)), w[left], U[left], n, sc,
                                                               forced=forced, threads=team, whole=left.size)
    return tokens, index, status > 0


def _run(rows: np.ndarray) -> slice | np.ndarray:
    """``rows`` (increasing int64 indices) as a slice where they are consecutive, so that a load reads them in place
    (an index array copies them: 65 MB for 64 rows of 128k tokens)."""
    return slice(int(rows[0]), int(rows[-1]) + 1) if rows.size and rows[-1] - rows[0] + 1 == rows.size else rows


def team_for(B: int, V: int) -> int:
    """The threads of a native call on B rows of V tokens: torch's count from ``THREADS_MIN`` entries, else one."""
    return threads.count() if B * V >= THREADS_MIN else 1


def _native_rows(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, w: np.ndarray, U: np.ndarray,
                 n: int, sc: Scheme, forced: np.ndarray | None = None, threads: int = 1,
                 bound: bool | None = None, whole: int | None = None, crowd: int = 0):  # noqa: ANN202
    """:func:`otlp.backend.native.bucket_rule` with this module's scheme and constants: ``(tokens, index, status)`` of
    the rows ``p, q [b, V]`` (``forced bool [b, NB]``: the first attempt's selection; ``threads``: an OpenMP team of
    that many takes the rows inside the call; ``whole``: how many rows the buckets do not certify may take their full
    order in the call, status ``ATTEMPTS + 1``, default :func:`whole_rows`; ``crowd`` > 0: a row of which that many of
    192 tokens spread over it lie in buckets its first attempt would gather is left before that gather, status
    ``CROWDED``), or None without the kernels."""
    b = p.shape[0]
    return native.bucket_rule(p, q, inv_p, inv_q, w, U, n, steps=C.NEWTON_STEPS, bits=sc.bits, top=sc.top,
                              NB=sc.NB, below=sc.below, above=sc.above, LO=sc.LO, HI=sc.HI, margin=BOUND_MARGIN,
                              share=FULL_SORT_SHARE, attempts=ATTEMPTS, bound=BOUND if bound is None else bound,
                              forced=forced, threads=threads, whole=whole_rows(b, threads) if whole is None else whole,
                              crowd=crowd)


def whole_rows(B: int, threads: int) -> int:
    """How many of a call's ``B`` rows that the buckets do not certify (a draft so close to its target that the row
    hardly compresses, or every attempt failed) take their full order inside ``otlp_bucket_rule`` (every bucket
    sorted, no run merged) rather than status 0 or -ATTEMPTS: all of them with a team of ``threads`` > 1 (the team
    takes them side by side), else none (:func:`verify_chunks` then gives up to ``WHOLE_ROWS`` of them a second
    native call, and more the caller's full sort)."""
    return B if threads > 1 else 0


def inverse_sums(x: np.ndarray, total: np.ndarray | None = None) -> np.ndarray:
    """``float64 [B]``: 1 / the float64 sum of each row of ``x [B, V]`` (float32 or float64; 1 for a row without
    mass, which validation refuses before). ``total``: those sums when the caller has them (the value check's,
    :func:`otlp.verifiers.base.check_tensors`), else taken here by :mod:`otlp.backend.native`'s kernel where it is built
    (one pass; numpy's float32 sum to float64 casts in buffers, two)."""
    if total is None:
        got = native.row_stats(x)
        total = got[0] if got is not None else x.sum(-1, dtype=np.float64)
    total = np.array(total, dtype=np.float64)  # a copy: the caller's sums stay as they are
    total[~(total > 0)] = 1.0
    return 1.0 / total


def normalised(x: np.ndarray, inv: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``float64 [B, V]``: the rows of ``x`` (float32 or float64) times ``inv [B]`` (:func:`inverse_sums`), in
    ``out`` when given; the C kernels form the same products."""
    return np.multiply(x, inv[:, None], out=out, dtype=np.float64)
