"""SpecHub verification for n = 2 (SpecHub paper Alg. 2/3), the CORRECTED rule of SpecHub note §3.3.

Hub a = argmax q (lowest id on ties), Z = sum_{x != a} q(x) (summed, not 1 - q(a): note pitfall 2),
row(x) = Q(a, x) = q(a) q(x) / Z, column Q(x, a) = q(x). For x != a:
    p1(x) = (p(x) - q(x))^+,  L1(x) = (q(x) - p(x))^+,  p1(a) = p(a), L1(a) = 0          (GetResidual #1)
    p2(x) = (p1(x) - row(x))^+, L2(x) = (row(x) - p1(x))^+, p2(a) = L2(a) = 0            (GetResidual #2)
    S1 = sum L1, S2 = sum L2, pa_rem = (p(a) - S2)^+   -- ALWAYS computed: the paper's Alg. 3 computes it only
                                                          when x1 = a, which over-generates a (note §3.3).
Pair (x, a): accept x with prob min(1, p(x)/q(x)); else accept a with prob min(1, pa_rem / S1); else residual.
Pair (a, x): accept x with prob min(1, p1(x)/row(x)); else accept a with prob min(1, p(a) / S2); else residual.
Residual: norm(p2), p2(x) = (p(x) - q(x)/Z)^+ for x != a, p2(a) = 0.
Closed form (note §2.4, derived): alpha_SH = p(a) + sum_{x != a} min(p(x), q(x) / Z); the residual lives where both
tests accept with probability 1, so acceptance == verifier acceptance.
"""

from __future__ import annotations

import numpy as np

from otlp.core import xp as X
from otlp.core.drafts import DraftScheme, SpecHub
from otlp.verifiers.base import (
    Verifier,
    accept_probability,
    check_tensors,
    check_uniforms,
    coins,
    gather,
    normalize_or,
    pick_outcome,
    sample_categorical,
)


def hub_parts(p, q) -> dict:  # noqa: ANN001 - numpy arrays or torch tensors [B, V]
    """The quantities of the corrected rule (module docstring) for each row of ``p, q [B, V]`` (numpy or torch, on
    the tensors' device): ``a [B, 1]`` the hub, ``z, s1, s2, pa_rem [B]``, ``row, p1, p2 [B, V]``."""
    xp = X.namespace(q)
    a = X.argmax_rows(q)[:, None]  # [B, 1] first maximum = lowest id
    others = X.arange_like(q, q.shape[-1])[None, :] != a  # [B, V]
    q_others = xp.where(others, q, 0.0)  # [B, V]
    z = q_others.sum(-1)  # [B] summed, not 1 - q(a)
    z_pos = (z > 0)[:, None]
    # q(x) / z <= 1 off the hub (the hub's q(a) / z would overflow for a subnormal z)
    row = xp.where(z_pos, X.take(q, a) * (q_others / xp.where(z_pos, z[:, None], 1.0)), 0.0)
    p1 = xp.where(others, X.maximum(p - q, 0.0), p)
    s1 = xp.where(others, X.maximum(q - p, 0.0), 0.0).sum(-1)
    p2 = xp.where(others, X.maximum(p1 - row, 0.0), 0.0)
    s2 = xp.where(others, X.maximum(row - p1, 0.0), 0.0).sum(-1)
    pa_rem = X.maximum(X.take(p, a)[:, 0] - s2, 0.0)
    return {"a": a, "z": z, "row": row, "p1": p1, "p2": p2, "s1": s1, "s2": s2, "pa_rem": pa_rem}


def hub_parts_numpy(p: np.ndarray, q: np.ndarray) -> dict[str, np.ndarray | float | int]:
    """:func:`hub_parts` for one (p, q) ``[V]``: the hub ``a`` an int, the sums floats, the rows ``[V]``."""
    h = hub_parts(p[None, :], q[None, :])
    return {"a": int(h["a"][0, 0]), "z": float(h["z"][0]), "row": h["row"][0], "p1": h["p1"][0],
            "p2": h["p2"][0], "s1": float(h["s1"][0]), "s2": float(h["s2"][0]), "pa_rem": float(h["pa_rem"][0])}


