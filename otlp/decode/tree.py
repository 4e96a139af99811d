"""How the decode loop gets a model's laws at the nodes of a draft tree: recomputed per prefix, or KV-cached.

A step asks each model three things (``TreeLaws``):
- ``tree(ids, contexts, drafts [A, n, d])`` -> float64 [A, n, d + 1, V]: the law at the root (index 0, the same
  for every path) and after each node of the n drafted paths of d tokens (the target: d = L, the draft: d = 0);
- ``grow(tokens [A, n])`` -> [A, n, V]: the law after one more drafted depth on every path (the draft, one depth
  per call);
- ``commit(tau [A], path [A])``: the step emitted ``tau`` tokens, the first ``tau - 1`` of them drafted, along
  path ``path``.

Two backends answer them. ``PrefixBackend`` calls ``next_token_logits`` on every prefix ("context + path up to the
node"), so a target step costs the sum of the prefix lengths, about (n·L + 1)·T positions at context T (the
recompute path; any :class:`LanguageModel`). A model with ``tree_session()`` (``HFCausalLM``) gives a
:class:`otlp.decode.hf_tree.KVTreeCache` instead: one forward pass of n·L + 1 positions over the KV cache.
``TreeLaws`` turns either's logits into laws with the loop's sampling settings and keeps the time and positions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from otlp.core.errors import InputError
from otlp.decode.models import LanguageModel

TREE_MODES = ("cached", "recompute")


def finished(result: torch.Tensor, start: float) -> float:
    """Seconds since ``start`` (a ``time.perf_counter()``) once ``result`` is computed: on a CUDA device the host
    first waits for the work queued there, so that the time is the work's and not only its launch's."""
    if result.is_cuda:
        torch.cuda.synchronize(result.device)
    return time.perf_counter() - start


class PrefixBackend:
    """The recompute path: one ``next_token_logits`` call per tree (or per grown depth) over all its prefixes."""

    mode = "recompute"

    def __init__(self, model: LanguageModel):
        self.model = model
        self.positions = 0  # the model's own counter where it has one (HFCausalLM), else the prefix lengths asked
        self.prompt_positions = 0
        self._contexts: list[list[int]] = []
        self._heads: list[list[list[int]]] = []  # [A][n] tokens drafted so far on each path

    def _logits(self, prefixes: list[list[int]]) -> torch.Tensor:
        before = getattr(self.model, "positions", None)
        logits = self.model.next_token_logits(prefixes)
        if isinstance(before, int):
            self.positions += int(self.model.positions) - before  # type: ignore[attr-defined]
        else:
            self.positions += sum(len(p) for p in prefixes)
        return logits

    def tree(self, ids: list[int], contexts: list[list[int]], drafts: torch.Tensor) -> torch.Tensor:
        A, n, d = drafts.shape
        paths = drafts.tolist()
        prefixes = list(contexts)
        prefixes += [contexts[a] + paths[a][i][:j] for a in range(A) for i in range(n) for j in range(1, d + 1)]
        flat = self._logits(prefixes)  # [A + A*n*d, V]
        V = flat.shape[-1]
        out = torch.empty((A, n, d + 1, V), dtype=flat.dtype, device=flat.device)
        out[:, :, 0] = flat[:A, None, :]
        out[:, :, 1:] = flat[A:].view(A, n, d, V)
        self._contexts, self._heads = list(contexts), paths
        return out

    def grow(self, tokens: torch.Tensor) -> torch.Tensor:
        A, n = tokens.shape
        for heads, new in zip(self._heads, tokens.tolist(), strict=True):
            for path, token in zip(heads, new, strict=True):
                path.append(token)
        return self._logits([self._contexts[a] + self._heads[a][i] for a in range(A) for i in range(n)]).view(
            A, n, -1)

    def commit(self, tau: torch.Tensor, path: torch.Tensor) -> None:
        self._contexts, self._heads = [], []


class TreeLaws:
    """One model's laws on the draft tree, through its backend, with the loop's sampling settings."""

    def __init__(self, backend: PrefixBackend | object, laws: Callable[[torch.Tensor], torch.Tensor]):
        self.backend = backend
        self.laws = laws  # logits [..., V] -> float64 probabilities [..., V]
        self.seconds = 0.0
        self.calls = 0

    @property
    def mode(self) -> str:
        return str(self.backend.mode)  # type: ignore[attr-defined]

    @property
    def positions(self) -> int:
        return int(self.backend.positions)  # type: ignore[attr-defined]

    @property
    def prompt_positions(self) -> int:
        return int(self.backend.prompt_positions)  # type: ignore[attr-defined]

    def _timed(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        start = time.perf_counter()
        probs = self.laws(fn().detach())
        self.seconds += finished(probs, start)
        self.calls += 1
        return probs

    def tree(self, ids: list[int], contexts: list[list[int]], drafts: torch.Tensor) -> torch.Tensor:
        return self._timed(lambda: self.backend.tree(ids, contexts, drafts))  # type: ignore[attr-defined]

    def grow(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._timed(lambda: self.backend.grow(tokens))  # type: ignore[attr-defined]

    def commit(self, tau: torch.Tensor, path: torch.Tensor) -> None:
        start = time.perf_counter()
        self.backend.commit(tau, path)  # type: ignore[attr-defined]
        self.seconds += time.perf_counter() - start


def tree_laws(model: LanguageModel, laws: Callable[[torch.Tensor], torch.Tensor], mode: str = "cached"
              ) -> TreeLaws:
    """The cached backend where ``mode == "cached"`` and the model offers one (``tree_session()`` not None; a
    model that cannot take a custom mask warns once and returns None), else the recompute path."""
    if mode not in TREE_MODES:
        raise InputError(f"tree must be one of {', '.join(TREE_MODES)}, got {mode!r}")
    session = getattr(model, "tree_session", None)
    backend = session() if mode == "cached" and callable(session) else None
    return TreeLaws(backend if backend is not None else PrefixBackend(model), laws)
