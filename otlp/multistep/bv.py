"""Block verification (BV; Sun et al. 2024b), in the corrected form of the GBV paper (papers/002, §2.2).

One decode step: a block a_{1:L} drafted from a draft law r, the target's next-token vectors
p(. | a_{1:i}) for i = 0..L (one target call) and the draft's r(. | a_{1:i}) for i = 0..L-1.
The rule returns tau in {0..L} and a correction token Y; the output is (a_{1:tau}, Y).

Formulas (notes/gbv.md §3.2):
- weights (Eq. 3): w_0 = 1, w_i = min{1, w_{i-1} p(a_i | a_{1:i-1}) / r(a_i | a_{1:i-1})};
  equivalently w_i = P_i / max_{k<=i} P_k with P_i = prod_{j<=i} p/r (computed in log space).
- acceptance of the prefix a_{1:i}, i < L: R_i = sum_x max{w_i p(x | a_{1:i}) - r(x | a_{1:i}), 0},
  h_i = R_i / (1 - w_i + R_i), and h_i = 0 when R_i = 0.  The paper's Eq. 4 prints UNWEIGHTED sums;
  that form is wrong (it breaks target-matching) and is not used.  h_L = w_L.
- the longest accepted prefix is kept: P(tau = i | a) = h_i prod_{j>i} (1 - h_j).
- correction: Y ~ norm(max{w_tau p(. | a_{1:tau}) - r(. | a_{1:tau}), 0}) (Eq. 5), or Y ~ p(. | a_{1:L}) if tau = L.
Randomness: two uniforms per block, drawn from a generator or passed as ``uniforms [B, 2]`` (as serving engines pass
them): ``[:, 0]`` picks tau by inverse CDF over P(tau = i | a) (the block's coin), ``[:, 1]`` the correction Y by
inverse CDF (the final uniform); the generator path draws exactly these two in this order, so the same numbers give
the same (tau, Y) on both paths.
BV is valid for ANY draft law r the block was truly drawn from (r = q for BV, r = q^Gamma for GBV), and
its block efficiency E[tau + 1] is the single-path LP optimum (papers/002, Thm 3.4).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from otlp.core.errors import InputError
from otlp.multistep.armodel import categorical


class BlockOutput(NamedTuple):
    """The result of one multi-step verification, batched.

    path_index: int64 [B], the draft path the output follows (0 for single-path rules);
    tau: int64 [B], the number of accepted draft tokens; the output is drafts[b, path_index, :tau] + correction;
    correction: int64 [B], the token Y appended after the accepted prefix (a residual or bonus token).
    """

    path_index: torch.Tensor
    tau: torch.Tensor
    correction: torch.Tensor


def check_block_inputs(drafts: torch.Tensor, p_path: torch.Tensor, q_path: torch.Tensor) -> None:
    """Shape checks at the boundary: drafts [..., L], p_path [..., L+1, V], q_path [..., L, V]."""
    if drafts.dtype != torch.int64:
        raise InputError(f"drafts must be int64 token ids, got {drafts.dtype}")
    L = drafts.shape[-1]
    if L < 1:
        raise InputError("drafts must have block length L >= 1 in the last dimension")
    if tuple(p_path.shape[:-1]) != tuple(drafts.shape[:-1]) + (L + 1,):
        raise InputError(
            f"p_path must have shape [..., L+1={L + 1}, V] matching drafts {tuple(drafts.shape)}, "
            f"got {tuple(p_path.shape)}"
        )
    if q_path.shape[:-1] != drafts.shape or q_path.shape[-1] != p_path.shape[-1]:
        raise InputError(
            f"q_path must have shape [..., L={L}, V={p_path.shape[-1]}] matching drafts, got {tuple(q_path.shape)}"
        )


def block_weights(drafts: torch.Tensor, p_path: torch.Tensor, q_path: torch.Tensor) -> torch.Tensor:
    """BV weights w_i, i = 0..L (Eq. 3).  drafts [B, L], p_path [B, L+1, V], q_path [B, L, V] -> [B, L+1]."""
    tok = drafts.unsqueeze(-1)  # [B, L, 1]
    p_tok = p_path[:, :-1].gather(-1, tok).squeeze(-1)  # [B, L]
    q_tok = q_path.gather(-1, tok).squeeze(-1)  # [B, L]
    # q_tok > 0 for a block drafted from q; a block of draft probability 0 (passed by an enumeration) gets ratio 1
    # so its weights stay finite: its law carries no mass, but 0/0 would turn it into NaN
    log_ratio = torch.where(q_tok > 0, torch.log(p_tok) - torch.log(q_tok), torch.zeros_like(q_tok))
    log_P = torch.cat([torch.zeros_like(log_ratio[:, :1]), log_ratio.cumsum(-1)], dim=-1)  # [B, L+1]
    return torch.exp(log_P - log_P.cummax(-1).values)  # w_i = min_{k<=i} prod_{j=k+1..i} p/q


def block_verification_law(
    drafts: torch.Tensor, p_path: torch.Tensor, q_path: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact law of BV's output given the drafted block.

    drafts [B, L] (int64), p_path [B, L+1, V], q_path [B, L, V] (the law the block was drawn from)
    -> (tau_probs [B, L+1]: P(tau = i | block),
        corrections [B, L+1, V]: the law of Y given tau = i; row sums 1).
    """
    w = block_weights(drafts, p_path, q_path)  # [B, L+1]
    L = drafts.shape[-1]
    weighted = w[:, :L, None] * p_path[:, :L] - q_path  # [B, L, V]
    residual = weighted.clamp(min=0.0)  # [B, L, V]
    R = residual.sum(-1)  # [B, L]
    w_in = w[:, :L]
    # h_i = R_i / (1 - w_i + R_i); R_i = 0 means w_i p <= r pointwise: never stop at i (h_i = 0)
    h_inner = torch.where(R > 0, R / torch.where(R > 0, 1.0 - w_in + R, torch.ones_like(R)), torch.zeros_like(R))
    h = torch.cat([h_inner, w[:, L:]], dim=-1).clamp(0.0, 1.0)  # [B, L+1]; h_L = w_L
    # P(tau = i) = h_i * prod_{j>i} (1 - h_j): a reversed exclusive cumulative product
    keep = torch.flip(torch.cumprod(torch.flip(1.0 - h, [-1]), -1), [-1])  # prod_{j>=i} (1 - h_j)
    after = torch.cat([keep[:, 1:], torch.ones_like(keep[:, :1])], dim=-1)  # prod_{j>i} (1 - h_j)
    tau_probs = h * after  # [B, L+1]
    # correction law: the weighted residual for tau < L (p itself where it has no mass: then P(tau) = 0),
    # the target's bonus distribution p(. | a_{1:L}) for tau = L
    safe = torch.where(R[..., None] > 0, residual / R.clamp(min=torch.finfo(R.dtype).tiny)[..., None],
                       p_path[:, :L])
    corrections = torch.cat([safe, p_path[:, L:]], dim=1)  # [B, L+1, V]
    return tau_probs, corrections


