"""The pieces the engine adapters share: argument checks that name the engine's argument, the per-node rules with
one coin per node and one final uniform per request, the chain's first rejection, the tree walk over SGLang's
first-child / next-sibling encoding, and the in-place writes of SGLang's outputs.

Terms (the engines'): a **chain** verifies drafts one after the other, each a one-child node; a **tree** node j has
children c_1..c_m (sibling order) drawn from q_j, the law at j; p_j is the target's law after j. A node's **coin**
decides its outcome (child k accepted, or reject); the request's **final uniform** draws the token where the walk
stops: the residual after a rejection, or the bonus (a draw from p) at a leaf or after the most accepted drafts.
A request stops at most once, so the final uniform is never reused (design note engine-adapters.md section 1).

Nothing here imports an engine; every function is torch on the tensors' device, vectorised over the batch (the tree
walk loops over depth and over sibling slots, never over requests). With validation off
(:func:`otlp.verifiers.base.validation`, ``OTLP_VALIDATE=0``) nothing reads a tensor's values.
"""

from __future__ import annotations

from otlp.core import xp as X
from otlp.core.errors import InputError
from otlp.verifiers.base import _row_ok, sum_tolerance, validation_enabled

#: the node rules every adapter takes (``method=``): the engine's own single-draft / recursive rejection rule, otlp's
#: optimal rule (alpha* at every node), recursive rejection without replacement, otlp's optimal rule for children
#: drawn without replacement (filtered drafts: :mod:`otlp.verifiers.optimal_wor`).
METHODS = ("rrs", "optimal", "rrs_wor", "optimal_wor")

INT_DTYPES = ("int32", "int64")


def check_method(method: object, allowed: tuple[str, ...] = METHODS) -> str:
    """``method`` if it is one of ``allowed``; a one-line InputError otherwise."""
    if method not in allowed:
        raise InputError(f"method must be one of {', '.join(map(repr, allowed))}, got {method!r}")
    return method  # type: ignore[return-value]


def check_tensor(name: str, t: object, *, ndim: int | None = None, shape: tuple | None = None,
                 dtypes: tuple[str, ...] | None = None, floating: bool = False, device=None):  # noqa: ANN001, ANN201
    """Shape / dtype / device of one engine argument (no value is read); a one-line InputError naming ``name``."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.ndim != ndim:
        raise InputError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise InputError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")
    if dtypes is not None and str(t.dtype).removeprefix("torch.") not in dtypes:
        raise InputError(f"{name} must have dtype {' or '.join(dtypes)}, got {t.dtype}")
    if floating and not t.is_floating_point():
        raise InputError(f"{name} must be a floating point tensor, got {t.dtype}")
    if device is not None and t.device != device:
        raise InputError(f"{name} must be on {device} (the target's device), got {t.device}")
    return t


def validating(validate: bool | None = None) -> bool:
    """Whether to read the inputs' values: ``validate``, else :func:`otlp.verifiers.base.validation_enabled`."""
    return validation_enabled() if validate is None else bool(validate)


def check_rows(name: str, x) -> None:  # noqa: ANN001 - a float tensor [..., V]
    """Every row of ``x`` finite, >= 0 and summing to 1 within the dtype's rounding (reads the values: only with
    validation on); the InputError names ``name`` and the first bad row."""
    import torch

    V = x.shape[-1]
    if x.numel() == 0:
        return
    ok = _row_ok(x, V)
    if bool(ok.all()):
        return
    row = tuple(int(i) for i in torch.nonzero(~ok)[0])
    total = float(x[row].sum(dtype=torch.float64))
    raise InputError(f"{name}[{', '.join(map(str, row))}] is not a probability row (sum {total:.9g}, finite and >= 0 "
                     f"expected, sum within {sum_tolerance(x.dtype, V):.2g} of 1)")


def check_ids(name: str, ids, V: int, *, allow: int | None = None) -> None:  # noqa: ANN001 - an integer tensor
    """Every entry of ``ids`` a token id in [0, V) (or equal to ``allow``, e.g. -1 for an absent link)."""
    if ids.numel() == 0:
        return
    bad = (ids < 0) | (ids >= V)
    if allow is not None:
        bad &= ids != allow
    if bool(bad.any()):
        raise InputError(f"{name} must hold ids in [0, {V}){'' if allow is None else f' or {allow}'}, got values in "
                         f"[{int(ids.min())}, {int(ids.max())}]")


