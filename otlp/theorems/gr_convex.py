"""Checks for GR Section 6's convex programs (papers/000, notes/global-resolution.md §2.11-2.13, Lemma I.1):
the outer softmax bound (Thm 6.4), the inner slack-softmax bound (Thm 6.5), the compact coefficients of App. K and
the nonnegativity / convexity of Phi (Lemma I.1).

The truth side enumerates the drafted tuples omega in V^n one by one (rows S_{i, omega}, gradients of Phi_T and
Theta_T as sums over tuples), independent of the compact-coefficient code under test. Thm 6.4 / 6.5 hold for ANY alpha:
each is tried on random alphas, on the minimisers of the block programs (:mod:`.block_programs`, solved by scipy,
independently of the production class chains), and on those weights lifted by the block index, which turns strict
between-block priority into a softmax limit (the existence part of Thm 6.4: a point with ||grad Phi|| ~ 0).
"""

from __future__ import annotations

import numpy as np

from otlp.theorems.common import members, numbers, scheme_stream
from otlp.theorems.core import Check, Tally
from otlp.theorems.instances import Instance

#: Lifting gap between consecutive blocks: the leaked mass is ~e^-LIFT per tuple (below float64 resolution).
LIFT = 60.0


def _gen_iid(rng: np.random.Generator, count: int, exact: bool) -> list[Instance]:
    return scheme_stream(rng, count, exact, ("iid",), V_range=(2, 6), n_range=(1, 3))


