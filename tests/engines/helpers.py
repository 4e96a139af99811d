"""Shared builders for the engine adapter tests: dyadic probability rows (no float ties), dyadic uniforms, random
trees in SGLang's first-child / next-sibling encoding."""

from __future__ import annotations

import torch


def dyadic_rows(g: torch.Generator, shape: tuple, V: int, bits: int = 10, zeros: float = 0.2) -> torch.Tensor:
    """Rows ``[*shape, V]`` float32 of probabilities that are multiples of 2^-bits summing to 1 exactly (random
    integer weights with some zeros, the remainder put on the largest entry)."""
    w = torch.randint(0, 8, (*shape, V), generator=g).float()
    w[torch.rand((*shape, V), generator=g) < zeros] = 0
    w[..., 0] += (w.sum(-1) == 0).float()
    scale = 2.0 ** bits
    x = torch.floor(w / w.sum(-1, keepdim=True) * scale)
    top = x.argmax(-1, keepdim=True)
    x.scatter_add_(-1, top, scale - x.sum(-1, keepdim=True))
    return x / scale


def dyadic_uniforms(g: torch.Generator, shape: tuple, bits: int = 12) -> torch.Tensor:
    """Uniforms on the grid k / 2^bits (exact products with dyadic probabilities in any float dtype)."""
    return torch.randint(0, 1 << bits, shape, generator=g).float() / (1 << bits)


def random_tree(g: torch.Generator, N: int, max_children: int = 3) -> tuple[list[int], list[int], list[int]]:
    """A random tree of N nodes (node 0 the root, parents before children): ``(parent, first_child, next_sibling)``
    lists, children in creation order, each node at most ``max_children`` children."""
    parent, kids = [-1], [[]]
    for j in range(1, N):
        while True:
            par = int(torch.randint(0, j, (1,), generator=g))
            if len(kids[par]) < max_children:
                break
        parent.append(par)
        kids[par].append(j)
        kids.append([])
    first = [k[0] if k else -1 for k in kids]
    nxt = [-1] * N
    for k in kids:
        for a, b in zip(k, k[1:], strict=False):
            nxt[a] = b
    return parent, first, nxt


def tree_batch(g: torch.Generator, bs: int, N: int, max_children: int = 3):
    """``(retrive_next_token, retrive_next_sibling, depths)`` int64 [bs, N] for bs random trees."""
    firsts, nexts, depths = [], [], []
    for _ in range(bs):
        parent, first, nxt = random_tree(g, N, max_children)
        depth = [0] * N
        for j in range(1, N):
            depth[j] = depth[parent[j]] + 1
        firsts.append(first)
        nexts.append(nxt)
        depths.append(depth)
    return torch.tensor(firsts), torch.tensor(nexts), torch.tensor(depths)
