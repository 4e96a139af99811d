"""Captures: the (p, q) pair of every verification node, as a folder of Parquet shards plus ``manifest.json``.

Layout (schema version 1)::

    CAPTURE/manifest.json         {"format": "otlp-capture", "schema_version": 1, "storage": "sparse" | "dense",
                                   "top_k": 256 | null, "V": ..., "rows": ..., "created": ..., "provenance": {...},
                                   "shards": [{"file", "rows", "bytes", "sha256"}, ...]}
    CAPTURE/shard-00000.parquet   one row per node (columns below), written whole, then renamed into place

Every row carries ``context_id`` (int64: the decode context, one per prompt and step; nodes of one step's tree share
it), ``sequence`` and ``position`` (int32: the prompt and the tokens generated before the step), ``depth`` (int16:
0 at the step root), ``width`` (int16: drafts at the node), the sampling settings ``temperature``, ``top_k``,
``top_p`` and ``draft_temperature``, ``draft_top_k``, ``draft_top_p`` (null where unused) and ``draft_model``,
``target_model`` (strings; Parquet stores repeated values once). Then the laws:

- dense: ``p``, ``q`` (list<float64> of length V);
- sparse (the default): ``index`` (list<int32>, increasing token ids of S), ``p``, ``q`` (list<float64>: both laws
  on S), ``p_tail``, ``q_tail`` (float64: the masses outside S). S is the union of the top-k of p and the top-k of q
  (every token whose probability reaches the k-th largest, so ties at the boundary are all kept; zeros never).

Rows are normalised to sum 1 in float64 when written (sums within ``atol`` of 1 are accepted, for engines that work
in float32). The manifest lists each shard's size and SHA-256: a missing or altered shard is refused when read, and
the hash keys the sweep's saved results (:mod:`otlp.sweep.runner`).

**The sparse tail-mass bound.** A sparse row gives the *collapsed* pair (p', q') on S + {t}: p, q on S and one
token t carrying P_T = p(V \\ S), Q_T = q(V \\ S). For i.i.d. drafts (GR Thm 3.1, psi(H) = p(H) - q(H)^n) the sweep's
alpha*' = alpha*(p', IID(q', n)) satisfies

    alpha*' - min(P_T, 1 - (1 - Q_T)^n)  <=  alpha*(p, IID(q, n))  <=  alpha*'      (and 1 - (1 - Q_T)^n <= n Q_T).

Proof. Upper: a subset of S + {t} is a subset of V that holds all of V \\ S or none of it, so min psi over V is at
most min psi' (alpha* = 1 + min psi). Lower: take any H = A + B with A in S, B outside S, and a = q(A), b = q(B) <=
Q_T. (i) Against H' = A (t left out): psi(H) - psi'(A) = p(B) - ((a + b)^n - a^n) >= -((a + b)^n - a^n) >=
-(1 - (1 - b)^n) >= -(1 - (1 - Q_T)^n), since x -> x^n is convex, so (a + b)^n - a^n grows with a <= 1 - b.
(ii) Against H' = A + {t}: psi(H) - psi'(A + t) = p(B) - P_T + (a + Q_T)^n - (a + b)^n >= -(P_T - p(B)) >= -P_T.
Both hold for every H, so min psi >= min psi' - min(P_T, 1 - (1 - Q_T)^n). []
With a draft top-k of at most the stored k (``otlp sweep --top-k``), q' vanishes off S, Q_T = 0 and alpha*' is
exact. The verifiers' acceptances on a sparse capture are those of the collapsed pair (the tail as one token): no
bound is claimed for them.

Writing a capture from another engine (the same API ``otlp decode --capture`` uses)::

    from otlp.sweep import CaptureWriter
    with CaptureWriter("my_capture", V=32000, storage="sparse", top_k=256,
                       provenance={"engine": "my-engine", "target": "my-7b", "draft": "my-1b"}) as w:
        for p, q in batches:                     # float arrays [M, V]
            w.add(p, q, depth=0, temperature=1.0, target_model="my-7b", draft_model="my-1b")

``python -m otlp.sweep.npz_example pairs.npz my_capture`` converts a plain ``.npz`` holding ``p`` and ``q``
arrays ``[M, V]`` (see :mod:`otlp.sweep.npz_example`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from otlp.core.errors import InputError, ModelTooLargeError
from otlp.sweep import _deps

FORMAT = "otlp-capture"
#: The capture schema this otlp writes and the newest it reads.
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
STORAGES = ("sparse", "dense")
#: Shards are cut at about this many bytes of laws (a dense V = 32k shard holds 128 rows).
SHARD_BYTES = 64 * 2**20
MAX_SHARD_ROWS = 8192
#: Refuse one ``add`` whose dense float64 copies of p and q would exceed this.
MAX_ADD_BYTES = 2 * 2**30

#: (column, pyarrow type name, default) of the per-node metadata, in file order.
META_COLUMNS: tuple[tuple[str, str, object], ...] = (
    ("context_id", "int64", None),
    ("sequence", "int32", -1),
    ("position", "int32", -1),
    ("depth", "int16", 0),
    ("width", "int16", -1),
    ("temperature", "float64", None),
    ("top_k", "int32", None),
    ("top_p", "float64", None),
    ("draft_temperature", "float64", None),
    ("draft_top_k", "int32", None),
    ("draft_top_p", "float64", None),
    ("draft_model", "string", ""),
    ("target_model", "string", ""),
)
_META_NAMES = tuple(c[0] for c in META_COLUMNS)


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def _width(x: object) -> object:
    """The last axis' length of ``x`` for a message, or "?" (0-d, ragged, not an array)."""
    try:
        shape = np.shape(x)
    except (TypeError, ValueError):
        return "?"
    return shape[-1] if shape else "?"


