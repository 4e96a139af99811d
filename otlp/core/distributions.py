"""Probability vectors: validation, logits -> probabilities, and loading from the CLI.

Every public entry point of otlp passes user vectors through :func:`check_distribution`, so a negative entry,
a NaN, a wrong length or a sum away from 1 is reported once, clearly, before any solver runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

import numpy as np

from otlp.core import xp as X
from otlp.core.errors import InputError

SUM_TOLERANCE = 1e-9


def check_distribution(
    x: object,
    name: str = "p",
    *,
    size: int | None = None,
    renormalize: bool = False,
    atol: float = SUM_TOLERANCE,
) -> np.ndarray:
    """Validate a probability vector and return it as a fresh float64 array.

    Parameters
    ----------
    x : array-like of shape [V]
    name : what to call it in error messages ("p", "q", "q[1]").
    size : expected length V, if known.
    renormalize : divide by the sum instead of refusing a sum away from 1 (only when the user asks).
    atol : allowed |sum - 1|.

    Raises
    ------
    InputError : not numbers (booleans, strings, a ``range`` or a generator included), ragged, not 1-D, empty,
        non-finite, negative, wrong length, or not summing to 1 within ``atol``.
    """
    arr = as_real_array(x, name, "a probability vector")
    if arr.ndim != 1:
        raise InputError(f"{name} must be a 1-D probability vector, got shape {arr.shape}")
    if arr.size == 0:
        raise InputError(f"{name} is empty; expected a probability vector of length V >= 1")
    if size is not None and arr.size != size:
        raise InputError(f"{name} has length {arr.size}, expected {size} (the vocabulary size V)")
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing or inf - inf sum is reported below
        total = float(arr.sum())
    if not (arr.min() >= 0 and np.isfinite(total)):  # two reductions on the valid path; NaN fails the first
        if not np.all(np.isfinite(arr)):
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise InputError(f"{name}[{bad}] = {arr[bad]} is not finite; probabilities must be finite numbers")
        bad = int(np.argmin(arr))
        if arr[bad] < 0:
            raise InputError(f"{name}[{bad}] = {arr[bad]:.3g} is negative; probabilities must be >= 0")
        raise InputError(f"{name} sums to {total}: the entries are finite but their sum overflows")
    if renormalize:
        if total <= 0:
            raise InputError(f"{name} sums to {total}; cannot renormalise a vector with no mass")
        return arr / total
    if abs(total - 1.0) > atol:
        raise InputError(
            f"{name} sums to {total!r}, expected 1 within {atol:g} (pass renormalize=True / --renormalize "
            "to divide by the sum)"
        )
    return arr


#: numpy dtype kinds that hold real numbers (bool 'b', strings 'U'/'S', objects 'O', complex 'c' are refused)
_REAL_KINDS = "iuf"


def as_real_array(x: object, name: str, expected: str = "an array of numbers") -> np.ndarray:
    """``x`` as a float64 array, if it holds real numbers only; ``InputError`` naming ``name`` otherwise.

    Accepted: numpy arrays of integer or float dtype, lists / tuples (nested for more axes) of ints and floats,
    and objects with ``__array__`` (torch tensors). Refused, with what was expected: booleans (``[True, False]``
    would otherwise read as 1, 0), strings (``["0.5", "0.5"]`` would otherwise be parsed), complex numbers,
    ragged lists, and other iterables (``range``, generators, sets, dicts), which are not vectors of values.
    """
    if isinstance(x, (bool, np.bool_, str, bytes)) or (not isinstance(x, (np.ndarray, list, tuple, np.generic))
            and not hasattr(x, "__array__")):
        raise InputError(f"{name} must be {expected} (a list or array of numbers), got {type(x).__name__}")
    if isinstance(x, (list, tuple)) and _has_non_real(x):
        raise InputError(f"{name} must be {expected} of numbers; it holds a boolean, string or other non-number")
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be {expected} of numbers with equal-length rows: "
                         f"{' '.join(str(exc).split())[:120]}") from None
    if raw.dtype.kind not in _REAL_KINDS:
        raise InputError(f"{name} must be {expected} of real numbers, got dtype {raw.dtype} "
                         "(booleans, strings, complex and object arrays are refused)")
    return np.array(raw, dtype=np.float64)


def _has_non_real(values: list | tuple) -> bool:
    """Whether a (nested) list holds something other than an int or float (bools and strings included)."""
    for v in values:
        if isinstance(v, (list, tuple)):
            if _has_non_real(v):
                return True
        elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            return True
    return False


def check_token_tuples(omegas: object, n: int, V: int, rows: int | None = None, name: str = "drafted tuples"
                       ) -> np.ndarray:
    """Drafted tuples as ``int64 [M, n]`` with token ids in [0, V) (``rows``: M, when fixed); ``InputError``
    otherwise, ragged lists and boolean / float / string entries included. A single tuple ``[n]`` is read as
    ``[1, n]``."""
    if isinstance(omegas, (list, tuple)) and _has_non_real(omegas):
        raise InputError(f"{name} must be integer token ids; got a boolean, string or other non-number")
    try:
        w = np.asarray(omegas)
    except (TypeError, ValueError):
        raise InputError(f"{name} must have shape [M, n] with n = {n}; got rows of different lengths") from None
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2 or w.shape[1] != n or (rows is not None and w.shape[0] != rows):
        raise InputError(f"{name} must have shape [{'M' if rows is None else rows}, n] with n = {n}, "
                         f"got {w.shape}")
    if w.dtype.kind not in "iu":
        raise InputError(f"{name} must be integer token ids, got dtype {w.dtype}")
    if w.size and (w.min() < 0 or w.max() >= V):
        raise InputError(f"{name}: token ids must lie in [0, {V}), got range [{w.min()}, {w.max()}]")
    return w.astype(np.int64, copy=False)


def as_generator(seed: object, name: str = "rng") -> np.random.Generator:
    """A ``numpy.random.Generator`` from a Generator (returned as is), an integer seed >= 0, or None (fresh OS
    entropy: irreproducible, as the caller asked). ``InputError`` for anything else (a bool, a negative seed)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(check_int(seed, f"{name} (a seed)", 0))


