"""Host threads for the CPU samplers' chunks (otlp/backend/threads.py): results in the items' order, on several threads
only when torch has several."""

from __future__ import annotations

import threading
import time

import pytest

from otlp.backend import threads

pytest.importorskip("torch")


def _record(seen: list):  # noqa: ANN202
    def fn(x: int) -> int:
        seen.append(threading.get_ident())
        time.sleep(0.01 * (x % 3))  # later items may finish first
        return x * x
    return fn


def test_results_keep_the_items_order_on_several_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "count", lambda: 3)
    seen: list = []
    assert threads.map_chunks(_record(seen), range(10)) == [x * x for x in range(10)]
    assert threading.get_ident() not in seen and len(set(seen)) > 1


def test_one_thread_or_one_item_runs_on_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list = []
    monkeypatch.setattr(threads, "count", lambda: 1)
    assert threads.map_chunks(_record(seen), range(4)) == [0, 1, 4, 9]
    monkeypatch.setattr(threads, "count", lambda: 4)
    assert threads.map_chunks(_record(seen), [5]) == [25]
    assert set(seen) == {threading.get_ident()}


def test_the_count_follows_torchs_threads() -> None:
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert threads.count() == 1
    finally:
        torch.set_num_threads(before)
    assert threads.count() == before


def test_chunk_rows_caps_a_chunk_and_gives_each_thread_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """chunk_rows: at most ``most`` rows a chunk, few enough rows that each of the threads gets a chunk, and one row
    at least (a row wider than the cap, or no rows)."""
    monkeypatch.setattr(threads, "count", lambda: 3)
    assert threads.chunk_rows(64, 100) == 22  # 3 chunks, one per thread
    assert threads.chunk_rows(64, 8) == 8  # the cap
    assert threads.chunk_rows(2, 100) == 1  # fewer rows than threads
    assert threads.chunk_rows(5, 0) == 1 and threads.chunk_rows(0, 4) == 1
