"""Interpolated Kneser–Ney n-gram language models, trained in seconds on the shipped corpus.

Interpolated Kneser–Ney (Kneser & Ney 1995; Chen & Goodman 1999, eq. (26) with one discount per order):

    P_k(w | h) = max(c_k(h w) - D_k, 0) / c_k(h .)  +  D_k N1+(h .) / c_k(h .) * P_{k-1}(w | h')

where h' drops the oldest token of h, c_N is the raw count at the highest order N, c_k for k < N is the
continuation count N1+(. h w) (the number of distinct tokens seen before h w), N1+(h .) is the number of distinct
followers of h, and D_k = n1 / (n1 + 2 n2) from the counts of counts (Ney, Essen & Kneser 1994). A context never
seen at order k falls through to P_{k-1}. The unigram level interpolates with the uniform law 1/V, so every
token has positive probability and the next-token laws are heavy tailed, like a real LM's.

All counting is ``np.unique`` on int64-encoded n-grams (base-V digits); a batch of B contexts is answered with one
``searchsorted`` per order and one scatter of the seen followers: no Python loop over the vocabulary.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.decode.corpus import WordTokenizer, check_vocab_size, load_corpus
from otlp.decode.models import prefix_lists

#: Default embedded vocabulary: 2000 words (6% of the corpus maps to <unk>).
DEFAULT_VOCAB_SIZE = 2000
#: Rows of cached next-token log-probabilities kept per model (LRU), bounded in bytes.
CACHE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class _Level:
    """Statistics of one order k >= 2: the n-grams (context key * V + token) and their contexts."""

    discount: float
    gram_keys: np.ndarray  # int64 [G], sorted
    gram_counts: np.ndarray  # float64 [G], raw (k = N) or continuation (k < N) counts
    context_keys: np.ndarray  # int64 [C], sorted
    context_start: np.ndarray  # int64 [C], first gram index of the context
    context_types: np.ndarray  # int64 [C], N1+(h .): distinct followers
    context_total: np.ndarray  # float64 [C], c_k(h .)


def _discount(counts: np.ndarray) -> float:
    """D = n1 / (n1 + 2 n2) (Ney, Essen & Kneser 1994); 0.75 where the counts of counts are degenerate."""
    n1 = float(np.count_nonzero(counts == 1))
    n2 = float(np.count_nonzero(counts == 2))
    if n1 == 0 or n2 == 0:
        return 0.75
    return n1 / (n1 + 2.0 * n2)


def _level(keys: np.ndarray, counts: np.ndarray, V: int) -> _Level:
    contexts = keys // V
    context_keys, context_start, context_types = np.unique(contexts, return_index=True, return_counts=True)
    context_total = np.add.reduceat(counts, context_start)
    return _Level(_discount(counts), keys, counts, context_keys, context_start.astype(np.int64),
                  context_types.astype(np.int64), context_total.astype(np.float64))


def _gram_keys(stream: np.ndarray, k: int, V: int) -> np.ndarray:
    """Base-V codes of all k-grams of the stream, first token most significant: int64 [T - k + 1]."""
    T = stream.size - k + 1
    keys = np.zeros(T, dtype=np.int64)
    for j in range(k):  # k <= order: a loop over positions in the n-gram, not over tokens
        keys = keys * V + stream[j : j + T]
    return keys


class KneserNeyLM:
    """An interpolated Kneser–Ney n-gram model over a closed vocabulary (see the module docstring).

    Implements the :class:`otlp.decode.models.LanguageModel` protocol: ``next_token_logits`` returns log
    probabilities (float64), so ``softmax`` gives back the model's law exactly. Only the last ``order - 1``
    tokens of a prefix matter (``context_size``); shorter prefixes are padded on the left with ``bos_id``.
    """

    def __init__(self, order: int, vocab_size: int, unigram: np.ndarray, levels: dict[int, _Level],
                 bos_id: int = 1, name: str | None = None):
        self.order = int(order)
        self.vocab_size = int(vocab_size)
        self.context_size = self.order - 1
        self.bos_id = int(bos_id)
        self.unigram = unigram  # float64 [V]
        self.levels = levels
        self.name = name or f"kneser-ney-{self.order}gram"
        self._powers = self.vocab_size ** np.arange(self.context_size - 1, -1, -1, dtype=np.int64)  # [N-1]
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_rows = max(1, CACHE_BYTES // (8 * self.vocab_size))
        self.calls = 0  # next_token_logits calls, for the decode metrics

    @classmethod
    def train(cls, stream: np.ndarray, vocab_size: int, order: int, *, bos_id: int = 1,
              name: str | None = None) -> KneserNeyLM:
        """Count a token stream (int [T], ids < vocab_size) and build the model."""
        stream = np.asarray(stream, dtype=np.int64)
        V, N = int(vocab_size), int(order)
        if N < 1:
            raise InputError(f"order must be >= 1, got {order}")
        if stream.ndim != 1 or stream.size <= N:
            raise InputError(f"the training stream must be a 1-D array longer than the order {N}")
        if stream.min() < 0 or stream.max() >= V:
            raise InputError(f"token ids must lie in [0, {V}), got [{stream.min()}, {stream.max()}]")
        if float(V) ** N >= 2.0**62:
            raise ModelTooLargeError(f"int64 keys for {N}-grams over V = {V}", float(V) ** N * 8, 2.0**62 * 8)
        uniques = {k: np.unique(_gram_keys(stream, k, V), return_counts=True) for k in range(1, N + 1)}
        levels: dict[int, _Level] = {}
        for k in range(2, N + 1):
            if k == N:
                keys, counts = uniques[k]
            else:  # continuation counts: N1+(. h w) = distinct (k+1)-grams ending in h w
                keys, counts = np.unique(uniques[k + 1][0] % V**k, return_counts=True)
            levels[k] = _level(keys, counts.astype(np.float64), V)
        if N == 1:
            unigram_counts = np.bincount(stream, minlength=V).astype(np.float64)
        else:
            unigram_counts = np.bincount(uniques[2][0] % V, minlength=V).astype(np.float64)
        d1 = _discount(unigram_counts[unigram_counts > 0])
        total = unigram_counts.sum()
        types = np.count_nonzero(unigram_counts)
        unigram = np.maximum(unigram_counts - d1, 0.0) / total + d1 * types / total / V
        return cls(N, V, unigram, levels, bos_id=bos_id, name=name)

    # -- queries -------------------------------------------------------------------------------------------
    def probabilities(self, contexts: np.ndarray) -> np.ndarray:
        """P(. | h) for contexts ``int [B, order - 1]`` (oldest first): float64 [B, V], rows sum to 1."""
        contexts = np.asarray(contexts, dtype=np.int64)
        if contexts.ndim == 1:
            contexts = contexts[None, :]
        if contexts.ndim != 2 or contexts.shape[1] != self.context_size:
            raise InputError(f"contexts must have shape [B, {self.context_size}], got {contexts.shape}")
        B, V, N = contexts.shape[0], self.vocab_size, self.order
        probs = np.broadcast_to(self.unigram, (B, V)).copy()  # [B, V]
        for k in range(2, N + 1):
            level = self.levels[k]
            history = contexts[:, N - k :]  # [B, k-1], the last k-1 tokens
            keys = history @ self._powers[N - k :]  # [B]
            idx = np.minimum(np.searchsorted(level.context_keys, keys), level.context_keys.size - 1)
            rows = np.flatnonzero(level.context_keys[idx] == keys)  # contexts seen at order k
            if rows.size == 0:
                continue
            ci = idx[rows]
            total = level.context_total[ci]  # [R]
            probs[rows] *= (level.discount * level.context_types[ci] / total)[:, None]  # backoff weight
            lengths = level.context_types[ci]
            flat_rows = np.repeat(rows, lengths)  # [S], one entry per seen (context, follower)
            first = np.repeat(np.cumsum(lengths) - lengths, lengths)
            grams = np.arange(lengths.sum()) - first + np.repeat(level.context_start[ci], lengths)
            followers = level.gram_keys[grams] % V
            probs[flat_rows, followers] += (np.maximum(level.gram_counts[grams] - level.discount, 0.0)
                                            / np.repeat(total, lengths))
        return probs

    def contexts(self, prefixes: object, lengths: object = None) -> np.ndarray:
        """The last ``order - 1`` tokens of each prefix, left-padded with ``bos_id``: int64 [B, order - 1]."""
        rows = prefix_lists(prefixes, lengths)
        c = self.context_size
        out = np.full((len(rows), c), self.bos_id, dtype=np.int64)
        if c == 0:
            return out
        for b, prefix in enumerate(rows):  # one row per prefix; each takes a slice of at most c tokens
            tail = prefix[len(prefix) - c :] if len(prefix) > c else prefix
            if tail:
                out[b, c - len(tail) :] = tail
        if out.size and (out.min() < 0 or out.max() >= self.vocab_size):
            raise InputError(f"token ids must lie in [0, {self.vocab_size}) for {self.name}")
        return out

    def next_token_logits(self, prefixes: object, lengths: object = None) -> torch.Tensor:
        """Log P(. | prefix) for a batch of prefixes: float64 [B, V]. Repeated contexts are computed once and
        kept in an LRU cache (an n-gram model only sees its last ``order - 1`` tokens)."""
        self.calls += 1
        contexts = self.contexts(prefixes, lengths)  # [B, N-1]
        if contexts.shape[0] == 0:
            return torch.zeros((0, self.vocab_size), dtype=torch.float64)
        keys = contexts @ self._powers if self.context_size else np.zeros(len(contexts), dtype=np.int64)
        unique_keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        rows: list[np.ndarray | None] = []
        missing: list[int] = []
        for j, key in enumerate(unique_keys.tolist()):  # one dict lookup per distinct context
            row = self._cache.get(key)
            if row is not None:
                self._cache.move_to_end(key)
            else:
                missing.append(j)
            rows.append(row)
        if missing:
            fresh = np.log(self.probabilities(contexts[first[missing]]))  # [M, V]
            for j, row in zip(missing, fresh, strict=True):
                rows[j] = row
                self._cache[int(unique_keys[j])] = row
            while len(self._cache) > self._cache_rows:
                self._cache.popitem(last=False)
        table = np.stack(rows)  # [U, V]
        return torch.from_numpy(table[inverse.reshape(-1)])


@dataclass(frozen=True)
class EmbeddedModels:
    """The embedded draft/target pair and the tokenizer they share."""

    draft: KneserNeyLM
    target: KneserNeyLM
    tokenizer: WordTokenizer


@functools.lru_cache(maxsize=4)
def _training_stream(vocab_size: int) -> tuple[WordTokenizer, np.ndarray]:
    documents = load_corpus()
    tokenizer = WordTokenizer.fit(documents, vocab_size)
    return tokenizer, tokenizer.encode_corpus(documents)


@functools.lru_cache(maxsize=8)
def embedded_model(order: int, vocab_size: int = DEFAULT_VOCAB_SIZE) -> KneserNeyLM:
    """A Kneser–Ney model of the given order on the shipped corpus (trained on first use, kept in memory)."""
    tokenizer, stream = _training_stream(int(vocab_size))
    return KneserNeyLM.train(stream, tokenizer.vocab_size, order, bos_id=tokenizer.bos_id,
                             name=f"embedded-kn{order}-v{tokenizer.vocab_size}")


def embedded_models(draft_order: int = 2, target_order: int = 4,
                    vocab_size: int = DEFAULT_VOCAB_SIZE) -> EmbeddedModels:
    """The default pair: a bigram draft and a 4-gram target, word level, V = 2000, on stdlib docstrings.

    Training takes a few seconds the first time in a process; later calls return the same objects.
    """
    if draft_order < 1 or target_order < 1:
        raise InputError(f"orders must be >= 1, got draft {draft_order}, target {target_order}")
    check_vocab_size(vocab_size, "vocab_size")
    tokenizer, _ = _training_stream(int(vocab_size))
    return EmbeddedModels(embedded_model(int(draft_order), int(vocab_size)),
                          embedded_model(int(target_order), int(vocab_size)), tokenizer)


def ngram_sizes(model: KneserNeyLM) -> dict[int, int]:
    """Number of distinct n-grams stored per order (order 1: V)."""
    return {1: model.vocab_size, **{k: int(level.gram_keys.size) for k, level in model.levels.items()}}


def prompt_ids(tokenizer: WordTokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of text prompts, each starting with ``<s>``."""
    return [[tokenizer.bos_id, *tokenizer.encode(text)] for text in prompts]
