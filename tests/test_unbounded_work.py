"""Sizes counted before work (issue 44): V^n in logarithms, certify's n and its stages' limits, the sampler's draft
count, the sweep's n column. CLI refusals: exit code 2, one ``otlp: error:`` line, within 3 s (a subprocess with a
timeout: before, these ran 5-166 s or ended in a traceback)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from otlp.core.errors import InputError, ModelTooLargeError

#: a refusal comes back within this (the interpreter's start and otlp's imports included)
CLI_SECONDS = 3.0
P, Q = "0.1,0.6,0.3", "0.5,0.3,0.2"


def _cli(*argv: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otlp.cli", *argv], capture_output=True, text=True,
                          timeout=CLI_SECONDS, cwd=cwd)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("otlp: error: "), proc.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("verifier", ["rrs", "all", "mymodule:verify"])
def test_certify_refuses_a_huge_n_at_once(verifier):  # noqa: ANN001
    line = _one_error_line(_cli("certify", "--verifier", verifier, "--p", P, "--q", Q, "--n", "1000000000"))
    assert "--n = 1,000,000,000 drafts is over certify's limit" in line


def test_solve_at_a_huge_n_answers_the_closed_form_and_refuses_the_lp_without_work():
    """solve keeps its contract (closed form and block solver answer; an LP too large is reported on its row), but
    V^n is measured in logarithms: before, V^n = 3^10^9 was computed as an integer (9 s), then a traceback."""
    proc = _cli("solve", "--p", P, "--q", Q, "--n", "1000000000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "V^n = 3^1000000000 = about 10^477121255" in proc.stdout
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line[:1].isalpha()}
    assert rows["closed_form"][2] == "1.000000000000" and rows["relaxed"][3] == "refused"


def test_num_tuples_refuses_in_logarithms_and_counts_exactly_below():
    import otlp

    assert otlp.IID([0.5, 0.3, 0.2], 5).num_tuples() == 243
    assert otlp.IID([0.5, 0.5], 4096).num_tuples() == 2**4096  # at the bound: exact
    with pytest.raises(ModelTooLargeError, match=r"V\^n = 2\^4097 = about 10\^1233"):
        otlp.IID([0.5, 0.5], 4097).num_tuples()
    big = otlp.IID([0.5, 0.3, 0.2], 10**9)
    assert big.tuples_text() == "V^n = 3^1000000000 = about 10^477121255"
    with pytest.raises(ModelTooLargeError):
        big.check_enumerable()
    with pytest.raises(InputError, match="enumerating V\\^n = 3\\^1100"):  # a float conversion OverflowError before
        otlp.IID([0.5, 0.3, 0.2], 1100).check_enumerable()


def test_certify_stages_have_limits_and_progress_lines(monkeypatch):  # noqa: ANN001
    """certify at n = 1100: a default sample count cut to the test's work limit, a progress line when each stage
    starts and per chunk, and the time limit stopping the draws (at MIN_SAMPLES rows at least); the exact rational
    certificate refused by its bound. (Before: 100,000 rows in one chunk, 93 s for rrs with the progress line still
    naming the previous rule's certificate.)"""
    from otlp.certification import rule as cert
    from otlp.core.drafts import IID
    from otlp.verifiers import get

    notes: list[str] = []

    class Recorder:
        total = None

        def set_note(self, note: str) -> None:
            notes.append(note)

        def update(self, k: int = 1) -> None:
            pass

    assert cert.default_samples(3, 1100) * 1100 * 3 <= cert.SAMPLER_TEST_CELLS
    assert cert.default_samples(3, 2) == 100_000  # small n: as before
    monkeypatch.setattr(cert, "SAMPLER_TEST_CELLS", 3 * 1100 * 2_000)  # the least test: 2,000 rows
    rows = cert.certify_table(np.array([0.1, 0.6, 0.3]), np.array([0.5, 0.3, 0.2]), 1100, names=["sps"],
                              certificate=True, progress=Recorder())
    report = rows[0]
    assert not isinstance(report, dict), report
    assert "chi-square on 2,000 seeded samples" in report.target_check
    assert notes[0] == "sps: chi-square test, drawing 2,000 draft tuples"
    from otlp.optimal.sampler import MAX_PAIR_CELLS

    chunk = min((1 << 23) // (4 * 3 * 1100), MAX_PAIR_CELLS // 1100**2)  # 221 rows a progress line
    assert any(note == f"sps: chi-square test, {chunk} / 2,000 rows" for note in notes)
    assert notes[-1].startswith("sps: exact rational certificate (at most 200,000 tuples")
    assert report.certificate is None and any("no rational certificate" in note for note in report.notes)
    with pytest.raises(InputError, match="pass samples <= 2,000"):
        cert.sampler_test(get("sps"), np.array([0.1, 0.6, 0.3]), IID([0.5, 0.3, 0.2], 1100), samples=2_001)


def test_the_sampler_test_stops_at_its_time_limit_on_the_seeded_rows():
    from otlp.certification.rule import MIN_SAMPLES, sampler_test
    from otlp.core.drafts import IID
    from otlp.verifiers import get

    p, draft = np.array([0.1, 0.6, 0.3]), IID([0.5, 0.3, 0.2], 2)
    full = sampler_test(get("rrs"), p, draft, 3 * MIN_SAMPLES, max_cells=4 * 3 * 2 * 500)  # chunks of 500 rows
    cut = sampler_test(get("rrs"), p, draft, 3 * MIN_SAMPLES, max_cells=4 * 3 * 2 * 500, time_limit=0.0)
    assert full.samples == 3 * MIN_SAMPLES and cut.samples == MIN_SAMPLES
    assert "stopped at its time limit of 0 s after 2,000 of 6,000 rows" in cut.sampler
    first = sampler_test(get("rrs"), p, draft, MIN_SAMPLES, max_cells=4 * 3 * 2 * 500)
    assert cut.acceptance == first.acceptance and cut.p_value == first.p_value  # the same seeded first rows


def test_the_sampler_refuses_a_draft_count_beyond_its_pairwise_bound():
    """n = 100,000 drafts at V = 50, B = 2 ran 166 s and then asked numpy for 149 GiB in chains._pieces."""
    torch = pytest.importorskip("torch")
    from otlp.optimal.sampler import MAX_PAIR_CELLS
    from otlp.verifiers import get

    p = torch.full((1, 50), 1 / 50, dtype=torch.float64)
    for B, n in ((2, 100_000), (1, 16_385), (MAX_PAIR_CELLS // 32**2 + 1, 32)):
        drafts = torch.zeros(B, n, dtype=torch.long)
        with pytest.raises(InputError, match=r"drafts a row in .* rows are over the sampler's limit"):
            get("optimal").sample(p.expand(B, 50), p.expand(B, 50), drafts, validate=False)
    p = p.expand(2, 50)
    tokens, _ = get("optimal").sample(p, p, torch.zeros(2, 40, dtype=torch.long))  # n = 40 > the C loops' 32: numpy
    assert tokens.shape == (2,)


def test_sweep_refuses_n_beyond_its_int16_column(tmp_path):  # noqa: ANN001
    pytest.importorskip("pyarrow")
    from tests.sweep.conftest import lm_pairs, write_capture

    p, q = lm_pairs(np.random.default_rng(0), 4, 20)
    write_capture(tmp_path / "cap", p, q)
    line = _one_error_line(_cli("sweep", str(tmp_path / "cap"), "--n", "2,40000", "--no-plots", "--no-progress"))
    assert "n values must be integers in [1, 32767]" in line and "40000" in line


@pytest.mark.parametrize("n", [170, 171, 250])
def test_multiset_probabilities_past_the_float_range_of_n_factorial(n):  # noqa: ANN001
    """optimal_paths' plan at n = 1100 raised a raw OverflowError (n! as a float); above n = 170 the law's product
    is taken in logarithms. The multisets' law sums to 1, and each matches the multinomial by Python's exact
    integers to rounding."""
    from fractions import Fraction
    from math import factorial

    from otlp.optimal.paths import multiset_probabilities, multisets

    q = np.array([0.5, 0.3, 0.2])
    omegas = multisets(np.arange(3), n)
    probs = multiset_probabilities(omegas, q)
    assert abs(probs.sum() - 1.0) < 1e-11
    for m in (0, omegas.shape[0] // 3, omegas.shape[0] - 1):
        c = np.bincount(omegas[m], minlength=3)
        exact = Fraction(factorial(n), factorial(c[0]) * factorial(c[1]) * factorial(c[2]))
        exact *= Fraction(q[0]) ** int(c[0]) * Fraction(q[1]) ** int(c[1]) * Fraction(q[2]) ** int(c[2])
        assert abs(probs[m] - float(exact)) <= 1e-12 * float(exact) * n + 1e-300


def test_the_lp_route_states_a_bound_that_holds_on_the_issue_example():
    """Issue 44: WithoutReplacement n = 2 with entries near HiGHS' absolute tolerance: the LP route's alpha was
    0.9999999999032008 against the exact 0.9999999999067708. alpha is a feasible plan's value (never above alpha*),
    and alpha_upper = 1 + psi(H*) bounds alpha* from above, both against the exact rational certificate."""
    from fractions import Fraction

    from otlp.certification.rule import rational_certificate
    from otlp.core.drafts import Independent, WithoutReplacement
    from otlp.optimal import OptimalTransport

    p = np.array([1.0432e-10, 0.99999999977965, 1.16028e-10])
    q = np.array([3.6955e-12, 0.508611759646986, 0.49138824034931855])
    rng = np.random.default_rng(4)
    cases = [(p, WithoutReplacement(q, 2))] + [
        (rng.dirichlet(np.full(5, 0.3)), WithoutReplacement(rng.dirichlet(np.full(5, 0.3)), 2)) for _ in range(4)] + [
        (rng.dirichlet(np.full(4, 0.3)), Independent([rng.dirichlet(np.full(4, 0.3)) for _ in range(3)]))
        for _ in range(4)]
    for pp, draft in cases:
        ot = OptimalTransport(pp, draft)
        assert ot.route in ("luce", "lp")
        cert = rational_certificate(pp, draft)
        exact = cert.dual_value  # a Fraction; the certificate's rationalisation error bounds its distance to alpha*
        slack = Fraction(cert.rationalisation_error) * 4 + Fraction(ot.tolerance) / 1000  # float sums' rounding
        assert Fraction(ot.alpha) <= exact + slack and exact - slack <= Fraction(ot.alpha_upper)
        assert ot.alpha_upper - ot.alpha <= 1.2e-10
    ot = OptimalTransport(p, WithoutReplacement(q, 2))
    assert 0.9999999999067708 <= ot.alpha_upper < 0.9999999999067708 + 1e-14
    assert 0.9999999999067708 - 1.2e-10 <= ot.alpha <= 0.9999999999067708


@pytest.mark.parametrize("n", [1, 2, 4])
def test_both_cpu_routes_give_the_same_tokens_where_row_sums_are_exact(n, monkeypatch):  # noqa: ANN001
    """native/__init__.py's precise claim: rows whose float64 sums are exact in every summation order (dyadic
    entries, multiples of 2^-12 here, with many exactly tied ratios) give the same tokens on OTLP_NATIVE=0 and =1 for
    the same uniforms (validation on and off: the check's sums are the C loop's on one route and none on the other)."""
    torch = pytest.importorskip("torch")
    from otlp.verifiers import get

    rng = np.random.default_rng(9)
    B, V = 256, 64
    rows = []
    for _ in range(2 * B):
        counts = rng.multinomial(4096, rng.dirichlet(np.full(V, 0.5)))  # [V], sums to 4096
        counts[rng.random(V) < 0.3] = 0
        counts[0] += 4096 - counts.sum()  # back to 4096 (token 0 takes what was zeroed)
        rows.append(counts / 4096.0)
    p = torch.tensor(np.array(rows[:B]))
    q = torch.tensor(np.array(rows[B:]))
    drafts = torch.multinomial(q, n, replacement=True, generator=torch.Generator().manual_seed(1))
    u = torch.rand(B, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out = {}
    for native in ("1", "0"):
        monkeypatch.setenv("OTLP_NATIVE", native)
        for validate in (True, False):
            out[native, validate] = get("optimal").sample(p, q, drafts, uniforms=u, validate=validate)
    first = out["1", True]
    for got in out.values():
        assert torch.equal(got[0], first[0]) and torch.equal(got[1], first[1])
