"""Reading captures: the manifest, checked shards, and the (p, q) rows as arrays for the sweep.

>>> cap = open_capture("my_capture")           # doctest: +SKIP
>>> block = cap.read(0)                        # shard 0: a PairBlock
>>> block.p.shape, block.q.shape               # [M, W]; W = V (dense) or 1 + max |S| (sparse, column 0 = tail)

Every problem is refused in one line naming the file and what was expected (:class:`otlp.core.errors.InputError`): no
manifest, a manifest from a newer otlp (schema version), a listed shard that is missing, shorter or longer than
listed, whose SHA-256 differs (a corrupt or replaced file), that Parquet cannot read, or whose rows do not match the
manifest (V, p and q of different lengths, token ids outside [0, V)).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from otlp.core.errors import InputError
from otlp.sweep import _deps
from otlp.sweep.capture import FORMAT, MANIFEST, META_COLUMNS, SCHEMA_VERSION, STORAGES, sha256_bytes

_NUMERIC_META = tuple(name for name, typ, _ in META_COLUMNS if typ != "string")


@dataclass(frozen=True)
class ShardInfo:
    file: str
    rows: int
    bytes: int
    sha256: str


@dataclass
class PairBlock:
    """The rows of one shard as arrays.

    ``p, q: float64 [M, W]``. Dense: W = V. Sparse: column 0 is the collapsed tail token (``p_tail``, ``q_tail``),
    columns 1.. the stored tokens of S in increasing id order, then zeros (padding, p = q = 0, which changes no
    acceptance). ``meta``: the numeric node columns (nulls as NaN); ``models``: the distinct (draft, target) names.
    """

    p: np.ndarray
    q: np.ndarray
    p_tail: np.ndarray  # [M]
    q_tail: np.ndarray  # [M]
    sparse: bool
    meta: dict[str, np.ndarray] = field(default_factory=dict)
    models: list[tuple[str, str]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return int(self.p.shape[0])


@dataclass(frozen=True)
class Capture:
    """An opened capture folder: the manifest's facts and its shards (checked to exist with the listed sizes)."""

    path: Path
    manifest: dict

    @property
    def V(self) -> int:
        return int(self.manifest["V"])

    @property
    def storage(self) -> str:
        return str(self.manifest["storage"])

    @property
    def top_k(self) -> int | None:
        return self.manifest.get("top_k")

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def shards(self) -> list[ShardInfo]:
        return [ShardInfo(s["file"], int(s["rows"]), int(s["bytes"]), str(s["sha256"]))
                for s in self.manifest["shards"]]

    def shard_path(self, i: int) -> Path:
        return self.path / self.shards[i].file

    def read(self, i: int, verify: bool = True) -> PairBlock:
        """Shard ``i`` as a :class:`PairBlock` (``verify``: check its SHA-256 against the manifest)."""
        return read_shard(self.shard_path(i), self.shards[i], self.V, self.storage, verify=verify)


def _fail(path: Path, what: str) -> InputError:
    return InputError(f"capture {str(path)!r}: {what}")


def shard_problem(root: Path, info: ShardInfo) -> str | None:
    """What is wrong with shard ``info`` of the capture at ``root`` that a stat can see (missing; a size other than
    the manifest's), or None. Its content (SHA-256, Parquet, rows) is checked by :func:`read_shard`."""
    f = root / info.file
    if not f.is_file():
        return f"shard {info.file} listed in {MANIFEST} is missing"
    size = f.stat().st_size
    if size != info.bytes:
        return f"shard {info.file} has {size} bytes, the manifest lists {info.bytes} (a truncated or replaced file)"
    return None


