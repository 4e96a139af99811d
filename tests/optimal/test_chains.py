"""The class-chain rule of otlp/optimal/chains.py on every route (numpy full rule, numpy windowed tuple rule, the host
route of otlp/optimal/host.py with its C kernels, torch device route), checked by exact enumeration over V^n against the
target law, against alpha* from the independent sorted-prefix closed form (otlp.core.subsets) and brute force over
subsets, and against the pure-Python scalar path (otlp/optimal/scalar.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import otlp
from otlp.core import xp as X
from otlp.core.subsets import brute_force_min_psi
from otlp.optimal import OptimalTransport, host
from otlp.optimal import chains as C
from otlp.optimal.scalar import scalar_chains, scalar_rule
from tests.conftest import FAMILIES, random_pair

TOL = 1e-12


def _near_ties(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """q/p ratios equal up to a few ulps (the sort's truncated keys tie; the order must still be exact)."""
    p = rng.dirichlet(np.ones(V))
    q = p * (1.0 + rng.integers(-3, 4, V) * 2.0**-50)
    return p, q / q.sum()


def _instances(seed: int, count: int):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    fams = (*FAMILIES, "near_ties")
    for i in range(count):
        V, n = int(rng.integers(2, 8)), int(rng.integers(1, 5))
        if V**n > 2500:
            n = 2
        fam = fams[i % len(fams)]
        p, q = _near_ties(rng, V) if fam == "near_ties" else random_pair(rng, V, fam)
        yield fam, p, q, n


def _law_and_acceptance(accept: np.ndarray, reject: np.ndarray, F: np.ndarray, order: np.ndarray,
                        omegas: np.ndarray, probs: np.ndarray, V: int) -> tuple[np.ndarray, float]:
    """The output law and the accepted mass of the rule over every tuple (one tuple per row)."""
    residual = np.diff(F[0], prepend=0.0)  # by position (every row holds the same instance)
    r = np.zeros(V)
    r[order[0]] = residual
    r = r / r.sum() if r.sum() > 0 else r
    law = (probs * reject) @ np.broadcast_to(r, (len(probs), V))
    np.add.at(law, omegas.ravel(), (probs[:, None] * accept).ravel())
    return law, float(probs @ accept.sum(1))


@pytest.mark.parametrize("route", ["full", "window", "host", "torch", "torch_two_level", "cuda"])
def test_law_is_p_and_acceptance_is_alpha_star_by_enumeration(route: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """1500 instances per numpy route (``host``: :mod:`otlp.optimal.host`, the C kernels where built, its full chains
    and its own-window tuple rule, each checked), 600 on torch (the CPU, and CUDA where a GPU is present; V = 2..7, n =
    1..4; ties, zeros, point masses, p = q, skewed, near-ties). ``torch_two_level``: torch on the CPU with the running
    sums, minima and maxima an accelerator takes (:func:`otlp.core.xp._two_level_scan`), in blocks of 2 so that these
    short rows span several blocks, the last one padded."""
    torch = pytest.importorskip("torch") if route not in ("full", "window", "host") else None
    if route == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    seen: set[str] = set()
    if route == "torch_two_level":
        scan = X._two_level_scan
        monkeypatch.setattr(X, "_two_level", lambda t, op: True)
        monkeypatch.setattr(X, "SCAN_BLOCK", 2)
        monkeypatch.setattr(X, "_two_level_scan", lambda t, op: seen.add(op) or scan(t, op))
    worst = 0.0
    for fam, p, q, n in _instances({"full": 1, "window": 2, "host": 5, "torch": 3, "torch_two_level": 4,
                                    "cuda": 3}[route], 1500 if route in ("full", "window", "host") else 600):
        V = p.size
        omegas = np.array(list(itertools.product(range(V), repeat=n)))  # [V^n, n]
        probs = otlp.IID(q, n).tuple_probabilities(omegas)
        P, Q = np.tile(p, (len(omegas), 1)), np.tile(q, (len(omegas), 1))
        if route == "full":
            ch = C.build(P, Q, n)
            accept, reject = C.evaluate(ch, omegas)
            pre = ch.pre
        elif route == "window":
            pre = C.prefix(P, Q, n)
            accept, reject = C.tuple_rule(pre, omegas, window=C.needed_window(pre, omegas))
        elif route == "host":
            ch = host.build(P, Q, n)
            accept, reject = C.evaluate(ch, omegas)
            pre = host.prefix(P, Q, n)
            a_win, r_win = host.tuple_rule(pre, omegas, window="auto")
            law, acc = _law_and_acceptance(a_win, r_win, C.residual_cdf(pre), pre.order, omegas, probs, V)
            assert max(np.abs(law - p).max(), abs(acc - float(pre.alpha[0]))) < TOL, (fam, p, q, n)
        else:
            dev = "cuda" if route == "cuda" else "cpu"
            pre_t = C.prefix(torch.from_numpy(P).to(dev), torch.from_numpy(Q).to(dev), n)
            a, r = C.tuple_rule(pre_t, torch.from_numpy(omegas).to(dev), steps=C.NEWTON_STEPS)
            accept, reject = a.cpu().numpy(), r.cpu().numpy()
            pre = C.prefix(P, Q, n)
        law, acc = _law_and_acceptance(accept, reject, C.residual_cdf(pre), pre.order, omegas, probs, V)
        alpha = otlp.optimal_acceptance(p, otlp.IID(q, n))
        err = max(np.abs(law - p).max(), abs(acc - alpha), abs(float(pre.alpha[0]) - alpha))
        worst = max(worst, err)
        assert err < TOL, (fam, p, q, n, err)
    assert worst < TOL
    assert route != "torch_two_level" or seen == {"sum", "min", "max"}


def test_alpha_matches_brute_force_over_subsets() -> None:
    for fam, p, q, n in _instances(4, 300):
        pre = C.prefix(p[None], q[None], n)
        value, _ = brute_force_min_psi(p, otlp.IID(q, n))
        assert abs(float(pre.alpha[0]) - (1.0 + value)) < TOL, fam


def _scalar_rule(p: np.ndarray, q: np.ndarray, n: int, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rule of the scalar path (otlp/optimal/scalar.py: the chains in plain Python floats, each tuple's pieces
    evaluated by its own loop, scalar_rule), tuple by tuple: ``(accept [M, n], reject [M])``."""
    chains = scalar_chains(p.tolist(), q.tolist(), n)
    rules = [scalar_rule(chains, omega) for omega in omegas.tolist()]
    return np.array([a for a, _ in rules]), np.array([r for _, r in rules])


def test_agrees_with_the_scalar_path() -> None:
    """The scalar path (:func:`_scalar_rule`) and the arrays' windowed tuple rule: accept and reject probabilities
    agree to 1e-12 on every tuple, at V up to 60 with sampled tuples."""
    rng = np.random.default_rng(5)
    for i in range(200):
        V, n = int(rng.integers(2, 60)), int(rng.integers(1, 6))
        p, q = random_pair(rng, V, FAMILIES[i % len(FAMILIES)])
        omegas = otlp.IID(q, n).sample(64, rng)
        ref_a, ref_r = _scalar_rule(p, q, n, omegas)
        pre = C.prefix(np.tile(p, (64, 1)), np.tile(q, (64, 1)), n)
        a, r = C.tuple_rule(pre, omegas, window=C.needed_window(pre, omegas))
        assert np.abs(a - ref_a).max() < TOL and np.abs(r - ref_r).max() < TOL


def test_slot_mass_converges_in_the_fixed_newton_steps() -> None:
    """The device route's fixed NEWTON_STEPS reach the converged root on adversarial inputs (H from 0 to 1, roots
    from 1e-12 to L, n = 3..8)."""
    rng = np.random.default_rng(6)
    for n in range(3, 9):
        H = np.concatenate([np.zeros(50), 10.0 ** rng.uniform(-12, 0, 2000)])
        L = rng.uniform(0, 1, H.size) * (1 - H)
        y_true = L * rng.uniform(0, 1, H.size) ** rng.integers(1, 12, H.size)
        r = rng.uniform(0, 2, H.size) * n * (H + y_true) ** (n - 1)
        gap = np.maximum(C.power_gap(H, y_true, n) - r * y_true, 0.0)
        fixed = C.slot_mass(H, L, r, gap, n, steps=C.NEWTON_STEPS)
        full = C.slot_mass(H, L, r, gap, n)
        assert np.all(np.abs(fixed - full) <= 1e-13 * np.maximum(L, 1e-300) + 1e-300)


def _tied_rows(rng, B: int, V: int, runs: int):  # noqa: ANN001, ANN202
    """Rows whose ratios take ``runs`` values (n-gram laws: long runs of equal q/p, some tokens with q = 0)."""
    P = rng.dirichlet(np.full(V, 0.5), size=B)
    Q = P * rng.choice(rng.uniform(0.2, 3.0, runs), size=(B, V))
    Q[:, ::17] = 0.0
    return P, Q / Q.sum(1, keepdims=True)


@pytest.mark.parametrize("n", [3, 4, 8])
def test_tied_runs_follow_from_one_root_as_a_root_at_every_position_gives(monkeypatch: pytest.MonkeyPatch,
                                                                         n: int) -> None:
    """Along a run of equal ratios the slot masses are y_i = (y_{i-1} - q_{i-1})^+ (module docstring): the chains
    so built equal those with Newton's root at every position (``_tied`` forced off), on numpy and torch."""
    rng = np.random.default_rng(n)
    P, Q = _tied_rows(rng, 6, 500, 7)
    fast = C.build(P, Q, n, newton_steps=None)
    assert C._tied(*_tied_inputs(fast)).sum() > P.size // 4  # the case this is about
    monkeypatch.setattr(C, "_tied", lambda r_below, *a: np.zeros(r_below.shape, bool)
                        if isinstance(r_below, np.ndarray) else r_below != r_below)
    slow = C.build(P, Q, n, newton_steps=None)
    for name in ("y", "before", "lam", "beta"):
        a, b = getattr(fast.terms, name), getattr(slow.terms, name)
        fin = np.isfinite(b)
        assert np.array_equal(fin, np.isfinite(a)), name
        np.testing.assert_allclose(a[fin], b[fin], rtol=1e-11, atol=1e-12, err_msg=name)
    torch = pytest.importorskip("torch")
    slow_t = C.build(torch.from_numpy(P), torch.from_numpy(Q), n)
    monkeypatch.undo()
    fast_t = C.build(torch.from_numpy(P), torch.from_numpy(Q), n)
    np.testing.assert_allclose(fast_t.terms.y.numpy(), slow_t.terms.y.numpy(), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(fast_t.terms.y.numpy(), fast.terms.y, rtol=1e-11, atol=1e-13)


def _backoff_rows(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """n-gram-like rows: p and q both proportional to one base law on most tokens (a back-off class), so that their
    q/p sort keys tie exactly in floats while p/q, rounded separately, often differ in the last bit."""
    u = rng.dirichlet(np.ones(V))
    p, q = 0.3 * u, 0.7 * u
    own = rng.random(V) < 0.3
    p[own] += 0.7 * rng.dirichlet(np.ones(own.sum()))
    q[own] += 0.3 * rng.dirichlet(np.ones(own.sum()))
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("n", [3, 4, 6])
def test_runs_tied_in_the_sort_key_agree_with_a_root_at_every_position(n: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens whose keys q/p are equal floats take the tied-run closed form even where p/q rounds differently
    (chains computes r as 1 / (q/p) there, which a root at every position takes as continuously as p/q): accept and
    reject agree to 1e-12 with the rule whose chains solve a root at every position (``_tied`` forced off, Newton to
    convergence), on 100 rows of 200 tokens with sampled tuples."""
    rng = np.random.default_rng(40 + n)
    cases = 0
    for _ in range(100):
        p, q = _backoff_rows(rng, 200)
        pre = C.prefix(np.tile(p, (64, 1)), np.tile(q, (64, 1)), n)
        ks, r = pre.qs[0] / pre.ps[0], pre.ps[0] / pre.qs[0]
        cases += int(((ks[1:] == ks[:-1]) & (r[1:] != r[:-1])).sum())
        omegas = otlp.IID(q, n).sample(64, rng)
        a, rej = C.tuple_rule(pre, omegas, window="auto")
        with monkeypatch.context() as patch:
            patch.setattr(C, "_tied", lambda r_below, *a: np.zeros(r_below.shape, bool))
            ref_a, ref_r = C.tuple_rule(pre, omegas, window="auto", steps=None)
        assert np.abs(a - ref_a).max() < TOL and np.abs(rej - ref_r).max() < TOL
    assert cases > 2000  # the case this is about: about 60 per row


def _tied_inputs(ch):  # noqa: ANN001, ANN202
    tm = ch.terms
    q_pos = tm.qs > 0
    r = np.where(q_pos, tm.t / np.where(q_pos, tm.qs, 1.0), 0.0)
    pos = np.arange(r.shape[1])[None, :]
    return np.concatenate([np.zeros((r.shape[0], 1)), r[:, :-1]], axis=1), q_pos, pos, ch.start


def test_power_gap_against_exact_rationals_on_both_forms() -> None:
    """(b + x)^n - b^n: the expansion (n <= 64) and the logarithmic form above it, against exact rationals."""
    from fractions import Fraction

    rng = np.random.default_rng(8)
    for n in (3, 8, 64, 65, 300, 2000):
        for _ in range(20):
            b, x = float(rng.uniform(0, 1)), float(rng.uniform(0, 1) * 10.0 ** -rng.integers(0, 9))
            b = min(b, 1.0 - x)
            exact = float((Fraction(b) + Fraction(x)) ** n - Fraction(b) ** n)
            for got in (C.power_gap(b, x, n), float(C.power_gap(np.array([b]), np.array([x]), n)[0])):
                assert abs(got - exact) <= 1e-12 * exact + 1e-300, (n, b, x, got, exact)


@pytest.mark.parametrize("n", [70, 1100, 5000])
def test_huge_n_is_exact_and_never_overflows(n: int) -> None:
    """Any n: alpha* equals the independent sorted-prefix closed form, the rule's row sums meet their targets
    (R = p on H*, R <= p outside, sum R = alpha*) and every slice is a law (the issue's OverflowError at n ~ 1030)."""
    rng = np.random.default_rng(n)
    for V in (3, 40, 400):
        p, q = rng.dirichlet(np.ones(V) * 0.3), rng.dirichlet(np.ones(V) * 0.3)
        ot = OptimalTransport(p, otlp.IID(q, n))
        assert abs(ot.alpha - otlp.optimal_acceptance(p, otlp.IID(q, n))) < TOL and ot.success
        R = ot.row_sums
        assert np.all(R <= p + 1e-12) and abs(R.sum() - ot.alpha) < 1e-11
        slices = ot.slices(otlp.IID(q, n).sample(50, rng))
        assert np.abs(slices.sum(1) - 1).max() < TOL and slices.min() >= -1e-15


@pytest.mark.parametrize("n", [2, 3, 4])
def test_each_rows_own_window_is_the_common_windows_rule(n: int) -> None:
    """``window="auto"`` (each row's chain on its own positions, all rows in one flat array) gives the rule of one
    window for every row and of the device route's full window, on rows whose served groups differ in size by 100x
    (near-proportional p, q make psi flat: groups of hundreds of tokens, beside LM-like rows of singletons)."""
    rng = np.random.default_rng(n)
    B, V = 12, 400
    P = rng.dirichlet(np.full(V, 0.3), size=B)
    Q = rng.dirichlet(np.full(V, 0.3), size=B)
    Q[::2] = P[::2] * (1.0 + 1e-3 * rng.standard_normal((B // 2, V)))  # flat psi on even rows
    Q /= Q.sum(1, keepdims=True)
    w = np.stack([rng.choice(V, size=n, p=Q[b]) for b in range(B)])  # [B, n]
    pre = C.prefix(P, Q, n)
    _, top, s, _ = C.served_group(pre, w)
    widths = (top - s)[:, 0] + 2
    assert widths.max() >= 100 * widths.min()  # the case this is about
    ragged = C.tuple_rule(pre, w, window="auto")
    common = C.tuple_rule(pre, w, window=C.needed_window(pre, w))
    full = C.tuple_rule(pre, w, window=None)
    for other in (common, full):
        np.testing.assert_allclose(ragged[0], other[0], rtol=0, atol=1e-15)
        np.testing.assert_allclose(ragged[1], other[1], rtol=0, atol=1e-15)


def test_the_residual_draw_is_the_inverse_cdf_of_the_residual() -> None:
    """:func:`chains.sample` finds the residual position as the last prefix index with psi - psi_m* <= v; it is the
    inverse CDF of :func:`chains.residual_cdf` (the first position whose F exceeds v), on a grid of uniforms that
    includes F's own breakpoints."""
    rng = np.random.default_rng(11)
    for i in range(60):
        V, n = int(rng.integers(2, 300)), int(rng.integers(1, 5))
        p, q = random_pair(rng, V, FAMILIES[i % len(FAMILIES)])
        pre = C.prefix(p[None, :], q[None, :], n)
        F = C.residual_cdf(pre)[0]  # [V]
        if F[-1] <= 0:
            continue
        us = np.unique(np.concatenate([np.linspace(0, 1, 101, endpoint=False), F[:-1] / F[-1]]))
        us = us[us < 1]
        M = us.size
        rows = C.Prefix(**{k: (np.repeat(v, M, axis=0) if isinstance(v, np.ndarray) else v)
                           for k, v in vars(pre).items()})
        w = np.zeros((M, 1), dtype=np.int64)
        tokens, index = C.sample(rows, np.zeros((M, 1)), np.ones(M), w, np.stack([np.zeros(M), us], 1))
        expected = pre.order[0, np.minimum(np.searchsorted(F, us * F[-1], side="right"), V - 1)]
        assert (index == -1).all()
        np.testing.assert_array_equal(tokens, expected)
