"""Reference verifiers used by the decode loop when ``otlp.verifiers`` does not provide the name asked for.

All follow the contract of docs/ARCHITECTURE.md "Tensors": ``sample(p [B, V], q [B, V], drafts [B, n],
generator) -> (tokens [B], accepted_index [B])`` with -1 when no draft is accepted.

- ``speculative_sampling``: single draft (Leviathan et al. 2023; Chen et al. 2023, Alg. 2): accept x w.p.
  min(1, p(x)/q(x)), else sample norm(max(p - q, 0)). With n > 1 drafts only the first is used.
- ``recursive_rejection_sampling``: RRS (SpecInfer, Miao et al. 2023; SpecHub note §3.1, Algorithm 1), with
  replacement (i.i.d. drafts) or without (drafts sampled without replacement): draft i is tested against the
  current residual p_i, p_{i+1} = norm(max(p_i - q_i, 0)) with the *current* q_i; without replacement
  q_{i+1} = norm(q_i with x_i removed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def _residual_sample(residual: torch.Tensor, fallback: torch.Tensor, generator: torch.Generator | None
                     ) -> torch.Tensor:
    """One token per row from norm(residual); rows with no residual mass (only reached with probability 0,
    up to rounding) sample from ``fallback`` instead."""
    import torch

    mass = residual.sum(dim=-1, keepdim=True)  # [B, 1]
    safe = torch.where(mass > 0, residual, fallback)
    return torch.multinomial(safe, 1, generator=generator).squeeze(-1)


def speculative_sampling(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-draft speculative sampling on ``drafts[:, 0]``; output law p exactly."""
    import torch

    x = drafts[:, 0]  # [B]
    px = p.gather(1, x[:, None]).squeeze(1)
    qx = q.gather(1, x[:, None]).squeeze(1)
    u = torch.rand(x.shape, generator=generator, dtype=p.dtype, device=p.device)
    accept = (u * qx < px) & (qx > 0)  # p(x) > u q(x): accept w.p. min(1, p/q), no division
    residual = torch.clamp(p - q, min=0.0)  # [B, V]
    y = _residual_sample(residual, p, generator)
    tokens = torch.where(accept, x, y)
    return tokens, torch.where(accept, torch.zeros_like(x), torch.full_like(x, -1))


def recursive_rejection_sampling(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                                 generator: torch.Generator | None = None, *, without_replacement: bool = False
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """RRS over the n drafts in order; output law p exactly when the drafts follow the scheme it expects."""
    import torch

    B, n = drafts.shape
    p_cur = p.clone()  # [B, V]
    q_cur = q.clone()  # [B, V]
    accepted = torch.full((B,), -1, dtype=torch.int64, device=p.device)
    tokens = torch.zeros(B, dtype=torch.int64, device=p.device)
    u = torch.rand((B, n), generator=generator, dtype=p.dtype, device=p.device)
    for i in range(n):  # n is the number of drafts (small), each step is vectorised over the batch
        x = drafts[:, i]
        px = p_cur.gather(1, x[:, None]).squeeze(1)
        qx = q_cur.gather(1, x[:, None]).squeeze(1)
        hit = (accepted < 0) & (qx > 0) & (u[:, i] * qx < px)
        tokens = torch.where(hit, x, tokens)
        accepted = torch.where(hit, torch.full_like(accepted, i), accepted)
        residual = torch.clamp(p_cur - q_cur, min=0.0)
        mass = residual.sum(dim=-1, keepdim=True)
        # no residual mass: p_cur <= q_cur everywhere, so p_cur = q_cur and the test accepted surely
        p_cur = torch.where(mass > 0, residual / torch.where(mass > 0, mass, 1.0), p_cur)
        if without_replacement:
            q_cur = q_cur.scatter(1, x[:, None], 0.0)
            q_mass = q_cur.sum(dim=-1, keepdim=True)
            q_cur = torch.where(q_mass > 0, q_cur / torch.where(q_mass > 0, q_mass, 1.0), q_cur)
    y = _residual_sample(p_cur, p, generator)
    tokens = torch.where(accepted >= 0, tokens, y)
    return tokens, accepted


def recursive_rejection_sampling_without_replacement(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                                                     generator: torch.Generator | None = None
                                                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """RRS for drafts sampled without replacement (RRS-w, SpecHub note §3.1)."""

    return recursive_rejection_sampling(p, q, drafts, generator, without_replacement=True)


#: name -> (verifier, draft scheme it expects)
BUILTIN_VERIFIERS = {
    "sps": (speculative_sampling, "iid"),
    "rrs": (recursive_rejection_sampling, "iid"),
    "rrs_wor": (recursive_rejection_sampling_without_replacement, "without_replacement"),
}
