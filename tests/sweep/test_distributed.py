"""Local-first, distributed beyond: the same results bit for bit on one process, a local process pool and a Dask
LocalCluster of 2 worker processes; a worker killed mid-sweep; a re-run that computes nothing; an interrupt that
keeps every finished shard."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from tests.sweep.conftest import assert_identical, lm_pairs, results, write_capture

pytest.importorskip("pyarrow")
distributed = pytest.importorskip("dask.distributed")

RULES = "sps,rrs,kseq,spechub,greedy,rrs_wor,is"
KW = {"ns": (1, 2, 4), "verifiers": RULES, "top_ks": (0, 6), "plots": False}


@pytest.fixture(scope="module")
def capture(tmp_path_factory):  # noqa: ANN001, ANN201
    rng = np.random.default_rng(7)
    p, q = lm_pairs(rng, 240, 96)
    return write_capture(tmp_path_factory.mktemp("cap") / "cap", p, q, storage="sparse", top_k=24, shard_rows=20,
                         depth=np.arange(240) % 4)


@pytest.fixture(scope="module")
def reference(capture, tmp_path_factory):  # noqa: ANN001, ANN201
    from otlp.sweep import run_sweep

    out = tmp_path_factory.mktemp("ref")
    res = run_sweep(capture, out=out, workers=1, **KW)
    assert res.report["computed"] == 12
    return results(res.pairs_path), res.report


@pytest.fixture(scope="module")
def cluster():  # noqa: ANN201
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as lc, distributed.Client(lc) as client:
        yield client


def test_local_pool_equals_one_process(capture, reference, tmp_path):  # noqa: ANN001
    from otlp.sweep import run_sweep

    res = run_sweep(capture, out=tmp_path, workers=2, **KW)
    assert_identical(results(res.pairs_path), reference[0])
    assert res.report["summary"] == reference[1]["summary"]


def test_local_cluster_equals_local_bit_for_bit(capture, reference, cluster, tmp_path):  # noqa: ANN001
    from otlp.sweep import run_sweep

    res = run_sweep(capture, out=tmp_path, client=cluster, **KW)
    assert res.report["computed"] == 12
    assert_identical(results(res.pairs_path), reference[0])
    assert res.report["summary"] == reference[1]["summary"]
    # the same through --scheduler ADDRESS (a client of our own, closed after)
    again = run_sweep(capture, out=tmp_path / "addr", scheduler=cluster.scheduler.address, **KW)
    assert_identical(results(again.pairs_path), reference[0])


def test_worker_killed_mid_sweep_still_gives_the_complete_result(capture, reference, cluster, tmp_path):
    # noqa: ANN001
    from otlp.sweep import run_sweep

    killed: list[int] = []
    pids_before = set(cluster.run(os.getpid).values())

    def kill_a_busy_worker(state: dict) -> None:
        if killed or state["shards"] < 1:
            return
        busy = [w for w, keys in cluster.processing().items() if keys]
        if not busy:
            return
        pid = cluster.run(os.getpid, workers=[busy[0]])[busy[0]]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    res = run_sweep(capture, out=tmp_path, client=cluster, progress=kill_a_busy_worker, **KW)
    assert killed, "no worker was busy when the first shard finished"
    assert res.report["computed"] == 12
    assert_identical(results(res.pairs_path), reference[0])
    deadline = time.time() + 30  # the nanny restarts the killed worker
    while time.time() < deadline and len(cluster.scheduler_info()["workers"]) < 2:
        time.sleep(0.2)
    assert killed[0] in pids_before and killed[0] not in set(cluster.run(os.getpid).values())


def test_rerun_recomputes_nothing(capture, reference, tmp_path, monkeypatch):  # noqa: ANN001
    import otlp.sweep.runner as runner
    from otlp.sweep import run_sweep

    first = run_sweep(capture, out=tmp_path, workers=1, **KW)
    assert first.report["computed"] == 12

    def forbidden(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a saved shard was computed again")

    monkeypatch.setattr(runner, "shard_task", forbidden)
    again = run_sweep(capture, out=tmp_path, workers=1, **KW)
    assert (again.report["computed"], again.report["reused"]) == (0, 12)
    assert_identical(results(again.pairs_path), reference[0])
    # other parameters are other keys: n = 8 added computes every shard again
    monkeypatch.undo()
    other = run_sweep(capture, out=tmp_path, workers=1, **{**KW, "ns": (1, 2, 4, 8), "verifiers": "rrs"})
    assert other.report["computed"] == 12


def test_interrupt_keeps_finished_shards_and_resumes(capture, reference, tmp_path):  # noqa: ANN001
    from otlp.sweep import run_sweep
    from otlp.sweep.runner import SweepInterrupted

    def stop_after_three(state: dict) -> None:
        if state["shards"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(SweepInterrupted) as info:
        run_sweep(capture, out=tmp_path, workers=1, progress=stop_after_three, **KW)
    assert (info.value.done, info.value.total) == (3, 12)
    assert not (tmp_path / "pairs.parquet").exists()
    res = run_sweep(capture, out=tmp_path, workers=1, **KW)
    assert (res.report["computed"], res.report["reused"]) == (9, 3)
    assert_identical(results(res.pairs_path), reference[0])
