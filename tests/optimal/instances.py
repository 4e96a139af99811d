"""Seeded instance families for the exact-OT tests (design note §5): each returns (p, q) over V tokens."""

from __future__ import annotations

import numpy as np


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.maximum(x, 0.0)
    if x.sum() <= 0:
        x = np.ones_like(x)
    return x / x.sum()


def dirichlet(rng, V):
    a = rng.choice([0.1, 1.0, 5.0])
    return rng.dirichlet(np.full(V, a)), rng.dirichlet(np.full(V, rng.choice([0.1, 1.0, 5.0])))


def heavy(rng, V):
    """Heavy-tailed logits: p = softmax(2 t_3), q = softmax(same + N(0, 1)) (the benchmark generator)."""
    z = 2.0 * rng.standard_t(3, V)
    y = z + rng.normal(size=V)
    return _normalise(np.exp(z - z.max())), _normalise(np.exp(y - y.max()))


def zeros(rng, V):
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    p[rng.random(V) < 0.3] = 0.0
    q[rng.random(V) < 0.3] = 0.0
    return _normalise(p), _normalise(q)


def rational_ties(rng, V):
    """Small-integer masses: exact ties in q/p and in psi."""
    p = rng.integers(0, 4, V).astype(float)
    q = rng.integers(0, 4, V).astype(float)
    p[0] += 1
    q[-1] += 1
    return _normalise(p), _normalise(q)


def identical_tokens(rng, V):
    """Repeated (p_i, q_i) pairs: ties inside one block."""
    p = np.repeat(rng.dirichlet(np.ones(2)), V)[:V]
    q = np.repeat(rng.dirichlet(np.ones(3)), V)[:V]
    return _normalise(p), _normalise(q)


def p_equals_q(rng, V):
    p = rng.dirichlet(np.ones(V))
    return p, p.copy()


def point_mass_p(rng, V):
    p = np.zeros(V)
    p[rng.integers(V)] = 1.0
    return p, rng.dirichlet(np.ones(V))


def point_mass_q(rng, V):
    q = np.zeros(V)
    q[rng.integers(V)] = 1.0
    return rng.dirichlet(np.full(V, 0.5)), q


def skewed_q(rng, V):
    """q_max ~ 0.9998 and the rest 1e-8..1e-4 (the Newton step-cap case of the design note §4)."""
    q = 10.0 ** rng.uniform(-8, -4, V)
    q[rng.integers(V)] = 1.0
    return rng.dirichlet(np.ones(V)), _normalise(q)


def uniform_q(rng, V):
    return rng.dirichlet(np.ones(V)), np.full(V, 1.0 / V)


def near_ties(rng, V, n=2):
    """psi with near-ties: p built from q so that consecutive prefix values of psi differ by ~1e-13."""
    q = rng.dirichlet(np.ones(V))
    Q = np.cumsum(q)
    target = -rng.uniform(0.0, 0.05) + rng.choice([0.0, 1e-13, -1e-13, 1e-15], size=V)
    target[-1] = 0.0
    P = np.clip(Q**n + target, 0.0, 1.0)
    p = np.diff(np.concatenate([[0.0], np.maximum.accumulate(P)]))
    return _normalise(p), q


FAMILIES = {
    "dirichlet": dirichlet,
    "heavy": heavy,
    "zeros": zeros,
    "rational_ties": rational_ties,
    "identical_tokens": identical_tokens,
    "p_equals_q": p_equals_q,
    "point_mass_p": point_mass_p,
    "point_mass_q": point_mass_q,
    "skewed_q": skewed_q,
    "uniform_q": uniform_q,
    "near_ties": near_ties,
}


def draw(family: str, rng, V: int, n: int):
    """One (p, q) of ``family`` over V tokens (near_ties also needs n, the power its psi is tuned to)."""
    return FAMILIES[family](rng, V, n) if family == "near_ties" else FAMILIES[family](rng, V)


def small_instances(rng, n: int, per_family: int, max_tuples: int = 4096):
    """``per_family`` seeded (family, p, q) for every family, V in [2, 8] shrunk until V^n <= max_tuples (small
    enough to enumerate every drafted tuple)."""
    for family in sorted(FAMILIES):
        for _ in range(per_family):
            V = int(rng.integers(2, 9))
            while V**n > max_tuples:
                V -= 1
            yield family, *draw(family, rng, V, n)


