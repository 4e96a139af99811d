"""vLLM V1's ``vllm.v1.sample.rejection_sampler.rejection_sample`` with otlp's rules behind it (pure torch; vllm is
not imported).

Contract (``vllm/v1/sample/rejection_sampler.py``; design note engine-adapters.md section 0): B requests with ragged
chains of drafts, concatenated: ``draft_token_ids [num_tokens]``, ``num_draft_tokens`` (a host list, may hold 0),
``cu_num_draft_tokens [B]`` (inclusive cumulative sum), ``draft_probs [num_tokens, V]`` or None (n-gram / EAGLE
without probabilities: q = 1 at the draft), ``target_probs [num_tokens, V]``, ``bonus_token_ids [B, 1]`` (sampled
outside). Output ``int32 [B, max_spec_len + 1]`` with -1 placeholders: the accepted drafts, then the recovered token
at the first rejection, or the bonus token after every draft was accepted.

* Greedy requests (``sampling_metadata.all_greedy``, or ``temperature == GREEDY_TEMPERATURE``): the target's argmax
  at each position until the first mismatch with the draft, which is emitted; the bonus if every draft matches.
* Random requests: draft accepted iff ``q(x) > 0 and p(x) / q(x) >= u`` (vLLM's test) with one uniform per draft
  (per-request ``generators[i]`` fill their slice; requests without drafts draw nothing); the recovered token is
  ``argmax((p - q)^+ / E)`` with one exponential row ``E [B, V]`` per request (vLLM's exponential race; p with the
  draft zeroed when ``draft_probs`` is None).

Swap-in (vLLM's ``RejectionSampler.forward`` calls the module attribute)::

    import vllm.v1.sample.rejection_sampler as rs
    rs.rejection_sample = functools.partial(otlp.engines.vllm.rejection_sample, method="optimal")
"""

from __future__ import annotations

from otlp.core import xp as X
from otlp.core.errors import InputError
from otlp.engines import _common as C

PLACEHOLDER_TOKEN_ID: int = -1
GREEDY_TEMPERATURE: float = 0.0
MAX_SPEC_LEN: int = 128