def check_unit(name: str, u) -> None:  # noqa: ANN001 - a float tensor
    """Every entry of ``u`` in [0, 1] (the engines' uniforms; reads the values)."""
    if u.numel() and not bool(((u >= 0) & (u <= 1)).all()):
        raise InputError(f"{name} must hold uniforms in [0, 1], got values in [{float(u.min())}, {float(u.max())}]")


# ----------------------------------------------------------------------------------------------------------------------
# draws and node rules
# ----------------------------------------------------------------------------------------------------------------------


def draw(weights, u):  # noqa: ANN001, ANN201 - [R, V] >= 0 unnormalised, [R] -> [R] int64
    """The engines' inverse CDF: the first token whose running mass exceeds ``u * total`` (a token of positive weight;
    a product rounded up to the total takes the last token of positive weight, as FlashInfer's and SGLang's
    ``last_valid`` fallback), by :func:`otlp.core.xp.inverse_cdf`. ``u`` is cast to the weights' dtype, as the kernels
    form ``u * total`` in float32."""
    return X.inverse_cdf(weights, u.to(weights.dtype)[:, None])


def draw_where(mask, rows, u):  # noqa: ANN001, ANN201 - [R] bool, [R, V], [R] -> [R] int64
    """:func:`draw` on the rows where ``mask`` (0 elsewhere). On the host, where there is no device to wait for, only
    those rows are read; on a device every row is drawn (static shapes, no synchronisation)."""
    import torch

    if rows.device.type != "cpu":
        return draw(rows, u)
    out = torch.zeros(rows.shape[0], dtype=torch.long)
    idx = mask.nonzero()[:, 0]
    if idx.numel():
        out[idx] = draw(rows.index_select(0, idx), u[idx])
    return out


def residual(p_rows, q_rows, u, bonus=None):  # noqa: ANN001, ANN201 - [R, V], [R, V], [R], [R] bool
    """The token of a chain's stopping node: a draw from (p - q)^+ at ``u`` (SpS's residual, Leviathan et al. 2023
    Alg. 1), or from p itself on rows where ``bonus`` (every draft accepted: there is no draft law)."""
    scale = None if bonus is None else (~bonus)[:, None].to(p_rows.dtype)  # 0 on bonus rows: (p - 0 q)^+ = p
    return draw(X.positive_part(p_rows, q_rows, scale), u)  # into the thread's work array "residual"


def chain_stop(target_probs, draft_probs, pos, u):  # noqa: ANN001, ANN201 - [B, n+1, V], [B, n, V], [B], [B]
    """The token each request of a chain writes where it stops (SpS, Leviathan et al. 2023 Alg. 1): a draw at ``u``
    from ``(p_pos - q_pos)^+`` after a rejection at ``pos < n``, from ``p_n`` when all n drafts were accepted.
    On a device: the stopping rows gathered (static shapes). On the host, position by position (n + 1 at most,
    never per request): a position where at least half the requests stop is computed on its rows in place (views,
    no gather), the others on their gathered rows only."""
    import torch

    B, n1, V = target_probs.shape
    n = n1 - 1
    if target_probs.device.type != "cpu":
        q_rows = rows_at(draft_probs, pos, name="engine_q") if n else torch.zeros_like(target_probs[:, 0])
        return residual(rows_at(target_probs, pos, name="engine_p"), q_rows, u, bonus=pos == n)
    tokens = torch.zeros(B, dtype=torch.long)
    for j in range(n + 1):  # positions, not requests
        idx = (pos == j).nonzero()[:, 0]
        if not idx.numel():
            continue
        if 2 * idx.numel() >= B:  # the position's rows in place: no gather
            weights = target_probs[:, j] if j == n else X.positive_part(target_probs[:, j], draft_probs[:, j])
            tokens[idx] = draw(weights, u)[idx]
        else:
            p_rows = rows_at(target_probs, pos[idx], idx, name="engine_p")
            weights = p_rows if j == n else X.positive_part(p_rows, rows_at(draft_probs, pos[idx], idx,
                                                                             name="engine_q"))
            tokens[idx] = draw(weights, u[idx])
    return tokens


