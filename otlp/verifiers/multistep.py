"""Registration-ready multi-step (block) verifiers: BV and GBV as objects of the verifier zoo.

Unlike the single-token rules (``otlp.verifiers.base.Verifier``), a multi-step rule verifies a drafted block
of L tokens (or K such blocks) against the target's on-path conditionals and returns (tau, Y); its quality is
the block efficiency E[tau + 1] over explicit autoregressive table models (``otlp.multistep.ARModel``).

- ``BlockVerification`` ("bv", scheme "block"): one path a_{1:L} ~ q_L (K = 1), block verification of
  Sun et al. 2024b in the corrected form of papers/002 §3.2 (``otlp.multistep.bv``).  Its block efficiency
  sum_{a_{1:i} in V^{<=L}} min_{0<=k<=i} p(a_{k+1:i} | a_{1:k}) q(a_{1:k}) is the single-path LP optimum
  (papers/002 Thm 3.4, Eq. 83).
- ``GreedyBlockVerification`` ("gbv", scheme "block_multipath"): K i.i.d. paths, the tree-greedy selection
  by p/q and BV with the skewed draft q^Gamma (papers/002 §5, Eqs. 19-23; ``otlp.multistep.gbv``).
- ``OptimalBlockVerification`` ("optimal_block", scheme "block_multipath"): K i.i.d. paths, a greedy ranking
  drawn from the decomposition of Thm 4.6's q^Gamma*, BV with q^Gamma*; its block efficiency is the antichain-LP
  optimum (``otlp.multistep.optimal_rule``, ``otlp.multistep.optimal_block``).  It needs the full tables
  (off-path values): ``prepare(target, draft, L, K)`` precomputes the rule that ``sample`` takes.

Both objects have ``kind = "multistep"`` so that code iterating the registry can tell them from the
single-token rules (their ``make_draft`` refuses with a message pointing to ``otlp certify-block``).

Randomness: ``sample(..., generator)`` or, as serving engines pass it, ``sample(..., uniforms=u)`` with
``UNIFORM_COLUMNS`` uniforms per step (bv, gbv: ``[B, 2]``, tau's coin and the correction's uniform; optimal_block:
``[B, 3]``, the ranking's first): the same law, and the generator path draws the same numbers in the same order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from otlp.core.errors import InputError

if TYPE_CHECKING:
    import torch

    from otlp.multistep.bv import BlockOutput


class MultiStepVerifier:
    """Common interface of the multi-step rules.  Subclasses set ``name``, ``scheme``, ``fixed_paths``."""

    name: str = "multistep"
    scheme: str = "block"
    kind: str = "multistep"
    #: The number of drafted paths the rule is defined for, when fixed (BV: 1); None for any K >= 1.
    fixed_paths: int | None = None
    #: uniforms per step of ``sample(..., uniforms=[B, UNIFORM_COLUMNS])`` (module docstring)
    UNIFORM_COLUMNS: int = 2

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def checked_uniforms(self, uniforms: torch.Tensor | None, drafts: torch.Tensor) -> torch.Tensor | None:
        """The caller's ``uniforms [B, UNIFORM_COLUMNS]`` checked (shape, dtype, device; values in [0, 1) with
        validation on, :func:`otlp.verifiers.base.validation_enabled`) and clamped below 1."""
        from otlp.multistep.bv import check_block_uniforms
        from otlp.verifiers.base import validation_enabled

        return check_block_uniforms(uniforms, drafts.shape[0], self.UNIFORM_COLUMNS, drafts,
                                    values=validation_enabled())

    def check_K(self, K: object) -> int:
        """K validated against the rule: an integer >= 1, equal to ``fixed_paths`` when that is set."""
        from otlp.multistep.efficiency import check_K

        K = check_K(K)
        if self.fixed_paths is not None and K != self.fixed_paths:
            raise InputError(f"{self.name!r} verifies {self.fixed_paths} drafted path(s), got K = {K}; "
                             "use 'gbv' for K i.i.d. paths")
        return K

    def make_draft(self, q: object, n: int) -> object:
        """Refused: a multi-step rule has no single-token draft scheme (it lets ``certify_table`` skip it)."""
        raise InputError(f"{self.name!r} is a multi-step (block) rule with no single-token draft scheme; "
                         "certify it with otlp.multistep.certify.certify_multistep or `otlp certify-block`")

    def sample(self, drafts: torch.Tensor, p_paths: torch.Tensor, q_paths: torch.Tensor,
               generator: torch.Generator | None = None, *, uniforms: torch.Tensor | None = None) -> BlockOutput:
        raise NotImplementedError  # pragma: no cover - both subclasses implement it

    def block_efficiency(self, target: object, draft: object, L: int, K: int = 1) -> float:
        raise NotImplementedError  # pragma: no cover

    def output_law(self, target: object, draft: object, L: int, K: int = 1) -> np.ndarray:
        """R(a_{1:i}) on V^{<=L+1} (R[root] = 0), exact by enumeration of the drafted K-tuples of blocks
        (``otlp.multistep.output_law``).  # [num_nodes(V, L + 1)]"""
        from otlp.multistep.enumeration import output_law

        return output_law(self.name, target, draft, L, self.check_K(K))


