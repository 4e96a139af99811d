"""Draft schemes: the joint law P_draft of the drafted n-tuple omega.

Every scheme gives P_draft(omega) for a batch of tuples (vectorised), the mass P(omega in H^n) of a subset H
(closed form where one exists, enumeration otherwise), the full table by enumeration for small V, and seeded
sampling. ``psi(H) = p(H) - P_draft(omega in H^n)`` (GR eq. (4)) is built on ``subset_probability``.
"""

from __future__ import annotations

import math

import numpy as np

from otlp.core import xp as X
from otlp.core.distributions import check_distribution, check_n, check_token_tuples
from otlp.core.errors import MEMORY_LIMIT_BYTES, InputError, ModelTooLargeError

#: Refuse to enumerate more tuples than this (about 0.5 GB for the int64 tuple table at n = 3).
MAX_TUPLES = 20_000_000
#: Refuse to enumerate more drafted sets than this (:meth:`WithoutReplacement.set_support`): the exact rule planned on
#: them holds about 300-600 bytes a set (otlp/optimal/wor.py; 1.3M sets at n = 3: 419 MB).
MAX_SETS = 2_000_000
#: Refuse subset probabilities by enumeration above this many (mask, tuple, position) look-ups.
MAX_SUBSET_WORK = 2_000_000_000
#: Look-ups per chunk of masks (bounds the temporary boolean array to about 64 MB).
SUBSET_CHUNK_WORK = 64_000_000
#: :meth:`DraftScheme.num_tuples` computes V^n as an integer up to this many bits (a number of 1,233 digits, far
#: above any count a model, enumeration or estimate could take); above it, it refuses (V^n for n = 10^9 is a
#: 1.6-gigabit integer: seconds of work, and a string conversion Python refuses).
MAX_TUPLE_BITS = 4096


