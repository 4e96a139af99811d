"""``OptimalTransport``: the exact optimal verification rule for multi-draft speculative sampling.

For i.i.d. drafts (``otlp.IID(q, n)``, optionally with GR App. N top-k truncation of q) every group of the
records of psi is one water-filling class chain (:mod:`.chains`, the rule of :func:`otlp.optimal.solve_batch` and of
the torch verifier): given the drafted tuple omega, the group of its highest-positioned token (decreasing q/p order)
serves it, by priority slots shared by its draws in that group, then a final acceptance beta; a rejected tuple draws
from the residual r ∝ (p - R)_+ on the tokens outside H* (GR eq. (8)). The chains are built on arrays by the host
route (:func:`.host.build`: the reference with its C kernels where built), or, for small pairs (:func:`.scalar.takes`:
V <= 128), in plain Python floats (:mod:`.scalar`: there the arrays' per-call overhead, not the
arithmetic, is the cost), and their array form on first use.

The rule transports the draft law to exactly p and accepts with probability alpha* = 1 + min_H psi(H)
(GR Thm 3.1). Drafts without replacement (``WithoutReplacement``) take priority blocks with a Luce choice in each
(:mod:`.wor`, route "luce"; the relaxed LP where its Newton steps stall); other draft schemes (Independent, Greedy,
SpecHub, Joint) go through the relaxed OTLP (GR eq. (2)) solved by HiGHS; both then take the residual completion
(GR eq. (3)); see :mod:`.generic`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from otlp.core.distributions import as_generator, check_distribution, check_n, check_token_tuples, keep_top_k
from otlp.core.errors import InputError
from otlp.lp.formulations.completion import residual_law
from otlp.optimal import chains, host, scalar
from otlp.optimal.scalar import ScalarChains, scalar_chains, scalar_rule

#: ||R - t||_1 below which the rule's row sums meet their targets (:attr:`OptimalTransport.tolerance`'s floor).
SUCCESS_TOLERANCE = 1e-12

@dataclass(frozen=True)
class Block:
    """One group G = (start, stop] of the sorted order, cut by the records of psi (design note §2), served by one
    water-filling class chain (:mod:`.chains`).

    kind : "inner" (the rule may reject) or "outer" (always accepts).
    start, stop : the block holds positions start+1 .. stop (1-based).
    tokens : token ids in the block, in q/p order.
    targets : row sums the block must reach (p on inner blocks; GR Thm 6.2 vertex on outer blocks).
    row_sums : the rule's row sums R_i.
    null_mass : Q_s, the q-mass of the positions below the block.
    row_error : ||R - t||_1 over the block.
    """

    kind: str
    start: int
    stop: int
    tokens: np.ndarray
    targets: np.ndarray
    row_sums: np.ndarray
    null_mass: float
    row_error: float

    @property
    def size(self) -> int:
        return int(self.stop - self.start)


class OptimalTransport:
    """The exact optimal OT verification rule pi(· | omega).

    Parameters
    ----------
    p : target distribution, float [V].
    draft : a draft scheme. ``otlp.IID(q, n)`` (or any object with ``.q`` and ``.n`` that is not another
        scheme) takes the fast class-chain route; other schemes take the relaxed-LP route (small V).
    top_k : keep only the top-k tokens of q (renormalised) as in GR App. N; p is NOT renormalised.

    Attributes
    ----------
    alpha : alpha* = 1 + psi(H*), the optimal acceptance (the LP route: to HiGHS' tolerance, :attr:`success`).
    alpha_upper : an upper bound on alpha*: alpha on the class-chain routes, 1 + psi(H*) on the LP route.
    h_star : token ids of H* (the first m* tokens in decreasing q/p order).
    blocks : list of :class:`Block` (class-chain route only).
    residual : the law r the rule draws from after a rejection, float [V].
    route : "class_chains" (IID drafts) or "lp".

    Examples
    --------
    >>> import numpy as np, otlp
    >>> ot = OptimalTransport([0.1, 0.6, 0.3], otlp.IID([0.5, 0.3, 0.2], 2))
    >>> round(ot.alpha, 12)
    0.85
    >>> float(ot.slice([0, 1]).sum())
    1.0
    """

    route = "class_chains"

    def __init__(self, p: object, draft: object, *, top_k: int | None = None):
        if _is_iid(draft):
            q, n = draft.q, draft.n
            p_arr = check_distribution(p, "p")
            q_arr = check_distribution(q, "q", size=p_arr.size)
            n = check_n(n)
            q_arr = truncate_top_k(q_arr, top_k)
            if scalar.takes(p_arr.size, n):
                self._init_scalar(scalar_chains(p_arr.tolist(), q_arr.tolist(), n), p_arr, q_arr)
            else:
                self._init_chains(host.build(p_arr[None], q_arr[None], n), p_arr, q_arr)
        else:
            from otlp.core.drafts import as_draft
            from otlp.optimal.generic import LinearProgramRule
            from otlp.optimal.wor import SupportRule

            if top_k is not None:
                raise InputError("top_k truncation is only defined here for IID drafts (GR App. N)")
            draft = as_draft(draft)
            if draft.name == "without_replacement":  # the Luce rule, on the draft's support
                self._lp = SupportRule(check_distribution(p, "p", size=draft.V), draft.q, draft.n)
            else:
                self._lp = LinearProgramRule(p, draft)
            self.route = self._lp.route  # "luce" (otlp.optimal.wor), or "lp" (the relaxed LP)
            self.p, self.n, self.V = self._lp.p, self._lp.n, self._lp.V
            self.q = None
            self.alpha = self._lp.alpha
            self.residual = self._lp.residual  # (alpha_upper and h_star: the rule's, on first use, __getattr__)

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, p: object, q: object, n: int, *, top_k: int | None = None) -> OptimalTransport:
        """The class-chain route for ``IID(q, n)`` without building a draft object."""
        return cls(p, _PlainIID(q, n), top_k=top_k)

    def _init_scalar(self, chains: ScalarChains, p: np.ndarray, q: np.ndarray) -> None:
        """A class-chain instance from :func:`.scalar.scalar_chains`; its numpy arrays wait for their first use."""
        self._scalar = chains
        self.p, self.q, self.n, self.V = p, q, chains.n, p.size
        self.alpha = self.alpha_upper = chains.alpha
        self.h_star = np.asarray(chains.order[: chains.m_star], dtype=np.int64)

    def _init_chains(self, ch: chains.Chains, p: np.ndarray, q: np.ndarray) -> None:
        """A class-chain instance from :func:`.chains.build` (one row)."""
        self._ch = ch
        self.p, self.q, self.n, self.V = p, q, ch.pre.n, p.size
        self.alpha = self.alpha_upper = float(ch.pre.alpha[0])
        self.h_star = ch.pre.order[0, : int(ch.pre.m_star[0])].copy()

    def __getattr__(self, name: str) -> object:
        # only for attributes not set yet: a scalar-path instance builds the array form of its chains on first use
        if name == "_ch" and self.__dict__.get("_scalar") is not None:
            self._ch = host.build(self.p[None], self.q[None], self.n)
            return self._ch
        if name in ("alpha_upper", "h_star") and "_lp" in self.__dict__:
            return getattr(self._lp, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @cached_property
    def residual(self) -> np.ndarray:
        """``[V]`` the law r a rejected tuple's output is drawn from: (p - R)_+ outside H*, normalised (GR eq. (8))."""
        chains_ = self.__dict__.get("_scalar")
        r = np.zeros(self.V)
        if chains_ is not None:  # the scalar lists (no array build): (p - R)_+ outside H*
            order = np.asarray(chains_.order, dtype=np.int64)
            outside = order[chains_.m_star:]
            r[order] = chains_.rows
            r[outside] = np.maximum(self.p[outside] - r[outside], 0.0)
            r[order[: chains_.m_star]] = 0.0
        else:  # class chains: psi_e - psi_s on each outer group's first token (chains module docstring)
            r[self._ch.pre.order[0]] = self._ch.residual[0]
        return residual_law(r, self.p)  # [V]

    @cached_property
    def _residual_cdf(self) -> np.ndarray:
        """``[V]`` cumulative residual, for drawing rejected outputs (built on the first :meth:`sample`)."""
        return np.cumsum(self.residual)

    # -- inspection -----------------------------------------------------------------------------------
    @cached_property
    def blocks(self) -> list[Block]:
        """The groups cut by the records of psi (kind, positions, tokens, targets, row sums, row-sum error)."""
        if self.route != "class_chains":
            return []
        ch = self._ch
        rows, t = self._chain_rows
        order, end = ch.pre.order[0], ch.end[0]
        out = []
        for s in np.flatnonzero(ch.terms.first[0]):
            e = int(end[s])
            tokens = order[s:e]
            out.append(Block(kind="outer" if e > int(ch.pre.m_star[0]) else "inner", start=int(s), stop=e,
                             tokens=tokens.copy(), targets=t[tokens].copy(), row_sums=rows[tokens].copy(),
                             null_mass=float(ch.pre.prefix_q[0, s]),
                             row_error=float(np.abs(rows[tokens] - t[tokens]).sum())))
        return out

    @cached_property
    def _chain_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(R [V], t [V])`` by token: the class chains' row sums (:func:`.chains.row_sums`) and their targets."""
        ch = self._ch
        order = ch.pre.order[0]
        rows, t = np.empty(self.V), np.empty(self.V)
        rows[order] = chains.row_sums(ch)[0]
        t[order] = ch.terms.t[0]
        return rows, t

    @property
    def row_sums(self) -> np.ndarray:
        """``[V]`` the rule's row sums R_i = P(output i and the rule accepts it) by token (p on H*; None on the LP
        route)."""
        if self.route != "class_chains":
            return None
        return self._chain_rows[0]

    @property
    def tolerance(self) -> float:
        """The row-sum error :attr:`success` accepts: 1e-12, or 8 (V + n) machine epsilons when larger (a row sum is
        accumulated over up to V slots, and a power u^n carries n times the rounding of u; 5.7e-11 at V = 32k).
        """
        return max(SUCCESS_TOLERANCE, 8.0 * (self.V + self.n) * np.finfo(np.float64).eps)

    @property
    def success(self) -> bool:
        """The rule's row sums meet their targets to rounding (:attr:`row_error` <= :attr:`tolerance`); the LP route:
        HiGHS optimal (its plan is repaired to exact feasibility, so the law is p to rounding and the acceptance
        ``alpha`` is a feasible plan's value, never above alpha*, and below it by HiGHS' absolute tolerance of 1e-10
        a constraint: about 1e-12 on ordinary rows, up to 1.2e-10 seen where p or P(omega) hold entries of that
        size; ``alpha_upper - alpha`` bounds the shortfall on the instance, ``alpha_upper`` = 1 + psi(H*) of the
        exact subset search, or 1 where it has none; :mod:`otlp.optimal.generic`)."""
        if self.route != "class_chains":
            return True
        return self.row_error <= self.tolerance

    @property
    def row_error(self) -> float:
        """sum ||R - t||_1 over every group: the rule's row sums miss their targets (p on H*, the GR Thm 6.2 vertex
        outside) by at most this in L1 (0 on the LP route)."""
        if self.route != "class_chains":
            return 0.0
        rows, t = self._chain_rows
        return float(np.abs(rows - t).sum())

    def acceptance(self) -> float:
        """The rule's own acceptance sum_i R_i, capped at alpha* (it equals alpha* up to rounding; never reported
        above it)."""
        if self.route != "class_chains":
            return self._lp.acceptance()
        return min(float(self._chain_rows[0].sum()), self.alpha)

    # -- the rule -------------------------------------------------------------------------------------
    def rule(self, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Accept probabilities per draft slot and the rejection probability.

        ``omegas: int [M, n]`` -> ``(accept [M, n], reject [M])``: draft slot k is output with probability
        ``accept[:, k]`` (a repeated token counts on its first slot only), and with probability ``reject`` the
        output is drawn from :attr:`residual`.
        """
        return self._rule(self._check_omegas(omegas))

    def _rule(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`rule` on checked tuples ``w int64 [M, n]``."""
        if self.route != "class_chains":
            return self._lp.rule(w)
        return chains.evaluate(self._ch, w)

    def slices(self, omegas: np.ndarray) -> np.ndarray:
        """pi(· | omega) for many tuples: ``omegas int [M, n]`` -> ``float [M, V]``."""
        w = self._check_omegas(omegas)
        accept, reject = self._rule(w)
        out = reject[:, None] * self.residual[None, :]  # [M, V]
        np.add.at(out, (np.repeat(np.arange(w.shape[0]), self.n), w.ravel()), accept.ravel())
        return out

    def slice(self, omega: object) -> np.ndarray:
        """pi(· | omega): the law of the output token given the drafted tuple, float [V] (sums to 1)."""
        nested = isinstance(omega, (list, tuple)) and any(isinstance(x, (list, tuple, np.ndarray)) for x in omega)
        if nested or np.ndim(omega) != 1:  # (np.ndim of a ragged list would raise)
            raise InputError(f"slice takes one drafted tuple of shape [n] = [{self.n}]; for many tuples use "
                             "slices(omegas)")
        w = check_token_tuples(omega, self.n, self.V, rows=1)  # [1, n]
        chains = self.__dict__.get("_scalar")
        if chains is None:
            return self.slices(w)[0]
        ids = w[0].tolist()
        accept, reject = scalar_rule(chains, ids)
        out = reject * self.residual if reject > 0 else np.zeros(self.V)
        for token, a in zip(ids, accept, strict=True):
            out[token] += a
        return out

    def sample(self, omegas: np.ndarray, rng: object = None) -> np.ndarray:
        """Draw the output token for each drafted tuple: ``omegas int [M, n]`` -> ``int64 [M]`` (vectorised); ``rng``
        a ``numpy.random.Generator``, a seed or None."""
        rng = as_generator(rng)
        w = self._check_omegas(omegas)
        accept, reject = self._rule(w)
        M = w.shape[0]
        u = rng.random(M)
        cdf = np.cumsum(accept, axis=1)  # [M, n]
        slot = (u[:, None] >= cdf).sum(1)  # [M]; == n means reject
        rejected = slot >= self.n
        out = w[np.arange(M), np.minimum(slot, self.n - 1)]
        if rejected.any():
            v = rng.random(int(rejected.sum())) * self._residual_total()
            out[rejected] = np.minimum(np.searchsorted(self._residual_cdf, v, side="right"), self.V - 1)
        return out.astype(np.int64)

    def _residual_total(self) -> float:
        return float(self._residual_cdf[-1]) if self.route == "class_chains" else float(self._lp.residual.sum())

    def _check_omegas(self, omegas: object) -> np.ndarray:
        return check_token_tuples(omegas, self.n, self.V)

    def __repr__(self) -> str:
        return f"OptimalTransport(V={self.V}, n={self.n}, alpha={self.alpha:.6g}, route={self.route!r})"


def truncate_top_k(q: np.ndarray, top_k: int | None) -> np.ndarray:
    """GR App. N: keep the top-k tokens of q (each row of ``q [..., V]``; ties: lower id first) and renormalise them;
    None keeps q."""
    if top_k is None:
        return q
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise InputError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_k >= q.shape[-1]:
        return q
    out = keep_top_k(q, top_k)
    total = out.sum(-1, keepdims=True)
    if (total <= 0).any():
        where = "" if q.ndim == 1 else f"[{int(np.flatnonzero(total.reshape(-1) <= 0)[0])}]"
        raise InputError(f"the top-{top_k} tokens of q{where} carry no mass")
    return out / total


class _PlainIID:
    """Minimal stand-in for ``otlp.IID`` used by :meth:`OptimalTransport.from_arrays`."""

    def __init__(self, q: object, n: int):
        self.q = q
        self.n = n


def _is_iid(draft: object) -> bool:
    name = type(draft).__name__
    if name in {"Independent", "WithoutReplacement", "Greedy", "SpecHub", "Joint"}:
        return False
    return hasattr(draft, "q") and hasattr(draft, "n")