def static_wor(rows) -> bool:  # noqa: ANN001
    """Whether ``"optimal_wor"`` plans the rows on their device with static shapes (``backend="torch"``, on CUDA
    ``"auto"``: the Triton kernel's steps where it takes the rows; every row, one host sync to count the draft's
    support) rather than row groups on the host: on any device but the CPU."""
    return rows.device.type != "cpu"


def node_verify(method: str, p_rows, q_rows, tokens, widths, coin, final):  # noqa: ANN001, ANN201
    """One node per row: ``p_rows, q_rows [R, V]`` (p_j, q_j), its children's tokens ``tokens [R, M]`` (the first
    ``widths[r]`` valid, the rest padding), ``coin, final [R]``. Returns ``(slot [R] int64, token [R] int64)``:
    the accepted child's slot and token, or slot -1 and the token where the walk stops (the rule's residual draw, or
    a draw from p at a childless row), drawn with ``final``.

    ``"optimal"``: :func:`otlp.optimal.sampler.verify` with ``u = [coin, final]`` and ``widths`` (alpha*(p, q, m)
    at an m-child node; at one child the single-draft test ``coin q(x) < p(x)``); ``"optimal_wor"``:
    ``get("optimal_wor").sample`` on the rows with children (distinct children of a draft filtered to its top-k
    tokens, :mod:`otlp.verifiers.optimal_wor`: on the host row groups, elsewhere every row with static shapes,
    :func:`static_wor`); ``"rrs"`` / ``"rrs_wor"``:
    :func:`otlp.verifiers.rrs.verify_uniforms`."""
    import torch

    from otlp.verifiers.rrs import verify_uniforms

    leaf = widths == 0  # [R]
    if method in ("optimal", "optimal_wor"):
        u = torch.stack([coin.to(torch.float64), final.to(torch.float64)], dim=1)  # [R, 2]
    if method == "optimal":
        from otlp.optimal.sampler import verify

        masks = widths.clamp(min=1)
        if p_rows.device.type == "cpu":  # the host route reads the rows anyway: skip what no row needs
            if bool(leaf.any()):
                q_rows = torch.where(leaf[:, None], p_rows, q_rows)  # a childless row's q: any distribution
            if bool((masks == tokens.shape[1]).all()):
                masks = None  # every node has all M children: no per-width split
        else:
            q_rows = torch.where(leaf[:, None], p_rows, q_rows)
        tokens_out, slot = verify(p_rows, q_rows, tokens.long(), u, widths=masks)
        bonus = draw_where(leaf, p_rows, final)
        return torch.where(leaf, -1, slot), torch.where(leaf, bonus, tokens_out)
    if method == "optimal_wor":
        from otlp.verifiers import get

        if static_wor(p_rows):  # every row on the device: a childless row as one child, token 0 of q = that point
            V = p_rows.shape[1]
            point = (torch.arange(V, device=p_rows.device) == 0).to(q_rows.dtype)  # [V]
            q_rows = torch.where(leaf[:, None], point, q_rows)
            tokens = torch.cat([torch.where(leaf, 0, tokens[:, 0].long())[:, None], tokens[:, 1:].long()], 1)
            backend = "auto" if p_rows.device.type == "cuda" else "torch"  # (CUDA: the plan's Triton kernel)
            t, s = get("optimal_wor").sample(p_rows, q_rows, tokens, uniforms=u, widths=widths.clamp(min=1).long(),
                                             backend=backend)
            return torch.where(leaf, -1, s), torch.where(leaf, draw_where(leaf, p_rows, final), t)
        slot = torch.full_like(widths, -1, dtype=torch.int64)
        out = draw_where(leaf, p_rows, final)
        rows = (~leaf).nonzero()[:, 0]  # (a host read: the rule runs on the host anyway)
        if rows.numel():
            t, s = get("optimal_wor").sample(p_rows[rows], q_rows[rows], tokens[rows].long(), uniforms=u[rows],
                                             widths=widths[rows].long())
            out[rows], slot[rows] = t.to(out.device), s.to(slot.device)
        return slot, out
    # rrs / rrs_wor: a childless row's draft law is scaled by 0 (width 0: slot -1, the token drawn from p), so its
    # q row (SGLang's scratch for a leaf, never validated) is replaced: a NaN there made the draw leave the vocabulary.
    # One elementwise pass over [R, V] (no host read on a device); on the host only where some row is a leaf (its
    # index list taken as draw_where's and chain_stop's are)
    if p_rows.device.type != "cpu" or leaf.nonzero().numel():
        q_rows = torch.where(leaf[:, None], p_rows, q_rows)
    u = torch.stack([coin, final.to(coin.dtype)], dim=1)  # the coin in its own dtype: the engines' u q < p
    return verify_uniforms(p_rows, q_rows, tokens, u, widths, without_replacement=method == "rrs_wor")[::-1]


