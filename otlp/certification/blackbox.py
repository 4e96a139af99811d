"""Certify any verification function: does it preserve p, and how far is its acceptance from alpha*?

``certify_callable(fn, p, draft)`` takes any callable with the torch sampler contract of ``otlp.verifiers``::

    fn(p [B, V], q [B, V] or [B, n, V], drafts [B, n] int64, generator) -> tokens [B]  or  (tokens, accepted_index)

(or an object with such a ``.sample``). certify draws the drafts itself from the draft scheme (numpy, seeded), so
the function sees exactly the tuples its scheme would produce, calls it in batches, and counts the output cells.

- **White box.** If the object (or the object behind a bound method, or an attribute of the function) exposes
  ``conditional(p [V], draft, omegas [M, n]) -> law [M, V]`` or ``(law, rule_accepts [M])``, the law pi(. | omega),
  the output law sum_omega P_draft(omega) pi(. | omega) is computed exactly by enumerating the draft support
  (``otlp.verifiers.exact``): the TV distance is exact and no sample is drawn. ``mode="black"`` forces sampling.
- **Black box.** Samples come in looks of growing size (x1.5); at each look ``certify_stats.band`` gives a confidence
  band on the output law that holds at every look and for every event at once (error ``alpha``). The run stops at
  the first look where (a) the band excludes p: a bias is detected, ``preserves_target=False``; or (b) the upper
  bound on TV is <= ``tolerance``: ``preserves_target=True``, a rule at TV >= tolerance passes with probability <=
  alpha; or (c) the sample limit is reached: ``preserves_target=None`` (inconclusive), the report still says which
  TV was ruled out (``tv_upper``).
- **Instances.** p ``[V]`` or ``[J, V]`` with one draft scheme or J of them: samples are interleaved round-robin,
  and the law tested is that of (instance, cell) with the instance uniform, so TV is the mean over instances of
  each instance's TV. Bias that appears on one instance only is caught (at 1/J of its size).
- **Cells.** Up to ``cells`` tokens per instance every token is its own cell and TV is the token-level TV. Above,
  the tokens are grouped: the 8 most likely under p and the 8 under q stay alone, the rest are sorted by q/p and cut
  into bins of equal p-mass, the tokens with p = 0 form one cell; TV is then that of the binned law, a lower bound
  on the token-level TV (a bias that only moves mass inside one bin is invisible, and the report says so).

Acceptance is P(output in set(omega)) (the OTLP objective), with a KL interval valid at every look; the verifier
acceptance P(accepted_index >= 0) when the function returns an index; alpha* is ``otlp.optimal_acceptance`` of
each instance, averaged.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from otlp.certification import stats
from otlp.cli.util import Progress
from otlp.core.distributions import check_distribution, check_int
from otlp.core.drafts import DraftScheme, Greedy, Independent, Joint, SpecHub, WithoutReplacement, as_draft
from otlp.core.errors import InputError, ModelTooLargeError
from otlp.core.subsets import optimal_acceptance

#: Default error rate: false alarm (flagging a lossless rule) and miss (passing a rule at TV >= tolerance).
ALPHA = 1e-3
#: Default TV the run tries to rule out before it calls a rule lossless.
TOLERANCE = 1e-3
#: Default sample limit.
MAX_SAMPLES = 10_000_000
#: Cells per instance: every token up to this V, bins above.
MAX_CELLS = 64
#: Tokens kept as their own cell when binning (the most likely under p, then under q).
SINGLETONS = 8
#: At most this many instances.
MAX_INSTANCES = 256
#: Float64 cells per call of the function (rows x V).
BATCH_CELLS = 1 << 22
#: First look and growth of the looks.
FIRST_LOOK = 1000
GROWTH = 1.5
#: White-box verdict: exact output law within this of p.
EXACT_TOL = 1e-9
#: certify's largest number of drafts n: its exact enumeration holds V^n tuples, its sampled tests n drafts per
#: sample (10^5 samples of n = 10^4 drafts are 8 GB), and a per-draft scheme (weighted_is) an [n, V] table; above it
#: :func:`check_certify_n` refuses before any scheme is built (n = 10^9 took seconds to build and then was refused).
MAX_N = 10_000
SCHEME_CLASSES = {"iid": None, "without_replacement": WithoutReplacement, "greedy": Greedy, "spechub": SpecHub}


# ----------------------------------------------------------------------------------------------------------------------
# the function under test
# ----------------------------------------------------------------------------------------------------------------------


def check_certify_n(n: object, name: str = "n") -> int:
    """``n`` validated for certify: an integer in [1, ``MAX_N``]; ``InputError`` naming ``name`` otherwise."""
    n = check_int(n, name, 1)
    if n > MAX_N:
        raise InputError(f"{name} = {n:,} drafts is over certify's limit of {MAX_N:,} (it enumerates V^n draft "
                         "tuples or samples n drafts per test draw)")
    return n


def load_callable(spec: str) -> object:
    """``"package.module:function"`` (the attribute may be dotted, ``module:Class.method``) imported from the current
    directory and sys.path; any failure is an ``InputError`` naming what was tried."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"--verifier {spec!r}: expected a registered name or package.module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure of user code is bad input, reported in one line
        raise InputError(f"cannot import module {module_name!r} for verifier {spec!r}: "
                         f"{type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"module {module_name!r} has no attribute {attr!r} (verifier {spec!r})")
        obj = getattr(obj, part)
    if not callable(obj) and not callable(getattr(obj, "sample", None)):
        raise InputError(f"verifier {spec!r} is a {type(obj).__name__}, not a function or an object with .sample")
    return obj


def _describe(obj: object) -> str:
    owner = getattr(obj, "__self__", None)
    if owner is not None and not isinstance(owner, type(sys)):
        return f"{type(owner).__name__}.{getattr(obj, '__name__', 'sample')}"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "name", None) or type(obj).__name__
    return str(name)


