"""The optimal transport for the greedy draft scheme (hu2025towards; GR App. O): omega = (T, x) with T the top n-1
tokens of q (fixed) and x ~ w on the rest, w(x) = q(x) / q(V minus T).

Every tuple contains T, so the OTLP decouples (derived; matches ``otlp.core.subsets.min_psi`` for Greedy):
    accept x with probability min(1, p(x) / w(x))                     (single-draft SD of x against p on V minus T)
    else, with leftover L = sum_{x not in T} (w(x) - p(x))^+, output t in T w.p. min(1, p(T)/L) p(t)/p(T)
    else y ~ norm((p - w)^+ on V minus T).
Since sum_{x not in T} (p - w)^+ = L - p(T) >= 0, every t in T is served in full, the residual lives where x is
always accepted (acceptance == verifier acceptance), and
    acceptance = p(T) + sum_{x not in T} min(p(x), w(x)) = 1 + min_H psi(H) = alpha*  for the greedy scheme.
"""

from __future__ import annotations

import numpy as np

from otlp.core import xp as X
from otlp.core.drafts import DraftScheme, Greedy
from otlp.verifiers.base import (
    Verifier,
    accept_probability,
    check_tensors,
    check_uniforms,
    coins,
    gather,
    normalize_or,
    pick_outcome,
    sample_categorical,
)


class GreedyOptimal(Verifier):
    """Optimal verification of the greedy draft scheme (top n-1 of q, last draft sampled from the rest)."""

    name = "greedy"
    scheme = "greedy"

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return Greedy(q, n)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None):  # noqa: ANN001, ANN201
        """``(tokens [B], accepted_index [B])``; randomness from ``generator`` or the caller's ``uniforms [B, 2]``:
        the coin picks x (probability a = min(1, p(x)/w(x))), else T (probability (1 - a) min(1, p(T)/L)), else the
        residual; the second uniform draws the token of T (by p(t)/p(T)) or the residual's, whichever is needed."""
        import torch

        B, n, V = check_tensors(p, q, drafts)
        top = drafts[:, : n - 1]  # [B, n-1] the deterministic part of omega
        x = drafts[:, n - 1]  # [B]
        in_top = torch.zeros((B, V), dtype=torch.bool, device=p.device).scatter(1, top, True)  # [B, V]
        zero = torch.zeros_like(p)
        rest = torch.where(in_top, zero, q)
        rest_mass = rest.sum(dim=1, keepdim=True)
        w = rest / torch.where(rest_mass > 0, rest_mass, torch.ones_like(rest_mass))  # [B, V]
        p_top = torch.where(in_top, p, zero).sum(dim=1)  # [B]
        leftover = torch.relu(w - torch.where(in_top, zero, p)).sum(dim=1)  # [B]
        if uniforms is not None:
            return _with_uniforms(p, w, x, top, in_top, p_top, leftover, check_uniforms(uniforms, B, p))
        u = coins(B, 2, p, generator)
        take_x = u[:, 0] * gather(w, x) < gather(p, x)
        take_top = ~take_x & (u[:, 1] * leftover < p_top)
        residual = sample_categorical(X.positive_part(p, w).masked_fill_(in_top, 0.0), generator, fallback=p)
        tokens = torch.where(take_x, x, residual)
        index = torch.where(take_x, torch.full_like(x, n - 1), torch.full_like(x, -1))
        if n > 1:
            k = sample_categorical(p.gather(1, top), generator)  # [B] position in T, chosen with prob p(t)/p(T)
            tokens = torch.where(take_top, top.gather(1, k.unsqueeze(1)).squeeze(1), tokens)
            index = torch.where(take_top, k, index)
        return tokens.long(), index.long()

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        M, n = omegas.shape
        V = p.size
        in_top = np.zeros(V, dtype=bool)
        in_top[draft.top] = True
        w = np.where(in_top, 0.0, draft.q) / draft._rest_mass
        p_top = float(p[in_top].sum())
        leftover = float(np.maximum(w - p, 0.0)[~in_top].sum())
        x = omegas[:, n - 1]
        a = accept_probability(p[x], w[x])  # [M]
        h = float(accept_probability(p_top, leftover))
        law = np.zeros((M, V))
        np.add.at(law, (np.arange(M), x), a)
        if p_top > 0:
            law += ((1.0 - a) * h)[:, None] * np.where(in_top, p, 0.0)[None, :] / p_top
        else:
            h = 0.0
        rejected = (1.0 - a) * (1.0 - h)
        law += rejected[:, None] * normalize_or(np.where(in_top, 0.0, np.maximum(p - w, 0.0)), p)[None, :]
        return law, 1.0 - rejected

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        """p(T) + sum_{x not in T} min(p(x), w(x)), capped by the hub term min(L, p(T))."""
        p, draft = self.check_draft(p, draft)
        in_top = np.zeros(p.size, dtype=bool)
        in_top[draft.top] = True
        w = np.where(in_top, 0.0, draft.q) / draft._rest_mass
        leftover = float(np.maximum(w - p, 0.0)[~in_top].sum())
        return float(np.minimum(p, w)[~in_top].sum() + min(leftover, float(p[in_top].sum())))

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        return self.verifier_acceptance(p, draft)


def _with_uniforms(p, w, x, top, in_top, p_top, leftover, u):  # noqa: ANN001, ANN202 - torch tensors
    """The greedy rule's outcome from one coin ``u[:, 0]`` and its token from ``u[:, 1]`` (see ``sample``)."""
    import torch

    n = top.shape[1] + 1
    a = accept_probability(gather(p, x), gather(w, x))  # [B]
    h = accept_probability(p_top, leftover) if n > 1 else torch.zeros_like(a)
    outcome = pick_outcome(torch.stack([a, (1.0 - a) * h], dim=1), u[:, 0])  # 0: x, 1: T, -1: residual
    weights = X.positive_part(p, w).masked_fill_(in_top, 0.0)
    drawn = X.inverse_cdf(weights, u[:, 1:].to(weights.dtype), fallback=p)
    tokens = torch.where(outcome == 0, x, drawn)
    index = torch.where(outcome == 0, n - 1, -1)
    if n > 1:
        k = X.inverse_cdf(p.gather(1, top), u[:, 1:].to(p.dtype))  # [B] position in T, with prob p(t)/p(T)
        tokens = torch.where(outcome == 1, top.gather(1, k[:, None])[:, 0], tokens)
        index = torch.where(outcome == 1, k, index)
    return tokens.long(), index.long()