class SpecHubVerifier(Verifier):
    """The unbiased SpecHub rule (n = 2, hub draft scheme)."""

    name = "spechub"
    scheme = "spechub"
    fixed_n = 2

    def make_draft(self, q: object, n: int = 2) -> DraftScheme:
        return SpecHub(q, n)

    def sample(self, p, q, drafts, generator=None, *, uniforms=None):  # noqa: ANN001, ANN201
        """``(tokens [B], accepted_index [B])``; randomness from ``generator`` or the caller's ``uniforms [B, 2]``:
        the coin picks the non-hub draft (the draft test's probability d), else the hub ((1 - d) times the hub
        test's), else the residual, drawn with the second uniform."""
        import torch

        B, n, V = check_tensors(p, q, drafts, fixed_n=2)
        h = hub_parts(p, q)
        a, row, p1, p2, s1, s2, pa_rem = (h[k] for k in ("a", "row", "p1", "p2", "s1", "s2", "pa_rem"))
        a = a[:, 0]  # [B]
        pa = gather(p, a)
        x1, x2 = drafts[:, 0], drafts[:, 1]
        column_pair = (x2 == a) & (x1 != a)  # (x, a)
        row_pair = (x1 == a) & (x2 != a)  # (a, x)
        if uniforms is not None:
            u = check_uniforms(uniforms, B, p)
            d = torch.where(column_pair, accept_probability(gather(p, x1), gather(q, x1)),
                            torch.where(row_pair, accept_probability(gather(p1, x2), gather(row, x2)), 0.0))
            hub = torch.where(column_pair, accept_probability(pa_rem, s1),
                              torch.where(row_pair, accept_probability(pa, s2), 0.0))
            outcome = pick_outcome(torch.stack([d, (1.0 - d) * hub], dim=1), u[:, 0])  # 0: non-hub, 1: hub
            non_hub = torch.where(column_pair, torch.zeros_like(x1), torch.ones_like(x1))  # its position
            index = torch.where(outcome == 0, non_hub, torch.where(outcome == 1, 1 - non_hub, -1))
            residual = X.inverse_cdf(p2, u[:, 1:].to(p2.dtype), fallback=p)
            chosen = drafts.gather(1, index.clamp(min=0)[:, None])[:, 0]
            return torch.where(index >= 0, chosen, residual).long(), index.long()
        u = coins(B, 2, p, generator)  # [B, 2]: the draft test, then the hub test
        take_x1 = column_pair & (u[:, 0] * gather(q, x1) < gather(p, x1))
        take_x2 = row_pair & (u[:, 0] * gather(row, x2) < gather(p1, x2))  # non-hub x2 is tested first
        hub_first = row_pair & ~take_x2 & (u[:, 1] * s2 < pa)
        hub_second = column_pair & ~take_x1 & (u[:, 1] * s1 < pa_rem)
        first = take_x1 | hub_first
        second = take_x2 | hub_second
        residual = sample_categorical(p2, generator, fallback=p)  # p2: a fresh [B, V], unnormalised
        tokens = torch.where(first, x1, torch.where(second, x2, residual))
        index = torch.where(first, torch.zeros_like(x1), torch.where(second, torch.ones_like(x1),
                                                                      torch.full_like(x1, -1)))
        return tokens.long(), index.long()

    def conditional(self, p: np.ndarray, draft: DraftScheme, omegas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = hub_parts_numpy(p, draft.q)
        a, q = h["a"], draft.q
        M, V = omegas.shape[0], p.size
        rows = np.arange(M)
        x1, x2 = omegas[:, 0], omegas[:, 1]
        column_pair = (x2 == a) & (x1 != a)
        row_pair = (x1 == a) & (x2 != a)
        draft_test = np.where(column_pair, accept_probability(p[x1], q[x1]),
                              np.where(row_pair, accept_probability(h["p1"][x2], h["row"][x2]), 0.0))
        hub_test = np.where(column_pair, accept_probability(h["pa_rem"], h["s1"]),
                            np.where(row_pair, accept_probability(p[a], h["s2"]), 0.0))
        non_hub = np.where(column_pair, x1, x2)
        law = np.zeros((M, V))
        np.add.at(law, (rows, non_hub), draft_test)
        law[:, a] += (1.0 - draft_test) * hub_test
        rejected = (1.0 - draft_test) * (1.0 - hub_test)
        law += rejected[:, None] * normalize_or(h["p2"], p)[None, :]
        return law, 1.0 - rejected

    def verifier_acceptance(self, p: object, draft: DraftScheme) -> float:
        """alpha_SH = p(a) + sum_{x != a} min(p(x), q(x) / Z)."""
        p, draft = self.check_draft(p, draft)
        h = hub_parts_numpy(p, draft.q)
        others = np.arange(p.size) != h["a"]
        if h["z"] <= 0:  # q is a point mass on the hub: the second draft never differs
            return float(p[h["a"]])
        return float(p[h["a"]] + np.minimum(p, np.where(others, draft.q, 0.0) / h["z"])[others].sum())

    def acceptance(self, p: object, draft: DraftScheme) -> float:
        return self.verifier_acceptance(p, draft)
