"""A path-aware optimal rule for i.i.d. drafts (issue 18): acceptance alpha*, then the most drafted paths alive.

In a token tree, when the verifier outputs a drafted token i, the count_i(omega) paths that drafted i continue. The
alpha*-optimal rules are not unique and differ in E[continuing paths] = sum_omega P(omega) sum_i pi(i | omega)
count_i(omega) (:mod:`otlp.lp.formulations.path_aware`). ``PathAwareTransport`` starts from the class-chain plan of
:mod:`.chains` (exact, acceptance alpha*) and re-plans the tuples drawn from a *window* T of the most likely draft
tokens by a linear program:

    variables  S[i, w] = P(w) a_i(w) >= 0 for every multiset w in T^n (up to order) and i in set(w)
    max        sum count_i(w) S[i, w]
    s.t.       sum_i S[i, w] <= P(w)                                  (a tuple accepts at most once)
               sum_w S[i, w] <= p_i - R0_i(outside)   for i in T          (R0_i(outside): what the class chains
                                                                           give token i from tuples not in T^n)
               sum S = sum S0                                           (S0: the class chains on T^n; acceptance
                                                                           stays alpha*)

Every tuple outside T^n keeps the class-chain slots. A rejected tuple (any) draws from the residual
r = (p - R) / (1 - sum R) with R the new row sums, so the output law is R + (1 - sum R) r = p exactly, whatever the
LP returned (its solution is first repaired to exact feasibility: negatives clipped, columns then rows scaled
down). The acceptance is alpha* up to that repair (HiGHS' feasibility tolerance, 1e-10 here). Since S0 is feasible,
E[continuing paths] is never below the class chains' (up to the same tolerance).

When T holds every token of positive q (V small: C(|T| + n - 1, n) <= ``max_tuples``), the program is the whole
lexicographic LP of :class:`otlp.lp.formulations.PathAwareOTLP` in its symmetric (multiset) form, so the rule attains
its optimum; the tests check both. With a smaller window the rule is exact in law and acceptance and its count lies
between the class chains' and the optimum (benchmarks/block_efficiency.py measures where).

This is an LP-backed rule, not a closed form: one LP of about n * ``max_tuples`` variables per (p, q) pair
(milliseconds at the default), host-side numpy and HiGHS, so the decode-loop sampler loops over the rows.
"""

from __future__ import annotations

from math import comb

import numpy as np

from otlp.core.distributions import as_generator, check_distribution, check_n, check_token_tuples
from otlp.core.errors import InputError
from otlp.lp.formulations.incidence import incidence_pairs
from otlp.lp.formulations.path_aware import tuple_counts
from otlp.lp.ir import LinearModel
from otlp.optimal.transport import OptimalTransport

#: the largest window (number of multisets) re-planned by default: every token at V <= 17 with n = 3, V <= 44 with
#: n = 2, the top 10 tokens with n = 4.
MAX_TUPLES = 1000


def window_size(q: np.ndarray, n: int, max_tuples: int = MAX_TUPLES) -> int:
    """The number k of most likely draft tokens whose multisets of size n number at most ``max_tuples``."""
    k = 0
    support = int(np.count_nonzero(q > 0))
    while k < support and comb(k + n, n) <= max_tuples:
        k += 1
    return k


def multisets(tokens: np.ndarray, n: int) -> np.ndarray:
    """Every multiset of size n over ``tokens [k]`` as a non-decreasing index tuple: ``int64 [C(k + n - 1, n), n]``
    of token ids (lexicographic in the positions of ``tokens``)."""
    k = tokens.size
    idx = np.zeros((1, 0), dtype=np.int64)
    for _ in range(n):  # extend every prefix by an index >= its last
        last = idx[:, -1] if idx.shape[1] else np.zeros(idx.shape[0], dtype=np.int64)
        reps = k - last
        rows = np.repeat(np.arange(idx.shape[0]), reps)
        nxt = np.concatenate([np.arange(a, k) for a in last]) if idx.shape[0] else np.zeros(0, dtype=np.int64)
        idx = np.concatenate([idx[rows], nxt[:, None]], axis=1)
    return np.asarray(tokens, dtype=np.int64)[idx]


