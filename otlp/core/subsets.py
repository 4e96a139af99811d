"""Subset selection: psi(H), its minimum, and alpha* = 1 + min_H psi(H).

GR eq. (4) / Thm 3.1 (hu2025towards): alpha* = 1 + min_{H subset of V} psi(H),
    psi(H) = p(H) - P_draft(omega in H^n).
For i.i.d. drafts psi(H) = p(H) - q(H)^n and the minimum is attained on a prefix of the tokens sorted by
decreasing q/p (GR Lemma 6.3 with A = empty, B = V): O(V log V).
"""

from __future__ import annotations

import numpy as np

from otlp.core.distributions import check_distribution
from otlp.core.drafts import IID, DraftScheme, Independent, WithoutReplacement, as_draft
from otlp.core.psi import (  # noqa: F401 - re-exported: otlp.core.subsets is where these have always been imported from
    MAX_BRUTE_FORCE_V,
    brute_force_min_psi,
    closed_form_min_psi,
    psi,
    ratio_order,
    sorted_prefix_arrays,
    sorted_prefix_psi,
)


def min_psi(p: np.ndarray, draft: DraftScheme) -> tuple[float, np.ndarray]:
    """min_H psi(H) and a minimiser, by the fastest exact route for the scheme.

    IID: sorted prefix, O(V log V). WithoutReplacement: the same prefixes (proved in :mod:`otlp.core.psi_wor`),
    F(H) in closed form (n <= 2) or by a trapezoid rule accurate to ~1e-15 (n >= 3), O(V log V + K n V). Greedy and
    SpecHub: psi is modular once the forced tokens are in H, so the minimiser takes every other token x with
    p(x) < P(x can be drafted) (closed form). Other schemes: brute force over 2^V for V <= 20, else
    :class:`~otlp.lp.formulations.subset_selection.SubsetSelection` (min cut or submodular minimisation).
    """
    draft = as_draft(draft)
    p = check_distribution(p, "p", size=draft.V)
    V = draft.V
    if isinstance(draft, WithoutReplacement):  # sorted prefix, F by closed form / quadrature (otlp.core.psi_wor)
        from otlp.core.psi_wor import wor_min_psi

        return wor_min_psi(p, draft)
    found = closed_form_min_psi(p, draft)
    if found is not None:
        return found
    if V <= MAX_BRUTE_FORCE_V:
        return brute_force_min_psi(p, draft)
    # psi is submodular for every draft scheme (P(omega in H^n) is a positive sum of supermodular indicators
    # 1[set(omega) subset of H]): exact min cut (n = 2 Independent) or Fujishige-Wolfe with a proven gap.
    from otlp.lp.formulations.subset_selection import SubsetSelection

    solution = SubsetSelection(p, draft).solve()
    return float(solution.value), np.asarray(solution.h_star, dtype=bool)


def optimal_acceptance(p: object, draft: DraftScheme) -> float:
    """alpha* = 1 + min_H psi(H) (GR Thm 3.1): the best acceptance any verification rule can reach for ``draft``.

    Examples
    --------
    >>> import otlp
    >>> round(otlp.optimal_acceptance([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2)), 12)
    0.85
    """
    draft = as_draft(draft)
    if isinstance(draft, Independent) and draft.n == 1:
        draft = IID(draft.qs[0], 1)
    value, _ = min_psi(p, draft)
    return min(max(1.0 + value, 0.0), 1.0)  # -1 <= min psi <= 0 (H = {} and every H): only rounding leaves [0, 1]
