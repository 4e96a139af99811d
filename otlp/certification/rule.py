"""certify: how far a verification rule is from the optimum for its own draft scheme, with proof.

``certify(fn, p, draft)`` with a function (or ``"package.module:function"``) instead of a registered name goes to
``otlp.certification.blackbox`` (exact when the object exposes ``conditional``, else a sequential test with an
anytime-valid TV interval); what follows is the registered-name path.

``certify(name, p, draft)`` reports

- ``acceptance``: P(output token in set(omega)), the OTLP objective (a residual sample equal to a draft counts);
- ``verifier_acceptance``: P(the rule itself accepts a draft), what the papers report for RRS / K-SEQ;
  for large V^n, a rule's closed form where it has one, else the sampler test's Monte Carlo estimate; a rule with
  ``acceptance_interval`` (rrs_wor: :mod:`otlp.verifiers.rrs_wor_acceptance`, a sum over rejected histories)
  reports that exact value instead when the interval is at most ``EXACT_ACCEPTANCE_WIDTH`` wide or narrower than
  the sample's standard error (``method["acceptance"]`` "exact (histories), width ...", and ``method["gap"]`` the
  gap's interval), else the Monte Carlo value with the interval as a note;
- ``optimum``: alpha* = 1 + min_H psi(H) for the same draft scheme (``otlp.optimal_acceptance``, GR Thm 3.1);
- ``gap = optimum - acceptance``;
- ``preserves_target``: exact enumeration of the induced coupling for small V^n; otherwise a seeded chi-square test of
  a sampler's output against p with false-alarm rate ``FALSE_ALARM`` (1e-6): the rule's torch sampler for the draft
  schemes it implements, else its exact numpy sampler (``method["target_law"]`` says which; see ``sampler_test``);
- ``certificate`` (small V^n): an exact rational proof that alpha* is optimal, checked in ``fractions.Fraction``:
  the dual solution y_i = 1[i in H], z_omega = 1[omega not in H^n] of the relaxed OTLP (GR eqs. (35)-(36)) is dual
  feasible (y_i + z_omega >= 1 for every i in set(omega)), and a primal plan S (an exact max flow on GR's network
  s -> i -> omega -> t, §5.2) is primal feasible with the same objective: by weak duality both are optimal and
  alpha* = p(H) + P_draft(omega not in H^n) exactly. The inputs are rationalised first (each entry to the nearest
  fraction with denominator <= 10^9, except that a positive entry which would become 0 keeps its exact binary value,
  then renormalised exactly; see ``rationalise``); the largest change is reported.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from otlp.certification.blackbox import (
    ALPHA,
    SCHEME_CLASSES,
    TOLERANCE,
    CallableReport,
    certify_callable,
    check_certify_n,
    load_callable,
)
from otlp.core.distributions import check_distribution, check_int, load_distribution
from otlp.core.drafts import DraftScheme, Greedy, Independent, Joint, SpecHub, WithoutReplacement, all_tuples
from otlp.core.errors import InputError, ModelTooLargeError
from otlp.core.subsets import optimal_acceptance

if TYPE_CHECKING:
    from otlp.cli.util import Progress

#: Enumerate the induced coupling exactly up to this many (tuple, token) cells.
EXACT_CELLS = 20_000_000
#: Build the rational certificate up to this many draft tuples with positive probability.
CERTIFICATE_TUPLES = 4_000
#: Compute alpha* for schemes without a closed form (min over subsets by enumeration) up to this many tuples.
OPTIMUM_TUPLES = 2_000_000
#: False-alarm rate of the statistical target-law test (chi-square, asymptotic).
FALSE_ALARM = 1e-6
#: Denominator bound when rationalising float inputs.
MAX_DENOMINATOR = 10**9
#: Time limit of an exact acceptance over rejected histories (rrs_wor's ``acceptance_interval``) at large V^n, s.
EXACT_ACCEPTANCE_SECONDS = 10.0
#: That interval replaces the Monte Carlo acceptance when it is at most this wide (or narrower than its s.e.).
EXACT_ACCEPTANCE_WIDTH = 1e-9


# ----------------------------------------------------------------------------------------------------------------------
# the exact rational certificate
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class RationalCertificate:
    """Primal/dual pair of the relaxed OTLP in exact rationals; ``optimal`` is the verdict."""

    h_star: list[int]
    dual_value: Fraction
    primal_value: Fraction
    dual_feasible: bool
    primal_feasible: bool
    num_tuples: int
    rationalisation_error: float

    @property
    def optimal(self) -> bool:
        """Both feasible and equal objectives: alpha* = dual_value, exactly."""
        return self.dual_feasible and self.primal_feasible and self.primal_value == self.dual_value

    def to_dict(self) -> dict[str, object]:
        return {"optimal": self.optimal, "alpha_star": str(self.dual_value), "alpha_star_float": float(self.dual_value),
                "h_star": self.h_star, "dual_feasible": self.dual_feasible, "primal_feasible": self.primal_feasible,
                "primal_value": str(self.primal_value), "num_tuples": self.num_tuples,
                "rationalisation_error": self.rationalisation_error}


def rationalise(x: np.ndarray) -> tuple[list[Fraction], float]:
    """Nearest fractions (denominator <= 10^9), renormalised to sum to exactly 1; returns the largest change.

    A positive entry below the grid (< 1/(2 * 10^9), which ``limit_denominator`` sends to 0) keeps its exact binary
    value ``Fraction(float)`` instead: the rationalised law has the same support as the float one, so the certificate
    is about the same draft scheme (the same tuples of positive probability) and the normalisers of the schemes'
    rational forms (greedy rest mass, without-replacement 1 - used, SpecHub Z), positive in floats by the schemes'
    own checks, stay positive. The certificate remains exact (it is checked in Fractions); only its denominators grow.
    """
    fr = [Fraction(float(v)).limit_denominator(MAX_DENOMINATOR) for v in np.ravel(x)]
    fr = [Fraction(float(v)) if f == 0 and v > 0 else f for f, v in zip(fr, np.ravel(x), strict=True)]
    total = sum(fr, Fraction(0))
    fr = [v / total for v in fr]
    err = max(abs(float(v) - float(w)) for v, w in zip(fr, np.ravel(x), strict=True)) if fr else 0.0
    return fr, err


def rational_tuple_probabilities(draft: DraftScheme, omegas: np.ndarray) -> tuple[list[Fraction], float]:
    """P_draft(omega) in exact rationals from the scheme's rationalised parameters."""
    w = [tuple(int(t) for t in row) for row in omegas]
    if isinstance(draft, Joint):
        table, err = rationalise(draft.table)
        V, n = draft.V, draft.n
        return [table[sum(t * V ** (n - 1 - k) for k, t in enumerate(row))] for row in w], err
    if isinstance(draft, Independent):
        rows = [rationalise(r) for r in draft.qs]
        qs, err = [r[0] for r in rows], max(r[1] for r in rows)
        return [math.prod((qs[k][t] for k, t in enumerate(row)), start=Fraction(1)) for row in w], err
    q, err = rationalise(draft.q)
    if isinstance(draft, WithoutReplacement):
        out = []
        for row in w:
            if len(set(row)) < len(row):
                out.append(Fraction(0))
                continue
            prob, used = Fraction(1), Fraction(0)
            for t in row:
                if q[t] == 0:  # before dividing: 1 - used >= q[t] > 0 below (distinct tokens, sum q = 1)
                    prob = Fraction(0)
                    break
                prob *= q[t] / (1 - used)
                used += q[t]
            out.append(prob)
        return out, err
    if isinstance(draft, Greedy):
        top = tuple(int(t) for t in draft.top)
        rest = sum((q[i] for i in range(draft.V) if i not in top), Fraction(0))
        return [q[row[-1]] / rest if row[:-1] == top and row[-1] not in top else Fraction(0) for row in w], err
    if isinstance(draft, SpecHub):
        a = draft.hub
        z = sum((q[i] for i in range(draft.V) if i != a), Fraction(0))
        out = []
        for x1, x2 in w:
            if x2 == a and x1 != a:
                out.append(q[x1])
            elif x1 == a and x2 != a:
                out.append(q[a] * q[x2] / z)
            else:
                out.append(Fraction(0))
        return out, err
    if draft.name == "iid":
        return [math.prod((q[t] for t in row), start=Fraction(1)) for row in w], err
    raise InputError(f"no rational form for draft scheme {type(draft).__name__}")