def multiset_probabilities(omegas: np.ndarray, q: np.ndarray) -> np.ndarray:
    """P(the n i.i.d. drafts form the multiset omega) = n! / prod_i c_i! prod q: ``omegas [M, n]`` (sorted rows)."""
    M, n = omegas.shape
    prob = np.prod(q[omegas], axis=1)
    # multiplicities: a run of equal tokens in a sorted row
    same = np.ones((M, n), dtype=np.int64)
    for k in range(1, n):
        same[:, k] = np.where(omegas[:, k] == omegas[:, k - 1], same[:, k - 1] + 1, 1)
    from math import factorial

    if n > 170:  # n! beyond float64 (an OverflowError at n = 1100): the same product in logarithms
        from math import lgamma

        with np.errstate(divide="ignore"):
            logs = np.log(q[omegas]).sum(axis=1) + lgamma(n + 1) - np.log(same).sum(axis=1)
        return np.exp(logs)
    denom = np.ones(M)
    for k in range(n):
        denom *= same[:, k]  # prod_i c_i! = prod over slots of the slot's rank inside its run
    return prob * factorial(n) / denom


def continuing_paths(accept: np.ndarray, omegas: np.ndarray) -> np.ndarray:
    """Per tuple, E[number of drafts equal to the accepted output]: ``accept [M, n]`` (a repeated token's mass on any
    of its slots), ``omegas [M, n]`` -> ``[M]``."""
    counts = (omegas[:, :, None] == omegas[:, None, :]).sum(-1)  # [M, n]: multiplicity of each slot's token
    return (accept * counts).sum(-1)