def open_capture(path: str | os.PathLike, check_shards: bool = True) -> Capture:
    """Open a capture folder: read and check ``manifest.json`` and (``check_shards``) that every listed shard is
    there with its listed size; every such problem is named in the one-line error. ``check_shards=False`` leaves
    that to the caller (the sweep computes the good shards first, then reports every bad one)."""
    root = Path(path)
    if not root.is_dir():
        raise _fail(root, "no such folder (expected a folder written by `otlp decode --capture` or CaptureWriter)")
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise _fail(root, f"no {MANIFEST} (expected a folder written by `otlp decode --capture` or CaptureWriter)")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise _fail(root, f"{MANIFEST} is not readable JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _fail(root, f"{MANIFEST} is not an otlp capture manifest (expected \"format\": \"{FORMAT}\")")
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise _fail(root, f"{MANIFEST} has schema_version {version!r}; expected an integer >= 1")
    if version > SCHEMA_VERSION:
        raise _fail(root, f"schema version {version} is newer than this otlp reads (up to {SCHEMA_VERSION}); "
                          "upgrade otlp to read it")
    try:
        V = int(manifest["V"])
        storage = manifest["storage"]
        shards = manifest["shards"]
        infos = [ShardInfo(s["file"], int(s["rows"]), int(s["bytes"]), str(s["sha256"])) for s in shards]
    except (KeyError, TypeError, ValueError) as exc:
        raise _fail(root, f"{MANIFEST} lacks a field or has a bad value ({exc!r})") from None
    if V < 1 or storage not in STORAGES:
        raise _fail(root, f"{MANIFEST} has V = {V} and storage {storage!r}; expected V >= 1 and one of "
                          f"{', '.join(STORAGES)}")
    for info in infos:
        if Path(info.file).name != info.file:
            raise _fail(root, f"shard name {info.file!r} in {MANIFEST} is not a plain file name")
    if check_shards:
        problems = [x for x in (shard_problem(root, info) for info in infos) if x is not None]
        if problems:
            raise _fail(root, "; ".join(problems))
    return Capture(root, manifest)


def read_shard(path: str | os.PathLike, info: ShardInfo, V: int, storage: str, verify: bool = True) -> PairBlock:
    """One shard file -> :class:`PairBlock`, checked against its manifest entry (runs on Dask workers too)."""
    pa = _deps.pyarrow()
    pq = _deps.parquet()
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"shard {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if verify and (len(data) != info.bytes or sha256_bytes(data) != info.sha256):
        raise InputError(f"shard {str(path)!r} is corrupt: its SHA-256 differs from the manifest's "
                         f"({len(data)} bytes, {info.bytes} listed)")
    try:  # the SHA-256 covers every byte; the pages' own CRCs are checked only where it is skipped
        table = pq.read_table(pa.BufferReader(data), page_checksum_verification=not verify)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"shard {str(path)!r} is not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    return block_from_table(table, V, storage, str(path), info.rows)


def _flat(column: object, name: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """A list column -> (offsets [M + 1], values [N]); refuses nulls."""
    pa = _deps.pyarrow()
    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if arr.null_count:
        raise InputError(f"{where}: column {name!r} has null rows")
    if isinstance(arr, pa.FixedSizeListArray):
        size = arr.type.list_size
        values = arr.flatten().to_numpy(zero_copy_only=False)
        return np.arange(len(arr) + 1, dtype=np.int64) * size, values
    if not isinstance(arr, (pa.ListArray, pa.LargeListArray)):
        raise InputError(f"{where}: column {name!r} has type {arr.type}, expected a list of numbers")
    offsets = arr.offsets.to_numpy().astype(np.int64)
    values = arr.values.to_numpy(zero_copy_only=False)
    return offsets - offsets[0], values[offsets[0]: offsets[-1]]


def block_from_table(table: object, V: int, storage: str, where: str = "shard", rows: int | None = None
                     ) -> PairBlock:
    """A shard's Arrow table -> :class:`PairBlock` (checks columns, row count, V and p/q lengths)."""
    names = set(table.column_names)
    law_cols = ("p", "q") if storage == "dense" else ("index", "p", "q", "p_tail", "q_tail")
    missing = [c for c in law_cols if c not in names]
    if missing:
        raise InputError(f"{where}: missing column(s) {', '.join(missing)} for {storage} storage")
    M = table.num_rows
    if rows is not None and M != rows:
        raise InputError(f"{where}: {M} rows, the manifest lists {rows}")
    po, pv = _flat(table.column("p"), "p", where)
    qo, qv = _flat(table.column("q"), "q", where)
    plen, qlen = np.diff(po), np.diff(qo)
    if (plen != qlen).any():
        r = int(np.flatnonzero(plen != qlen)[0])
        raise InputError(f"{where}: row {r} has {plen[r]} entries of p and {qlen[r]} of q; p and q must have the "
                         "same length (V mismatch between p and q)")
    meta = {}
    for name in _NUMERIC_META:
        if name in names:
            meta[name] = table.column(name).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    models = []
    if "draft_model" in names and "target_model" in names:
        pairs = zip(table.column("draft_model").to_pylist(), table.column("target_model").to_pylist(), strict=True)
        models = sorted({(str(d or ""), str(t or "")) for d, t in pairs})
    if storage == "dense":
        if M and (plen != V).any():
            r = int(np.flatnonzero(plen != V)[0])
            raise InputError(f"{where}: row {r} has {plen[r]} entries of p and q, expected V = {V} (the manifest's "
                             "vocabulary)")
        p = pv.astype(np.float64, copy=False).reshape(M, V)
        q = qv.astype(np.float64, copy=False).reshape(M, V)
        zeros = np.zeros(M)
        return PairBlock(p, q, zeros, zeros.copy(), False, meta, models)
    io, iv = _flat(table.column("index"), "index", where)
    if (np.diff(io) != plen).any():
        r = int(np.flatnonzero(np.diff(io) != plen)[0])
        raise InputError(f"{where}: row {r} has {np.diff(io)[r]} token ids and {plen[r]} values of p")
    if iv.size and (iv.min() < 0 or iv.max() >= V):
        raise InputError(f"{where}: a token id lies outside [0, {V}) (the manifest's V = {V})")
    W = 1 + (int(plen.max()) if M else 0)
    rows_of = np.repeat(np.arange(M), plen)
    cols = 1 + np.arange(pv.size) - np.repeat(po[:-1], plen)
    p = np.zeros((M, W))
    q = np.zeros((M, W))
    p_tail = table.column("p_tail").to_numpy(zero_copy_only=False).astype(np.float64)
    q_tail = table.column("q_tail").to_numpy(zero_copy_only=False).astype(np.float64)
    p[:, 0], q[:, 0] = p_tail, q_tail
    p[rows_of, cols] = pv
    q[rows_of, cols] = qv
    for name, arr in (("p", p), ("q", q)):
        if M and not (np.isfinite(arr).all() and arr.min() >= 0 and np.allclose(arr.sum(axis=1), 1.0, atol=1e-6)):
            raise InputError(f"{where}: the stored {name} values and tail do not form probability vectors")
    return PairBlock(p, q, p_tail, q_tail, True, meta, models)
