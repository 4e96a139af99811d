"""Token-level baselines for multi-step drafts: speculative sampling along one path, and the multi-draft token tree.

- ``sps_path`` (Chen et al. 2023; Leviathan et al. 2023; papers/002 §2.1): accept a_i with probability
  min(1, p(a_i | a_{1:i-1}) / q(a_i | a_{1:i-1})) until the first rejection; the correction is drawn from
  norm(max(p - q, 0)) at the first rejected position (Eq. 2, read with a_{1:tau}) or from p(. | a_{1:L}).
- ``token_tree`` (SpecInfer / SpecTr style): the K i.i.d. paths form a token tree; at each reached node the
  next tokens of the paths through it are verified by recursive rejection sampling with replacement (RRS):
  candidate j is accepted with probability min(1, p_{j-1}(x) / q(x)), p_0 = p, p_j = norm(max(p_{j-1} - q, 0)).
  On acceptance of x the walk moves to node x with the paths through x; if all candidates fail, the
  correction is drawn from the last residual; after L accepted tokens the bonus comes from p(. | a_{1:L}).
"""

from __future__ import annotations

import numpy as np
import torch

from otlp.multistep.armodel import ARModel, categorical, depth_offsets, num_nodes
from otlp.multistep.bv import BlockOutput, check_block_inputs, sample_block_output
from otlp.multistep.gbv import check_multipath_inputs


