"""The verifier interface and the small tensor helpers every rule shares.

Terms (used in every verifier module):

- **drafts** ``[B, n]`` int64: the drafted tuple omega for each of B sequences, drawn from the verifier's draft scheme.
- **output token** ``[B]``: the verified token, distributed exactly as the target p.
- **accepted index** ``[B]``: the position of the draft the rule itself accepted, or -1 when the rule rejected every
  draft and drew the output from its residual. A residual sample may still equal a draft token; that event counts
  towards :meth:`Verifier.acceptance` (the OTLP objective) but not towards :meth:`Verifier.verifier_acceptance`.

Each rule is written twice, on purpose: a batched torch sampler (the production path, CPU or CUDA) and an exact numpy
float64 function ``conditional(p, draft, omegas)`` giving pi(. | omega), the law of the output token for each drafted
tuple after integrating out the rule's own coins. ``otlp.verifiers.exact`` turns the second into the induced coupling,
the output law and the exact acceptances; the tests check that the first reproduces the second.
"""

from __future__ import annotations

import sys

import numpy as np

from otlp.core import xp as X
from otlp.core.distributions import check_distribution
from otlp.core.drafts import DraftScheme, as_draft
from otlp.core.errors import InputError


class Verifier:
    """Base class of the verification rules. Subclasses set ``name``, ``scheme`` and implement ``make_draft``,
    ``sample`` and ``conditional``; they override ``acceptance`` / ``verifier_acceptance`` with closed forms where the
    papers give one (the tests compare those with enumeration).
    """

    name: str = "verifier"
    #: The draft scheme the rule expects (``DraftScheme.name`` of ``make_draft``'s result).
    scheme: str = "iid"
    #: Other draft-scheme names the rule is exact for.
    compatible_schemes: tuple[str, ...] = ()
    #: Whether ``sample`` takes a per-draft ``q: [B, n, V]`` (otherwise ``[B, V]``).
    per_draft_q: bool = False
    #: Draft-scheme names whose law the torch ``sample`` implements; ``None`` means all of ``scheme`` and
    #: ``compatible_schemes``. The torch interface carries no scheme, so a rule whose exact numpy route covers more
    #: schemes than its torch sampler (the optimal rule: i.i.d. only) names the narrower set here; see
    #: :meth:`torch_sampler_schemes` and :meth:`sample_exact`.
    torch_schemes: tuple[str, ...] | None = None
    #: The number of drafts the rule is defined for, when fixed (SpecHub: 2).
    fixed_n: int | None = None

    # -- to implement ---------------------------------------------------------------------------------------------
    def make_draft(self, q: object, n: int) -> DraftScheme:
        """The draft scheme this rule verifies, built from the draft distribution q (``[V]`` or ``[n, V]``)."""
        raise NotImplementedError

    def sample(self, p, q, drafts, generator=None):  # noqa: ANN001 - torch tensors
        """Verify a batch: ``p [B, V]``, ``q [B, V]`` (or ``[B, n, V]``), ``drafts [B, n]`` -> ``(tokens [B],
        accepted_index [B])``."""
        raise NotImplementedError

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact pi(. | omega) for ``omegas [M, n]``: ``(law float64 [M, V], rule_accepts float64 [M])`` where
        ``rule_accepts[m]`` is P(the rule accepts one of the drafts | omega_m)."""
        raise NotImplementedError

    def torch_sampler_schemes(self) -> tuple[str, ...]:
        """The draft schemes :meth:`sample` is exact for: ``torch_schemes``, else ``(scheme, *compatible_schemes)``."""
        return (self.scheme, *self.compatible_schemes) if self.torch_schemes is None else tuple(self.torch_schemes)

    def sample_exact(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray, rng: np.random.Generator,
                     max_cells: int = 1 << 23) -> tuple[np.ndarray, np.ndarray]:
        """Exact numpy sampler for any scheme the rule is exact for: one output token per drafted tuple, drawn from
        pi(. | omega) of :meth:`conditional`, and P(the rule accepts a draft | omega).

        ``omegas int [M, n]`` -> ``(tokens int64 [M], rule_accepts float64 [M])``. Inverse CDF with one uniform per
        row, in chunks of ``max_cells // V`` rows (``conditional`` returns ``[chunk, V]``). The stand-in for
        :meth:`sample` on schemes outside :meth:`torch_sampler_schemes`; subclasses with a cheaper exact sampler
        override it (``Optimal``: ``OptimalTransport(p, draft).sample``).
        """
        omegas = np.asarray(omegas, dtype=np.int64)
        M, V = omegas.shape[0], draft.V
        tokens = np.empty(M, dtype=np.int64)
        accepts = np.empty(M)
        chunk = max(1, max_cells // V)
        for start in range(0, M, chunk):
            stop = min(M, start + chunk)
            law, accepts[start:stop] = self.conditional(p, draft, omegas[start:stop])  # [m, V], [m]
            law = np.maximum(law, 0.0)
            tokens[start:stop] = X.inverse_cdf(law, rng.random((stop - start, 1)))
        return tokens, accepts

    # -- exact quantities (enumeration by default) -------------------------------------------------------------------
    def acceptance(self, p: object, draft: DraftScheme) -> float:
        """P(output token in set(omega)), the OTLP objective; comparable with alpha*."""
        from otlp.verifiers.exact import acceptance

        return acceptance(self, p, draft)

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        """P(the rule itself accepts a draft); never above :meth:`acceptance`."""
        from otlp.verifiers.exact import verifier_acceptance

        return verifier_acceptance(self, p, draft)

    def output_law(self, p: object, draft: DraftScheme) -> np.ndarray:
        """The exact law of the output token, ``float64 [V]`` (by enumeration of the draft support)."""
        from otlp.verifiers.exact import output_law

        return output_law(self, p, draft)

    # -- shared checks ------------------------------------------------------------------------------------------------
    def check_draft(self, p: object, draft: DraftScheme) -> tuple[np.ndarray, DraftScheme]:
        """Validate ``p`` against ``draft`` and that ``draft`` is a scheme this rule is exact for."""
        draft = as_draft(draft)
        allowed = (self.scheme, *self.compatible_schemes)
        if draft.name not in allowed:
            raise InputError(
                f"verifier {self.name!r} expects a {self.scheme!r} draft scheme (build it with "
                f"otlp.verifiers.get({self.name!r}).make_draft(q, n)), got {type(draft).__name__}"
            )
        if self.fixed_n is not None and draft.n != self.fixed_n:
            raise InputError(f"verifier {self.name!r} is defined for n = {self.fixed_n} drafts, got n = {draft.n}")
        return check_distribution(p, "p", size=draft.V), draft

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, scheme={self.scheme!r})"


# ----------------------------------------------------------------------------------------------------------------------
# torch helpers (no .item(), no Python loop over the batch)
# ----------------------------------------------------------------------------------------------------------------------


def check_tensors(p, q, drafts, *, per_draft_q: bool = False, fixed_n: int | None = None,  # noqa: ANN001, ANN201
                  validate: bool | None = None, totals: list | None = None):
    """Shape/dtype checks at the boundary (none inside the hot path), then the values. Returns ``(B, n, V)``.

    Values (``validate``; None = :func:`validation_enabled`): every row of p and q finite, >= 0 and summing to 1
    within :func:`sum_tolerance` of its dtype (float32 softmax rows pass), every draft id in [0, V). The rows' sums
    and minima are one pass per tensor (on the host one C loop, :func:`_host_row_stats`; elsewhere torch's sum and
    amin), then one host sync (``bool()``); the diagnosis runs only when it fails. With validation off
    (``validate=False``, ``with validation(False):`` or ``OTLP_VALIDATE=0``) nothing touches the values: no sync.
    ``totals``: a list that receives the float64 row sums of p and q (numpy ``[B]`` each) when the check took them
    exactly (the C loop), for a caller that normalises the rows (the optimal rule): one pass over the inputs fewer.
    """
    import torch

    for name, t in (("p", p), ("q", q), ("drafts", drafts)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if p.ndim != 2:
        raise InputError(f"p must have shape [B, V], got {tuple(p.shape)}")
    B, V = p.shape
    if V == 0:
        raise InputError(f"p must have at least one token per row (V >= 1), got shape {tuple(p.shape)}")
    if drafts.ndim != 2 or drafts.shape[0] != B:
        raise InputError(f"drafts must have shape [B, n] with B = {B}, got {tuple(drafts.shape)}")
    if drafts.dtype not in (torch.int64, torch.int32):
        raise InputError(f"drafts must be an integer tensor (int64), got {drafts.dtype}")
    n = drafts.shape[1]
    if n < 1:
        raise InputError("drafts must hold at least one draft per row (n >= 1)")
    if fixed_n is not None and n != fixed_n:
        raise InputError(f"this verifier is defined for n = {fixed_n} drafts, got drafts of shape "
                         f"{tuple(drafts.shape)}")
    want = (B, n, V) if per_draft_q else (B, V)
    if per_draft_q and q.ndim == 2 and tuple(q.shape) == (B, V):
        pass  # one q shared by every draft: broadcast by the caller's helper
    elif tuple(q.shape) != want:
        raise InputError(f"q must have shape {list(want)}, got {tuple(q.shape)}")
    if not p.is_floating_point() or not q.is_floating_point():
        raise InputError(f"p and q must be floating point tensors, got {p.dtype} and {q.dtype}")
    if p.device != q.device or p.device != drafts.device:
        raise InputError(f"p, q and drafts must be on one device, got {p.device}, {q.device}, {drafts.device}")
    if validation_enabled() if validate is None else validate:
        exact = _check_values(p, q, drafts, V)
        if totals is not None and exact is not None:
            totals.extend(exact)
    return B, n, V


_VALIDATE: list[bool] = []  # the stack of ``validation(...)`` contexts; empty: the OTLP_VALIDATE default


def validation_enabled() -> bool:
    """Whether the torch samplers check their inputs' values: the innermost ``validation(...)`` context, else the
    environment variable ``OTLP_VALIDATE`` ("0" turns it off), else True."""
    import os

    if _VALIDATE:
        return _VALIDATE[-1]
    return os.environ.get("OTLP_VALIDATE", "1").strip().lower() not in ("0", "false", "no", "off")


class validation:  # noqa: N801 - used as a context manager, like torch.no_grad
    """``with validation(False): verifier.sample(...)`` skips the value checks of :func:`check_tensors` (and their
    host sync) in a serving loop whose inputs are already known to be distributions."""

    def __init__(self, enabled: bool = True):
        self.enabled = bool(enabled)

    def __enter__(self) -> validation:
        _VALIDATE.append(self.enabled)
        return self

    def __exit__(self, *exc: object) -> None:
        _VALIDATE.pop()


def sum_tolerance(dtype, V: int) -> float:  # noqa: ANN001 - a torch dtype
    """Allowed |row sum - 1|: 1e-9 in float64 (as :func:`otlp.core.distributions.check_distribution`), and for lower
    precisions 8 sqrt(V) machine epsilons (the rounding of a softmax and of its sum; 3.7e-4 in float32 at
    V = 152k), so LM softmax output passes while a row summing to 2 or 0.9 does not."""
    import torch

    eps = torch.finfo(dtype).eps
    return max(1e-9, 8.0 * float(V) ** 0.5 * eps) if dtype != torch.float64 else 1e-9


def _host_row_stats(x):  # noqa: ANN001, ANN202 - a tensor [..., V] -> (total, low) numpy [rows] or None
    """The float64 sum and the least entry of each row of a host float32 / float64 tensor, in one pass of
    :mod:`otlp.backend.native`'s kernel (exact float64 sums; a NaN or infinite entry makes its row's sum non-finite);
    None on a device, for other dtypes, or where the kernels are not built."""
    from otlp.backend import native

    if not _host_dtype(x):
        return None
    return native.row_stats(x.detach().reshape(-1, x.shape[-1]).numpy())


def _host_dtype(x) -> bool:  # noqa: ANN001 - a tensor
    """Whether :func:`_host_row_stats` can take ``x``'s rows: a host float32 or float64 tensor."""
    import torch

    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