class PathAwareTransport:
    """The path-aware rule of the module docstring for target ``p [V]`` and n i.i.d. drafts from ``q [V]``.

    ``max_tuples``: the window's size in multisets (``MAX_TUPLES``); ``backend``: the LP backend
    (:mod:`otlp.lp.solvers`). Attributes: ``alpha`` (alpha*), ``window`` (token ids of T), ``residual`` (the law a
    rejected tuple draws from), ``base`` (the class-chain :class:`OptimalTransport`), ``lp_value`` /
    ``base_value`` (E[continuing paths] over the whole draft law, by the new plan and by the class chains),
    ``exact_window`` (T holds every token of positive q: the plan attains the lexicographic optimum).

    >>> import otlp
    >>> rule = PathAwareTransport([0.1, 0.6, 0.3], [0.5, 0.3, 0.2], 2)
    >>> round(rule.alpha, 12), round(rule.lp_value, 9), rule.exact_window
    (0.85, 1.08, True)
    """

    def __init__(self, p: object, q: object, n: int, *, max_tuples: int = MAX_TUPLES, backend: str = "highs"):
        self.p = check_distribution(p, "p")
        self.q = check_distribution(q, "q", size=self.p.size)
        self.n = check_n(n)
        self.V = self.p.size
        if isinstance(max_tuples, bool) or not isinstance(max_tuples, (int, np.integer)) or max_tuples < 1:
            raise InputError(f"max_tuples must be a positive integer, got {max_tuples!r}")
        self.base = OptimalTransport.from_arrays(self.p, self.q, self.n)
        self.alpha = self.base.alpha
        k = window_size(self.q, self.n, int(max_tuples))
        self.window = np.argsort(-self.q, kind="stable")[:k].astype(np.int64)  # [k]
        self.exact_window = k == int(np.count_nonzero(self.q > 0))
        self._in_window = np.zeros(self.V, dtype=bool)
        self._in_window[self.window] = True
        self._index = np.full(self.V, -1, dtype=np.int64)
        self._index[self.window] = np.arange(k)
        self.omegas = multisets(self.window, self.n)  # [M, n]
        self.probs = multiset_probabilities(self.omegas, self.q)  # [M]
        self._solve(backend)

    def _solve(self, backend: str) -> None:
        from otlp.lp.solvers import solve

        base, w, P = self.base, self.omegas, self.probs
        accept0, _ = base.rule(w)  # [M, n], a repeated token's mass on its first slot
        tokens, cols = incidence_pairs(w, self.V)  # [K]
        slot_token = w[cols]  # [K, n]
        a0 = (np.where(slot_token == tokens[:, None], accept0[cols], 0.0)).sum(1)  # [K] accept of the pair's token
        S0 = P[cols] * a0  # [K]
        R0 = base.row_sums  # [V]
        inside = np.bincount(tokens, weights=S0, minlength=self.V)
        # caps that the class chains' own window plan S0 meets exactly (it can miss p or P(w) by rounding), so the LP
        # is feasible by construction
        cap = np.maximum(self.p - (R0 - inside), inside)  # [V]
        P = np.maximum(P, np.bincount(cols, weights=S0, minlength=P.size))
        counts = tuple_counts(w, tokens, cols)
        K = tokens.size
        model = LinearModel("PathAwareWindow", sense="max")
        S = model.add_block("S", K, lower=0.0)
        model.set_objective("S", counts)
        pairs = S.offset + np.arange(K)
        model.add_rows("p", tokens, pairs, 1.0, -np.inf, cap, count=self.V)
        model.add_rows("draft", cols, pairs, 1.0, -np.inf, P, count=P.size)
        total = float(S0.sum())
        model.add_rows("acceptance", np.zeros(K, dtype=np.int64), pairs, 1.0, total, total, count=1)
        sol = solve(model, backend)
        if not sol.optimal and backend == "highs":  # HiGHS' presolve can misjudge masses near 1e-20: once more without
            sol = solve(model, backend, presolve="off")
        if sol.optimal:
            S_new = _repair(np.asarray(sol.primal["S"], dtype=np.float64), tokens, cols, cap, P)
        else:  # keep the class chains (always feasible); recorded for the caller
            S_new = S0
        self.status = sol.status
        self._S, self._tokens, self._cols = S_new, tokens, cols
        rows = R0 - inside + np.bincount(tokens, weights=S_new, minlength=self.V)  # [V]
        self.row_sums = np.minimum(rows, self.p)
        accepted = float(self.row_sums.sum())
        left = np.maximum(self.p - self.row_sums, 0.0)
        self.residual = left / left.sum() if left.sum() > 0 else self.p.copy()
        self._accepted = accepted
        # E[continuing paths] of the whole law: outside T^n the class chains' (exact sums over the window's
        # complement are not enumerated: base_value uses the same complement, so the difference is exact)
        self.window_gain = float(counts @ S_new - counts @ S0)
        # the window's acceptance table by multiset: a[m, j] for the j-th slot of w[m] (first occurrence only)
        a = np.zeros_like(accept0)
        first = _first_slots(w)
        slot_of_pair = np.argmax((slot_token == tokens[:, None]) & first[cols], axis=1)
        a[cols, slot_of_pair] = np.where(P[cols] > 0, S_new / np.where(P[cols] > 0, P[cols], 1.0), 0.0)
        self._window_accept = a  # [M, n]

    @property
    def base_value(self) -> float:
        """E[continuing paths] of the class-chain plan, by enumeration of all multisets (small V only)."""
        return _enumerated_value(self.base, self.q, self.n)

    @property
    def lp_value(self) -> float:
        """E[continuing paths] of this rule (the class chains' plus the window's gain)."""
        return self.base_value + self.window_gain

    def acceptance(self) -> float:
        """The rule's acceptance sum_i R_i (alpha* up to the LP's tolerance, never above it)."""
        return min(self._accepted, self.alpha)

    def rule(self, omegas: object) -> tuple[np.ndarray, np.ndarray]:
        """``omegas int [M, n]`` -> ``(accept [M, n], reject [M])`` as :meth:`OptimalTransport.rule`: slot k is
        output with probability accept[:, k] (a repeated token on its first slot), else a draw from
        :attr:`residual`."""
        w = check_token_tuples(omegas, self.n, self.V)
        accept, reject = self.base.rule(w)
        inside = self._in_window[w].all(axis=1)
        if inside.any():
            wi = w[inside]
            sorted_w = self.window[np.sort(self._index[wi], axis=1)]  # [Mi, n] in window order
            m = self._multiset_index(sorted_w)
            a_sorted = self._window_accept[m]  # [Mi, n] on the sorted slots (first occurrence of each token)
            mass = (np.where(wi[:, :, None] == sorted_w[:, None, :], a_sorted[:, None, :], 0.0)).sum(-1)  # by token
            acc = np.where(_first_slots(wi), mass, 0.0)  # [Mi, n]: each token's mass on its first slot
            accept = accept.copy()
            reject = reject.copy()
            accept[inside] = acc
            reject[inside] = np.maximum(1.0 - acc.sum(1), 0.0)
        return accept, reject

    def _multiset_index(self, sorted_w: np.ndarray) -> np.ndarray:
        """Row of :attr:`omegas` of each sorted tuple: the lexicographic rank of its window indices."""
        k, n = self.window.size, self.n
        idx = self._index[sorted_w]  # [M, n], non-decreasing
        # rank = number of multisets before it: sum over slots of the multisets with a smaller index at that slot
        rank = np.zeros(idx.shape[0], dtype=np.int64)
        low = np.zeros(idx.shape[0], dtype=np.int64)
        for j in range(n):
            left = n - j - 1  # slots after j
            for a in range(k):  # small k: count the prefixes with index a at slot j, low <= a < idx_j
                use = (a >= low) & (a < idx[:, j])
                rank += np.where(use, comb(k - a + left - 1, left), 0)
            low = idx[:, j]
        return rank

    def slices(self, omegas: object) -> np.ndarray:
        """pi(· | omega) for many tuples: ``[M, n]`` -> ``float [M, V]``."""
        w = check_token_tuples(omegas, self.n, self.V)
        accept, reject = self.rule(w)
        out = reject[:, None] * self.residual[None, :]
        np.add.at(out, (np.repeat(np.arange(w.shape[0]), self.n), w.ravel()), accept.ravel())
        return out

    def sample(self, omegas: object, rng: object = None, uniforms: np.ndarray | None = None):  # noqa: ANN201
        """One output token per drafted tuple: slot by ``u[:, 0]``, residual token by ``u[:, 1]`` (``uniforms [M,
        2]``, else drawn from ``rng``) -> ``(tokens int64 [M], accepted_index int64 [M])`` (-1: residual)."""
        return _sample(self, omegas, rng, uniforms)


