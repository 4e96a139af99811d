"""The decode loop's verification step through a serving engine's tree contract: SGLang's first-child / next-sibling
encoding, verified by :func:`otlp.engines.sglang.tree_speculative_sampling` (``otlp decode --engine sglang``).

The loop's step (:mod:`otlp.decode.loop`) drafts n paths of L tokens, ``drafts [A, n, L]``, and walks them merged:
at depth j the node is the set of paths whose first j tokens were emitted, its children are those paths' j-th
tokens in path order (a multiset: i.i.d. paths may repeat a token), and an accepted token continues into every path
that carries it. The encoding below expresses exactly that walk, node for node:

* node 0 is the root (the context); node ``1 + j n + i`` is path i's token at depth j (``candidates``);
* the root's children are the n depth-0 nodes; node (i, j)'s children are the depth-(j + 1) nodes of the paths that
  share path i's first j + 1 tokens, in path order, so every node of a repeated token (siblings with equal tokens,
  which the encoding allows) points at the SAME child list (``retrive_next_token`` of each is the group's first
  node): whichever of the equal siblings a rule accepts, the walk continues into all the paths that carry the
  token, as the loop's does. The child lists partition the n paths at each depth, so N = 1 + n L nodes, as many as
  the loop drafts;
* node (i, j)'s target row is p after path i's first j + 1 tokens, its draft row the law its children were drawn
  from (the depth-(L - 1) nodes have no children and a zero row); equal siblings share that prefix, and every node
  takes the rows of the prefix's first path (``p_all[:, first, j + 1]``, ``q_all[:, first, j + 1]``), the rows the
  loop's own walk reads, so the two agree even where a model's duplicated branches differ in the last bits.

Randomness: one coin per node and one final uniform per request (the engines'). :func:`step_uniforms` draws coins
``[A, n, L]`` (the coin of the node at depth j whose first path is i is ``coins[:, i, j]``) and ``finals [A]``;
:func:`sglang_step` hands each node its group's coin, and the loop's own walk with the same uniforms
(``decode(..., uniforms=True)``) gives the same tokens (tests/decode/test_engine_step.py). With the rule exact at
every node the emitted stream has the target's law either way (the loop's module docstring).
"""

from __future__ import annotations

#: the rules the SGLang adapter verifies a node with that the loop also drives (otlp.engines.sglang's methods)
ENGINE_VERIFIERS = ("optimal", "rrs", "rrs_wor", "optimal_wor")
ENGINES = ("sglang",)


def step_uniforms(A: int, n: int, L: int, generator, device):  # noqa: ANN001, ANN201 - torch.Generator, device
    """``(coins float64 [A, n, L], finals float64 [A])`` from ``generator`` on ``device``: the coin of the node at
    depth j whose first path is i, and each request's final uniform (the residual where its walk stops, or the
    bonus)."""
    import torch

    coins = torch.rand((A, n, L), generator=generator, device=device, dtype=torch.float64)
    finals = torch.rand((A,), generator=generator, device=device, dtype=torch.float64)
    return coins, finals


def encode(drafts):  # noqa: ANN001, ANN201 - int64 [A, n, L]
    """The loop's merged tree in SGLang's encoding (module docstring): ``(candidates, retrive_next_token,
    retrive_next_sibling)``, each int64 ``[A, N]`` with N = 1 + n L, and ``first [A, n, L + 1]``, the first path
    sharing path i's first j tokens (``first[:, i, 0] = 0``)."""
    import torch

    A, n, L = drafts.shape
    dev = drafts.device
    N = 1 + n * L
    same = drafts[:, :, None, :] == drafts[:, None, :, :]  # [A, n, n, L]: paths i, i' agree at depth j
    ones = torch.ones((A, n, n, 1), dtype=torch.bool, device=dev)
    shared = torch.cat([ones, same.to(torch.int8).cumprod(dim=3).bool()], dim=3)  # [A, n, n, L + 1] prefixes of j
    i = torch.arange(n, device=dev)
    first = shared.to(torch.int8).argmax(dim=2)  # [A, n, L + 1]: the least i' sharing the prefix (i' = i does)
    later = shared & (i[None, None, :, None] > i[None, :, None, None])  # i' > i with the same prefix
    after = torch.where(later, i[None, None, :, None], n).amin(dim=2)  # [A, n, L + 1]: next path of i's group, or n
    node = 1 + torch.arange(L, device=dev)[None, :] * n + i[:, None]  # [n, L] node id of (i, j)
    candidates = torch.zeros((A, N), dtype=torch.long, device=dev)
    candidates[:, 1:] = drafts.transpose(1, 2).reshape(A, n * L)  # node 1 + j n + i = drafts[:, i, j]
    next_token = torch.full((A, N), -1, dtype=torch.long, device=dev)
    next_token[:, 0] = 1  # the root's first child: path 0 at depth 0
    if L > 1:  # node (i, j) -> the first node of its group at depth j + 1
        child = 1 + torch.arange(1, L, device=dev)[None, None, :] * n + first[:, :, 1:L]  # [A, n, L - 1]
        next_token[:, node[:, :L - 1].reshape(-1)] = child.reshape(A, -1)
    nxt = after[:, :, :L]  # [A, n, L]: next sibling path at depth j (group of the first j tokens)
    sibling = torch.where(nxt < n, 1 + torch.arange(L, device=dev)[None, None, :] * n + nxt, -1)
    next_sibling = torch.full((A, N), -1, dtype=torch.long, device=dev)
    next_sibling[:, node.reshape(-1)] = sibling.reshape(A, -1)
    return candidates, next_token, next_sibling, first