def rational_certificate(p: object, draft: DraftScheme, max_tuples: int = CERTIFICATE_TUPLES) -> RationalCertificate:
    """Exact primal (max flow in Fractions) and dual (y = 1[H], z = 1[not H^n]) of the relaxed OTLP, checked."""
    import networkx as nx
    from networkx.algorithms.flow import edmonds_karp

    p = check_distribution(p, "p", size=draft.V)
    if draft.num_tuples() > 50 * max_tuples:
        raise ModelTooLargeError(f"a rational certificate over {draft.tuples_text()} tuples",
                                 draft.num_tuples() * 64, 50 * max_tuples * 64)
    omegas = all_tuples(draft.V, draft.n)
    probs, err_q = rational_tuple_probabilities(draft, omegas)
    keep = [m for m, pr in enumerate(probs) if pr > 0]
    if len(keep) > max_tuples:
        raise ModelTooLargeError(f"a rational certificate over {len(keep)} draft tuples", len(keep) * 64,
                                 max_tuples * 64)
    p_fr, err_p = rationalise(p)
    G = nx.DiGraph()
    for i, pi in enumerate(p_fr):
        G.add_edge("s", ("i", i), capacity=pi)
    for m in keep:
        G.add_edge(("w", m), "t", capacity=probs[m])
        for i in set(omegas[m].tolist()):
            G.add_edge(("i", i), ("w", m))  # no capacity attribute: infinite
    R = edmonds_karp(G, "s", "t")
    flow = {(i, m): R[("i", i)][("w", m)]["flow"] for m in keep for i in set(omegas[m].tolist())}
    # H = tokens the source cannot reach in the residual graph (sink side of the min cut)
    reach, stack = {"s"}, ["s"]
    while stack:
        u = stack.pop()
        for v, attr in R[u].items():
            if v not in reach and attr["capacity"] - attr["flow"] > 0:
                reach.add(v)
                stack.append(v)
    h = sorted(i for i in range(draft.V) if ("i", i) not in reach)
    in_h = set(h)

    # primal check, exact: S >= 0, support, row sums <= p, column sums <= P_draft
    rows = [Fraction(0)] * draft.V
    cols = {m: Fraction(0) for m in keep}
    primal_ok = True
    for (i, m), s in flow.items():
        primal_ok &= s >= 0 and i in set(omegas[m].tolist())
        rows[i] += s
        cols[m] += s
    primal_ok &= all(r <= pi for r, pi in zip(rows, p_fr, strict=True)) and all(cols[m] <= probs[m] for m in keep)
    primal_value = sum(flow.values(), Fraction(0))

    # dual check, exact: y_i + z_omega >= 1 for every i in set(omega), y, z >= 0
    dual_ok = True
    dual_value = sum((p_fr[i] for i in h), Fraction(0))
    for m in keep:
        z = 0 if all(int(t) in in_h for t in omegas[m]) else 1
        dual_value += z * probs[m]
        dual_ok &= all((1 if int(i) in in_h else 0) + z >= 1 for i in omegas[m])
    return RationalCertificate(h, dual_value, primal_value, bool(dual_ok), bool(primal_ok), len(keep),
                               max(err_p, err_q))