def chain_optimal(p_rows, q_rows, drafts, coins, finals):  # noqa: ANN001, ANN201 - [R, V], [R, V], [R], [R], [R]
    """otlp's optimal rule at every position of a chain at once (one-child nodes: ``coin q(x) < p(x)`` on the
    normalised rows, the residual in token order at ``final``; :func:`otlp.optimal.chains.single_draft`). Returns
    ``(accept [R] bool, token [R] int64)``: the token is the residual draw where the position rejects."""
    import torch

    from otlp.optimal.sampler import verify

    u = torch.stack([coins.to(torch.float64), finals.to(torch.float64)], dim=1)  # [R, 2]
    tokens, index = verify(p_rows, q_rows, drafts.long()[:, None], u)
    return index >= 0, tokens


def chain_optimal_stop(target_probs, draft_probs, drafts, coins, reject_finals, bonus_finals):  # noqa: ANN001, ANN201
    """otlp's optimal rule along the chains of an engine's layout (``target_probs [B, n + 1, V]``, ``draft_probs
    [B, n, V]``, ``drafts, coins [B, n]``; :func:`chain_optimal` at each position): ``(pos [B] int64, last [B]
    int64)``, the number of leading accepted drafts and the token written at ``pos``, the residual drawn with
    ``reject_finals [B]`` after a rejection, a draw from p_n with ``bonus_finals [B]`` after n acceptances.

    On a device every position at once (static shapes; the positions' rows gathered into ``[B n, V]``). On the host,
    position by position (n at most, never per request) on the requests still verifying: a position where at least
    half of them are is verified on its rows in place (a strided view, read by the C kernels without a copy,
    :func:`otlp.backend.native.rows_in_place`), the others on their gathered rows only. The same tokens either way: the
    rule is row by row."""
    import torch

    B, n1, V = target_probs.shape
    n = n1 - 1
    dev = target_probs.device
    if dev.type != "cpu":
        pos = torch.zeros(B, dtype=torch.long, device=dev)
        rejected = pos
        if n:
            accept, tokens = chain_optimal(target_probs[:, :n].reshape(B * n, V), draft_probs.reshape(B * n, V),
                                           drafts.reshape(-1), coins.reshape(-1),
                                           reject_finals[:, None].expand(B, n).reshape(-1))
            pos = first_rejection(accept.reshape(B, n), torch.full((B,), n, dtype=torch.long, device=dev))
            rejected = tokens.reshape(B, n).gather(1, pos.clamp(max=n - 1)[:, None])[:, 0]
        bonus = draw_where(pos == n, target_probs[:, n], bonus_finals)
        return pos, torch.where(pos == n, bonus, rejected)
    pos = torch.full((B,), n, dtype=torch.long)
    last = torch.zeros(B, dtype=torch.long)
    alive = torch.arange(B)  # the requests that accepted every position so far
    for j in range(n):  # positions, not requests
        if not alive.numel():
            break
        if 2 * alive.numel() >= B:  # the position's rows in place
            accept, tokens = chain_optimal(target_probs[:, j], draft_probs[:, j], drafts[:, j], coins[:, j],
                                           reject_finals)
            accept, tokens = accept[alive], tokens[alive]
        else:
            at = torch.full_like(alive, j)
            accept, tokens = chain_optimal(rows_at(target_probs, at, alive, name="engine_p"),
                                           rows_at(draft_probs, at, alive, name="engine_q"), drafts[alive, j],
                                           coins[alive, j], reject_finals[alive])
        stop = alive[~accept]
        pos[stop] = j
        last[stop] = tokens[~accept]
        alive = alive[accept]
    if alive.numel():  # every draft accepted: the bonus, a draw from p_n
        last[alive] = draw(rows_at(target_probs, torch.full_like(alive, n), alive, name="engine_p"),
                           bonus_finals[alive])
    return pos, last