class TwoDraftPaths:
    """The exact path-optimal rule for n = 2 i.i.d. drafts (:func:`two_draft_tuple_rule`) for one (p, q): the
    class-chain plan with the doubled tuples of H* accepted at min(1, p_a / q_a^2) and the tokens of H* scaled
    down in mixed tuples to keep their row sums. Law p, acceptance alpha*, E[continuing paths] = alpha* +
    sum_a min(q_a^2, p_a) (the optimum). Same interface as :class:`PathAwareTransport` (``rule``, ``slices``,
    ``sample``, ``acceptance``, ``alpha``, ``residual``); no LP, any V.

    >>> rule = TwoDraftPaths([0.1, 0.6, 0.3], [0.5, 0.3, 0.2])
    >>> round(rule.alpha, 12), round(expected_paths(rule, [0.5, 0.3, 0.2], 2), 12)
    (0.85, 1.08)
    """

    n = 2

    def __init__(self, p: object, q: object):
        self.p = check_distribution(p, "p")
        self.q = check_distribution(q, "q", size=self.p.size)
        self.V = self.p.size
        self.base = OptimalTransport.from_arrays(self.p, self.q, 2)
        self.alpha = self.base.alpha
        self.residual = self.base.residual
        inner = np.zeros(self.V, dtype=bool)
        inner[self.base.h_star] = True
        tokens = np.arange(self.V)
        x0 = self.base.rule(np.stack([tokens, tokens], 1))[0].sum(1)  # [V] the class chains on (a, a)
        q2 = self.q * self.q
        with np.errstate(divide="ignore", invalid="ignore"):
            x_star = np.maximum(np.where(q2 > 0, np.minimum(self.p / np.where(q2 > 0, q2, 1.0), 1.0), 1.0), x0)
            den = self.p - q2 * x0
            kappa = np.where(inner & (den > 0), np.maximum(self.p - q2 * x_star, 0.0) / np.where(den > 0, den, 1.0),
                             1.0)
        self._inner, self._x_star, self._kappa = inner, x_star, np.minimum(kappa, 1.0)

    def acceptance(self) -> float:
        return self.base.acceptance()

    def rule(self, omegas: object) -> tuple[np.ndarray, np.ndarray]:
        """``omegas int [M, 2]`` -> ``(accept [M, 2], reject [M])`` as :meth:`OptimalTransport.rule`."""
        w = check_token_tuples(omegas, 2, self.V)
        accept, _ = self.base.rule(w)
        a = w[:, 0]
        doubled = a == w[:, 1]
        first = np.where(doubled & self._inner[a], self._x_star[a], accept[:, 0] * np.where(doubled, 1.0,
                                                                                             self._kappa[a]))
        second = np.where(doubled, accept[:, 1], accept[:, 1] * self._kappa[w[:, 1]])
        acc = np.stack([first, second], 1)
        return acc, np.maximum(1.0 - acc.sum(1), 0.0)

    def slices(self, omegas: object) -> np.ndarray:
        """pi(· | omega) for many tuples: ``[M, 2]`` -> ``float [M, V]``."""
        w = check_token_tuples(omegas, 2, self.V)
        accept, reject = self.rule(w)
        out = reject[:, None] * self.residual[None, :]
        np.add.at(out, (np.repeat(np.arange(w.shape[0]), 2), w.ravel()), accept.ravel())
        return out

    def sample(self, omegas: object, rng: object = None, uniforms: np.ndarray | None = None):  # noqa: ANN201
        """As :meth:`PathAwareTransport.sample`."""
        return _sample(self, omegas, rng, uniforms)