def _sampler_of(obj: object) -> Callable[..., object]:
    """The function to call: ``obj.sample`` for an object that is not itself callable (a Verifier), else ``obj``."""
    if not callable(obj) and callable(getattr(obj, "sample", None)):
        return obj.sample  # type: ignore[attr-defined, no-any-return]
    return obj  # type: ignore[return-value]


def _conditional_of(obj: object) -> Callable[..., object] | None:
    """The exact law pi(. | omega) if the object exposes it: its own ``conditional``, or its bound owner's."""
    for holder in (obj, getattr(obj, "__self__", None)):
        cond = getattr(holder, "conditional", None)
        if callable(cond):
            return cond
    return None


def _per_draft_q(obj: object) -> bool | None:
    for holder in (obj, getattr(obj, "__self__", None)):
        flag = getattr(holder, "per_draft_q", None)
        if isinstance(flag, bool):
            return flag
    return None


# ----------------------------------------------------------------------------------------------------------------------
# instances
# ----------------------------------------------------------------------------------------------------------------------


def _rows(x: object, name: str) -> np.ndarray:
    try:
        raw = np.asarray(x)
        if raw.dtype.kind == "c":  # a cast would drop the imaginary part with a warning
            raise InputError(f"{name} must be real numbers, got dtype {raw.dtype}")
        arr = raw.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be numeric, got {type(x).__name__}: {str(exc).splitlines()[0]}") from None
    if arr.ndim not in (1, 2):
        raise InputError(f"{name} must have shape [V] or [instances, V], got {arr.shape}")
    arr = np.atleast_2d(arr)
    return np.stack([check_distribution(r, f"{name}[{j}]" if arr.shape[0] > 1 else name) for j, r in enumerate(arr)])


