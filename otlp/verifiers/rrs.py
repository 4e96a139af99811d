"""Recursive rejection sampling, with and without replacement (SpecInfer / MCSD; SpecHub Alg. 1, note §3.1).

    p_cur = p; q_cur = q
    for i = 1..n:
        accept x_i with probability min(1, p_cur(x_i) / q_cur(x_i))
        p_cur = norm(max(p_cur - q_cur, 0))                 # with the CURRENT q_cur
        without replacement: q_cur(x_i) = 0; q_cur = norm(q_cur)
    return y ~ p_cur

Each step is exact rejection sampling because x_i ~ q_cur given that step i is reached. A rejected x_i has
p_cur(x_i) = 0 from then on, so a residual sample never equals a rejected draft: acceptance == verifier acceptance.
Closed form with replacement (SpecHub note §4, derived): A(c) = sum_x min(p(x), c q(x)), c_0 = 0,
c_i = c_{i-1} + 1 - A(c_{i-1}); acceptance = A(c_n); for n = 2 it is sum_x min(p(x), (2 - alpha) q(x)).
Without replacement the same scalar chain holds with c's step divided by the q-mass left, which depends on the drafts
rejected so far: :mod:`otlp.verifiers.rrs_wor_acceptance` sums it over the rejected histories (exact in O(V log V) at
n <= 2, an interval from a best-first refinement at n >= 3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from otlp.backend import scratch
from otlp.core import xp as X
from otlp.core.drafts import IID, DraftScheme, WithoutReplacement
from otlp.core.errors import InputError
from otlp.verifiers.base import (
    Verifier,
    accept_probability,
    check_tensors,
    check_uniforms,
    coins,
    finish,
    normalize_or,
    sample_categorical,
    sequential_law,
)
from otlp.verifiers.rrs_wor_acceptance import (
    MAX_NODES,
    TIME_LIMIT,
    WIDTH,
    AcceptanceInterval,
    rejection_interval,
)

if TYPE_CHECKING:
    from otlp.cli.util import Progress


class RecursiveRejection(Verifier):
    """RRS with replacement (i.i.d. drafts): the residual chain p_0 = p, p_i = norm((p_{i-1} - q)^+) does not
    depend on the drafts."""

    name = "rrs"
    scheme = "iid"

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return IID(q, n)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None, backend: str = "auto"):  # noqa: ANN001, ANN201
        """``p, q [B, V]``, ``drafts [B, n]`` -> ``(tokens [B], accepted_index [B])``: n coins and one residual
        uniform per row from ``generator``, or the caller's ``uniforms [B, 2]`` (one coin per node and one final
        uniform, as engines pass them: :func:`verify_uniforms`, the same law; ``backend`` as there: on CUDA the
        fused Triton kernel)."""
        import torch

        B, n, V = check_tensors(p, q, drafts)
        if uniforms is not None:
            return verify_uniforms(p, q, drafts, check_uniforms(uniforms, B, p), backend=backend)
        check_backend(backend)  # (the coins' path has no kernel: every backend takes the torch operations)
        u = coins(B, n, p, generator)  # [B, n]
        accept = torch.empty((B, n), dtype=torch.bool, device=p.device)
        weights = scratch.like("residual", p)  # [B, V] the final residuals
        for sl in X.row_chunks(p):  # on the host in chunks of rows whose passes stay in the cache
            _chain(p[sl], q[sl], drafts[sl], u[sl], accept[sl], weights[sl])
        return finish(drafts, accept, sample_categorical(weights, generator))

    def residual_chain(self, p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
        """``[n + 1, V]``: p_0 = p, p_i = norm((p_{i-1} - q)^+) (kept as p_{i-1} when empty: never reached)."""
        chain = [p]
        for _ in range(n):
            chain.append(normalize_or(np.maximum(chain[-1] - q, 0.0), chain[-1]))
        return np.stack(chain)

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = draft.q
        chain = self.residual_chain(p, q, draft.n)  # [n + 1, V]
        accept = accept_probability(chain[np.arange(draft.n)[None, :], omegas], q[omegas])  # [M, n]
        return sequential_law(omegas, accept, chain[-1], p.size)

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        p, draft = self.check_draft(p, draft)
        c = 0.0
        for _ in range(draft.n):
            c = c + 1.0 - float(np.minimum(p, c * draft.q).sum())
        return float(np.minimum(p, c * draft.q).sum())

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        return self.verifier_acceptance(p, draft)  # residual never equals a rejected draft (module docstring)


class RecursiveRejectionWithoutReplacement(Verifier):
    """RRS without replacement: drafts drawn by successive sampling, q_cur loses each rejected token."""

    name = "rrs_wor"
    scheme = "without_replacement"
    #: the exact acceptance is a closed form (O(V log V), :func:`.rrs_wor_acceptance.rejection_interval`) for n up
    #: to here; above it, enumeration of the draft support (``otlp.sweep.compute.closed_form`` reads this)
    closed_form_n = 2

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return WithoutReplacement(q, n)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None, backend: str = "auto"):  # noqa: ANN001, ANN201
        """As :meth:`RecursiveRejection.sample` (``uniforms [B, 2]``: :func:`verify_uniforms` without replacement,
        which has no fused kernel: ``backend="triton"`` is refused)."""
        import torch

        B, n, V = check_tensors(p, q, drafts)
        if uniforms is not None:
            return verify_uniforms(p, q, drafts, check_uniforms(uniforms, B, p), without_replacement=True,
                                   backend=backend)
        check_backend(backend)
        u = coins(B, n, p, generator)  # [B, n]
        accept = torch.empty((B, n), dtype=torch.bool, device=p.device)
        weights, draft = scratch.like("residual", p), scratch.like("draft", q)  # [B, V] residuals, q_cur
        for sl in X.row_chunks(p):  # on the host in chunks of rows whose passes stay in the cache
            _chain_without_replacement(p[sl], q[sl], drafts[sl], u[sl], accept[sl], weights[sl], draft[sl])
        return finish(drafts, accept, sample_categorical(weights, generator))

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        M, n = omegas.shape
        rows = np.arange(M)
        p_cur = np.broadcast_to(p, (M, p.size)).copy()
        q_cur = np.broadcast_to(draft.q, (M, p.size)).copy()
        accept = np.zeros((M, n))
        for k in range(n):
            x = omegas[:, k]
            accept[:, k] = accept_probability(p_cur[rows, x], q_cur[rows, x])
            p_cur = normalize_or(np.maximum(p_cur - q_cur, 0.0), p_cur)
            q_cur[rows, x] = 0.0
            q_cur = normalize_or(q_cur, q_cur)
        return sequential_law(omegas, accept, p_cur, p.size)

    def acceptance_interval(self, p: object, draft: DraftScheme, *, width: float = WIDTH,
                            max_nodes: int = MAX_NODES, time_limit: float = TIME_LIMIT,
                            progress: Progress | None = None) -> AcceptanceInterval:
        """The exact acceptance (= verifier acceptance) as an interval ``[lo, hi]``, without enumerating V^n tuples:
        :func:`otlp.verifiers.rrs_wor_acceptance.rejection_interval` (n <= 2 in O(V log V), width the rounding bound;
        n >= 3 a best-first refinement over rejected histories, down to ``width`` or the node / time limit).

        :meth:`verifier_acceptance` takes it at n <= 2 only (:data:`closed_form_n`), where it is a closed form; at
        n >= 3 it stays the enumeration, since this interval is not one (certify calls this method itself)."""
        p, draft = self.check_draft(p, draft)
        return rejection_interval(p, draft.q, draft.n, width=width, max_nodes=max_nodes, time_limit=time_limit,
                                  progress=progress)

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        """At n <= :data:`closed_form_n` the closed form (the midpoint of :meth:`acceptance_interval`, whose width
        there is the rounding bound, ~1e-14 at V = 32k); else the enumeration of the base class."""
        p, draft = self.check_draft(p, draft)
        if draft.n > self.closed_form_n:
            return super().verifier_acceptance(p, draft)
        got = rejection_interval(p, draft.q, draft.n)  # (inputs checked above, not again by acceptance_interval)
        return 0.5 * (got.lo + got.hi)

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        return self.verifier_acceptance(p, draft)  # residual never equals a rejected draft (module docstring)


def _chain(p, q, drafts, u, accept, out) -> None:  # noqa: ANN001 - torch tensors
    """RRS's accept tests on rows ``p, q [B, V]``, ``drafts [B, n]``, coins ``u [B, n]``, into ``accept bool [B, n]``,
    and the residual after the last draft, unnormalised, into ``out [B, V]``.

    p_k = r / s, unnormalised in one buffer: r_0 = p, s_0 = 1, r_{k+1} = (r_k - s_k q)^+ = s_k (p_k - q)^+ (in place
    after the first step) and s_{k+1} its sum. A residual that empties (p_k = q up to rounding, so step k accepted
    surely) freezes its row at p_k = q: r = 0, s = 1, the test and the weights read r + frozen q."""
    import torch

    r, s = p, torch.ones((p.shape[0], 1), dtype=p.dtype, device=p.device)  # [B, V], [B, 1]
    frozen = torch.zeros_like(s)  # [B, 1] 1.0 on frozen rows
    for k in range(drafts.shape[1]):  # loop over draft positions, not over the batch
        x = drafts[:, k:k + 1].long()  # [B, 1]
        q_x = q.gather(1, x)
        accept[:, k] = (u[:, k:k + 1] * q_x * s < r.gather(1, x) + frozen * q_x).squeeze(1)
        r = X.positive_part(r, q, out=out) if k == 0 else r.addcmul_(q, frozen - s).clamp_(min=0)
        total = r.sum(dim=1, keepdim=True)  # [B, 1]
        frozen = torch.where(total > 0, frozen, 1.0)
        s = torch.where(total > 0, total, 1.0)
    r.addcmul_(q, frozen)


def _chain_without_replacement(p, q, drafts, u, accept, out, draft) -> None:  # noqa: ANN001 - torch tensors
    """RRS without replacement's accept tests on rows ``p, q [B, V]`` (as :func:`_chain`; ``draft [B, V]`` a work
    array for q_cur), the final residual into ``out``.

    p_k = r / s and q_k = qc / z unnormalised (the module docstring's p_cur, q_cur): r_0 = p, qc_0 = q, s_0 = z_0 = 1;
    r_{k+1} = (r_k - (s_k / z_k) qc_k)^+ (in place after the first step), qc_{k+1} = qc_k without x_k, s and z their
    sums. A residual that empties (p_k = q_k up to rounding, so step k accepted surely) freezes its row at
    p = q_cur: it accepts every later draft, and its weights are r + frozen qc."""
    import torch

    one = torch.ones((p.shape[0], 1), dtype=p.dtype, device=p.device)
    r, s, qc, z = p, one, draft.copy_(q), one  # [B, V], [B, 1], [B, V], [B, 1]
    frozen = torch.zeros((p.shape[0], 1), dtype=torch.bool, device=p.device)
    for k in range(drafts.shape[1]):
        x = drafts[:, k:k + 1].long()  # [B, 1]
        qc_x = qc.gather(1, x)
        accept[:, k] = ((u[:, k:k + 1] * qc_x * s < r.gather(1, x) * z) | frozen).squeeze(1)
        # z = 0: q is spent, a row that drew such drafts had probability 0
        scale = torch.where(frozen | (z <= 0), 0.0, s / z)
        r = X.positive_part(r, qc, scale, out=out) if k == 0 else r.addcmul_(qc, -scale).clamp_(min=0)
        total = r.sum(dim=1, keepdim=True)  # [B, 1]
        frozen = frozen | (total == 0)
        s = torch.where(frozen, 1.0, total)
        qc.scatter_(1, x, 0.0)
        z = qc.sum(dim=1, keepdim=True)  # summed, not decremented: no cancellation as q_cur's mass runs out
    r.addcmul_(qc, frozen.to(p.dtype))


#: :func:`verify_uniforms`' routes: ``"auto"`` the fused Triton kernel on CUDA rows it takes
#: (:func:`otlp.verifiers.triton_kernels.takes`; with replacement), else torch; ``"torch"`` the torch operations
#: below (the reference); ``"triton"`` the kernel on any device (on the CPU under ``TRITON_INTERPRET=1``)
BACKENDS = ("auto", "torch", "triton")


def check_backend(backend: str) -> None:
    """A one-line InputError unless ``backend`` is one of :data:`BACKENDS`."""
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")


def route(backend: str, p, q) -> bool:  # noqa: ANN001 - torch tensors
    """Whether ``backend`` (:data:`BACKENDS`) sends rows ``p, q`` to the fused kernel of
    :mod:`otlp.verifiers.triton_kernels`, as :func:`verify_uniforms` and sps's ``sample`` choose."""
    from otlp.verifiers import triton_kernels

    check_backend(backend)
    if backend == "triton" and not triton_kernels.available():
        raise InputError("backend='triton' needs Triton (pip install triton; torch's CUDA builds ship it)")
    return backend == "triton" or (backend == "auto" and triton_kernels.takes(p, q))


def verify_uniforms(p, q, drafts, u, widths=None, *, without_replacement: bool = False,  # noqa: ANN001, ANN201
                    backend: str = "auto"):
    """RRS (with or without replacement) driven by one coin per node and one final uniform, as serving engines
    supply randomness: ``p, q [B, V]`` (q the law the drafts were drawn from), ``drafts [B, n]``, ``u [B, 2]``
    (``u[:, 0]`` picks the outcome, ``u[:, 1]`` the residual token), ``widths [B]`` (optional, 0..n: row b has only
    its first ``widths[b]`` drafts, the rest is padding and never read; width 0 draws the token from p). Returns
    ``(tokens int64 [B], accepted_index int64 [B])`` with -1 where the token came from the residual.

    The rule's outcome law given the drafts (module docstring): draft k is accepted with probability
    a_k prod_{i<k} (1 - a_i), a_k = min(1, p_k(x_k) / q_k(x_k)) along the residual chain p_0 = p,
    p_{k+1} = norm((p_k - q_k)^+) (q_k = q with replacement; q without x_0..x_{k-1}, renormalised, without), and the
    residual p_m after all m rejections. The coin takes that law by inverse CDF: draft 0 iff u0 q(x_0) < p(x_0)
    (the engines' single-draft test, in the inputs' dtypes), else draft k >= 1 the first with
    u0 < 1 - prod_{i<=k} (1 - a_i) (float64); the residual is drawn by inverse CDF at u1 (in p's dtype, as the
    kernels form u * total) from the unnormalised r_m (r_0 = p, r_{k+1} = (r_k - (s_k / z_k) qc_k)^+ in p's dtype,
    s, z the sums of r, qc), so a one-child node draws from (p - q)^+ exactly as SGLang's and FlashInfer's kernels
    do. A request rejects at most once per node, so the two
    uniforms suffice; the law equals the generator path's (:meth:`RecursiveRejection.sample`).

    ``backend`` (:data:`BACKENDS`, :func:`route`): with replacement, ``"auto"`` runs CUDA rows through the fused
    kernel :func:`otlp.verifiers.triton_kernels.rrs` (the same tokens up to the rounding its docstring states; one
    program per row, no host sync); the torch operations below are the reference."""
    import torch

    if route(backend, p, q) and not without_replacement:
        from otlp.verifiers import triton_kernels

        return triton_kernels.rrs(p, q, drafts, u, widths)
    if backend == "triton":
        raise InputError("backend='triton' has a kernel for rrs with replacement only (rrs_wor: backend='torch')")
    B, n = drafts.shape
    x = drafts.long()  # [B, n]
    W = None if widths is None else widths.long()
    u0, u1 = u[:, 0], u[:, 1:2]  # [B], [B, 1]
    one = torch.ones((B, 1), dtype=p.dtype, device=p.device)
    r, s, qc, z = p, one, q, one  # unnormalised residual and current draft law, in p's dtype, and their sums
    if without_replacement:
        qc = scratch.like("draft", q).copy_(q)  # q_cur, in this thread's work array
    slot = torch.full((B,), -1, dtype=torch.long, device=p.device)
    reach = torch.ones(B, dtype=torch.float64, device=p.device)  # prod_{i<k} (1 - a_i)
    for k in range(n):  # loop over draft positions, not over the batch
        xk = x[:, k:k + 1]
        num = r.gather(1, xk)[:, 0].double() * z[:, 0].double()  # a_k = min(1, num / den)
        den = s[:, 0].double() * qc.gather(1, xk)[:, 0].double()
        reach = reach * (1.0 - accept_probability(num, den))
        take = u0 * q.gather(1, xk)[:, 0] < p.gather(1, xk)[:, 0] if k == 0 else u0.double() < 1.0 - reach
        live = take & (slot < 0) if W is None else take & (slot < 0) & (k < W)
        slot = torch.where(live, k, slot)
        # r_{k+1} = (r_k - (s_k / z_k) qc_k)^+ in place, in this thread's work array (the first from p, q); a row
        # past its widths[b] drafts keeps its residual (scale 0), so r ends at each row's own r_m
        scale = s / z if W is None else (s / z) * (k < W)[:, None].to(p.dtype)  # [B, 1]
        r = X.positive_part(p, q, None if W is None else scale) if k == 0 else r.addcmul_(qc, -scale).clamp_(min=0)
        total = r.sum(1, keepdim=True)
        empty = total <= 0  # r_k = (s / z) qc: draft k was accepted surely, the rest is never reached; keep r_k
        r.addcmul_(qc, scale * empty)
        s = torch.where(empty, s, total)
        if without_replacement:
            qc.scatter_(1, xk, 0.0)
            z = qc.sum(1, keepdim=True)
            z = torch.where(z > 0, z, 1.0)  # q spent: a row that drew such drafts had probability 0
    drawn = X.inverse_cdf(r, u1.to(p.dtype))
    chosen = x.gather(1, slot.clamp(min=0)[:, None])[:, 0]
    return torch.where(slot >= 0, chosen, drawn), slot
