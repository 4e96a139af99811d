"""SGLang's speculative-sampling verifiers with otlp's rules behind them (pure torch; sglang and sgl_kernel are not
imported).

Contract (``sgl_kernel.tree_speculative_sampling_target_only`` and ``sglang.kernels.ops.speculative``'s
``chain_speculative_sampling_triton``; design note engine-adapters.md section 0): ``bs`` requests, each a tree of N
nodes in the first-child / next-sibling encoding, node 0 the root (the last verified token):

* ``candidates int64 [bs, N]``: node j's token; ``retrive_index int64 [bs, N]``: node j's slot in ``predicts``
  (b * N + j in SGLang); ``retrive_next_token`` / ``retrive_next_sibling int64 [bs, N]``: first child / next
  sibling, -1 ends;
* ``uniform_samples float32 [bs, N]`` (chains: ``[bs, N - 1]``): node j's coin, which verifies j's children;
  ``uniform_samples_for_final_sampling float32 [bs]``: the draw where the walk stops;
* ``target_probs float32 [bs, N, V]``: row j = p_j, the target after node j; ``draft_probs float32 [bs, N, V]``
  (chains ``[bs, N - 1, V]``): row j = q_j, the law node j's children were drawn from;
* outputs, written in place: ``predicts int32 [bs * N]`` at the path nodes' slots (the accepted child's token, the
  last one the final draw), ``accept_index int32 [bs, S]`` (root then the accepted nodes' slots; S - 1 = the most
  drafts accepted), ``accept_token_num int32 [bs]``; every other entry keeps the caller's value.

``method=`` picks the rule at every node (keyword only): ``"rrs"`` recursive rejection over the children in sibling
order (SGLang's chain rule at one-child nodes, bit for bit), ``"optimal"`` otlp's optimal rule (alpha*(p_j, q_j, m)
at a node with m i.i.d. children; the same decisions as ``"rrs"`` at one-child nodes), ``"rrs_wor"`` (children
drawn without replacement), ``"optimal_wor"`` (alpha* for children drawn without replacement from a draft filtered
to its top-k tokens, :mod:`otlp.verifiers.optimal_wor`: solved on the host for CPU tensors, on the device with
static shapes elsewhere), and ``"target_only"``
SGLang's q-free tree rule with its thresholds.

Swap-in, in the module of the SGLang release that imported the kernel (``from sgl_kernel import ...``; e.g.
``sglang.srt.speculative.eagle_utils``), or on ``sgl_kernel`` before sglang is imported::

    import sglang.srt.speculative.eagle_utils as eu
    eu.tree_speculative_sampling_target_only = otlp.engines.sglang.tree_speculative_sampling_target_only
"""

from __future__ import annotations

from otlp.core.errors import InputError
from otlp.engines import _common as C

TREE_METHODS = (*C.METHODS, "target_only")


def tree_speculative_sampling_target_only(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,  # noqa: ANN001
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,  # noqa: ANN001
    threshold_single: float = 1.0, threshold_acc: float = 1.0, deterministic: bool = True, *,
    max_children: int | None = None, validate: bool | None = None,
) -> None:
    """SGLang's target-only tree rule, bit for bit for the same uniforms (the drop-in for ``sgl_kernel``'s op):
    :func:`tree_speculative_sampling` with ``method="target_only"``. ``draft_probs`` is SGLang's zeroed scratch
    buffer and is written as SGLang writes it (a rejected child's p at its token)."""
    tree_speculative_sampling(
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,
        threshold_single, threshold_acc, deterministic, method="target_only", max_children=max_children,
        validate=validate)