def slot_law(P1, Q1, n: int, omegas, probs, slots):  # noqa: ANN001, ANN201
    """``(law [V], acceptance, alpha*)`` of a rule that, on each drafted tuple ``omegas [T, n]`` (probabilities
    ``probs [T]``), accepts draft k with ``slots[:, k]`` and otherwise (``slots[:, n]``) draws the class-chain
    rule's residual, built by the reference from the one pair ``P1, Q1 [1, V]``."""
    from otlp.optimal import chains as C

    V = P1.shape[1]
    ch = C.build(P1, Q1, n, newton_steps=None)
    residual = np.zeros(V)
    residual[ch.pre.order[0]] = ch.residual[0]
    alpha = float(ch.pre.alpha[0])
    residual = residual / (1.0 - alpha) if alpha < 1.0 - 1e-15 else residual * 0.0
    law = np.zeros(V)
    for k in range(n):
        np.add.at(law, omegas[:, k], probs * slots[:, k])
    law += probs @ slots[:, n] * residual
    return law, float(probs @ slots[:, :n].sum(1)), alpha


def filtered_target(p, topk: float):  # noqa: ANN001, ANN201 - torch [B, V]
    """``p [B, V]`` as engines pass it after filtering: an int k keeps each row's k largest entries (top-k), a float
    in (0, 1) the fewest largest entries whose mass reaches it (top-p); the rest 0, rows renormalised."""
    import torch

    ranked, idx = torch.sort(p, 1, descending=True)  # [B, V]
    keep = (torch.arange(p.shape[1]) < topk)[None, :] if isinstance(topk, int) else ranked.cumsum(1) - ranked < topk
    p = torch.zeros_like(p).scatter_(1, idx, torch.where(keep, ranked, 0.0))
    return p / p.sum(1, keepdim=True)


def lm_rows(B: int, V: int, seed: int, draft: str, draws: int, dtype=None, topk: float | None = None):  # noqa: ANN001, ANN201
    """LM-like torch rows ``p, q [B, V]``, ``drafts [B, draws]`` from q and uniforms ``[B, 2]`` (float64): p =
    softmax(3 z); q loose (``draft`` "loose": 3 z' + 0.5 log p, 1 - TV ~ 0.1), close (a number sigma: log p + sigma
    z'), or tied ("ties": a close draft with p and q rounded to multiples of 1/64 of their maxima: runs of equal
    ratios and of equal psi steps). Cast to ``dtype`` (default float32); float64 rows renormalised (float32 rows sum
    to 1 within 1e-7 only). ``topk``: the target filtered as engines do before verification (issue 41), after q
    and the drafts are drawn: an int k keeps p's k largest entries (top-k), a float in (0, 1) the fewest largest
    entries whose mass reaches it (top-p), the rest set to 0 and p renormalised, so that p = 0 < q on most
    tokens and drafts land there."""
    import torch

    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g) * 3, 1)
    if draft == "loose":
        q = torch.softmax(torch.randn(B, V, generator=g) * 3 + 0.5 * torch.log(p), 1)
    elif draft == "ties":
        q = torch.softmax(torch.log(p) + torch.randn(B, V, generator=g), 1)
        p = (p / p.amax(1, keepdim=True) * 64).round() + 1
        q = (q / q.amax(1, keepdim=True) * 64).round() + (torch.rand(B, V, generator=g) < 0.5)
        p, q = p / p.sum(1, keepdim=True), q / q.sum(1, keepdim=True)
    else:
        q = torch.softmax(torch.log(p) + float(draft) * torch.randn(B, V, generator=g), 1)
    drafts = torch.multinomial(q, draws, replacement=True, generator=g)
    u = torch.rand(B, 2, generator=g, dtype=torch.float64)
    if topk is not None:
        p = filtered_target(p, topk)
    dtype = torch.float32 if dtype is None else dtype
    p, q = p.to(dtype), q.to(dtype)
    if dtype == torch.float64:
        p, q = p / p.sum(1, keepdim=True), q / q.sum(1, keepdim=True)
    return p, q, drafts, u