def first_rejection(accept, lengths):  # noqa: ANN001, ANN201 - [B, K] bool, [B] int64
    """The number of leading accepted drafts of each row, at most ``lengths`` (positions past a row's length are
    padding): ``[B]`` int64."""
    import torch

    K = accept.shape[1]
    j = torch.arange(K, device=accept.device)
    stop = ~accept | (j[None, :] >= lengths[:, None])  # [B, K]
    return torch.where(stop, j[None, :], K).amin(dim=1).clamp(max=lengths) if K else lengths.clone()


# ----------------------------------------------------------------------------------------------------------------------
# trees in SGLang's first-child / next-sibling encoding
# ----------------------------------------------------------------------------------------------------------------------


def max_children(next_token, next_sibling) -> int:  # noqa: ANN001 - [bs, N] int64
    """The most children of any node (reads the links: on a device one host read per sibling level; pass
    ``max_children=`` to the adapters to avoid it). 0 for a tree of roots only."""
    import torch

    c = next_token
    m = 0
    while bool((c >= 0).any()):
        m += 1
        c = torch.where(c >= 0, next_sibling.gather(1, c.clamp(min=0)), -1)
    return m


def children(node, next_token, next_sibling, M: int):  # noqa: ANN001, ANN201 - [bs], [bs, N], [bs, N]
    """The children of ``node [bs]`` in sibling order, ``[bs, M]`` node ids padded with -1 (a sibling chain longer than
    M is cut: M = :func:`max_children` keeps every child)."""
    import torch

    out = []
    c = next_token.gather(1, node[:, None])[:, 0]
    for _ in range(M):  # sibling slots, not requests
        out.append(c)
        c = torch.where(c >= 0, next_sibling.gather(1, c.clamp(min=0)[:, None])[:, 0], -1)
    return torch.stack(out, dim=1) if out else node.new_empty((node.shape[0], 0))


def rows_at(x, node, b=None, name: str | None = None):  # noqa: ANN001, ANN201 - [bs, N, V], [R], [R] -> [R, V]
    """``x[b, node]`` for the requests ``b`` (default all, ``node [bs]``), node clamped to x's rows (SGLang's chains
    pass N - 1 draft rows, and a leaf's is unused). A copy of R rows by ``index_select`` (advanced indexing of
    ``[bs, N, V]`` is about 5x slower), into this thread's work array ``name`` on the host when given
    (:mod:`otlp.backend.scratch`: no fresh pages per call; valid until the next request of ``name``)."""
    import torch

    from otlp.backend import scratch

    bs, N = x.shape[:2]
    node = node.clamp(max=N - 1)
    b = torch.arange(bs, device=x.device) if b is None else b
    if x.stride(0) == N * x.stride(1) and x.stride(2) == 1 and x.stride(1) == x.shape[2]:  # contiguous rows
        out = None if name is None or not b.shape[0] else scratch.like(name, x[0, 0].expand(b.shape[0], x.shape[2]))
        return torch.index_select(x.reshape(bs * N, x.shape[2]), 0, b * N + node, out=out)
    return x[b, node]


