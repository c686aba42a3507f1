"""The store worker ships at idle priority but never holds the store's write lock idle: a first
open migrates a new store under that lock, and an idle holder on a busy machine kept every other
writer waiting until it gave up ("database is locked")."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from blackbox.recorder.capture import ship_worker


class _Store:
    def close(self) -> None:
        pass


def test_leftovers_open_the_store_at_the_workers_own_priority(tmp_path: Path, monkeypatch) -> None:
    seen: list[int] = []

    def open_store(url: str) -> _Store:
        seen.append(os.sched_getscheduler(0))  # this thread's class while it opens
        return _Store()

    monkeypatch.setattr("blackbox.recorder.store.open_store", open_store)
    after: list[int] = []

    def leftovers() -> None:
        ship_worker._ship_leftovers_idle("sqlite:///unused.db", tmp_path)
        after.append(os.sched_getscheduler(0))

    # In a thread of its own: the idle class is the calling thread's, never the test's.
    worker = threading.Thread(target=leftovers)
    worker.start()
    worker.join(30)
    assert seen == [os.SCHED_OTHER]
    assert after == [os.SCHED_IDLE]  # and idle again for the shipping itself


class _Recording:
    """A store and a checkpointer that note the calling thread's class at each call."""

    def __init__(self) -> None:
        self.classes: list[tuple[str, int]] = []

    def append(self, batch: list) -> None:
        self.classes.append(("append", os.sched_getscheduler(0)))

    def after_append(self, store: object, batch: list) -> None:
        self.classes.append(("checkpoint", os.sched_getscheduler(0)))


def test_the_storing_thread_appends_and_signs_at_the_workers_own_priority() -> None:
    """Both hold a lock every other writer waits for: signed idle, a fleet of taps each signing
    every second stalled on one PostgreSQL (bench/fleet.py --checkpoint-every 1)."""
    seen = _Recording()
    after: list[int] = []

    def storing() -> None:
        ship_worker.idle_thread_priority()  # as the storing thread runs between batches
        ship_worker.store_batch(seen, [], seen)  # type: ignore[arg-type]
        after.append(os.sched_getscheduler(0))

    worker = threading.Thread(target=storing)
    worker.start()
    worker.join(30)
    assert seen.classes == [("append", os.SCHED_OTHER), ("checkpoint", os.SCHED_OTHER)]
    assert after == [os.SCHED_IDLE]