def tree_speculative_sampling(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,  # noqa: ANN001
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,  # noqa: ANN001
    threshold_single: float = 1.0, threshold_acc: float = 1.0, deterministic: bool = True, *,
    method: str = "rrs", max_children: int | None = None, validate: bool | None = None,
) -> None:
    """Verify trees with real draft probabilities (the module docstring's contract), writing SGLang's outputs in
    place.

    Walk: from the root, node j's children c_1..c_m (sibling order) are verified with ``method`` and the coin
    ``uniform_samples[b, j]``; an accepted child c_k writes ``predicts[retrive_index[b, j]] = candidates[b, c_k]``
    and ``accept_index[b, k'] = retrive_index[b, c_k]`` and the walk continues at c_k; a rejection writes the
    rule's residual draw (final uniform) at j's slot and stops; a leaf, or S - 1 accepted drafts, writes a draw from
    p_j. ``draft_probs`` is read only (rows of childless nodes are never read), except with
    ``method="target_only"``, which ignores q and writes SGLang's scratch (``threshold_single`` and
    ``threshold_acc`` are honoured by that method only). Duplicate child tokens are allowed for the i.i.d. rules.

    ``max_children`` (keyword): the most children of a node; None reads the links (a host read per sibling level
    on a device); pass it to keep the call free of host synchronisation. ``validate``: check the values
    (probability rows, ids, links; default :func:`otlp.verifiers.base.validation_enabled`)."""
    import torch

    C.check_method(method, TREE_METHODS)
    bs, N, V, S = _check_tree(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                              retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                              draft_probs, method, C.validating(validate))
    if bs == 0:
        return
    M = C.max_children(retrive_next_token, retrive_next_sibling) if max_children is None else int(max_children)
    finals = uniform_samples_for_final_sampling

    if method == "target_only":
        thr_acc = max(float(threshold_acc), 1e-9)  # SGLang's safe_threshold_acc

        def rule(node, p_rows, q_rows, tokens, widths, coin, alive):  # noqa: ANN001, ANN202
            return _target_only_node(node, p_rows, tokens, widths, coin, alive, finals, draft_probs,
                                     float(threshold_single), thr_acc)
    else:
        def rule(node, p_rows, q_rows, tokens, widths, coin, alive):  # noqa: ANN001, ANN202, ARG001
            return C.node_verify(method, p_rows, q_rows, tokens, widths, coin, finals)

    with torch.no_grad():
        path, accepted, written = C.walk(target_probs, draft_probs, candidates, retrive_next_token,
                                         retrive_next_sibling, uniform_samples, finals, S, M, rule)
        C.write_outputs(predicts, accept_index, accept_token_num, retrive_index, path, accepted, written)


def _target_only_node(node, p_rows, tokens, widths, coin, alive, finals, scratch, threshold_single: float,
                      threshold_acc: float):  # noqa: ANN001, ANN202
    """SGLang's target-only rule at one node per request: children in sibling order, ``acc += p_j(child)``, accept
    the first with ``coin <= acc / threshold_acc or p_j(child) >= threshold_single``; each rejected child writes
    ``scratch[b, j, tok] = p_j(tok)`` (in place, live requests only); the walk's stopping draw is from
    ``relu(p_j - scratch[b, j])`` at the final uniform. Returns ``(slot, token)`` as :func:`.._common.node_verify`."""
    import torch

    bs, M = tokens.shape
    b = torch.arange(bs, device=tokens.device)
    row = C.rows_at(scratch, node).clone()  # [bs, V] the scratch row of the current node
    acc = torch.zeros(bs, dtype=p_rows.dtype, device=p_rows.device)
    slot = torch.full((bs,), -1, dtype=torch.long, device=tokens.device)
    for k in range(M):  # sibling slots, in order (SGLang's loop), not requests
        valid = (k < widths) & (slot < 0)
        t = tokens[:, k:k + 1]
        pk = p_rows.gather(1, t)[:, 0]
        acc = torch.where(valid, acc + pk, acc)
        ok = valid & ((coin <= acc / threshold_acc) | (pk >= threshold_single))
        slot = torch.where(ok, k, slot)
        reject = valid & ~ok
        row.scatter_(1, t, torch.where(reject, pk, row.gather(1, t)[:, 0].to(pk.dtype)).to(row.dtype)[:, None])
    live = alive & (node < scratch.shape[1])
    scratch[b, node.clamp(max=scratch.shape[1] - 1)] = torch.where(live[:, None], row,
                                                                    C.rows_at(scratch, node))
    token = C.draw((p_rows - row).clamp_(min=0), finals)
    return slot, token


