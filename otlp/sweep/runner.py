"""``run_sweep``: a capture's shards through :func:`otlp.sweep.compute.compute_block`, on local cores or on Dask.

One task per shard, the same function everywhere (:func:`shard_task`): it reads the shard (checking its SHA-256),
computes the long-format per-pair results with BLAS held to one thread (so sums, hence every bit, do not depend on
the machine's thread count) and returns them. The caller saves each result the moment it arrives as
``OUT/results/<key>.parquet`` (written whole, then renamed), ``key = sha256(shard sha256, parameters, width)``. So:

- a re-run, or a run after an interrupt, skips every shard whose result is saved (``reused``); an interrupt loses
  only the shards in flight;
- on Dask a task whose worker dies is rescheduled by the scheduler on another worker (up to its
  ``allowed-failures``); a task that still ends in ``KilledWorker`` is submitted again, up to ``RESUBMITS`` times;
- results are assembled in shard order, so the local and the distributed runs write identical tables;
- a bad shard (missing, truncated, corrupt, unreadable) does not stop the others: every good shard is computed and
  saved, then :class:`BadShards` names every bad one (``otlp sweep`` exits 2) and a re-run computes only those.

Workers read the shards by path: on a cluster the capture folder must be visible to the workers at the same path
(a shared file system).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from otlp.core.errors import InputError
from otlp.sweep import _deps
from otlp.sweep.compute import (
    FLOAT_META,
    INT_META,
    MAX_ENUM_CELLS,
    SweepParams,
    check_ns,
    compute_block,
    nominal_width,
    resolve_verifiers,
    skipped_rules,
)
from otlp.sweep.loader import Capture, ShardInfo, open_capture, read_shard, shard_problem
from otlp.sweep.report import Aggregate, format_table, plot

#: Times a shard that ends in ``KilledWorker`` is submitted again.
RESUBMITS = 3
RESULTS = "results"


class SweepInterrupted(KeyboardInterrupt):
    """Raised on Ctrl-C: ``done`` shard results are saved under ``out``; a re-run resumes from there."""

    def __init__(self, done: int, total: int, out: Path):
        self.done, self.total, self.out = done, total, out
        super().__init__(f"interrupted: {done} of {total} shard results are saved under {out}; run the same "
                         "command again to resume")


class BadShards(InputError):
    """Some shards could not be read (missing, truncated, corrupt, unreadable, rows that do not match the manifest):
    raised after every other shard was computed. ``bad`` maps each bad shard's index to what is wrong with it; the
    good shards' results are saved under ``out / RESULTS``, so a re-run computes only the shards that were bad."""

    #: bad shards named in full in the message; the rest are counted (all are in ``bad``)
    LISTED = 20

    def __init__(self, bad: dict[int, str], total: int, computed: int, reused: int, out: Path):
        self.bad, self.out = dict(sorted(bad.items())), out
        reasons = list(self.bad.values())
        shown = "; ".join(reasons[:self.LISTED]) + (f"; and {len(reasons) - self.LISTED} more"
                                                     if len(reasons) > self.LISTED else "")
        good = total - len(bad)
        super().__init__(f"{len(bad)} of {total} shards are bad: {shown}. The other {good} shards' results are "
                         f"saved under {out / RESULTS} ({computed} computed now, {reused} reused) and no "
                         "pairs.parquet was written: restore or replace the bad shards and run the same command "
                         "again, it resumes and computes only those")


@dataclass
class SweepResult:
    report: dict  # the JSON report (what `otlp sweep --json` prints)
    out: Path
    pairs_path: Path  # per-pair results of this sweep (Parquet, long format)

    def table(self) -> str:
        return format_table(self.report)


