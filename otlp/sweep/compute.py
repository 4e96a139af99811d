"""The sweep's work on one block of pairs: alpha*, every rule's exact acceptance, the gaps (pure numpy, no I/O).

For each pair, each draft top-k (q truncated to its k largest entries, ties to the lower token id, renormalised;
p unchanged, as in ``otlp bench acceptance`` and GR App. N) and each n:

- ``alpha_star`` = alpha*(p, IID(q, n)) = 1 + min_m psi_m over the prefixes of the tokens sorted by decreasing q/p
  (GR Thm 3.1, Lemma 6.3), by ``otlp.optimal.chains.prefix`` on each row's tokens bucketed by q/p, with only the
  buckets that can hold the minimum taken token by token (:func:`alpha_star_rows`, exact to rounding);
- ``alpha_star_lower`` = alpha_star - min(P_T, 1 - (1 - Q_T)^n): the proven lower end for a sparse capture (the
  bound and its proof: :mod:`otlp.sweep.capture`); equal to alpha_star for dense rows and whenever the draft top-k
  leaves no q mass in the tail.
- ``acc_<rule>`` = ``get(rule).acceptance(p, get(rule).make_draft(q, n))``, P(output in set(omega)) for the rule's
  own draft scheme (i.i.d., without replacement, greedy, SpecHub, independent), and ``gap_<rule>`` = alpha_star -
  acc_<rule>: how much the optimal rule with i.i.d. drafts gains over that rule with its scheme (negative where a
  scheme beats i.i.d. drafting, e.g. drafts without replacement).

A rule is computed where its exact acceptance is feasible (:func:`feasibility`): rules with a closed form (they
override both ``acceptance`` and ``verifier_acceptance``) always; rules whose acceptance enumerates the draft
support (``rrs_wor``, ``is``, ``weighted_is``) only while W^n tuples x W tokens stays under ``max_enum_cells``;
rules fixed to one n (SpecHub: n = 2) only at that n. Skipped cells are NaN and the report lists why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from otlp.core.distributions import keep_top_k
from otlp.core.errors import InputError
from otlp.sweep.loader import PairBlock

#: Version of the per-pair result columns; part of every result key, so a change recomputes old shards.
RESULTS_VERSION = 2
#: Default budget of (tuple, token) cells for a rule whose exact acceptance enumerates the draft support.
MAX_ENUM_CELLS = 1 << 20
#: Rows per chunk of :func:`alpha_star_rows`: about this many cells of one [rows, W] array (8 rows at V = 32k: 2 MiB
#: float64, cache-sized; fewer rows pay its per-call overhead more often, benchmarks/sweep.py).
CHUNK_CELLS = 1 << 18
#: :func:`alpha_star_rows` buckets the candidates by this many leading mantissa bits of q/p (64 per octave).
BUCKET_BITS = 6
#: At most this many buckets per row: the top one also takes every larger ratio (+inf included).
MAX_BUCKETS = 4096

#: Integer node columns copied into the results (the rest of the numeric metadata stays float64, NaN = unset).
#: the largest draft count a sweep takes: the results' ``n`` column is int16 (RESULTS_VERSION 2; widening it would
#: change the schema of saved shard results a run resumes from)
MAX_N = 32767
INT_META = ("context_id", "sequence", "position", "depth", "width")
FLOAT_META = ("temperature", "top_k", "top_p", "draft_temperature", "draft_top_k", "draft_top_p")


@dataclass(frozen=True)
class SweepParams:
    """What a sweep computes; with a shard's SHA-256 it keys the saved result of that shard."""

    ns: tuple[int, ...] = (1, 2, 4, 8)
    verifiers: tuple[str, ...] = ()
    top_ks: tuple[int, ...] = (0,)  # 0 = q untruncated
    max_enum_cells: int = MAX_ENUM_CELLS

    def as_json(self) -> str:
        return json.dumps({**asdict(self), "results_version": RESULTS_VERSION}, sort_keys=True)


