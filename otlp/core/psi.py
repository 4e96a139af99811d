"""psi(H) = p(H) - P_draft(omega in H^n) and its minimum by the closed forms and brute force (GR eq. (4)).

The ground floor under :mod:`otlp.core.subsets` (which adds the general route through
:class:`~otlp.lp.formulations.subset_selection.SubsetSelection`) and under that formulation, which uses these
routes without importing ``otlp.core.subsets`` back.
"""

from __future__ import annotations

import math

import numpy as np

from otlp.core import xp as X
from otlp.core.distributions import check_distribution
from otlp.core.drafts import IID, DraftScheme, Greedy, SpecHub, as_draft
from otlp.core.errors import InputError, ModelTooLargeError

#: Brute force over 2^V subsets is allowed up to this V.
MAX_BRUTE_FORCE_V = 20


def psi(p: np.ndarray, draft: DraftScheme, mask: np.ndarray) -> np.ndarray | float:
    """psi(H) = p(H) - P_draft(omega in H^n) for ``mask: bool [V]`` or ``[K, V]`` (GR eq. (4))."""
    draft = as_draft(draft)
    p = check_distribution(p, "p", size=draft.V)
    try:
        m = np.asarray(mask, dtype=bool)
    except (TypeError, ValueError) as exc:
        raise InputError(f"mask must be a boolean array [V] or [K, V]: {exc}") from None
    if m.ndim not in (1, 2) or m.shape[-1] != draft.V:
        raise InputError(f"mask must have shape [V] or [K, V] with V = {draft.V}, got {m.shape}")
    return m.astype(np.float64) @ p - draft.subset_probability(m)


def ratio_keys(P, Q, out=None):  # noqa: ANN001, ANN201 - [..., V] numpy arrays or torch tensors
    """The sort keys of the tokens: q/p, +inf for p = 0 < q (and for a subnormal p whose ratio overflows), and -1
    (below every ratio) for p = q = 0 (``out``: a float64 numpy array to write them into)."""
    with X.errstate(P, divide="ignore", invalid="ignore", over="ignore"):
        ratio = Q / P if out is None else np.divide(Q, P, out=out)  # p = q = 0: NaN
    if X.is_numpy(ratio):
        np.copyto(ratio, -1.0, where=ratio != ratio)  # in place: one [B, V] array fewer to allocate
        return ratio
    return ratio.where(ratio == ratio, -1.0)


def ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token ids sorted by decreasing q/p, stable on ties (:func:`ratio_keys`, :func:`otlp.core.xp.sort_descending`; the
    order the class chains use): p = 0 < q first (ratio +inf, tied with a subnormal p whose ratio overflows), p = q = 0
    last. ``p, q: [..., V]`` (each row sorted on its own)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    keys = ratio_keys(p, q)  # [..., V], broadcast
    return X.sort_descending(keys.reshape(-1, keys.shape[-1])).reshape(keys.shape)


#: up to this n, :func:`prefix_psi` forms Q^n and (1 - Qbar)^n by repeated squaring (relative error at most about
#: 2 n ulp, so below 1.5e-14 absolute); above it by exp / log (whose error does not grow with n).
POWER_BY_SQUARING_MAX = 64


def int_power(x, k: int):  # noqa: ANN001, ANN201 - numpy array or tensor
    """x^k for an integer k >= 1 by repeated squaring: elementwise multiplications only (numpy's ``x ** k`` calls
    ``pow`` per entry, about 30x slower than a multiplication)."""
    out = None
    while True:
        if k & 1:
            out = x if out is None else out * x
        k >>= 1
        if not k:
            return out
        x = x * x


def psi_head(prefix_p, prefix_q, n: int):  # noqa: ANN001, ANN201 - floats, numpy arrays or tensors
    """P_m - Q_m^n, the prefix form of psi (:func:`prefix_psi`)."""
    return prefix_p - (int_power(prefix_q, n) if n <= POWER_BY_SQUARING_MAX else prefix_q**n)