def _sample(rule: object, omegas: object, rng: object, uniforms: np.ndarray | None):  # noqa: ANN202
    w = check_token_tuples(omegas, rule.n, rule.V)
    M = w.shape[0]
    u = as_generator(rng).random((M, 2)) if uniforms is None else np.asarray(uniforms, dtype=np.float64)
    accept, _ = rule.rule(w)
    slot = (u[:, :1] >= np.cumsum(accept, axis=1)).sum(1)  # [M]; n: reject
    accepted = slot < rule.n
    tokens = w[np.arange(M), np.minimum(slot, rule.n - 1)].copy()
    cdf = np.cumsum(rule.residual)
    drawn = np.minimum(np.searchsorted(cdf, u[:, 1] * cdf[-1], side="right"), rule.V - 1)
    tokens = np.where(accepted, tokens, drawn)
    return tokens.astype(np.int64), np.where(accepted, slot, -1).astype(np.int64)


def _first_slots(w: np.ndarray) -> np.ndarray:
    """``bool [M, n]``: slot k holds the first occurrence of its token."""
    same = w[:, :, None] == w[:, None, :]
    return same.argmax(2) == np.arange(w.shape[1])


def _repair(S: np.ndarray, tokens: np.ndarray, cols: np.ndarray, cap: np.ndarray, P: np.ndarray) -> np.ndarray:
    """An LP solution made exactly feasible: negatives clipped, then columns above P and rows above cap scaled
    down."""
    S = np.maximum(S, 0.0)
    col = np.bincount(cols, weights=S, minlength=P.size)
    S = S * np.where(col > P, P / np.where(col > 0, col, 1.0), 1.0)[cols]
    row = np.bincount(tokens, weights=S, minlength=cap.size)
    return S * np.where(row > cap, cap / np.where(row > 0, row, 1.0), 1.0)[tokens]


def two_draft_tuple_rule(pre: object, w: object, *, window: int | str | None = None,  # noqa: ANN201
                         steps: int | None = None):
    """The exact path-optimal rule for n = 2 on one drafted pair per row, from the class-chain prefix structure
    (:func:`otlp.optimal.chains.prefix` with n = 2): ``w int64 [B, 2]`` -> ``(accept [B, 2], reject [B])``,
    numpy or torch (no host synchronisation with ``window=None``), as :func:`.chains.tuple_rule`.

    Start from the class-chain rule pi0. Every alpha*-optimal plan serves the tuples drawn inside H* with the tokens
    of H* (row sums R_a = p_a there) and accepts every other doubled tuple (a, a) fully, so E[paths] = alpha* +
    sum_a q_a^2 x_a with x_a the acceptance of (a, a). On a token a of H*:

    * the doubled tuple (a, a) accepts with x*_a = min(1, p_a / q_a^2) instead of pi0's x0_a <= x*_a;
    * in every mixed tuple a's acceptance is scaled by kappa_a = (p_a - q_a^2 x*_a) / (p_a - q_a^2 x0_a) <= 1
      (1 where the denominator is 0), so a's row sum stays p_a;
    * the tuple rejects what it no longer accepts, and rejections draw from pi0's residual (outside H*).

    Row sums, hence the law (= p) and the acceptance (= alpha*), are pi0's; E[paths] reaches the upper bound alpha*
    + sum_a min(q_a^2, p_a) of :func:`two_draft_optimum`. x0_a is pi0 on the doubled tuple: in its class chain both
    draws share one position, so x0_a = 1 - e^{-2 Lambda_a} (1 - beta) with Lambda_a the group's hazard at or below
    a, computed here by the chains themselves (:func:`.chains.tuple_rule` on (a, a))."""
    from otlp.core import xp as X
    from otlp.optimal import host

    xp = X.namespace(pre.psi)
    accept, reject = host.tuple_rule(pre, w, window=window, steps=steps)  # [B, 2], [B]
    with np.errstate(divide="ignore", invalid="ignore"):
        pos = X.take(X.inverse_permutation(pre.order), w)  # [B, 2]
        inner = pos < pre.m_star[:, None]  # the token is in H*
        ps_w, qs_w = X.take(pre.ps, pos), X.take(pre.qs, pos)  # p_a, q_a of each draw
        x0 = []
        for k in range(2):
            twin = xp.stack([w[:, k], w[:, k]], 1)  # [B, 2]: the doubled tuple of draw k
            acc_twin, _ = host.tuple_rule(pre, twin, window=window, steps=steps)
            x0.append(acc_twin.sum(-1))
        x0 = xp.stack(x0, 1)  # [B, 2]
        q2 = qs_w * qs_w
        x_star = xp.where(q2 > 0, X.minimum(ps_w / xp.where(q2 > 0, q2, 1.0), 1.0), 1.0)
        x_star = X.maximum(x_star, x0)  # rounding: never below the class chains'
        den = ps_w - q2 * x0
        kappa = xp.where(inner & (den > 0), X.maximum(ps_w - q2 * x_star, 0.0) / xp.where(den > 0, den, 1.0), 1.0)
        kappa = X.minimum(kappa, 1.0)
        doubled = (w[:, 0] == w[:, 1])[:, None]  # [B, 1]
        first = X.arange_like(accept, 2)[None, :] == 0
        acc = xp.where(doubled, xp.where(first & inner, x_star, accept), accept * kappa)
        return acc, X.maximum(1.0 - acc.sum(-1), 0.0)


