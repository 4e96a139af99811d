"""The optimal verification rule, plugged into the verifier interface from ``otlp.optimal`` (GR; exact-OT design
note): pi(. | omega) reaches alpha* = 1 + min_H psi(H) for its draft scheme.

i.i.d. drafts take ``otlp.optimal``'s class-chain rule; any other enumerable scheme takes its
relaxed-LP route (small V) for the exact quantities (``conditional``, ``acceptance``) and for ``sample_exact``.

The torch sampler implements the i.i.d. rule only (``torch_schemes = ("iid",)``), on the tensors' device
(:mod:`otlp.optimal.sampler`: the class chains of :mod:`otlp.optimal.chains`, no host synchronisation on an
accelerator). The torch interface carries no scheme, so drafts from another scheme (independent, without
replacement, greedy, SpecHub, joint) would get the i.i.d. plan and a wrong output law; it refuses what it can see (a
per-draft ``q [B, n, V]``), and for other schemes use ``sample_exact`` / ``OptimalTransport(p, draft).sample``.
"""

from __future__ import annotations

import numpy as np

from otlp.core.drafts import IID, DraftScheme
from otlp.core.errors import InputError
from otlp.verifiers.base import Verifier, check_tensors, check_uniforms, validation_enabled


class Optimal(Verifier):
    """The optimal transport (acceptance alpha*)."""

    name = "optimal"
    scheme = "iid"
    compatible_schemes = ("independent", "without_replacement", "greedy", "spechub", "joint")
    torch_schemes = ("iid",)  # sample() solves the i.i.d. instance (p, q, n) whatever scheme drew the drafts

    def make_draft(self, q: object, n: int) -> DraftScheme:
        return IID(q, n)

    def transport(self, p: object, draft: DraftScheme):  # noqa: ANN201
        """``otlp.optimal.OptimalTransport(p, draft)`` after the verifier's input checks.

        The last one is kept on the instance and reused for the same draft object and an equal p: ``conditional``
        is called chunk by chunk over the support and ``certify`` also asks for ``acceptance`` and
        ``sample_exact``, and the LP route costs seconds per build at a few thousand tuples."""
        from otlp.optimal import OptimalTransport

        p, draft = self.check_draft(p, draft)
        last = getattr(self, "_last_transport", None)
        if last is not None and last[1] is draft and np.array_equal(last[0], p):
            return last[2]
        ot = OptimalTransport(p, draft)
        self._last_transport = (p.copy(), draft, ot)
        return ot

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ot = self.transport(p, draft)
        _, reject = ot.rule(omegas)
        return ot.slices(omegas), 1.0 - reject

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        """The rule's accepted mass sum_i R_i; the residual lives outside H*, never on a draft of an inner tuple."""
        return float(self.transport(p, draft).acceptance())

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        return self.acceptance(p, draft)

    def sample_exact(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray, rng: np.random.Generator,
                     max_cells: int = 1 << 23) -> tuple[np.ndarray, np.ndarray]:
        """Exact numpy sampler for every compatible scheme: one ``OptimalTransport(p, draft)`` for all tuples,
        ``tokens = ot.sample(omegas, rng)``, ``rule_accepts = 1 - reject`` of ``ot.rule(omegas)``. ``omegas int
        [M, n]`` -> ``(tokens int64 [M], rule_accepts float64 [M])``; ``max_cells`` is unused (no [M, V] array)."""
        ot = self.transport(p, draft)
        tokens = ot.sample(omegas, rng)  # [M]
        _, reject = ot.rule(omegas)  # [M]
        return tokens, 1.0 - reject

    def sample(self, p, q, drafts, generator=None, *, uniforms=None, validate=None,  # noqa: ANN001, ANN201
               widths=None, compile: bool = False, graphs: bool = False,  # noqa: A002 - torch.compile's name
               backend: str = "auto"):
        """The i.i.d. optimal rule on a batch, on the tensors' device (:func:`otlp.optimal.sampler.verify`):
        ``p [B, V]``, ``q [B, V]`` (any float dtype; rows are normalised in float64), ``drafts [B, n]`` drawn i.i.d.
        from q -> ``(tokens [B], accepted_index [B])``. The randomness is ``uniforms [B, 2]`` in [0, 1) when given
        (as serving engines supply it: no hidden state, replays bit for bit), else two uniforms per row from
        ``generator``. Exact only for i.i.d. drafts (module docstring); a per-draft ``q [B, n, V]`` is refused.
        ``validate``: as :func:`otlp.verifiers.base.check_tensors`. ``widths int64 [B]`` (optional): row b drew only
        its first ``widths[b]`` drafts (1..n; a tree node with fewer children), the other slots are padding, and the
        row is verified with the rule for n = widths[b] (one call for a whole tree depth, no re-shape per width;
        its values are checked unless validation is off). ``compile=True``: the device route through
        ``torch.compile`` (:func:`otlp.optimal.sampler.verify`; the first call of each shape compiles).
        ``graphs=True`` (CUDA tensors): the rule replayed from a CUDA graph captured per shape (the same tokens,
        without the launch overhead of its few hundred kernels; :mod:`otlp.backend.cuda_graphs`). ``backend``:
        ``"auto"`` (on CUDA tensors where Triton imports, the bucket rule with Triton kernels, else the torch ops on
        the device or the host's route on CPU tensors), ``"torch"`` or ``"triton"``
        (:func:`otlp.optimal.sampler.verify`)."""
        import torch

        from otlp.optimal.sampler import verify

        totals: list = []  # the value check's float64 row sums, when it took them on the host: normalised by them
        uniforms = iid_batch_uniforms(self.name, p, q, drafts, generator, uniforms, validate, totals)
        if widths is not None:
            _check_widths(widths, drafts, validation_enabled() if validate is None else validate)
        if p.shape[0] == 0:  # an empty batch: nothing to verify
            empty = torch.zeros(0, dtype=torch.long, device=p.device)
            return empty, empty.clone()
        return verify(p, q, drafts.long(), uniforms, widths=widths, compile=compile, totals=totals, graphs=graphs,
                      backend=backend)