# ----------------------------------------------------------------------------------------------------------------------
# statistical target-law test (large V)
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class SamplerTest:
    """Result of running a sampler of the rule on drafts from the scheme (``sampler`` says which)."""

    samples: int
    p_value: float
    impossible_tokens: int  # outputs on tokens with p = 0 (any is a failure)
    acceptance: float
    acceptance_se: float
    verifier_acceptance: float
    sampler: str = "torch sampler"

    @property
    def passed(self) -> bool:
        return self.impossible_tokens == 0 and self.p_value >= FALSE_ALARM


def _torch_q(verifier, draft: DraftScheme) -> np.ndarray | None:  # noqa: ANN001
    """The ``q`` argument of ``verifier.sample`` for drafts of ``draft`` (``[V]`` or ``[n, V]``), or None when the
    torch sampler does not implement this scheme or the scheme carries no q (Joint; Independent for a [B, V] rule)."""
    if draft.name not in verifier.torch_sampler_schemes():
        return None
    if verifier.per_draft_q:
        if isinstance(draft, Independent):
            return draft.qs
        return np.tile(draft.q, (draft.n, 1)) if hasattr(draft, "q") else None
    return draft.q if hasattr(draft, "q") and not isinstance(draft, Independent) else None


#: memory the sampler test may use for its drafted tuples (refused above, before allocating).
SAMPLER_TEST_BYTES = 4 << 30
#: the sampler test's work limit: samples x n x V (a rule's pass over a row per draft; rrs takes about 0.3 s per
#: 10^6 at n = 1100): certify's default sample count is cut to fit it (at least ``MIN_SAMPLES``), and a larger
#: ``samples`` is refused before the test starts (n = 1100 took 93 s for rrs's 100,000 rows).
SAMPLER_TEST_CELLS = 1 << 26
#: the torch sampler's rows stop being drawn after this many seconds (at least one chunk, and ``MIN_SAMPLES`` rows,
#: are drawn; the test then runs on the rows drawn, the same seeded rows as the full count's first ones, and
#: ``SamplerTest.samples`` says how many): some rules take milliseconds a row at n in the thousands (``is``: 2.5 ms
#: at n = 1100, V = 3)
SAMPLER_TEST_SECONDS = 30.0
#: certify's least default sample count (the chi-square bins need expected counts >= 5)
MIN_SAMPLES = 2_000


