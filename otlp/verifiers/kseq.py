"""K-SEQ (SpecTr, Sun et al. NeurIPS 2023, Alg. 2 / Thm 1), written with p = target and q = draft (the paper swaps
the letters; SpecTr note §2.3, §7 pitfalls 1-4).

    beta(rho)  = sum_x min(q(x), p(x) / rho)
    p_acc(rho) = 1 - (1 - beta(rho))^n
    rho*       = inf { rho in [1, n] : f(rho) <= 0 },  f(rho) = p_acc(rho) - rho beta(rho)   (eq. 6; f non-increasing)
    accept draft i (in index order) with probability min(1, p(x_i) / (rho q(x_i))); output the first accepted
    else y ~ p_res,  p_res(x) = (p(x) - min(q(x), p(x)/rho) p_acc / beta) / (1 - p_acc)              (eq. 5)

The plan is valid exactly for rho >= rho* (the paper's proof states the direction backwards; SpecTr note Thm 1(a)),
so :func:`rho_star` returns the HIGH end of its bracket, where f(hi) <= 0, and the same rho is used in the test and in
eq. (5). Verifier acceptance = p_acc(rho) >= (1 - (1 - 1/n)^n) alpha* (Thm 1(c)).
"""

from __future__ import annotations

import numpy as np

from otlp.backend import native, scratch, threads
from otlp.core import xp as X
from otlp.core.drafts import IID, DraftScheme
from otlp.verifiers.base import (
    Verifier,
    accept_probability,
    check_tensors,
    check_uniforms,
    coins,
    finish,
    normalize_or,
    pick_outcome,
    sample_categorical,
    sequential_law,
    sequential_probabilities,
)


def bisection_steps(dtype) -> int:  # noqa: ANN001 - a numpy or torch float dtype
    """Bisection steps on [1, n]: the bracket shrinks below the resolution of rho in ``dtype`` (rho < 8 and
    (n - 1) 2^-steps: 52 steps in float64, 27 in float32, where f itself is only known to ~1e-7)."""
    bits = {2: 11, 4: 24}.get(getattr(dtype, "itemsize", 8), 53)
    return min(52, bits + 3)


#: the host's first stage: this many bisection steps over the whole rows.
HOST_FULL_STEPS = 4


def rho_star(p, q, n: int, steps: int | None = None):  # noqa: ANN001, ANN201 - numpy arrays or torch tensors
    """rho* of every row of ``p, q [..., V]`` (numpy or torch; on the tensors' device, no host synchronisation):
    ``[...]``, by bisection on [1, n] (``steps``, default :func:`bisection_steps` of the dtype), returning the
    HIGH end of the bracket, so f(rho) <= 0 (a valid plan).

    Each step evaluates beta(mid) mid = g(mid) = sum_x min(mid q(x), p(x)) in one pass over the vocabulary into one
    reused buffer: no sort (at V = 128k, B = 64 a sort of the ratios cost several times the whole bisection). On
    the host, ``[B, V]`` rows are bisected in chunks of rows that stay in the cache (:func:`otlp.core.xp.row_chunks`;
    side by side on :mod:`otlp.backend.threads` when torch has several threads), in two stages (:func:`_host_rho`; at
    every V: its numpy steps on the few inner tokens also cost less than the plain bisection's torch steps on small
    rows).
    """
    host = X.is_numpy(p) or (p.device.type == "cpu" and str(p.dtype) in ("torch.float32", "torch.float64"))
    if not host or n == 1 or p.ndim != 2:
        return _bisect(p, q, n, bisection_steps(p.dtype) if steps is None else steps)[1][..., 0]
    P, Q = (p, q) if X.is_numpy(p) else (p.detach().numpy(), q.detach().numpy())  # host views, no copy
    rho = _host_rho(P, Q, n, bisection_steps(P.dtype) if steps is None else steps)
    return rho if X.is_numpy(p) else X.namespace(p).from_numpy(rho)


def _host_rho(P: np.ndarray, Q: np.ndarray, n: int, steps: int) -> np.ndarray:
    """rho* of rows ``P, Q [B, V]`` (numpy) in two stages of the same bisection: ``HOST_FULL_STEPS`` steps over the
    whole rows, chunk by chunk (:func:`_first_stage`), then the others on all rows at once over each row's tokens
    whose breakpoint t = p / q lies inside the bracket [lo, hi] (zero-padded to the longest row's count: a pad adds
    0 to every sum).

    For mid in [lo, hi] a token with q hi <= p (t >= hi) adds mid q to g(mid) and one with q lo >= p (t <= lo) adds p
    (float products are monotone, so the classes hold for every rounded mid q): g(mid) = mid A + C + sum over the
    tokens between of min(mid q, p), with A and C the first two classes' sums. The tokens between are about 1% of an
    LM row after 4 steps, so the last steps cost next to nothing: float32 rows take about 23 passes over the whole
    rows instead of 81 (first stages of 3 to 8 steps measured at V = 32k and 128k: 3 and 4 the fastest). The second
    stage runs once for the whole batch, not once per chunk: its steps on a few hundred tokens are numpy calls whose
    cost hardly depends on the rows they hold."""
    first = min(steps, HOST_FULL_STEPS)
    parts = threads.map_chunks(lambda sl: _first_stage(P[sl], Q[sl], n, first, first < steps), X.row_chunks(P))
    if first == steps:
        return np.concatenate([part[1] for part in parts])[:, 0]
    lo, hi, A, C = (np.concatenate([part[k] for part in parts]) for k in range(4))  # [B, 1] each
    Pm = np.zeros((P.shape[0], max(part[4].shape[1] for part in parts)), dtype=P.dtype)  # [B, Tmax]
    Qm = np.zeros_like(Pm)
    at = 0
    for part in parts:
        b, t = part[4].shape
        Pm[at:at + b, :t], Qm[at:at + b, :t] = part[4], part[5]
        at += b
    return _bisect(Pm, Qm, n, steps - first, lo, hi, A, C)[1][:, 0]