def _row_ok(x, V: int, host=None):  # noqa: ANN001, ANN202 - [..., V] -> [...] bool
    """Which rows of ``x`` are finite, >= 0 and sum to 1 within :func:`sum_tolerance`: from ``host``
    (:func:`_host_row_stats`) when given, else by torch on x's device, in two passes (a NaN or infinite entry makes
    the sum non-finite, and a NaN also fails amin >= 0). torch's sum runs in x's dtype (it accumulates low precisions
    in float32, with cascaded partial sums: a float32 row's rounding is far below sum_tolerance) and only the [...]
    totals are widened: a float64 copy of x would cost more than the check."""
    import torch

    if host is not None:
        return torch.from_numpy(_host_ok(host, x.dtype, V)).reshape(x.shape[:-1])
    total = x.sum(dim=-1).to(torch.float64)
    return total.isfinite() & (x.amin(dim=-1) >= 0) & ((total - 1.0).abs() <= sum_tolerance(x.dtype, V))


def _host_ok(host, dtype, V: int) -> np.ndarray:  # noqa: ANN001 - (total, low) numpy [rows] -> bool [rows]
    total, low = host
    return np.isfinite(total) & (low >= 0) & (np.abs(total - 1.0) <= sum_tolerance(dtype, V))


def _check_values(p, q, drafts, V: int):  # noqa: ANN001, ANN202
    """InputError naming the first problem of p, q or drafts; one host sync when all is well. On the host (float32 or
    float64 rows, :mod:`otlp.backend.native` built) the rows' float64 sums and minima are one C pass per tensor, tested
    by numpy, and the sums of p and q are returned (numpy ``[B]``); elsewhere torch's sum and amin on the tensors'
    device, and None."""
    import torch

    host = None, None  # both or neither on the host: a pass over p or q that torch would repeat is not taken
    if drafts.device.type == "cpu" and _host_dtype(q) and (hp := _host_row_stats(p)) is not None \
            and (hq := _host_row_stats(q)) is not None:
        host = hp, hq
    if host[0] is None:
        if bool(_row_ok(p, V).all() & _row_ok(q, V).all() & ((drafts >= 0) & (drafts < V)).all()):
            return None
    else:
        ids = drafts.numpy()
        ids_ok = not ids.size or (ids.min() >= 0 and ids.max() < V)
        if ids_ok and _host_ok(host[0], p.dtype, V).all() and _host_ok(host[1], q.dtype, V).all():
            return host[0][0], host[1][0]
    for name, x, stats in (("p", p, host[0]), ("q", q, host[1])):  # the diagnosis, by the test that failed
        bad = torch.nonzero(~_row_ok(x, V, stats))
        if bad.numel():
            row = tuple(int(i) for i in bad[0])
            values = x[row]
            what = ("is not finite" if not bool(torch.isfinite(values).all()) else
                    "has a negative entry" if bool((values < 0).any()) else
                    f"sums to {float(values.sum(dtype=torch.float64)):.9g}")
            raise InputError(f"{name}[{', '.join(map(str, row))}] {what}; expected a probability vector (finite, "
                             f">= 0, summing to 1 within {sum_tolerance(x.dtype, V):.2g} in {x.dtype}). Pass "
                             "validate=False / use otlp.verifiers.base.validation(False) to skip this check")
    lo, hi = int(drafts.min()), int(drafts.max())
    raise InputError(f"drafts must be token ids in [0, {V}), got range [{lo}, {hi}]")


