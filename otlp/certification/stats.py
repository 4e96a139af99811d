"""The sequential test behind black-box ``certify``: a simultaneous confidence band on the output law, over every
event and every look.

Setting. Samples arrive in looks k = 1, 2, ... at sample sizes N_1 < N_2 < ... fixed in advance (``look_sizes``).
Each sample is an independent draw of a cell c in {0, ..., M-1} (a token, or a bin of tokens, of one instance) from
an unknown law P; the null law is the known p0 (the target). For an event A (a set of cells) write
hat(A) = count(A) / N. The Chernoff bound in Bernoulli-KL form (Hoeffding 1963, Thm 1; it holds for independent
[0, 1] variables with different means, so for instances interleaved round-robin too) gives, for each event,

    P( hat(A) >= s and N kl(s, P(A)) >= N x ) <= exp(-N x)        (s > P(A); the lower tail of A is the upper
                                                                    tail of its complement)

A union over the 2^M - 2 non-trivial events and over the looks, with error delta_k = delta 6 / (pi^2 k^2) spent at
look k (sum_k delta_k <= delta), gives the radius

    x_k = (log(2^M - 2) + log(1 / delta_k)) / N_k

such that, with probability >= 1 - delta, at EVERY look and for EVERY event, kl(hat(A), P(A)) <= x_k, i.e.
P(A) in [L(hat(A)), U(hat(A))] with U(s) = sup{t >= s : kl(s, t) <= x}, L(s) = inf{t <= s : kl(s, t) <= x}.
Because the guarantee holds at every look at once, the run may stop at any look for any reason (a clear bias, a
reached tolerance, the user's patience): the error rates are those stated, whatever the stopping rule.

From the band, with TV(P, p0) = max_A P(A) - p0(A):

- ``tv_lower`` = max over the tested events of max(L(hat(A)) - p0(A), p0(A) - U(hat(A)), 0): any single event is
  valid; the tested ones are the prefixes of the cells sorted by hat / p0 (the shape of the witness set).
- ``tv_upper`` = max over fractional events w in [0, 1]^M of U(w . hat) - w . p0 >= max over events A of
  U(hat(A)) - p0(A) >= TV. For a fixed s = w . hat the smallest w . p0 is a fractional knapsack (cells by hat / p0,
  a linear piece per cell); U is concave (its hypograph is a sublevel set of the jointly convex kl), so on each
  piece U(s) - w . p0 is concave and its maximum is bracketed by a zooming grid search.
- H0 (P = p0) is rejected at look k when tv_lower > 0, i.e. when some tested event has N kl(hat(A), p0(A)) > N x_k:
  false-alarm rate <= delta. The anytime p-value is min over looks of (2^M - 2) (pi^2 k^2 / 6) exp(-N_k D_k),
  D_k the largest kl(hat(A), p0(A)) over the tested events.
- A run that stops with tv_upper <= eps has ruled out TV >= eps: a rule whose law is eps or more from p0 produces
  such a report with probability <= delta. That is the power statement; M enters only through log(2^M - 2) ~ M log 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from otlp.core.psi import ratio_order

#: Bisection then Newton steps for the KL bounds (the bracket shrinks 2^-20, then quadratic convergence).
BISECTION_STEPS = 24
NEWTON_STEPS = 10
LOWER_STEPS = 64
#: Grid search on each linear piece of tv_upper: points per round and rounds (the bracket shrinks 64x a round).
ZOOM_POINTS = 129
ZOOM_ROUNDS = 8


def kl_bernoulli(s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """kl(s, t) = s log(s / t) + (1 - s) log((1 - s) / (1 - t)), with 0 log 0 = 0 and +inf off the support.

    Written as -s log1p((t - s) / s) - (1 - s) log1p((s - t) / (1 - s)), accurate when t is close to s (where the
    two plain logarithms cancel)."""
    s = np.asarray(s, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(s > 0, -s * np.log1p((t - s) / np.where(s > 0, s, 1.0)), 0.0)
        b = np.where(s < 1, -(1.0 - s) * np.log1p((s - t) / np.where(s < 1, 1.0 - s, 1.0)), 0.0)
    out = a + b
    return np.where(np.isnan(out), np.inf, np.maximum(out, 0.0))


def kl_upper(s: np.ndarray, x: float | np.ndarray) -> np.ndarray:
    """U(s) = sup{t in [s, 1] : kl(s, t) <= x}, from above.

    The bracket [s, min(s + sqrt(x / 2), 1)] holds the root (Pinsker: kl >= 2 (t - s)^2); ``BISECTION_STEPS``
    halve it keeping the high end above the root; then Newton on y = -log(1 - t) -> kl(s, t) - x (convex and
    increasing, well conditioned near t = 1), started above the root, decreases monotonically to it: every
    iterate, and the value returned, is a valid upper bound (up to the last ulp, added back). Where even
    t = 1 - 1e-15 stays inside, U = 1.
    """
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
    x = np.asarray(x, dtype=np.float64)
    cap = 1.0 - 1e-15
    hi = np.minimum(s + np.sqrt(x / 2.0), cap)
    full = (kl_bernoulli(s, hi) < x) | (s >= cap)  # the root lies above the cap: report 1
    lo = s.copy()
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        inside = kl_bernoulli(s, mid) <= x
        lo = np.where(inside, mid, lo)
        hi = np.where(inside, hi, mid)
    y = -np.log1p(-hi)  # Newton in y = -log(1 - t): kl is convex increasing in y, d kl / dy = 1 - s / t
    y_lo = -np.log1p(-lo)
    for _ in range(NEWTON_STEPS):
        t = -np.expm1(-y)
        g = kl_bernoulli(s, t) - x
        live = (g > 0) & (t > s) & ~full
        step = g / np.where(live, 1.0 - s / np.where(live, t, 1.0), 1.0)
        y = np.where(live, np.maximum(y - step, y_lo), y)
    t = -np.expm1(-y)
    return np.where(full, 1.0, np.minimum(np.nextafter(t, 2.0), 1.0))


def kl_lower(s: np.ndarray, x: float | np.ndarray) -> np.ndarray:
    """L(s) = inf{t in [0, s] : kl(s, t) <= x}, from below: bisection on [max(s - sqrt(x / 2), 0), s] keeping the
    low end outside (Pinsker bracket), ``LOWER_STEPS`` halvings (not 1 - U(1 - s): 1 - s rounds for tiny s)."""
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
    lo = np.maximum(s - np.sqrt(np.asarray(x, dtype=np.float64) / 2.0), 0.0)
    hi = s.copy()
    empty = kl_bernoulli(s, lo) <= x  # even the bracket's low end is inside: L = that end (0 by Pinsker)
    for _ in range(LOWER_STEPS):
        mid = 0.5 * (lo + hi)
        inside = kl_bernoulli(s, mid) <= x
        hi = np.where(inside, mid, hi)
        lo = np.where(inside, lo, mid)
    return np.where(empty, np.maximum(s - np.sqrt(np.asarray(x) / 2.0), 0.0), np.maximum(np.nextafter(lo, -1.0),
                                                                                        0.0))


def log_events(num_cells: int) -> float:
    """log(2^M - 2), the number of non-trivial events (at least log 1)."""
    if num_cells <= 2:
        return 0.0 if num_cells <= 1 else math.log(2.0)
    return num_cells * math.log(2.0) + math.log1p(-(2.0 ** (1 - num_cells)))


def look_log_cost(k: int, delta: float) -> float:
    """log(1 / delta_k), delta_k = delta 6 / (pi^2 k^2): the error spent at look k (k >= 1)."""
    return math.log(math.pi**2 * k * k / (6.0 * delta))


def radius(num_cells: int, samples: int, look: int, delta: float) -> float:
    """x_k = (log(2^M - 2) + log(1 / delta_k)) / N_k, the KL radius of every event at look k."""
    return (log_events(num_cells) + look_log_cost(look, delta)) / samples


def look_sizes(first: int, growth: float, limit: int, multiple: int = 1) -> list[int]:
    """Sample sizes of the looks: ``first``, then x ``growth`` each look, rounded up to ``multiple``, ending exactly
    at ``limit`` (rounded down to ``multiple``). Fixed before any sample is drawn."""
    limit = max(multiple, limit // multiple * multiple)
    sizes: list[int] = []
    size = float(max(first, 1))
    while True:
        n = min(limit, int(math.ceil(size / multiple)) * multiple)
        if not sizes or n > sizes[-1]:
            sizes.append(n)
        if n >= limit:
            return sizes
        size *= growth


@dataclass
class Band:
    """The band at one look. ``tv_*`` bound TV(P, p0); ``log_p`` is log of this look's p-value term."""

    samples: int
    look: int
    radius: float
    tv: float
    tv_lower: float
    tv_upper: float
    log_p: float

    @property
    def rejects(self) -> bool:
        return self.tv_lower > 0.0


