"""Several threads opening the analytics views at once (the web UI serves requests on a pool):
each must get a working, confined connection. Before `connect` serialised itself, a second
connection to the shared view database could find it half confined and fail on `SET` ("the
configuration has been locked"), or read a view file being replaced."""

from __future__ import annotations

import threading
from pathlib import Path

from blackbox.analytics.views import connect
from blackbox.recorder.store import open_store

from tests.fixtures.analytics_kit import Session, copy_for


def test_connect_from_many_threads_at_once(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    s = Session()
    s.handshake()
    s.call("echo", 10, 5)
    s.end(20)
    s.save(store)
    copy = copy_for(store, tmp_path / "analytics")
    copy.refresh(store)
    errors: list[BaseException] = []
    for _round in range(3):
        # A fresh view file each round (the key includes the window), opened by 8 threads.
        window = 60.0 + _round
        barrier = threading.Barrier(8)

        def open_and_query(window: float = window, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait()
                con = connect(copy, window)
                try:
                    assert con.execute("SELECT count(*) FROM calls").fetchone() == (2,)
                finally:
                    con.close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_and_query) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    store.close()
    assert not errors, errors[:3]
