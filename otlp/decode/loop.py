"""The speculative decode loop: n drafted paths of L tokens per step, verified token by token down the tree.

One step, for every prompt in the batch (SpecTr Alg. 3 "DraftSelection"; SpecInfer token-tree verification):

1. Draft: at the root (the current context) draw an n-tuple of first tokens from the draft scheme applied to
   q(. | context); every path then continues alone, z_i(j) ~ q(. | context, z_i(<j)), for j = 2..L. For i.i.d.
   drafts this is n independent draft sequences (SpecTr eq. (7)-(8)); for the other schemes the first tokens are
   distinct, so every deeper node carries one path.
2. Target: ONE batched call gives p(. | context, z_i(<j)) for every path i and depth j = 0..L (L + 1 positions,
   the last one for the bonus token).
3. Verify: walk down from the root. At a node carrying m paths, the m children tokens are i.i.d. q for i.i.d.
   drafts (m may be below n where paths merged and split), or the scheme's n-tuple at the root, or one q-sample
   deeper; the verifier picks y ~ p from (p, q, children). If y equals a child token the walk continues into the
   paths through that child (even when y came from the residual: its target conditionals are already
   computed); otherwise the step ends with y as the correction. A walk that survives all L levels emits a bonus
   token from p(. | context, path). So each step emits tau in [1, L + 1] tokens for one serial target call.

The emitted stream has exactly the law of plain autoregressive sampling from the (temperature / top-k / top-p
processed) target when the verifier is exact for the children's law (SpecTr Thm 2, read as a statement about the
stream, see the SpecTr note §4). Block efficiency = emitted tokens / target calls (SpecTr §3).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from otlp.core.distributions import probabilities_from_logits
from otlp.core.errors import InputError, ModelTooLargeError
from otlp.core.xp import inverse_cdf
from otlp.decode.draft_sampling import check_scheme, sample_drafts
from otlp.decode.engine import ENGINE_VERIFIERS, ENGINES, sglang_step, step_uniforms
from otlp.decode.models import LanguageModel, check_pair, prefix_lists
from otlp.decode.registry import Verifier, resolve_verifier
from otlp.decode.tree import finished, tree_laws

#: Refuse a step whose probability tables [B, n, L + 1, V] x 2 would exceed this many bytes.
MAX_STEP_BYTES = 2 * 2**30


@dataclass
class DecodeMetrics:
    """What one decode run measured. Times are wall-clock seconds in this process."""

    verifier: str
    scheme: str
    n: int
    L: int
    batch: int
    tokens: int  # tokens emitted by the algorithm (before trimming each prompt to max_new_tokens)
    target_calls: int  # serial target calls (one per step, batched over prompts)
    sequence_steps: int  # sum over steps of the prompts still decoding: the denominator of block efficiency
    block_efficiency: float  # tokens / sequence_steps: tokens per target call per sequence (SpecTr §3)
    acceptance_per_position: list[float]  # P(the walk continues past depth j | it reached depth j)
    reached_per_position: list[int]
    rule_acceptance: float  # fraction of node verifications where the verifier accepted a draft (index >= 0)
    seconds: float
    draft_seconds: float
    target_seconds: float
    verifier_seconds: float
    verifier_calls: int = 0  # calls of the verifier (one per depth and per number of children present)
    tokens_per_second: float = 0.0
    verifier_time_share: float = 0.0  # verifier seconds / total step seconds
    engine: str | None = None  # the engine adapter that verified each step's tree (None: the loop's own walk)
    draft_tree: str = "recompute"  # "cached" (KV cache, one tree pass per step) or "recompute" (every prefix)
    target_tree: str = "recompute"
    target_positions: int = 0  # token positions pushed through the target (prompts included)
    target_prompt_positions: int = 0  # of those, prompt tokens before each prompt's last (cached path only)
    target_positions_per_step: float = 0.0  # (target_positions - prompt positions) / sequence_steps
    target_positions_per_token: float = 0.0  # target_positions / tokens
    draft_positions: int = 0
    draft_positions_per_step: float = 0.0  # (draft_positions - its prompt positions) / sequence_steps
    max_new_tokens: int = 0  # new tokens asked for per prompt
    tokens_kept: int = 0  # tokens in the output: batch x max_new_tokens; tokens - tokens_kept were emitted by a
    # prompt's last step past max_new_tokens and dropped (block efficiency counts them: it measures the rule)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class DecodeResult:
    tokens: list[list[int]]  # per prompt, exactly max_new_tokens new tokens
    metrics: DecodeMetrics
    root_p: list[torch.Tensor] = field(default_factory=list)  # collected target laws at step roots [V]
    root_q: list[torch.Tensor] = field(default_factory=list)  # matching draft laws [V]


def _generator(seed: int | torch.Generator | None, device: torch.device) -> torch.Generator:
    """A generator on ``device`` (torch draws on a device only from that device's generators); a generator passed
    in is used as is and must live there."""
    if isinstance(seed, torch.Generator):
        if seed.device.type != device.type:
            raise InputError(f"seed is a torch.Generator on {seed.device}, the models' laws are on {device}; pass "
                             f"a generator on {device.type} or an integer seed")
        return seed
    gen = torch.Generator(device=device)
    gen.manual_seed(0 if seed is None else int(seed))
    return gen


def loop_device(target_model: LanguageModel) -> torch.device:
    """Where the loop keeps the laws, draws and verifies: the target model's ``device`` (an HF model on a GPU), else
    the CPU (the n-gram models). The walk's bookkeeping (drafted tokens, alive paths) stays on the host."""
    return torch.device(getattr(target_model, "device", None) or "cpu")


def _takes(fn: Callable, keyword: str) -> bool:
    """Whether ``fn`` has a parameter named ``keyword`` (False where its signature cannot be read)."""
    try:
        return keyword in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    probabilities_from_logits(torch.zeros(1, 2), temperature, top_k, top_p)  # raises InputError, naming the value


class _Distributions:
    """logits -> float64 probabilities on ``device`` with one model's sampling settings."""

    def __init__(self, model: LanguageModel, temperature: float, top_k: int | None, top_p: float | None,
                 device: torch.device):
        self.model, self.temperature, self.top_k, self.top_p = model, temperature, top_k, top_p
        self.device = device
        self.seconds = 0.0

    def laws(self, logits: torch.Tensor) -> torch.Tensor:
        """float [..., V] logits -> float64 [..., V] probabilities on the loop's device."""
        logits = logits.detach().to(self.device, torch.float64)
        if self.top_k is None and self.top_p is None and self.temperature > 0:
            return torch.softmax(logits / self.temperature, dim=-1)  # the shared function's result, no sort
        shape = logits.shape
        return probabilities_from_logits(logits.reshape(-1, shape[-1]), self.temperature, self.top_k,
                                         self.top_p).reshape(shape)

    def __call__(self, prefixes: list[list[int]]) -> torch.Tensor:
        start = time.perf_counter()
        probs = self.laws(self.model.next_token_logits(prefixes))  # [B, V]
        self.seconds += finished(probs, start)
        return probs  # [B, V]


def _check_engine(engine: str | None, uniforms: bool, resolved: object, verifier: object,
                  single_draft_verifier: object, capture: object) -> bool:
    """Whether the loop draws engine-style uniforms (``uniforms``, implied by ``engine``); a one-line InputError for
    an engine the loop cannot drive with these settings."""
    if engine is None:
        if uniforms and not _takes(resolved.sample, "uniforms"):  # type: ignore[attr-defined]
            raise InputError(f"uniforms=True needs a verifier whose sample() takes uniforms; "
                             f"{resolved.name!r} does not")  # type: ignore[attr-defined]
        return bool(uniforms)
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(map(repr, ENGINES))} or None, got {engine!r}")
    if not isinstance(verifier, str) or resolved.name not in ENGINE_VERIFIERS:  # type: ignore[attr-defined]
        raise InputError(f"engine {engine!r} verifies with its adapter's rules, a verifier among "
                         f"{', '.join(ENGINE_VERIFIERS)}; got {getattr(resolved, 'name', verifier)!r}")
    if single_draft_verifier is not None or capture is not None:
        raise InputError(f"engine {engine!r} runs the adapter's rule at every node and writes no capture; drop "
                         "single_draft_verifier / capture")
    return True