class DraftScheme:
    """Base class. Subclasses set ``n``, ``V`` and implement :meth:`tuple_probabilities` and :meth:`sample`."""

    name: str = "draft"
    n: int
    V: int

    # -- to implement ---------------------------------------------------------------------------------
    def tuple_probabilities(self, omegas: np.ndarray) -> np.ndarray:
        """P_draft(omega) for ``omegas: int [M, n]`` -> ``float [M]``."""
        raise NotImplementedError

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``size`` tuples: ``int [size, n]``.

        ``size`` is a non-negative integer and ``rng`` a ``numpy.random.Generator``; anything else (including
        ``rng=None``) raises ``InputError``: no scheme draws from an unseeded generator behind the caller's back,
        so every sample is reproducible from the generator passed in. Subclasses start with
        ``size = _check_sample_args(size, rng)``.
        """
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------------
    def log2_num_tuples(self) -> float:
        """log2(V^n) = n log2(V), known for any n."""
        return int(self.n) * math.log2(int(self.V)) if self.V > 1 else 0.0

    def tuples_text(self) -> str:
        """V^n for a message: ``V^n = 3^2 = 9``, or ``V^n = 3^1000000000 = about 10^477121255``."""
        bits = self.log2_num_tuples()
        count = f"{int(self.V) ** int(self.n):,}" if bits < 50 else f"about 10^{bits * math.log10(2):.0f}"
        return f"V^n = {self.V}^{self.n} = {count}"

    def num_tuples(self) -> int:
        """V^n, the number of tuples :meth:`enumerate` returns; ``ModelTooLargeError`` when V^n has more than
        ``MAX_TUPLE_BITS`` bits (checked in logarithms, before the power is taken)."""
        bits = self.log2_num_tuples()
        if bits > MAX_TUPLE_BITS:
            raise ModelTooLargeError(f"a model over the {self.tuples_text()} draft tuples of {type(self).__name__}",
                                     2.0 ** min(bits + 3, 1023.0), MEMORY_LIMIT_BYTES)
        return int(self.V) ** int(self.n)

    def support_size(self) -> int:
        """An upper bound on the tuples :meth:`support` returns: V^n here; a scheme whose support it enumerates more
        narrowly says so (:class:`WithoutReplacement`: the ordered tuples of its tokens of q > 0)."""
        return self.num_tuples()

    def check_enumerable(self, max_tuples: int = MAX_TUPLES) -> None:
        """Raise ``ModelTooLargeError`` if V^n tuples would not fit, before anything is allocated."""
        count = self.num_tuples()
        if count > max_tuples:
            raise ModelTooLargeError(
                f"enumerating {self.tuples_text()} draft tuples", count * (self.n + 1) * 8,
                max_tuples * (self.n + 1) * 8,
            )

    def enumerate(self, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, np.ndarray]:
        """All V^n tuples in lexicographic order (first draft most significant) and their probabilities.

        Returns ``(omegas int [V^n, n], probs float [V^n])``.
        """
        self.check_enumerable(max_tuples)
        omegas = all_tuples(self.V, self.n)
        return omegas, self.tuple_probabilities(omegas)

    def support(self, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, np.ndarray]:
        """The tuples of positive probability: ``(omegas [M, n], probs [M])``."""
        omegas, probs = self.enumerate(max_tuples)
        keep = probs > 0
        return omegas[keep], probs[keep]

    def subset_probability(self, mask: np.ndarray) -> np.ndarray | float:
        """P(omega in H^n) for ``mask: bool [V]`` (-> float) or ``bool [K, V]`` (-> float [K]).

        The base class enumerates the support; subclasses override with closed forms.
        """
        masks, single = _as_masks(mask, self.V)
        if type(self).support is DraftScheme.support:  # the support comes from enumerating V^n: bound it first
            work = masks.shape[0] * self.num_tuples() * self.n
            if work > MAX_SUBSET_WORK:
                raise ModelTooLargeError(
                    f"P(omega in H^n) for {masks.shape[0]} subsets by enumerating {self.num_tuples():,} tuples of "
                    f"{type(self).__name__}", work, MAX_SUBSET_WORK)
        omegas, probs = self.support()
        work = masks.shape[0] * omegas.size
        if work > MAX_SUBSET_WORK:
            raise ModelTooLargeError(
                f"P(omega in H^n) for {masks.shape[0]} subsets by enumerating {probs.size:,} tuples of "
                f"{type(self).__name__}", work, MAX_SUBSET_WORK)
        step = max(1, SUBSET_CHUNK_WORK // max(omegas.size, 1))
        out = np.empty(masks.shape[0])
        for start in range(0, masks.shape[0], step):  # chunks of masks bound the [chunk, M, n] temporary
            inside = masks[start:start + step][:, omegas].all(axis=-1)  # [chunk, M]
            out[start:start + step] = inside.astype(np.float64) @ probs
        return float(out[0]) if single else out

    def marginals(self) -> np.ndarray:
        """The law of each draft position, ``float [n, V]``."""
        omegas, probs = self.support()
        return np.stack([np.bincount(omegas[:, k], weights=probs, minlength=self.V) for k in range(self.n)])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(V={self.V}, n={self.n})"


def all_tuples(V: int, n: int) -> np.ndarray:
    """All of V^n as ``int64 [V^n, n]`` in lexicographic order."""
    if n == 0 or V == 1:  # one tuple (np.indices takes at most 64 axes: V = 1 allows any n)
        return np.zeros((1, n), dtype=np.int64)
    grids = np.indices((V,) * n, dtype=np.int64)  # [n, V, ..., V]
    return grids.reshape(n, -1).T.copy()


def _check_sample_args(size: object, rng: object) -> int:
    """Validate the arguments of ``DraftScheme.sample``: ``size`` an integer >= 0, ``rng`` a numpy Generator.

    ``rng=None`` is refused rather than replaced by ``numpy.random.default_rng()``, which would make the draws
    irreproducible without any sign of it at the call site.
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise InputError(f"size must be a non-negative integer (the number of tuples to draw), got {size!r}")
    if not isinstance(rng, np.random.Generator):
        raise InputError(f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(seed)), got "
                         f"{type(rng).__name__}")
    return int(size)