def sglang_step(p_all, q_all, drafts, coins, finals, method: str):  # noqa: ANN001, ANN201
    """One verification step of the decode loop through :func:`otlp.engines.sglang.tree_speculative_sampling`:
    ``p_all [A, n, L + 1, V]`` (the target after each path's first j tokens), ``q_all [A, n, L, V]`` (the draft law
    of path i's depth-j token), ``drafts int64 [A, n, L]``, ``coins [A, n, L]`` and ``finals [A]``
    (:func:`step_uniforms`), ``method`` one of :data:`ENGINE_VERIFIERS`. Returns ``(out int64 [A, L + 1], tau int64
    [A], path int64 [A])`` as the loop's walk: the emitted tokens (-1 after the tau-th), how many, and the first
    path that holds every accepted drafted token."""
    import torch

    from otlp.engines.sglang import tree_speculative_sampling

    A, n, L1, V = p_all.shape
    L = L1 - 1
    dev = p_all.device
    N = 1 + n * L
    drafts = drafts.to(dev)
    candidates, next_token, next_sibling, first = encode(drafts)
    # rows by node id: the root, then (i, j) at 1 + j n + i, each the rows of its prefix's first path
    lead = first[:, :, 1:, None].expand(A, n, L, V)  # [A, n, L, V]: first path sharing i's first j + 1 tokens
    rows = p_all[:, :, 1:].gather(1, lead)  # [A, n, L, V]
    target = torch.cat([p_all[:, 0, :1], rows.transpose(1, 2).reshape(A, n * L, V)], dim=1)  # [A, N, V]
    draft = torch.zeros_like(target)  # [A, N, V]: the depth-(L - 1) nodes have no children (rows never read)
    draft[:, 0] = q_all[:, 0, 0]
    if L > 1:
        laws = q_all[:, :, 1:].gather(1, lead[:, :, :L - 1])  # [A, n, L - 1, V]
        draft[:, 1:1 + n * (L - 1)] = laws.transpose(1, 2).reshape(A, n * (L - 1), V)
    # node (i, j)'s coin verifies its children: the coin of its group at depth j + 1
    uniform = torch.zeros((A, N), dtype=coins.dtype, device=dev)
    uniform[:, 0] = coins[:, 0, 0]
    if L > 1:
        group = first[:, :, 1:L]  # [A, n, L - 1]
        uniform[:, 1:1 + n * (L - 1)] = coins[:, :, 1:].gather(1, group).transpose(1, 2).reshape(A, -1)
    predicts = torch.full((A * N,), -1, dtype=torch.int32, device=dev)
    accept_index = torch.full((A, L + 1), -1, dtype=torch.int32, device=dev)
    accept_num = torch.zeros((A,), dtype=torch.int32, device=dev)
    slots = torch.arange(A * N, device=dev).reshape(A, N)
    tree_speculative_sampling(predicts, accept_index, accept_num, candidates, slots, next_token, next_sibling,
                              uniform, finals, target, draft, method=method, max_children=n, validate=False)
    k = torch.arange(L + 1, device=dev)
    accepted = accept_num.long()  # [A]
    on = k[None, :] <= accepted[:, None]  # [A, L + 1]
    index = accept_index.long().clamp(min=0)
    out = torch.where(on, predicts.long()[index], -1)
    last = index.gather(1, accepted[:, None])[:, 0] - torch.arange(A, device=dev) * N  # node of the last accepted
    i = torch.where(accepted > 0, (last - 1) % n, 0)  # its path; the first path with the same accepted prefix:
    path = first[torch.arange(A, device=dev), i, accepted]  # the loop's own choice (argmax of the followers)
    return out, accepted + 1, path
