"""FlashInfer's ``flashinfer.sampling.chain_speculative_sampling`` with otlp's rules behind it (pure torch; flashinfer
is not imported).

Contract (``include/flashinfer/sampling.cuh::ChainSpeculativeSampling`` @fb28d724; design note engine-adapters.md):
``draft_probs [B, n, V]``, ``draft_token_ids [B, n]``, ``target_probs [B, n + 1, V]``; the kernel draws a stream of
uniforms per request (Philox(seed, subsequence = row, offset)) and uses them in order: draft i is accepted iff
``u_i q_i(x_i) < p_i(x_i)`` until the first rejection at ``pos``; every position from ``pos`` on is re-tested with the
next uniforms (the ``accepted`` metric); the last uniform draws the token at ``pos`` from ``relu(p_pos - q_pos)``
(pure ``p_n`` when every draft was accepted). Output ``int32 [B, n + 1]``: the accepted drafts, the drawn token,
then -1; ``emitted += pos`` and ``accepted += pos + #{i >= pos: fresh u q_i < p_i}``, in place on the caller's
counters.

Swap-in::

    import flashinfer.sampling
    flashinfer.sampling.chain_speculative_sampling = otlp.engines.flashinfer.chain_speculative_sampling
"""

from __future__ import annotations

from otlp.engines import _common as C
from otlp.errors import InputError


def chain_speculative_sampling(
    draft_probs, draft_token_ids, target_probs,  # noqa: ANN001
    maybe_output_accepted_token_num=None, maybe_output_emitted_draft_token_num=None,  # noqa: ANN001
    deterministic: bool = True, generator=None, seed=None, offset=None, *,  # noqa: ANN001
    method: str = "rrs", uniforms=None, validate: bool | None = None,  # noqa: ANN001
):  # noqa: ANN201 - (output_token_ids int32 [B, n + 1], accepted [B], emitted [B])
    """FlashInfer's chain verifier (module docstring) with ``method="rrs"`` (FlashInfer's rule, bit for bit for the
    same uniforms) or ``"optimal"`` (otlp's one-draft rule at each position: the same law and, up to the float
    rounding of the product, the same decisions).

    Randomness (keyword ``uniforms``, else drawn): ``uniforms [B, n + 2]`` is the kernel's stream per request
    (coins u_0..u_pos, then the re-tests of positions pos..n-1 with u_{pos+1}..u_n, then the final uniform:
    u_{n+1} after a rejection, u_n when every draft was accepted); ``uniforms [B, n + 1]`` is n coins and one final
    uniform (the ``accepted`` count then re-tests positions after ``pos`` with their own unused coins). Without
    ``uniforms`` a float32 stream ``[B, n + 2]`` is drawn from ``generator``, or from a generator seeded by
    ``(seed, offset)`` (the same pair replays; tensors are read on the host), or from torch's default generator.
    ``deterministic`` is accepted for parity (the result is a function of the uniforms)."""
    import torch

    C.check_method(method, ("rrs", "optimal"))
    B, n, V = _check(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num,
                     maybe_output_emitted_draft_token_num, uniforms, C.validating(validate))
    dev = target_probs.device
    accepted_out = (torch.zeros(B, dtype=torch.int32, device=dev) if maybe_output_accepted_token_num is None
                    else maybe_output_accepted_token_num)
    emitted_out = (torch.zeros(B, dtype=torch.int32, device=dev) if maybe_output_emitted_draft_token_num is None
                   else maybe_output_emitted_draft_token_num)
    if uniforms is None:
        uniforms = _stream(B, n, dev, generator, seed, offset)
    stream = uniforms.shape[1] == n + 2
    with torch.no_grad():
        x = draft_token_ids.long()  # [B, n]
        coins = uniforms[:, :n]  # [B, n]
        p_x = target_probs[:, :n].gather(2, x[:, :, None])[:, :, 0]  # [B, n]
        q_x = draft_probs.gather(2, x[:, :, None])[:, :, 0]
        lengths = torch.full((B,), n, dtype=torch.long, device=dev)
        if method == "rrs":
            pos = C.first_rejection(coins * q_x < p_x, lengths)  # [B]
            last = C.chain_stop(target_probs, draft_probs, pos, _final(uniforms, pos, n, stream))
        else:
            pos, last = C.chain_optimal_stop(target_probs, draft_probs, x, coins,
                                             _final(uniforms, torch.zeros_like(lengths), n, stream),
                                             _final(uniforms, lengths, n, stream))
        j = torch.arange(n + 1, device=dev)
        padded = torch.cat([x, x.new_zeros((B, 1))], dim=1)  # [B, n + 1]
        out = torch.where(j[None, :] < pos[:, None], padded, torch.where(j[None, :] == pos[:, None], last[:, None], -1))
        # the accepted metric: each position from pos on re-tested (FlashInfer's kernel; Chen et al. 2023's count)
        if stream:
            retest = uniforms[:, 1:n + 1] * q_x < p_x  # position i re-tested with u_{i+1}
            later = j[None, :n] >= pos[:, None]
        else:
            retest = coins * q_x < p_x  # position i > pos with its own unused coin
            later = j[None, :n] > pos[:, None]
        accepted = pos + (retest & later).sum(dim=1)
        accepted_out += accepted.to(accepted_out.dtype)
        emitted_out += pos.to(emitted_out.dtype)
    return out.to(torch.int32), accepted_out, emitted_out