def gather(x, tokens):  # noqa: ANN001, ANN201
    """``x [B, V]`` at ``tokens [B]`` -> ``[B]``."""
    return x.gather(1, tokens.long().unsqueeze(1)).squeeze(1)


def normalize_or(weights, fallback):  # noqa: ANN001, ANN201 - numpy arrays or torch tensors
    """Rows of ``weights [..., V]`` divided by their sums; rows with no mass are replaced by ``fallback`` (numpy or
    torch: the samplers' residuals and the exact laws' alike).

    An empty residual only occurs on a branch of probability zero (e.g. p = q), so the fallback never changes the
    output law; it keeps the sampler free of NaN.
    """
    xp = X.namespace(weights)
    total = weights.sum(-1)[..., None]  # [..., 1]
    ok = total > 0
    return xp.where(ok, weights / xp.where(ok, total, 1.0), fallback)


def sample_categorical(weights, generator=None, fallback=None):  # noqa: ANN001, ANN201
    """One token per row from unnormalised ``weights [B, V] >= 0`` by inverse CDF with one uniform per row
    (:func:`otlp.core.xp.inverse_cdf`: always a token of positive weight). A row with no mass draws from ``fallback [B,
    V]`` (e.g. p: such rows only occur on probability-zero branches, so the output law is unchanged and the sampler
    stays free of NaN), or returns token 0 without one. On a device ``weights`` is modified in place."""
    import torch

    u = torch.rand((weights.shape[0], 1), generator=generator, device=weights.device, dtype=weights.dtype)
    return X.inverse_cdf(weights, u, fallback)


