"""otlp.optimal: the production exact optimal-transport verifier for multi-draft speculative sampling.

``OptimalTransport(p, otlp.IID(q, n))`` gives alpha*, H*, the groups (blocks) of the psi records, one
water-filling class chain each (:mod:`.chains`), and the slice pi(· | omega), exact to float precision (design note
``exact-ot-design.md``); :func:`solve_batch` solves many (p, q) pairs together.
"""

from otlp.optimal.batch import sample_batch, slice_batch, solve_batch
from otlp.optimal.transport import Block, OptimalTransport, truncate_top_k

__all__ = ["Block", "OptimalTransport", "sample_batch", "slice_batch", "solve_batch", "truncate_top_k"]