#: Rules whose acceptance is alpha* itself (GR Thm 3.1; ``optimal_paths`` keeps alpha*, then maximises the drafted
#: paths): the ``alpha_star`` column, so ``"all"`` leaves them out (a gap of 0 at an LP's cost per pair); and
#: ``optimal_wor``, whose acceptance is alpha* of drafts without replacement (``otlp.optimal_acceptance`` at any V),
#: at the cost of enumerating the draft's sets per pair.
ALPHA_STAR_RULES = ("optimal", "optimal_paths", "optimal_wor")


def resolve_verifiers(names: Sequence[str] | str) -> tuple[str, ...]:
    """``"all"`` -> every one-token rule except :data:`ALPHA_STAR_RULES`; otherwise the listed names, checked
    against ``otlp.verifiers.NAMES``."""
    from otlp.verifiers import NAMES, get

    if isinstance(names, str):
        names = [s.strip() for s in names.split(",") if s.strip()]
    if list(names) in (["all"], []):
        if not names:
            return ()
        return tuple(n for n in NAMES
                     if getattr(get(n), "kind", "token") != "multistep" and n not in ALPHA_STAR_RULES)
    out = []
    for name in names:
        if name == "none":
            continue
        if name not in NAMES:
            raise InputError(f"unknown verifier {name!r}; expected 'all', 'none' or a comma list of "
                             f"{', '.join(NAMES)}")
        if getattr(get(name), "kind", "token") == "multistep":
            raise InputError(f"verifier {name!r} verifies blocks of L tokens (multi-step); the sweep compares "
                             "one-token rules (see `otlp certify-block` for block rules)")
        if name not in out:
            out.append(name)
    return tuple(out)


def check_ns(ns: Sequence[object]) -> None:
    """``InputError`` unless there is a draft count and every one is in [1, ``MAX_N``] (before any work: the results'
    column would overflow only when a shard is written)."""
    if not ns:
        raise InputError(f"n values must be given: at least one integer in [1, {MAX_N}]")
    bad = [n for n in ns if not 1 <= int(n) <= MAX_N]
    if bad:
        raise InputError(f"n values must be integers in [1, {MAX_N}] (the results' n column is int16), got "
                         f"{bad[0]!r}")


def closed_form(rule: object, n: int) -> bool:
    """Whether the rule's exact acceptance at n drafts is a closed form: up to its ``closed_form_n`` where it has
    one (rrs_wor: n <= 2), else where it overrides both acceptance routes of the base class; otherwise
    ``acceptance`` enumerates the draft support (``otlp.verifiers.exact``)."""
    from otlp.verifiers.base import Verifier

    limit = getattr(rule, "closed_form_n", None)
    if limit is not None:
        return n <= limit
    cls = type(rule)
    return cls.acceptance is not Verifier.acceptance and cls.verifier_acceptance is not Verifier.verifier_acceptance


def feasibility(name: str, n: int, W: int, max_enum_cells: int = MAX_ENUM_CELLS) -> str | None:
    """None when rule ``name`` gets an exact acceptance at (n, W tokens); else the reason it is skipped."""
    from otlp.verifiers import get

    rule = get(name)
    fixed = getattr(rule, "fixed_n", None)
    if fixed is not None and n != fixed:
        return f"defined for n = {fixed} only"
    if closed_form(rule, n):
        return None
    cells = float(W) ** n * W if n * math.log2(max(W, 2)) < 1000 else math.inf  # W^n beyond any float: inf
    if cells > max_enum_cells:
        return (f"exact acceptance enumerates W^n = {W}^{n} tuples x W = {W} tokens = {cells:.2g} cells, over the "
                f"limit {max_enum_cells:.2g} (--max-enum-cells)")
    return None


def top_k_draft(q: np.ndarray, k: int, sparse: bool) -> np.ndarray:
    """Rows of ``q [M, W]`` restricted to their k largest entries (ties: lower column = lower token id) and
    renormalised; ``k = 0`` keeps q. Sparse rows never keep the tail column 0."""
    if k == 0:
        return q
    work = q
    if sparse:
        work = q.copy()
        work[:, 0] = 0.0  # the tail token is not a token of the vocabulary (kept only where k reaches a zero: 0)
    out = keep_top_k(work, k)
    return out / out.sum(axis=1, keepdims=True)


