"""Single-draft speculative sampling (Leviathan et al. 2023; Chen et al. 2023; SpecHub note §3.0).

Draft x ~ q; accept with probability min(1, p(x)/q(x)); otherwise emit y ~ norm(max(p - q, 0)).
Acceptance = sum_x min(p(x), q(x)) = 1 - TV(p, q). Given n i.i.d. drafts the rule looks at the first one only; a
residual sample equal to one of the other drafts still counts towards the membership acceptance.
"""

from __future__ import annotations

import numpy as np

from otlp.core.drafts import IID, DraftScheme
from otlp.verifiers.base import (
    Verifier,
    accept_probability,
    check_tensors,
    check_uniforms,
    coins,
    normalize_or,
    sequential_law,
)


class SingleDraft(Verifier):
    """Single-draft speculative sampling on the first draft of an i.i.d. tuple."""

    name = "sps"
    scheme = "iid"

    def make_draft(self, q: object, n: int = 1) -> DraftScheme:
        return IID(q, n)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None, backend: str = "auto"):  # noqa: ANN001, ANN201
        """The rule of the optimal sampler at n = 1 (:func:`otlp.optimal.chains.single_draft`) on the first draft:
        accept if u0 q(x) < p(x), else the inverse CDF of (p - q)^+ at u1 (the two uniforms drawn one after the
        other from ``generator``, in p's dtype, or the caller's ``uniforms [B, 2]``: one coin, one final uniform).
        ``backend`` as :func:`otlp.verifiers.rrs.verify_uniforms`' (:func:`otlp.verifiers.rrs.route`): ``"auto"``
        takes the fused kernel :func:`otlp.verifiers.triton_kernels.sps` on CUDA, ``"torch"`` the reference."""
        import torch

        from otlp.optimal.chains import single_draft
        from otlp.verifiers.rrs import route

        B, n, V = check_tensors(p, q, drafts)
        if uniforms is not None:
            u = check_uniforms(uniforms, B, p)
        else:
            u = torch.cat([coins(B, 1, p, generator), coins(B, 1, p, generator)], dim=1)  # [B, 2]
        if route(backend, p, q):
            from otlp.verifiers import triton_kernels

            return triton_kernels.sps(p, q, drafts, u)
        tokens, index = single_draft(p, q, drafts[:, :1], u)
        return tokens.long(), index.long()

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = draft.q
        x = omegas[:, :1]
        accept = accept_probability(p[x], q[x])  # [M, 1]
        residual = normalize_or(np.maximum(p - q, 0.0), p)
        return sequential_law(x, accept, residual, p.size)

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        p, draft = self.check_draft(p, draft)
        return float(np.minimum(p, draft.q).sum())

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        """alpha + sum_y r(y) P(first draft rejected, y among the other n-1 drafts) (closed form, derived):
        the residual r = norm((p - q)^+) lives where p > q, where the first draft is never rejected, so
        P(first rejected, y in drafts 2..n) = (1 - alpha) (1 - (1 - q(y))^(n-1))."""
        p, draft = self.check_draft(p, draft)
        q = draft.q
        alpha = float(np.minimum(p, q).sum())
        residual = normalize_or(np.maximum(p - q, 0.0), p)
        with np.errstate(divide="ignore"):  # q(y) = 1: log1p(-1) = -inf, expm1(-inf) = -1, others = 1
            others = -np.expm1((draft.n - 1) * np.log1p(-np.minimum(q, 1.0))) if draft.n > 1 else np.zeros_like(q)
        return alpha + (1.0 - alpha) * float(residual @ others)
