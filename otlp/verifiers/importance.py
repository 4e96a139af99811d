"""Canonical-decomposition importance sampling (Khisti et al., ICLR 2025): the truncated LP (Alg. 2, eqs. 10-11) for
identical drafts ("is") and its weighted, ordered-pair variant for different drafts (App. I; "weighted_is").
Letters: the paper's p (draft) / q (target) are this project's q / p.

Step 1 (importance-weighted selection, Def. 1) picks Y_I among the drafts; step 2 is single-draft speculative sampling
of Y_I with draft law p_I (the exact law of Y_I) against the target p: accept w.p. min(1, p(Y)/p_I(Y)), else
y ~ norm((p - p_I)^+). The output is exactly p for ANY selection weights; the weights only set the acceptance
    verifier acceptance = sum_y min(p(y), p_I(y))                                     (eq. 19-20)

Selection for one pair (Y1 ~ a, Y2 ~ b, independent). Tokens are ranked by decreasing p - a*b (the note's key
q_i - p_i^2 in the paper's letters, pitfall 5); Omega_1 = the top s ranks, Omega_2 = the rest:
    Y1 == Y2            -> that token
    both in Omega_1     -> Y1 with probability W[rank Y1, rank Y2] (free weights, solved by the LP below)
    otherwise           -> the better-ranked token (eq. 10: Omega_1 beats Omega_2; inside Omega_2 the higher rank wins)
Law of the winner (eq. 11, ordered-pair form of eq. 199 with W[a, b] = P(pick Y1 | Y1 = a, Y2 = b), note §2.4):
    p_I(k) = a_k b_k + a_k b(after k) + b_k a(after k)
             + [k in Omega_1] sum_{j in Omega_1, j != k} (a_k b_j W[k, j] + a_j b_k (1 - W[j, k]))
with "after k" = the ranks after max(rank k, s - 1). The LP maximises sum_{k in Omega_1} min(p_k, p_I(k)) over
W in [0, 1] (identical drafts: W[i, j] + W[j, i] = 1, the unordered w_{i,j} of eq. 8). All rows of a batch are
solved in ONE block-diagonal HiGHS call (no Python loop over the batch); HiGHS optima are clipped to [0, 1], which
keeps the rule exact. n > 2 drafts: successive pairwise merges (Remark 3), the running winner against the next
draft, with the target p in every intermediate LP (note §3, K > 2). Truncation guarantee (eq. 12, n = 2):
    verifier acceptance >= alpha* - sum_{x in Omega_2} (p(x) - q(x)^2)^+ ;  with s >= V it equals alpha* (Thm 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from otlp.core import xp as X
from otlp.core.drafts import IID, DraftScheme, Independent
from otlp.core.errors import InputError
from otlp.verifiers.base import (
    Verifier,
    accept_probability,
    check_tensors,
    check_uniforms,
    coins,
    distinct_rows,
    gather,
    normalize_or,
    pick_outcome,
    sample_categorical,
)

#: Size of Omega_1, as in the paper's experiments (s = 5 or 7).
DEFAULT_S = 5


def solve_omega1_weights(a1: np.ndarray, b1: np.ndarray, p1: np.ndarray, a_rest: np.ndarray, b_rest: np.ndarray,
                         symmetric: bool) -> np.ndarray:
    """The truncated LP for a batch: ``a1, b1, p1 [B, s]`` (laws and target on Omega_1 in rank order),
    ``a_rest, b_rest [B]`` (mass of a, b on Omega_2) -> ``W [B, s, s]`` with W[i, j] = P(pick Y1 | ranks i, j).

    Variables per row: W (s*s, the diagonal fixed at 0 and unused) then t (s). One HiGHS call for all rows.
    """
    B, s = a1.shape
    if s < 2 or B == 0:  # nothing to choose between (or no rows): no LP
        return np.tile(np.triu(np.ones((s, s)), 1), (B, 1, 1))
    data = np.concatenate([a1, b1, p1, a_rest[:, None], b_rest[:, None]], axis=1)  # [B, 3s + 2]
    first, inverse = distinct_rows(data)
    if first.size < B:  # identical rows (e.g. a batch sharing one context) are solved once
        unique = data[first]
        W = solve_omega1_weights(unique[:, :s], unique[:, s:2 * s], unique[:, 2 * s:3 * s], unique[:, 3 * s],
                                 unique[:, 3 * s + 1], symmetric)
        return W[inverse]
    W = np.tile(np.triu(np.ones((s, s)), 1), (B, 1, 1))  # fallback: the better rank wins
    nv = s * s + s
    ii, jj = np.nonzero(~np.eye(s, dtype=bool))  # ordered pairs i != j
    base = np.arange(B)[:, None] * nv  # [B, 1] variable offset of each row
    rows_base = np.arange(B)[:, None] * s
    # constraint i:  t_i - sum_j a_i b_j W[i, j] + sum_j a_j b_i W[j, i] <= a_i b_i + a_i B2 + b_i A2 + sum_j a_j b_i
    r_t = rows_base + np.arange(s)[None, :]
    c_t = base + s * s + np.arange(s)[None, :]
    r_w1 = rows_base + ii[None, :]
    c_w1 = base + (ii * s + jj)[None, :]
    v_w1 = -a1[:, ii] * b1[:, jj]
    r_w2 = rows_base + ii[None, :]
    c_w2 = base + (jj * s + ii)[None, :]
    v_w2 = a1[:, jj] * b1[:, ii]
    A = sp.csr_matrix(
        (np.concatenate([np.ones(B * s), v_w1.ravel(), v_w2.ravel()]),
         (np.concatenate([r_t.ravel(), r_w1.ravel(), r_w2.ravel()]),
          np.concatenate([c_t.ravel(), c_w1.ravel(), c_w2.ravel()]))),
        shape=(B * s, B * nv),
    )
    cross = (a1.sum(axis=1, keepdims=True) - a1) * b1  # sum_{j != i} a_j b_i
    rhs = (a1 * b1 + a1 * b_rest[:, None] + b1 * a_rest[:, None] + cross).ravel()
    lower = np.zeros((B, nv))
    upper = np.ones((B, nv))
    upper[:, : s * s] = np.where(np.eye(s, dtype=bool).ravel()[None, :], 0.0, 1.0)
    upper[:, s * s:] = p1
    cost = np.zeros((B, nv))
    cost[:, s * s:] = -1.0
    A_eq = b_eq = None
    if symmetric:  # identical drafts: P(Y = i | {i, j}) does not depend on the order, W[i, j] + W[j, i] = 1
        iu, ju = np.triu_indices(s, 1)
        m = iu.size
        r_eq = (np.arange(B)[:, None] * m + np.arange(m)[None, :]).ravel()
        A_eq = sp.csr_matrix(
            (np.ones(2 * B * m), (np.concatenate([r_eq, r_eq]),
                                  np.concatenate([(base + iu * s + ju).ravel(), (base + ju * s + iu).ravel()]))),
            shape=(B * m, B * nv),
        )
        b_eq = np.ones(B * m)
    res = linprog(cost.ravel(), A_ub=A, b_ub=rhs, A_eq=A_eq, b_eq=b_eq,
                  bounds=np.stack([lower.ravel(), upper.ravel()], axis=1), method="highs")
    if res.status != 0 or res.x is None:  # keep the always-valid fixed-rank weights
        return W
    return np.clip(res.x.reshape(B, nv)[:, : s * s].reshape(B, s, s), 0.0, 1.0)


@dataclass
class MergePlan:
    """One pairwise merge (numpy, one row): ``order [V]`` tokens by rank, ``rank [V]``, ``W [s, s]``, ``law [V]``."""

    order: np.ndarray
    rank: np.ndarray
    W: np.ndarray
    law: np.ndarray
    s: int


def merge_plan_numpy(a: np.ndarray, b: np.ndarray, p: np.ndarray, s: int, symmetric: bool) -> MergePlan:
    V = p.size
    s = min(s, V)
    order = np.argsort(-(p - a * b), kind="stable")
    rank = np.empty(V, dtype=np.int64)
    rank[order] = np.arange(V)
    a_s, b_s = a[order], b[order]
    a1, b1 = a_s[:s], b_s[:s]
    W = solve_omega1_weights(a1[None], b1[None], p[order][:s][None], np.array([a.sum() - a1.sum()]),
                             np.array([b.sum() - b1.sum()]), symmetric)[0]
    return MergePlan(order, rank, W, _law(a_s[None], b_s[None], W[None], s)[0][rank], s)


def _law(a_s, b_s, W, s: int):  # noqa: ANN001, ANN202 - numpy arrays or torch tensors
    """Law of the winner in rank order (eq. 11, ordered form), batched: ``a_s, b_s [B, V]`` in rank order,
    ``W [B, s, s]``; numpy or torch (:mod:`otlp.core.xp`)."""
    xp = X.namespace(a_s)
    after_a = X.padded_suffix_sum(a_s)[:, 1:]  # [B, V] sum over later ranks
    after_b = X.padded_suffix_sum(b_s)[:, 1:]
    if s >= 1:  # the first s ranks all see the mass after rank s - 1
        head = X.arange_like(a_s, a_s.shape[1])[None, :] < s
        after_a = xp.where(head, after_a[:, s - 1: s], after_a)
        after_b = xp.where(head, after_b[:, s - 1: s], after_b)
    law = a_s * b_s + a_s * after_b + b_s * after_a
    if s >= 2:
        idx = X.arange_like(a_s, s)
        off = idx[:, None] != idx[None, :]  # [s, s]
        a1, b1 = a_s[:, :s], b_s[:, :s]
        law[:, :s] += (xp.where(off, a1[:, :, None] * b1[:, None, :] * W, 0.0).sum(2)
                       + xp.where(off, a1[:, None, :] * b1[:, :, None] * (1.0 - xp.swapaxes(W, 1, 2)), 0.0).sum(2))
    return law


def _pick_first_numpy(plan: MergePlan, y1: np.ndarray, y2: np.ndarray) -> np.ndarray:
    """P(the merge keeps Y1 | Y1 = y1, Y2 = y2), vectorised."""
    r1, r2 = plan.rank[y1], plan.rank[y2]
    both = (r1 < plan.s) & (r2 < plan.s)
    w = plan.W[np.minimum(r1, plan.s - 1), np.minimum(r2, plan.s - 1)] if plan.s >= 1 else np.zeros(y1.shape)
    return np.where(y1 == y2, 1.0, np.where(both, w, (r1 < r2).astype(np.float64)))


class ImportanceSampling(Verifier):
    """Canonical-decomposition IS with the truncated LP, identical i.i.d. drafts (``"is"``)."""

    name = "is"
    scheme = "iid"
    symmetric_first_merge = True

    def __init__(self, s: int = DEFAULT_S):
        if int(s) != s or s < 0:
            raise InputError(f"s (the size of Omega_1) must be an integer >= 0, got {s}")
        self.s = int(s)

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return IID(q, n)

    # -- plans -------------------------------------------------------------------------------------------------------
    def _draft_laws(self, draft: DraftScheme) -> np.ndarray:
        return draft.qs if isinstance(draft, Independent) else np.tile(draft.q, (draft.n, 1))

    def plans(self, p: np.ndarray, draft: DraftScheme) -> tuple[list[MergePlan], np.ndarray]:
        """The n - 1 merges and the final law p_I of the selected token (numpy, one instance)."""
        laws = self._draft_laws(draft)
        cur = laws[0]
        plans = []
        for k in range(1, draft.n):
            plan = merge_plan_numpy(cur, laws[k], p, self.s, self.symmetric_first_merge and k == 1)
            plans.append(plan)
            cur = plan.law
        return plans, cur

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        plans, law_I = self.plans(p, draft)
        M, n = omegas.shape
        V = p.size
        weight = np.zeros((M, n))  # P(Y_I is the draft at position j | omega)
        weight[:, 0] = 1.0
        for k in range(1, n):
            keep = np.zeros((M, n))
            for j in range(k):
                keep[:, j] = _pick_first_numpy(plans[k - 1], omegas[:, j], omegas[:, k])
            moved = (weight[:, :k] * (1.0 - keep[:, :k])).sum(axis=1)
            weight[:, :k] *= keep[:, :k]
            weight[:, k] = moved
        accept = accept_probability(p[omegas], law_I[omegas])  # [M, n] step-2 test of each candidate
        residual = normalize_or(np.maximum(p - law_I, 0.0), p)
        law = np.zeros((M, V))
        rows = np.arange(M)
        for j in range(n):
            np.add.at(law, (rows, omegas[:, j]), weight[:, j] * accept[:, j])
        accepted = (weight * accept).sum(axis=1)
        law += (1.0 - accepted)[:, None] * residual[None, :]
        return law, accepted

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        """sum_y min(p(y), p_I(y)) (eq. 19-20)."""
        p, draft = self.check_draft(p, draft)
        return float(np.minimum(p, self.plans(p, draft)[1]).sum())

    # -- torch -------------------------------------------------------------------------------------------------------
    def _merge(self, p, cur, b, s: int, k: int):  # noqa: ANN001, ANN202 - torch tensors
        """Merge k of the torch sampler: ``(rank [B, V], W [B, s, s], law_sorted [B, V])`` for the current law
        ``cur`` and the next draft's ``b``."""
        import torch

        B, V = p.shape
        order = torch.sort(p - cur * b, dim=1, descending=True, stable=True).indices  # [B, V]
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(V, device=p.device).expand(B, V))
        a_s, b_s = cur.gather(1, order), b.gather(1, order)  # [B, V] in rank order
        a1, b1 = a_s[:, :s], b_s[:, :s]
        W_np = solve_omega1_weights(  # host round trip of [B, s] values: the only sync of this rule
            a1.double().cpu().numpy(), b1.double().cpu().numpy(), p.gather(1, order[:, :s]).double().cpu().numpy(),
            (cur.sum(1) - a1.sum(1)).double().cpu().numpy(), (b.sum(1) - b1.sum(1)).double().cpu().numpy(),
            self.symmetric_first_merge and k == 1)
        W = torch.as_tensor(W_np, dtype=p.dtype, device=p.device)  # [B, s, s]
        return rank, W, _law(a_s, b_s, W, s)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None):  # noqa: ANN001, ANN201
        """``(tokens [B], accepted_index [B])``: n - 1 selection coins and the step-2 coin from ``generator``, or
        the caller's ``uniforms [B, 2]``: the coin picks the outcome by inverse CDF over P(Y_I = x_j, accepted)
        (the selection weights of the merges times min(1, p / p_I)), the second uniform draws the residual."""
        import torch

        B, n, V = check_tensors(p, q, drafts, per_draft_q=self.per_draft_q)
        qs = q if q.ndim == 3 else q.unsqueeze(1).expand(B, n, V)  # [B, n, V]
        s = min(self.s, V)
        if uniforms is not None:
            return self._sample_uniforms(p, qs, drafts, s, check_uniforms(uniforms, B, p))
        u = coins(B, n, p, generator)  # [B, n]: n - 1 selection coins, then the step-2 coin
        cur = qs[:, 0]
        y = drafts[:, 0]
        index = torch.zeros_like(y)
        rows = torch.arange(B, device=p.device)
        for k in range(1, n):  # merges over draft positions, batched over rows
            rank, W, law_sorted = self._merge(p, cur, qs[:, k], s, k)
            x = drafts[:, k]
            r1, r2 = rank.gather(1, y.unsqueeze(1)).squeeze(1), rank.gather(1, x.unsqueeze(1)).squeeze(1)
            both = (r1 < s) & (r2 < s)
            if s >= 1:
                w = W[rows, r1.clamp(max=s - 1), r2.clamp(max=s - 1)]
            else:
                w = torch.zeros_like(u[:, 0])
            keep = (y == x) | (both & (u[:, k - 1] < w)) | (~both & (r1 < r2))
            y = torch.where(keep, y, x)
            index = torch.where(keep, index, torch.full_like(index, k))
            cur = law_sorted.gather(1, rank)
        accept = u[:, n - 1] * gather(cur, y) < gather(p, y)
        residual = sample_categorical(X.positive_part(p, cur), generator, fallback=p)  # unnormalised
        return torch.where(accept, y, residual).long(), torch.where(accept, index, torch.full_like(index, -1)).long()

    def _sample_uniforms(self, p, qs, drafts, s: int, u):  # noqa: ANN001, ANN202 - torch tensors
        """:meth:`sample` with one coin and one final uniform per row: the merges' keep probabilities (keep the
        current candidate x_j against x_k: 1 if equal, W[r_j, r_k] if both ranks < s, else 1[r_j < r_k]) give the
        selection weights P(Y_I = x_j), as in :meth:`conditional`."""
        import torch

        B, n = drafts.shape
        rows = torch.arange(B, device=p.device)
        weight = torch.zeros((B, n), dtype=torch.float64, device=p.device)
        weight[:, 0] = 1.0
        cur = qs[:, 0]
        for k in range(1, n):  # merges over draft positions, batched over rows
            rank, W, law_sorted = self._merge(p, cur, qs[:, k], s, k)
            x = drafts[:, k]
            r2 = rank.gather(1, x[:, None])[:, 0]
            r1 = rank.gather(1, drafts[:, :k])  # [B, k]
            both = (r1 < s) & (r2 < s)[:, None]
            w = W[rows[:, None], r1.clamp(max=max(s - 1, 0)), r2.clamp(max=max(s - 1, 0))[:, None]] if s >= 1 \
                else torch.zeros_like(r1, dtype=p.dtype)
            keep = torch.where(drafts[:, :k] == x[:, None], 1.0,
                               torch.where(both, w.to(torch.float64), (r1 < r2[:, None]).to(torch.float64)))
            moved = (weight[:, :k] * (1.0 - keep)).sum(dim=1)
            weight[:, :k] = weight[:, :k] * keep
            weight[:, k] = moved
            cur = law_sorted.gather(1, rank)
        accept = accept_probability(p.gather(1, drafts), cur.gather(1, drafts))  # [B, n] step-2 test
        index = pick_outcome(weight * accept, u[:, 0])
        residual = X.positive_part(p, cur)
        drawn = X.inverse_cdf(residual, u[:, 1:].to(residual.dtype), fallback=p)
        chosen = drafts.gather(1, index.clamp(min=0)[:, None])[:, 0]
        return torch.where(index >= 0, chosen, drawn).long(), index.long()


class WeightedImportanceSampling(ImportanceSampling):
    """The ordered-pair (weighted) IS for independent, different drafts q_1..q_n (App. I; ``"weighted_is"``)."""

    name = "weighted_is"
    scheme = "independent"
    compatible_schemes = ("iid",)
    per_draft_q = True
    symmetric_first_merge = False

    def make_draft(self, q: object, n: int) -> DraftScheme:
        arr = np.asarray(q, dtype=np.float64)
        if arr.ndim == 1:
            return Independent([arr] * int(n))
        if arr.ndim != 2 or arr.shape[0] != n:
            raise InputError(f"weighted_is needs q of shape [V] or [n, V] = [{n}, V], got {arr.shape}")
        return Independent(arr)
