"""Comparing the empirical token law of the decode stream with plain target sampling."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def token_counts(streams: Sequence[Sequence[int]], V: int) -> np.ndarray:
    """Unigram counts over all streams: float64 [V]."""
    flat = np.fromiter((t for s in streams for t in s), dtype=np.int64)
    return np.bincount(flat, minlength=V).astype(np.float64)


def compare_token_laws(stream_a: Sequence[Sequence[int]], stream_b: Sequence[Sequence[int]], V: int,
                       min_expected: float = 5.0) -> dict:
    """Two-sample test that two token streams share one unigram law.

    Returns the total-variation distance between the empirical laws and Pearson's chi-square test of homogeneity
    on the 2 x K contingency table (tokens whose expected count is below ``min_expected`` in either row pooled into
    one cell). The tokens of one stream are dependent (a Markov chain), so the p-value is a screening number, not
    an exact test; the exact law tests live in tests/decode.
    """
    a, b = token_counts(stream_a, V), token_counts(stream_b, V)
    na, nb = a.sum(), b.sum()
    tv = 0.5 * float(np.abs(a / max(na, 1) - b / max(nb, 1)).sum())
    pooled = (a + b) / max(na + nb, 1)
    big = (pooled * min(na, nb)) >= min_expected
    table = np.stack([np.append(a[big], a[~big].sum()), np.append(b[big], b[~big].sum())])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return {"tv": tv, "chi2": 0.0, "dof": 0, "p_value": 1.0, "tokens": [int(na), int(nb)]}
    from scipy import stats  # here, not at import: scipy.stats costs ~1 s of start-up for every decode run

    chi2, p_value, dof, _ = stats.chi2_contingency(table, correction=False)
    return {"tv": tv, "chi2": float(chi2), "dof": int(dof), "p_value": float(p_value), "tokens": [int(na), int(nb)]}