def chain_speculative_sampling(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,  # noqa: ANN001
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,  # noqa: ANN001
    threshold_single: float = 1.0, threshold_acc: float = 1.0, deterministic: bool = True, *,
    method: str = "rrs", validate: bool | None = None,
) -> None:
    """SGLang's chain contract (``chain_speculative_sampling_triton``): ``candidates[b, 0]`` the root,
    ``candidates[b, s]`` the s-th draft, ``draft_probs [bs, N - 1, V]`` row s - 1 = q of draft s,
    ``uniform_samples [bs, N - 1]``, ``target_probs [bs, N, V]``; the links and thresholds are unused, as there.
    ``method="rrs"`` is SGLang's rule bit for bit: draft s accepted iff ``coin[s - 1] q < p`` (SpS, Leviathan et
    al. 2023 Alg. 1), the first rejection writes a draw from ``relu(p - q)`` of its row, p_{N-1} after N - 1
    acceptances. ``"optimal"`` takes otlp's one-draft rule at every position (the same law; the same decisions for
    the same coins up to float rounding of the product). Outputs as :func:`tree_speculative_sampling`, with
    ``accept_index [bs, N]``. Vectorised over every position at once."""
    import torch

    C.check_method(method, ("rrs", "optimal"))
    bs, N, V = _check_chain(predicts, accept_index, accept_token_num, candidates, retrive_index, uniform_samples,
                            uniform_samples_for_final_sampling, target_probs, draft_probs, C.validating(validate))
    if bs == 0:
        return
    n = N - 1
    dev = candidates.device
    finals = uniform_samples_for_final_sampling
    with torch.no_grad():
        drafts = candidates[:, 1:]  # [bs, n]
        lengths = torch.full((bs,), n, dtype=torch.long, device=dev)
        if method == "rrs":
            p_x = target_probs[:, :n].gather(2, drafts[:, :, None])[:, :, 0]  # [bs, n]
            q_x = draft_probs.gather(2, drafts[:, :, None])[:, :, 0]
            pos = C.first_rejection(uniform_samples * q_x < p_x, lengths)  # [bs]
            last = C.chain_stop(target_probs, draft_probs, pos, finals)
        else:
            pos, last = C.chain_optimal_stop(target_probs, draft_probs, drafts, uniform_samples, finals, finals)
        k = torch.arange(N, device=dev)
        path = torch.where(k[None, :] <= pos[:, None], k[None, :], -1).expand(bs, N)
        written = torch.where(k[None, :] < pos[:, None], candidates.gather(1, (k + 1).clamp(max=N - 1)[None, :]
                                                                          .expand(bs, N)), last[:, None])
        C.write_outputs(predicts, accept_index, accept_token_num, retrive_index, path, pos, written)


# ----------------------------------------------------------------------------------------------------------------------
# argument checks (shapes, dtypes, devices always; values only with validation on)
# ----------------------------------------------------------------------------------------------------------------------


def _check_outputs(predicts, accept_index, accept_token_num, bs: int, N: int, dev) -> None:  # noqa: ANN001
    C.check_tensor("predicts", predicts, ndim=1, dtypes=C.INT_DTYPES, device=dev)
    C.check_tensor("accept_index", accept_index, ndim=2, dtypes=C.INT_DTYPES, device=dev)
    C.check_tensor("accept_token_num", accept_token_num, shape=(bs,), dtypes=C.INT_DTYPES, device=dev)
    if accept_index.shape[0] != bs or not 1 <= accept_index.shape[1] <= max(N, 1):
        raise InputError(f"accept_index must have shape [bs, S] with bs = {bs} and 1 <= S <= N = {N}, got "
                         f"{list(accept_index.shape)}")
    if predicts.shape[0] < bs * N:
        raise InputError(f"predicts must hold at least bs * N = {bs * N} entries, got {predicts.shape[0]}")