def psi_tail(xp, suffix_p, qbar, n: int):  # noqa: ANN001, ANN201 - xp: math, numpy or torch
    """1 - (1 - Qbar_m)^n - Pbar_m, the suffix form of psi (:func:`prefix_psi`), with ``qbar`` = Qbar_m <= 1."""
    if n <= POWER_BY_SQUARING_MAX:
        return 1.0 - int_power(1.0 - qbar, n) - suffix_p
    if xp is math and qbar >= 1.0:  # math.log1p(-1) raises where numpy returns -inf
        return 1.0 - suffix_p
    return -xp.expm1(n * xp.log1p(-qbar)) - suffix_p


def prefix_psi(xp, prefix_p, prefix_q, suffix_p, suffix_q, n: int):  # noqa: ANN001, ANN201 - numpy or torch
    """psi_m = P_m - Q_m^n on the prefixes of an order, from the prefix sums ``P, Q`` and the suffix sums
    ``Pbar, Qbar`` (mass at positions >= m, summed from the top): all ``[..., V + 1]``, ``xp`` numpy or torch.

    Where Q_m > 1/2 the suffix form 1 - (1 - Qbar_m)^n - Pbar_m is used, so the p = q = 0 tail and psi_V = 0 come
    out exact rather than as 1e-16 rounding noise (design note §3, §4); psi_0 = psi_V = 0. The powers are products
    (:func:`int_power`) up to ``POWER_BY_SQUARING_MAX``, above it -expm1(n log1p(-Qbar)) and ``Q ** n``.
    The two forms are :func:`psi_head` and :func:`psi_tail`, which the scalar path (``otlp.optimal.scalar``) calls on
    floats; :func:`sorted_prefix_arrays` and ``otlp.optimal.chains.prefix`` use this.
    """
    tail = psi_tail(xp, suffix_p, suffix_q.clip(max=1.0), n)
    out = xp.where(prefix_q > 0.5, tail, psi_head(prefix_p, prefix_q, n))
    out[..., 0] = 0.0
    out[..., -1] = 0.0
    return out


def sorted_psi(ps, qs, n: int):  # noqa: ANN001, ANN201 - [..., V] arrays
    """psi on the prefixes of rows already in decreasing-ratio order (:func:`prefix_psi`, the suffix form
    where Q_m > 1/2): ``(prefix_p, prefix_q, suffix_q, psi)``, each ``[..., V + 1]``, numpy or torch (the running sums
    of :mod:`otlp.core.xp`: torch's kernels on large numpy arrays, numpy's sequential results bit for bit)."""
    xp = X.namespace(ps)
    prefix_p, prefix_q = X.padded_cumsum(ps), X.padded_cumsum(qs)
    suffix_p, suffix_q = X.padded_suffix_sum(ps), X.padded_suffix_sum(qs)  # positions >= m, summed from the top
    return prefix_p, prefix_q, suffix_q, prefix_psi(xp, prefix_p, prefix_q, suffix_p, suffix_q, n)


