"""Peeled blocks (otlp.optimal.peeling): a chain of priority tokens (fire or fallback kind) ahead of a smaller
softmax block.

Checked against independent routes: the chain's row sums against a direct enumeration of the firing process
over V^n tuples x 2^n fire patterns (with the fallback output when nothing fires); the law and acceptance of
the whole rule by enumeration over V^n (1e-12), with one-token peels forced (nested chains), and with
peeling switched off (the plain block rule must stay exact too, since peeling now hides most Newton solves
from the other tests).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import otlp
import otlp.optimal.peeling as peeling
import otlp.optimal.solve as solve_module
from otlp.formulations import RelaxedOTLP
from otlp.optimal import OptimalTransport
from otlp.optimal.peeling import peel_block

from .instances import FAMILIES, draw, small_instances
from .test_exact_enumeration import TOL, check_exact, enumerate_rule


def _peeled_instances(rng, count, V_range=(3, 9), n_range=(2, 4)):
    """Seeded instances (heavy / dirichlet / skewed) that contain at least one peeled block."""
    out = []
    tries = 0
    while len(out) < count:
        tries += 1
        assert tries < 50 * count, "peeling almost never happens"
        V = int(rng.integers(*V_range))
        n = int(rng.integers(*n_range))
        while V**n > 4096:
            V -= 1
        family = ("heavy", "dirichlet", "skewed_q", "zeros")[tries % 4]
        p, q = FAMILIES[family](rng, V)
        ot = OptimalTransport.from_arrays(p, q, n, method="blocks")
        if any(b.peeled.size for b in ot.blocks):
            out.append((p, q, n))
    return out


def test_peeled_rules_are_exact() -> None:
    """Law = p and acceptance = alpha* (brute force over 2^V) on 300 random instances with peeled blocks."""
    rng = np.random.default_rng(31)
    for p, q, n in _peeled_instances(rng, 300):
        check_exact(p, q, n, method="blocks")


def test_fire_chains_alone_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fallback kind switched off, inner blocks still peel by fire chains: exact on 120 instances."""
    monkeypatch.setattr(peeling, "peel_fallback", lambda *args: None)
    rng = np.random.default_rng(36)
    for p, q, n in _peeled_instances(rng, 120):
        check_exact(p, q, n, method="blocks")


def _one_token_search(K, feasible):
    """A peel search that takes a single chain token (the bottom one, else the top one) whenever that is
    feasible: the remainder keeps almost the whole block, so leaves are peeled again, level after level."""
    ok = feasible(np.array([1, 0]), np.array([0, 1]))
    return (1, 0) if ok[0] else (0, 1) if ok[1] else (0, 0)


