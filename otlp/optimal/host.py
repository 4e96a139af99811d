"""The host route of the class-chain rule: each step in its C kernel (:mod:`otlp.backend.native`) where the kernels are
built, else the reference (:mod:`.chains`), on numpy arrays. The one place where the rule chooses between the two.

:mod:`.chains` is the definition (numpy and torch, no C); every function here takes and returns what its namesake
there does, with the same values: bit for bit (:func:`prefix`, :func:`slot_mass`, :func:`served_group`,
:func:`sample`), or to rounding where the kernel's order of operations differs (:func:`window_hazards`: its roots
start from their neighbour's; :func:`tuple_rule`'s pieces: the C library's exp and expm1), as
tests/backend/test_native.py pins them. Torch tensors, a build without a compiler and ``OTLP_NATIVE=0`` all take the
reference. The callers on the host (:class:`~otlp.optimal.OptimalTransport`, :func:`~otlp.optimal.solve_batch`, the CPU
route of ``get("optimal")``, its bucketed route's numpy form) call these; the device route calls :mod:`.chains` itself.
"""

from __future__ import annotations

import numpy as np

from otlp.backend import native
from otlp.core import xp as X
from otlp.optimal import chains as C


def prefix(P, Q, n: int, order=None, *, reuse: bool = False) -> C.Prefix:  # noqa: ANN001 - [B, V] arrays
    """:func:`.chains.prefix` (``order``: the rows' :func:`.chains.ratio_order`, if the caller has it) through
    ``otlp_prefix`` (two passes a row, the same bits). ``reuse`` (numpy, with the kernels): the arrays may be this
    thread's work buffers (:func:`otlp.backend.native.prefix`), valid until the next ``prefix(..., reuse=True)``: for a
    caller that is done with the result by then (the CPU sampler)."""
    if not X.is_numpy(P) or native.library() is None:
        return C.prefix(P, Q, n, order)
    order = C.ratio_order(P, Q) if order is None else order  # [B, V]
    got = native.prefix(P, Q, order, n, reuse)
    return C.prefix(P, Q, n, order) if got is None else C.sorted_prefix(n, order, *got)


def slot_mass(H, L, r_below, gap, n: int, steps: int | None = None):  # noqa: ANN001, ANN201
    """:func:`.chains.slot_mass` through ``otlp_slot_mass`` at 3 <= n <= ``native.SLOT_MASS_MAX_N`` on numpy arrays
    (the same bounds and Newton steps per entry: the same bits); the closed forms of n <= 2 and everything else by
    the reference."""
    if X.is_numpy(H):
        y = native.slot_mass(H, L, r_below, gap, n, 200 if steps is None else steps)
        if y is not None:
            return y
    return C.slot_mass(H, L, r_below, gap, n, steps)


def build(P, Q, n: int, *, newton_steps: int | None = C.NEWTON_STEPS) -> C.Chains:  # noqa: ANN001 - [B, V] arrays
    """:func:`.chains.build` with :func:`prefix` and :func:`slot_mass` (the rest is numpy)."""
    return C.build(P, Q, n, newton_steps=newton_steps, pre=prefix(P, Q, n), roots=slot_mass)


def served_group(pre: C.Prefix, w):  # noqa: ANN001, ANN201
    """:func:`.chains.served_group` through ``otlp_served_group`` (the same comparisons: the same positions)."""
    got = native.served_group(pre, w) if X.is_numpy(pre.psi) else None
    return C.served_group(pre, w) if got is None else got


def window_hazards(pre: C.Prefix, pos, top, s, e, steps: int | None):  # noqa: ANN001, ANN201 - numpy
    """:func:`.chains.window_hazards` through ``otlp_window_chain`` (one pass a row; at n >= 3 its roots start from
    their neighbour's, so equal to rounding) where n <= ``native.SLOT_MASS_MAX_N``, else the reference with
    :func:`slot_mass`."""
    got = native.window_chain(pre, s, e, top, pos, 200 if steps is None else steps)
    if got is not None:
        return got
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        return C.window_hazards(pre, pos, top, s, e, steps, roots=slot_mass)


def tuple_rule(pre: C.Prefix, w, *, window: int | str | None = None, steps: int | None = C.NEWTON_STEPS,  # noqa: ANN001, ANN201
               group: tuple | None = None):
    """:func:`.chains.tuple_rule` with :func:`served_group` and, for ``window="auto"``, :func:`window_hazards` and
    ``otlp_pieces`` (the C library's exp and expm1: equal to rounding); other windows by the reference with
    :func:`slot_mass`."""
    if not X.is_numpy(pre.psi):
        return C.tuple_rule(pre, w, window=window, steps=steps, group=group)
    group = served_group(pre, w) if group is None else group
    if window != "auto":
        return C.tuple_rule(pre, w, window=window, steps=steps, group=group, roots=slot_mass)
    pos, top, s, e = group
    cum, cum_c, beta = window_hazards(pre, pos, top, s, e, steps)  # [B, n], [B, n], [B]
    got = native.pieces(w, pos, s, cum, cum_c, beta)
    if got is not None:
        return got
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        return C._pieces(np, w, pos, pos >= s, cum, cum_c, beta)


def sample(pre: C.Prefix, accept, reject, w, u):  # noqa: ANN001, ANN201
    """:func:`.chains.sample` through ``otlp_sample`` (the same operations: the same tokens)."""
    got = native.sample(pre, accept, reject, w, u) if X.is_numpy(accept) else None
    return C.sample(pre, accept, reject, w, u) if got is None else got