def _first_stage(P: np.ndarray, Q: np.ndarray, n: int, steps: int, inner: bool) -> tuple:
    """:func:`_host_rho`'s first stage on rows ``P, Q [b, V]``: the bracket ``(lo, hi)`` (``[b, 1]`` each) after
    ``steps`` bisection steps over the whole rows; with ``inner`` also its classes, ``(lo, hi, A, C, Pm, Qm)``: A and
    C ``[b, 1]`` and the inner tokens' p and q left-aligned, zero-padded ``[b, T]``. Where :mod:`otlp.backend.native`'s
    kernels are built, in ``otlp_kseq_first_stage`` (one pass a step; products, sums and f in float64, so on float32
    rows a step whose f is within float32 rounding of 0 may go the other way than numpy's float32 step: both
    brackets then hold rho* to float32 resolution)."""
    got = native.kseq_first_stage(P, Q, n, steps, inner)  # one pass a step, where the kernels are built
    if got is not None:
        if not inner:
            return got
        lo, hi, A, C, rows, p_in, q_in = got
    else:
        lo, hi = _bisect(P, Q, n, steps)  # [b, 1]
        if not inner:
            return lo, hi
        above, below = Q * hi <= P, Q * lo >= P  # [b, V]: t >= hi, t <= lo (p = q = 0: both, adding 0 to each sum)
        A = (Q * above).sum(-1, keepdims=True)  # [b, 1]
        C = (P * below).sum(-1, keepdims=True)
        rows, cols = X.nonzero_2d(~(above | below))  # [T]: t strictly inside the bracket
        p_in, q_in = P[rows, cols], Q[rows, cols]
    counts, _, at = X.row_places(rows, P.shape[0])  # each token's place in its row
    Pm = np.zeros((P.shape[0], max(int(counts.max(initial=0)), 1)), dtype=P.dtype)  # [b, Tmax], 0-padded
    Qm = np.zeros_like(Pm)
    Pm[rows, at], Qm[rows, at] = p_in, q_in
    return lo, hi, A, C, Pm, Qm


def _bisect(p, q, n: int, steps: int, lo=None, hi=None, A=None, C=None):  # noqa: ANN001, ANN202
    """:func:`rho_star`'s bisection on all the rows of ``p, q [..., V]`` at once for ``steps`` steps from the bracket
    ``lo, hi [..., 1]`` (default [1, n]), with g(mid) = mid A + C + sum min(mid q, p) (``A, C [..., 1]``: the tokens
    left out, :func:`_host_rho`): ``(lo, hi)``."""
    xp = X.namespace(p)
    buf = scratch.array("kseq", p.shape, p.dtype) if X.is_numpy(p) else scratch.like("kseq", p)  # [..., V], reused
    if lo is None:
        lo = xp.ones_like(buf[..., :1])  # [..., 1]
        hi = lo * float(n)
    for _ in range(steps if n > 1 else 0):  # n = 1: the bracket [1, 1], K-SEQ is single-draft speculative sampling
        mid = 0.5 * (lo + hi)
        xp.multiply(q, mid, out=buf)
        xp.minimum(buf, p, out=buf)
        g = buf.sum(-1)[..., None]  # mid beta(mid)
        if A is not None:
            g = g + (mid * A + C)
        valid = 1.0 - (1.0 - g / mid) ** n - g <= 0.0
        hi = xp.where(valid, mid, hi)
        lo = xp.where(valid, lo, mid)
    return lo, hi