def test_nested_peels_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chains inside the leaves of chains (nested peels, up to MAX_PEEL_DEPTH levels), forced by peeling one
    token per level: law = p and acceptance = alpha* by enumeration on 150 instances, deep nests included."""
    monkeypatch.setattr(peeling, "_search", _one_token_search)
    rng = np.random.default_rng(38)
    depths = []
    for trial in range(150):
        n = int(rng.integers(2, 5))
        V = int(rng.integers(4, 9))
        while V**n > 4096:
            V -= 1
        family = ("heavy", "dirichlet", "skewed_q", "zeros")[trial % 4]
        p, q = FAMILIES[family](rng, V)
        ot = check_exact(p, q, n, method="blocks")
        depths += [b.depth for b in ot.blocks]
    assert max(depths) >= solve_module.MAX_PEEL_DEPTH and sum(d >= 2 for d in depths) > 25


@pytest.mark.parametrize("n", [2, 3, 4])
def test_unpeeled_rule_still_exact(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """With peeling off, every inner block goes through Newton as before: exact on every family."""
    monkeypatch.setattr(solve_module, "peel_group", lambda *args: None)
    for _family, p, q in small_instances(np.random.default_rng([33, n]), n, per_family=12):
        ot = check_exact(p, q, n, method="blocks")
        assert all(b.peeled.size == 0 for b in ot.blocks)


def _fire_process_law(ot: OptimalTransport, omega: tuple, blk) -> np.ndarray:
    """Output law of the chain for one tuple, by enumerating which draws fire (2^n patterns), independent of
    the vectorised product formula: returns [V] probabilities of outputting each chain token. A fallback chain
    outputs its last-ranked drafted token when nothing fired and no other token of the block was drafted."""
    rank = {int(t): r for r, t in enumerate(blk.peeled)}
    others = set(blk.tokens.tolist()) - set(rank)
    fire = dict(zip(blk.peeled.tolist(), blk.fire_probabilities.tolist(), strict=True))
    out = np.zeros(ot.V)
    for pattern in itertools.product([0, 1], repeat=len(omega)):
        prob = 1.0
        fired = []
        for x, f in zip(omega, pattern, strict=True):
            a = fire.get(int(x), 0.0)
            prob *= a if f else (1.0 - a) if x in fire else (0.0 if f else 1.0)
            if f and x in fire:
                fired.append(int(x))
        if fired and prob > 0:
            out[min(fired, key=rank.get)] += prob
        elif not fired and blk.fallback and prob > 0 and not others & set(omega):
            present = [int(x) for x in omega if int(x) in rank]
            if present:
                out[max(present, key=rank.get)] += prob
    return out


@pytest.mark.parametrize("kinds_allowed", ["production", "fire only"])
def test_chain_matches_fire_process(monkeypatch: pytest.MonkeyPatch, kinds_allowed: str) -> None:
    """Per tuple, the rule's chain probabilities equal the explicit firing process; chain row sums equal the
    block targets (p on inner blocks, the GR Thm 6.2 vertex on outer ones). The production choice meets fallback
    chains on inner and outer blocks; with the fallback kind switched off, fire chains."""
    if kinds_allowed == "fire only":
        monkeypatch.setattr(peeling, "peel_fallback", lambda *args: None)
    rng = np.random.default_rng(34)
    checked = 0
    kinds = set()
    for p, q, n in _peeled_instances(rng, 40, V_range=(3, 7), n_range=(2, 4)):
        ot = OptimalTransport.from_arrays(p, q, n, method="blocks")
        if any(b.depth > 1 for b in ot.blocks):  # nested chains: covered by test_nested_peels_are_exact
            continue
        omegas, probs = otlp.IID(q, n).enumerate()
        accept, _ = ot.rule(omegas)
        top = ot._inst.block_of_position[ot._position[omegas].max(1)]  # group of the top token
        for blk_index, blk in enumerate(ot.blocks):
            if blk.peeled.size == 0:
                continue
            assert np.all((blk.fire_probabilities >= 0) & (blk.fire_probabilities <= 1))
            kinds.add((blk.kind, blk.fallback))
            rows = np.zeros(ot.V)
            for m in np.flatnonzero(top == blk_index):
                law = _fire_process_law(ot, tuple(omegas[m]), blk)
                got = np.zeros(ot.V)
                for k, x in enumerate(omegas[m]):
                    if x in set(blk.peeled.tolist()):
                        got[x] += accept[m, k]
                np.testing.assert_allclose(got, law, atol=1e-15)
                rows += probs[m] * law
                checked += 1
            targets = dict(zip(blk.tokens.tolist(), blk.targets.tolist(), strict=True))
            np.testing.assert_allclose(rows[blk.peeled], [targets[x] for x in blk.peeled.tolist()], atol=TOL)
    assert checked > 100
    expected = {("inner", True), ("outer", True)} if kinds_allowed == "production" else {("inner", False)}
    assert expected <= kinds


def test_remainder_state_depends_on_the_peeled_set_only() -> None:
    """After peeling J: Qt'^n = Qt^n - p(J) and Q0' = Q0 + sum (1 - a_j) q_j (the module's identities)."""
    rng = np.random.default_rng(35)
    seen = 0
    for _ in range(400):
        K, n = int(rng.integers(2, 12)), int(rng.integers(2, 5))
        q = rng.dirichlet(np.ones(K)) * rng.uniform(0.2, 0.9)
        null = rng.uniform(0.0, 1.0 - q.sum())
        Qt = null + q.sum()
        p = rng.uniform(0.0, 1.0, K)
        p *= rng.uniform(0.3, 0.99) * (Qt**n - null**n) / p.sum()
        ratio = q / p
        order = np.argsort(-ratio)
        p, q = p[order], q[order]
        cut = peel_block(p, q, null, n)
        if cut is None:
            continue
        seen += 1
        assert np.all(cut.fire >= 0) and np.all(cut.fire <= 1)
        np.testing.assert_allclose(cut.rows, p[cut.chain], rtol=1e-12, atol=1e-16)
        null_new = null + ((1.0 - cut.fire) * q[cut.chain]).sum()
        rest = np.setdiff1d(np.arange(K), cut.chain)
        total_new = null_new + q[rest].sum()
        assert abs(total_new**n - (Qt**n - p[cut.chain].sum())) < 1e-13
        assert abs(cut.leaf_null[0] - null_new) < 1e-15
        covered = np.concatenate([np.arange(a, b) for a, b in cut.leaves])
        np.testing.assert_array_equal(np.sort(np.concatenate([covered, cut.chain])), np.arange(K))
    assert seen > 50


@pytest.mark.parametrize("inner", [True, False])
def test_fallback_state_keeps_the_slack(inner: bool) -> None:
    """Fallback kind: R_j = t_j, 0 <= a_j <= 1, and after peeling J the remainder's null N' = N0 + sum (1 - a_j) q_j
    solves (N' + L)^n - N'^n = t(G minus J) + S (the slack S kept; S = 0 for an outer group)."""
    rng = np.random.default_rng([37, inner])
    seen = 0
    for _ in range(400):
        K, n = int(rng.integers(2, 12)), int(rng.integers(2, 6))
        q = rng.dirichlet(np.ones(K)) * rng.uniform(0.2, 0.9)
        null = rng.uniform(0.0, 1.0 - q.sum())
        capacity = (null + q.sum()) ** n - null**n
        t = q**n * rng.uniform(1.0, 3.0, K)  # targets between the bottom and top priority rows, roughly
        t *= capacity * (rng.uniform(0.5, 0.999) if inner else 1.0) / t.sum()
        order = np.argsort(-(q / t))
        t, q = t[order], q[order]
        slack = capacity - t.sum() if inner else 0.0
        cut = peeling.peel_fallback(t, q, null, n, slack)
        if cut is None:
            continue
        seen += 1
        assert cut.fallback and np.all(cut.fire >= 0) and np.all(cut.fire <= 1)
        np.testing.assert_allclose(cut.rows, t[cut.chain], rtol=1e-11, atol=1e-14)
        null_new = null + ((1.0 - cut.fire) * q[cut.chain]).sum()
        assert abs(cut.leaf_null[0] - null_new) <= 1e-13
        rest = np.setdiff1d(np.arange(K), cut.chain)
        L = q[rest].sum()
        assert abs((null_new + L) ** n - null_new**n - (t[rest].sum() + slack)) <= 1e-13
        covered = np.concatenate([np.arange(a, b) for a, b in cut.leaves])
        np.testing.assert_array_equal(np.sort(np.concatenate([covered, cut.chain])), np.arange(K))
    assert seen > (50 if inner else 20)  # random outer targets are often infeasible (Hall), so fewer peel


def test_larger_blocks_every_family_exact() -> None:
    """V = 12..60 (n = 2) and 12..30 (n = 3): blocks large enough for the complete-peel search and for class
    chains next to peeled blocks, every instance family; law = p and acceptance = alpha* by enumeration over V^n
    to 1e-12.
    """
    rng = np.random.default_rng(39)
    for family in sorted(FAMILIES):
        for trial in range(6):
            n = 3 if trial % 3 == 2 else 2
            V = int(rng.integers(12, 61 if n == 2 else 31))
            p, q = draw(family, rng, V, n)
            ot = OptimalTransport.from_arrays(p, q, n, method="blocks")
            law, acceptance = enumerate_rule(ot, otlp.IID(q, n))
            where = f"{family} trial {trial} V={V} n={n}"
            assert ot.success and np.abs(law - p).sum() < TOL, where
            assert abs(acceptance - ot.alpha) < TOL, where
            if n == 2:  # alpha* against the relaxed LP (HiGHS), an independent route
                lp = RelaxedOTLP(p, otlp.IID(q, n)).solve(backend="highs")
                assert abs(lp.value - ot.alpha) < 1e-9, where


def _remainder_hall_dense(P, Q, n, lo, hi, null, margin, inner):
    """The Hall test written out over every prefix m of every remainder (no shortcut), for comparison."""
    ok = np.zeros(lo.size, dtype=bool)
    for c in range(lo.size):
        x = np.maximum(Q - Q[lo[c]], 0.0)
        with np.errstate(invalid="ignore", over="ignore"):
            psi = (P - P[lo[c]]) - peeling.power_gap(null[c], x, n)
        inside = psi[(lo[c] if inner else lo[c] + 1) : hi[c]]
        ok[c] = np.isfinite(psi[hi[c]]) and psi[hi[c]] < (inside.min() if inside.size else np.inf) - margin
    return ok


@pytest.mark.parametrize("n", [2, 3, 5])
def test_one_token_remainder_hall_shortcut(n: int) -> None:
    """Complete peels leave one token; their O(1) Hall test must give the dense test's verdict."""
    rng = np.random.default_rng([48, n])
    for _ in range(300):
        K = int(rng.integers(2, 30))
        P = np.concatenate([[0.0], np.cumsum(rng.dirichlet(np.ones(K)) * rng.random())])
        Q = np.concatenate([[0.0], np.cumsum(rng.dirichlet(np.ones(K)) * rng.random())])
        lo = rng.integers(0, K, size=K)
        null = rng.random(K) * rng.choice([1.0, 1e-6, 0.0], K)
        null[rng.random(K) < 0.1] = np.inf  # an infeasible state: never a pass
        margin = float(rng.choice([0.0, 1e-9]))
        for inner in (True, False):
            fast = peeling._remainder_hall(P, Q, n, lo, lo + 1, null, margin, inner)
            np.testing.assert_array_equal(fast, _remainder_hall_dense(P, Q, n, lo, lo + 1, null, margin, inner))


def test_search_takes_the_most_peeled_candidate() -> None:
    """_search (complete peels first, then every pair) picks what the plain rule "most peeled, then smallest b"
    picks from every pair at once, on random feasibility tables."""
    rng = np.random.default_rng(49)
    for _ in range(500):
        K = int(rng.integers(2, peeling.ALL_PAIRS_MAX + 1))
        table = rng.random((K, K)) < rng.choice([0.02, 0.1, 0.5])  # feasible[b, t]

        def feasible(bs, ts, table=table):
            return table[bs, ts]

        b, t = np.divmod(np.arange(K * K), K)
        keep = (b + t >= 1) & (b + t <= K - 1)
        b, t = b[keep], t[keep]
        ok = table[b, t]
        expected = (0, 0) if not ok.any() else (int(b[np.argmax(np.where(ok, b + t, -1))]),
                                                 int(t[np.argmax(np.where(ok, b + t, -1))]))
        assert peeling._search(K, feasible) == expected