def _as_masks(mask: np.ndarray, V: int) -> tuple[np.ndarray, bool]:
    m = np.asarray(mask)
    single = m.ndim == 1
    m = np.atleast_2d(m)
    if m.shape[-1] != V or m.ndim != 2:
        raise InputError(f"subset mask must have shape [V] or [K, V] with V = {V}, got {np.shape(mask)}")
    return m.astype(bool), single


def _check_tuples(omegas: np.ndarray, V: int, n: int) -> np.ndarray:
    """``int64 [M, n]`` token ids in [0, V) (a single tuple ``[n]`` is one row); ragged, float, bool -> InputError."""
    return check_token_tuples(omegas, n, V, name="draft tuples")


class IID(DraftScheme):
    """n i.i.d. draws from q: P(omega) = prod_k q(omega_k); P(omega in H^n) = q(H)^n (GR §1)."""

    name = "iid"

    def __init__(self, q: object, n: int):
        self.q = check_distribution(q, "q")
        self.n = check_n(n)
        self.V = self.q.size

    def tuple_probabilities(self, omegas: np.ndarray) -> np.ndarray:
        w = _check_tuples(omegas, self.V, self.n)
        return np.prod(self.q[w], axis=1)

    def subset_probability(self, mask: np.ndarray) -> np.ndarray | float:
        masks, single = _as_masks(mask, self.V)
        out = (masks.astype(np.float64) @ self.q) ** self.n
        return float(out[0]) if single else out

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        size = _check_sample_args(size, rng)
        return rng.choice(self.V, size=(size, self.n), p=self.q).astype(np.int64)

    def marginals(self) -> np.ndarray:
        return np.tile(self.q, (self.n, 1))


class Independent(DraftScheme):
    """Independent, different drafts q_1..q_n: P(omega) = prod_k q_k(omega_k); P(H^n) = prod_k q_k(H) (GR App. C)."""

    name = "independent"

    def __init__(self, qs: object):
        try:
            rows = None if isinstance(qs, (str, bytes)) else list(qs)  # a 0-d array has __iter__ but raises here
        except TypeError:
            rows = None
        if rows is None:
            raise InputError(f"Independent needs a sequence of draft distributions q_1..q_n (one per draft, e.g. "
                             f"a list of vectors or an array [n, V]), got {type(qs).__name__}")
        if len(rows) < 1:
            raise InputError("Independent needs at least one draft distribution")
        first = check_distribution(rows[0], "q[0]")
        self.qs = np.stack([first] + [check_distribution(r, f"q[{k}]", size=first.size)
                                      for k, r in enumerate(rows[1:], start=1)])  # [n, V]
        self.n, self.V = self.qs.shape

    def tuple_probabilities(self, omegas: np.ndarray) -> np.ndarray:
        w = _check_tuples(omegas, self.V, self.n)
        return np.prod(self.qs[np.arange(self.n), w], axis=1)

    def subset_probability(self, mask: np.ndarray) -> np.ndarray | float:
        masks, single = _as_masks(mask, self.V)
        out = np.prod(masks.astype(np.float64) @ self.qs.T, axis=1)  # [K]
        return float(out[0]) if single else out

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        size = _check_sample_args(size, rng)
        cdf = np.cumsum(self.qs, axis=1)  # [n, V]
        u = rng.random((size, self.n)) * cdf[:, -1]
        return np.stack([np.searchsorted(cdf[k], u[:, k], side="right") for k in range(self.n)], axis=1).clip(
            0, self.V - 1).astype(np.int64)

    def marginals(self) -> np.ndarray:
        return self.qs.copy()


