"""Tiny Markov language models with explicit tables, so the law of the first T tokens is computable exactly."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy import stats

from otlp.decode.models import prefix_lists


class TableLM:
    """P(next | last ``order`` tokens) from a table of shape [V] * (order + 1); shorter prefixes are left-padded
    with token 0. Returns log probabilities."""

    def __init__(self, table: np.ndarray):
        self.table = np.asarray(table, dtype=np.float64)
        self.context_size = self.table.ndim - 1
        self.vocab_size = self.table.shape[-1]
        self.bos_id = 0

    @classmethod
    def random(cls, V: int, order: int, rng: np.random.Generator, concentration: float = 0.5) -> TableLM:
        return cls(rng.dirichlet(np.full(V, concentration), size=(V,) * order))

    def law(self, prefix: list[int]) -> np.ndarray:
        c = self.context_size
        ctx = ([0] * c + list(prefix))[len(prefix):] if c else []
        return self.table[tuple(ctx)]

    def next_token_logits(self, prefixes, lengths=None) -> torch.Tensor:
        rows = prefix_lists(prefixes, lengths)
        c = self.context_size
        ctx = np.array([([0] * c + r)[len(r):] for r in rows], dtype=np.int64).reshape(len(rows), c)
        probs = self.table[tuple(ctx.T)] if c else np.broadcast_to(self.table, (len(rows), self.vocab_size))
        with np.errstate(divide="ignore"):
            return torch.from_numpy(np.log(probs))


def exact_sequence_law(model: TableLM, prompt: list[int], T: int, transform=None) -> np.ndarray:
    """P(first T new tokens = s) for all s in V^T (lexicographic), with an optional transform of each
    next-token law (temperature / top-k applied by the caller)."""
    V = model.vocab_size
    out = np.empty(V**T)
    for idx, seq in enumerate(itertools.product(range(V), repeat=T)):
        prob = 1.0
        for t in range(T):
            law = model.law(prompt + list(seq[:t]))
            if transform is not None:
                law = transform(law)
            prob *= law[seq[t]]
        out[idx] = prob
    return out


def sequence_codes(tokens: list[list[int]], V: int, T: int) -> np.ndarray:
    arr = np.asarray([row[:T] for row in tokens], dtype=np.int64)
    return arr @ (V ** np.arange(T - 1, -1, -1))


def chi_square_p_value(observed_codes: np.ndarray, expected_law: np.ndarray, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; cells with expected count < min_expected are pooled into one."""
    N = observed_codes.size
    observed = np.bincount(observed_codes, minlength=expected_law.size).astype(np.float64)
    expected = expected_law * N
    big = expected >= min_expected
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        if obs[-1] > 0:
            return 0.0  # a sample where the law has no mass
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)