def _check_widths(widths, drafts, values: bool) -> None:  # noqa: ANN001 - torch tensors
    """``widths``: an integer tensor [B] on the drafts' device; with ``values`` (a host read) each in 1..n."""
    import torch

    B, n = drafts.shape
    if not isinstance(widths, torch.Tensor) or tuple(widths.shape) != (B,) or widths.is_floating_point() \
            or widths.dtype == torch.bool or widths.device != drafts.device:
        raise InputError(f"widths must be an integer tensor of shape [{B}] on {drafts.device} (the number of valid "
                         f"drafts per row), got {getattr(widths, 'shape', type(widths).__name__)}")
    if values and B and bool(((widths < 1) | (widths > n)).any()):
        raise InputError(f"widths must be between 1 and n = {n} (the drafts per row), got values in "
                         f"[{int(widths.min())}, {int(widths.max())}]")


def iid_batch_uniforms(name: str, p, q, drafts, generator, uniforms, validate, totals=None):  # noqa: ANN001, ANN201
    """The input side shared by the i.i.d. torch samplers (``optimal``, ``optimal_paths``): a per-draft
    ``q [B, n, V]`` is refused (the rules are for i.i.d. drafts), the tensors are checked (``check_tensors`` with
    ``validate``), and the randomness is the caller's ``uniforms [B, 2]`` (checked: floating point, on p's device)
    or two uniforms per row drawn from ``generator``; with validation on, caller uniforms outside [0, 1) (or NaN)
    are refused (with it off, :func:`otlp.optimal.sampler.guard` clamps them). Returns the uniforms; ``totals`` as
    for ``check_tensors``."""
    import torch

    if isinstance(q, torch.Tensor) and q.ndim == 3:
        raise InputError(
            f"the {name} torch sampler implements the i.i.d. rule only (q of shape [B, V]), got q of shape "
            f"{tuple(q.shape)}; for other draft schemes use get({name!r}).sample_exact(p, draft, omegas, rng)")
    B, n, V = check_tensors(p, q, drafts, validate=validate, totals=totals)
    if uniforms is None:
        return torch.rand((B, 2), generator=generator, device=p.device, dtype=torch.float64)
    return check_uniforms(uniforms, B, p, validate)
