"""One KV-cached tree-attention pass per decode step for Hugging Face causal LMs (SpecInfer §4 "tree attention").

The accepted context of every sequence lives in the model's KV cache (a ``DynamicCache``). A step pushes, in ONE
forward pass, the tokens emitted since the last pass (``pending``: the last step's correction or bonus token, plus
accepted drafted tokens this model never saw; at the first step, the prompt) followed by every node of the draft
tree, n paths of d tokens, flattened path by path. The pass carries

- a 4D additive attention mask ``[B, 1, Q, S + Q]`` (0 = attend, dtype-min = blocked): a pending token sees the
  cache and the pending tokens before it; the node at depth j of path i sees the cache, every pending token and
  nodes 1..j of path i (its ancestors and itself), nothing of the other paths;
- position ids ``[B, Q]``: the node at depth j of a sequence of length T sits at position T + j - 1, exactly where
  the token would sit in a plain forward pass over the prefix.

Its logits are then, for every node, the next-token logits of the prefix "context + path up to that node", and at
the last pending token the root's (SpecInfer eq. (3)-(4); the mask makes the pass equal to n·d + 1 separate
recomputes). A draft model grows its tree one depth per pass instead (``grow``): n new nodes see their own path.

After verification (``commit``) the cache keeps only the accepted path: the tree's slots are cut off and the kept
ones (pending tokens + the accepted path's nodes) are re-appended by an index-select of their K/V. Nothing is
recomputed: K/V entries depend only on the token, its position and its ancestors, which are exactly the accepted
context, so the selected entries ARE the entries a plain pass over the accepted sequence would have produced. (The
alternative, cropping and recomputing the accepted tokens, costs another forward pass per step.) Sequences of one
batch accept different numbers of tokens; the shorter rows get holes (slots masked out for every later query,
position -1 in ``slot_pos``); when the slots beyond the longest row's tokens pass a quarter of the cache, it is
compacted by a gather, again without recomputing.

The last emitted token's K/V enter with the next pass (as the root), so after a commit each row's cache holds
exactly ``len(sequence) - 1`` tokens.
"""

from __future__ import annotations

import inspect
import warnings
from typing import TYPE_CHECKING

import torch

from otlp.core.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from otlp.decode.hf import HFCausalLM

#: attention implementations that apply a custom 4D additive mask as given
MASKABLE_ATTENTION = ("eager", "sdpa")


def attention_window(config: object) -> tuple[int | None, str | None]:
    """(sliding window or None, reason the cached tree cannot be used or None) from a model config."""
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    if implementation not in MASKABLE_ATTENTION:
        return None, f"attention implementation {implementation!r} does not take a custom 4D mask"
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        kinds = set(layer_types)
        if kinds == {"full_attention"}:
            return None, None
        if kinds == {"sliding_attention"} and window is not None:
            return int(window), None
        return None, f"layer types {sorted(kinds)} need one mask per layer kind"
    if window is not None and getattr(config, "use_sliding_window", True):
        return int(window), None
    return None, None


def _kv(cache: object) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """Per layer (keys [B, H, S, D], values [B, H, S, D]) or None for a layer without entries."""
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) if getattr(layer, "keys", None) is not None and layer.keys.numel()
                else None for layer in cache.layers]  # type: ignore[attr-defined]
    return [(k, v) if k.numel() else None for k, v in zip(cache.key_cache, cache.value_cache, strict=True)]  # type: ignore[attr-defined]


def _set_kv(cache: object, entries: list[tuple[torch.Tensor, torch.Tensor] | None]) -> None:
    for i, kv in enumerate(entries):
        if kv is None:
            continue
        if hasattr(cache, "layers"):
            cache.layers[i].keys, cache.layers[i].values = kv  # type: ignore[attr-defined]
        else:
            cache.key_cache[i], cache.value_cache[i] = kv  # type: ignore[attr-defined]