def first_accepted(accept):  # noqa: ANN001, ANN201
    """``accept [B, n]`` bool -> ``(any [B], first index [B] or -1)``."""
    import torch

    n = accept.shape[1]
    positions = torch.arange(n, device=accept.device).expand_as(accept)
    first = torch.where(accept, positions, torch.full_like(positions, n)).min(dim=1).values  # [B]
    anyacc = first < n
    return anyacc, torch.where(anyacc, first, torch.full_like(first, -1))


def finish(drafts, accept, residual_tokens):  # noqa: ANN001, ANN201
    """Output of a sequential rule: the first accepted draft, else the residual sample. Returns ``(tokens, index)``."""
    import torch

    anyacc, index = first_accepted(accept)
    chosen = drafts.gather(1, index.clamp(min=0).unsqueeze(1)).squeeze(1)
    return torch.where(anyacc, chosen, residual_tokens).long(), index.long()


def check_uniforms(uniforms, B: int, like, validate: bool | None = None):  # noqa: ANN001, ANN201
    """The caller's randomness for one verification per row: ``uniforms [B, 2]`` floating point on ``like``'s device
    (``[:, 0]`` the node's coin, ``[:, 1]`` the final uniform; one-line InputError otherwise). With validation on
    (``validate``, else :func:`validation_enabled`) values outside [0, 1) or NaN are refused, naming the argument.
    Returned as a new tensor of the same dtype, NaN read as 0 and clamped to [0, largest float below 1]: elementwise
    device ops, no host sync, a no-op on valid values, so a generator's u = 1.0 (one that returns (0, 1]) can never
    fall past the last positive weight onto a token of probability 0 (issue 44)."""
    import torch

    if not isinstance(uniforms, torch.Tensor) or tuple(uniforms.shape) != (B, 2) \
            or not uniforms.is_floating_point() or uniforms.device != like.device:
        raise InputError(f"uniforms must be a floating point tensor of shape [{B}, 2] on {like.device}, got "
                         f"{getattr(uniforms, 'shape', type(uniforms).__name__)}")
    if (validation_enabled() if validate is None else validate) and B \
            and not bool(((uniforms >= 0) & (uniforms < 1)).all()):
        raise InputError(f"uniforms must be in [0, 1), got values in [{float(uniforms.min()):.17g}, "
                         f"{float(uniforms.max()):.17g}] (with validation off they are clamped below 1 and NaN is "
                         "read as 0)")
    return torch.nan_to_num(uniforms, nan=0.0).clamp(0.0, 1.0 - torch.finfo(uniforms.dtype).eps / 2)