def build_instances(p: object, draft: object = None, *, q: object = None, n: int | None = None,
                    scheme: str = "iid") -> tuple[np.ndarray, list[DraftScheme]]:
    """``(p [J, V], drafts)``: p one vector or J rows; ``draft`` one scheme or J of them, or built from q (one
    vector or J rows), n and the scheme name (iid, without_replacement, greedy, spechub)."""
    P = _rows(p, "p")
    if draft is None:
        if q is None or n is None:
            raise InputError("certify needs a draft scheme (e.g. otlp.IID(q, n)), or q and n")
        if scheme not in SCHEME_CLASSES:
            raise InputError(f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEME_CLASSES)}")
        n = check_certify_n(n)
        cls = SCHEME_CLASSES[scheme]
        drafts = []
        for row in _rows(q, "q"):
            if cls is None:
                from otlp.core.drafts import IID

                drafts.append(IID(row, n))
            else:
                drafts.append(cls(row, n))
    elif isinstance(draft, DraftScheme):
        drafts = [draft]
    elif isinstance(draft, Sequence) and not isinstance(draft, str) and len(draft) > 0:
        drafts = [as_draft(d) for d in draft]
    else:
        drafts = [as_draft(draft)]  # raises the helpful message
    J = max(P.shape[0], len(drafts))
    if P.shape[0] not in (1, J) or len(drafts) not in (1, J):
        raise InputError(f"{P.shape[0]} target rows and {len(drafts)} draft schemes: give one of each, or as many "
                         "of one as of the other")
    if J > MAX_INSTANCES:
        raise InputError(f"at most {MAX_INSTANCES} instances, got {J}")
    P = np.broadcast_to(P, (J, P.shape[1])).copy()
    drafts = drafts * J if len(drafts) == 1 else drafts
    V = P.shape[1]
    for d in drafts:
        if d.V != V or d.n != drafts[0].n:
            raise InputError(f"every draft scheme must have V = {V} (the length of p) and the same n; got V = {d.V}, "
                             f"n = {d.n} against n = {drafts[0].n}")
    return P, drafts


def _q_argument(draft: DraftScheme, per_draft: bool | None) -> tuple[np.ndarray, bool]:
    """The q a torch sampler takes for this scheme: ``[V]``, or ``[n, V]`` (Independent, Joint, or per_draft)."""
    if isinstance(draft, Independent):
        return draft.qs, True
    if isinstance(draft, Joint) or not hasattr(draft, "q"):
        return draft.marginals(), True
    if per_draft:
        return np.tile(draft.q, (draft.n, 1)), True
    return draft.q, False