class WithoutReplacement(DraftScheme):
    """n draws from q without replacement (successive sampling, SpecHub §1 / RRS-w):

    P(omega) = prod_{k=1}^n q(omega_k) / (1 - sum_{j<k} q(omega_j)) for distinct tokens, 0 if one repeats.
    Needs at least n tokens with q > 0.
    """

    name = "without_replacement"

    def __init__(self, q: object, n: int):
        self.q = check_distribution(q, "q")
        self.n = check_n(n)
        self.V = self.q.size
        if np.count_nonzero(self.q) < self.n:
            raise InputError(
                f"WithoutReplacement(q, n={self.n}) needs at least n tokens with q > 0, "
                f"q has {np.count_nonzero(self.q)}"
            )
        self._rank, self._suffix = (a[0] for a in mass_ranks(self.q[None]))  # [V], [V + 1]
        # sum_{j != i} q_j: the suffix past rank 0 for the heaviest token (1 - q_i would cancel there), else 1 - q_i
        self._others = np.where(self._rank == 0, self._suffix[1], self._suffix[0] - self.q)  # [V]

    def tuple_probabilities(self, omegas: np.ndarray) -> np.ndarray:
        w = _check_tuples(omegas, self.V, self.n)
        qw = self.q[w]  # [M, n]
        # mass left before step k, q of the undrawn tokens, without the cancellation of 1 - q(drawn) (mass_left)
        remaining = np.ones_like(qw)  # [M, n]
        ranks = (self._rank[w].T[None], qw.T[None], self._suffix[None])  # ([1, n, M], [1, n, M], [1, V + 1])
        for k in range(1, self.n):
            remaining[:, k] = mass_left(*ranks, [(1 << k) - 1])[0, 0]  # after the first k draws
        distinct = np.ones(len(w), dtype=bool)
        for a in range(self.n):
            for b in range(a + 1, self.n):
                distinct &= w[:, a] != w[:, b]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # subnormal masses left: inf -> 1 below
            ratio = np.where(distinct[:, None], qw / np.where(remaining > 0, remaining, 1.0), 0.0)
        return np.prod(np.minimum(ratio, 1.0), axis=1)  # q(omega_k) <= the mass left, so each factor is <= 1

    def support_size(self) -> int:
        """k! / (k - n)!, the ordered tuples of n distinct tokens among the k tokens with q > 0: what :meth:`support`
        enumerates (V^n only when every token has q > 0)."""
        return math.perm(int(np.count_nonzero(self.q)), self.n)

    def support(self, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, np.ndarray]:
        """The tuples of n distinct tokens of q > 0 in lexicographic order, and their probabilities (those that do
        not underflow to 0): ``support_size()`` tuples, not V^n, so a draft filtered to its top-k tokens enumerates
        at any V (``ModelTooLargeError`` above ``max_tuples``, before anything is allocated)."""
        count = self.support_size()
        if count > max_tuples:
            k = int(np.count_nonzero(self.q))
            raise ModelTooLargeError(
                f"enumerating the {count:,} tuples of n = {self.n} distinct tokens among the {k:,} with q > 0",
                count * (self.n + 1) * 8,
                max_tuples * (self.n + 1) * 8)
        live = np.flatnonzero(self.q > 0)  # [k]
        k = live.size
        local = np.arange(k, dtype=np.int64)[:, None]  # [k, 1]: the partial tuples, in lexicographic order
        for j in range(1, self.n):  # each one extended by every token it does not hold: at most count k / (k - n + 1)
            grown = np.concatenate([np.repeat(local, k, axis=0), np.tile(np.arange(k), local.shape[0])[:, None]], 1)
            local = grown[(grown[:, :j] != grown[:, j:]).all(1)]  # [k! / (k - j - 1)!, j + 1]
        omegas = live[local]  # [count, n]
        probs = self.tuple_probabilities(omegas)
        keep = probs > 0
        return omegas[keep], probs[keep]

    def set_support(self, max_sets: int = MAX_SETS) -> tuple[np.ndarray, np.ndarray]:
        """The drafted *sets*: every set of n distinct tokens of q > 0, as increasing token ids in lexicographic
        order, and P(the draws are that set) (those that do not underflow to 0): ``(sets int64 [U, n], probs [U])``,
        U = C(k, n), n! fewer rows than :meth:`support` (``ModelTooLargeError`` above ``max_sets``, before anything
        is allocated), P(S) by :func:`set_probabilities`."""
        k = int(np.count_nonzero(self.q))
        count = math.comb(k, self.n)
        if count > max_sets:
            raise ModelTooLargeError(f"enumerating the {count:,} sets of n = {self.n} distinct tokens among the {k:,} "
                                     "with q > 0 for the exact rule", count * 600, max_sets * 600)
        sets = np.flatnonzero(self.q > 0)[combinations(k, self.n)]  # [U, n]
        probs = set_probabilities(self.q[None], sets)[0]
        keep = probs > 0
        return sets[keep], probs[keep]

    def subset_probability(self, mask: np.ndarray) -> np.ndarray | float:
        """n = 1: q(H). n = 2: sum_{i in H} q_i (q(H) - q_i) / (1 - q_i) (first draw i, second another token of H).
        Larger n: enumeration (base class)."""
        masks, single = _as_masks(mask, self.V)
        if self.n > 2:  # refused before the support is enumerated, as the base class refuses V^n
            work = masks.shape[0] * self.support_size() * self.n
            if work > MAX_SUBSET_WORK:
                raise ModelTooLargeError(f"P(omega in H^n) for {masks.shape[0]} subsets by enumerating "
                                         f"{self.support_size():,} tuples of {type(self).__name__}", work,
                                         MAX_SUBSET_WORK)
            return super().subset_probability(mask)
        f = masks.astype(np.float64)
        if self.n == 1:
            out = f @ self.q  # [K]
        else:
            # sum_{i in H} q_i q(H - i) / (1 - q_i), every factor a positive sum: q(H - i) = q(H) - q_i loses at most
            # a factor 2 except for the heaviest i of H, whose q(H - i) is summed over the rest of H directly
            fq = f * self.q[None, :]  # [K, V]
            rows = np.arange(fq.shape[0])
            top = np.argmax(fq, axis=1)  # [K]
            q_top = fq[rows, top]
            fq[rows, top] = 0.0
            q_rest = fq.sum(1)  # [K]: q(H) minus its heaviest token
            # the ratios q(H - i) / (1 - q_i) lie in [0, 1]; taking them directly, rather than q(H - i) times
            # 1 / (1 - q_i), keeps a subnormal 1 - q_i (q's heaviest token holding all but ~1e-309 of the mass)
            # from overflowing to inf (issue 17: alpha* came out 1.0)
            others = self._others  # [V], 1 - q_i, > 0 on tokens of H that can be followed by a second draw
            safe = np.where(others > 0, others, 1.0)
            share = np.divide((q_top + q_rest)[:, None] - self.q[None, :], safe[None, :], out=np.zeros(fq.shape),
                              where=fq > 0)  # [K, V]; only the tokens of H other than its heaviest (fq zeroed there)
            share_top = np.where(others[top] > 0, q_rest / safe[top], 0.0)  # [K]
            out = (fq * np.clip(share, 0.0, 1.0)).sum(1) + q_top * np.minimum(share_top, 1.0)
        return float(out[0]) if single else out

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        size = _check_sample_args(size, rng)
        # Gumbel-top-n: the order of the n largest log q + Gumbel keys is a successive sample without replacement.
        with np.errstate(divide="ignore"):
            keys = np.log(self.q)[None, :] + rng.gumbel(size=(size, self.V))  # [size, V]
        top = np.argpartition(-keys, self.n - 1, axis=1)[:, : self.n]
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1).astype(np.int64)


