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

from otlp.core.errors import InputError
from otlp.engines import _common as C


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
    ``uniforms`` the float32 stream ``[B, n + 2]`` comes, as FlashInfer's does, from ``(seed, offset)`` when both
    are given (:func:`counter_uniforms`: row b's numbers are a function of ``(seed_b, b, offset_b)`` only, so the
    same pair replays bit for bit and nothing is read on the host; ints, or int64 tensors of 1 or B entries, one
    pair per row), else from ``generator`` (torch's default where None), whose state each call advances by the
    numbers it draws, as FlashInfer's ``get_seed_and_offset`` advances the generator's Philox offset: consecutive
    calls differ, and a generator seeded alike replays the same sequence of calls. As in FlashInfer, a ``seed``
    without an ``offset`` (or the reverse) is not used. ``deterministic`` is accepted for parity (the result is a
    function of the uniforms)."""
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
    """The kernel's float32 stream ``[B, n + 2]``: :func:`counter_uniforms` of (seed, offset) when both are given,
    else from ``generator`` (torch's default generator where None)."""
    import torch

    if seed is not None and offset is not None:
        return counter_uniforms(seed, offset, B, n + 2, dev)
    return torch.rand((B, n + 2), generator=generator, device=dev, dtype=torch.float32)


#: splitmix64's constants (Steele, Lea and Flood 2014), as two's-complement int64
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def _shift_right(z, k: int):  # noqa: ANN001, ANN202 - int64 tensor: the logical shift of its 64 bits
    return (z >> k) & ((1 << (64 - k)) - 1)


def _splitmix64(z):  # noqa: ANN001, ANN202 - int64 tensor -> int64 tensor (the bits of splitmix64's output)
    """splitmix64's finaliser on int64 tensors (products wrap modulo 2^64, as uint64 ones do; logical shifts)."""
    z = z + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    return z ^ _shift_right(z, 31)


def counter_uniforms(seed, offset, B: int, columns: int, dev):  # noqa: ANN001, ANN201
    """A counter-based float32 stream ``[B, columns]`` in [0, 1) for FlashInfer's ``(seed, offset)`` (the kernel
    runs Philox(seed, subsequence = row, offset); these are not its numbers, but the same structure): entry (b, j)
    is the top 24 bits of ``splitmix64(splitmix64(splitmix64(seed_b) + b) + offset_b + j)`` times 2^-24, so a row's
    numbers depend on ``(seed_b, b, offset_b)`` alone, the same pair replays them, rows are independent streams, and
    a caller that advances ``offset`` by ``columns`` or more per call gets fresh ones. ``seed``, ``offset``: ints,
    or integer tensors of 1 or B entries on ``dev`` (one pair per row); elementwise device ops, nothing is read on
    the host."""
    import torch

    def per_row(x, name: str):  # noqa: ANN001, ANN202
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() or x.dim() != 1 or x.shape[0] not in (1, B) or x.device != torch.device(dev):
                raise InputError(f"{name} must be an int or an integer tensor of 1 or {B} entries on {dev}, got "
                                 f"{x.dtype} {list(x.shape)} on {x.device}")
            return x.to(torch.int64).expand(B)
        if isinstance(x, bool) or not isinstance(x, int):
            raise InputError(f"{name} must be an int or an integer tensor, got {type(x).__name__}")
        return torch.full((B,), (int(x) + (1 << 63)) % (1 << 64) - (1 << 63), dtype=torch.int64, device=dev)

    s, o = per_row(seed, "seed"), per_row(offset, "offset")  # [B] each
    rows = torch.arange(B, dtype=torch.int64, device=dev)
    key = _splitmix64(_splitmix64(s) + rows)  # [B] the row's stream (seed, subsequence = row)
    counters = o[:, None] + torch.arange(columns, dtype=torch.int64, device=dev)[None, :]  # [B, columns]
    bits = _shift_right(_splitmix64(key[:, None] + counters), 40)  # [B, columns] 24 bits
    return bits.to(torch.float32) * (2.0 ** -24)


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
