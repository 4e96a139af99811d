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
3. *Selection* (:meth:`_Level.select`). Sorted token by token: the buckets whose inside may reach the best boundary
   psi (m*); the drafted tokens' buckets; when the top draw's bucket d lies certainly before m* (after it), the
   buckets before d whose inside may reach psi at d's start (after d, the least psi after d), which bound the
   served group's s (e); and the buckets that may hold the residual threshold tau = psi* (1 - u) (after the last
   boundary certainly at or below it).
4. *Compressed instance.* The selected buckets' tokens one by one and each run of unselected buckets as one entry
   (its sums; its sort key the lowest edge of its buckets, which lies between its neighbours' ratios), sorted, then
   the same chains code on it: psi at its prefixes is psi of the full order at the matching prefixes (the sums run
   in another order: equal to rounding).
5. *Certificate* (in :func:`_attempt`). Nothing inside a merged run may change an answer: no prefix inside a run
   before m* at or below psi* (the first argmin), none after it below; the served group's positions s .. top hold no
   run, and no run's inside reaches psi_s (inner group) or psi_e (outer group) where that would move s or e; for a
   rejected tuple, no run's inside at or after M at or below tau, and position M a token. A row that fails gets the
   failing runs' buckets sorted too and is tried once more (``ATTEMPTS``); then the caller takes the full sort. A
   row whose compressed instance would hold more than 1 / ``FULL_SORT_SHARE`` of its tokens (a draft close to the
   target: its ratios fill a few octaves' buckets) takes the full sort without a try (on the native route some such
   rows, and rows that failed every try, take it in the call, :func:`whole_rows`: every bucket sorted and no run
   merged, which is its full order).

*Bounded window* (``BOUND``, the native route only; issue 41). On a draft close to its target the served window
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

Where :mod:`otlp.backend.native`'s kernels are built, a row takes all five steps at once in ``otlp_bucket_rule``
(``otlp/backend/native/bucket_rule.c``: the same operations, one row at a time, its arrays in cache; from
``THREADS_MIN`` entries a call's rows taken one at a time by an OpenMP team of torch's thread count). Without them (the
numpy route below) the per-token passes (1 to 3 and the gather of the selected tokens) run on chunks of rows
(``CHUNK``), side by side on :mod:`otlp.backend.threads` when torch has several threads, and 4 and 5 run once for all
the rows of a call, in groups of rows of similar compressed size (:func:`verify_chunks`). On both routes certified rows
draw the full sort's token and slot for the same uniforms, and the two certify the same rows
(tests/optimal/test_buckets.py, on every instance family of the exact tests and on LM rows).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from otlp.backend import native, scratch, threads
from otlp.core import xp as X
from otlp.core.psi import psi_head, ratio_keys, sorted_psi
from otlp.optimal import chains as C
from otlp.optimal import host

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
#: a row whose compressed instance holds more than 1 / FULL_SORT_SHARE of its tokens takes the full sort at once: a
#: draft close to the target (ratios within a few octaves) selects most buckets, and its first attempt then fails
#: and its second is a full sort with the buckets' work on top. With the bounded window (``BOUND``) such rows
#: mostly certify: at V = 2k a close draft's served window fills the few octaves' buckets (4 an octave), 20-41 of 64
#: rows held more than a fifth of their tokens, and the caller's full sort of them took 1.6-2x the time of trying
#: them (one thread, optimal call, 2 against 5: V = 2k, B = 64, sigma 0.5 n = 2 0.50-0.62x, sigma 1 n = 4
#: 0.45-0.62x, n = 8 0.88x; B = 1-8 0.58-0.69x; V = 32k B = 64 0.96x; two threads, V = 2k B = 64 0.54-0.59x).
FULL_SORT_SHARE = 2
#: rows per chunk (:func:`verify_chunks`): at most this many entries of one [rows, V] array, and one chunk per host
#: thread at least. On the numpy route each chunk also pays its bucket levels and selection (a few dozen numpy calls
#: on [rows, NB] arrays), so there fewer chunks cost less (measured before the native route, whose rows take no
#: [rows, V] arrays): against 2^19, 2^21 took 0.89-0.95x the
#: time at B = 8 and 64, V = 32k-128k, one thread, and 0.85x at B = 64, V = 152k, two threads (B = 16, V = 32k, two
#: threads: 1.05x, within noise).
CHUNK = 1 << 21
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
    """The buckets for ``bits`` bits per octave: ``NB`` per row, bucket 0 the highest ratios; ``LO, HI [NB]`` each
    bucket's ratio range [LO, HI) (the top bucket's HI = inf takes +inf too; the bottom bucket's LO = 0, p = q = 0
    tokens aside) and ``KEY [NB]`` a merged run's sort key (LO; -1, p = q = 0's key, for the bottom bucket)."""

    bits: int
    NB: int
    LO: np.ndarray
    HI: np.ndarray
    KEY: np.ndarray

    def bucket_of(self, ratio: np.ndarray, out: np.ndarray | None = None, first=0) -> np.ndarray:  # noqa: ANN001
        """``int64 [B, V]`` the bucket of each ratio (``ratio`` >= 0 or +inf, or -1 or NaN for p = q = 0) plus
        ``first`` (``[B, 1]``: each row's first bucket number), in ``out`` when given. ``ratio`` is clamped in place
        to [just below 2^-OCTAVES, 2^OCTAVES], whose ends lie in the bottom and the top bucket (NaN included: fmax
        drops it), so that the integer keys need no clamp (two float passes instead of three integer ones)."""
        np.fmax(ratio, _BELOW, out=ratio)
        np.minimum(ratio, 2.0**OCTAVES, out=ratio)
        key = np.right_shift(ratio.view(np.int64), 52 - self.bits, out=out)
        return np.subtract(_top(self.bits) + first, key, out=key)


#: the largest float64 below 2^-OCTAVES: its bucket is the bottom one.
_BELOW = float(np.nextafter(2.0**-OCTAVES, 0.0))


def _top(bits: int) -> int:
    """The pattern key of the top bucket's lowest ratio, 2^OCTAVES."""
    return int(np.float64(2.0**OCTAVES).view(np.int64)) >> (52 - bits)


@functools.cache
def scheme(bits: int) -> Scheme:
    NB = 2 * OCTAVES * (1 << bits) + 2
    edges = ((_top(bits) - np.arange(NB - 1, dtype=np.int64)) << (52 - bits)).view(np.float64)  # [NB - 1] lower edges
    return Scheme(bits=bits, NB=NB, LO=np.concatenate([edges, [0.0]]), HI=np.concatenate([[np.inf], edges]),
                  KEY=np.concatenate([edges, [-1.0]]))


def psi_interior_bound(Pa, Qa, pb, qb, lo, hi, n: int):  # noqa: ANN001, ANN201 - numpy arrays or tensors
    """A lower bound of psi over the prefixes that end inside a bucket (GR Lemma 6.3's psi = P - Q^n).

    The bucket holds tokens of ratio q/p in [lo, hi) and masses (pb, qb); the buckets above it hold (Pa, Qa). A prefix
    ending inside holds a part of the bucket of q mass x in [0, qb] and p mass y: y >= x / hi and, the rest having
    p <= q / lo, y >= pb - (qb - x) / lo. So psi >= f(x) = Pa + max(x / hi, pb - (qb - x) / lo) - (Qa + x)^n: the
    first line minus (Qa + x)^n up to the crossing x_c = (qb / lo - pb) / (1 / lo - 1 / hi), the second after it;
    each piece is concave, so f >= min(f(0), f(x_c), f(qb)) with f(0) = psi at the bucket's start and f(qb) = psi at
    its end. Returns f(x_c) (lo = 0: only the first line, x_c = qb)."""
    tensors = not isinstance(Pa, (np.ndarray, np.generic, float))  # torch (otlp/optimal/device_buckets.py)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
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
                  bits: int | None = None):
    """:func:`verify_rows` on B rows of V tokens read through ``load(rows) -> (p, q, inv_p, inv_q)``: the rows ``rows``
    (a slice or an int64 index array) of the inputs as float32 or float64 arrays ``[rows, V]`` and the reciprocals of
    their sums ``[rows]`` (the normalised rows are :func:`normalised`; ``load`` runs on host threads, so numpy only).
    Where the kernels are built, each row start to end in :func:`otlp.backend.native.bucket_rule`
    (:func:`_native_rows`), from ``THREADS_MIN`` entries its rows taken one at a time by an OpenMP team of
    :func:`otlp.backend.threads.count` threads inside the one call; else in chunks of ``CHUNK`` entries (at least one
    per host thread), side by side on :mod:`otlp.backend.threads`: the per-token passes (buckets, their sums, the
    selected tokens) chunk by chunk, then the compressed instances of all B rows solved and certified together (their
    per-call work paid once, not once per chunk), in groups of rows of similar size (:func:`_groups`)."""
    sc = scheme(bits_for(V) if bits is None else bits)
    team = threads.count() if B * V >= THREADS_MIN else 1
    got = _native_rows(*load(slice(0, B)), w, U, n, sc, threads=team) if native.library() else None
    if got is not None:  # every row start to end in C, on the host threads inside the call
        tokens, index, status = got
        left = np.flatnonzero(status <= 0)  # (none with a team: it took their full order in the call)
        if 0 < left.size <= WHOLE_ROWS:  # a few: their full order in C too, every bucket selected
            forced = np.ones((left.size, sc.NB), dtype=bool)
            tokens[left], index[left], status[left] = _native_rows(*load(left), w[left], U[left], n, sc,
                                                                   forced=forced, whole=left.size)
        return tokens, index, status > 0
    step = threads.chunk_rows(B, CHUNK // max(V, 1))

    def chunk(lo: int) -> _Found:
        return _gather(*load(slice(lo, lo + step)), w[lo:lo + step], U[lo:lo + step], n, sc)

    found = _Found.join(threads.map_chunks(chunk, range(0, B, step)), step)
    tokens, index = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    done = np.zeros(B, dtype=bool)
    sizes = np.bincount(found.F // V, minlength=B) + found.selected.sum(1)  # [B] compressed instance sizes
    small = np.flatnonzero(sizes * FULL_SORT_SHARE <= V)  # the others take the full sort now: they hardly compress
    groups = [small[g] for g in _groups(sizes[small])]
    for rows in groups:  # rows of similar compressed sizes: [rows, K] pads each row to the largest K
        part = found if rows.size == B else found.take(rows)
        for attempt in range(ATTEMPTS):
            t, i, ok, bad = _attempt(part, w[rows], U[rows], n, sc)
            tokens[rows[ok]], index[rows[ok]], done[rows[ok]] = t[ok], i[ok], True
            rows, selected = rows[~ok], part.selected[~ok] | bad[~ok]
            if rows.size == 0 or attempt + 1 == ATTEMPTS:
                break
            part = _gather(*load(rows), w[rows], U[rows], n, sc, selected)  # the failing runs' buckets sorted too
    return tokens, index, done


def _native_rows(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, w: np.ndarray, U: np.ndarray,
                 n: int, sc: Scheme, forced: np.ndarray | None = None, threads: int = 1,
                 bound: bool | None = None, whole: int | None = None):  # noqa: ANN202
    """:func:`otlp.backend.native.bucket_rule` with this module's scheme and constants: ``(tokens, index, status)`` of
    the rows ``p, q [b, V]`` (``forced bool [b, NB]``: the first attempt's selection; ``threads``: an OpenMP team of
    that many takes the rows inside the call; ``whole``: how many rows the buckets do not certify may take their full
    order in the call, status ``ATTEMPTS + 1``, default :func:`whole_rows`), or None without the kernels."""
    b = p.shape[0]
    return native.bucket_rule(p, q, inv_p, inv_q, w, U, n, steps=C.NEWTON_STEPS, bits=sc.bits, top=_top(sc.bits),
                              NB=sc.NB, below=_BELOW, above=2.0**OCTAVES, LO=sc.LO, HI=sc.HI, margin=BOUND_MARGIN,
                              share=FULL_SORT_SHARE, attempts=ATTEMPTS, bound=BOUND if bound is None else bound,
                              forced=forced, threads=threads, whole=whole_rows(b, threads) if whole is None else whole)


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


#: :func:`_groups` keeps rows together while their padding is at most this many entries beyond their own size.
GROUP_SLACK = 1 << 14


def _groups(sizes: np.ndarray) -> list[np.ndarray]:
    """Rows (int64 indices, increasing within a group) grouped so that padding each group's rows to its largest
    ``sizes`` costs at most twice their own sizes plus ``GROUP_SLACK``: one LM row that selects 7,000 tokens where
    the others select 600 (B = 64, V = 32k, n = 8) would otherwise pad all 64 compressed instances to 7,000."""
    order = np.argsort(-sizes, kind="stable")
    groups, start = [], 0
    while start < order.size:
        top, total, end = int(sizes[order[start]]), int(sizes[order[start]]), start + 1
        while end < order.size and (end - start + 1) * top <= 2 * (total + int(sizes[order[end]])) + GROUP_SLACK:
            total += int(sizes[order[end]])
            end += 1
        groups.append(np.sort(order[start:end]))
        start = end
    return groups


@dataclass(frozen=True)
class _Found:
    """What the compressed instances read of a set of rows: the selected buckets' tokens (``F int64 [T]``, row b's
    token i as b V + i, increasing; ``p, q, key float64 [T]`` their masses and sort keys), ``selected bool [B, NB]``
    and the rows' :class:`_Level`."""

    V: int
    F: np.ndarray
    p: np.ndarray
    q: np.ndarray
    key: np.ndarray
    selected: np.ndarray
    level: _Level

    def take(self, rows: np.ndarray) -> _Found:
        """The rows ``rows`` (increasing int64 indices) only, numbered 0 .. len(rows) - 1."""
        row = self.F // self.V
        at = np.full(self.selected.shape[0], -1, dtype=np.int64)
        at[rows] = np.arange(rows.size)
        keep = at[row] >= 0
        return _Found(V=self.V, F=at[row[keep]] * self.V + self.F[keep] % self.V, p=self.p[keep], q=self.q[keep],
                      key=self.key[keep], selected=self.selected[rows], level=self.level.take(rows))

    @staticmethod
    def join(parts: list[_Found], step: int) -> _Found:
        """Consecutive chunks of ``step`` rows as one set of rows."""
        if len(parts) == 1:
            return parts[0]
        V = parts[0].V
        return _Found(V=V, F=np.concatenate([f.F + k * step * V for k, f in enumerate(parts)]),
                      p=np.concatenate([f.p for f in parts]), q=np.concatenate([f.q for f in parts]),
                      key=np.concatenate([f.key for f in parts]),
                      selected=np.concatenate([f.selected for f in parts]),
                      level=_Level.join([f.level for f in parts]))


def _gather(p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, w: np.ndarray, U: np.ndarray,
            n: int, sc: Scheme, selected: np.ndarray | None = None) -> _Found:
    """The per-token passes on rows ``p, q [B, V]`` (float32 or float64; normalised by ``inv_p, inv_q [B]``,
    :func:`normalised`): buckets, their sums and bounds, the selection (module docstring, 1-3; ``selected``: a given
    one) and the selected buckets' tokens, through :mod:`otlp.backend.native`'s kernels where they are built."""
    lib = native.library()
    if lib is not None:
        return _gather_native(lib, p, q, inv_p, inv_q, w, U, n, sc, selected)
    B, V = p.shape
    NB = sc.NB
    P = normalised(p, inv_p, scratch.array("P", (B, V), np.float64))
    Q = normalised(q, inv_q, scratch.array("Q", (B, V), np.float64))
    ratio = scratch.array("ratio", (B, V), np.float64)  # [B, V] q / p (NaN for p = q = 0: bucket_of takes it)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np.divide(Q, P, out=ratio)
    # [B, V] row b's buckets at b NB .. (ratio is clamped: the selected tokens' keys are computed again below)
    flat = sc.bucket_of(ratio, out=scratch.array("bucket", (B, V), np.int64),
                        first=(np.arange(B, dtype=np.int64) * NB)[:, None])
    Pb = np.bincount(flat.ravel(), weights=P.ravel(), minlength=B * NB).reshape(B, NB)
    Qb = np.bincount(flat.ravel(), weights=Q.ravel(), minlength=B * NB).reshape(B, NB)
    level = _Level(Pb, Qb, n, sc)
    if selected is None:
        selected = level.select(X.take(flat, w) - (np.arange(B) * NB)[:, None], U[:, 1])  # [B, NB]
    # [B, V] the tokens to sort one by one (mode="clip": the indices are valid, and numpy buffers ``out`` for the
    # default mode)
    sorted_tok = np.take(selected.ravel(), flat, out=scratch.array("sorted", (B, V), bool), mode="clip")
    F = np.flatnonzero(sorted_tok)  # [T] flat, increasing
    p, q = P.ravel()[F], Q.ravel()[F]
    return _Found(V=V, F=F, p=p, q=q, key=ratio_keys(p, q), selected=selected, level=level)  # keys as chains.prefix


def _gather_native(lib, p: np.ndarray, q: np.ndarray, inv_p: np.ndarray, inv_q: np.ndarray, w: np.ndarray,  # noqa: ANN001
                   U: np.ndarray, n: int, sc: Scheme, selected: np.ndarray | None) -> _Found:
    """:func:`_gather` through the C kernels (``otlp/backend/native/buckets.c``): one pass for the buckets and their
    sums, one for the selected tokens."""
    if p.dtype != q.dtype or p.dtype not in (np.float32, np.float64):
        p, q = p.astype(np.float64), q.astype(np.float64)
    p, q = np.ascontiguousarray(p), np.ascontiguousarray(q)
    inv_p, inv_q = np.ascontiguousarray(inv_p, dtype=np.float64), np.ascontiguousarray(inv_q, dtype=np.float64)
    B, V = p.shape
    NB, wide = sc.NB, int(p.dtype == np.float64)
    bucket = scratch.array("bucket16", (B, V), np.uint16)  # [B, V] each token's bucket in its row
    Pb, Qb = np.empty((B, NB)), np.empty((B, NB))
    work = scratch.array("hist", (2 * NB,), np.float64)  # the kernel's histogram (held here: C gets an address)
    lib.otlp_bucket_sums(p.ctypes.data, q.ctypes.data, wide, B, V, inv_p.ctypes.data, inv_q.ctypes.data, sc.bits,
                         _top(sc.bits), NB, _BELOW, 2.0**OCTAVES, bucket.ctypes.data, Pb.ctypes.data, Qb.ctypes.data,
                         work.ctypes.data)
    level = _Level(Pb, Qb, n, sc)
    if selected is None:
        selected = level.select(X.take(bucket, w).astype(np.int64), U[:, 1])  # [B, NB]
    selected = np.ascontiguousarray(selected)
    chosen = selected.view(np.uint8)
    capacity = max(1 << 12, B * V >> 2)  # selected: 1-2% of an LM row at V >= 32k, 12% at 2k; more: called again
    while True:  # into reused arrays (the kernel writes only the places it keeps), the tokens then copied out
        F, P, Q = (scratch.array(name, (capacity + 1,), dtype) for name, dtype in
                   (("gather_F", np.int64), ("gather_P", np.float64), ("gather_Q", np.float64)))
        T = lib.otlp_gather_selected(p.ctypes.data, q.ctypes.data, wide, B, V, inv_p.ctypes.data, inv_q.ctypes.data,
                                     bucket.ctypes.data, chosen.ctypes.data, NB, capacity, F.ctypes.data,
                                     P.ctypes.data, Q.ctypes.data)
        if T <= capacity:
            break
        capacity = T
    F, P, Q = F[:T].copy(), P[:T].copy(), Q[:T].copy()
    return _Found(V=V, F=F, p=P, q=Q, key=ratio_keys(P, Q), selected=selected, level=level)


class _Level:
    """psi at the bucket boundaries of each row and each bucket's interior bound (``[B, NB]`` by bucket)."""

    _FIELDS = ("Pb", "Qb", "psi", "f", "low", "inner")

    def __init__(self, Pb: np.ndarray, Qb: np.ndarray, n: int, sc: Scheme):
        NB = Pb.shape[1]
        self.Pb, self.Qb = Pb, Qb
        Pa, Qa, _, self.psi = sorted_psi(Pb, Qb, n)  # [B, NB + 1]: the buckets are in decreasing-ratio order
        self.f = psi_interior_bound(Pa[:, :NB], Qa[:, :NB], Pb, Qb, sc.LO, sc.HI, n) - BOUND_MARGIN  # [B, NB]
        # the lower bound of psi inside each bucket and at its ends
        self.low = np.minimum(np.minimum(self.psi[:, :-1], self.psi[:, 1:]), self.f)
        self.inner = np.minimum(self.f, self.psi[:, 1:])  # [B, NB]: the bound inside a run, with the end boundary

    def take(self, rows: np.ndarray) -> _Level:
        """The same quantities for some rows only."""
        out = object.__new__(_Level)
        for name in self._FIELDS:
            setattr(out, name, getattr(self, name)[rows])
        return out

    @staticmethod
    def join(levels: list[_Level]) -> _Level:
        """The levels of consecutive sets of rows as one."""
        out = object.__new__(_Level)
        for name in _Level._FIELDS:
            setattr(out, name, np.concatenate([getattr(level, name) for level in levels]))
        return out

    def select(self, draft_buckets: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``bool [B, NB]``: the buckets to sort (module docstring, 3)."""
        B, NB = self.f.shape
        idx = np.arange(NB + 1)[None, :]
        j = idx[:, :NB]
        best = self.psi.min(-1, keepdims=True)  # [B, 1] >= psi*
        cand = self.f <= best  # may hold m* (or tie it)
        # m* is the boundary of best or inside a candidate: its prefix index lies in [start(m_lo), start(m_hi)]
        b_star = self.psi.argmin(-1)[:, None]
        m_lo = np.minimum(b_star, np.where(cand, j, NB).min(-1, keepdims=True))
        m_hi = np.maximum(b_star, np.where(cand, j + 1, 0).max(-1, keepdims=True))
        lowest = np.minimum(best, np.where(cand, self.f, np.inf).min(-1, keepdims=True))  # <= psi*
        keep = (1.0 - u)[:, None]
        tau_lo, tau_hi = lowest * keep, best * keep  # tau = psi* (1 - u) lies between
        last = np.where(self.psi <= tau_lo, idx, 0).max(-1, keepdims=True)  # [B, 1] M >= last
        sel = cand | ((j >= last) & (self.low <= tau_hi))
        # the served group's ends: with the top draw in bucket d (positions start(d) .. start(d + 1) - 1), the group
        # is inner when d < m_lo and its s, the first argmin of psi over [0, top], is <= psi at d's start; it is
        # outer when m_hi <= d and its e, the first argmin over (top, V], is <= the least psi after d
        d = draft_buckets.max(-1, keepdims=True)  # [B, 1]
        psi_d = X.take(self.psi, d)
        after = np.where(idx > d, self.psi, np.inf).min(-1, keepdims=True)
        sel |= (d < m_lo) & (j < d) & (self.f <= psi_d)
        sel |= (m_hi <= d) & (j > d) & (self.f <= after)
        sel[np.arange(B)[:, None], draft_buckets] = True
        return sel


def _attempt(found: _Found, w, U, n: int, sc: Scheme):  # noqa: ANN001, ANN202
    """One try of the compressed instance on these rows: ``(tokens [B], index [B], ok [B], bad bool [B, NB])`` with
    ``bad`` the unselected buckets whose runs failed the certificate."""
    selected, level, F, V = found.selected, found.level, found.F, found.V
    B = selected.shape[0]
    rows_b = np.arange(B, dtype=np.int64)
    frow = F // V
    counts, row_start, place = X.row_places(frow, B)  # [B], [B], [T]
    # run r of a row: its unselected buckets after its r-th selected one (consecutive, so one entry); as segments of
    # the flat [B NB] buckets, each from a selected bucket or a row's first one to the next such (never across rows)
    un = ~selected
    rid = np.cumsum(selected, axis=1)  # [B, NB]
    G = int(rid[:, -1].max()) + 1
    cut = selected.copy()
    cut[:, 0] = True
    starts = np.flatnonzero(cut)  # [S]
    NB = selected.shape[1]
    seg_b, seg_r = starts // NB, rid.ravel()[starts]  # [S] each segment's row and run

    def per_run(values, reduce, empty):  # noqa: ANN001, ANN202 - [B, NB] by bucket -> [B, G] by run
        out = np.full((B, G), empty, dtype=np.result_type(values, empty))
        out[seg_b, seg_r] = reduce.reduceat(np.where(un, values, empty).ravel(), starts)
        return out

    members = per_run(np.ones((1, 1), dtype=np.int64), np.add, 0)
    run_p, run_q = per_run(level.Pb, np.add, 0.0), per_run(level.Qb, np.add, 0.0)
    # the bound inside a run: its buckets' interior bounds and the boundaries between its buckets
    nxt_un = np.zeros_like(un)
    nxt_un[:, :-1] = un[:, 1:]
    run_low = per_run(np.where(nxt_un, level.inner, level.f), np.minimum, np.inf)
    K = int((counts + G).max())
    P2, Q2 = np.zeros((B, K)), np.zeros((B, K))
    K2 = np.full((B, K), -1.0)  # padding: p = q = 0 with their key, in columns after their row's entries
    at = frow * K + place  # [T] flat entries of P2: row frow, column the rank in it
    P2.ravel()[at], Q2.ravel()[at], K2.ravel()[at] = found.p, found.q, found.key
    runs = members > 0  # [B, G]
    gr, gc = X.nonzero_2d(runs)
    at = gr * K + counts[gr] + gc  # [R] flat entries of the runs
    P2.ravel()[at], Q2.ravel()[at] = run_p[gr, gc], run_q[gr, gc]
    # a run's key: its first bucket's (any of its bucket keys lies between its neighbours)
    first = starts + selected.ravel()[starts]  # [S] a segment's first unselected bucket (if it has one)
    real = members[seg_b, seg_r] > 0
    K2.ravel()[(seg_b * K + counts[seg_b] + seg_r)[real]] = sc.KEY[first[real] % NB]
    pre = host.prefix(P2, Q2, n, order=X.sort_descending(K2), reuse=True)  # (done with it before the next)
    w2 = np.searchsorted(F, w + (rows_b * V)[:, None]) - row_start[:, None]  # [B, n] columns of the drafts
    group = host.served_group(pre, w2)
    accept, reject = host.tuple_rule(pre, w2, window="auto", group=group)
    _, index = host.sample(pre, accept, reject, w2, U)
    # the certificate, by compressed position j
    cols = pre.order  # [B, K]
    r_of = cols - counts[:, None]
    merged = (r_of >= 0) & (r_of < G)
    r_at = np.minimum(np.maximum(r_of, 0), G - 1)
    merged &= X.take(runs, r_at)
    low = np.where(merged, X.take(run_low, r_at), np.inf)  # [B, K]
    ends = np.minimum(pre.psi[:, :-1], pre.psi[:, 1:])  # [B, K]

    def below(thr):  # noqa: ANN001, ANN202 - some prefix inside a run may be < thr
        return merged & (np.minimum(ends, low) < thr)

    def at_or_below(thr):  # noqa: ANN001, ANN202 - some prefix inside a run may be <= thr
        return merged & ((ends < thr) | (low <= thr))

    j = np.arange(K)[None, :]
    m = pre.m_star[:, None]
    psi = pre.psi
    psi_star, v = C.residual_threshold(pre, U[:, 1:])  # [B, 1] psi at m* and the residual draw's threshold
    bad = (at_or_below(psi_star) & (j < m)) | (below(psi_star) & (j >= m))
    _, top, s, e = group
    psi_s, psi_e = X.take(psi, s), X.take(psi, e)
    chain = merged & (j >= s) & (j < top)  # the served chain's positions must be tokens
    inner = top < m
    bad |= chain | np.where(inner, (at_or_below(psi_s) & (j < s)) | (below(psi_s) & (j > top) & (j < e)),
                            (at_or_below(psi_e) & (j > top) & (j < e)) | (below(psi_e) & (j >= e)))
    # the residual draw: nothing inside a run at or after M may be within the threshold; its position a token
    rejected = index < 0
    M = C.residual_index(pre, U[:, 1:])[:, None]  # [B, 1]
    bad |= rejected[:, None] & merged & (j >= M) & ((ends - psi_star < v) | (low - psi_star <= v))
    drawn = X.take(cols, np.minimum(M, K - 1))[:, 0]  # [B] its column
    tokens = np.where(rejected, 0, X.take(w, np.maximum(index, 0)[:, None])[:, 0])
    ok = ~bad.any(axis=1)
    real = drawn < counts
    ok &= ~rejected | real  # (a run at M fails above unless psi_M is exactly the threshold)
    here = rejected & real
    tokens[here] = F[row_start[here] + drawn[here]] - here.nonzero()[0] * V
    bad_runs = np.zeros((B, G), dtype=bool)
    br, bj = X.nonzero_2d(bad)
    bad_runs[br, r_of[br, bj]] = True
    return tokens, index, ok, un & np.take_along_axis(bad_runs, rid, axis=1)
