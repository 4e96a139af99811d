"""K-SEQ (SpecTr, Sun et al. NeurIPS 2023, Alg. 2 / Thm 1), written with p = target and q = draft (the paper swaps
the letters; SpecTr note §2.3, §7 pitfalls 1-4).

    beta(rho)  = sum_x min(q(x), p(x) / rho)
    p_acc(rho) = 1 - (1 - beta(rho))^n
    rho*       = inf { rho in [1, n] : f(rho) <= 0 },  f(rho) = p_acc(rho) - rho beta(rho)   (eq. 6; f non-increasing)
    accept draft i (in index order) with probability min(1, p(x_i) / (rho q(x_i))); output the first accepted
    else y ~ p_res,  p_res(x) = (p(x) - min(q(x), p(x)/rho) p_acc / beta) / (1 - p_acc)              (eq. 5)

The plan is valid exactly for rho >= rho* (the paper's proof states the direction backwards; SpecTr note Thm 1(a)),
so the bisection returns the HIGH end of its bracket, where f(hi) <= 0, and the same rho is used in the test and in
eq. (5). Verifier acceptance = p_acc(rho) >= (1 - (1 - 1/n)^n) alpha* (Thm 1(c)).
"""

from __future__ import annotations

import numpy as np

from otlp.drafts import IID, DraftScheme
from otlp.verifiers.base import (
    Verifier,
    accept_probability,
    check_tensors,
    coins,
    finish,
    normalize_or,
    np_normalize_or,
    sample_categorical,
    sequential_law,
)

#: Bisection steps on [1, n]: the bracket shrinks to (n - 1) 2^-52, below float64 resolution of rho.
BISECTION_STEPS = 52


def rho_star_numpy(p: np.ndarray, q: np.ndarray, n: int, steps: int = BISECTION_STEPS) -> float:
    """rho* by bisection on [1, n]; returns the high end (a valid rho, f(rho) <= 0)."""
    lo, hi = 1.0, float(n)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        beta = float(np.minimum(q, p / mid).sum())
        if 1.0 - (1.0 - beta) ** n - mid * beta <= 0.0:
            hi = mid
        else:
            lo = mid
    return hi


def rho_star_torch(p, q, n: int, steps: int = BISECTION_STEPS):  # noqa: ANN001, ANN201
    """Batched rho* ``[B]`` (high end of the bracket), no host synchronisation.

    With r(x) = p(x)/q(x) (+inf where q = 0), beta(rho) = q(r >= rho) + p(r < rho)/rho. One sort of r and two
    prefix sums make each bisection step a batched ``searchsorted`` (O(B log V)) instead of a pass over V.
    """
    import torch

    B, V = p.shape
    positive = q > 0
    r = torch.where(positive, p / torch.where(positive, q, torch.ones_like(q)), torch.full_like(p, float("inf")))
    r_sorted, order = torch.sort(r, dim=1)  # [B, V]
    zero = torch.zeros((B, 1), dtype=p.dtype, device=p.device)
    prefix_p = torch.cat([zero, torch.cumsum(torch.where(positive, p, 0.0).gather(1, order), 1)], 1)  # [B, V+1]
    prefix_q = torch.cat([zero, torch.cumsum(q.gather(1, order), 1)], 1)
    total_q = prefix_q[:, -1]
    lo = torch.ones(B, dtype=p.dtype, device=p.device)
    hi = torch.full((B,), float(n), dtype=p.dtype, device=p.device)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        k = torch.searchsorted(r_sorted, mid.unsqueeze(1))  # [B, 1]: number of tokens with r < mid
        beta = (total_q - prefix_q.gather(1, k).squeeze(1)) + prefix_p.gather(1, k).squeeze(1) / mid
        valid = 1.0 - (1.0 - beta) ** n - mid * beta <= 0.0
        hi = torch.where(valid, mid, hi)
        lo = torch.where(valid, lo, mid)
    return hi


def kseq_parts_numpy(p: np.ndarray, q: np.ndarray, n: int) -> tuple[float, float, float, np.ndarray]:
    """``(rho, beta, p_acc, p_res [V])`` for the i.i.d. draft law q."""
    rho = rho_star_numpy(p, q, n)
    capped = np.minimum(q, p / rho)
    beta = float(capped.sum())
    p_acc = 1.0 - (1.0 - beta) ** n
    factor = p_acc / beta if beta > 0 else 0.0  # beta = 0: disjoint supports, nothing is ever accepted
    p_res = np_normalize_or(np.maximum(p - capped * factor, 0.0), p)  # clip rounding below 0 (note pitfall 2)
    return rho, beta, p_acc, p_res


class KSeq(Verifier):
    """K-SEQ with rho = rho* (SpecTr Alg. 2)."""

    name = "kseq"
    scheme = "iid"

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return IID(q, n)

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001, ANN201
        import torch

        B, n, V = check_tensors(p, q, drafts)
        rho = rho_star_torch(p, q, n).unsqueeze(1)  # [B, 1]
        capped = torch.minimum(q, p / rho)  # [B, V]
        beta = capped.sum(dim=1, keepdim=True)  # [B, 1]
        p_acc = 1.0 - (1.0 - beta) ** n
        factor = torch.where(beta > 0, p_acc / torch.where(beta > 0, beta, torch.ones_like(beta)),
                             torch.zeros_like(beta))
        residual = normalize_or(torch.relu(p - capped * factor), p)  # [B, V]
        u = coins(B, n, p, generator)  # [B, n]
        p_x = p.gather(1, drafts)  # [B, n]
        q_x = q.gather(1, drafts)
        accept = u * rho * q_x < p_x
        return finish(drafts, accept, sample_categorical(residual, generator))

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = draft.q
        rho, _, _, p_res = kseq_parts_numpy(p, q, draft.n)
        accept = accept_probability(p[omegas], rho * q[omegas])  # [M, n]
        return sequential_law(omegas, accept, p_res, p.size)

    def rho_star(self, p: object, draft: DraftScheme) -> float:
        p, draft = self.check_draft(p, draft)
        return rho_star_numpy(p, draft.q, draft.n)

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        """p_acc(rho) = 1 - (1 - beta(rho))^n."""
        p, draft = self.check_draft(p, draft)
        return float(kseq_parts_numpy(p, draft.q, draft.n)[2])

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        """p_acc + sum_y p_res(y) [(1 - beta)^n - (1 - beta - q(y)(1 - a(y)))^n] (derived): the second factor is
        P(all drafts rejected and y among them), with a(y) = min(1, p(y) / (rho q(y))). At rho* exactly the sum
        vanishes (SpecTr note §2.3); at the bisection's high end it is of the order of f(rho), about 1e-16."""
        p, draft = self.check_draft(p, draft)
        q, n = draft.q, draft.n
        rho, beta, p_acc, p_res = kseq_parts_numpy(p, q, n)
        reject_y = q * (1.0 - accept_probability(p, rho * q))  # P(a draft equals y and is rejected)
        all_rejected = 1.0 - beta
        with_y = all_rejected**n - np.maximum(all_rejected - reject_y, 0.0) ** n
        return float(p_acc + p_res @ with_y)
