"""The sweep's work on one block of pairs: alpha*, every rule's exact acceptance, the gaps (pure numpy, no I/O).

For each pair, each draft top-k (q truncated to its k largest entries, ties to the lower token id, renormalised;
p unchanged, as in ``otlp bench acceptance`` and GR App. N) and each n:

- ``alpha_star`` = alpha*(p, IID(q, n)) = 1 + min_m psi_m over the prefixes of the tokens sorted by decreasing q/p
  (GR Thm 3.1, Lemma 6.3), by ``otlp.subsets.sorted_prefix_psi`` on a whole block of rows; the sort by q/p does
  not depend on n, so it is done once per (block, top-k) and each n re-reads the sorted rows (already in order).
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

from otlp.errors import InputError
from otlp.subsets import sorted_prefix_psi
from otlp.sweep.loader import PairBlock

#: Version of the per-pair result columns; part of every result key, so a change recomputes old shards.
RESULTS_VERSION = 1
#: Default budget of (tuple, token) cells for a rule whose exact acceptance enumerates the draft support.
MAX_ENUM_CELLS = 1 << 20
#: Rows per chunk: about this many float64 cells of one [rows, W] array (4 rows at V = 32k: cache-sized).
CHUNK_CELLS = 1 << 17

#: Integer node columns copied into the results (the rest of the numeric metadata stays float64, NaN = unset).
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


def resolve_verifiers(names: Sequence[str] | str) -> tuple[str, ...]:
    """``"all"`` -> every one-token rule except ``optimal`` (its acceptance is alpha* itself, GR Thm 3.1: the
    ``alpha_star`` column); otherwise the listed names, checked against ``otlp.verifiers.NAMES``."""
    from otlp.verifiers import NAMES, get

    if isinstance(names, str):
        names = [s.strip() for s in names.split(",") if s.strip()]
    if list(names) in (["all"], []):
        if not names:
            return ()
        return tuple(n for n in NAMES if getattr(get(n), "kind", "token") != "multistep" and n != "optimal")
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


def closed_form(rule: object) -> bool:
    """Whether the rule's exact acceptance is a closed form (it overrides both acceptance routes of the base
    class); otherwise ``acceptance`` enumerates the draft support (``otlp.verifiers.exact``)."""
    from otlp.verifiers.base import Verifier

    cls = type(rule)
    return cls.acceptance is not Verifier.acceptance and cls.verifier_acceptance is not Verifier.verifier_acceptance


def feasibility(name: str, n: int, W: int, max_enum_cells: int = MAX_ENUM_CELLS) -> str | None:
    """None when rule ``name`` gets an exact acceptance at (n, W tokens); else the reason it is skipped."""
    from otlp.verifiers import get

    rule = get(name)
    fixed = getattr(rule, "fixed_n", None)
    if fixed is not None and n != fixed:
        return f"defined for n = {fixed} only"
    if closed_form(rule):
        return None
    cells = float(W) ** n * W
    if cells > max_enum_cells:
        return (f"exact acceptance enumerates W^n = {W}^{n} tuples x W = {W} tokens = {cells:.2g} cells, over the "
                f"limit {max_enum_cells:.2g} (--max-enum-cells)")
    return None


def top_k_draft(q: np.ndarray, k: int, sparse: bool) -> np.ndarray:
    """Rows of ``q [M, W]`` restricted to their k largest entries (ties: lower column = lower token id) and
    renormalised; ``k = 0`` keeps q. Sparse rows never keep the tail column 0."""
    if k == 0:
        return q
    work = q.copy()
    if sparse:
        work[:, 0] = -1.0  # the tail token is not a token of the vocabulary
    if k >= work.shape[1]:
        out = np.maximum(work, 0.0)
    else:
        order = np.argsort(-work, axis=1, kind="stable")[:, :k]  # [M, k]
        out = np.zeros_like(q)
        np.put_along_axis(out, order, np.maximum(np.take_along_axis(work, order, axis=1), 0.0), axis=1)
    return out / out.sum(axis=1, keepdims=True)


def alpha_star_rows(p: np.ndarray, q: np.ndarray, ns: Sequence[int]) -> np.ndarray:
    """alpha*(p_m, IID(q_m, n)) for rows of ``p, q [M, W]`` and each n: ``float64 [len(ns), M]``.

    Only the candidates x with q(x)/p(x) > 1/n_max are sorted; the other tokens are collapsed into one token placed
    last. This is exact: let m* be the first argmin of psi_m = P_m - Q_m^n over the prefixes in decreasing q/p order
    (GR Lemma 6.3). If m* > 0 its last token x has psi_m* < psi_(m*-1), i.e. p(x) < Q_m*^n - (Q_m* - q(x))^n <=
    n q(x) Q_m*^(n-1) <= n q(x), so q(x)/p(x) > 1/n, and every earlier token has a ratio at least as large. So the
    minimum is attained on a prefix made of candidates; the collapsed rest has ratio q(rest)/p(rest) <= 1/n_max,
    below every candidate, so it sorts last, every candidate prefix keeps its sets and sums, and the one new prefix
    is the whole vocabulary (psi = 0). The sort by q/p does not depend on n: it is done once per row, and each n
    hands the sorted rows to ``otlp.subsets.sorted_prefix_psi`` (whose stable sort then finds them in order).
    Rows are sorted with numpy's default (SIMD) argsort and re-sorted stably where two candidates tie, so the order,
    and every bit of the result, is the same on any machine.
    """
    M, W = p.shape
    n_max = max(int(n) for n in ns)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = q / p  # [M, W]
    zero = p == 0
    if zero.any():  # the conventions of otlp.subsets.ratio_order: p = 0 < q first, p = q = 0 last
        ratio[zero] = np.where(q[zero] > 0, np.inf, -1.0)
    cand = ratio > 1.0 / n_max
    counts = cand.sum(axis=1)
    C = int(counts.max()) if M else 0
    slots = np.arange(C + 1)[None, :] < counts[:, None]  # [M, C + 1]: row-major boolean copies keep token order
    pr, qr, rr = np.zeros((M, C + 1)), np.zeros((M, C + 1)), np.full((M, C + 1), -1.0)  # padding: p = q = 0
    pr[slots], qr[slots], rr[slots] = p[cand], q[cand], ratio[cand]
    pr[:, C] = np.where(cand, 0.0, p).sum(axis=1)  # the collapsed rest, last in the order
    qr[:, C] = np.where(cand, 0.0, q).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rr[:, C] = np.where(pr[:, C] > 0, qr[:, C] / np.where(pr[:, C] > 0, pr[:, C], 1.0), -1.0)
    order = np.argsort(-rr, axis=1)  # [M, C + 1]
    ranked = np.take_along_axis(rr, order, axis=1)
    tied = ((ranked[:, 1:] == ranked[:, :-1]) & (ranked[:, 1:] > -1.0)).any(axis=1)  # p = q = 0: any order
    if tied.any():
        order[tied] = np.argsort(-rr[tied], axis=1, kind="stable")
    take = np.arange(M)[:, None]
    ps, qs = pr[take, order], qr[take, order]
    out = np.empty((len(ns), M))
    for b, n in enumerate(ns):
        _, psi = sorted_prefix_psi(ps, qs, int(n))  # rows already sorted: the order it finds is the identity
        out[b] = 1.0 + psi.min(axis=1)
    return out


def entropy_bits(p: np.ndarray) -> np.ndarray:
    """Shannon entropy in bits of each row of ``p [M, W]`` (a sparse row's tail counts as one token: a lower
    bound on the entropy of the full row)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return terms.sum(axis=1)


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
    entropy = entropy_bits(block.p)
    chunk = max(1, CHUNK_CELLS // max(W, 1))
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


def parse_ints(text: str, name: str, allow_all: bool = False) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> (1, 2, 4, 8); with ``allow_all`` the words all/none/0 mean no truncation (0)."""
    out: list[int] = []
    for tok in str(text).split(","):
        tok = tok.strip()
        if not tok:
            continue
        if allow_all and tok.lower() in ("all", "none", "v", "0"):
            out.append(0)
            continue
        try:
            value = int(tok)
        except ValueError:
            raise InputError(f"{name}: {tok!r} is not an integer (expected a comma list such as 1,2,4,8)") from None
        if value < 1:
            raise InputError(f"{name}: values must be >= 1, got {value}")
        out.append(value)
    if not out:
        raise InputError(f"{name}: give at least one value")
    return tuple(dict.fromkeys(out))


def isfinite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