def kseq_parts(p, q, n: int):  # noqa: ANN001, ANN201 - numpy arrays or torch tensors
    """K-SEQ at rho = rho* for rows ``p, q [..., V]`` (numpy or torch, on the tensors' device): ``(rho, beta,
    p_acc)``, each ``[..., 1]``, and the unnormalised residual (p - capped p_acc / beta)^+ ``[..., V]`` with capped =
    min(q, p / rho) (eq. 5 times 1 - p_acc; clipped at 0 for rounding, note pitfall 2; beta = 0: disjoint supports,
    nothing is accepted and the residual is p). On torch the residual is the thread's work array ``"residual"``,
    filled in chunks of rows on the host (:func:`otlp.core.xp.row_chunks`)."""
    rho = rho_star(p, q, n)[..., None]
    if X.is_numpy(p):
        return (rho, *_residual(p, q, n, rho, np.empty_like(p)))
    residual = scratch.like("residual", p)  # [B, V]
    beta, p_acc = p.new_empty(rho.shape), p.new_empty(rho.shape)  # [B, 1]
    for sl in X.row_chunks(p):
        beta[sl], p_acc[sl], _ = _residual(p[sl], q[sl], n, rho[sl], scratch.like("kseq", p[sl]), residual[sl])
    return rho, beta, p_acc, residual


def _residual(p, q, n: int, rho, capped, out=None):  # noqa: ANN001, ANN202
    """:func:`kseq_parts` after rho: ``(beta, p_acc, residual)`` for rows ``p, q``, with ``capped`` a work array of
    their shape and ``out`` the residual's (torch; numpy returns a new array)."""
    xp = X.namespace(p)
    xp.divide(p, rho, out=capped)
    xp.minimum(capped, q, out=capped)
    beta = capped.sum(-1)[..., None]
    p_acc = 1.0 - (1.0 - beta) ** n
    factor = xp.where(beta > 0, p_acc / xp.where(beta > 0, beta, 1.0), 0.0)
    return beta, p_acc, X.positive_part(p, capped, scale=factor, out=out)


def _parts(p: np.ndarray, q: np.ndarray, n: int) -> tuple[float, float, float, np.ndarray]:
    """:func:`kseq_parts` of one law: ``(rho, beta, p_acc, p_res [V])`` with p_res normalised."""
    rho, beta, p_acc, residual = kseq_parts(p, q, n)
    return float(rho[0]), float(beta[0]), float(p_acc[0]), normalize_or(residual, p)


class KSeq(Verifier):
    """K-SEQ with rho = rho* (SpecTr Alg. 2)."""

    name = "kseq"
    scheme = "iid"

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return IID(q, n)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None):  # noqa: ANN001, ANN201
        """``(tokens [B], accepted_index [B])``: n coins and a residual uniform from ``generator``, or the caller's
        ``uniforms [B, 2]``: the coin picks the first accepted draft by inverse CDF over P(draft k first accepted)
        = a_k prod_{i<k} (1 - a_i), a_k = min(1, p(x_k) / (rho q(x_k))), the second draws the residual (eq. 5)."""
        B, n, V = check_tensors(p, q, drafts)
        rho, _, _, residual = kseq_parts(p, q, n)  # [B, 1], [B, V]
        if uniforms is not None:
            import torch

            u = check_uniforms(uniforms, B, p)
            a = accept_probability(p.gather(1, drafts), rho * q.gather(1, drafts))  # [B, n]
            index = pick_outcome(sequential_probabilities(a), u[:, 0])
            drawn = X.inverse_cdf(residual, u[:, 1:].to(residual.dtype), fallback=p)
            chosen = drafts.gather(1, index.clamp(min=0)[:, None])[:, 0]
            return torch.where(index >= 0, chosen, drawn).long(), index
        u = coins(B, n, p, generator)  # [B, n]
        p_x = p.gather(1, drafts)  # [B, n]
        q_x = q.gather(1, drafts)
        accept = u * rho * q_x < p_x
        return finish(drafts, accept, sample_categorical(residual, generator, fallback=p))

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = draft.q
        rho, _, _, p_res = _parts(p, q, draft.n)
        accept = accept_probability(p[omegas], rho * q[omegas])  # [M, n]
        return sequential_law(omegas, accept, p_res, p.size)

    def rho_star(self, p: object, draft: DraftScheme) -> float:
        p, draft = self.check_draft(p, draft)
        return float(rho_star(p, draft.q, draft.n))

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        """p_acc(rho) = 1 - (1 - beta(rho))^n."""
        p, draft = self.check_draft(p, draft)
        return float(_parts(p, draft.q, draft.n)[2])

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        """p_acc + sum_y p_res(y) [(1 - beta)^n - (1 - beta - q(y)(1 - a(y)))^n] (derived): the second factor is
        P(all drafts rejected and y among them), with a(y) = min(1, p(y) / (rho q(y))). At rho* exactly the sum
        vanishes (SpecTr note §2.3); at the bracket's high end it is of the order of f(rho), about 1e-16."""
        p, draft = self.check_draft(p, draft)
        q, n = draft.q, draft.n
        rho, beta, p_acc, p_res = _parts(p, q, n)
        reject_y = q * (1.0 - accept_probability(p, rho * q))  # P(a draft equals y and is rejected)
        all_rejected = 1.0 - beta
        with_y = all_rejected**n - np.maximum(all_rejected - reject_y, 0.0) ** n
        return float(p_acc + p_res @ with_y)