def _check_laws(p: object, q: object, V: int, atol: float) -> tuple[np.ndarray, np.ndarray]:
    """p, q -> float64 [M, V] each, rows normalised; InputError naming the first bad row."""
    arrays = []
    for name, x in (("p", p), ("q", q)):
        try:
            shape = np.shape(x)  # an array's without a copy; a ragged list raises
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name} must be an array of numbers [M, V]: {str(exc).splitlines()[0]}") from None
        if len(shape) not in (1, 2):
            raise InputError(f"{name} must have shape [M, V] (or [V] for one node), got {shape}")
        if shape[-1] != V:
            raise InputError(f"{name} has V = {shape[-1]} entries per row, expected V = {V} (the capture's "
                             f"vocabulary; p has {_width(p)}, q has {_width(q)})")
        rows = shape[0] if len(shape) == 2 else 1
        if 2.0 * rows * V * 8 > MAX_ADD_BYTES:
            raise ModelTooLargeError(f"adding {rows} rows of V = {V} at once", 2.0 * rows * V * 8, MAX_ADD_BYTES)
        if np.asarray(x).dtype.kind not in "biuf":
            raise InputError(f"{name} must be an array of real numbers, got dtype {np.asarray(x).dtype}")
        try:
            arr = np.atleast_2d(np.asarray(x, dtype=np.float64))
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name} must be an array of numbers: {str(exc).splitlines()[0]}") from None
        arrays.append(arr)
    p2, q2 = arrays
    if p2.shape[0] != q2.shape[0]:
        raise InputError(f"p has {p2.shape[0]} rows and q has {q2.shape[0]}; give one (p, q) pair per row")
    out = []
    for name, arr in (("p", p2), ("q", q2)):
        if not np.all(np.isfinite(arr)):
            r = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
            raise InputError(f"{name} row {r} has a non-finite entry; probabilities must be finite")
        if arr.size and arr.min() < 0:
            r = int(np.flatnonzero((arr < 0).any(axis=1))[0])
            raise InputError(f"{name} row {r} has a negative entry ({arr[r].min():.3g}); probabilities must be >= 0")
        sums = arr.sum(axis=1)
        bad = np.flatnonzero(np.abs(sums - 1.0) > atol)
        if bad.size:
            r = int(bad[0])
            raise InputError(f"{name} row {r} sums to {sums[r]:.9g}, expected 1 within {atol:g} (pass atol= to "
                             "accept it; rows are renormalised when written)")
        out.append(arr / sums[:, None])  # a new array: the caller's (possibly read-only, possibly live) one is kept
    return out[0], out[1]


def top_set(x: np.ndarray, k: int) -> np.ndarray:
    """bool [M, V]: entries >= the k-th largest of their row (all ties kept), excluding zeros."""
    M, V = x.shape
    if k >= V:
        return x > 0
    kth = -np.partition(-x, k - 1, axis=1)[:, k - 1]  # [M], the k-th largest value of each row
    return (x >= kth[:, None]) & (x > 0)