def walk(target_probs, draft_probs, candidates, next_token, next_sibling, coins, finals, depth: int, M: int,
         rule):  # noqa: ANN001, ANN201
    """Walk each request's tree from the root, verifying the current node's children with ``rule`` (see
    :func:`node_verify`; ``rule(node, p_rows, q_rows, tokens, widths, coin, alive) -> (slot, token)``), at most
    ``depth - 1`` accepted drafts. Returns ``(path [bs, depth] int64 node ids, -1 past the end; accepted [bs]
    int64; tokens [bs, depth] int64, the token written at each path node)``: the accepted child's token at every
    path node but the last, and there the rule's stopping token or, after ``depth - 1`` acceptances, a bonus draw
    from p at ``finals``."""
    import torch

    bs = candidates.shape[0]
    dev = candidates.device
    node = torch.zeros(bs, dtype=torch.long, device=dev)
    alive = torch.ones(bs, dtype=torch.bool, device=dev)
    accepted = torch.zeros(bs, dtype=torch.long, device=dev)
    path = torch.full((bs, depth), -1, dtype=torch.long, device=dev)
    path[:, 0] = 0
    written = torch.full((bs, depth), -1, dtype=torch.long, device=dev)
    for d in range(depth - 1):  # depth, not requests
        kids = children(node, next_token, next_sibling, M)  # [bs, M]
        widths = (kids >= 0).sum(dim=1)
        tokens = candidates.gather(1, kids.clamp(min=0))
        coin = coins.gather(1, node.clamp(max=coins.shape[1] - 1)[:, None])[:, 0]
        if d == 0:  # every request at its root: the rows are views, no copy
            p_rows, q_rows = target_probs[:, 0], draft_probs[:, 0]
        else:
            p_rows, q_rows = rows_at(target_probs, node, name="engine_p"), rows_at(draft_probs, node, name="engine_q")
        slot, token = rule(node, p_rows, q_rows, tokens, widths, coin, alive)
        take = alive & (slot >= 0)
        child = kids.gather(1, slot.clamp(min=0)[:, None])[:, 0]
        written[:, d] = torch.where(alive, torch.where(take, tokens.gather(1, slot.clamp(min=0)[:, None])[:, 0],
                                                       token), -1)
        path[:, d + 1] = torch.where(take, child, -1)
        accepted += take.long()
        alive = take
        node = torch.where(take, child, node)  # (no early exit: that would read alive on the host)
    # every draft of the path accepted: a draw from p at the last node (on the host only for those requests)
    if target_probs.device.type == "cpu":
        bonus = torch.zeros(bs, dtype=torch.long)
        idx = alive.nonzero()[:, 0]
        if idx.numel():
            bonus[idx] = draw(rows_at(target_probs, node[idx], idx, name="engine_p"), finals[idx])
    else:
        bonus = draw(rows_at(target_probs, node), finals)
    written[:, depth - 1] = torch.where(alive, bonus, -1)
    return path, accepted, written


def write_outputs(predicts, accept_index, accept_token_num, retrive_index, path, accepted, written) -> None:  # noqa: ANN001
    """SGLang's writes, in place: ``predicts[retrive_index[b, path[b, k]]] = written[b, k]`` for k <= accepted[b],
    ``accept_index[b, k] = retrive_index[b, path[b, k]]`` for k <= accepted[b], ``accept_token_num[b] =
    accepted[b]``; every other entry keeps the caller's value. Vectorised: the entries a row does not own are
    pointed at its root's slot with the root's value (identical duplicate writes)."""
    import torch

    S = path.shape[1]
    k = torch.arange(S, device=path.device)
    on = k[None, :] <= accepted[:, None]  # [bs, S]
    slots = retrive_index.gather(1, path.clamp(min=0))  # [bs, S]
    # the token written at path node k: written[b, k] (the walk leaves the accepted child's token there)
    root_slot, root_value = slots[:, :1], written[:, :1]
    index = torch.where(on, slots, root_slot).reshape(-1)
    values = torch.where(on, written, root_value).reshape(-1)
    predicts.index_put_((index,), values.to(predicts.dtype))
    width = min(S, accept_index.shape[1])
    accept_index[:, :width] = torch.where(on[:, :width], slots[:, :width].to(accept_index.dtype),
                                          accept_index[:, :width])
    accept_token_num.copy_(accepted.to(accept_token_num.dtype))