class BlockVerification(MultiStepVerifier):
    """Block verification (BV) of one drafted block (papers/002 §3.2; Sun et al. 2024b).

    Examples
    --------
    >>> import numpy as np
    >>> from otlp.multistep import random_pair
    >>> target, draft = random_pair(2, 2, np.random.default_rng(0))
    >>> v = BlockVerification()
    >>> v.block_efficiency(target, draft, 2) <= 3.0
    True
    """

    name = "bv"
    scheme = "block"
    fixed_paths = 1

    def sample(self, drafts: torch.Tensor, p_path: torch.Tensor, q_path: torch.Tensor,
               generator: torch.Generator | None = None, *, uniforms: torch.Tensor | None = None) -> BlockOutput:
        """drafts int64 [B, L], p_path [B, L+1, V], q_path [B, L, V] -> BlockOutput (see ``otlp.multistep.bv.bv``);
        ``uniforms [B, 2]``: tau's coin and the correction's uniform instead of ``generator``."""
        from otlp.multistep.bv import bv

        return bv(drafts, p_path, q_path, generator, uniforms=self.checked_uniforms(uniforms, drafts))

    def block_efficiency(self, target: object, draft: object, L: int, K: int = 1) -> float:
        """E[tau + 1] = sum_{a_{1:i} in V^{<=L}} min_{0<=k<=i} p(a_{k+1:i} | a_{1:k}) q(a_{1:k}) (Eq. 83), exact."""
        from otlp.multistep.efficiency import bv_efficiency

        self.check_K(K)
        return bv_efficiency(target, draft, L)


class GreedyBlockVerification(MultiStepVerifier):
    """Greedy multi-path block verification (GBV) of K i.i.d. drafted blocks (papers/002 §5, Algorithm 1).

    For K = 1 it is exactly BV.
    """

    name = "gbv"
    scheme = "block_multipath"

    def sample(self, drafts: torch.Tensor, p_paths: torch.Tensor, q_paths: torch.Tensor,
               generator: torch.Generator | None = None, *, uniforms: torch.Tensor | None = None) -> BlockOutput:
        """drafts int64 [B, K, L], p_paths [B, K, L+1, V], q_paths [B, K, L, V] -> BlockOutput
        (see ``otlp.multistep.gbv.gbv``); ``uniforms [B, 2]`` instead of ``generator``."""
        from otlp.multistep.gbv import gbv

        return gbv(drafts, p_paths, q_paths, generator, uniforms=self.checked_uniforms(uniforms, drafts))

    def block_efficiency(self, target: object, draft: object, L: int, K: int = 1) -> float:
        """E[tau + 1] = sum_{a_{1:i}} min_{0<=k<=i} p(a_{k+1:i} | a_{1:k}) q^Gamma(a_{1:k}) with q^Gamma the
        greedy skewed draft of Eqs. 22-23, exact."""
        from otlp.multistep.efficiency import gbv_efficiency

        return gbv_efficiency(target, draft, L, self.check_K(K))


class OptimalBlockVerification(MultiStepVerifier):
    """The optimal K-path block verifier on table models (papers/002 Lemma 4.4, Thm 4.6); K = 1 gives BV."""

    name = "optimal_block"
    scheme = "block_multipath"
    UNIFORM_COLUMNS = 3

    def prepare(self, target: object, draft: object, L: int, K: int = 1) -> object:
        """The precomputed rule (``otlp.multistep.optimal_rule.OptimalKPathRule``): an LP solve and a
        decomposition, refused above ``MAX_PATHS`` paths."""
        from otlp.multistep.optimal_rule import optimal_k_path_rule

        return optimal_k_path_rule(target, draft, L, self.check_K(K))

    def sample(self, drafts: torch.Tensor, p_paths: torch.Tensor, q_paths: torch.Tensor,
               generator: torch.Generator | None = None, *, rule: object = None,
               uniforms: torch.Tensor | None = None) -> BlockOutput:
        """drafts int64 [B, K, L], p_paths [B, K, L+1, V]; ``rule`` from :meth:`prepare` (q_paths is not used: the
        rule holds q^Gamma*); ``uniforms [B, 3]`` (the ranking's, tau's, the correction's) instead of
        ``generator``.  See ``otlp.multistep.optimal_block.optimal_block``."""
        from otlp.multistep.optimal_block import optimal_block
        from otlp.multistep.optimal_rule import OptimalKPathRule

        if rule is None:
            raise InputError("'optimal_block' needs rule=prepare(target, draft, L, K): it uses the full tables")
        tensors = rule.tensors(drafts.device) if isinstance(rule, OptimalKPathRule) else rule
        return optimal_block(drafts, p_paths, tensors, generator, uniforms=self.checked_uniforms(uniforms, drafts))

    def block_efficiency(self, target: object, draft: object, L: int, K: int = 1) -> float:
        """E[tau + 1] = Eq. 83 with the realised q^Gamma* = the antichain-LP optimum (Thm 4.3 = Thm 4.6)."""
        return self.prepare(target, draft, L, K).block_efficiency

    def output_law(self, target: object, draft: object, L: int, K: int = 1) -> np.ndarray:
        """R(a_{1:i}) on V^{<=L+1}: the selection law times BV's law per path.  # [num_nodes(V, L + 1)]"""
        return self.prepare(target, draft, L, K).output_law(target)


__all__ = ["BlockVerification", "GreedyBlockVerification", "MultiStepVerifier", "OptimalBlockVerification"]