def sparsify(p: np.ndarray, q: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Dense rows [M, V] -> the sparse columns: flat ``index``, ``p``, ``q`` with ``offsets [M + 1]``, tail masses."""
    keep = top_set(p, k) | top_set(q, k)  # [M, V]
    rows, cols = np.nonzero(keep)  # row-major: each row's token ids increasing
    counts = keep.sum(axis=1)
    offsets = np.zeros(p.shape[0] + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return {"offsets": offsets, "index": cols.astype(np.int32), "p": p[rows, cols], "q": q[rows, cols],
            "p_tail": np.where(keep, 0.0, p).sum(axis=1), "q_tail": np.where(keep, 0.0, q).sum(axis=1)}


def check_new_capture(path: str | os.PathLike, top_k: int = 256) -> None:
    """What :class:`CaptureWriter` would refuse, checked before a decode starts: pyarrow present, ``path`` new or an
    empty folder, ``top_k`` >= 1."""
    _deps.pyarrow()
    p = Path(path)
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise InputError(f"capture folder {str(p)!r} exists and is not empty; give a new folder")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise InputError(f"the capture top-k must be an integer >= 1, got {top_k!r}")


class CaptureWriter:
    """Write a capture folder (see the module docstring). Use as a context manager, or call :meth:`close`.

    Parameters
    ----------
    path : a new (or empty) folder.
    V : vocabulary size; every row of p and q must have V entries.
    storage : "sparse" (top-k of p and q plus tail masses; default) or "dense".
    top_k : k of the sparse storage (default 256).
    shard_rows : rows per shard (default: about 64 MiB of laws, at most 8192 rows).
    provenance : free JSON-able facts for the manifest (models, command, seed, ...).
    atol : accepted |row sum - 1| before renormalising (default 1e-4, for float32 engines).
    compression : Parquet codec (default "none": float64 laws shrink by about 5% under zstd, and reading
        them back costs 3x longer).

    The manifest is rewritten after every shard, so an interrupted writer leaves a readable capture of the shards
    it finished; :meth:`close` writes the last partial shard.
    """

    def __init__(self, path: str | os.PathLike, V: int, *, storage: str = "sparse", top_k: int = 256,
                 shard_rows: int | None = None, provenance: Mapping[str, object] | None = None, atol: float = 1e-4,
                 compression: str = "none"):
        _deps.pyarrow()
        if isinstance(V, bool) or not isinstance(V, (int, np.integer)) or V < 1:
            raise InputError(f"V must be an integer >= 1 (the vocabulary size), got {V!r}")
        if storage not in STORAGES:
            raise InputError(f"storage must be one of {', '.join(STORAGES)}, got {storage!r}")
        if storage == "sparse" and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))
                                    or top_k < 1):
            raise InputError(f"top_k must be an integer >= 1 for sparse storage, got {top_k!r}")
        self.path = Path(path)
        check_new_capture(self.path, top_k if storage == "sparse" else 1)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create capture folder {str(self.path)!r}: {exc.strerror or exc}") from None
        self.V, self.storage = int(V), storage
        self.top_k = int(min(top_k, V)) if storage == "sparse" else None
        row_bytes = 16.0 * (self.V if storage == "dense" else min(2 * self.top_k, self.V)) + 64
        self.shard_rows = int(shard_rows) if shard_rows else int(max(1, min(MAX_SHARD_ROWS, SHARD_BYTES // row_bytes)))
        if self.shard_rows < 1:
            raise InputError(f"shard_rows must be >= 1, got {shard_rows!r}")
        self.atol, self.compression = float(atol), compression
        from otlp import __version__

        self.provenance = {"otlp_version": __version__, **dict(provenance or {})}
        self.created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.shards: list[dict] = []
        self.rows = 0
        self._buffer: list[dict] = []  # per add: sparse or dense columns of a block of rows, plus metadata
        self._buffered = 0
        self._run_meta: dict[str, object] = {}
        self._closed = False
        self._write_manifest()

    # -- adding rows ---------------------------------------------------------------------------------------------
    def add(self, p: object, q: object, **meta: object) -> None:
        """Append (p, q) rows ``[M, V]`` (or one pair ``[V]``). ``meta`` sets the node columns (module docstring):
        each a scalar for every row or a sequence of M values; ``context_id`` defaults to the running row number."""
        if self._closed:
            raise InputError("this CaptureWriter is closed")
        unknown = sorted(set(meta) - set(_META_NAMES))
        if unknown:
            raise InputError(f"unknown capture column(s) {', '.join(unknown)}; expected {', '.join(_META_NAMES)}")
        p2, q2 = _check_laws(p, q, self.V, self.atol)
        M = p2.shape[0]
        if M == 0:
            return
        columns: dict[str, object] = {}
        for name, _, default in META_COLUMNS:
            value = meta.get(name, self._run_meta.get(name, default))
            if name == "context_id" and value is None:
                value = np.arange(self.rows + self._buffered, self.rows + self._buffered + M, dtype=np.int64)
            if isinstance(value, (list, tuple, np.ndarray)):
                if len(value) != M:
                    raise InputError(f"column {name!r} has {len(value)} values for {M} rows")
                columns[name] = list(np.asarray(value).tolist())
            else:
                columns[name] = [value] * M
        if self.storage == "dense":
            laws = {"p": p2, "q": q2}
        else:
            laws = sparsify(p2, q2, self.top_k)
        self._buffer.append({"rows": M, "meta": columns, "laws": laws})
        self._buffered += M
        while self._buffered >= self.shard_rows:
            self._write_shard(self.shard_rows)

    def start_run(self, **settings: object) -> None:
        """Defaults for the node columns of the rows added from now on (the decode loop sets the sampling settings
        and the model names once per run)."""
        unknown = sorted(set(settings) - set(_META_NAMES))
        if unknown:
            raise InputError(f"unknown capture column(s) {', '.join(unknown)}")
        self._run_meta = dict(settings)

    def add_nodes(self, p: object, q: object, **meta: object) -> None:
        """The decode loop's hook: ``p, q`` torch or numpy ``[R, V]`` for R nodes, ``meta`` as in :meth:`add`."""
        to_np = [x.detach().to("cpu").numpy() if hasattr(x, "detach") else np.asarray(x) for x in (p, q)]
        self.add(to_np[0], to_np[1], **{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in meta.items()})

    # -- shards --------------------------------------------------------------------------------------------------
    def _take(self, rows: int) -> list[dict]:
        """Pop the first ``rows`` buffered rows (splitting a block where needed)."""
        out, need = [], rows
        while need:
            block = self._buffer[0]
            if block["rows"] <= need:
                out.append(self._buffer.pop(0))
                need -= block["rows"]
                continue
            head, tail = _split_block(block, need, self.storage)
            out.append(head)
            self._buffer[0] = tail
            need = 0
        self._buffered -= rows
        return out

    def _write_shard(self, rows: int) -> None:
        pa = _deps.pyarrow()
        pq = _deps.parquet()
        blocks = self._take(rows)
        arrays, names = [], []
        for name, type_name, _ in META_COLUMNS:
            values = [v for b in blocks for v in b["meta"][name]]
            arrays.append(pa.array(values, type=getattr(pa, type_name)()))
            names.append(name)
        if self.storage == "dense":
            for key in ("p", "q"):
                flat = np.concatenate([b["laws"][key].ravel() for b in blocks])
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(flat), self.V))
                names.append(key)
        else:
            counts = np.concatenate([np.diff(b["laws"]["offsets"]) for b in blocks])
            offsets = np.zeros(counts.size + 1, dtype=np.int32)
            np.cumsum(counts, out=offsets[1:])
            for key, typ in (("index", pa.int32()), ("p", pa.float64()), ("q", pa.float64())):
                flat = np.concatenate([b["laws"][key] for b in blocks])
                arrays.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=typ)))
                names.append(key)
            for key in ("p_tail", "q_tail"):
                arrays.append(pa.array(np.concatenate([b["laws"][key] for b in blocks])))
                names.append(key)
        table = pa.Table.from_arrays(arrays, names=names)
        name = f"shard-{len(self.shards):05d}.parquet"
        tmp = self.path / f".{name}.tmp"
        pq.write_table(table, tmp, compression=self.compression, write_page_checksum=True)
        data = tmp.read_bytes()
        os.replace(tmp, self.path / name)
        self.shards.append({"file": name, "rows": rows, "bytes": len(data), "sha256": sha256_bytes(data)})
        self.rows += rows
        self._write_manifest()

    def _write_manifest(self) -> None:
        manifest = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "storage": self.storage,
                    "top_k": self.top_k, "V": self.V, "rows": self.rows, "created": self.created,
                    "complete": self._closed, "provenance": self.provenance, "shards": self.shards}
        tmp = self.path / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, self.path / MANIFEST)

    def close(self) -> None:
        """Write the last partial shard and the final manifest."""
        if self._closed:
            return
        if self._buffered:
            self._write_shard(self._buffered)
        self._closed = True
        self._write_manifest()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split_block(block: dict, rows: int, storage: str) -> tuple[dict, dict]:
    meta_head = {k: v[:rows] for k, v in block["meta"].items()}
    meta_tail = {k: v[rows:] for k, v in block["meta"].items()}
    laws = block["laws"]
    if storage == "dense":
        head = {"p": laws["p"][:rows], "q": laws["q"][:rows]}
        tail = {"p": laws["p"][rows:], "q": laws["q"][rows:]}
    else:
        cut = int(laws["offsets"][rows])
        head = {"offsets": laws["offsets"][: rows + 1], "p_tail": laws["p_tail"][:rows],
                "q_tail": laws["q_tail"][:rows], **{k: laws[k][:cut] for k in ("index", "p", "q")}}
        tail = {"offsets": laws["offsets"][rows:] - cut, "p_tail": laws["p_tail"][rows:],
                "q_tail": laws["q_tail"][rows:], **{k: laws[k][cut:] for k in ("index", "p", "q")}}
    return ({"rows": rows, "meta": meta_head, "laws": head},
            {"rows": block["rows"] - rows, "meta": meta_tail, "laws": tail})