def pick_outcome(probs, u):  # noqa: ANN001, ANN201 - [B, k] float, [B] -> [B] int64
    """The outcome a coin picks by inverse CDF: the first k with ``u < probs[:, 0] + ... + probs[:, k]`` (float64),
    -1 when u is past them all (the rule rejects). ``probs [B, k]``: the probabilities of the rule's accepting
    outcomes given the drafts; the rest is the rejection's. One coin per node decides the node (issue 43)."""
    import torch

    total = torch.cumsum(probs.to(torch.float64), dim=1)  # [B, k]
    below = u.to(torch.float64)[:, None] < total
    k = probs.shape[1]
    first = torch.where(below, torch.arange(k, device=probs.device), k).amin(dim=1) if k else \
        torch.zeros(probs.shape[0], dtype=torch.long, device=probs.device)
    return torch.where(first < k, first, -1)


def sequential_probabilities(accept):  # noqa: ANN001, ANN201 - [B, n] float64
    """``accept [B, n]`` P(draft k accepted | reached k) -> P(draft k is the first accepted)
    = a_k prod_{i<k} (1 - a_i)."""
    import torch

    reach = torch.cumprod(torch.cat([torch.ones_like(accept[:, :1]), 1.0 - accept[:, :-1]], dim=1), dim=1)
    return reach * accept