#: the most multisets :func:`expected_paths` enumerates (V = 2000 at n = 2 is 2,001,000), in chunks of ``_CHUNK``
MAX_ENUMERATED = 5_000_000
_CHUNK = 100_000


def _enumerated_value(rule: object, q: np.ndarray, n: int) -> float:
    """E[continuing paths] of a symmetric rule with ``rule(omegas) -> (accept, reject)``, over every multiset of
    the support of q."""
    support = np.flatnonzero(q > 0)
    count = comb(support.size + n - 1, n)
    if count > MAX_ENUMERATED:
        raise InputError(f"E[continuing paths] by enumeration needs {count:,} multisets; at most {MAX_ENUMERATED:,}")
    w = multisets(support, n)
    total = 0.0
    for lo in range(0, w.shape[0], _CHUNK):
        chunk = w[lo : lo + _CHUNK]
        accept, _ = rule.rule(chunk)
        total += float(multiset_probabilities(chunk, q) @ continuing_paths(accept, chunk))
    return total


def two_draft_optimum(p: object, q: object) -> float:
    """The largest E[continuing paths] of an alpha*-optimal rule for n = 2 i.i.d. drafts, in closed form:

        alpha* + sum_a min(q_a^2, p_a).

    Proof. E[paths] = acceptance + P(a doubled tuple (a, a) is accepted), and (a, a) can output a only, so its
    accepted mass is at most min(q_a^2, p_a): the value is an upper bound. It is attained: accept (a, a) with
    probability min(1, p_a / q_a^2) first, which leaves targets p'_a = (p_a - q_a^2)_+ for the mixed tuples {a, b}
    (mass 2 q_a q_b). By max-flow/min-cut their largest acceptance is
    min_H [p'(H) + (1 - Q(H)^2 - sum_{a not in H} q_a^2) + sum_{a not in H} (q_a^2 - p_a)_+]
    = min_H [p(H) + 1 - Q(H)^2] - sum_a min(q_a^2, p_a) (use (p - q^2)_+ + min(q^2, p) = p), i.e. alpha* minus
    what the doubled tuples took (GR Thm 3.1: alpha* = 1 + min_H [p(H) - Q(H)^2]). So the total acceptance is alpha*.
    (For n >= 3 the per-token analogue of this bound is not attained: tests/optimal/test_path_aware.py.)"""
    from otlp.core.drafts import IID
    from otlp.core.subsets import optimal_acceptance

    p_arr = check_distribution(p, "p")
    q_arr = check_distribution(q, "q", size=p_arr.size)
    return float(optimal_acceptance(p_arr, IID(q_arr, 2)) + np.minimum(q_arr**2, p_arr).sum())


def expected_paths(rule: object, q: object, n: int) -> float:
    """E[continuing paths] of a symmetric rule (``rule.rule(omegas) -> (accept, reject)``, e.g. an
    :class:`OptimalTransport` or :class:`PathAwareTransport`) for n i.i.d. drafts from q, by enumeration."""
    return _enumerated_value(rule, check_distribution(q, "q"), check_n(n))


__all__ = ["MAX_TUPLES", "PathAwareTransport", "TwoDraftPaths", "continuing_paths", "expected_paths",
           "multiset_probabilities", "multisets", "two_draft_optimum", "two_draft_tuple_rule", "window_size"]