class Greedy(DraftScheme):
    """The top n-1 tokens of q deterministically (ties: lower id first), the last one sampled from the rest ∝ q
    (hu2025towards; GR App. O). Only O(V) tuples have mass.
    """

    name = "greedy"

    def __init__(self, q: object, n: int):
        self.q = check_distribution(q, "q")
        self.n = check_n(n)
        self.V = self.q.size
        self.top = np.argsort(-self.q, kind="stable")[: self.n - 1].astype(np.int64)  # [n-1]
        rest = np.ones(self.V, dtype=bool)
        rest[self.top] = False
        self._rest = rest
        self._rest_mass = float(self.q[rest].sum())
        if self._rest_mass <= 0:
            raise InputError(
                f"Greedy(q, n={self.n}) needs positive q mass outside the top n-1 tokens, to sample the last draft"
            )

    def tuple_probabilities(self, omegas: np.ndarray) -> np.ndarray:
        w = _check_tuples(omegas, self.V, self.n)
        head_ok = np.all(w[:, : self.n - 1] == self.top[None, :], axis=1)
        last = w[:, self.n - 1]
        with np.errstate(over="ignore"):  # q(last) / a subnormal rest mass for a forced last: discarded by where
            return np.where(head_ok & self._rest[last], self.q[last] / self._rest_mass, 0.0)

    def subset_probability(self, mask: np.ndarray) -> np.ndarray | float:
        masks, single = _as_masks(mask, self.V)
        head_in = masks[:, self.top].all(axis=1)
        out = np.where(head_in, (masks & self._rest[None, :]).astype(np.float64) @ self.q / self._rest_mass, 0.0)
        return float(out[0]) if single else out

    def support(self, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, np.ndarray]:
        last = np.flatnonzero(self._rest & (self.q > 0))
        omegas = np.concatenate([np.broadcast_to(self.top, (last.size, self.n - 1)), last[:, None]], axis=1)
        return omegas.astype(np.int64), self.q[last] / self._rest_mass

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        size = _check_sample_args(size, rng)
        rest_q = np.where(self._rest, self.q, 0.0) / self._rest_mass
        last = rng.choice(self.V, size=size, p=rest_q)
        return np.concatenate([np.broadcast_to(self.top, (size, self.n - 1)), last[:, None]], axis=1).astype(
            np.int64)