def alpha_star_rows(p: np.ndarray, q: np.ndarray, ns: Sequence[int]) -> np.ndarray:
    """alpha*(p_m, IID(q_m, n)) for rows of ``p, q [M, W]`` and each n: ``float64 [len(ns), M]``.

    alpha* = 1 + min_m psi_m over the prefixes of the tokens in decreasing q/p order (GR Thm 3.1, Lemma 6.3), with
    psi by ``otlp.optimal.chains.prefix`` (the one implementation of the sorted-prefix closed form), called on two
    small problems per row instead of one sort of W tokens:

    1. *Collapse.* A token x ending the first argmin prefix m* > 0 has psi_m* < psi_(m*-1), i.e. p(x) < Q_m*^n -
       (Q_m* - q(x))^n <= n q(x), so q(x)/p(x) > 1/n >= 1/n_max. Tokens below the bucket of 1/n_max (q = 0 and p = q
       = 0 included) form one "rest" bucket, last in the order.
    2. *Buckets.* The other tokens (the candidates) are bucketed by the leading ``BUCKET_BITS`` mantissa bits of
       q/p (the float's bit pattern, monotone in the ratio: bucket j holds ratios in [lo_j, hi_j), in decreasing
       order; the top bucket also holds every ratio above ``MAX_BUCKETS`` buckets, +inf included, with hi = inf).
       Level 1 is
       ``chains.prefix`` on the bucket sums (Pb, Qb): its alpha is psi of a union of buckets, an upper bound
       1 + best of alpha* (any subset's psi is >= the minimum), attained by it when m* ends on a bucket boundary.
    3. *Bound.* A prefix ending inside bucket j has psi >= min(psi at its two boundaries, f(x_c))
       (:func:`otlp.optimal.buckets.psi_interior_bound`, shared with the CPU sampler's partial order); the
       boundaries' psi is >= best, so a bucket whose f(x_c) is >= best + ``BOUND_MARGIN`` (the margin covers the
       rounding of both sides) holds no prefix below best, and stays collapsed. The others are *refined* (the union
       over the ns).
    4. Level 2 is ``chains.prefix`` on the refined buckets' tokens, one by one, plus one token per run of unrefined
       buckets between them (each run's ratio lies between its neighbours' buckets, so the order is kept); it has
       every prefix ending inside a refined bucket. alpha* = min(level 1, level 2).

    On LM-shaped rows at V = 32k a few hundred tokens per row are refined (benchmarks/sweep.py). The result equals
    the full sort's to rounding (the sums run in another order): tests/sweep/test_compute.py checks it against brute
    force and ``otlp.optimal_acceptance``. Every step is elementwise or per row, so a row's bits never depend on the
    other rows of its block or on the machine's thread count.
    """
    from otlp.optimal import host  # chains.prefix, in its C kernel where built
    from otlp.optimal.buckets import BOUND_MARGIN, psi_interior_bound

    M, W = p.shape
    ns = [int(n) for n in ns]
    out = np.empty((len(ns), M))
    if M == 0:
        return out
    thr = 1.0 / max(ns)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = q / p  # [M, W]
    zero = p == 0
    if zero.any():  # p = 0 < q: +inf (first); p = q = 0: 0 (no mass, in the rest)
        ratio[zero] = np.where(q[zero] > 0, np.inf, 0.0)
    shift = 52 - BUCKET_BITS
    base = int(np.float64(thr).view(np.int64)) >> shift
    # the bucket of a ratio >= 0 from its bit pattern (monotone): 0 is thr's, [lo_0, hi_0) with lo_0 <= thr; the
    # rest (ratio < lo_0 <= thr) is -1 (a ratio in [lo_0, thr] joins bucket 0: a candidate too many is exact)
    key = ratio.view(np.int64) >> shift  # [M, W] (in place from here: big temporaries cost page faults)
    key -= base
    np.maximum(key, -1, out=key)
    top = int(key.max()) + 1
    K = max(1, min(top, MAX_BUCKETS, (0x7FF0000000000000 >> shift) - base))  # +inf's bucket is never an own one
    np.minimum(key, K - 1, out=key)
    np.subtract(K - 1, key, out=key)  # bucket by decreasing ratio; the rest (key -1) is bucket K
    key += (np.arange(M, dtype=np.int64) * (K + 1))[:, None]
    flat = key.ravel()
    Pb = np.bincount(flat, weights=p.ravel(), minlength=M * (K + 1)).reshape(M, K + 1)  # [M, K + 1]
    Qb = np.bincount(flat, weights=q.ravel(), minlength=M * (K + 1)).reshape(M, K + 1)
    edges = ((base + np.arange(K, -1, -1, dtype=np.int64)) << shift).view(np.float64)  # [K + 1] decreasing
    hi, lo = edges[:-1].copy(), edges[1:]  # [K]
    if top > K:  # the top bucket also holds every larger ratio
        hi[0] = np.inf
    Pa, Qa = np.zeros((M, K)), np.zeros((M, K))  # the masses of the buckets above
    np.cumsum(Pb[:, :K - 1], axis=1, out=Pa[:, 1:])
    np.cumsum(Qb[:, :K - 1], axis=1, out=Qa[:, 1:])
    pb, qb = Pb[:, :K], Qb[:, :K]
    level1 = [host.prefix(Pb, Qb, n).alpha for n in ns]
    refine = np.zeros((M, K + 1), dtype=bool)  # the rest (column K) is never refined
    for n, alpha in zip(ns, level1, strict=True):
        bound = psi_interior_bound(Pa, Qa, pb, qb, lo, hi, n)  # [M, K]
        refine[:, :K] |= (bound < (alpha - 1.0 + BOUND_MARGIN)[:, None]) & (qb > 0)
    # level 2: the refined buckets' tokens one by one, each run of unrefined buckets as one token
    sel = refine.ravel()[flat].reshape(M, W)  # [M, W]
    counts = sel.sum(axis=1)
    R = int(counts.max())
    run = np.cumsum(refine, axis=1)  # [M, K + 1]: an unrefined bucket's run = the refined buckets before it
    G = int(run[:, -1].max()) + 1
    rflat = (run + (np.arange(M, dtype=np.int64) * G)[:, None]).ravel()
    P2, Q2 = np.zeros((M, G + R)), np.zeros((M, G + R))  # [M, G + R]; padding p = q = 0 changes no prefix
    P2[:, :G] = np.bincount(rflat, weights=np.where(refine, 0.0, Pb).ravel(), minlength=M * G).reshape(M, G)
    Q2[:, :G] = np.bincount(rflat, weights=np.where(refine, 0.0, Qb).ravel(), minlength=M * G).reshape(M, G)
    slots = np.arange(R)[None, :] < counts[:, None]  # [M, R]; row-major boolean copies keep the token order
    P2[:, G:][slots] = p[sel]
    Q2[:, G:][slots] = q[sel]
    for b, n in enumerate(ns):
        out[b] = np.minimum(level1[b], host.prefix(P2, Q2, n).alpha)
    return out