def shard_key(info: ShardInfo, params: SweepParams, nominal: int) -> str:
    text = json.dumps({"shard": info.sha256, "params": params.as_json(), "width": nominal}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def shard_task(path: str, info: tuple, V: int, storage: str, params: SweepParams, nominal: int, verify: bool = True
               ) -> tuple[dict, dict]:
    """Read one shard and compute its results: ``(columns, errors)``. Runs in worker processes (local or Dask)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - part of otlp[sweep]
        threadpool_limits = None
    block = read_shard(path, ShardInfo(*info), V, storage, verify=verify)
    if threadpool_limits is None:
        cols = compute_block(block, params, nominal)
    else:
        with threadpool_limits(limits=1):
            cols = compute_block(block, params, nominal)
    errors = cols.pop("_errors")
    return cols, errors


def _to_table(cols: dict, errors: dict):  # noqa: ANN202 - pyarrow.Table
    pa = _deps.pyarrow()
    table = pa.table(cols)
    return table.replace_schema_metadata({"otlp_errors": json.dumps(errors)})


def _from_table(table) -> tuple[dict, dict]:  # noqa: ANN001
    meta = table.schema.metadata or {}
    errors = json.loads(meta.get(b"otlp_errors", b"{}"))
    return {name: table.column(name).to_numpy() for name in table.column_names}, errors


def _save(path: Path, cols: dict, errors: dict) -> None:
    pq = _deps.parquet()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(_to_table(cols, errors), tmp, compression="zstd")
    os.replace(tmp, path)


def _load(path: Path) -> tuple[dict, dict] | None:
    pq = _deps.parquet()
    pa = _deps.pyarrow()
    try:
        return _from_table(pq.read_table(path))
    except (pa.ArrowException, OSError, ValueError):
        return None  # an unreadable saved result is computed again


class _Progress:
    def __init__(self, total_shards: int, total_pairs: int, callback: Callable[[dict], object] | None):
        self.total_shards, self.total_pairs, self.callback = total_shards, total_pairs, callback
        self.shards = self.pairs = 0
        self.computed_pairs = 0
        self.start = time.perf_counter()

    def update(self, rows: int, computed: bool) -> None:
        self.shards += 1
        self.pairs += rows
        if computed:
            self.computed_pairs += rows
        if self.callback is None:
            return
        elapsed = time.perf_counter() - self.start
        rate = self.computed_pairs / elapsed if elapsed > 0 else 0.0
        left = self.total_pairs - self.pairs
        eta = left / rate if rate > 0 else (0.0 if left == 0 else float("nan"))
        self.callback({"shards": self.shards, "total_shards": self.total_shards, "pairs": self.pairs,
                       "total_pairs": self.total_pairs, "pairs_per_second": rate, "elapsed": elapsed, "eta": eta})


def progress_printer(stream=None) -> Callable[[dict], None]:  # noqa: ANN001
    """A progress callback printing one self-overwriting line with the ETA (at most 4 times a second)."""
    stream = stream or sys.stderr
    last = [0.0]

    def show(state: dict) -> None:
        now = time.perf_counter()
        final = state["shards"] == state["total_shards"]
        if now - last[0] < 0.25 and not final:
            return
        last[0] = now
        eta = state["eta"]
        eta_text = "?" if eta != eta else f"{eta:.0f} s"
        stream.write(f"\rsweep: {state['shards']}/{state['total_shards']} shards, {state['pairs']}/"
                     f"{state['total_pairs']} pairs, {state['pairs_per_second']:.0f} pairs/s, ETA {eta_text}   ")
        if final:
            stream.write("\n")
        stream.flush()

    return show


def _check_out(out: Path) -> Path:
    try:
        (out / RESULTS).mkdir(parents=True, exist_ok=True)
        probe = out / RESULTS / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"--out {str(out)!r} is not a writable folder ({exc.strerror or exc}); pass one the "
                         "results can be saved in") from None
    return out


def _run_local(pending: list, submit_args: Callable, workers: int, on_done: Callable, on_fail: Callable) -> None:
    """Each pending shard's task on ``workers`` processes; ``on_done(i, result)`` as each finishes, ``on_fail(i,
    exc)`` for a shard whose task raised ``InputError`` (a bad shard: the others go on)."""
    if workers <= 1 or len(pending) <= 1:
        for i in pending:
            try:
                result = shard_task(*submit_args(i))
            except InputError as exc:
                on_fail(i, exc)
                continue
            on_done(i, result)
        return
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch / BLAS threads
    pool = cf.ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=ctx)
    try:
        futures = {pool.submit(shard_task, *submit_args(i)): i for i in pending}
        for fut in cf.as_completed(futures):
            try:
                result = fut.result()
            except InputError as exc:
                on_fail(futures[fut], exc)
                continue
            on_done(futures[fut], result)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _run_dask(pending: list, submit_args: Callable, client, on_done: Callable,  # noqa: ANN001
              on_fail: Callable) -> None:
    dd = _deps.distributed()
    futures = {client.submit(shard_task, *submit_args(i), pure=False): i for i in pending}
    tries = dict.fromkeys(pending, 0)
    done = dd.as_completed(list(futures))
    try:
        for fut in done:
            i = futures.pop(fut)
            try:
                result = fut.result()
            except dd.KilledWorker:
                if tries[i] >= RESUBMITS:
                    raise InputError(f"shard {i}: its workers died {RESUBMITS + 1} times over (KilledWorker); the "
                                     "shard may exhaust a worker's memory") from None
                tries[i] += 1
                again = client.submit(shard_task, *submit_args(i), pure=False)
                futures[again] = i
                done.add(again)
                continue
            except InputError as exc:
                on_fail(i, exc)
                continue
            on_done(i, result)
            fut.release()
    except BaseException:
        client.cancel(list(futures))
        raise


def run_sweep(capture: str | os.PathLike | Capture, *, ns: Sequence[int] = (1, 2, 4, 8),
              verifiers: Sequence[str] | str = "all", top_ks: Sequence[int | None] = (0,),
              out: str | os.PathLike | None = None, workers: int | None = None, scheduler: str | None = None,
              client: object = None, max_enum_cells: int = MAX_ENUM_CELLS, plots: bool = True, verify: bool = True,
              progress: Callable[[dict], object] | None = None) -> SweepResult:
    """Sweep a capture: per pair alpha*, each rule's exact acceptance and gap; aggregates, table, JSON, Parquet, PNG.

    Parameters
    ----------
    capture : a capture folder (or an opened :class:`~otlp.sweep.loader.Capture`).
    ns : draft counts. verifiers : "all" (every one-token rule but ``optimal``), or names. top_ks : draft top-k
        values (0 or None: q untruncated); on a sparse capture at most its stored top-k.
    out : results folder (default ``CAPTURE/sweep``): ``results/`` (saved shard results), ``pairs.parquet``,
        ``sweep.json``, ``sweep_acceptance.png``, ``sweep_gaps.png``.
    workers : local processes (default: the machine's cores); ignored with ``scheduler`` / ``client``.
    scheduler : address of a Dask scheduler (``tcp://host:8786``); client : a ``dask.distributed.Client``.
    max_enum_cells : budget of a rule whose exact acceptance enumerates the draft support (per pair).
    progress : called with a dict (shards, pairs, pairs_per_second, eta, ...) after every shard.

    Raises ``InputError`` on a bad capture or parameters, :class:`BadShards` after computing every good shard when
    some shards are bad, :class:`SweepInterrupted` on Ctrl-C (results saved). A top-k >= V keeps all of q: it runs
    as untruncated, and ``report["notes"]`` says so.
    """
    _deps.pyarrow()
    check_ns(ns)
    cap = capture if isinstance(capture, Capture) else open_capture(capture, check_shards=False)
    ns = tuple(int(n) for n in ns)
    if any(k is not None and int(k) < 0 for k in top_ks):
        raise InputError(f"--top-k values must be >= 1 (or all), got {list(top_ks)}")
    ks = tuple(0 if (k is None or k >= cap.V) else int(k) for k in top_ks)
    notes = [f"--top-k {k} >= V = {cap.V} keeps all of q: run as untruncated (q_top_k 0, the same as 'all')"
             for k in top_ks if k is not None and k >= cap.V]
    if cap.storage == "sparse":
        over = [k for k in ks if k > int(cap.top_k)]
        if over:
            raise InputError(f"--top-k {over[0]} exceeds the capture's stored top-k {cap.top_k} (sparse storage "
                             f"keeps the top {cap.top_k} of q); use values <= {cap.top_k} or a dense capture")
    params = SweepParams(ns=ns, verifiers=resolve_verifiers(verifiers), top_ks=tuple(dict.fromkeys(ks)),
                         max_enum_cells=int(max_enum_cells))
    nominal = nominal_width(cap.V, cap.storage, cap.top_k)
    out_dir = _check_out(Path(out) if out is not None else cap.path / "sweep")
    shards = cap.shards
    keys = [shard_key(s, params, nominal) for s in shards]
    paths = [out_dir / RESULTS / f"{k}.parquet" for k in keys]
    start = time.perf_counter()
    bar = _Progress(len(shards), cap.rows, progress)
    loaded: dict[int, tuple[dict, dict]] = {}
    pending = []
    for i, path in enumerate(paths):
        saved = _load(path) if path.is_file() else None
        if saved is None:
            pending.append(i)
        else:
            loaded[i] = saved  # resumed: nothing to compute
    for i in sorted(loaded):
        bar.update(shards[i].rows, computed=False)
    bad: dict[int, str] = {}  # shard -> what is wrong with it; the good shards are computed first
    for i in pending:
        problem = shard_problem(cap.path, shards[i])
        if problem is not None:
            bad[i] = problem
    pending = [i for i in pending if i not in bad]

    def submit_args(i: int) -> tuple:
        s = shards[i]
        return (str(cap.shard_path(i)), (s.file, s.rows, s.bytes, s.sha256), cap.V, cap.storage, params, nominal,
                verify)

    def on_done(i: int, result: tuple[dict, dict]) -> None:
        cols, errors = result
        _save(paths[i], cols, errors)
        bar.update(shards[i].rows, computed=True)

    def on_fail(i: int, exc: InputError) -> None:
        bad[i] = str(exc).replace(repr(str(cap.shard_path(i))), shards[i].file)

    reused = len(loaded)
    try:
        if pending and (client is not None or scheduler is not None):
            own = None
            if client is None:
                dd = _deps.distributed()
                try:
                    own = client = dd.Client(scheduler, timeout="20s")
                except (OSError, TimeoutError, ValueError) as exc:
                    raise InputError(f"--scheduler {scheduler!r}: cannot connect ({exc})") from None
            try:
                _run_dask(pending, submit_args, client, on_done, on_fail)
            finally:
                if own is not None:
                    own.close()
        elif pending:
            _run_local(pending, submit_args, workers or os.cpu_count() or 1, on_done, on_fail)
    except KeyboardInterrupt:
        done = sum(p.is_file() for p in paths)
        raise SweepInterrupted(done, len(shards), out_dir) from None
    if bad:
        raise BadShards(bad, len(shards), len(pending) - sum(i in bad for i in pending), reused, out_dir)
    report = _assemble(cap, params, paths, out_dir, plots)
    report.update({"notes": notes, "shards": len(shards), "computed": len(pending), "reused": reused,
                   "seconds": time.perf_counter() - start,
                   "pairs_per_second": (sum(shards[i].rows for i in pending) / (time.perf_counter() - start))
                   if pending else None})
    (out_dir / "sweep.json").write_text(json.dumps(report, indent=1))
    return SweepResult(report, out_dir, out_dir / "pairs.parquet")


def _assemble(cap: Capture, params: SweepParams, paths: list[Path], out_dir: Path, plots: bool) -> dict:
    """Stream the saved shard results in shard order into ``pairs.parquet`` and the aggregates."""
    pa = _deps.pyarrow()
    pq = _deps.parquet()
    agg = Aggregate(list(params.verifiers))
    errors: dict[str, list] = {}
    models: set = set()
    writer = None
    tmp = out_dir / f".pairs.parquet.{os.getpid()}.tmp"
    try:
        for i, path in enumerate(paths):
            loaded = _load(path)
            if loaded is None:
                raise InputError(f"the saved result {path} of shard {i} cannot be read; delete it and run again")
            cols, errs = loaded
            for name, (count, message) in errs.items():
                entry = errors.setdefault(name, [0, message])
                entry[0] += count
            agg.add(cols)
            table = pa.table({"shard": np.full(len(cols["n"]), i, dtype=np.int32), **cols})
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        os.replace(tmp, out_dir / "pairs.parquet")
    del models
    report = {
        "capture": {"path": str(cap.path), "V": cap.V, "storage": cap.storage, "top_k": cap.top_k,
                    "rows": cap.rows, "schema_version": cap.manifest["schema_version"],
                    "provenance": cap.manifest.get("provenance", {})},
        "n": list(params.ns), "verifiers": list(params.verifiers), "q_top_ks": list(params.top_ks),
        "params": asdict(params), "summary": agg.summary(), "max_tail_bound": agg.max_tail_bound,
        "skipped": {k: {str(n): r for n, r in v.items()}
                    for k, v in skipped_rules(params, nominal_width(cap.V, cap.storage, cap.top_k)).items()},
        "errors": errors, "out": str(out_dir), "pairs_parquet": str(out_dir / "pairs.parquet"),
        "columns": {"int": list(INT_META), "float": list(FLOAT_META)},
    }
    report["png"] = plot(report, agg.hist, out_dir) if plots and cap.rows else []
    return report