class SpecHub(DraftScheme):
    """SpecHub's hub design for n = 2 (SpecHub §4), with hub a = argmax q (lowest id on ties):

    Q(x, a) = q(x) for x != a;   Q(a, x) = q(a) q(x) / Z for x != a, Z = sum_{x != a} q(x);   0 otherwise.
    Sampler: x1 ~ q; if x1 != a the pair is (x1, a), else x2 ~ q on V minus a, renormalised.
    Needs at least two tokens with q > 0.
    """

    name = "spechub"

    def __init__(self, q: object, n: int = 2):
        self.q = check_distribution(q, "q")
        if check_n(n) != 2:
            raise InputError(f"SpecHub is defined for n = 2 drafts only (SpecHub paper §4), got n = {n}")
        self.n = 2
        self.V = self.q.size
        self.hub = int(np.argmax(self.q))
        others = np.ones(self.V, dtype=bool)
        others[self.hub] = False
        self._z = float(self.q[others].sum())  # sum over x != a, not 1 - q(a) (SpecHub note §3.3)
        if self._z <= 0:
            raise InputError("SpecHub needs at least two tokens with q > 0 (q is a point mass)")
        share = np.divide(self.q, self._z, out=np.zeros(self.V), where=others)  # q(x) / Z <= 1 for x != a
        self._row = self.q[self.hub] * np.minimum(share, 1.0)  # Q(a, x), 0 at the hub
        self._col = np.where(others, self.q, 0.0)  # Q(x, a)

    def tuple_probabilities(self, omegas: np.ndarray) -> np.ndarray:
        w = _check_tuples(omegas, self.V, 2)
        x1, x2 = w[:, 0], w[:, 1]
        return np.where(x2 == self.hub, self._col[x1], 0.0) + np.where(x1 == self.hub, self._row[x2], 0.0)

    def subset_probability(self, mask: np.ndarray) -> np.ndarray | float:
        masks, single = _as_masks(mask, self.V)
        f = masks.astype(np.float64)
        out = f[:, self.hub] * (f @ self._col + f @ self._row)
        return float(out[0]) if single else out

    def support(self, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, np.ndarray]:
        others = np.flatnonzero(np.arange(self.V) != self.hub)
        a = np.full_like(others, self.hub)
        omegas = np.concatenate([np.stack([others, a], 1), np.stack([a, others], 1)])
        probs = np.concatenate([self._col[others], self._row[others]])
        keep = probs > 0
        return omegas[keep].astype(np.int64), probs[keep]

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        size = _check_sample_args(size, rng)
        x1 = rng.choice(self.V, size=size, p=self.q)
        x2 = rng.choice(self.V, size=size, p=self._col / self._z)
        is_hub = x1 == self.hub
        return np.stack([x1, np.where(is_hub, x2, self.hub)], axis=1).astype(np.int64)


