"""Kneser–Ney n-gram models: the vectorised model against a naive dictionary implementation of the same formula."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from otlp.core.errors import InputError
from otlp.decode.corpus import WordTokenizer, load_corpus, words
from otlp.decode.ngram import KneserNeyLM, embedded_models


def naive_kneser_ney(stream: list[int], V: int, N: int):
    """Interpolated KN (Chen & Goodman 1999) written from the definition with dicts, one context at a time."""
    grams = {k: Counter(tuple(stream[i : i + k]) for i in range(len(stream) - k + 1)) for k in range(1, N + 1)}
    counts = {N: dict(grams[N])}
    for k in range(1, N):  # continuation counts N1+(. g)
        cont = defaultdict(int)
        for g in grams[k + 1]:
            cont[g[1:]] += 1
        counts[k] = dict(cont)

    def discount(c):
        values = list(c.values())
        n1, n2 = values.count(1), values.count(2)
        return 0.75 if n1 == 0 or n2 == 0 else n1 / (n1 + 2 * n2)

    D = {k: discount(counts[k]) for k in counts}
    uni = np.zeros(V)
    for (w,), c in counts[1].items():
        uni[w] = c
    total, types = uni.sum(), np.count_nonzero(uni)
    p1 = np.maximum(uni - D[1], 0) / total + D[1] * types / total / V

    def prob(history: tuple) -> np.ndarray:
        if len(history) == 0:
            return p1
        lower = prob(history[1:])
        k = len(history) + 1
        followers = {g[-1]: c for g, c in counts[k].items() if g[:-1] == history}
        if not followers:
            return lower
        tot = sum(followers.values())
        out = D[k] * len(followers) / tot * lower
        for w, c in followers.items():
            out[w] += max(c - D[k], 0) / tot
        return out

    return prob


@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_vectorised_kneser_ney_matches_naive_definition(N):
    rng = np.random.default_rng(N)
    V = 7
    stream = rng.choice(V, size=400, p=rng.dirichlet(np.full(V, 0.6))).tolist()
    model = KneserNeyLM.train(np.array(stream), V, N)
    naive = naive_kneser_ney(stream, V, N)
    histories = np.array(list(itertools.product(range(V), repeat=N - 1)), dtype=np.int64).reshape(V ** (N - 1), N - 1)
    got = model.probabilities(histories)  # includes contexts never seen in training
    want = np.stack([naive(tuple(h)) for h in histories.tolist()])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
    assert (got > 0).all()


def test_logits_interface_cache_and_padding():
    rng = np.random.default_rng(0)
    V = 9
    model = KneserNeyLM.train(rng.integers(0, V, size=500), V, 3, bos_id=1)
    prefixes = [[3, 4, 5], [5], [], [2, 2, 3, 4, 5]]
    logits = model.next_token_logits(prefixes)
    assert logits.shape == (4, V) and logits.dtype == torch.float64
    np.testing.assert_allclose(logits[0].numpy(), logits[3].numpy())  # only the last 2 tokens matter
    np.testing.assert_allclose(logits[1].numpy(), np.log(model.probabilities(np.array([[1, 5]])))[0])  # BOS pad
    again = model.next_token_logits(prefixes)  # served from the cache
    assert torch.equal(logits, again)
    padded = torch.tensor([[3, 4, 5, 0, 0], [5, 0, 0, 0, 0], [0, 0, 0, 0, 0], [2, 2, 3, 4, 5]])
    assert torch.equal(model.next_token_logits(padded, torch.tensor([3, 1, 0, 5])), logits)
    with pytest.raises(InputError, match="token ids"):
        model.next_token_logits([[V]])
    with pytest.raises(InputError, match="lengths"):
        model.next_token_logits(padded, [1, 2])


def test_embedded_pair_is_a_real_heavy_tailed_language_model():
    pair = embedded_models()
    V = pair.tokenizer.vocab_size
    assert V == pair.draft.vocab_size == pair.target.vocab_size == 2000
    assert (pair.draft.order, pair.target.order) == (2, 4)
    prompt = [pair.tokenizer.bos_id, *pair.tokenizer.encode("return the value of the")]
    p = pair.target.next_token_logits([prompt]).exp()[0].numpy()
    q = pair.draft.next_token_logits([prompt]).exp()[0].numpy()
    for law in (p, q):
        assert abs(law.sum() - 1) < 1e-12 and law.min() > 0
        top = np.sort(law)[::-1]
        assert 0.05 < top[:10].sum() < 0.95  # neither a point mass nor flat
        assert top[:100].sum() < 0.999  # a long tail holds real mass
    tv = 0.5 * np.abs(p - q).sum()
    assert 0.05 < tv < 0.95  # the draft is informative but differs from the target
    # the 4-gram is sharper than the bigram on held-in text: lower cross-entropy on a corpus excerpt
    doc = [pair.tokenizer.bos_id, *pair.tokenizer.encode(load_corpus()[3])][:200]
    ids = torch.tensor(doc[1:])
    ce = {m.order: -m.next_token_logits([doc[:i] for i in range(1, len(doc))]).gather(1, ids[:, None]).mean()
          for m in (pair.draft, pair.target)}
    assert ce[4] < ce[2]


def test_tokenizer_round_trip_and_vocabulary():
    docs = ["Return the value.", "the value of x is 3"]
    tok = WordTokenizer.fit(docs, 6)
    assert tok.vocabulary[:2] == ("<unk>", "<s>") and tok.vocab_size == 6
    assert words("Hello, World") == ["hello", ",", "world"]
    ids = tok.encode("the value")
    assert tok.decode(ids) == "the value"
    assert tok.encode_corpus(docs)[0] == tok.bos_id
    with pytest.raises(InputError):
        WordTokenizer.fit(docs, 2)


def test_bad_training_input():
    with pytest.raises(InputError):
        KneserNeyLM.train(np.array([0, 1, 5]), 3, 2)
    with pytest.raises(InputError):
        KneserNeyLM.train(np.array([0, 1]), 3, 4)
