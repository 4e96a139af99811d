"""Exact OT for any draft scheme with an enumerable support, through the relaxed OTLP (GR eq. (2), (3)).

Used by :class:`otlp.optimal.OptimalTransport` for drafts other than i.i.d. (Independent, Greedy, SpecHub, Joint;
WithoutReplacement takes :mod:`.wor`'s plan on the same support, and this LP where that stalls). The block structure
of the design note is proved only for i.i.d. drafts, so these take this route: solve

    max sum S[i, omega]  s.t.  sum_omega S[i, omega] <= p_i,  sum_i S[i, omega] <= P(omega),
                               S >= 0, S[i, omega] = 0 unless i in set(omega)

with HiGHS (``scipy.optimize.linprog(method="highs-ipm")``; otlp.lp.formulations.RelaxedOTLP landed later), then
complete it (GR eq. (3)) with :func:`otlp.lp.formulations.completion.residual_completion`, the package's one
completion: C = S + w P_res^T with w = p_res / sum_j p_res(j) (= p_res / (1 - alpha*)). HiGHS meets the
constraints only to its tolerance (1e-10 absolute here: a column above a light tuple's P(omega), a row above p_i, a
negative entry), so the completion first repairs S (negatives clipped, columns then rows scaled down) and, when
sum p_res = 0 while a column is short (rounding, or a tuple too light to carry flow), takes w = p. The slice for
omega is C[:, omega] / P(omega): accept slot k with probability S[omega_k, omega] / P(omega), reject with
probability P_res(omega) / P(omega) and draw from w. Every slice is then a distribution and the output law is p
to rounding, whatever HiGHS left; the rule's acceptance is alpha* to HiGHS' tolerance. Size:
sum_omega |set(omega)| variables, so this is for small V^n.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import scipy.optimize
import scipy.sparse

from otlp.core import xp as X
from otlp.core.distributions import check_distribution
from otlp.core.drafts import DraftScheme, as_draft
from otlp.core.errors import InputError
from otlp.lp.formulations.completion import residual_completion

#: the algorithms tried in turn by :func:`relaxed_lp_plan`. First the interior-point method (then crossover to a
#: vertex): dual simplex stalls on degenerate instances, e.g. Independent drafts with a draft equal to p
#: (alpha* = 1): V = 150, n = 2 takes 42.7 s by simplex, 2.5 s here; V = 300 about 20 min vs 27 s (non-degenerate:
#: V = 150 1.8 -> 0.7 s, V <= 100 the same). HiGHS' default feasibility tolerance 1e-7 left the value up to 1e-7
#: above alpha* (simplex too); 1e-10 brings it to ~1e-12 at the same speed (heavy-tailed IID, V = 100, n = 2).
#: The IPM can end with "model_status Unknown" (WithoutReplacement(q, 3) with q a permutation of p, V = 6:
#: issue 17), so dual simplex with the same tolerances, then HiGHS' defaults, follow.
LP_ATTEMPTS: tuple[tuple[str, dict], ...] = (
    ("highs-ipm", {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10,
                   "ipm_optimality_tolerance": 1e-12}),
    ("highs-ds", {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}),
    ("highs", {}),
)


def relaxed_lp_plan(p: np.ndarray, omegas: np.ndarray, probs: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Solve the relaxed OTLP on the given support with scipy's HiGHS.

    ``omegas int [M, n]``, ``probs float [M]``. Returns ``(alpha, S float [M, n], var int [M, n])`` where ``S[m, k]``
    is the mass sent from token ``omegas[m, k]`` to tuple m (0 on repeated slots) and ``var[m, k]`` the LP variable
    of that slot (-1 on repeated slots).
    """
    M, n = omegas.shape
    V = p.size
    m_idx, k_idx = _distinct_slots(omegas)
    nvar = m_idx.size
    var = np.full((M, n), -1, dtype=np.int64)
    var[m_idx, k_idx] = np.arange(nvar)
    tokens = omegas[m_idx, k_idx]
    rows = np.concatenate([tokens, V + m_idx])
    cols = np.concatenate([np.arange(nvar), np.arange(nvar)])
    A = scipy.sparse.csr_matrix((np.ones(2 * nvar), (rows, cols)), shape=(V + M, nvar))
    b = np.concatenate([p, probs])
    res = None
    for method, options in LP_ATTEMPTS:  # a valid instance never fails: on a HiGHS breakdown, the next algorithm
        res = scipy.optimize.linprog(-np.ones(nvar), A_ub=A, b_ub=b, bounds=(0, None), method=method,
                                     options=options)
        if res.status == 0 and res.x is not None and np.all(np.isfinite(res.x)):
            break
    else:
        raise RuntimeError(f"HiGHS did not solve the relaxed OTLP by any of {[m for m, _ in LP_ATTEMPTS]}: "
                           f"{res.message}")
    S = np.zeros((M, n))
    S[m_idx, k_idx] = np.maximum(res.x, 0.0)
    return float(-res.fun), S, var