class Joint(DraftScheme):
    """Any explicit law over V^n, given as a table of shape [V] * n (small V only)."""

    name = "joint"

    def __init__(self, table: object):
        try:
            t = np.array(table, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"Joint table must be numeric: {exc}") from None
        if t.ndim < 1 or len(set(t.shape)) != 1:
            raise InputError(f"Joint table must have shape [V] * n (all axes equal), got {t.shape}")
        flat = check_distribution(t.reshape(-1), "joint table")
        self.table = flat.reshape(t.shape)
        self.n = t.ndim
        self.V = t.shape[0]

    def tuple_probabilities(self, omegas: np.ndarray) -> np.ndarray:
        w = _check_tuples(omegas, self.V, self.n)
        return self.table[tuple(w.T)]

    def enumerate(self, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, np.ndarray]:
        return all_tuples(self.V, self.n), self.table.reshape(-1).copy()

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        size = _check_sample_args(size, rng)
        flat = rng.choice(self.table.size, size=size, p=self.table.reshape(-1))
        return np.stack(np.unravel_index(flat, self.table.shape), axis=1).astype(np.int64)


def combinations(k: int, n: int) -> np.ndarray:
    """``int64 [C(k, n), n]``: every set of n of the ids 0 .. k - 1, increasing within a row, rows in lexicographic
    order (as ``itertools.combinations``, without a Python loop over the rows)."""
    local = np.arange(k - n + 1, dtype=np.int64)[:, None]  # the partial sets that can still be completed
    for j in range(1, n):  # each one extended by every larger id that leaves room for the rest
        last = local[:, -1]
        grow = (k - n + j + 1) - (last + 1)  # [rows] ids last + 1 .. k - n + j
        start = np.repeat(last + 1 - np.cumsum(grow) + grow, grow)  # [C(., j + 1)] each new id's offset
        local = np.concatenate([np.repeat(local, grow, axis=0), (np.arange(start.size) + start)[:, None]], 1)
    return local


def mass_ranks(q):  # noqa: ANN001, ANN201 - numpy array or tensor
    """What :func:`mass_left` reads of draft laws ``q [B, V]`` (numpy or torch): ``(rank [B, V], suffix [B, V + 1])``,
    each token's rank by decreasing q (stable) and the suffix sums of q over the ranks >= r."""
    order = X.stable_descending(q)  # [B, V]
    return X.inverse_permutation(order), X.padded_suffix_sum(X.take(q, order))


def mass_left(ranks, qs, suffix, masks: list):  # noqa: ANN001, ANN201
    """q(V - T) ``[B, M, U]``, the mass left after drawing the tokens T of the slots in each bit mask of ``masks``
    (M of them, Python ints) for ``ranks, qs [B, n, U]`` (the drawn tokens' ranks by decreasing q and their masses;
    ``suffix``: :func:`mass_ranks`): the suffix sum of the ranks >= r minus the drawn tokens past them (each lighter
    than the undrawn token of rank r), r the number of top-ranked tokens all drawn, the least rank not drawn (no
    cancellation of 1 - q(T)). The empty mask's is 1 (as ``tuple_probabilities``: the first draw's mass left)."""
    xp = X.namespace(qs)
    B, n, U = ranks.shape
    if list(masks) == [0]:
        return X.full(qs, (B, 1, U), 1.0)
    member = [[j for j in range(n) if mask >> j & 1] for mask in masks]
    size = len(member[0]) if len(masks) == 1 else X.constant(ranks, [len(c) for c in member])[None, :, None]  # |T|
    drawn = {}  # slot j -> the masks that hold it ([1, M, 1] bool), None where every mask does
    for j in range(n):
        inside = [j in c for c in member]
        if any(inside):
            drawn[j] = None if all(inside) else X.constant(ranks, inside)[None, :, None]

    def where_drawn(j: int, cond):  # noqa: ANN001, ANN202
        return cond if drawn[j] is None else cond & drawn[j]

    # the drawn ranks below |T| as bits (distinct ranks: the sum is their union)
    low = sum(xp.where(where_drawn(j, ranks[:, j, None] < size), 1 << X.minimum(ranks[:, j, None], 62), 0)
              for j in drawn)
    clear = (low + 1) & ~low  # [B, M, U] the lowest bit not set: ranks 0 .. r - 1 all drawn
    r = np.frexp(clear)[1] - 1 if X.is_numpy(clear) else xp.frexp(clear.double()).exponent.long() - 1
    later = sum(xp.where(where_drawn(j, ranks[:, j, None] >= r), qs[:, j, None], 0.0) for j in drawn)
    M = r.shape[1]
    left = X.take(suffix, r.reshape(B, M * U)).reshape(B, M, U) - later
    return left if 0 not in masks else xp.where(size == 0, 1.0, left)  # [B, M, U] (the empty mask: 1)