def coins(B: int, n: int, like, generator=None):  # noqa: ANN001, ANN201
    """Uniform acceptance coins ``[B, n]`` in ``like``'s dtype and device."""
    import torch

    return torch.rand((B, n), generator=generator, device=like.device, dtype=like.dtype)


# ----------------------------------------------------------------------------------------------------------------------
# numpy helpers for the exact conditional laws
# ----------------------------------------------------------------------------------------------------------------------


def accept_probability(num, den):  # noqa: ANN001, ANN201 - numpy arrays (or array-likes) or torch tensors
    """P(u * den < num) for u ~ U(0, 1): ``min(1, num/den)`` with den = 0 giving 1 if num > 0 else 0, in float64:
    numpy in, numpy out (the exact laws); tensors in, tensors out (the uniforms paths, on the tensors' device).

    This is exactly the test ``u * den < num`` the torch samplers use (no division on the hot path).
    """
    torch = sys.modules.get("torch")  # a tensor can only come from an imported torch
    if torch is not None and isinstance(num, torch.Tensor):
        num, den = num.double(), den.double()
    else:
        num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    xp = X.namespace(num)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a subnormal den: inf, clipped to 1
        ratio = xp.where(den > 0, num / xp.where(den > 0, den, 1.0), xp.where(num > 0, 1.0, 0.0))
    return ratio.clip(0.0, 1.0)


def sequential_law(omegas: np.ndarray, accept: np.ndarray, residual: np.ndarray, V: int) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """pi(. | omega) of a rule that tests the drafts in order and stops at the first acceptance.

    ``accept [M, n]``: P(draft k accepted | reached k); ``residual [M, V]`` or ``[V]``: the law after all rejections.
    Returns ``(law [M, V], rule_accepts [M])``.
    """
    M, n = omegas.shape
    law = np.zeros((M, V))
    reach = np.ones(M)
    rows = np.arange(M)
    for k in range(n):
        np.add.at(law, (rows, omegas[:, k]), reach * accept[:, k])
        reach = reach * (1.0 - accept[:, k])
    law += reach[:, None] * np.broadcast_to(residual, (M, V))
    return law, 1.0 - reach


def distinct_rows(*arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first [U], inverse [B])`` for rows of ``arrays`` (each ``[B, ...]``, read together): the first row of each
    distinct row and each row's index among them, by hashing the rows' bytes (np.unique(axis=0) sorts the rows
    lexicographically: 5 ms per call on [8, 4000] at V = 2000). A loop over batch rows, not tokens."""
    seen: dict[bytes, int] = {}
    B = arrays[0].shape[0]
    inverse = np.empty(B, dtype=np.int64)
    first = []
    for b in range(B):
        key = b"".join(np.ascontiguousarray(x[b]).tobytes() for x in arrays)
        if key not in seen:
            seen[key] = len(first)
            first.append(b)
        inverse[b] = seen[key]
    return np.asarray(first, dtype=np.int64), inverse