def _window(*models: LanguageModel) -> int | None:
    sizes = [getattr(m, "context_size", None) for m in models]
    if any(s is None for s in sizes):
        return None
    return max(int(s) for s in sizes)  # type: ignore[arg-type]


def decode(
    draft_model: LanguageModel,
    target_model: LanguageModel,
    verifier: str | Verifier = "rrs",
    n: int = 2,
    L: int = 4,
    *,
    prompts: Sequence[Sequence[int]] | None = None,
    max_new_tokens: int = 32,
    scheme: str | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    draft_temperature: float | None = None,
    draft_top_k: int | None = None,
    draft_top_p: float | None = None,
    seed: int | torch.Generator | None = 0,
    single_draft_verifier: Verifier | None = None,
    collect: int = 0,
    progress: Callable[[int], object] | None = None,
    capture: object = None,
    tree: str = "cached",
    cuda_graphs: bool = True,
    uniforms: bool = False,
    engine: str | None = None,
) -> DecodeResult:
    """Speculative decoding of ``max_new_tokens`` tokens for each prompt (see the module docstring).

    Parameters
    ----------
    draft_model, target_model : :class:`otlp.decode.models.LanguageModel` with one shared vocabulary.
    verifier : a name (``otlp.verifiers.get(name)``) or a callable
        ``sample(p [B, V], q [B, V], drafts [B, m], generator) -> (tokens [B], accepted_index [B])``.
    n, L : drafts per step (tree width at the root) and draft length (tree depth).
    prompts : token-id prefixes, one per sequence (default: one prompt holding the target's ``bos_id`` or 0).
    scheme : "iid", "without_replacement", "greedy" or "spechub"; default: the one the verifier expects.
    temperature, top_k, top_p : applied to the target; the draft uses ``draft_*`` or, where None, the same.
    single_draft_verifier : used at nodes with one child; default the verifier itself, except for the spechub
        scheme (defined for n = 2 only), where single-draft speculative sampling is used.
    collect : keep the (p, q) laws at the first ``collect`` step roots (for ``otlp bench acceptance``).
    progress : called with the number of new tokens (summed over prompts, capped at the target) after each step.
    capture : an :class:`otlp.sweep.CaptureWriter` (or any object with ``start_run(**settings)`` and
        ``add_nodes(p [R, V], q [R, V], **node columns)``): every verification node's (p, q) is written to it
        with its context id (one per prompt and step), prompt, position, depth, width, the sampling settings
        and the model names (see :mod:`otlp.sweep.capture`). Costs a host copy of p and q per node.
    tree : "cached": a model with ``tree_session()`` (HFCausalLM) keeps the accepted context in its KV cache and
        gets each step's tree in one forward pass (the draft: one pass per depth), see :mod:`otlp.decode.tree`;
        a model that cannot take a custom attention mask falls back to "recompute" with one RuntimeWarning.
        "recompute": every node's prefix goes through ``next_token_logits``. Both give the same laws.
    cuda_graphs : on a CUDA device, a verifier whose ``sample`` takes ``graphs`` (``optimal``) replays each call
        signature (rows, children, dtypes) from a CUDA graph (:mod:`otlp.backend.cuda_graphs`): the same tokens, without
        the launch overhead of its few hundred kernels per call. False: every call launches its kernels.
    uniforms : draw the verification's randomness as serving engines pass it: per step one coin per tree node and
        one final uniform per prompt (:func:`otlp.decode.engine.step_uniforms`, from the seeded generator), handed
        to the rule's ``sample(..., uniforms=[coin, final])``; the final uniform also draws the bonus token (inverse
        CDF). The same law as the generator path; the verifier must take ``uniforms`` (every zoo rule does).
    engine : "sglang": each step's tree is verified by the SGLang-style adapter
        (:func:`otlp.engines.sglang.tree_speculative_sampling`, the loop's merged tree in SGLang's first-child /
        next-sibling encoding, :mod:`otlp.decode.engine`) with the verifier as its ``method`` (one of
        ``otlp.decode.engine.ENGINE_VERIFIERS``) at every node; implies ``uniforms``, and gives the same tokens as
        the loop's own walk with ``uniforms=True`` for the same seed. None (default): the loop's own walk.
    """
    V = check_pair(draft_model, target_model)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"n must be an integer >= 1 (drafts per step), got {n!r}")
    if isinstance(L, bool) or not isinstance(L, int) or L < 1:
        raise InputError(f"L must be an integer >= 1 (draft length), got {L!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    resolved = resolve_verifier(verifier, scheme)
    scheme = check_scheme(resolved.scheme, n)
    uniforms = _check_engine(engine, uniforms, resolved, verifier, single_draft_verifier, capture)
    device = loop_device(target_model)
    verify_node = resolved.sample
    if cuda_graphs and device.type == "cuda" and _takes(verify_node, "graphs"):
        verify_node = functools.partial(verify_node, graphs=True)
    d_top_k = top_k if draft_top_k is None else draft_top_k
    if d_top_k is not None and _takes(verify_node, "top_k"):  # optimal_wor: the draft's support size, known here
        verify_node = functools.partial(verify_node, top_k=d_top_k)  # (so its device route reads none of it)
    if single_draft_verifier is None:
        single_draft_verifier = resolve_verifier("sps").sample if scheme == "spechub" else verify_node
    d_temp = temperature if draft_temperature is None else draft_temperature
    d_top_p = top_p if draft_top_p is None else draft_top_p
    _check_sampling(temperature, top_k, top_p)
    _check_sampling(d_temp, d_top_k, d_top_p)
    if prompts is None:
        prompts = [[int(getattr(target_model, "bos_id", 0))]]
    sequences = prefix_lists(prompts)
    B = len(sequences)
    if B == 0:
        raise InputError("prompts is empty; give at least one prompt")
    step_bytes = 2.0 * B * n * (L + 1) * V * 8
    if step_bytes > MAX_STEP_BYTES:
        raise ModelTooLargeError(f"a decode step with batch {B}, n = {n}, L = {L}, V = {V}", step_bytes,
                                 MAX_STEP_BYTES)
    generator = _generator(seed, device)
    draft_probs = tree_laws(draft_model, _Distributions(draft_model, d_temp, d_top_k, d_top_p, device).laws, tree)
    target_probs = tree_laws(target_model, _Distributions(target_model, temperature, top_k, top_p, device).laws,
                             tree)
    window = _window(draft_model, target_model)
    prompt_lengths = [len(s) for s in sequences]

    reached = torch.zeros(L, dtype=torch.int64)
    continued = torch.zeros(L, dtype=torch.int64)
    rule_accepts = torch.zeros((), dtype=torch.int64)
    verifications = torch.zeros((), dtype=torch.int64)
    verifier_seconds = 0.0
    verifier_calls = 0
    target_calls = sequence_steps = emitted = 0
    root_p: list[torch.Tensor] = []
    root_q: list[torch.Tensor] = []
    next_context = 0  # capture: context ids, one per prompt and step
    if capture is not None:
        if int(getattr(capture, "V", V)) != V:
            raise InputError(f"the capture holds V = {capture.V} entries per law, the models have V = {V}")
        capture.start_run(temperature=temperature, top_k=top_k, top_p=top_p, draft_temperature=d_temp,
                          draft_top_k=d_top_k, draft_top_p=d_top_p,
                          draft_model=str(getattr(draft_model, "name", None) or type(draft_model).__name__),
                          target_model=str(getattr(target_model, "name", None) or type(target_model).__name__))
    start = time.perf_counter()

    while True:
        active_ids = [b for b in range(B) if len(sequences[b]) - prompt_lengths[b] < max_new_tokens]
        if not active_ids:
            break
        A = len(active_ids)
        if capture is not None:  # node columns of this step's tree
            context_ids = torch.arange(next_context, next_context + A)  # [A]
            positions = torch.tensor([len(sequences[b]) - prompt_lengths[b] for b in active_ids])  # [A]
            next_context += A
        contexts = [sequences[b] if window is None else sequences[b][max(0, len(sequences[b]) - window):]
                    for b in active_ids]

        # 1. drafting: the scheme's n-tuple at the root, then one q-sample per path and depth
        drafts = torch.empty((A, n, L), dtype=torch.int64)  # [A, n, L], on the host
        q_all = torch.empty((A, n, L, V), dtype=torch.float64, device=device)  # [A, n, L, V]: q at drafts[:, i, j]
        q_root = draft_probs.tree(active_ids, contexts, drafts[:, :, :0])[:, 0, 0]  # [A, V]
        drafts[:, :, 0] = sample_drafts(scheme, q_root, n, generator).cpu()
        q_all[:, :, 0] = q_root[:, None, :]
        for j in range(1, L):
            q_depth = draft_probs.grow(drafts[:, :, j - 1])  # [A, n, V]: q after each path's first j tokens
            q_all[:, :, j] = q_depth
            drafts[:, :, j] = torch.multinomial(q_depth.reshape(A * n, V), 1, generator=generator).view(A, n).cpu()

        # 2. one target call for every node of the tree: depth 0 (shared root) and depths 1..L per path
        p_all = target_probs.tree(active_ids, contexts, drafts)  # [A, n, L+1, V]
        target_calls += 1
        if len(root_p) < collect:
            root_p.extend(p_all[:, 0, 0].cpu().unbind(0))
            root_q.extend(q_root.cpu().unbind(0))
        if uniforms:  # one coin per node (its group's first path and depth) and one final uniform per prompt
            coins, finals = step_uniforms(A, n, L, generator, device)  # [A, n, L], [A]

        if engine is not None:  # 3'. the step's tree through the engine adapter
            t0 = time.perf_counter()
            out_dev, tau_dev, path_dev = sglang_step(p_all, q_all, drafts, coins, finals, resolved.name)
            out, tau, path = out_dev.cpu(), tau_dev.cpu(), path_dev.cpu()
            verifier_seconds += time.perf_counter() - t0
            verifier_calls += 1
            depth = torch.arange(L)
            reached += (tau[:, None] > depth[None, :]).sum(dim=0)
            continued += (tau[:, None] > depth[None, :] + 1).sum(dim=0)
            verifications += tau.clamp(max=L).sum()
            rule_accepts += (tau - 1).sum()
        else:
            # 3. verification, depth by depth; rows grouped by how many paths reach their current node
            alive = torch.ones((A, n), dtype=torch.bool)  # paths consistent with the tokens emitted this step
            walking = torch.ones(A, dtype=torch.bool)
            out = torch.full((A, L + 1), -1, dtype=torch.int64)  # emitted tokens this step
            tau = torch.zeros(A, dtype=torch.int64)
            path = torch.zeros(A, dtype=torch.int64)  # a path holding every drafted token accepted so far
            for j in range(L):
                m = alive.sum(dim=1)  # [A]
                chosen = torch.zeros(A, dtype=torch.int64)
                for width in range(1, n + 1):
                    rows = torch.nonzero(walking & (m == width)).squeeze(1)  # [R]
                    if rows.numel() == 0:
                        continue
                    # alive paths first (stable): their first `width` indices are the node's children
                    cols = torch.sort((~alive[rows]).to(torch.int8), dim=1, stable=True).indices[:, :width]
                    children = drafts[rows, :, j].gather(1, cols).to(device)  # [R, width]
                    node = (rows.to(device), cols[:, 0].to(device))
                    p = p_all[node + (j,)]  # [R, V]
                    q = q_all[node + (j,)]  # [R, V]
                    if capture is not None:
                        capture.add_nodes(p, q, context_id=context_ids[rows], sequence=torch.tensor(active_ids)[rows],
                                          position=positions[rows], depth=j, width=width)
                    rule = verify_node if width > 1 else single_draft_verifier
                    if resolved.per_draft_q and rule is verify_node:
                        q = q[:, None, :].expand(-1, width, -1)  # [R, width, V]: every child drawn from q
                    t0 = time.perf_counter()
                    if uniforms:  # the node's coin (its first alive path, this depth) and the prompt's final
                        u = torch.stack([coins[node + (j,)], finals[node[0]]], dim=1)  # [R, 2]
                        tokens, accepted = rule(p, q, children, uniforms=u)
                    else:
                        tokens, accepted = rule(p, q, children, generator)
                    verifier_seconds += finished(tokens, t0)
                    chosen[rows] = tokens.to(torch.int64).cpu()
                    rule_accepts += (accepted >= 0).sum().cpu()
                    verifications += rows.numel()
                    verifier_calls += 1
                out[walking, j] = chosen[walking]
                follow = alive & (drafts[:, :, j] == chosen[:, None]) & walking[:, None]
                goes_on = follow.any(dim=1)
                reached[j] += walking.sum()
                continued[j] += goes_on.sum()
                tau += walking.to(torch.int64)
                path = torch.where(goes_on, torch.argmax(follow.to(torch.int8), dim=1), path)
                alive, walking = follow, goes_on
            if bool(walking.any()):  # every level accepted: the bonus token from p(. | context, path)
                rows = torch.nonzero(walking).squeeze(1)
                last = p_all[rows.to(device), path[rows].to(device), L]  # [R, V]
                if uniforms:  # inverse CDF at the final uniform, as the engines draw it
                    bonus = inverse_cdf(last, finals[rows.to(device)][:, None].to(last.dtype))
                else:
                    bonus = torch.multinomial(last, 1, generator=generator).squeeze(1)
                out[rows, L] = bonus.cpu()
                tau[rows] += 1

        draft_probs.commit(tau, path)  # the caches keep the context plus the tau - 1 accepted drafted tokens
        target_probs.commit(tau, path)
        taus = tau.tolist()
        emitted_rows = out.tolist()
        new_tokens = 0
        for a, b in enumerate(active_ids):
            before = len(sequences[b]) - prompt_lengths[b]
            sequences[b].extend(emitted_rows[a][: taus[a]])
            new_tokens += min(max_new_tokens, before + taus[a]) - before
        emitted += sum(taus)
        sequence_steps += A
        if progress is not None:
            progress(new_tokens)

    seconds = time.perf_counter() - start
    reached_list = reached.tolist()
    metrics = DecodeMetrics(
        verifier=resolved.name, scheme=scheme, n=n, L=L, batch=B, tokens=emitted, target_calls=target_calls,
        sequence_steps=sequence_steps, block_efficiency=emitted / max(sequence_steps, 1),
        acceptance_per_position=[c / r if r else float("nan")
                                 for c, r in zip(continued.tolist(), reached_list, strict=True)],
        reached_per_position=reached_list,
        rule_acceptance=float(rule_accepts) / max(int(verifications), 1),
        seconds=seconds, draft_seconds=draft_probs.seconds, target_seconds=target_probs.seconds,
        verifier_seconds=verifier_seconds, verifier_calls=verifier_calls,
        tokens_per_second=B * max_new_tokens / seconds if seconds > 0 else float("inf"),
        verifier_time_share=verifier_seconds / seconds if seconds > 0 else 0.0,
        engine=engine, draft_tree=draft_probs.mode, target_tree=target_probs.mode,
        target_positions=target_probs.positions, target_prompt_positions=target_probs.prompt_positions,
        target_positions_per_step=(target_probs.positions - target_probs.prompt_positions) / max(sequence_steps, 1),
        target_positions_per_token=target_probs.positions / max(emitted, 1),
        draft_positions=draft_probs.positions,
        draft_positions_per_step=(draft_probs.positions - draft_probs.prompt_positions) / max(sequence_steps, 1),
    )
    tokens = [s[n0 : n0 + max_new_tokens] for s, n0 in zip(sequences, prompt_lengths, strict=True)]
    metrics.max_new_tokens, metrics.tokens_kept = max_new_tokens, sum(len(t) for t in tokens)
    return DecodeResult(tokens, metrics, root_p[:collect], root_q[:collect])


def sample_target(
    target_model: LanguageModel,
    *,
    prompts: Sequence[Sequence[int]] | None = None,
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = 0,
    progress: Callable[[int], object] | None = None,
) -> tuple[list[list[int]], dict]:
    """Plain autoregressive sampling from the target (the law the decode loop must reproduce).

    Returns ``(tokens per prompt, {"target_calls", "seconds", "tokens_per_second"})``.
    """
    _check_sampling(temperature, top_k, top_p)
    if prompts is None:
        prompts = [[int(getattr(target_model, "bos_id", 0))]]
    sequences = prefix_lists(prompts)
    if not sequences:
        raise InputError("prompts is empty; give at least one prompt")
    device = loop_device(target_model)
    generator = _generator(seed, device)
    probs = _Distributions(target_model, temperature, top_k, top_p, device)
    window = _window(target_model)
    start = time.perf_counter()
    new: list[list[int]] = [[] for _ in sequences]
    for _ in range(max_new_tokens):
        contexts = [s + t if window is None else (s + t)[max(0, len(s) + len(t) - window):]
                    for s, t in zip(sequences, new, strict=True)]
        tokens = torch.multinomial(probs(contexts), 1, generator=generator).squeeze(1).tolist()
        for row, token in zip(new, tokens, strict=True):
            row.append(token)
        if progress is not None:
            progress(len(sequences))
    seconds = time.perf_counter() - start
    return new, {"target_calls": max_new_tokens, "seconds": seconds,
                 "tokens_per_second": len(sequences) * max_new_tokens / seconds if seconds > 0 else float("inf")}