def entropy_bits(p: np.ndarray) -> np.ndarray:
    """Shannon entropy in bits of each row of ``p [M, W]`` (a sparse row's tail counts as one token: a lower
    bound on the entropy of the full row)."""
    terms = np.maximum(p, np.finfo(np.float64).smallest_subnormal)  # [M, W]; log2 finite, p log2 p = 0 at p = 0
    np.log2(terms, out=terms)
    terms *= p
    return 0.0 - terms.sum(axis=1)  # (+0.0 for a point mass)


def nominal_width(V: int, storage: str, top_k: int | None) -> int:
    """The width every shard of a capture is judged at for feasibility: V (dense) or 1 + min(V, 2 top-k)."""
    return int(V) if storage == "dense" else 1 + min(int(V), 2 * int(top_k or V))


def compute_block(block: PairBlock, params: SweepParams, nominal: int) -> dict[str, np.ndarray]:
    """Per-pair results of one block, long format: one row per (pair, top-k, n), with feasibility judged at
    ``nominal`` (:func:`nominal_width`, the same for every shard of a capture). Columns: ``row``, the node
    metadata, ``entropy_bits``, ``q_top_k`` (0 = none), ``n``, ``alpha_star``, ``alpha_star_lower``, then
    ``acc_<rule>`` and ``gap_<rule>`` for every rule, and ``error_<rule>`` counts are returned separately in
    ``"_errors"`` (a dict rule -> [count, first message])."""
    from otlp.verifiers import get

    M, W = block.p.shape
    ns = [int(n) for n in params.ns]
    rules = {name: get(name) for name in params.verifiers}
    feasible = {(name, n): feasibility(name, n, nominal, params.max_enum_cells) is None for name in rules for n in ns}
    K, N = len(params.top_ks), len(ns)
    total = M * K * N
    alpha = np.empty((K, N, M))
    lower = np.empty((K, N, M))
    acc = {name: np.full((K, N, M), np.nan) for name in rules}
    errors: dict[str, list] = {}
    chunk = max(1, CHUNK_CELLS // max(W, 1))
    entropy = np.concatenate([entropy_bits(block.p[s:s + chunk]) for s in range(0, M, chunk)] or [np.zeros(0)])
    for a, k in enumerate(params.top_ks):
        qk = top_k_draft(block.q, int(k), block.sparse)
        q_tail = qk[:, 0] if block.sparse else np.zeros(M)
        for start in range(0, M, chunk):
            sl = slice(start, min(M, start + chunk))
            alpha[a, :, sl] = alpha_star_rows(block.p[sl], qk[sl], ns)
        for b, n in enumerate(ns):
            with np.errstate(divide="ignore"):
                bound = np.minimum(block.p_tail, -np.expm1(n * np.log1p(-np.minimum(q_tail, 1.0))))
            lower[a, b] = alpha[a, b] - (bound if block.sparse else 0.0)
        for name, rule in rules.items():
            for b, n in enumerate(ns):
                if not feasible[(name, n)]:
                    continue
                out = acc[name][a, b]
                for m in range(M):
                    try:
                        out[m] = rule.acceptance(block.p[m], rule.make_draft(qk[m], n))
                    except InputError as exc:  # recorded, reported, never silent
                        entry = errors.setdefault(name, [0, str(exc).splitlines()[0]])
                        entry[0] += 1
    # long format: index order (top-k, n, pair)
    cols: dict[str, np.ndarray] = {"row": np.tile(np.arange(M, dtype=np.int32), K * N)}
    for name in INT_META:
        values = block.meta.get(name, np.full(M, -1.0))
        cols[name] = np.tile(np.nan_to_num(values, nan=-1).astype(np.int64), K * N)
    for name in FLOAT_META:
        cols[name] = np.tile(block.meta.get(name, np.full(M, np.nan)).astype(np.float64), K * N)
    cols["entropy_bits"] = np.tile(entropy, K * N)
    cols["q_top_k"] = np.repeat(np.asarray(params.top_ks, dtype=np.int32), N * M)
    cols["n"] = np.tile(np.repeat(np.asarray(ns, dtype=np.int16), M), K)
    cols["alpha_star"] = alpha.reshape(total)
    cols["alpha_star_lower"] = lower.reshape(total)
    for name in rules:
        cols[f"acc_{name}"] = acc[name].reshape(total)
        cols[f"gap_{name}"] = cols["alpha_star"] - cols[f"acc_{name}"]
    cols["_errors"] = errors  # type: ignore[assignment]
    return cols


def skipped_rules(params: SweepParams, W: int) -> dict[str, dict[int, str]]:
    """rule -> {n: reason} for the cells :func:`compute_block` leaves NaN at width W."""
    out: dict[str, dict[int, str]] = {}
    for name in params.verifiers:
        for n in params.ns:
            reason = feasibility(name, int(n), W, params.max_enum_cells)
            if reason:
                out.setdefault(name, {})[int(n)] = reason
    return out


def isfinite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
