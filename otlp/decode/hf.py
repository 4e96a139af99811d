"""Hugging Face ``transformers`` causal LMs as :class:`otlp.decode.models.LanguageModel`, from a local path only.

``HFCausalLM.from_pretrained(path)`` loads with ``local_files_only=True``: nothing is ever downloaded. A batch of
prefixes runs as one left-padded forward pass (padding masked out, position ids counted from each prefix's first
token, the LM head applied to the last column only where the model takes ``logits_to_keep``), chunked by
``max_batch``. Next-token logits of prefixes already seen are served from an LRU cache, which
the tree decode loop hits for every prefix it re-queries (shared roots, repeated paths). That is the recompute
path; ``tree_session()`` gives the KV-cached tree path of :mod:`otlp.decode.hf_tree` (one forward pass of n·L + 1
positions per step) when the model takes a custom 4D attention mask.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from otlp.core.errors import InputError
from otlp.decode.models import prefix_lists, transformers_module

if TYPE_CHECKING:  # pragma: no cover
    from otlp.decode.hf_tree import KVTreeCache


class HFCausalLM:
    """A ``transformers`` causal LM behind the ``next_token_logits(prefixes)`` interface.

    Parameters
    ----------
    model : a ``PreTrainedModel`` with a causal LM head.
    tokenizer : optional, for text prompts.
    device : where the forward passes run ("cpu", "cuda", ...).
    max_batch : prefixes per forward pass.
    cache_size : next-token logit rows kept (LRU) keyed by the full prefix.
    """

    def __init__(self, model: object, tokenizer: object | None = None, *, device: str | torch.device = "cpu",
                 max_batch: int = 64, cache_size: int = 4096, name: str | None = None):
        self.model = model.to(device).eval()  # type: ignore[attr-defined]
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        config = model.config  # type: ignore[attr-defined]
        self.vocab_size = int(config.vocab_size)
        bos = getattr(config, "bos_token_id", None)
        self.bos_id = int(bos) if bos is not None else 0
        self.context_size = None  # attention sees the whole prefix
        self.max_length = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
        self.max_batch = int(max_batch)
        self.cache_size = int(cache_size)
        self.name = name or getattr(config, "name_or_path", None) or type(model).__name__
        self._cache: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()
        self.calls = 0
        self.forward_passes = 0
        self.positions = 0  # token positions pushed through the model (padding excluded), both paths
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters  # type: ignore
        self._tree_reason: str | None = None
        self._tree_checked = False

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str = "cpu", dtype: str | None = None,
                        **kwargs: object) -> HFCausalLM:
        """Load a model (and its tokenizer, if saved there) from a local directory; never downloads."""
        transformers = transformers_module()
        local = Path(path)
        if not local.is_dir():
            raise InputError(f"{str(path)!r} is not a local model directory; HFCausalLM loads from disk only "
                             "(save the model with save_pretrained first; nothing is downloaded)")
        if not (local / "config.json").is_file():
            raise InputError(f"{str(path)!r} has no config.json; expected a directory written by save_pretrained")
        options: dict[str, object] = {"local_files_only": True}
        if dtype is not None:
            options["dtype"] = getattr(torch, dtype)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(local), **options)
        tokenizer = None
        if any((local / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(local), local_files_only=True)
        return cls(model, tokenizer, device=device, name=str(local), **kwargs)  # type: ignore[arg-type]

    @torch.no_grad()
    def _forward(self, rows: list[list[int]]) -> torch.Tensor:
        """Last-position logits for prefixes of any lengths: float [len(rows), V] on the CPU."""
        lengths = torch.tensor([len(r) for r in rows])
        width = int(lengths.max())
        ids = torch.zeros((len(rows), width), dtype=torch.int64)  # left padding: every prefix ends at the last column
        mask = torch.arange(width)[None, :] >= (width - lengths)[:, None]  # [R, T]
        ids[mask] = torch.tensor([t for r in rows for t in r], dtype=torch.int64)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # [R, T]: each prefix starts at position 0
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}  # the LM head on the last column only
        out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device).long(),  # type: ignore
                         position_ids=positions.to(self.device), use_cache=False, **extra)
        self.forward_passes += 1
        self.positions += int(lengths.sum())
        return out.logits[:, -1, : self.vocab_size].float().cpu()  # [R, V]

    def tree_session(self) -> KVTreeCache | None:
        """A fresh KV-cached tree session, or None when this model cannot take a custom 4D mask: then the decode
        loop uses the recompute path, and a RuntimeWarning says so (once per model object). The first call probes
        the model (a few tiny forward passes, :func:`otlp.decode.hf_tree.probe_tree_support`)."""
        from otlp.decode.hf_tree import KVTreeCache, attention_window, probe_tree_support, warn_recompute

        if not self._tree_checked:
            self._tree_checked = True
            self._tree_reason = probe_tree_support(self)
            if self._tree_reason is not None:
                warn_recompute(self, self._tree_reason)
        if self._tree_reason is not None:
            return None
        return KVTreeCache(self, attention_window(self.model.config)[0])  # type: ignore[attr-defined]

    def next_token_logits(self, prefixes: object, lengths: object = None) -> torch.Tensor:
        """Logits of the next token for each prefix: float32 [B, V] (CPU)."""
        self.calls += 1
        rows = prefix_lists(prefixes, lengths)
        keys = [tuple(r) for r in rows]
        for key in keys:
            if not key:
                raise InputError("HFCausalLM needs non-empty prefixes (start prompts with the BOS token)")
            if self.max_length is not None and len(key) > self.max_length:
                raise InputError(f"a prefix of {len(key)} tokens exceeds the model's {self.max_length} positions")
        if rows and (min(min(r) for r in rows) < 0 or max(max(r) for r in rows) >= self.vocab_size):
            raise InputError(f"token ids must lie in [0, {self.vocab_size})")
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))  # distinct, in order
        for start in range(0, len(missing), self.max_batch):
            chunk = missing[start : start + self.max_batch]
            for key, row in zip(chunk, self._forward([list(k) for k in chunk]), strict=True):
                self._cache[key] = row
        out = torch.stack([self._cache[k] for k in keys]) if keys else torch.zeros((0, self.vocab_size))
        for key in keys:
            self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out