def _map_slots(cache: object, fn) -> None:  # noqa: ANN001
    """Apply ``fn(tensor [B, H, S, D]) -> [B', H, S', D]`` to every layer's keys and values."""
    _set_kv(cache, [None if kv is None else (fn(kv[0]), fn(kv[1])) for kv in _kv(cache)])


def _gather_slots(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [B, H, S, D], index [B, K] -> [B, H, K, D] (per-row slot selection)."""
    B, H, _, D = x.shape
    return x.gather(2, index[:, None, :, None].expand(B, H, index.shape[1], D))


class KVTreeCache:
    """The accepted contexts of a batch of sequences in one model's KV cache, with tree passes on top.

    ``tree(ids, contexts, drafts [A, n, d])`` -> logits float32 [A, n, d + 1, V] (on the model's device): index 0
    the root (the law after the context), index j the node at depth j of path i. ``grow(tokens [A, n])`` ->
    logits [A, n, V]: one more depth on every path of the tree in flight. ``commit(tau [A], path [A])``: keep the
    pending tokens and the first ``tau - 1`` nodes of path ``path`` (the accepted drafted tokens), drop the rest of
    the tree.
    ``ids`` are the caller's row ids; rows missing from a later call are dropped from the cache.
    """

    mode = "cached"

    def __init__(self, lm: HFCausalLM, window: int | None = None):
        self.lm = lm
        self.model = lm.model
        self.device = lm.device
        self.vocab_size = lm.vocab_size
        self.window = window
        self.dtype = next(self.model.parameters()).dtype  # type: ignore[attr-defined]
        params = inspect.signature(self.model.forward).parameters  # type: ignore[attr-defined]
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keeps_logits = "logits_to_keep" in params  # skip the LM head on prompt columns (prefill)
        self.cache: object | None = None
        self.ids: list[int] = []
        self.cached = torch.zeros(0, dtype=torch.int64)  # [B] tokens of each sequence held in the cache
        self.slot_pos = torch.zeros((0, 0), dtype=torch.int64, device=self.device)  # [B, S] position, -1 = hole
        self.positions = 0  # token positions pushed through the model (pending + nodes, padding excluded)
        self.prompt_positions = 0  # of those, prompt tokens before each prompt's last one
        self.passes = 0
        self._reset_flight()

    def _reset_flight(self) -> None:
        self._flight_pos = torch.zeros((len(self.ids), 0), dtype=torch.int64, device=self.device)  # [B, F]
        self._flight_path = torch.zeros(0, dtype=torch.int64, device=self.device)  # [F], -1 = pending chain
        self._flight_depth = torch.zeros(0, dtype=torch.int64, device=self.device)  # [F], pending: order - Pmax
        self._lengths = torch.zeros(0, dtype=torch.int64, device=self.device)  # [B] sequence lengths at tree()
        self._depth = -1  # deepest node pushed in flight; -1: no tree in flight

    @property
    def cache_lengths(self) -> list[int]:
        """Tokens of each row held in the cache (valid slots)."""
        return self.cached.tolist()

    def _sync_rows(self, ids: list[int]) -> None:
        if self.cache is None:
            from otlp.decode.models import transformers_module

            self.cache = transformers_module().DynamicCache()
            self.ids = list(ids)
            self.cached = torch.zeros(len(ids), dtype=torch.int64)
            self.slot_pos = torch.zeros((len(ids), 0), dtype=torch.int64, device=self.device)
            return
        if list(ids) == self.ids:
            return
        where = {g: r for r, g in enumerate(self.ids)}
        if any(g not in where for g in ids):
            raise InputError("KVTreeCache: rows can only be dropped between steps, not added")
        rows = torch.tensor([where[g] for g in ids], dtype=torch.int64)
        rows_dev = rows.to(self.device)
        _map_slots(self.cache, lambda x: x.index_select(0, rows_dev))
        self.slot_pos = self.slot_pos.index_select(0, rows_dev)
        self.cached = self.cached.index_select(0, rows)
        self.ids = list(ids)

    @torch.no_grad()
    def tree(self, ids: list[int], contexts: list[list[int]], drafts: torch.Tensor) -> torch.Tensor:
        """Root and node logits of the draft tree ``drafts [A, n, d]`` over ``contexts`` (full sequences)."""
        if self._depth >= 0:
            raise InputError("KVTreeCache.tree: the previous tree was not committed")
        self._sync_rows(ids)
        self._reset_flight()
        A, n, d = drafts.shape
        lengths = [len(c) for c in contexts]
        cached = self.cached.tolist()
        pending = [c[k:] for c, k in zip(contexts, cached, strict=True)]
        if any(not p for p in pending):
            raise InputError("KVTreeCache.tree: every sequence needs a token after its cached context "
                             "(non-empty prompts, one commit per tree)")
        P = max(len(p) for p in pending)
        Q = P + n * d
        tokens = torch.zeros((A, Q), dtype=torch.int64)
        pos = torch.zeros((A, Q), dtype=torch.int64)
        valid = torch.zeros((A, Q), dtype=torch.bool)
        for a, (p, k) in enumerate(zip(pending, cached, strict=True)):
            tokens[a, P - len(p) : P] = torch.tensor(p)
            pos[a, P - len(p) : P] = torch.arange(k, k + len(p))
            valid[a, P - len(p) : P] = True
            if k == 0:
                self.prompt_positions += len(p) - 1
        length = torch.tensor(lengths, dtype=torch.int64)
        depth = torch.arange(1, d + 1)
        tokens[:, P:] = drafts.reshape(A, n * d)
        pos[:, P:] = (length[:, None, None] + depth[None, None, :] - 1).expand(A, n, d).reshape(A, n * d)
        valid[:, P:] = True
        qpath = torch.cat([torch.full((P,), -1), torch.arange(n).repeat_interleave(d)])
        qdepth = torch.cat([torch.arange(P) - P, depth.repeat(n)])
        self._lengths = length.to(self.device)
        logits = self._push(tokens, pos, valid, qpath, qdepth, keep=n * d + 1)  # [A, n*d + 1, V] (or [A, Q, V])
        self._depth = d
        out = torch.empty((A, n, d + 1, self.vocab_size), dtype=torch.float32, device=logits.device)
        root = logits.shape[1] - n * d - 1
        out[:, :, 0] = logits[:, root, None, :]
        out[:, :, 1:] = logits[:, root + 1 :].view(A, n, d, self.vocab_size)
        return out

    @torch.no_grad()
    def grow(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits after one more depth ``tokens [A, n]`` on every path of the tree in flight: [A, n, V]."""
        if self._depth < 0:
            raise InputError("KVTreeCache.grow: no tree in flight (call tree() first)")
        A, n = tokens.shape
        j = self._depth + 1
        pos = (self._lengths.cpu()[:, None] + j - 1).expand(A, n)
        logits = self._push(tokens.to(torch.int64), pos, torch.ones((A, n), dtype=torch.bool), torch.arange(n),
                            torch.full((n,), j))
        self._depth = j
        return logits

    def _push(self, tokens: torch.Tensor, pos: torch.Tensor, valid: torch.Tensor, qpath: torch.Tensor,
              qdepth: torch.Tensor, keep: int = 0) -> torch.Tensor:
        """One forward pass of Q new tokens per row [A, Q] over the cache and the tree in flight: logits [A, Q, V]
        (only the last ``keep`` columns where ``keep > 0`` and the model takes ``logits_to_keep``).

        A key is visible to a query when it is a committed slot (not a hole), or a valid in-flight slot that is
        either pending (path -1; among pending tokens, causal order) or a node of the query's path at a depth up
        to the query's; every query sees itself; a sliding window blocks keys ``window`` or more positions back.
        """
        limit = self.lm.max_length
        if limit is not None and int(pos.max()) >= int(limit):
            raise InputError(f"a prefix of {int(pos.max()) + 1} tokens exceeds the model's {limit} positions")
        dev = self.device
        tokens, pos, valid = tokens.to(dev), pos.to(dev), valid.to(dev)
        qpath, qdepth = qpath.to(dev), qdepth.to(dev)
        A, Q = tokens.shape
        kpath = torch.cat([self._flight_path, qpath])  # [F + Q]
        kdepth = torch.cat([self._flight_depth, qdepth])
        kpos_flight = torch.cat([self._flight_pos, torch.where(valid, pos, -1)], dim=1)  # [A, F + Q]
        pending_k = kpath[None, :] == -1  # [1, F + Q]
        causal = kdepth[None, :] <= qdepth[:, None]  # [Q, F + Q]
        same_path = (kpath[None, :] == qpath[:, None]) & (qpath[:, None] >= 0)
        tree_vis = (pending_k & ((qpath[:, None] >= 0) | causal)) | (same_path & causal)  # [Q, F + Q]
        visible_flight = tree_vis[None] & (kpos_flight >= 0)[:, None, :]  # [A, Q, F + Q]
        F = self._flight_path.numel()
        visible_flight[:, :, F:] |= torch.eye(Q, dtype=torch.bool, device=dev)[None]
        visible_cache = (self.slot_pos >= 0)[:, None, :].expand(A, Q, -1)  # [A, Q, S]
        visible = torch.cat([visible_cache, visible_flight], dim=2)  # [A, Q, S + F + Q]
        if self.window is not None:
            kpos = torch.cat([self.slot_pos, kpos_flight], dim=1)  # [A, S + F + Q]
            visible &= (pos[:, :, None] - kpos[:, None, :]) < self.window
            visible[:, :, -Q:] |= torch.eye(Q, dtype=torch.bool, device=dev)[None]
        mask = torch.zeros(visible.shape, dtype=self.dtype, device=dev)
        mask.masked_fill_(~visible, torch.finfo(self.dtype).min)
        pos_in = torch.where(valid, pos, 0)
        extra = {self._cache_kw: self.cache}
        if keep > 0 and self._keeps_logits:
            extra["logits_to_keep"] = keep
        out = self.model(input_ids=tokens, position_ids=pos_in, attention_mask=mask[:, None],  # type: ignore
                         use_cache=True, **extra)
        returned = getattr(out, self._cache_kw, None)  # named as the input (transformers 5.2x: cache)
        if returned is not None and returned is not self.cache:
            self.cache = returned
        self.passes += 1
        self.lm.forward_passes += 1
        pushed = int(valid.sum())
        self.positions += pushed
        self.lm.positions += pushed
        self._flight_pos = kpos_flight
        self._flight_path, self._flight_depth = kpath, kdepth
        return out.logits[..., : self.vocab_size].float()  # on the model's device

    @torch.no_grad()
    def commit(self, tau: torch.Tensor, path: torch.Tensor) -> None:
        """Keep the pending tokens and nodes 1..tau-1 of ``path`` (per row); drop the rest of the tree."""
        if self._depth < 0:
            raise InputError("KVTreeCache.commit: no tree in flight")
        dev = self.device
        accepted = (tau.to(dev) - 1).clamp(min=0)  # [A] drafted tokens accepted
        path = path.to(dev)
        kpath, kdepth = self._flight_path, self._flight_depth
        valid = self._flight_pos >= 0  # [A, F]
        keep = valid & ((kpath[None, :] == -1)
                        | ((kpath[None, :] == path[:, None]) & (kdepth[None, :] <= accepted[:, None])))
        count = keep.sum(dim=1)  # [A]
        width = int(count.max())
        order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :width]  # kept slots first
        filled = torch.arange(width, device=dev)[None, :] < count[:, None]  # [A, width]
        S = self.slot_pos.shape[1]
        new_pos = torch.where(filled, self._flight_pos.gather(1, order), -1)
        _map_slots(self.cache, lambda x: torch.cat([x[:, :, :S], _gather_slots(x[:, :, S:], order)], dim=2))
        self.slot_pos = torch.cat([self.slot_pos, new_pos], dim=1)
        self.cached = self.cached + count.cpu()
        self._reset_flight()
        waste = self.slot_pos.shape[1] - int(self.cached.max()) if self.cached.numel() else 0
        if waste > max(32, self.slot_pos.shape[1] // 4):
            self.compact()

    def compact(self) -> None:
        """Move each row's valid slots to the front (a gather of K/V, no recompute); trailing holes dropped."""
        width = int(self.cached.max()) if self.cached.numel() else 0
        order = torch.sort((self.slot_pos < 0).to(torch.int8), dim=1, stable=True).indices[:, :width]  # [B, W]
        filled = torch.arange(width, device=self.device)[None, :] < self.cached.to(self.device)[:, None]
        _map_slots(self.cache, lambda x: _gather_slots(x, order))
        self.slot_pos = torch.where(filled, self.slot_pos.gather(1, order), -1)


def probe_tree_support(lm: HFCausalLM) -> str | None:
    """None when the cached tree pass reproduces the recompute path on this model, else the reason it cannot.

    Two short sequences of different lengths, a tree of 2 paths x 2 tokens and one ``grow``, compared with
    full recomputes of every prefix (tolerance 1e-4 x logit scale in float32, 5e-2 in half precision).
    """
    window, reason = attention_window(lm.model.config)  # type: ignore[attr-defined]
    if reason is not None:
        return reason
    V = lm.vocab_size
    counters = lm.positions, lm.forward_passes
    contexts = [[lm.bos_id % V, 1 % V, 2 % V], [lm.bos_id % V, 3 % V]]
    drafts = torch.tensor([[[4 % V, 5 % V], [6 % V, 7 % V]], [[8 % V, 9 % V], [1 % V, 2 % V]]])
    try:
        session = KVTreeCache(lm, window)
        nodes = session.tree([0, 1], contexts, drafts)  # [2, 2, 3, V]
        session.commit(torch.tensor([2, 3]), torch.tensor([1, 0]))
        grown = [contexts[0] + [6 % V, 3 % V], contexts[1] + [8 % V, 9 % V, 5 % V]]
        roots = session.tree([0, 1], grown, drafts[:, :, :0])[:, 0, 0]
        extra = session.grow(drafts[:, :, 0])  # [2, 2, V]
        prefixes = [c + drafts[a, i, :j].tolist() for a, c in enumerate(contexts) for i in range(2) for j in (0, 1, 2)]
        prefixes += grown + [g + [drafts[a, i, 0].item()] for a, g in enumerate(grown) for i in range(2)]
        cached = torch.cat([nodes.reshape(-1, V), roots, extra.reshape(-1, V)]).cpu()  # as _forward's rows
        reference = torch.cat([lm._forward([p]) for p in prefixes])
    except Exception as exc:  # noqa: BLE001 - any failure means: use the recompute path
        return f"the tree pass failed ({type(exc).__name__}: {str(exc)[:200]})"
    finally:
        lm.positions, lm.forward_passes = counters
    tol = 1e-4 if session.dtype in (torch.float32, torch.float64) else 5e-2
    error = float((cached - reference).abs().max())
    scale = max(1.0, float(reference.abs().max()))
    if not error <= tol * scale:
        return f"the tree pass differs from a full recompute by {error:.2e} (the model ignores custom 4D masks)"
    return None


def warn_recompute(lm: HFCausalLM, reason: str) -> None:
    warnings.warn(f"otlp: {lm.name}: no cached tree pass ({reason}); using the recompute path", RuntimeWarning,
                  stacklevel=3)