def _truncations(tokens: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """The minimal truncations T of GR Algorithm 1 (prefixes of ``tokens`` by decreasing q, empty to full) and one
    random subset."""
    by_q = tokens[np.argsort(-q[tokens], kind="stable")]
    out = [by_q[:k] for k in range(by_q.size + 1)]
    out.append(tokens[rng.random(tokens.size) < 0.5])
    return out


def _alphas(V: int, rng: np.random.Generator, log_w: np.ndarray, block: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Random alphas at three scales, the block programs' log-weights (non-finite ones set to 0: the theorems hold
    for any alpha) and those lifted by LIFT per block."""
    base = np.where(np.isfinite(log_w), log_w, 0.0)
    return [("alpha=0", np.zeros(V)), ("alpha~N(0,2)", rng.normal(0, 2, V)), ("alpha~N(0,8)", rng.normal(0, 8, V)),
            ("block weights", base), ("block weights lifted by block", base + LIFT * block)]


def _softmax(a: np.ndarray, slack: bool) -> np.ndarray:
    """e^{a_i} / (sum_j e^{a_j}) or / (1 + sum_j e^{a_j}) (slack node alpha = 0), max-shifted."""
    top = max(float(a.max()), 0.0) if slack else float(a.max())
    w = np.exp(a - top)
    return w / (w.sum() + (np.exp(-top) if slack else 0.0))


# -- Thm 6.4 -----------------------------------------------------------------------------------------------------------
def verify_thm64(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, False)
    probs, q = np.asarray(probs), inst.q
    draft = inst.draft()
    h, p_i, _ = hooks["outer_residuals"](inst.p, draft)
    log_w, block = hooks["block_weights"](inst.p, draft)
    V, n = len(p), inst.n
    outer = np.flatnonzero(~h)
    mem = members(omegas)
    cols = [m for m in range(len(mem)) if any(not h[j] for j in mem[m])]  # omega in V^n minus (H*)^n
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    qH = float(q[h].sum())
    for T in _truncations(outer, q, rng):
        inT = np.zeros(V, dtype=bool)
        inT[T] = True
        eps_T = 1.0 - (qH + float(q[T].sum())) ** n  # notes §2.11
        for name, a in _alphas(V, rng, log_w, block):
            rows, grad = np.zeros(V), np.zeros(V)
            for m in cols:
                U = np.array(sorted(j for j in mem[m] if not h[j]))
                s = probs[m] * _softmax(a[U], slack=False)  # eq. (14): S_{i, omega}, i in set(omega) minus H*
                t.equal(f"T={T.tolist()} {name}: p_draft equality at omega_{m}", s.sum(), probs[m])
                rows[U] += s
                if inT[U].all():  # omega in (H* + T)^n minus (H*)^n: a term of Phi_T (eq. 12)
                    grad[U] += s
            grad = np.where(inT, grad - p_i, 0.0)  # d Phi_T / d alpha_i = sum_omega S_{i, omega} - p_i on T
            deviation = float(np.abs(rows[outer] - p_i[outer]).sum())
            bound = float(np.abs(grad).sum()) + 3 * eps_T
            t.leq(f"T={T.tolist()} {name}: outer L1 deviation <= ||grad Phi_T||_1 + 3 eps_T", deviation, bound + 1e-12)
            if T.size == outer.size and name.endswith("lifted by block"):
                t.leq("existence: ||grad Phi|| at the lifted block weights (-> 0)", float(np.abs(grad).sum()),
                      1e-9)
    return t.result()


THM64 = Check(
    name="gr.thm6.4",
    title="outer softmax rows: p_draft equalities exact, L1 deviation <= ||grad Phi_T||_1 + 3 eps_T (any alpha)",
    source="GR Thm 6.4, eqs. (12), (14); notes §2.11",
    statement="For every T subset V minus H* and ANY alpha, S_{i,w} = P(w) e^{alpha_i} / sum_{j in set(w) minus H*} "
    "e^{alpha_j} meets every p_draft equality over V^n minus (H*)^n exactly, and sum_{i not in H*} |sum_w S_{i,w} - "
    "p_i| <= ||grad Phi_T(alpha)||_1 + 3 eps_T with eps_T = 1 - q(H* + T)^n; the block programs' minimisers lifted by "
    "block index give ||grad Phi|| ~ 0 (existence).",
    generate=_gen_iid,
    verify=verify_thm64,
    hooks={"outer_residuals": "otlp.theorems.adapters:outer_residual_targets",
           "block_weights": "otlp.theorems.block_programs:block_log_weights"},
    tolerance=1e-9,
)


# -- Thm 6.5 -----------------------------------------------------------------------------------------------------------
def verify_thm65(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, False)
    p, probs, q = np.asarray(p), np.asarray(probs), inst.q
    draft = inst.draft()
    h, _, _ = hooks["outer_residuals"](inst.p, draft)
    log_w, block = hooks["block_weights"](inst.p, draft)
    V, n = len(p), inst.n
    inner = np.flatnonzero(h)
    mem = members(omegas)
    cols = [m for m in range(len(mem)) if all(h[j] for j in mem[m])]  # omega in (H*)^n
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    qH = float(q[h].sum())
    for T in _truncations(inner, q, rng):
        inT = np.zeros(V, dtype=bool)
        inT[T] = True
        gamma_T = qH**n - float(q[T].sum()) ** n  # notes §2.12
        for name, a in _alphas(V, rng, log_w, block):
            rows, grad = np.zeros(V), np.zeros(V)
            for m in cols:
                U = np.array(sorted(mem[m]))
                s = probs[m] * _softmax(a[U], slack=True)  # eq. (17), slack node a0 with alpha = 0
                t.leq(f"T={T.tolist()} {name}: p_draft inequality at omega_{m}", s.sum(), probs[m] * (1 + 1e-15))
                rows[U] += s
                if inT[U].all():  # omega in T^n: a term of Theta_T (eq. 15)
                    grad[U] += s
            grad = np.where(inT, grad - p, 0.0)
            deviation = float(np.abs(rows[inner] - p[inner]).sum())
            bound = float(np.abs(grad).sum()) + 3 * gamma_T
            t.leq(f"T={T.tolist()} {name}: inner L1 deviation <= ||grad Theta_T||_1 + 3 gamma_T", deviation,
                  bound + 1e-12)
    return t.result()


THM65 = Check(
    name="gr.thm6.5",
    title="inner slack-softmax rows: p_draft inequalities, L1 deviation <= ||grad Theta_T||_1 + 3 gamma_T (any alpha)",
    source="GR Thm 6.5, eqs. (15), (17), Lemma J.1; notes §2.12",
    statement="For every T subset H* and ANY alpha, S_{i,w} = P(w) e^{alpha_i} / (1 + sum_{j in set(w)} e^{alpha_j}) "
    "on (H*)^n meets the p_draft inequalities, and sum_{i in H*} |sum_w S_{i,w} - p(i)| <= ||grad Theta_T(alpha)||_1 "
    "+ 3 gamma_T with gamma_T = q(H*)^n - q(T)^n (uses psi(T) >= psi(H*): H* must be a minimiser).",
    generate=_gen_iid,
    verify=verify_thm65,
    hooks={"outer_residuals": "otlp.theorems.adapters:outer_residual_targets",
           "block_weights": "otlp.theorems.block_programs:block_log_weights"},
    tolerance=1e-9,
)


# -- App. K compact coefficients ---------------------------------------------------------------------------------------
def _subsets(k: int, n: int) -> list[tuple[int, ...]]:
    import itertools

    return [c for u in range(1, min(n, k) + 1) for c in itertools.combinations(range(k), u)]


def verify_appk(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    p, omegas, probs = numbers(inst, False)
    probs, q = np.asarray(probs), inst.q
    h, p_i, _ = hooks["outer_residuals"](inst.p, inst.draft())
    coefficients = hooks["subset_coefficients"]
    n = inst.n
    mem = members(omegas)
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    for side, T, null in (("outer c_U", np.flatnonzero(~h), h), ("inner d_U", np.flatnonzero(h), np.zeros_like(h))):
        if T.size == 0:
            continue
        subs = _subsets(T.size, n)
        coef = np.zeros(len(subs))
        for u in range(1, min(n, T.size) + 1):
            idx = np.array([s for s in subs if len(s) == u], dtype=np.int64)
            coef[[k for k, s in enumerate(subs) if len(s) == u]] = coefficients(q[T], float(q[null].sum()), n, idx)
        # enumeration: c_U = mass of the tuples in (null + U)^n whose set minus null is exactly U
        mass = {s: 0.0 for s in subs}
        pos = {int(tok): k for k, tok in enumerate(T)}
        for m, mset in enumerate(mem):
            rest = [j for j in mset if not null[j]]
            if rest and all(j in pos for j in rest):
                mass[tuple(sorted(pos[j] for j in rest))] += probs[m]
        for k, s in enumerate(subs):
            t.equal(f"{side} U={[int(T[j]) for j in s]}: compact formula vs tuple enumeration", coef[k], mass[s])
        qH = float(q[h].sum())
        total = 1 - qH**n if side.startswith("outer") else qH**n
        t.equal(f"sanity sum of the {side} (notes §2.13)", coef.sum(), total)
        # the compact gradient with the compact coefficients equals the tuple gradient (outer: targets p_i)
        target = p_i if side.startswith("outer") else np.asarray(p)
        a = rng.normal(0, 3, len(p))
        compact = np.zeros(len(p))
        for k, s in enumerate(subs):
            U = T[list(s)]
            compact[U] += coef[k] * _softmax(a[U], slack=side.startswith("inner"))
        tuples = np.zeros(len(p))
        for m, mset in enumerate(mem):
            U = np.array(sorted(j for j in mset if not null[j]))
            if U.size and np.isin(U, T).all():
                tuples[U] += probs[m] * _softmax(a[U], slack=side.startswith("inner"))
        t.equal(f"{side}: compact gradient vs tuple gradient (L1)", float(np.abs(compact - tuples).sum()), 0.0)
        t.equal(f"{side}: gradient target sum", float((compact - target)[T].sum()), float((tuples - target)[T].sum()))
    return t.result()


APPK = Check(
    name="gr.appK",
    title="compact coefficients c_U, d_U = tuple masses; sum c_U = 1 - q(H*)^n, sum d_U = q(H*)^n",
    source="GR App. K (Phi_T, Theta_T compact form); notes §2.13; exact-ot-design §2 (iv)",
    statement="For T = V minus H*, c_U (U subset T, 1 <= |U| <= n) equals the mass of the tuples in (H* + U)^n with "
    "set minus H* = U and sums to 1 - q(H*)^n; for T = H*, d_U equals the mass of the tuples with set = U and sums to "
    "q(H*)^n; the compact gradient with them equals the gradient summed over tuples.",
    generate=_gen_iid,
    verify=verify_appk,
    hooks={"outer_residuals": "otlp.theorems.adapters:outer_residual_targets",
           "subset_coefficients": "otlp.theorems.block_programs:subset_coefficients"},
    tolerance=1e-12,
)


# -- Lemma I.1 ---------------------------------------------------------------------------------------------------------
def _phi(a: np.ndarray, x: np.ndarray, y: np.ndarray, nbrs: list[np.ndarray]) -> float:
    """Phi(alpha) = sum_b y_b log sum_{a in N(b)} e^{alpha_a} - sum_a x_a alpha_a (GR Lemma I.1), log-sum-exp."""
    total = 0.0
    for yb, N in zip(y, nbrs, strict=True):
        top = float(a[N].max())
        total += yb * (top + np.log(np.exp(a[N] - top).sum()))
    return total - float(x @ a)


def _systems(inst: Instance, hooks: dict, rng: np.random.Generator) -> list[tuple[str, np.ndarray, np.ndarray, list]]:
    """Feasible two-sided transport systems: a random bipartite one built from a random z >= 0 (so feasible by
    construction), and GR's outer system with the production p_i (feasible by Thm 6.1)."""
    out = []
    A, B = int(rng.integers(2, 6)), int(rng.integers(2, 8))
    edges = rng.random((A, B)) < 0.6
    edges[rng.integers(A, size=B), np.arange(B)] = True  # every b has a neighbour
    z = np.where(edges, rng.exponential(1.0, (A, B)) * (rng.random((A, B)) < 0.8), 0.0)
    z /= max(z.sum(), 1e-300)
    out.append(("random bipartite", z.sum(axis=1), z.sum(axis=0), [np.flatnonzero(edges[:, b]) for b in range(B)]))
    h, p_i, _ = hooks["outer_residuals"](inst.p, inst.draft())
    omegas, probs = inst.law(False)
    outer = np.flatnonzero(~h)
    if outer.size:
        index = {int(tok): k for k, tok in enumerate(outer)}
        nbrs, y = [], []
        for mset, pr in zip(members(omegas), probs, strict=True):
            N = [index[j] for j in sorted(mset) if not h[j]]
            if N:
                nbrs.append(np.array(N))
                y.append(pr)
        out.append(("GR outer system (production p_i)", p_i[outer], np.array(y), nbrs))
    return out


def verify_lemma_i1(inst: Instance, hooks: dict, exact: bool) -> float:
    t = Tally()
    rng = np.random.default_rng(inst.extra.get("seed", 0))
    for name, x, y, nbrs in _systems(inst, hooks, rng):
        A = x.size
        points = [rng.normal(0, s, A) for s in (0.5, 3, 20) for _ in range(3)]
        for S in range(1, 1 << A):  # the Hall directions alpha = t 1_S: Phi -> t (y(N(S)) - x(S)) + O(log n)
            ind = np.array([(S >> k) & 1 for k in range(A)], dtype=np.float64)
            points += [50.0 * ind, 500.0 * ind]
        for k, a in enumerate(points):
            t.leq(f"{name}: Phi >= 0 at point {k}", -_phi(a, x, y, nbrs), 1e-12 * (1 + np.abs(a).max()))
        for k in range(6):  # convexity: midpoint inequality on random segments
            a, b = rng.normal(0, 4, A), rng.normal(0, 4, A)
            mid = _phi((a + b) / 2, x, y, nbrs)
            t.leq(f"{name}: midpoint convexity {k}", mid, (_phi(a, x, y, nbrs) + _phi(b, x, y, nbrs)) / 2 + 1e-12)
    return t.result()


LEMMA_I1 = Check(
    name="gr.lemmaI.1",
    title="Phi of a feasible two-sided transport system is convex and nonnegative",
    source="GR Lemma I.1 (App. I); notes §2.11",
    statement="If x_a = sum_b z_ab, y_b = sum_a z_ab has a solution z >= 0 on the edges, then Phi(alpha) = sum_b y_b "
    "log sum_{a in N(b)} e^{alpha_a} - sum_a x_a alpha_a is convex and >= 0 (tried at random points, along every "
    "Hall direction t 1_S, and by midpoint convexity); instances: random feasible systems and GR's outer system with "
    "the production p_i.",
    generate=lambda rng, count, exact: scheme_stream(rng, count, exact, ("iid",), V_range=(2, 5), n_range=(1, 3)),
    verify=verify_lemma_i1,
    hooks={"outer_residuals": "otlp.theorems.adapters:outer_residual_targets"},
    tolerance=1e-9,
)

CHECKS = [THM64, THM65, APPK, LEMMA_I1]