def set_probabilities(q, sets):  # noqa: ANN001, ANN201 - numpy arrays or tensors
    """P(the n draws without replacement from ``q [B, V]`` are the set) ``[B, U]`` for ``sets int [U, n]`` of
    distinct tokens shared by the rows (numpy arrays, or tensors on one device: no host sync, static shapes). P(S)
    sums the n! orders by a recursion over the subsets T of S, f(T) = sum_{b in T} f(T - b) q_b / q(V - (T - b)),
    f(S) = P(S): 2^n n terms a set; each mass left q(V - T) by :func:`mass_left` (without the cancellation of
    1 - q(T)), each ratio capped at 1. The subsets go one at a time on numpy arrays ([B, U] temporaries) and all of
    one size at once on tensors (n steps: few kernel launches on a device); the same terms in the same order."""
    xp = X.namespace(q)
    B, (U, n) = q.shape[0], sets.shape
    rank, suffix = mass_ranks(q)
    qs, ranks = q[:, sets.T], rank[:, sets.T]  # [B, n, U]
    one = X.is_numpy(q)

    def groups(masks):  # noqa: ANN001, ANN202
        return [[m] for m in masks] if one else [list(masks)]

    def stacked(values: dict, keys: list):  # noqa: ANN202 - [B, len(keys), U]
        return values[keys[0]][:, None] if len(keys) == 1 else xp.stack([values[k] for k in keys], 1)

    left = {}  # q(V - T) [B, U] of each proper subset T of the slots, as a bit mask
    for group in groups(range((1 << n) - 1)):
        got = mass_left(ranks, qs, suffix, group)  # [B, len(group), U]
        left.update({mask: got[:, i] for i, mask in enumerate(group)})
    f = {0: X.full(q, (B, U), 1.0)}  # f(T) [B, U]
    for size in range(1, n + 1):  # every proper subset of a mask is smaller, so already done
        for group in groups([mask for mask in range(1 << n) if bin(mask).count("1") == size]):
            total = None
            for t in range(size):  # the t-th drawn slot b of each mask, in increasing slot order
                slot = [[j for j in range(n) if mask >> j & 1][t] for mask in group]
                rest = [mask ^ (1 << b) for mask, b in zip(group, slot, strict=True)]
                kept = stacked(left, rest)  # [B, len(group), U]
                drawn = qs[:, slot[0], None] if len(slot) == 1 else qs[:, X.constant(q, slot)]
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # (a subnormal mass left)
                    share = X.minimum(drawn / xp.where(kept > 0, kept, 1.0), 1.0)
                term = stacked(f, rest) * xp.where(kept > 0, share, 0.0)  # q_b / q(V - T), capped at 1
                total = term if total is None else total + term
            f.update({mask: total[:, i] for i, mask in enumerate(group)})
    return f[(1 << n) - 1]


def as_draft(draft: DraftScheme) -> DraftScheme:
    """Check that ``draft`` is a draft scheme (helpful error for the common mistake of passing q)."""
    if not isinstance(draft, DraftScheme):
        raise InputError(
            f"expected a draft scheme such as otlp.IID(q, n), got {type(draft).__name__}; "
            "wrap the draft distribution: otlp.IID(q, n)"
        )
    return draft