def rejection_sample(
    draft_token_ids, num_draft_tokens: list[int], max_spec_len: int, cu_num_draft_tokens,  # noqa: ANN001
    draft_probs, target_probs, bonus_token_ids, sampling_metadata: object = None,  # noqa: ANN001
    synthetic_mode: bool = False, synthetic_conditional_rates=None, use_fp64_gumbel: bool = False, *,  # noqa: ANN001
    method: str = "rrs", uniform_probs=None, final_uniforms=None, exponentials=None,  # noqa: ANN001
    target_is_logits: bool = False, validate: bool | None = None,
):  # noqa: ANN201 - int32 [B, max_spec_len + 1]
    """vLLM's rejection sampler (module docstring) with ``method="rrs"`` (vLLM's rule, bit for bit for the same
    randomness) or ``"optimal"`` (otlp's one-draft rule at each position: accept iff ``u q(x) < p(x)``, the residual
    by inverse CDF at the request's final uniform; the same law).

    ``sampling_metadata``: duck-typed vLLM ``SamplingMetadata`` (``.all_greedy``, ``.all_random``,
    ``.temperature [B]``, ``.generators dict[int, torch.Generator]``); None: every request random, no generator.
    Keyword extras: ``uniform_probs [num_tokens]`` the acceptance coins (else drawn as vLLM draws them, float64);
    ``exponentials [B, V]`` vLLM's exponential row per request (else drawn as vLLM draws them); ``final_uniforms
    [B]`` draws the recovered token by inverse CDF of (p - q)^+ instead (one uniform per request: it rejects at
    most once; ``method="optimal"`` always draws this way, from the generators when not given);
    ``target_is_logits``: ``target_probs`` holds logits with temperature already applied (vLLM >= 0.28), softmax
    first. ``synthetic_mode=True`` is refused (not a sampling rule); ``use_fp64_gumbel`` is accepted and ignored."""
    import torch

    C.check_method(method, ("rrs", "optimal"))
    if synthetic_mode:
        raise InputError("synthetic_mode=True is vLLM's acceptance-rate simulation, not a sampling rule; otlp's "
                         "adapter verifies drafts only (synthetic_mode must be False)")
    all_greedy = bool(getattr(sampling_metadata, "all_greedy", False))
    B, T, V, dev = _check(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                          target_probs, bonus_token_ids, uniform_probs, final_uniforms, exponentials,
                          C.validating(validate), target_rows=not (all_greedy or target_is_logits))
    all_random = bool(getattr(sampling_metadata, "all_random", sampling_metadata is None))
    generators = dict(getattr(sampling_metadata, "generators", None) or {})
    K = int(max_spec_len)
    with torch.no_grad():
        p = target_probs.float().softmax(dim=-1) if target_is_logits else target_probs
        bonus = bonus_token_ids.reshape(B).long()
        lengths_host = torch.tensor(list(num_draft_tokens), dtype=torch.long)
        starts_host = torch.cumsum(lengths_host, 0) - lengths_host
        lengths, starts = lengths_host.to(dev), starts_host.to(dev)
        j = torch.arange(max(K, 1), device=dev)[:K]
        flat = (starts[:, None] + j[None, :]).clamp(max=max(T - 1, 0))  # [B, K] the position's row
        x = draft_token_ids.long()  # [T]
        x_pad = x[flat] if T else torch.zeros((B, K), dtype=torch.long, device=dev)

        if all_random:
            greedy = torch.zeros(B, dtype=torch.bool, device=dev)
        elif all_greedy or sampling_metadata is None:
            greedy = torch.ones(B, dtype=torch.bool, device=dev)
        else:
            greedy = sampling_metadata.temperature.to(dev) == GREEDY_TEMPERATURE
        if not all_random and T:
            argmax = target_probs.argmax(dim=-1)  # [T] (of logits or probabilities alike)
            accept_g, recovered_g = (x == argmax)[flat], argmax[flat]
        else:
            accept_g = torch.zeros((B, K), dtype=torch.bool, device=dev)
            recovered_g = x_pad
        if all_greedy or T == 0:
            accept, pos = accept_g, C.first_rejection(accept_g, lengths)
            last = torch.where(pos < lengths, recovered_g.gather(1, pos.clamp(max=max(K - 1, 0))[:, None])[:, 0]
                               if K else bonus, bonus)
        else:
            u = uniform_probs if uniform_probs is not None else _uniform_probs(T, num_draft_tokens, generators, dev)
            p_x = p.gather(1, x[:, None])[:, 0]  # [T]
            q_x = (torch.ones_like(p_x) if draft_probs is None else draft_probs.gather(1, x[:, None])[:, 0])
            if method == "optimal" or final_uniforms is not None:
                finals = final_uniforms if final_uniforms is not None else _final_uniforms(B, num_draft_tokens,
                                                                                          generators, dev)
            if method == "rrs":
                accept_r = ((q_x > 0) & (p_x / q_x.where(q_x > 0, 1.0) >= u))[flat]  # vLLM's test
            else:
                owner = _owners(starts + lengths, T)  # [T]
                q_rows = _ngram_q(x, V, p) if draft_probs is None else draft_probs
                accept_t, tokens_t = C.chain_optimal(p, q_rows, x, u, finals[owner])
                accept_r = accept_t[flat]
            accept = torch.where(greedy[:, None], accept_g, accept_r)
            pos = C.first_rejection(accept, lengths)  # [B]
            at = flat.gather(1, pos.clamp(max=max(K - 1, 0))[:, None])[:, 0]  # [B] the first rejection's row
            if method == "optimal":
                recovered_r = tokens_t[at]
            elif final_uniforms is not None and draft_probs is not None and T <= B:
                # at most one draft per request on average: the residual of every position costs no more than
                # gathering the stopping rows first (and reads p, q in place)
                owner = _owners(starts + lengths, T)  # [T]
                recovered_r = C.draw(X.positive_part(p, draft_probs), finals[owner])[at]
            else:
                zero = torch.zeros_like(at)
                p_rows = C.rows_at(p[:, None], zero, at, name="engine_p")  # [B, V] (T rows as [T, 1, V])
                if draft_probs is None:  # vLLM: p with the draft token zeroed
                    weights = p_rows.scatter_(1, x[at][:, None], 0.0)
                else:
                    weights = X.positive_part(p_rows, C.rows_at(draft_probs[:, None], zero, at, name="engine_q"))
                if final_uniforms is not None:
                    recovered_r = C.draw(weights, finals)
                else:
                    E = exponentials if exponentials is not None else _exponentials(B, V, num_draft_tokens,
                                                                                     generators, dev)
                    recovered_r = (weights / E).argmax(dim=1)
            recovered = torch.where(greedy, recovered_g.gather(1, pos.clamp(max=max(K - 1, 0))[:, None])[:, 0],
                                    recovered_r)
            last = torch.where(pos < lengths, recovered, bonus)
        jj = torch.arange(K + 1, device=dev)
        x_out = torch.cat([x_pad, x_pad.new_zeros((B, 1))], dim=1)  # [B, K + 1] (an accepted greedy draft = argmax)
        out = torch.where(jj[None, :] < pos[:, None], x_out,
                          torch.where(jj[None, :] == pos[:, None], last[:, None], PLACEHOLDER_TOKEN_ID))
    return out.to(torch.int32)


def _owners(ends, T: int):  # noqa: ANN001, ANN202 - int64 [B] (each request's end in the ragged rows) -> [T]
    """The request that owns each of the T ragged rows: the number of requests ending at or before it
    (``searchsorted``; requests with no drafts own nothing). ``torch.repeat_interleave`` gives the same, but on the
    host it opens an OpenMP region whose spinning threads then slowed the optimal rule's worker threads by 15-20% on
    two cores (benchmarks/engines.py)."""
    import torch

    return torch.searchsorted(ends, torch.arange(T, device=ends.device), right=True)


