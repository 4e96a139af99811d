"""The language-model interface the decode loop talks to.

A model answers one question for a batch of token-id prefixes: the logits of the next token. Prefixes come as a
list of lists of ints, or as a padded ``int [B, T]`` tensor / array plus ``lengths [B]``. Models may carry
- ``context_size``: the number of trailing tokens that matter (n-gram models), so the loop may truncate;
- ``name``: for reports.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from otlp.core.errors import InputError, MissingDependencyError


@runtime_checkable
class LanguageModel(Protocol):
    """Next-token logits for a batch of prefixes: ``float [B, V]`` (any monotone-equivalent of log probs:
    the loop applies ``softmax(logits / temperature)`` with top-k / top-p)."""

    vocab_size: int

    def next_token_logits(self, prefixes: object, lengths: object = None) -> torch.Tensor:
        ...


def prefix_lists(prefixes: object, lengths: object = None) -> list[list[int]]:
    """Normalise a batch of prefixes to a list of lists of ints.

    Accepts a list of sequences, or a padded ``int [B, T]`` tensor / array with ``lengths [B]`` (each row's
    first ``lengths[b]`` entries are its prefix; without ``lengths`` every row is used whole).
    """
    if isinstance(prefixes, (torch.Tensor, np.ndarray)):
        array = prefixes.detach().cpu().numpy() if isinstance(prefixes, torch.Tensor) else prefixes
        if array.ndim != 2:
            raise InputError(f"a padded prefix batch must have shape [B, T], got {tuple(array.shape)}")
        rows = array.astype(np.int64).tolist()
        if lengths is None:
            return rows
        lens = (lengths.detach().cpu().numpy() if isinstance(lengths, torch.Tensor) else np.asarray(lengths))
        lens = lens.astype(np.int64).tolist()
        if len(lens) != len(rows):
            raise InputError(f"lengths has {len(lens)} entries for {len(rows)} prefixes")
        if any(n < 0 or n > array.shape[1] for n in lens):
            raise InputError(f"lengths must lie in [0, {array.shape[1]}]")
        return [row[:n] for row, n in zip(rows, lens, strict=True)]
    if lengths is not None:
        raise InputError("lengths is only meaningful with a padded tensor of prefixes")
    try:
        return [list(map(int, p)) for p in prefixes]  # type: ignore[union-attr]
    except TypeError:
        raise InputError("prefixes must be a list of token-id sequences or a padded [B, T] tensor") from None


def check_pair(draft: LanguageModel, target: LanguageModel) -> int:
    """Both models must share one vocabulary; returns V."""
    for role, model in (("draft", draft), ("target", target)):
        if not hasattr(model, "next_token_logits") or not hasattr(model, "vocab_size"):
            raise InputError(f"the {role} model must have vocab_size and next_token_logits(prefixes)")
    if int(draft.vocab_size) != int(target.vocab_size):
        raise InputError(f"draft and target vocabularies differ: {draft.vocab_size} vs {target.vocab_size}; "
                         "speculative sampling needs one shared vocabulary")
    return int(target.vocab_size)


def transformers_module():  # noqa: ANN201 - the transformers package
    """``transformers``, or one MissingDependencyError naming the ``hf`` extra (the HF adapter and its tree pass)."""
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError("transformers", "the Hugging Face adapter (HFCausalLM)", "hf") from None
    return transformers