def _prefixes(hat: np.ndarray, p0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cells sorted by hat / p0 descending (hat > 0, p0 = 0 first; hat = 0 last; :func:`otlp.core.psi.ratio_order`, the
    class chains' order): ``(order, cum_hat, cum_p0)``."""
    order = ratio_order(p0, hat)
    return order, np.cumsum(hat[order]), np.cumsum(p0[order])


def tv_upper_bound(hat: np.ndarray, p0: np.ndarray, x: float) -> float:
    """max over fractional events of U(w . hat) - w . p0 (module docstring): a valid upper bound on TV.

    On each linear piece f(t) = U(s0 + t) - g0 - slope t is concave, so its maximiser lies between the neighbours
    of the best of ``ZOOM_POINTS`` grid points; ``ZOOM_ROUNDS`` rounds shrink the bracket below 4e-15 of the piece,
    and the bound returned is U at the bracket's right end minus the cost at its left end (U and the cost increase).
    """
    order, cum_h, cum_p = _prefixes(hat, p0)
    h, pp = hat[order], p0[order]
    use = h > 0  # pieces of zero width add p0 without adding s: never larger
    s0 = (cum_h - h)[use][:, None]  # [pieces, 1]
    g0 = (cum_p - pp)[use][:, None]
    slope = (pp[use] / h[use])[:, None]  # d(w . p0) / ds on the piece
    lo, hi = np.zeros_like(s0), h[use][:, None].copy()
    grid = np.linspace(0.0, 1.0, ZOOM_POINTS)[None, :]
    rows = np.arange(s0.shape[0])
    for _ in range(ZOOM_ROUNDS):
        t = lo + (hi - lo) * grid  # [pieces, G]
        best = np.argmax(kl_upper(s0 + t, x) - g0 - slope * t, axis=1)
        lo, hi = (t[rows, np.maximum(best - 1, 0)][:, None], t[rows, np.minimum(best + 1, ZOOM_POINTS - 1)][:, None])
    inner = (kl_upper(s0 + hi, x) - g0 - slope * lo).max(initial=0.0)
    return float(min(1.0, max(float(inner), float(kl_upper(np.zeros(1), x)[0]))))


def band(counts: np.ndarray, p0: np.ndarray, look: int, delta: float, tolerance: float | None = None) -> Band:
    """The band at look ``look`` (1-based) from cell ``counts [M]`` and the null law ``p0 [M]`` (sums to 1).

    With ``tolerance``, the search for ``tv_upper`` is skipped when a cheap lower bound on it (the plug-in TV, and
    the prefixes' U(hat(A)) - p0(A)) already exceeds the tolerance: ``tv_upper`` is then +inf, fine for deciding
    whether to stop; call again without it for the report."""
    counts = np.asarray(counts, dtype=np.float64)
    p0 = np.asarray(p0, dtype=np.float64)
    N = int(round(counts.sum()))
    M = counts.size
    keep = (counts > 0) | (p0 > 0)  # a cell with no mass and no count is in no event that matters (and its p0 = 0
    counts, p0 = counts[keep], p0[keep]  # would let a rounded prefix sum reach 1 below a count sum < 1)
    hat = counts / N
    x = radius(M, N, look, delta)
    tv = 0.5 * float(np.abs(hat - p0).sum())
    _, cum_h, cum_p = _prefixes(hat, p0)
    cum_h, cum_p = cum_h[:-1], np.minimum(cum_p[:-1], 1.0)  # the non-trivial prefixes
    if cum_h.size:
        up = kl_upper(cum_h, x)
        lower = np.maximum(kl_lower(cum_h, x) - cum_p, cum_p - up)
        tv_lower = float(max(0.0, lower.max()))
        d = float(kl_bernoulli(cum_h, cum_p).max())
        cheap = max(tv, float((up - cum_p).max()))
    else:
        tv_lower, d, cheap = 0.0, 0.0, tv
    if tolerance is not None and cheap > tolerance:
        tv_upper = math.inf
    else:
        tv_upper = max(tv_upper_bound(hat, p0, x), tv)
    log_p = log_events(M) + look_log_cost(look, 1.0) - N * d
    return Band(N, look, x, tv, min(tv_lower, tv), tv_upper, log_p)


def proportion_interval(successes: int, samples: int, look: int, delta: float) -> tuple[float, float]:
    """Two-sided KL interval for a proportion, valid at every look at once (error delta_k / 2 per side)."""
    if samples <= 0:
        return 0.0, 1.0
    x = (math.log(2.0) + look_log_cost(look, delta)) / samples
    s = successes / samples
    return float(kl_lower(np.array(s), x)), float(kl_upper(np.array(s), x))