def check_int(value: object, name: str, minimum: int) -> int:
    """``value`` validated: an integer (not a bool) >= ``minimum``; ``InputError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_n(n: object, name: str = "n") -> int:
    """Validate a number of drafts: an integer >= 1."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise InputError(f"{name} must be an integer >= 1, got {n!r}")
    if n < 1:
        raise InputError(f"{name} must be >= 1 (the number of drafted tokens), got {n}")
    return int(n)


def keep_top_k(q: np.ndarray, k: int) -> np.ndarray:
    """Each row of ``q [..., V]`` restricted to its k largest entries (ties: the lower token id), the others set to
    0, not renormalised: a new array (GR App. N's top-k draft before renormalisation; callers validate k and
    normalise as their inputs need)."""
    if k >= q.shape[-1]:
        return q.copy()
    keep = np.argsort(-q, axis=-1, kind="stable")[..., :k]  # [..., k]
    out = np.zeros_like(q)
    np.put_along_axis(out, keep, np.take_along_axis(q, keep, axis=-1), axis=-1)
    return out


def probabilities_from_logits(
    logits: object,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> np.ndarray:
    """Softmax of ``logits / temperature`` after top-k and top-p (nucleus) filtering, over the last axis.

    Works on numpy arrays and on torch tensors (the result has the input's type and device).
    ``temperature == 0`` gives the one-hot argmax (greedy). Top-k keeps the k largest logits; top-p keeps the
    smallest prefix of tokens, by decreasing probability, whose mass reaches ``top_p`` (at least one token).
    Ties at the top-k boundary keep the lower token ids (stable sort), so the result is deterministic.

    Logits may be ``-inf`` (a masked token) but every row needs one finite logit; NaN and ``+inf`` are refused
    (``InputError``) rather than turned into NaN probabilities. The softmax is taken of
    ``(z - max z) / temperature``, which cannot overflow, so a tiny ``temperature > 0`` (even subnormal) gives
    the T -> 0+ limit: uniform on the argmax set.
    """
    temperature = _real_parameter(temperature, "temperature", "a finite number >= 0 (0 = greedy)",
                                  lambda t: 0.0 <= t < np.inf)
    if top_k is not None:
        top_k = int(_real_parameter(top_k, "top_k", "an integer >= 1 or None",
                                    lambda k: 1.0 <= k < np.inf and k == int(k)))
    if top_p is not None:
        top_p = _real_parameter(top_p, "top_p", "a number in (0, 1] or None", lambda t: 0.0 < t <= 1.0)
    if _is_torch(logits):
        import torch

        z = logits.to(torch.float64) if logits.dtype == torch.float64 else logits.float()  # [..., V]
        if z.ndim == 0 or z.shape[-1] == 0:
            raise InputError(f"logits must have a non-empty last axis, got shape {tuple(z.shape)}")
        if not bool(torch.isfinite(z).all()):  # one reduction on the valid path; the diagnosis only when it fails
            _refuse_non_finite(bool(torch.isnan(z).any()), bool(torch.isposinf(z).any()),
                               torch.isneginf(z).all(dim=-1).cpu().numpy())
    else:
        z = as_real_array(logits, "logits", "an array [..., V]")  # [..., V]; complex, bool, strings refused
        if z.ndim == 0 or z.shape[-1] == 0:
            raise InputError(f"logits must have a non-empty last axis, got shape {z.shape}")
        if not np.isfinite(z).all():
            _refuse_non_finite(bool(np.isnan(z).any()), bool(np.isposinf(z).any()), np.isneginf(z).all(axis=-1))
    return _filtered_softmax(z.reshape(-1, z.shape[-1]), temperature, top_k, top_p).reshape(z.shape)


def _filtered_softmax(z, temperature: float, top_k: int | None, top_p: float | None):  # noqa: ANN001, ANN202
    """:func:`probabilities_from_logits` on checked logits ``z [B, V]`` (a numpy array or a torch tensor, through
    :mod:`otlp.core.xp`)."""
    xp = X.namespace(z)
    order = X.stable_descending(z)  # [B, V] token ids by decreasing logit
    rank = X.inverse_permutation(order)  # [B, V] each token's place in that order
    keep = rank < (top_k if top_k is not None else z.shape[-1])
    if temperature == 0:
        keep = keep & (rank == 0)
        return xp.where(keep, xp.ones_like(z), xp.zeros_like(z))
    kept = xp.where(keep, z, -np.inf)  # [B, V]
    shifted = kept - X.max_rows(kept)[:, None]  # <= 0, and 0 at the maximum (rank 0 is always kept), finite
    with np.errstate(over="ignore", invalid="ignore"):  # shifted / T -> -inf is the right limit (probability 0)
        probs = xp.exp(xp.where(shifted == 0, 0.0, shifted / temperature))
    probs = probs / probs.sum(-1)[:, None]
    if top_p is not None and top_p < 1.0:
        sorted_probs = X.take(probs, order)  # [B, V]
        mass_before = X.cumsum(sorted_probs) - sorted_probs
        probs = xp.where(X.scatter_rows(mass_before < top_p, order), probs, 0.0)
        probs = probs / probs.sum(-1)[:, None]
    return probs


def _real_parameter(value: object, name: str, expected: str, ok: Callable[[float], bool]) -> float:
    """``float(value)`` if it is a real number (not a bool or a string) with ``ok(value)``, else ``InputError``."""
    number = None
    if not isinstance(value, (bool, np.bool_, str, bytes)):
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number = None
    if number is None or not ok(number):
        raise InputError(f"{name} must be {expected}, got {value!r}")
    return number


def _refuse_non_finite(has_nan: bool, has_posinf: bool, all_neginf: object) -> None:
    """The message for logits that are not all finite; returns only when every row has a finite logit.

    ``all_neginf``: bool array [...] (numpy or torch), True where a row is all -inf."""
    if has_nan:
        raise InputError("logits contain NaN; expected finite numbers (or -inf for a masked token)")
    if has_posinf:
        raise InputError("logits contain +inf; expected finite numbers (or -inf for a masked token)")
    empty_rows = np.asarray(all_neginf)
    if empty_rows.any():
        where = "are" if empty_rows.ndim == 0 else f"row {tuple(int(i) for i in np.argwhere(empty_rows)[0])} is"
        raise InputError(f"logits {where} all -inf: no token can be sampled; expected at least one finite logit "
                         "per row")


def _is_torch(x: object) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "softmax")


