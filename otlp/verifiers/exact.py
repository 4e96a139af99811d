"""Exact induced coupling, output law and acceptances of any verifier, by enumeration of the draft support.

Each verifier supplies ``conditional(p, draft, omegas)``: pi(. | omega), the law of the output token given the drafted
tuple with the rule's own coins integrated out analytically. Then, over the support of P_draft,

    coupling      C[i, omega] = P_draft(omega) pi(i | omega)           (the OTLP plan the rule induces)
    output law    sum_omega P_draft(omega) pi(. | omega)                 (must equal p)
    acceptance    sum_omega P_draft(omega) pi(set(omega) | omega)        (OTLP objective, GR eq. (1))
    verifier acc. sum_omega P_draft(omega) P(rule accepts | omega)

Work is chunked so that at most ``MAX_CELLS`` float64 cells (tuples x V) are alive at once.
"""

from __future__ import annotations

import numpy as np

from otlp.core.drafts import DraftScheme
from otlp.core.errors import ModelTooLargeError

#: Largest number of (tuple, token) cells one chunk may hold (128 MiB of float64).
MAX_CELLS = 1 << 24
#: Refuse to enumerate more than this many (tuple, token) cells in total.
MAX_TOTAL_CELLS = 1_000_000_000


def _chunks(verifier, p: object, draft: DraftScheme):  # noqa: ANN001, ANN202
    p, draft = verifier.check_draft(p, draft)
    if type(draft).support is DraftScheme.support:  # generic support enumerates V^n: refuse before building it
        draft.check_enumerable()
        total = draft.num_tuples() * p.size
        if total > MAX_TOTAL_CELLS:
            raise ModelTooLargeError(f"enumerating the {verifier.name!r} rule on {draft.tuples_text()} draft "
                                     f"tuples x V = {p.size} tokens", total * 8, MAX_TOTAL_CELLS * 8)
    omegas, probs = draft.support()
    total = omegas.shape[0] * p.size
    if total > MAX_TOTAL_CELLS:
        raise ModelTooLargeError(
            f"enumerating the {verifier.name!r} rule on {omegas.shape[0]} draft tuples x V = {p.size} tokens",
            total * 8, MAX_TOTAL_CELLS * 8,
        )
    step = max(1, MAX_CELLS // max(p.size, 1))
    for start in range(0, omegas.shape[0], step):
        w = omegas[start:start + step]
        law, accepts = verifier.conditional(p, draft, w)
        yield p, w, probs[start:start + step], law, accepts


def summary(verifier, p: object, draft: DraftScheme) -> dict[str, object]:  # noqa: ANN001
    """One pass over the support: ``{"output_law": [V], "acceptance": float, "verifier_acceptance": float,
    "min_conditional": float, "max_row_error": float}`` (the last two check that each pi(. | omega) is a law)."""
    out = None
    acc = 0.0
    vacc = 0.0
    min_entry = np.inf
    row_err = 0.0
    for p_arr, w, probs, law, accepts in _chunks(verifier, p, draft):
        if out is None:
            out = np.zeros(p_arr.size)
        out += probs @ law
        in_set = np.zeros_like(law, dtype=bool)
        rows = np.arange(w.shape[0])
        for k in range(w.shape[1]):
            in_set[rows, w[:, k]] = True
        acc += float(probs @ np.where(in_set, law, 0.0).sum(axis=1))
        vacc += float(probs @ accepts)
        min_entry = min(min_entry, float(law.min()))
        row_err = max(row_err, float(np.abs(law.sum(axis=1) - 1.0).max()))
    return {"output_law": out, "acceptance": acc, "verifier_acceptance": vacc, "min_conditional": min_entry,
            "max_row_error": row_err}


def output_law(verifier, p: object, draft: DraftScheme) -> np.ndarray:  # noqa: ANN001
    """sum_omega P_draft(omega) pi(. | omega), ``float64 [V]``."""
    return summary(verifier, p, draft)["output_law"]


def acceptance(verifier, p: object, draft: DraftScheme) -> float:  # noqa: ANN001
    """P(output token in set(omega)) by enumeration."""
    return float(summary(verifier, p, draft)["acceptance"])


def verifier_acceptance(verifier, p: object, draft: DraftScheme) -> float:  # noqa: ANN001
    """P(the rule accepts a draft) by enumeration."""
    return float(summary(verifier, p, draft)["verifier_acceptance"])


def induced_coupling(verifier, p: object, draft: DraftScheme) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """The coupling the rule induces on the draft support: ``(omegas [M, n], C [V, M])`` with
    ``C[i, m] = P_draft(omega_m) pi(i | omega_m)``; its row sums are the output law, its column sums P_draft."""
    omegas, columns = [], []
    for _, w, probs, law, _ in _chunks(verifier, p, draft):
        omegas.append(w)
        columns.append((probs[:, None] * law).T)
    return np.concatenate(omegas), np.concatenate(columns, axis=1)