class LinearProgramRule:
    """The relaxed-LP route: an exact optimal rule for any enumerable draft scheme (small V^n); a subclass may plan
    otherwise (:meth:`_plan`; :class:`.wor.WithoutReplacementRule`) and keep the completion and checks here."""

    #: which plan the rule took (:attr:`otlp.optimal.OptimalTransport.route`)
    route = "lp"

    def __init__(self, p: object, draft: DraftScheme):
        draft = as_draft(draft)
        self.p = check_distribution(p, "p", size=draft.V)
        self.n, self.V = draft.n, draft.V
        omegas, probs = self._support(draft)  # refuses (ModelTooLargeError) when too big
        if omegas.shape[0] == 0:
            raise InputError("the draft scheme has an empty support")
        self.alpha, S_slots, var = self._plan(draft, omegas, probs)  # S_slots, var [M, n]
        m_idx, k_idx = np.nonzero(var >= 0)  # the LP's variables: one arc per distinct (token, tuple) pair
        arc_token = omegas[m_idx, k_idx]  # [K]
        S_arc, w, d_res = residual_completion(self.p, probs, S_slots[m_idx, k_idx], arc_token, m_idx)  # GR eq. (3)
        S = np.zeros(omegas.shape)  # [M, n], 0 on repeated slots
        S[m_idx, k_idx] = S_arc
        self.residual = w  # [V], sums to 1
        self._row_sums = np.bincount(arc_token, S_arc, self.V)  # [V], <= p
        # HiGHS' objective sits above alpha* by up to its tolerance (9e-11 seen, even above 1: issue 17); the
        # repaired plan S_arc is feasible (rows <= p, columns <= P(omega), S >= 0), so its value is a certified
        # lower bound on alpha*, within HiGHS' tolerance of it: report that, never above 1
        self.lp_value = self.alpha
        self.alpha = min(float(self._row_sums.sum()), self.alpha, 1.0)
        self._tokens = np.unique(omegas)  # [k] the tokens the support draws: codes in base k, not V
        self._codes = encode_tuples(omegas, self._tokens)[0]
        self._sort = np.argsort(self._codes)
        self._probs = probs
        self._accept = S / probs[:, None]  # [M, n]; support(): probs > 0
        self._reject = d_res / probs  # [M], P_res(omega) / P(omega)
        self._draft = draft

    @cached_property
    def _dual(self) -> tuple[float, np.ndarray | None]:
        """``(alpha_upper, h_star)``, on first use (a sampler never reads them): alpha* <= 1 + psi(H) for every H
        (GR eq. (4)), so 1 + psi(H*) of the exact subset search bounds it from above (plus 8 (V + n) epsilons for
        psi's rounding), and alpha_upper - alpha bounds the LP's shortfall on this instance (HiGHS' absolute
        tolerance, 1e-10 a constraint, costs up to about 1.2e-10 where p or P(omega) hold entries of that size; issue
        44's WithoutReplacement example: 3.6e-12); (1, None) where there is no closed form and V is too large for
        brute force."""
        from otlp.core.subsets import min_psi

        try:
            psi, mask = min_psi(self.p, self._draft)
        except InputError:
            return 1.0, None
        margin = 8.0 * (self.V + self.n) * np.finfo(np.float64).eps  # psi's float rounding (1.9e-15 seen)
        return max(min(1.0, 1.0 + float(psi) + margin), self.alpha), np.flatnonzero(mask)

    @property
    def alpha_upper(self) -> float:
        return self._dual[0]

    @property
    def h_star(self) -> np.ndarray | None:
        return self._dual[1]

    def _support(self, draft: DraftScheme) -> tuple[np.ndarray, np.ndarray]:
        """The rows the rule is planned on, ``(omegas [M, n], probs [M])``: the drafted tuples; a subclass whose rule
        reads less of a tuple may plan on fewer rows (:meth:`_canonical` maps a tuple to its row)."""
        return draft.support()

    def _canonical(self, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """``omegas [M, n]`` as rows of :meth:`_support` and, where a row lists the tuple's tokens in another order,
        each slot's place in its row (``[M, n]``; None: the same order)."""
        return omegas, None

    def _plan(self, draft: DraftScheme, omegas: np.ndarray, probs: np.ndarray):  # noqa: ARG002, ANN202
        """``(value, S [M, n], var [M, n])`` of the relaxed OTLP on the support (:func:`relaxed_lp_plan`); a subclass
        may give another optimal plan in the same form."""
        return relaxed_lp_plan(self.p, omegas, probs)

    def acceptance(self) -> float:
        return float(self._row_sums.sum())

    def rule(self, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        omegas, place = self._canonical(omegas)
        codes, known = encode_tuples(omegas, self._tokens)  # known: no token the support never draws
        pos = np.searchsorted(self._codes[self._sort], codes)
        pos = np.minimum(pos, self._codes.size - 1)
        found = (self._codes[self._sort][pos] == codes) & known
        m = self._sort[pos]
        accept = np.where(found[:, None], self._accept[m], 0.0)  # [M, n] by the row's slots
        if place is not None:
            accept = np.take_along_axis(accept, place, axis=1)  # by the tuple's slots
        reject = np.where(found, self._reject[m], 0.0)
        accept[~found, 0] = 1.0  # a tuple the draft never produces: any law will do; output its first token
        return accept, reject


def _distinct_slots(omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slots (m, k) whose token does not occur earlier in tuple m: ``omegas [M, n]`` -> ``(m [K], k [K])``."""
    same = omegas[:, :, None] == omegas[:, None, :]  # [M, n, n]
    return np.nonzero(X.first_true(same) == np.arange(omegas.shape[1]))  # the first l with w_l == w_k is k itself


def encode_tuples(omegas: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [M], known [M])``: each tuple as one sortable key, its tokens' places in the sorted ``tokens [k]`` as
    digits in base k (int64 where k^n < 2^63, else the rows' bytes), and whether every token is in ``tokens``."""
    w = omegas.astype(np.int64)
    n, k = w.shape[1], max(tokens.size, 1)
    at = np.minimum(np.searchsorted(tokens, w), k - 1) if tokens.size else np.zeros_like(w)  # [M, n]
    known = (tokens[at] == w).all(1) if tokens.size else np.zeros(w.shape[0], dtype=bool)
    if k ** n < 2 ** 63:
        return at @ (k ** np.arange(n - 1, -1, -1, dtype=np.int64)), known
    return np.ascontiguousarray(at).view(np.dtype((np.void, 8 * n))).ravel(), known  # (compared as bytes)