def _check_tree(predicts, accept_index, accept_token_num, candidates, retrive_index, next_token, next_sibling,
                uniform_samples, finals, target_probs, draft_probs, method: str, values: bool):  # noqa: ANN001, ANN202
    """(bs, N, V, S) after the checks; an InputError names the first bad argument."""
    C.check_tensor("target_probs", target_probs, ndim=3, floating=True)
    bs, N, V = target_probs.shape
    dev = target_probs.device
    for name, t in (("candidates", candidates), ("retrive_index", retrive_index),
                    ("retrive_next_token", next_token), ("retrive_next_sibling", next_sibling)):
        C.check_tensor(name, t, shape=(bs, N), dtypes=C.INT_DTYPES, device=dev)
    C.check_tensor("draft_probs", draft_probs, ndim=3, floating=True, device=dev)
    if draft_probs.shape[0] != bs or draft_probs.shape[1] not in (N, N - 1) or draft_probs.shape[2] != V:
        raise InputError(f"draft_probs must have shape [{bs}, {N}, {V}] (or [{bs}, {N - 1}, {V}] for a chain), got "
                         f"{list(draft_probs.shape)}")
    C.check_tensor("uniform_samples", uniform_samples, ndim=2, floating=True, device=dev)
    if uniform_samples.shape[0] != bs or uniform_samples.shape[1] not in (N, N - 1) or uniform_samples.shape[1] < 1:
        raise InputError(f"uniform_samples must have shape [{bs}, {N}] (or [{bs}, {N - 1}] for a chain), got "
                         f"{list(uniform_samples.shape)}")
    C.check_tensor("uniform_samples_for_final_sampling", finals, shape=(bs,), floating=True, device=dev)
    _check_outputs(predicts, accept_index, accept_token_num, bs, N, dev)
    if values and bs:
        C.check_rows("target_probs", target_probs)
        if method != "target_only":
            _check_draft_rows(draft_probs, next_token)
        C.check_ids("candidates", candidates, V)
        C.check_ids("retrive_index", retrive_index, predicts.shape[0])
        C.check_ids("retrive_next_token", next_token, N, allow=-1)
        C.check_ids("retrive_next_sibling", next_sibling, N, allow=-1)
        C.check_unit("uniform_samples", uniform_samples)
        C.check_unit("uniform_samples_for_final_sampling", finals)
    return bs, N, V, accept_index.shape[1]


def _check_draft_rows(draft_probs, next_token) -> None:  # noqa: ANN001
    """The draft rows of nodes with children are probability rows (childless nodes' rows are never read)."""
    rows = next_token[:, :draft_probs.shape[1]] >= 0  # [bs, Nq]
    if bool(rows.any()):
        C.check_rows("draft_probs", draft_probs[rows])


def _check_chain(predicts, accept_index, accept_token_num, candidates, retrive_index, uniform_samples, finals,
                 target_probs, draft_probs, values: bool):  # noqa: ANN001, ANN202
    C.check_tensor("target_probs", target_probs, ndim=3, floating=True)
    bs, N, V = target_probs.shape
    dev = target_probs.device
    if N < 1:
        raise InputError(f"target_probs must have N >= 1 rows per request (the root), got {list(target_probs.shape)}")
    C.check_tensor("candidates", candidates, shape=(bs, N), dtypes=C.INT_DTYPES, device=dev)
    C.check_tensor("retrive_index", retrive_index, shape=(bs, N), dtypes=C.INT_DTYPES, device=dev)
    C.check_tensor("draft_probs", draft_probs, shape=(bs, N - 1, V), floating=True, device=dev)
    C.check_tensor("uniform_samples", uniform_samples, shape=(bs, N - 1), floating=True, device=dev)
    C.check_tensor("uniform_samples_for_final_sampling", finals, shape=(bs,), floating=True, device=dev)
    _check_outputs(predicts, accept_index, accept_token_num, bs, N, dev)
    if accept_index.shape[1] != N:
        raise InputError(f"accept_index must have shape [{bs}, {N}] for a chain, got {list(accept_index.shape)}")
    if values and bs:
        C.check_rows("target_probs", target_probs)
        C.check_rows("draft_probs", draft_probs)
        C.check_ids("candidates", candidates, V)
        C.check_ids("retrive_index", retrive_index, predicts.shape[0])
        C.check_unit("uniform_samples", uniform_samples)
        C.check_unit("uniform_samples_for_final_sampling", finals)
    return bs, N, V