def cell_map(p: np.ndarray, q: np.ndarray, max_cells: int = MAX_CELLS) -> tuple[np.ndarray, int, str]:
    """``(cell of each token int [V], number of cells, description)`` for one instance (module docstring)."""
    V = p.size
    if V <= max_cells:
        return np.arange(V), V, "tokens"
    cells = np.full(V, -1, dtype=np.int64)
    zero = p <= 0
    k = 0
    singles = SINGLETONS if max_cells >= 4 * SINGLETONS else max(1, max_cells // 4)
    for ranking in (np.argsort(-p, kind="stable"), np.argsort(-q, kind="stable")):
        taken = 0
        for t in ranking:
            if taken == singles:
                break
            if cells[t] < 0 and not zero[t]:
                cells[t] = k
                k += 1
                taken += 1
    rest = np.flatnonzero((cells < 0) & ~zero)
    bins = max(1, max_cells - k - int(zero.any()))
    if rest.size:
        with np.errstate(divide="ignore"):
            order = rest[np.argsort(q[rest] / p[rest], kind="stable")]
        mass = np.cumsum(p[order])
        idx = np.minimum((mass - p[order] / 2) / mass[-1] * bins, bins - 1).astype(np.int64)
        _, idx = np.unique(idx, return_inverse=True)
        cells[order] = k + idx
        k += int(idx.max()) + 1
    if zero.any():
        cells[zero] = k
        k += 1
    return cells, k, f"{k} cells ({2 * singles} top tokens alone, the rest binned by q/p into equal p-mass bins)"


# ----------------------------------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class CallableReport:
    """What black-box (or white-box) ``certify`` found; ``method`` says how each number was obtained."""

    verifier: str
    mode: str  # "black box" or "white box (exact enumeration)"
    schemes: list[str]
    V: int
    n: int
    instances: int
    acceptance: float
    acceptance_interval: tuple[float, float]
    verifier_acceptance: float | None
    optimum: float | None
    gap: float | None
    gap_interval: tuple[float, float] | None
    preserves_target: bool | None
    tv: float
    tv_lower: float
    tv_upper: float
    p_value: float | None
    samples: int
    sample_limit: int
    alpha: float
    tolerance: float
    stopped: str
    cells: str
    looks: int = 0
    seconds: float = 0.0
    instance_tv: list[float] = field(default_factory=list)
    instance_optimum: list[float | None] = field(default_factory=list)
    method: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def detectable_tv(self) -> float:
        """The TV the run ruled out: a rule at TV >= this passes with probability <= alpha (its power)."""
        return self.tv_upper

    def to_dict(self) -> dict[str, object]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["detectable_tv"] = self.detectable_tv
        out["acceptance_interval"] = list(self.acceptance_interval)
        out["gap_interval"] = None if self.gap_interval is None else list(self.gap_interval)
        return out

    def __str__(self) -> str:
        def fmt(x: float | None, digits: int = 6) -> str:
            return "n/a" if x is None else f"{x:.{digits}g}"

        verdict = {True: "yes", False: "NO", None: "inconclusive"}[self.preserves_target]
        lines = [
            f"verifier            {self.verifier} ({self.mode}; scheme {', '.join(sorted(set(self.schemes)))}, "
            f"V = {self.V}, n = {self.n}, {self.instances} instance(s))",
            f"acceptance          {fmt(self.acceptance)}  [{fmt(self.acceptance_interval[0])}, "
            f"{fmt(self.acceptance_interval[1])}]   ({self.method.get('acceptance', '')})",
            f"verifier acceptance {fmt(self.verifier_acceptance)}",
            f"optimum alpha*      {fmt(self.optimum)}",
            f"gap                 {fmt(self.gap)}"
            + ("" if self.gap_interval is None else
               f"  [{fmt(self.gap_interval[0])}, {fmt(self.gap_interval[1])}]"),
            f"preserves target    {verdict}   (stopped: {self.stopped})",
            f"TV(output, p)       {fmt(self.tv)}  [{fmt(self.tv_lower)}, {fmt(self.tv_upper)}] on {self.cells}",
            f"p-value             {fmt(self.p_value, 3)}   (anytime-valid; error rate alpha = {self.alpha:g})",
            f"samples             {self.samples} of at most {self.sample_limit}, {self.looks} looks, "
            f"{self.seconds:.2f} s",
            f"power               TV >= {fmt(self.detectable_tv, 3)} ruled out at confidence 1 - {self.alpha:g} "
            f"(tolerance {self.tolerance:g})",
        ]
        lines += [f"note                {x}" for x in self.notes]
        return "\n".join(lines)


def _optima(P: np.ndarray, drafts: list[DraftScheme], notes: list[str]) -> list[float | None]:
    out: list[float | None] = []
    for j, (p, d) in enumerate(zip(P, drafts, strict=True)):
        try:
            out.append(float(optimal_acceptance(p, d)))
        except (InputError, NotImplementedError) as exc:
            out.append(None)
            notes.append(f"alpha* not computed for instance {j}: {exc}")
    return out


def _mean_or_none(xs: Sequence[float | None]) -> float | None:
    return None if any(x is None for x in xs) else float(np.mean(xs))


# ----------------------------------------------------------------------------------------------------------------------
# white box
# ----------------------------------------------------------------------------------------------------------------------


class _WhiteBox:
    """Adapter of a user ``conditional`` to ``otlp.verifiers.exact`` (which needs ``check_draft`` and a
    ``(law, rule_accepts)`` pair)."""

    def __init__(self, conditional: Callable[..., object], name: str):
        self._conditional = conditional
        self.name = name
        self.has_accepts = True

    def check_draft(self, p: object, draft: DraftScheme) -> tuple[np.ndarray, DraftScheme]:
        return check_distribution(p, "p", size=draft.V), draft

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        try:
            out = self._conditional(p, draft, omegas)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: one line naming it
            raise InputError(f"{self.name}.conditional raised {type(exc).__name__}: {exc}") from exc
        law, accepts = out if isinstance(out, tuple) else (out, None)
        law = np.asarray(law, dtype=np.float64)
        if law.shape != (omegas.shape[0], draft.V):
            raise InputError(f"{self.name}.conditional returned shape {law.shape}, expected "
                             f"{(omegas.shape[0], draft.V)} (one law over V tokens per drafted tuple)")
        if accepts is None:
            self.has_accepts = False
            accepts = np.zeros(omegas.shape[0])
        return law, np.asarray(accepts, dtype=np.float64)


def _white_box(name: str, conditional: Callable[..., object], P: np.ndarray, drafts: list[DraftScheme],
               tolerance: float, alpha: float) -> CallableReport:
    from otlp.verifiers.exact import summary

    t0 = time.perf_counter()
    box = _WhiteBox(conditional, name)
    notes: list[str] = []
    tvs, accs, vaccs, ok = [], [], [], True
    for p, d in zip(P, drafts, strict=True):
        s = summary(box, p, d)
        tvs.append(0.5 * float(np.abs(s["output_law"] - p).sum()))
        accs.append(float(s["acceptance"]))
        vaccs.append(float(s["verifier_acceptance"]))
        if s["min_conditional"] < -1e-12 or s["max_row_error"] > EXACT_TOL:
            ok = False
            notes.append(f"pi(. | omega) is not a probability law on some tuple (min entry {s['min_conditional']:.3g}, "
                         f"max |row sum - 1| {s['max_row_error']:.3g})")
    tv = float(np.mean(tvs))
    optima = _optima(P, drafts, notes)
    opt = _mean_or_none(optima)
    acc = float(np.mean(accs))
    preserves = ok and max(tvs) <= EXACT_TOL
    return CallableReport(
        name, "white box (exact enumeration)", [d.name for d in drafts], P.shape[1], drafts[0].n, len(drafts), acc,
        (acc, acc), float(np.mean(vaccs)) if box.has_accepts else None, opt, None if opt is None else opt - acc,
        None if opt is None else (opt - acc, opt - acc), preserves, tv, tv, tv, None, 0, 0, alpha, tolerance,
        "exact", "tokens", 0, time.perf_counter() - t0, tvs, optima,
        {"acceptance": "exact enumeration", "target_law": "exact enumeration of the draft support"}, notes)


# ----------------------------------------------------------------------------------------------------------------------
# black box
# ----------------------------------------------------------------------------------------------------------------------


def _call(fn: Callable[..., object], name: str, args: tuple, B: int, V: int):  # noqa: ANN202
    import torch

    try:
        out = fn(*args)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: one line naming it
        raise InputError(f"verifier {name} raised {type(exc).__name__}: {exc}") from exc
    tokens, index = (out[0], out[1]) if isinstance(out, (tuple, list)) and len(out) == 2 else (out, None)
    if not isinstance(tokens, torch.Tensor) or tuple(tokens.shape) != (B,) or tokens.is_floating_point():
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise InputError(f"verifier {name} must return integer tokens of shape [{B}] (or (tokens, accepted_index)), "
                         f"got {shape}")
    tokens = tokens.detach().to("cpu", torch.int64).numpy()
    if tokens.size and (tokens.min() < 0 or tokens.max() >= V):
        raise InputError(f"verifier {name} returned token ids outside [0, {V}): min {tokens.min()}, "
                         f"max {tokens.max()}")
    if index is not None:
        if not isinstance(index, torch.Tensor) or tuple(index.shape) != (B,):
            raise InputError(f"verifier {name}: accepted_index must be a tensor of shape [{B}]")
        index = index.detach().to("cpu", torch.int64).numpy()
    return tokens, index


def _band_note(b: stats.Band | None) -> str:
    """The progress line's note: the current TV band (or estimate and p-value) of the sampled law."""
    if b is None:
        return "samples"
    if math.isfinite(b.tv_upper):
        return f"samples, TV in [{b.tv_lower:.2g}, {b.tv_upper:.2g}]"
    return f"samples, TV estimate {b.tv:.2g}, p-value {min(1.0, math.exp(b.log_p)):.2g}"


def certify_callable(fn: object, p: object, draft: object = None, *, q: object = None, n: int | None = None,
                     scheme: str = "iid", samples: int | None = None, seed: int = 0, alpha: float = ALPHA,
                     tolerance: float = TOLERANCE, cells: int = MAX_CELLS, mode: str = "auto",
                     per_draft_q: bool | None = None, batch: int | None = None, device: str = "cpu",
                     progress: bool | None = None, name: str | None = None) -> CallableReport:
    """Certify a verification function (module docstring). ``samples`` is the sample limit (default 1e7); the run
    stops earlier on a detected bias or once TV <= ``tolerance`` is shown; ``alpha`` is both error rates;
    ``per_draft_q`` forces q of shape ``[B, n, V]`` (default: the object's own ``per_draft_q``, else ``[B, V]``
    except for Independent / Joint schemes); ``progress`` (default: stderr is a terminal) prints progress."""
    if isinstance(fn, str):
        fn = load_callable(fn)
    label = name or _describe(fn)
    if mode not in ("auto", "black", "white"):
        raise InputError(f"mode must be 'auto', 'black' or 'white', got {mode!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise InputError(f"alpha must be in (0, 1), got {alpha!r}")
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance <= 1):
        raise InputError(f"tolerance must be in [0, 1], got {tolerance!r}")
    limit = MAX_SAMPLES if samples is None else check_int(samples, "samples", 1)
    seed = check_int(seed, "seed", 0)
    cells = check_int(cells, "cells", 2)
    P, drafts = build_instances(p, draft, q=q, n=n, scheme=scheme)
    conditional = _conditional_of(fn)
    if mode == "white" and conditional is None:
        raise InputError(f"mode='white' needs an object with conditional(p, draft, omegas); {label} has none")
    fallback = None
    if mode != "black" and conditional is not None:
        try:
            return _white_box(label, conditional, P, drafts, float(tolerance), float(alpha))
        except ModelTooLargeError as exc:
            if mode == "white":
                raise
            fallback = f"white box refused ({exc}); sampled instead"
    sampler = _sampler_of(fn)
    if not callable(sampler):
        raise InputError(f"verifier {label} is not callable and has no .sample")
    if per_draft_q is None:
        per_draft_q = _per_draft_q(fn)
    report = _black_box(sampler, label, P, drafts, limit=limit, seed=seed, alpha=float(alpha),
                        tolerance=float(tolerance), max_cells=cells, per_draft_q=per_draft_q, batch=batch,
                        device=device, progress=sys.stderr.isatty() if progress is None else bool(progress))
    if fallback:
        report.notes.insert(0, fallback)
    return report


def _black_box(fn: Callable[..., object], label: str, P: np.ndarray, drafts: list[DraftScheme], *, limit: int,
               seed: int, alpha: float, tolerance: float, max_cells: int, per_draft_q: bool | None,
               batch: int | None, device: str, progress: bool) -> CallableReport:
    import torch

    t0 = time.perf_counter()
    J, V = P.shape
    n = drafts[0].n
    notes: list[str] = []
    if limit < J:
        raise InputError(f"samples must be at least the number of instances ({J}), got {limit}")
    qs = [_q_argument(d, per_draft_q) for d in drafts]
    if len({shape for shape in (q.shape for q, _ in qs)}) != 1:
        raise InputError("every instance must give q of one shape (mix of [V] and [n, V] draft schemes)")
    maps, offsets, p0, desc = [], [0], [], "tokens"
    for j in range(J):
        q_view = qs[j][0] if qs[j][0].ndim == 1 else qs[j][0].mean(axis=0)
        cmap, k, desc = cell_map(P[j], q_view, max_cells)
        maps.append(cmap)
        p0.append(np.bincount(cmap, weights=P[j], minlength=k) / J)
        offsets.append(offsets[-1] + k)
    p0_all = np.concatenate(p0)
    M = offsets[-1]
    cell_of = np.stack([m + o for m, o in zip(maps, offsets[:-1], strict=True)])  # [J, V]
    if V > max_cells:
        notes.append(f"V = {V} > {max_cells} cells per instance: TV is that of the binned law ({desc}), a lower "
                     "bound on the token-level TV")
    rows = batch if batch is not None else max(1, BATCH_CELLS // max(V, 1))
    rows = max(J, check_int(rows, "batch", 1) // J * J)
    dtype = torch.float64
    p_t = torch.as_tensor(P, dtype=dtype, device=device)  # [J, V]
    q_t = torch.as_tensor(np.stack([q for q, _ in qs]), dtype=dtype, device=device)  # [J, V] or [J, n, V]
    rng = np.random.default_rng(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    counts = np.zeros(M)
    member = accepted = mismatched = 0
    has_index = True
    done = 0
    looks = stats.look_sizes(FIRST_LOOK, GROWTH, limit, J)
    bar = Progress(f"certify {label}", total=limit, enabled=progress, force=progress)
    band: stats.Band | None = None
    log_p = 0.0
    stopped = "sample limit"
    k = 0
    try:
        for k, target in enumerate(looks, start=1):
            while done < target:
                per = min(rows, target - done) // J  # rows per instance in this call
                inst = np.repeat(np.arange(J), per)  # [B]
                omegas = np.concatenate([d.sample(per, rng) for d in drafts])  # [B, n]
                B = omegas.shape[0]
                idx = torch.as_tensor(inst, device=device)
                w = torch.as_tensor(omegas, device=device)
                tokens, index = _call(fn, label, (p_t[idx], q_t[idx], w, gen), B, V)
                counts += np.bincount(cell_of[inst, tokens], minlength=M)
                member += int((omegas == tokens[:, None]).any(axis=1).sum())
                if index is None:
                    has_index = False
                else:
                    acc = index >= 0
                    accepted += int(acc.sum())
                    safe = np.clip(index, 0, n - 1)
                    mismatched += int((acc & ((index >= n) | (omegas[np.arange(B), safe] != tokens))).sum())
                done += B
                bar.update(B, _band_note(band))
            band = stats.band(counts, p0_all, k, alpha, tolerance)
            log_p = min(log_p, band.log_p)
            if band.rejects:
                stopped = "bias detected"
                break
            if band.tv_upper <= tolerance:
                stopped = "tolerance reached"
                break
    finally:
        bar.close()
    assert band is not None
    band = stats.band(counts, p0_all, k, alpha)  # the full upper bound for the report
    preserves = False if band.rejects else (True if band.tv_upper <= tolerance else None)
    acc_lo, acc_hi = stats.proportion_interval(member, done, k, alpha)
    acc = member / done
    optima = _optima(P, drafts, notes)
    opt = _mean_or_none(optima)
    hat = counts / done
    instance_tv = [0.5 * float(np.abs(hat[offsets[j]:offsets[j + 1]] - p0_all[offsets[j]:offsets[j + 1]]).sum()) * J
                   for j in range(J)]
    if mismatched:
        notes.append(f"{mismatched} rows returned accepted_index >= 0 with a token that is not that draft")
    if preserves is None:
        need = done * (band.tv_upper / tolerance) ** 2 if tolerance > 0 else math.inf
        notes.append(f"inconclusive: TV >= {band.tv_upper:.3g} ruled out, tolerance {tolerance:g} needs about "
                     f"{need:.2g} samples (pass samples=...)")
    if opt is not None and acc_lo > opt + 1e-12:
        notes.append("acceptance above alpha*: only a rule that does not preserve p can do that")
    return CallableReport(
        label, "black box", [d.name for d in drafts], V, n, J, acc, (acc_lo, acc_hi),
        accepted / done if has_index else None, opt, None if opt is None else opt - acc,
        None if opt is None else (opt - acc_hi, opt - acc_lo), preserves, band.tv, band.tv_lower, band.tv_upper,
        float(min(1.0, math.exp(log_p))), done, limit, alpha, tolerance, stopped, desc, k, time.perf_counter() - t0,
        instance_tv, optima,
        {"acceptance": f"Monte Carlo, KL interval at confidence 1 - {alpha:g} valid at every look",
         "target_law": f"sequential KL band over all events of the {M} (instance, cell) pairs, {k} looks"},
        notes)


__all__ = ["ALPHA", "MAX_SAMPLES", "TOLERANCE", "CallableReport", "build_instances", "cell_map", "certify_callable",
           "load_callable"]
