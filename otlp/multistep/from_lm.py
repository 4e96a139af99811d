"""Small ARModel pairs projected from real language models (e.g. the decode loop's n-gram pair).

Given a target LM p and a draft LM q over a large vocabulary, a real context c (a prompt), a vocabulary size V
and a depth d, the projection keeps the V tokens S = {s_1..s_V} with the most target mass p(. | c) (ties by
token id) and tabulates, for every prefix a_{1:i} in S^{<=d} (node numbering of ``otlp.multistep.armodel``),

    p_S(x | a_{1:i}) = p(x | c a_{1:i}) / sum_{y in S} p(y | c a_{1:i}),   x in S        (same for q),

i.e. each conditional of the real model restricted to S and renormalised.  The result is a projection of the
real models onto V tokens, not the real models: mass outside S is dropped at every node.  Each node's law is
the real model's law conditioned on the next token lying in S, so the tables keep the real models' shape
(which tokens the draft over- or under-weights, how the target's law moves with the prefix).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.multistep.armodel import MAX_NODES, ARModel, all_paths, num_nodes


def _next_token_probs(model: object, prefixes: list[list[int]]) -> np.ndarray:
    """softmax of ``model.next_token_logits(prefixes)``: float64 [B, vocab]."""
    logits = model.next_token_logits(prefixes)  # type: ignore[attr-defined]  # [B, vocab]
    return torch.softmax(torch.as_tensor(logits, dtype=torch.float64), dim=-1).numpy()


def top_tokens(target: object, context: Sequence[int], V: int) -> np.ndarray:
    """The V token ids of largest target probability p(. | context), most probable first.  # [V]"""
    probs = _next_token_probs(target, [list(context)])[0]  # [vocab]
    if V > probs.size:
        raise InputError(f"V = {V} exceeds the model's vocabulary size {probs.size}")
    order = np.lexsort((np.arange(probs.size), -probs))  # descending probability, ties by id
    return order[:V].astype(np.int64)


def projected_table(model: object, context: Sequence[int], tokens: np.ndarray, depth: int,
                    name: str = "projected") -> ARModel:
    """The ARModel over ``tokens`` (V ids) of depth ``depth``: row n is model(. | context + path(n)) restricted
    to ``tokens`` and renormalised (module docstring).  One batched model call for all num_nodes(V, depth) rows."""
    tokens = np.asarray(tokens, dtype=np.int64)
    V = int(tokens.size)
    n = num_nodes(V, depth)
    if n * V > MAX_NODES:
        raise ModelTooLargeError(f"a projected ARModel with V={V}, depth={depth}", n * V * 8, MAX_NODES * 8,
                                 hint="project onto fewer tokens or a smaller depth")
    base = [int(t) for t in context]
    prefixes = [base] + [base + tokens[path].tolist() for i in range(1, depth + 1) for path in all_paths(V, i)]
    probs = _next_token_probs(model, prefixes)[:, tokens]  # [n, V]
    mass = probs.sum(1, keepdims=True)  # [n, 1]
    if np.any(mass <= 0) or not np.all(np.isfinite(mass)):
        raise InputError(f"{name}: the model gives zero mass to the tokens {tokens.tolist()} after some prefix; "
                         "the projection needs positive mass at every node")
    return ARModel(probs / mass, V, name=name)


def projected_pair(target: object, draft: object, context: Sequence[int], V: int, depth: int,
                   tokens: np.ndarray | None = None) -> tuple[ARModel, ARModel, np.ndarray]:
    """(target table, draft table, token ids): both LMs projected onto the same V tokens after ``context``.

    ``target`` / ``draft`` follow the ``otlp.decode.models.LanguageModel`` protocol (``next_token_logits``).
    ``tokens`` defaults to :func:`top_tokens` of the target at ``context``.  For block length L use depth = L
    (the target needs depth L; the draft L - 1 suffices but the same depth keeps the pair symmetric).
    """
    if isinstance(V, bool) or not isinstance(V, (int, np.integer)) or V < 2:
        raise InputError(f"V must be an integer >= 2, got {V!r}")
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise InputError(f"depth must be an integer >= 0, got {depth!r}")
    if len(context) == 0:
        raise InputError("context must hold at least one token (e.g. the BOS id)")
    if tokens is None:
        tokens = top_tokens(target, context, int(V))
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.shape != (int(V),) or np.unique(tokens).size != tokens.size:
        raise InputError(f"tokens must be {V} distinct ids, got {tokens.tolist()}")
    p = projected_table(target, context, tokens, int(depth), name="projected target")
    q = projected_table(draft, context, tokens, int(depth), name="projected draft")
    return p, q, tokens