def load_distribution(spec: str | Sequence[float], name: str = "p", *, renormalize: bool = False) -> np.ndarray:
    """Read a probability vector given inline ("0.5,0.3,0.2"), as a ``.json`` list, or as a ``.npy`` file.

    Files are data only: ``.npy`` is read with ``allow_pickle=False``, JSON with the standard parser.
    """
    if not isinstance(spec, str):
        return check_distribution(spec, name, renormalize=renormalize)
    text = spec.strip()
    if text.endswith(".npy") or text.endswith(".json"):
        if not os.path.isfile(text):
            raise InputError(f"{name}: file {text!r} does not exist")
        if text.endswith(".npy"):
            try:
                values = np.load(text, allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:  # EOFError: an empty file
                if isinstance(exc, EOFError) or os.path.getsize(text) == 0:
                    raise InputError(f"{name}: {text!r} is empty; expected a .npy file holding a 1-D array of "
                                     "numbers") from None
                raise InputError(f"{name}: cannot read {text!r} as a numeric .npy array: {exc}") from None
        else:
            try:
                with open(text, encoding="utf-8") as fh:
                    values = json.load(fh)
            except (ValueError, OSError) as exc:
                raise InputError(f"{name}: cannot parse {text!r} as JSON: {exc}") from None
            if not isinstance(values, list):
                raise InputError(f"{name}: {text!r} must hold a JSON list of numbers, got {type(values).__name__}")
        return check_distribution(values, name, renormalize=renormalize)
    fields = text.replace(";", ",").split(",")
    if text and any(not tok.strip() for tok in fields):
        raise InputError(f"{name}: {_clip(spec)} has an empty field; expected comma-separated numbers like 0.5,0.3,0.2")
    try:
        values = [float(tok) for tok in fields if tok.strip()]
    except ValueError:
        raise InputError(
            f"{name}: cannot parse {_clip(spec)}; expected comma-separated numbers like 0.5,0.3,0.2 "
            "or a path to a .json or .npy file"
        ) from None
    return check_distribution(values, name, renormalize=renormalize)


def _clip(text: str, width: int = 60) -> str:
    """``repr(text)``, shortened to about ``width`` characters for a one-line message."""
    return repr(text) if len(text) <= width else repr(text[:width]) + f" (... {len(text):,} characters)"