def sorted_prefix_psi(p: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """psi on the prefixes of the decreasing-q/p order, for i.i.d. drafts (GR Lemma 6.3).

    Returns ``(order [V], psi_prefix [V + 1])`` with ``psi_prefix[m] = P_m - Q_m^n`` over the first m tokens of
    ``order``. Where Q_m > 1/2 the suffix form ``1 - (1 - Qbar_m)^n - Pbar_m`` is used, so the
    p = q = 0 tail and psi_V = 0 come out exact rather than as 1e-16 rounding noise (design note §3, §4).
    Rows of ``p, q: [B, V]`` are handled at once (``order [B, V]``, ``psi [B, V + 1]``).
    """
    order, psi, _, _, _ = sorted_prefix_arrays(p, q, n)
    return order, psi


def sorted_prefix_arrays(p: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """:func:`sorted_prefix_psi` plus what it computes on the way: ``(order, psi, ps, qs, prefix_q)`` with
    ``ps, qs [..., V]`` the laws in that order and ``prefix_q [..., V + 1]`` the sums of their first m entries."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    order = ratio_order(p, q)
    if p.ndim == 1:  # plain fancy indexing (take_along_axis costs more)
        ps, qs = p[order], q[order]
    elif p.ndim == 2:
        rows = np.arange(p.shape[0])[:, None]
        ps, qs = p[rows, order], q[rows, order]
    else:
        ps, qs = np.take_along_axis(p, order, axis=-1), np.take_along_axis(q, order, axis=-1)
    with np.errstate(divide="ignore"):
        _, prefix_q, _, out = sorted_psi(ps, qs, n)
    return order, out, ps, qs, prefix_q


def brute_force_min_psi(p: np.ndarray, draft: DraftScheme, chunk: int = 1 << 14) -> tuple[float, np.ndarray]:
    """min_H psi(H) over all 2^V subsets (reference route for tiny V). Returns ``(value, mask [V])``."""
    draft = as_draft(draft)
    p = check_distribution(p, "p", size=draft.V)
    V = draft.V
    if V > MAX_BRUTE_FORCE_V:
        raise ModelTooLargeError(f"brute force over 2^{V} subsets", 2.0**V * V, 2.0**MAX_BRUTE_FORCE_V * V)
    best, best_mask = 0.0, np.zeros(V, dtype=bool)  # psi(empty) = 0
    bits = np.arange(V, dtype=np.int64)
    for start in range(0, 1 << V, chunk):
        codes = np.arange(start, min(start + chunk, 1 << V), dtype=np.int64)
        masks = ((codes[:, None] >> bits[None, :]) & 1).astype(bool)  # [chunk, V]
        values = masks.astype(np.float64) @ p - draft.subset_probability(masks)
        k = int(np.argmin(values))
        if values[k] < best:
            best, best_mask = float(values[k]), masks[k].copy()
    return best, best_mask


def closed_form_min_psi(p: np.ndarray, draft: DraftScheme) -> tuple[float, np.ndarray] | None:
    """min_H psi(H) and a minimiser where a closed form exists, else None.

    IID: sorted prefix, O(V log V) (GR Lemma 6.3). Greedy and SpecHub: psi is modular once the forced tokens are
    in H, so the minimiser takes every other token x with p(x) < P(x can be drafted). ``p`` is a checked vector.
    """
    V = draft.V
    if isinstance(draft, IID):
        from otlp.backend import native  # the C pass (the numpy route's bits) loads on first use, not with the core

        order = ratio_order(p, draft.q)
        got = native.prefix(p[None], draft.q[None], order[None], draft.n, reuse=True)  # after the sort, two passes
        if got is None:  # sorted_prefix_psi's numpy passes on this order
            with np.errstate(divide="ignore"):
                values = sorted_psi(p[order], draft.q[order], draft.n)[3]
            m = int(np.argmin(values))  # first exact argmin
        else:
            values, m = got[4][0], int(got[5][0])
        value = float(values[m])
        mask = np.zeros(V, dtype=bool)
        mask[order[:m]] = True
        return value, mask
    if isinstance(draft, (Greedy, SpecHub)):
        forced = np.zeros(V, dtype=bool)
        if isinstance(draft, Greedy):
            forced[draft.top] = True
            total = draft._rest_mass  # P(last draft = x) = q(x) / total below
        else:
            forced[draft.hub] = True
            total = draft._z  # Q(x, a) + Q(a, x) = q(x) / Z below
        # q(x) <= total for every unforced x, so each weight is <= 1 (a subnormal total must not overflow it)
        weight = np.minimum(np.divide(draft.q, total, out=np.zeros(V), where=~forced), 1.0)
        gain = p - weight  # psi increment of adding x once the forced tokens are in H
        mask = forced | ((gain < 0) & ~forced)
        value = float(p[forced].sum() + np.minimum(gain, 0.0)[~forced].sum())
        if value >= 0:
            return 0.0, np.zeros(V, dtype=bool)
        return value, mask
    return None