def sample_block_output(
    tau_probs: torch.Tensor, corrections: torch.Tensor, generator: torch.Generator | None,
    uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw (tau, Y) from an exact block law.  tau_probs [B, L+1], corrections [B, L+1, V] -> ([B], [B]).
    ``uniforms [B, 2]`` (checked by :func:`check_block_uniforms`): tau at ``[:, 0]``, Y at ``[:, 1]``, by inverse
    CDF; else two uniforms per row from ``generator``, in that order."""
    tau = categorical(tau_probs, generator, None if uniforms is None else uniforms[:, 0])  # [B]
    rows = corrections.gather(1, tau[:, None, None].expand(-1, 1, corrections.shape[-1])).squeeze(1)  # [B, V]
    return tau, categorical(rows, generator, None if uniforms is None else uniforms[:, 1])


def check_block_uniforms(uniforms: torch.Tensor | None, B: int, columns: int, like: torch.Tensor,
                         values: bool = False) -> torch.Tensor | None:
    """The caller's uniforms of a block rule, ``[B, columns]`` floating point on ``like``'s device (a one-line
    InputError otherwise), returned clamped below 1 with NaN read as 0 as :func:`otlp.verifiers.base.check_uniforms`
    does (elementwise, no host read). ``values``: also refuse values outside [0, 1) or NaN (a host read; the
    registered verifiers, :mod:`otlp.verifiers.multistep`, pass their validation setting). None stays None."""
    if uniforms is None:
        return None
    if not isinstance(uniforms, torch.Tensor) or tuple(uniforms.shape) != (B, columns) \
            or not uniforms.is_floating_point() or uniforms.device != like.device:
        raise InputError(f"uniforms must be a floating point tensor of shape [{B}, {columns}] on {like.device}, got "
                         f"{getattr(uniforms, 'shape', type(uniforms).__name__)}")
    if values and B and not bool(((uniforms >= 0) & (uniforms < 1)).all()):
        raise InputError(f"uniforms must be in [0, 1), got values in [{float(uniforms.min()):.17g}, "
                         f"{float(uniforms.max()):.17g}]")
    return torch.nan_to_num(uniforms, nan=0.0).clamp(0.0, 1.0 - torch.finfo(uniforms.dtype).eps / 2)


def bv(
    drafts: torch.Tensor,
    p_path: torch.Tensor,
    q_path: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    uniforms: torch.Tensor | None = None,
) -> BlockOutput:
    """Block verification of B independent drafted blocks.

    drafts: int64 [B, L]; p_path: [B, L+1, V] target conditionals at a_{1:i}, i = 0..L;
    q_path: [B, L, V] draft conditionals at a_{1:i}, i = 0..L-1 (the law the block was drawn from).
    Returns BlockOutput(path_index=0, tau, correction); deterministic under a seeded ``generator``, or a function
    of ``uniforms [B, 2]`` (tau's coin, the correction's uniform: module docstring) when given.
    """
    check_block_inputs(drafts, p_path, q_path)
    uniforms = check_block_uniforms(uniforms, drafts.shape[0], 2, drafts)
    tau_probs, corrections = block_verification_law(drafts, p_path, q_path)
    tau, y = sample_block_output(tau_probs, corrections, generator, uniforms)
    return BlockOutput(torch.zeros_like(tau), tau, y)