def _ngram_q(x, V: int, like):  # noqa: ANN001, ANN202 - [T] -> [T, V] one-hot (q = 1 at the draft)
    import torch

    return torch.zeros((x.shape[0], V), dtype=like.dtype, device=like.device).scatter_(1, x[:, None], 1.0)


def _uniform_probs(T: int, num_draft_tokens: list[int], generators: dict, dev):  # noqa: ANN001, ANN202
    """vLLM's ``generate_uniform_probs``: float64 ``[T]`` from the default generator, each seeded request's slice
    refilled from its own generator (requests without drafts draw nothing)."""
    import torch

    u = torch.rand((T,), dtype=torch.float64, device=dev)
    start = 0
    for i, n in enumerate(num_draft_tokens):  # vLLM's loop over the host list (per-request generators)
        if n and i in generators:
            u[start:start + n].uniform_(generator=generators[i])
        start += n
    return u


def _exponentials(B: int, V: int, num_draft_tokens: list[int], generators: dict, dev):  # noqa: ANN001, ANN202
    """vLLM's exponential rows ``[B, V]`` float32 (``sample_recovered_tokens``): default generator, seeded requests
    with drafts redrawn from their generator."""
    import torch

    E = torch.empty((B, V), dtype=torch.float32, device=dev).exponential_()
    for i, g in generators.items():
        if num_draft_tokens[i] > 0:
            E[i].exponential_(generator=g)
    return E


def _final_uniforms(B: int, num_draft_tokens: list[int], generators: dict, dev):  # noqa: ANN001, ANN202
    """One final uniform per request (float64), seeded requests with drafts from their generator."""
    import torch

    f = torch.rand((B,), dtype=torch.float64, device=dev)
    for i, g in generators.items():
        if num_draft_tokens[i] > 0:
            f[i:i + 1].uniform_(generator=g)
    return f


def _check(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs,
           bonus_token_ids, uniform_probs, final_uniforms, exponentials, values: bool,
           target_rows: bool = True):  # noqa: ANN001, ANN202
    import torch

    C.check_tensor("target_probs", target_probs, ndim=2, floating=True)
    T, V = target_probs.shape
    dev = target_probs.device
    if not isinstance(num_draft_tokens, (list, tuple)) or not all(isinstance(n, int) and n >= 0
                                                                  for n in num_draft_tokens):
        raise InputError("num_draft_tokens must be a list of non-negative ints (drafts per request)")
    B = len(num_draft_tokens)
    if sum(num_draft_tokens) != T:
        raise InputError(f"num_draft_tokens must sum to num_tokens = {T} (target_probs' rows), got "
                         f"{sum(num_draft_tokens)}")
    if not isinstance(max_spec_len, int) or max_spec_len < max(num_draft_tokens, default=0):
        raise InputError(f"max_spec_len must be an int >= max(num_draft_tokens) = {max(num_draft_tokens, default=0)}, "
                         f"got {max_spec_len!r}")
    C.check_tensor("draft_token_ids", draft_token_ids, shape=(T,), dtypes=C.INT_DTYPES, device=dev)
    C.check_tensor("cu_num_draft_tokens", cu_num_draft_tokens, shape=(B,), dtypes=C.INT_DTYPES, device=dev)
    if draft_probs is not None:
        C.check_tensor("draft_probs", draft_probs, shape=(T, V), floating=True, device=dev)
    C.check_tensor("bonus_token_ids", bonus_token_ids, dtypes=C.INT_DTYPES, device=dev)
    if tuple(bonus_token_ids.shape) not in ((B, 1), (B,)):
        raise InputError(f"bonus_token_ids must have shape [{B}, 1], got {list(bonus_token_ids.shape)}")
    if uniform_probs is not None:
        C.check_tensor("uniform_probs", uniform_probs, shape=(T,), floating=True, device=dev)
    if final_uniforms is not None:
        C.check_tensor("final_uniforms", final_uniforms, shape=(B,), floating=True, device=dev)
    if exponentials is not None:
        C.check_tensor("exponentials", exponentials, shape=(B, V), floating=True, device=dev)
    if values:
        want = torch.cumsum(torch.tensor(list(num_draft_tokens), dtype=torch.long), 0).to(dev)
        if B and not bool((cu_num_draft_tokens.long() == want).all()):
            raise InputError("cu_num_draft_tokens must be the inclusive cumulative sum of num_draft_tokens, got "
                             f"{cu_num_draft_tokens.tolist()} for {list(num_draft_tokens)}")
        C.check_ids("draft_token_ids", draft_token_ids, V)
        C.check_ids("bonus_token_ids", bonus_token_ids, V)
        if T and target_rows:  # probabilities (all-greedy batches and target_is_logits pass logits)
            C.check_rows("target_probs", target_probs)
        if T and draft_probs is not None:
            C.check_rows("draft_probs", draft_probs)
        if uniform_probs is not None:
            C.check_unit("uniform_probs", uniform_probs)
        if final_uniforms is not None:
            C.check_unit("final_uniforms", final_uniforms)
    return B, T, V, dev
