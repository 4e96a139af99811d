"""Batched torch samplers for the draft schemes of docs/ARCHITECTURE.md, one tree node per row.

``sample_drafts(scheme, q [B, V], n, generator) -> int64 [B, n]`` draws, for every row, one n-tuple with the
law of ``otlp.core.drafts.<Scheme>(q, n)``:
- ``iid``: n independent draws from q;
- ``without_replacement``: successive sampling without replacement (``torch.multinomial`` draws in order);
- ``greedy``: the top n-1 tokens of q (ties: lower id first), the last sampled from q on the remaining tokens;
- ``spechub``: n = 2, hub a = argmax q (lowest id on ties); x1 ~ q; the pair is (x1, a) if x1 != a, else
  (a, x2) with x2 ~ q on V minus a (SpecHub note §3.2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otlp.core.errors import InputError

if TYPE_CHECKING:
    import torch

SCHEMES = ("iid", "without_replacement", "greedy", "spechub")


def check_scheme(scheme: str, n: int) -> str:
    if scheme not in SCHEMES:
        raise InputError(f"unknown draft scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    if scheme == "spechub" and n != 2:
        raise InputError(f"the spechub draft scheme is defined for n = 2 drafts only (SpecHub §4), got n = {n}")
    return scheme


def sample_drafts(scheme: str, q: torch.Tensor, n: int, generator: torch.Generator | None = None
                  ) -> torch.Tensor:
    """One drafted n-tuple per row of ``q [B, V]``: int64 [B, n]."""
    import torch

    if n == 1 or scheme == "iid":  # every scheme with one draft is a plain sample from q
        return torch.multinomial(q, n, replacement=True, generator=generator)
    if scheme == "without_replacement":
        support = (q > 0).sum(dim=-1)
        if bool((support < n).any()):
            raise InputError(f"drafting {n} tokens without replacement needs at least {n} tokens with q > 0 "
                             f"at every node; got {int(support.min())} (raise top-k / top-p on the draft)")
        return torch.multinomial(q, n, replacement=False, generator=generator)
    if scheme == "greedy":
        top = torch.sort(q, dim=-1, descending=True, stable=True).indices[:, : n - 1]  # [B, n-1]
        rest = q.scatter(1, top, 0.0)
        if bool((rest.sum(dim=-1) <= 0).any()):
            raise InputError(f"greedy drafting needs q mass outside the top {n - 1} tokens at every node")
        last = torch.multinomial(rest, 1, generator=generator)
        return torch.cat([top, last], dim=1)
    if scheme == "spechub":
        check_scheme(scheme, n)
        hub = torch.argmax(q, dim=-1, keepdim=True)  # [B, 1], first maximal index
        others = q.scatter(1, hub, 0.0)
        if bool((others.sum(dim=-1) <= 0).any()):
            raise InputError("spechub drafting needs two tokens with q > 0 at every node (q is a point mass)")
        x1 = torch.multinomial(q, 1, generator=generator)
        x2 = torch.multinomial(others, 1, generator=generator)
        is_hub = x1 == hub
        return torch.cat([x1, torch.where(is_hub, x2, hub)], dim=1)
    raise InputError(f"unknown draft scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