def default_samples(V: int, n: int) -> int:
    """certify's sample count for the chi-square test: 2^25 / V within [``MIN_SAMPLES``, 100,000], cut to
    ``SAMPLER_TEST_CELLS`` / (n V) (not below ``MIN_SAMPLES``)."""
    return int(min(100_000, max(MIN_SAMPLES, (1 << 25) // V), max(MIN_SAMPLES, SAMPLER_TEST_CELLS // (n * V))))


def sampler_test(verifier, p: np.ndarray, draft: DraftScheme, samples: int, seed: int = 0,  # noqa: ANN001
                 max_cells: int = 1 << 23, progress: Progress | None = None,
                 time_limit: float = SAMPLER_TEST_SECONDS) -> SamplerTest:
    """Chi-square test (false-alarm rate ``FALSE_ALARM``) of the rule's output law against p.

    The sampler is the torch ``verifier.sample`` when it implements the scheme (``verifier.torch_sampler_schemes()``)
    and the scheme carries the ``q`` it takes; otherwise the exact numpy sampler ``verifier.sample_exact`` (e.g. the
    optimal rule on non-i.i.d. drafts: its torch sampler is the i.i.d. rule only). ``SamplerTest.sampler`` names the
    one used. Tokens are sorted by p and grouped into at most 64 bins of about equal mass (each with expected count
    >= 5); outputs on p = 0 tokens fail outright. Drafts come from ``draft.sample`` (numpy, seeded), coins from a
    seeded ``torch.Generator`` (torch) or the same numpy generator (numpy); rows are processed in chunks of
    ``max_cells // (4 V n)`` (and at most ``2^28 / n^2``); p and q are validated once (``check_draft``), not per
    chunk. ``progress`` (an ``otlp.cli.util.Progress``) is told the stage and the rows done. On the numpy path the
    verifier acceptance is the mean of P(rule accepts | omega). More than ``SAMPLER_TEST_CELLS`` samples x n x V (and
    more than ``MIN_SAMPLES`` samples) is refused before any draw.
    """
    from scipy.stats import chi2

    p, draft = verifier.check_draft(p, draft)
    samples = check_int(samples, "samples", 1)
    seed = check_int(seed, "seed", 0)
    V = draft.V
    need = 8.0 * samples * draft.n * 4  # the drafted tuples [N, n] and the draft sampler's temporaries
    if need > SAMPLER_TEST_BYTES:
        raise ModelTooLargeError(f"the statistical test's {samples} drafted tuples of n = {draft.n}", need,
                                 SAMPLER_TEST_BYTES)
    cells = samples * draft.n * V
    if cells > max(SAMPLER_TEST_CELLS, MIN_SAMPLES * draft.n * V):
        raise InputError(f"the statistical test's {samples:,} samples x n = {draft.n} x V = {V} = {cells:,} cells "
                         f"are over its limit of {SAMPLER_TEST_CELLS:,}; pass samples <= "
                         f"{max(MIN_SAMPLES, SAMPLER_TEST_CELLS // (draft.n * V)):,}")
    if progress is not None:
        progress.set_note(f"{verifier.name}: chi-square test, drawing {samples:,} draft tuples")
    rng = np.random.default_rng(seed)
    omegas = draft.sample(samples, rng)  # [N, n]
    cls = type(verifier).__name__
    q_np = _torch_q(verifier, draft)
    if q_np is None:
        if progress is not None:
            progress.set_note(f"{verifier.name}: chi-square test, {samples:,} rows by the exact numpy sampler")
        tokens, rule_accepts = verifier.sample_exact(p, draft, omegas, rng, max_cells)  # [N], [N]
        counts = np.bincount(tokens, minlength=V).astype(np.float64)
        member = int((omegas == tokens[:, None]).any(1).sum())
        accepted = float(rule_accepts.sum())
        implemented = verifier.torch_sampler_schemes()
        why = (f"the {draft.name} scheme carries no q for {cls}.sample" if draft.name in implemented
               else f"{cls}.sample implements {', '.join(implemented) or 'no scheme'}, not {draft.name}")
        sampler = f"exact numpy sampler {cls}.sample_exact ({why})"
    else:
        import torch

        gen = torch.Generator().manual_seed(seed)
        p_t = torch.as_tensor(p, dtype=torch.float64)
        q_t = torch.as_tensor(q_np, dtype=torch.float64)
        from otlp.optimal.sampler import MAX_PAIR_CELLS
        from otlp.verifiers.base import validation

        # a rule's work: a row pass or more per draft (a progress line a chunk), and B n^2 <= the sampler's pair limit
        chunk = max(1, min(max_cells // (4 * V * draft.n), MAX_PAIR_CELLS // draft.n**2))
        counts = np.zeros(V)
        member = 0
        accepted = 0.0
        began, done = time.perf_counter(), samples
        for start in range(0, samples, chunk):
            if start >= MIN_SAMPLES and time.perf_counter() - began > time_limit:
                done = start  # the time limit: the test on the rows drawn so far
                break
            w = torch.as_tensor(omegas[start:start + chunk])
            m = w.shape[0]
            with validation(False):  # p, q and the drafted tuples were checked above
                tokens, index = verifier.sample(p_t.expand(m, V), q_t.expand(m, *q_t.shape), w, gen)
            counts += np.bincount(tokens.numpy(), minlength=V)
            member += int((w == tokens.unsqueeze(1)).any(1).sum())
            accepted += int((index >= 0).sum())
            if progress is not None:
                progress.set_note(f"{verifier.name}: chi-square test, {start + m:,} / {samples:,} rows")
        sampler = f"torch sampler {cls}.sample"
        if done < samples:
            sampler += f" (stopped at its time limit of {time_limit:g} s after {done:,} of {samples:,} rows)"
            samples = done
    impossible = int(counts[p == 0].sum())
    order = np.argsort(-p, kind="stable")
    order = order[p[order] > 0]
    expected = p[order] * samples
    edges = np.searchsorted(np.cumsum(expected), np.linspace(0, samples, 65)[1:-1])
    starts = np.unique(np.concatenate([[0], edges]))
    starts = starts[starts < order.size]
    obs_bins = np.add.reduceat(counts[order], starts)
    exp_bins = np.add.reduceat(expected, starts)
    obs_bins, exp_bins = _merge_small(obs_bins, exp_bins)
    if exp_bins.size >= 2:
        stat = float(((obs_bins - exp_bins) ** 2 / exp_bins).sum())
        p_value = float(chi2.sf(stat, exp_bins.size - 1))
    else:
        p_value = 1.0
    acc = member / samples
    return SamplerTest(samples, p_value, impossible, acc, math.sqrt(max(acc * (1 - acc), 1e-300) / samples),
                       accepted / samples, sampler)


def _merge_small(obs: np.ndarray, exp: np.ndarray, minimum: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Merge adjacent bins until every expected count is >= ``minimum``."""
    out_o, out_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(obs, exp, strict=True):
        acc_o += o
        acc_e += e
        if acc_e >= minimum:
            out_o.append(acc_o)
            out_e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and out_e:
        out_o[-1] += acc_o
        out_e[-1] += acc_e
    elif acc_e > 0:
        out_o.append(acc_o)
        out_e.append(acc_e)
    return np.array(out_o), np.array(out_e)


# ----------------------------------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class CertifyReport:
    """What ``certify`` found. ``method`` says how each number was obtained."""

    verifier: str
    scheme: str
    V: int
    n: int
    acceptance: float
    verifier_acceptance: float
    optimum: float | None
    gap: float | None
    preserves_target: bool
    target_check: str  # "exact enumeration (max |law - p| = ...)" or "chi-square ..."
    max_law_error: float | None = None
    certificate: RationalCertificate | None = None
    method: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "verifier": self.verifier, "scheme": self.scheme, "V": self.V, "n": self.n,
            "acceptance": self.acceptance, "verifier_acceptance": self.verifier_acceptance, "optimum": self.optimum,
            "gap": self.gap, "preserves_target": self.preserves_target, "target_check": self.target_check,
            "max_law_error": self.max_law_error,
            "certificate": self.certificate.to_dict() if self.certificate is not None else None,
            "method": dict(self.method), "notes": list(self.notes),
        }

    def __str__(self) -> str:
        def fmt(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.12g}"

        lines = [
            f"verifier            {self.verifier} (draft scheme {self.scheme}, V = {self.V}, n = {self.n})",
            f"acceptance          {fmt(self.acceptance)}   [{self.method.get('acceptance', '')}]",
            f"verifier acceptance {fmt(self.verifier_acceptance)}   [{self.method.get('verifier_acceptance', '')}]",
            f"optimum alpha*      {fmt(self.optimum)}",
            f"gap                 {fmt(self.gap)}" + (f"   [{self.method['gap']}]" if "gap" in self.method else ""),
            f"preserves target    {'yes' if self.preserves_target else 'NO'}   [{self.target_check}]",
        ]
        c = self.certificate
        if c is not None:
            verdict = "alpha* certified optimal" if c.optimal else "certificate FAILED"
            lines.append(f"certificate         {verdict}: alpha* = {c.dual_value} (exact), H* = {c.h_star}, "
                         f"dual feasible {c.dual_feasible}, primal feasible {c.primal_feasible}, "
                         f"primal = dual {c.primal_value == c.dual_value}")
        lines += [f"note                {x}" for x in self.notes]
        return "\n".join(lines)


def certify(name: object, p: object, draft: object = None, *, q: object = None, n: int | None = None,
            samples: int | None = None, seed: int = 0, certificate: bool = True, progress: Progress | None = None,
            **options: object) -> CertifyReport | CallableReport:
    """Certify the rule ``name`` on target ``p`` and draft scheme ``draft`` (or ``q``, ``n``: the rule's own scheme).

    ``name`` may also be any verification function (or object with ``.sample``), or a ``"package.module:function"``
    string: then :func:`otlp.certification.blackbox.certify_callable` certifies it (exactly when it exposes
    ``conditional``, else by a sequential test on samples; ``samples`` is then the sample limit, and ``options``
    take ``scheme``, ``alpha``, ``tolerance``, ``cells``, ``mode``, ``per_draft_q``, ``batch``, ``device``,
    ``progress``) and returns a :class:`~otlp.certification.blackbox.CallableReport`. For a registered rule,
    ``progress`` (an ``otlp.cli.util.Progress``) is told each stage: the test's rows, alpha*, the certificate.

    Examples
    --------
    >>> from otlp.verifiers import get
    >>> from otlp.certification.rule import certify
    >>> r = certify("spechub", [0.1, 0.6, 0.3], get("spechub").make_draft([0.5, 0.3, 0.2], 2))
    >>> round(r.acceptance, 12), round(r.optimum, 12), r.preserves_target, r.certificate.optimal
    (1.0, 1.0, True, True)
    """
    from otlp.verifiers import get

    if not isinstance(name, str) or ":" in name:
        if progress is not None:
            options.setdefault("progress", progress.enabled)
        return certify_callable(name, p, draft, q=q, n=n, samples=samples, seed=seed, **options)  # type: ignore[arg-type]
    verifier = get(name, **options)
    if getattr(verifier, "kind", "token") == "multistep":
        raise InputError(f"{name!r} is a multi-step (block) rule: it verifies drafted blocks of L tokens, not one "
                         "token among n drafts; certify it with otlp.multistep.certify_multistep or "
                         "`otlp certify-block`")
    if draft is None:
        if q is None or n is None:
            raise InputError("certify needs a draft scheme, or q and n to build the verifier's own scheme")
        draft = verifier.make_draft(q, n)
    p, draft = verifier.check_draft(p, draft)
    if samples is not None:
        samples = check_int(samples, "samples", 1)
    seed = check_int(seed, "seed", 0)
    method: dict[str, str] = {}
    notes: list[str] = []
    cells = draft.support_size() * draft.V  # (a top-k draft without replacement: its k! / (k - n)! tuples)
    test = None
    law_err = None
    interval = None  # an exact acceptance interval (rrs_wor at large V^n)

    def stage(what: str) -> None:
        if progress is not None:
            progress.set_note(f"{name}: {what}")

    if cells <= EXACT_CELLS:
        stage(f"exact enumeration of {draft.support_size():,} tuples")
        from otlp.verifiers.exact import summary

        s = summary(verifier, p, draft)
        law_err = float(np.abs(s["output_law"] - p).max())
        ok = law_err <= 1e-9 and s["min_conditional"] >= -1e-12 and s["max_row_error"] <= 1e-9
        target = f"exact enumeration of {draft.support_size()} tuples: max |law - p| = {law_err:.2e}"
        acc, vacc = float(s["acceptance"]), float(s["verifier_acceptance"])
        method["acceptance"] = method["verifier_acceptance"] = "exact enumeration"
        method["target_law"] = "exact enumeration"
    else:
        n_samples = samples if samples is not None else default_samples(draft.V, draft.n)
        test = sampler_test(verifier, p, draft, n_samples, seed, progress=progress)
        ok = test.passed
        method["target_law"] = test.sampler
        target = (f"chi-square on {test.samples:,} seeded samples of the {test.sampler}: p-value {test.p_value:.3g} "
                  f"(false-alarm rate {FALSE_ALARM:g}), {test.impossible_tokens} outputs on p = 0 tokens")
        estimates = {"acceptance": (verifier.acceptance, test.acceptance),
                     "verifier_acceptance": (verifier.verifier_acceptance, test.verifier_acceptance)}
        if hasattr(verifier, "acceptance_interval"):  # rrs_wor: exact over rejected histories, as an interval
            stage("exact acceptance over rejected histories")
            interval = verifier.acceptance_interval(p, draft, time_limit=EXACT_ACCEPTANCE_SECONDS, progress=progress)
        values = {}
        for key, (closed_form, sampled) in estimates.items():  # the closed form where one exists, else the sample's
            if interval is not None and interval.width <= max(test.acceptance_se, EXACT_ACCEPTANCE_WIDTH):
                values[key] = interval.value  # acceptance = verifier acceptance for this rule
                method[key] = interval.describe()
                continue
            try:
                if interval is not None:  # wider than the sample's s.e.: its closed form would only repeat the walk
                    raise InputError(interval.describe())
                values[key] = float(closed_form(p, draft))
                method[key] = "closed form"
            except (ModelTooLargeError, InputError):
                values[key] = sampled
                method[key] = f"Monte Carlo, s.e. {test.acceptance_se:.2g}"
        if interval is not None and method["acceptance"].startswith("Monte Carlo"):
            notes.append(f"the exact acceptance lies in [{interval.lo!r}, {interval.hi!r}] ({interval.describe()}), "
                         "wider than the Monte Carlo standard error")
        acc, vacc = values["acceptance"], values["verifier_acceptance"]
    stage("alpha*")
    try:
        fast = ("iid", "greedy", "spechub", "without_replacement")  # closed forms / otlp.core.psi_wor: no enumeration
        if draft.name not in fast and draft.num_tuples() > OPTIMUM_TUPLES:
            raise ModelTooLargeError(f"alpha* for a {draft.name!r} scheme over {draft.tuples_text()} tuples",
                                     draft.num_tuples() * draft.n * 8, OPTIMUM_TUPLES * draft.n * 8)
        optimum = float(optimal_acceptance(p, draft))
    except (ModelTooLargeError, InputError) as exc:
        optimum = None
        notes.append(f"alpha* not computed: {exc}")
    gap = None if optimum is None else optimum - acc
    if gap is not None and method["acceptance"].startswith("exact (histories)"):
        method["gap"] = f"exact: alpha* minus the acceptance interval, [{optimum - interval.hi!r}, " \
                        f"{optimum - interval.lo!r}]"
    cert = None
    if certificate:
        stage(f"exact rational certificate (at most {50 * CERTIFICATE_TUPLES:,} tuples enumerated, "
              f"{CERTIFICATE_TUPLES:,} kept)")
        try:
            cert = rational_certificate(p, draft)
            if optimum is not None and abs(float(cert.dual_value) - optimum) > 1e-9 + cert.rationalisation_error * 4:
                notes.append(f"float alpha* {optimum!r} differs from the certified {float(cert.dual_value)!r}")
        except ModelTooLargeError:
            notes.append(f"no rational certificate: more than {CERTIFICATE_TUPLES} draft tuples")
    return CertifyReport(name, draft.name, draft.V, draft.n, acc, vacc, optimum, gap, bool(ok), target, law_err, cert,
                         method, notes)


# ----------------------------------------------------------------------------------------------------------------------
# the table across verifiers, and the CLI
# ----------------------------------------------------------------------------------------------------------------------


def certify_table(p: object, q: object, n: int, *, names: list[str] | None = None, seed: int = 0,
                  samples: int | None = None, certificate: bool = False,
                  progress: Progress | None = None) -> list[CertifyReport | dict[str, str]]:
    """``certify`` for every registered rule on its own draft scheme built from (q, n). A rule that cannot run on
    this input (SpecHub with n != 2, without-replacement with fewer than n tokens of q > 0, ...) gives
    ``{"verifier": name, "error": message}``. ``progress`` counts the rules done."""
    from otlp.verifiers import NAMES, get

    n = check_certify_n(n)
    if samples is not None:
        samples = check_int(samples, "samples", 1)
    rows: list[CertifyReport | dict[str, str]] = []
    single_token = [k for k in NAMES if getattr(get(k), "kind", "token") != "multistep"]
    names = names or single_token
    if progress is not None:
        progress.total = len(names)
    for name in names:
        try:
            draft = get(name).make_draft(q, n)
            rows.append(certify(name, p, draft, samples=samples, seed=seed, certificate=certificate,
                                progress=progress))
        except (InputError, NotImplementedError) as exc:
            rows.append({"verifier": name, "error": str(exc)})
        if progress is not None:
            progress.update(1)
    return rows


def format_table(rows: list[CertifyReport | dict[str, str]]) -> str:
    head = f"{'verifier':<12} {'scheme':<20} {'acceptance':>12} {'verifier_acc':>12} {'alpha*':>12} {'gap':>12}  target"
    out = [head, "-" * len(head)]
    for r in rows:
        if isinstance(r, dict):
            out.append(f"{r['verifier']:<12} {'-':<20} {'(not applicable: ' + r['error'] + ')'}")
            continue
        opt = "n/a" if r.optimum is None else f"{r.optimum:12.8f}"
        gap = "n/a" if r.gap is None else f"{r.gap:12.8f}"
        out.append(f"{r.verifier:<12} {r.scheme:<20} {r.acceptance:12.8f} {r.verifier_acceptance:12.8f} {opt:>12} "
                   f"{gap:>12}  {'exact' if r.preserves_target else 'FAILED'}")
    return "\n".join(out)


def add_certify_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``otlp certify``."""
    parser.add_argument("--verifier", required=True,
                        help="a rule name (see otlp.verifiers.NAMES), 'all', or your own function as "
                             "package.module:function (imported from the current directory and sys.path)")
    parser.add_argument("--p", required=True, help="target distribution: 0.1,0.6,0.3 or a .json / .npy file")
    parser.add_argument("--q", required=True, help="draft distribution, same formats")
    parser.add_argument("--n", type=int, default=2, help="number of drafts (default 2)")
    parser.add_argument("--renormalize", action="store_true", help="divide p and q by their sums")
    parser.add_argument("--samples", type=int, default=None,
                        help="samples for the statistical test (large V); for package.module:function, the sample "
                             "limit of the sequential test (default 1e7)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the statistical test")
    parser.add_argument("--scheme", default=None, choices=sorted(SCHEME_CLASSES),
                        help="package.module:function only: the draft scheme certify samples (default iid); a "
                             "registered rule is certified on its own scheme")
    parser.add_argument("--tolerance", type=float, default=None,
                        help=f"package.module:function only: TV to rule out before calling it lossless, in [0, 1] "
                             f"(default {TOLERANCE:g})")
    parser.add_argument("--alpha", type=float, default=None,
                        help=f"package.module:function only: false-alarm and miss rate of the sequential test, in "
                             f"(0, 1) (default {ALPHA:g})")
    parser.add_argument("--mode", default=None, choices=("auto", "black", "white"),
                        help="package.module:function only: exact enumeration when it has conditional() (auto, the "
                             "default), or force sampling (black) / enumeration (white)")
    parser.add_argument("--no-certificate", action="store_true", help="skip the exact rational certificate")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.epilog = ("exit status (pytest-style): 0 the rule preserves the target (with --verifier all: every rule "
                     "that applies), 1 it does not, or a package.module:function's sequential test ended "
                     "inconclusive (raise --samples or --tolerance), 2 bad input (one line 'otlp: error: ...').")


#: ``otlp certify``'s exit status, pytest-style: whether the rule passed
EXIT_PASSED, EXIT_FAILED = 0, 1
#: the options only the sequential test of a package.module:function reads
CALLABLE_ONLY = ("--scheme", "--tolerance", "--alpha", "--mode")


def certify_exit_code(reports: Sequence[object]) -> int:
    """``otlp certify``'s exit status for its reports: 0 (:data:`EXIT_PASSED`) when every rule certified shows it
    preserves the target, 1 (:data:`EXIT_FAILED`) when one does not, or when a sequential test ended inconclusive
    (``preserves_target`` None: not shown to preserve it). Rows of ``--verifier all`` that do not apply to the input
    (dicts with an ``error``) count neither way. Bad input never gets here: it exits 2."""
    verdicts = [getattr(r, "preserves_target", None) for r in reports if not isinstance(r, dict)]
    return EXIT_PASSED if all(v is True for v in verdicts) else EXIT_FAILED


def _callable_options(args: argparse.Namespace) -> dict[str, object]:
    """The sequential test's options, range-checked whatever the verifier; for a registered rule (or 'all') any of
    them given is refused, since only a package.module:function's test reads them."""
    if args.tolerance is not None and not 0 <= args.tolerance <= 1:
        raise InputError(f"--tolerance must be a total-variation distance in [0, 1], got {args.tolerance:g}")
    if args.alpha is not None and not 0 < args.alpha < 1:
        raise InputError(f"--alpha must be an error rate in (0, 1), got {args.alpha:g}")
    given = [flag for flag in CALLABLE_ONLY if getattr(args, flag[2:]) is not None]
    if ":" not in args.verifier and given:
        verb = "applies" if len(given) == 1 else "apply"
        raise InputError(f"{', '.join(given)} only {verb} to --verifier package.module:function (its sequential "
                         f"test); the registered rule {args.verifier!r} is certified on its own draft scheme, by exact "
                         f"enumeration, or a chi-square test at false-alarm rate {FALSE_ALARM:g} for large V^n: "
                         f"drop {', '.join(given)}")
    return {"scheme": args.scheme or "iid", "tolerance": TOLERANCE if args.tolerance is None else args.tolerance,
            "alpha": ALPHA if args.alpha is None else args.alpha, "mode": args.mode or "auto"}


def run_certify_cli(args: argparse.Namespace) -> int:
    """Run ``otlp certify``; returns the exit code: 0 the rule preserves the target (every rule, for 'all'), 1 it
    does not (or a sequential test was inconclusive), 2 bad input (with the message on stderr)."""

    from otlp.cli.util import Progress

    bar = Progress("otlp certify", enabled=not args.json)
    try:
        check_certify_n(args.n, "--n")  # before anything else: the table would list every rule as not applicable
        if args.samples is not None:
            check_int(args.samples, "--samples", 1)
        check_int(args.seed, "--seed", 0)
        options = _callable_options(args)
        p = load_distribution(args.p, "p", renormalize=args.renormalize)
        q = load_distribution(args.q, "q", renormalize=args.renormalize)
        if q.size != p.size:
            raise InputError(f"q has length {q.size}, expected {p.size} (the length of p)")
        if ":" in args.verifier:
            report = certify_callable(load_callable(args.verifier), p, q=q, n=args.n, samples=args.samples,
                                      seed=args.seed, name=args.verifier, **options)
            print(json.dumps(report.to_dict(), indent=2) if args.json else report)
            rows: list = [report]
        elif args.verifier == "all":
            with bar:
                rows = certify_table(p, q, args.n, samples=args.samples, seed=args.seed,
                                     certificate=not args.no_certificate, progress=bar)
            if args.json:
                print(json.dumps([r if isinstance(r, dict) else r.to_dict() for r in rows], indent=2))
            else:
                print(format_table(rows))
        else:
            from otlp.verifiers import get

            draft = get(args.verifier).make_draft(q, args.n)
            with bar:
                report = certify(args.verifier, p, draft, samples=args.samples, seed=args.seed,
                                 certificate=not args.no_certificate, progress=bar)
            print(json.dumps(report.to_dict(), indent=2) if args.json else report)
            rows = [report]
    except InputError as exc:
        from otlp.cli.util import report_error

        return report_error(exc, json_output=bool(getattr(args, "json", False)))
    return certify_exit_code(rows)
