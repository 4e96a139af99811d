"""rrs_wor's exact acceptance at vocabulary scale: a sum over rejected histories, as an interval [lo, hi].

**The rule** (SpecHub Alg. 1; :mod:`otlp.verifiers.rrs`'s module docstring): p_1 = p, q_1 = q. At step k a draft
x_k ~ q_k is accepted with probability min(1, p_k(x_k) / q_k(x_k)), so it is drawn *and* rejected with probability

    w_k(x) = (q_k(x) - p_k(x))^+;                                                                            (1)

then p_{k+1} = norm((p_k - q_k)^+) and q_{k+1} = q_k without x_k, renormalised. A rejected draft has p = 0 from then
on, so the residual never returns it: acceptance = verifier acceptance = 1 - P(all n rejected), and

    P(all n rejected) = sum over distinct (x_1, ..., x_n) of prod_k w_k(x_k).                               (2)

**One scalar carries the residual chain.** Let z_k = the q-mass left after k rejections (z_0 = 1: the first draw is
from q as given; z_k = sum of q over the undrawn tokens), so q_k = q / z_{k-1} off the drawn tokens, and
S(b) = sum_y (p(y) - b q(y))^+. Then p_k = (p - b_k q)^+ / S_k with S_k = S(b_k) and

    b_1 = 0,   b_{k+1} = b_k + S_k / z_{k-1}                                                                   (3)

(induction: ((p - b q)^+ / S - q / z)^+ = (p - (b + S / z) q)^+ / S because (a^+ - t)^+ = (a - t)^+ for t >= 0;
a drawn token has p_k = 0, so dropping it from q_k changes nothing). This is the with-replacement chain of
:class:`~otlp.verifiers.rrs.RecursiveRejection` (c_i = c_{i-1} + 1 - A(c_{i-1}), z = 1), except that z_k depends
on the masses of the drafts rejected so far. In these terms (1) is, for an undrawn x,

    w_k(x) = ((b_{k+1} q(x) - p(x))^+ - (b_k q(x) - p(x))^+) / S_k
           = clip(b_{k+1} q(x) - p(x), 0, S_k q(x) / z_{k-1}) / S_k,

and the probability of rejecting step k from a given history is, since p_k and q_k are both laws (k >= 2) and
sum (q_k - p_k)^+ = sum (p_k - q_k)^+,

    R_k = S(b_{k+1}) / S_k.                                                                                  (4)

(4) needs only the scalar b_{k+1}, which depends on the history through z_{k-1} alone: with the tokens sorted by
p / q once, S(b) = P_out(b) - b Q_out(b) over the suffix {p / q > b} (suffix sums of p and q, and a searchsorted), so
(4) for all V candidates x of one step, b = b_{k+1}(x) = b_k + S_k / (z_{k-2} - q(x)), costs O(V log V). That is
the brief's "f(c) piecewise linear in c": for n = 2, P(both rejected) = sum_x w_1(x) S(b_2 + S_2 / (1 - q(x))) / S_2
with w_1 = (q - p)^+, b_2 = 1, S_2 = sum (p - q)^+, exactly, in O(V log V).

**n >= 3: a best-first refinement over the rejected histories (x_1, ..., x_{n-2})**, a node expanded in O(V log V):
its children x carry P(history, x) = P(history) w_k(x), and the last two steps of a history of length n - 2 are
summed exactly by (4). A child's future depends on x only through its mass left z_k = z_{k-1} - q(x) (and x leaving
the later draws), so the children, sorted by z_k, are bounded in groups: for every z_k in a group's range
[z_a, z_b], b_{k+2} = b_{k+1} + S_{k+1} / z_k and every w_{k+1}(y) lie between their values at the ends, step k + 2
rejects with probability between the quotients (4) at the ends, and each later step's between the quotients at the
ends of the b and z ranges every history can reach (z falls by at most the largest masses left;
:meth:`_Walk.tail_bounds`); x's own term is subtracted. One O(V log V) pass bounds a whole group. The groups are
refined widest first: the widest is bounded afresh and halved (each half keeping its children's new bounds), and a
child alone is expanded (or summed exactly), until the sum of the groups' widths (plus the rounding bound) is at
most ``width`` or the node / time limit stops it; P(all rejected) lies in [settled + sum lo, settled + sum hi]
whenever it stops, and nothing is computed twice.

**Rounding.** S at a node is summed directly (non-negative terms, relative error <= (log2 V + 2) u, u = 2^-53); the
suffix sums behind (4) are long-double cumulative sums (error <= gamma = V u_ld + 2 u of the total, u_ld = 2^-64 on
x86-64; each kept as two doubles hi + lo, and gamma takes 4 u more for (P_hi - b Q_hi) + (P_lo - b Q_lo) in
float64), and S(b) = P_out - b Q_out subtracts two numbers in [0, 1] (b Q_out <= P_out), so its absolute error is at
most 2 gamma: no catastrophic cancellation as S(b) -> 0 beyond that absolute bound. z_k - q(x) cancels only for the
one token heavier than half the mass left, whose z is summed afresh. To first order in u, a node of probability P,
scalar b_{k+1} and S_k adds at most P [((4 b_{k+1} + 4 n + 2) u + 2 gamma) / S_k + (n + log2 V + 8) u] to the
error of (2) (the sum over x of w_k is S_{k+1} / S_k <= 1 / S_k, each w_k has error <= u (4 b_{k+1} q + 2 p) / S_k, and
(4) has error <= 2 gamma / S_{k+1}); :func:`rejection_interval` adds this bound, summed over the nodes, to both ends
of the interval (``rounding``: about 1e-13 at V = 128k). The tests check the interval against enumeration
(``conditional``) and exact rationals at small V.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from otlp.core.distributions import check_distribution, check_int
from otlp.core.errors import InputError

if TYPE_CHECKING:
    from otlp.cli.util import Progress

#: default target width of the acceptance interval
WIDTH = 1e-9
#: default node limit (expansions and exact last-two-step sums) of one call
MAX_NODES = 1_000_000
#: default time limit of one call, seconds
TIME_LIMIT = 30.0

_U = 2.0**-53
_U_LD = float(np.finfo(np.longdouble).epsneg)


@dataclass
class AcceptanceInterval:
    """rrs_wor's acceptance lies in ``[lo, hi]`` (pruned mass and the rounding bound included).

    ``nodes``: histories expanded or summed; ``pruned``: the probability mass bounded rather than summed;
    ``rounding``: the rounding bound added to both ends; ``stopped``: the limit that stopped the refinement short of
    its target width ("" when it reached it)."""

    lo: float
    hi: float
    nodes: int
    pruned: float
    rounding: float
    seconds: float
    stopped: str = ""

    @property
    def value(self) -> float:
        """The interval's midpoint (the exact acceptance up to ``width / 2``)."""
        return 0.5 * (self.lo + self.hi)

    @property
    def width(self) -> float:
        return self.hi - self.lo

    def describe(self) -> str:
        """One line for reports: ``exact (histories), width 3.1e-13: [lo, hi], N nodes``."""
        out = (f"exact (histories), width {self.width:.2g}: [{self.lo!r}, {self.hi!r}], {self.nodes:,} nodes, "
               f"{self.seconds:.2g} s")
        return out + (f", stopped at its {self.stopped}" if self.stopped else "")