def _final(uniforms, pos, n: int, stream: bool):  # noqa: ANN001, ANN202
    """The final uniform of each request: the kernel's u_{n+1} after a rejection and u_n when every draft was
    accepted (stream layout), else column n."""
    import torch

    if not stream:
        return uniforms[:, n]
    return torch.where(pos < n, uniforms[:, n + 1], uniforms[:, n])


def _stream(B: int, n: int, dev, generator, seed, offset):  # noqa: ANN001, ANN202
    """A float32 stream ``[B, n + 2]`` from ``generator``, or from a generator seeded by (seed, offset), or from
    torch's default generator."""
    import torch

    if generator is None and seed is not None:
        s = int(seed.reshape(-1)[0]) if isinstance(seed, torch.Tensor) else int(seed)
        o = 0 if offset is None else int(offset.reshape(-1)[0]) if isinstance(offset, torch.Tensor) else int(offset)
        generator = torch.Generator(device=dev).manual_seed((s * 0x9E3779B97F4A7C15 + o) % (1 << 63))
    return torch.rand((B, n + 2), generator=generator, device=dev, dtype=torch.float32)


def _check(draft_probs, draft_token_ids, target_probs, accepted, emitted, uniforms, values: bool):  # noqa: ANN001, ANN202
    C.check_tensor("target_probs", target_probs, ndim=3, floating=True)
    B, n1, V = target_probs.shape
    n = n1 - 1
    dev = target_probs.device
    if n < 0:
        raise InputError(f"target_probs must have shape [B, n + 1, V], got {list(target_probs.shape)}")
    C.check_tensor("draft_probs", draft_probs, shape=(B, n, V), floating=True, device=dev)
    C.check_tensor("draft_token_ids", draft_token_ids, shape=(B, n), dtypes=C.INT_DTYPES, device=dev)
    for name, t in (("maybe_output_accepted_token_num", accepted), ("maybe_output_emitted_draft_token_num", emitted)):
        if t is not None:
            C.check_tensor(name, t, shape=(B,), dtypes=C.INT_DTYPES, device=dev)
    if uniforms is not None:
        C.check_tensor("uniforms", uniforms, ndim=2, floating=True, device=dev)
        if uniforms.shape[0] != B or uniforms.shape[1] not in (n + 1, n + 2):
            raise InputError(f"uniforms must have shape [{B}, {n + 1}] (coins and a final uniform) or [{B}, {n + 2}] "
                             f"(the kernel's stream), got {list(uniforms.shape)}")
    if values and B:
        C.check_rows("target_probs", target_probs)
        C.check_rows("draft_probs", draft_probs)
        C.check_ids("draft_token_ids", draft_token_ids, V)
        if uniforms is not None:
            C.check_unit("uniforms", uniforms)
    return B, n, V