def sps_path_law(
    drafts: torch.Tensor, p_path: torch.Tensor, q_path: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact law of token-wise speculative sampling along one block.

    drafts [B, L], p_path [B, L+1, V], q_path [B, L, V] -> (tau_probs [B, L+1], corrections [B, L+1, V]).
    """
    L = drafts.shape[-1]
    tok = drafts.unsqueeze(-1)
    p_tok = p_path[:, :L].gather(-1, tok).squeeze(-1)  # [B, L]
    q_tok = q_path.gather(-1, tok).squeeze(-1)  # [B, L]
    # min(1, p/q); a token with q = 0 is never drafted, and p >= q = 0 reads as "accept" (no 0/0)
    ratio = p_tok / torch.where(q_tok > 0, q_tok, torch.ones_like(q_tok))
    accept = torch.where(p_tok >= q_tok, torch.ones_like(p_tok), ratio)  # [B, L]
    survive = torch.cumprod(torch.cat([torch.ones_like(accept[:, :1]), accept], -1), -1)  # P(tau >= i)
    tau_probs = survive * torch.cat([1.0 - accept, torch.ones_like(accept[:, :1])], -1)  # [B, L+1]
    residual = (p_path[:, :L] - q_path).clamp(min=0.0)  # [B, L, V]
    mass = residual.sum(-1, keepdim=True)
    safe = torch.where(mass > 0, residual / mass.clamp(min=torch.finfo(mass.dtype).tiny), p_path[:, :L])
    return tau_probs, torch.cat([safe, p_path[:, L:]], dim=1)


def sps_path(
    drafts: torch.Tensor, p_path: torch.Tensor, q_path: torch.Tensor, generator: torch.Generator | None = None
) -> BlockOutput:
    """Token-wise speculative sampling along B drafted blocks: drafts [B, L], p_path [B, L+1, V], q_path [B, L, V]."""
    check_block_inputs(drafts, p_path, q_path)
    tau_probs, corrections = sps_path_law(drafts, p_path, q_path)
    tau, y = sample_block_output(tau_probs, corrections, generator)
    return BlockOutput(torch.zeros_like(tau), tau, y)


def token_tree(
    drafts: torch.Tensor, p_paths: torch.Tensor, q_paths: torch.Tensor, generator: torch.Generator | None = None
) -> BlockOutput:
    """Multi-draft token-tree verification (RRS with replacement at every node) of B independent steps.

    drafts: int64 [B, K, L]; p_paths: [B, K, L+1, V]; q_paths: [B, K, L, V].  Candidates at a node are the
    next tokens of the still-alive paths, in path-index order.  Returns BlockOutput(path_index, tau, correction)
    where path_index is an alive path containing the accepted prefix.
    """
    check_multipath_inputs(drafts, p_paths, q_paths)
    B, K, L = drafts.shape
    rows = torch.arange(B, device=drafts.device)
    alive = torch.ones(B, K, dtype=torch.bool, device=drafts.device)  # paths through the current node
    running = torch.ones(B, dtype=torch.bool, device=drafts.device)  # no correction drawn yet
    tau = torch.zeros(B, dtype=torch.int64, device=drafts.device)
    path_index = torch.zeros(B, dtype=torch.int64, device=drafts.device)  # every path holds the empty prefix
    correction = torch.zeros(B, dtype=torch.int64, device=drafts.device)
    for i in range(L):  # depth loop; everything inside is vectorised over the batch
        lead = alive.to(torch.int8).argmax(-1)  # [B], a representative alive path (same prefix as all alive)
        residual = p_paths[rows, lead, i].clone()  # [B, V]
        q_node = q_paths[rows, lead, i]  # [B, V]
        accepted = torch.full((B,), -1, dtype=torch.int64, device=drafts.device)
        for k in range(K):  # RRS over the candidates in path order
            x = drafts[:, k, i]  # [B]
            u = torch.rand(B, generator=generator, dtype=residual.dtype, device=residual.device)
            trying = running & alive[:, k] & (accepted < 0)
            ok = trying & (u * q_node[rows, x] < residual[rows, x])  # accept w.p. min(1, p_j(x) / q(x))
            accepted = torch.where(ok, x, accepted)
            rejected = trying & ~ok
            new_res = (residual - q_node).clamp(min=0.0)
            mass = new_res.sum(-1, keepdim=True)
            new_res = torch.where(mass > 0, new_res / mass.clamp(min=torch.finfo(mass.dtype).tiny), residual)
            residual = torch.where(rejected[:, None], new_res, residual)
        stop = running & (accepted < 0)  # every candidate rejected: correction from the last residual
        correction = torch.where(stop, categorical(residual, generator), correction)
        tau = torch.where(running & ~stop, tau + 1, tau)
        alive = alive & (drafts[:, :, i] == accepted[:, None])
        running = running & ~stop
        path_index = torch.where(running, alive.to(torch.int8).argmax(-1), path_index)
    bonus = categorical(p_paths[rows, path_index, L], generator)  # [B]
    correction = torch.where(running, bonus, correction)
    return BlockOutput(path_index, tau, correction)


def token_tree_output_law(target: ARModel, draft: ARModel, L: int, K: int) -> np.ndarray:
    """Exact output law R(a_{1:i}) of ``token_tree`` on V^{<=L+1} (R[root] = 0), by a forward recursion.

    State: (node, m) = the walk reached node a_{1:i} with m paths through it; their next tokens are i.i.d.
    q(. | a_{1:i}).  With beta_j = sum_x min(p_{j-1}(x), q(x)), candidate j is reached with probability
    prod_{l<j} (1 - beta_l) and accepts x with probability min(p_{j-1}(x), q(x)).  Given that, the number of
    paths through x is 1 + (rejected earlier candidates equal to x, each w.p. max(q(x) - p_{l-1}(x), 0) /
    (1 - beta_l)) + (later candidates equal to x, each w.p. q(x)): a Poisson-binomial count.
    Independent of the sampler's code; used to test it.  # [num_nodes(V, L + 1)]
    """
    V = target.V
    off = depth_offsets(V, L + 1)
    reach = np.zeros((num_nodes(V, L), K + 1))  # [nodes, m]
    reach[0, K] = 1.0
    R = np.zeros(num_nodes(V, L + 1))
    for node in range(int(off[L])):  # internal nodes, parents before children
        if not reach[node].any():
            continue
        p, q = target.conditionals[node], draft.conditionals[node]
        for m in range(1, K + 1):
            r = reach[node, m]
            if r == 0.0:
                continue
            residuals, betas = [p], []
            for _ in range(m):
                cur = residuals[-1]
                betas.append(np.minimum(cur, q).sum())
                nxt = np.maximum(cur - q, 0.0)
                residuals.append(nxt / nxt.sum() if nxt.sum() > 0 else cur)
            reached = r
            for j in range(1, m + 1):
                prev = residuals[j - 1]
                acc = reached * np.minimum(prev, q)  # [V]: reach candidate j and accept x
                count = np.zeros((V, K + 1))  # Poisson-binomial over the other m-1 candidates
                count[:, 0] = 1.0
                probs = [np.maximum(q - residuals[l - 1], 0.0) / max(1.0 - betas[l - 1], 1e-300)
                         for l in range(1, j)] + [q] * (m - j)
                for b in probs:
                    count[:, 1:] = count[:, 1:] * (1 - b[:, None]) + count[:, :-1] * b[:, None]
                    count[:, 0] *= 1 - b
                children = node * V + 1 + np.arange(V)
                reach[children, 1:] += acc[:, None] * count[:, :K]
                reached = reached * (1.0 - betas[j - 1])
            R[node * V + 1 + np.arange(V)] += reached * residuals[m]  # all m rejected
    for node in range(int(off[L]), int(off[L + 1])):  # depth L: the bonus token from p(. | a_{1:L})
        total = reach[node].sum()
        if total:
            R[node * V + 1 + np.arange(V)] += total * target.conditionals[node]
    return R