class _Walk:
    """One problem's data: p, q in ascending-q order (so the needles of (4) arrive sorted), the p / q order's
    suffix sums in long double, and the running sums of one walk."""

    def __init__(self, p: np.ndarray, q: np.ndarray, n: int):
        order = np.argsort(q, kind="stable")
        self.p, self.q, self.n, self.V = p[order], q[order], n, p.size  # [V] each
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.q > 0, self.p / np.where(self.q > 0, self.q, 1.0), np.where(self.p > 0, np.inf, 0.0))
        by_ratio = np.argsort(ratio, kind="stable")
        self.ratio = ratio[by_ratio]  # [V] ascending
        ld = np.longdouble
        zero = np.zeros(1, dtype=ld)
        p_out = np.concatenate([np.cumsum(self.p[by_ratio][::-1].astype(ld))[::-1], zero])  # [V + 1]
        q_out = np.concatenate([np.cumsum(self.q[by_ratio][::-1].astype(ld))[::-1], zero])  # [V + 1]
        # each long-double sum as two doubles, hi + lo, so (4) runs in float64 arithmetic
        self.p_hi, self.q_hi = p_out.astype(np.float64), q_out.astype(np.float64)
        self.p_lo = (p_out - self.p_hi.astype(ld)).astype(np.float64)
        self.q_lo = (q_out - self.q_hi.astype(ld)).astype(np.float64)
        self.gamma = (self.V + 2) * _U_LD + 6 * _U
        self.log_v = math.log2(max(self.V, 2))
        self.mass = math.fsum(self.q.tolist())

    # -- the scalars of (3), (4) ---------------------------------------------------------------------------------------
    def s_direct(self, b: float) -> float:
        """S(b) = sum_y (p(y) - b q(y))^+, summed directly (non-negative terms)."""
        return float(np.maximum(self.p - b * self.q, 0.0).sum())

    def s_many(self, b: np.ndarray) -> np.ndarray:
        """S(b) for an array of b >= 0 through the suffix sums: P_out(b) - b Q_out(b) over {p / q > b}."""
        idx = np.searchsorted(self.ratio, b, side="right")  # [m]
        s = (self.p_hi[idx] - b * self.q_hi[idx]) + (self.p_lo[idx] - b * self.q_lo[idx])
        return np.maximum(s, 0.0)

    # -- one node ------------------------------------------------------------------------------------------------------
    def step(self, drawn: tuple[int, ...], z: float, mass: float, b: float, s: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
        """Step k = len(drawn) + 1 from a history with scalars z_{k-1} = ``z``, the q-mass left ``mass``, b_k = ``b``,
        S_k = ``s``: the candidates x (w_k(x) > 0) as ``(x, w_k(x), z_k(x), R_{k+1}(x), b_{k+1}, S_{k+1})``, with
        R_{k+1}(x) = S(b_{k+2}(x)) / S_{k+1} by (4) (0 where S_{k+1} = 0: step k then rejects with probability 0)."""
        b1 = b + s / z
        delta = np.clip(b1 * self.q - self.p, 0.0, (s / z) * self.q)  # [V]
        if drawn:
            delta[list(drawn)] = 0.0
        x = np.flatnonzero(delta > 0)  # [m]
        w = delta[x] / s  # [m]
        s1 = self.s_direct(b1)
        z1 = mass - self.q[x]  # [m]; cancels only for a token heavier than half the mass left: summed afresh
        if x.size and self.q[x[-1]] > 0.5 * mass:
            keep = np.ones(self.V, dtype=bool)
            keep[list(drawn) + [int(x[-1])]] = False
            z1[-1] = math.fsum(self.q[keep].tolist())
        if s1 <= 0 or self.n == len(drawn) + 1:
            return x, w, z1, np.zeros_like(w), b1, s1
        with np.errstate(divide="ignore"):
            b2 = b1 + s1 / z1  # [m]; z1 = 0 only when q is spent: inf, and S(inf) = 0
        r = np.where(z1 > 0, self.s_many(np.where(z1 > 0, b2, 0.0)) / s1, 0.0)
        return x, w, z1, np.minimum(r, 1.0), b1, s1

    def tops(self, drawn: tuple[int, ...], m: int) -> np.ndarray:
        """The ``m`` largest q among the undrawn tokens, descending (fewer when fewer are left), and their indices."""
        out, idx, seen = [], [], set(drawn)
        for i in range(self.V - 1, -1, -1):
            if len(out) == m:
                break
            if i not in seen:
                out.append(self.q[i])
                idx.append(i)
        return np.array(out), np.array(idx, dtype=np.int64)

    def tail_bounds(self, drawn: tuple[int, ...], z_lo: float, z_hi: float, b1: float, s1: float
                    ) -> tuple[np.ndarray, np.ndarray]:
        """For every history that adds one token x to ``drawn`` at step k = len(drawn) + 1 <= n - 1, with q-mass
        left z_k in [``z_lo``, ``z_hi``], b_{k+1} = ``b1`` and S_{k+1} = ``s1``: per candidate y of step k + 1,
        bounds ``(lo, hi) [V]`` of w_{k+1}(y) P(steps k + 2 .. n reject | y) (zero on ``drawn``); summed over
        y != x they bound the probability of rejecting every step after k.

        b_{k+2} = b1 + s1 / z_k lies in [bl, bh] (z_k's ends); w_{k+1}(y) grows with b and with 1 / z_k, so it lies
        between its values at the ends; S_{k+2} in [S(bh), S(bl)]; b_{k+3}(y) = b_{k+2} + S_{k+2} / (z_k - q(y)) in
        [bl + S(bh) / (z_hi - q(y)), bh + S(bl) / (z_lo - q(y))], and step k + 2 rejects with probability
        S(b_{k+3}) / S_{k+2} by (4), between the matching quotients. Each later step j rejects with probability
        S(b_{j+1}) / S(b_j), where the mass left z_{j-1} lies in [z_{k+1} - T, z_{k+1}] (T: the j - k - 2 largest q
        not in ``drawn``) and b_j in [lo_j, hi_j]: b_{j+1} in [lo_j + S(hi_j) / z_max, hi_j + S(lo_j) / z_min]
        (S decreasing), so it lies in [S(hi_{j+1}) / S(lo_j), S(lo_{j+1}) / S(hi_j)] whatever the history, and the
        probability of rejecting them all between the products. Rounding on the safe side: S -/+ 2 gamma, the z's
        -/+ 4 u."""
        k = len(drawn) + 1
        eps = 2 * self.gamma
        z_lo, z_hi = z_lo * (1 - 4 * _U), z_hi * (1 + 4 * _U)
        bl, bh = b1 + s1 / z_hi, b1 + s1 / z_lo
        d_lo = np.clip(bl * self.q - self.p, 0.0, (s1 / z_hi) * self.q) / s1  # [V]
        d_hi = np.clip(bh * self.q - self.p, 0.0, (s1 / z_lo) * self.q) / s1  # [V]
        if drawn:
            d_lo[list(drawn)] = d_hi[list(drawn)] = 0.0
        lo, hi = np.zeros(self.V), np.zeros(self.V)
        sl, sh = self.s_direct(bh), self.s_direct(bl)  # S_{k+2} in [sl, sh] (each summed directly, error << eps)
        y = np.flatnonzero(d_hi > 0)
        if y.size == 0 or sh <= 0:
            return lo, hi
        qy = self.q[y]
        gap_hi = z_hi - qy  # [m] the mass left after y, z_{k+1}
        gap_lo = (z_lo - qy) - 4 * _U * (z_lo + qy)  # [m]
        with np.errstate(divide="ignore", invalid="ignore"):
            nb_lo = bl + max(sl - eps, 0.0) / np.where(gap_hi > 0, gap_hi, np.nan)  # [m] b_{k+3}
            nb_hi = bh + (sh + eps) / np.where(gap_lo > 0, gap_lo, np.nan)
        ok_lo, ok_hi = np.isfinite(nb_hi), np.isfinite(nb_lo)
        top = np.maximum(self.s_many(np.where(ok_lo, nb_hi, 0.0)) - eps, 0.0)
        f_lo = np.where(ok_lo, top / (sh + eps), 0.0)  # [m] step k + 2
        if sl - eps > 0:
            f_hi = np.where(ok_hi, np.minimum((self.s_many(np.where(ok_hi, nb_lo, 0.0)) + eps) / (sl - eps), 1.0), 1.0)
        else:
            f_hi = np.ones(y.size)
        left = self.n - k - 2  # the steps k + 3 .. n
        if left > 0:
            cum = np.concatenate([[0.0], np.cumsum(self.tops(drawn, left)[0])])  # [left + 1]
            b_lo, b_hi = np.where(ok_hi, nb_lo, np.inf), np.where(ok_lo, nb_hi, np.inf)  # [m]
            z_max = np.where(gap_hi > 0, gap_hi, 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                for m in range(1, left + 1):
                    t_m = cum[min(m, cum.size - 1)]
                    z_min = np.maximum(gap_lo - t_m - 4 * _U * (z_lo + t_m), 0.0)
                    fin_lo, fin_hi = np.isfinite(b_lo), np.isfinite(b_hi)
                    s_lo = np.where(fin_lo, self.s_many(np.where(fin_lo, b_lo, 0.0)) + eps, 0.0)  # >= S(lo_j)
                    s_hi = np.where(fin_hi, np.maximum(self.s_many(np.where(fin_hi, b_hi, 0.0)) - eps, 0.0), 0.0)
                    nb_lo = np.where(z_max > 0, b_lo + s_hi / z_max, np.inf)
                    nb_hi = np.where(z_min > 0, b_hi + s_lo / z_min, np.inf)
                    fin_nlo, fin_nhi = np.isfinite(nb_lo), np.isfinite(nb_hi)
                    top = np.maximum(self.s_many(np.where(fin_nhi, nb_hi, 0.0)) - eps, 0.0)
                    step_lo = np.where(fin_nhi & (s_lo > 0), top / np.where(s_lo > 0, s_lo, 1.0), 0.0)
                    bot = self.s_many(np.where(fin_nlo, nb_lo, 0.0)) + eps
                    step_hi = np.where(fin_nlo & (s_hi > 0), bot / np.where(s_hi > 0, s_hi, 1.0), 1.0)
                    f_lo = f_lo * np.minimum(step_lo, 1.0)
                    f_hi = f_hi * np.minimum(step_hi, 1.0)
                    b_lo, b_hi = nb_lo, nb_hi
        lo[y] = d_lo[y] * f_lo
        hi[y] = d_hi[y] * f_hi
        return lo, hi

    def rounding(self, prob: float, b1: float, s: float) -> float:
        """The first-order rounding bound of one node (module docstring)."""
        return prob * (((4 * b1 + 4 * self.n + 2) * _U + 2 * self.gamma) / s + (self.n + self.log_v + 8) * _U)


def rejection_interval(p: np.ndarray, q: np.ndarray, n: int, *, width: float = WIDTH, max_nodes: int = MAX_NODES,
                       time_limit: float = TIME_LIMIT, progress: Progress | None = None) -> AcceptanceInterval:
    """rrs_wor's acceptance for target ``p [V]`` and ``n`` drafts from ``q [V]`` without replacement, as an interval
    (module docstring: (2) summed over rejected histories by (3)-(4)).

    n <= 2: exact in O(V log V) (the width is the rounding bound). n >= 3: the groups of histories are refined widest
    first (one O(V log V) pass each) until the width is at most ``width``, or ``max_nodes`` passes or ``time_limit``
    seconds are spent (the interval is valid whenever it stops). ``progress`` (an ``otlp.cli.util.Progress``) is
    told the width and the passes as it goes.
    """
    p = check_distribution(p, "p")
    q = check_distribution(q, "q", size=p.size)
    n = check_int(n, "n", 1)
    if np.count_nonzero(q) < n:
        raise InputError(f"rrs_wor's acceptance needs at least n = {n} tokens with q > 0, q has {np.count_nonzero(q)}")
    if not (isinstance(width, (int, float)) and width > 0):
        raise InputError(f"width must be a number > 0, got {width!r}")
    max_nodes = check_int(max_nodes, "max_nodes", 1)
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise InputError(f"time_limit must be a number of seconds > 0, got {time_limit!r}")
    began = time.perf_counter()
    tick = None
    if progress is not None:
        def tick(nodes: int, w: float) -> None:
            progress.update(0, f"rrs_wor exact acceptance: width {w:.2g}, {nodes:,} nodes")
    lo, pruned, err, nodes, stopped = _refine(_Walk(p, q, n), float(width), max_nodes, began + time_limit, tick)
    rej_lo, rej_hi = max(lo - err, 0.0), min(lo + pruned + err, 1.0)
    out = AcceptanceInterval(1.0 - rej_hi, 1.0 - rej_lo, nodes, pruned, err, time.perf_counter() - began, stopped)
    if progress is not None:
        progress.set_note(f"rrs_wor exact acceptance: width {out.width:.2g}, {nodes:,} nodes")
    return out


def _refine(walk: _Walk, width: float, budget: int, deadline: float,
            tick: Callable[[int, float], None] | None = None) -> tuple[float, float, float, int, str]:
    """Best-first refinement: ``(lo, pruned, rounding, nodes, stopped)`` with P(all rejected) in
    [lo, lo + pruned] up to ``rounding``; ``stopped`` names the limit that ended it ("" if the width was reached).

    A node (a history) is summed exactly when two steps are left, else its children, sorted by the mass left z,
    form one group with bounds [0, their P]. The widest group is popped: one child alone is expanded as a node;
    more are bounded by :meth:`_Walk.tail_bounds` over their z range (x's own term subtracted) and split in two
    halves, each with its children's new bounds. ``tick(nodes, width)`` every 64 passes."""
    n = walk.n
    settled: list[float] = []  # exact sums and groups whose bounds agree
    heap: list[tuple] = []  # (-(hi - lo), order, lo, hi, group, start, end)
    order = itertools.count()
    state = {"err": 0.0, "nodes": 0, "open": 0.0}

    def push(group: tuple, a: int, e: int, lo: float, hi: float) -> None:
        if e <= a:
            return
        if hi - lo <= 0:
            settled.append(lo)
            return
        heapq.heappush(heap, (-(hi - lo), next(order), lo, hi, group, a, e))
        state["open"] += hi - lo

    def expand(drawn: tuple[int, ...], z: float, mass: float, b: float, s: float, prob: float) -> None:
        state["nodes"] += 1
        x, w, z1, r, b1, s1 = walk.step(drawn, z, mass, b, s)
        state["err"] += walk.rounding(prob, b1, s)
        if len(drawn) + 2 >= n:  # the last two steps (or the only one), summed exactly by (4)
            settled.append(prob * float((w * r).sum()) if n > 1 else prob * float(w.sum()))
            return
        child = prob * w  # [m]
        by_z = np.argsort(z1, kind="stable")
        push((drawn, x[by_z], z1[by_z], child[by_z], b1, s1), 0, x.size, 0.0, float(child.sum()))

    expand((), 1.0, walk.mass, 0.0, 1.0, 1.0)
    stopped = ""
    while heap:
        if state["open"] + 2 * state["err"] <= width:
            break
        if state["nodes"] >= budget or time.perf_counter() > deadline:
            stopped = "node limit" if state["nodes"] >= budget else "time limit"
            break
        _, _, lo, hi, group, a, e = heapq.heappop(heap)
        state["open"] -= hi - lo
        drawn, x, z1, child, b1, s1 = group
        if e - a == 1:
            expand((*drawn, int(x[a])), float(z1[a]), float(z1[a]), b1, s1, float(child[a]))
        else:
            state["nodes"] += 1
            t_lo, t_hi = walk.tail_bounds(drawn, float(z1[a]), float(z1[e - 1]), b1, s1)  # [V] each
            own = x[a:e]
            g_lo = child[a:e] * np.maximum(t_lo.sum() - t_lo[own], 0.0)  # [e - a]
            g_hi = child[a:e] * np.minimum(t_hi.sum() - t_hi[own], 1.0)
            state["err"] += walk.rounding(float(child[a:e].sum()), b1 + s1 / float(z1[a]), s1)
            h = (e - a) // 2
            push(group, a, a + h, float(g_lo[:h].sum()), float(g_hi[:h].sum()))
            push(group, a + h, e, float(g_lo[h:].sum()), float(g_hi[h:].sum()))
        if tick is not None and state["nodes"] % 64 == 0:
            tick(state["nodes"], state["open"])
    lo = math.fsum(settled) + math.fsum(item[2] for item in heap)
    pruned = math.fsum(item[3] - item[2] for item in heap)
    return lo, pruned, state["err"], state["nodes"], stopped
