"""Several `blackbox record` taps at once into one store, on each backend: every tap's store worker
takes the same write lock (PostgreSQL's log lock, SQLite's file lock), so this is where a starved
lock holder or a lost batch would show. A fleet's speed is bench/fleet.py's; this guards that
nothing is lost and every chain verifies."""

from __future__ import annotations

import threading
from pathlib import Path

from blackbox.recorder.store import open_store

from tests.fixtures import peers
from tests.fixtures.taps import EXAMPLE_CALLS, wait_sealed

TAPS = 4


def test_taps_at_once_into_one_store_lose_nothing(tmp_path: Path, store_url: str) -> None:
    outcomes: dict[int, object] = {}
    errors: list[BaseException] = []

    def drive(i: int) -> None:
        try:
            env = peers.tap_env(tmp_path / f"home-{i}", store_url)
            argv = peers.record_command(peers.EXAMPLE_SERVER, f"fleet-{i}")
            outcomes[i] = peers.run_client("legacy", peers.params(argv, env), EXAMPLE_CALLS * 4)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(TAPS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(outcomes) == TAPS

    store = open_store(store_url)
    sessions = wait_sealed(store, TAPS)
    assert sorted(s.name for s in sessions) == [f"fleet-{i}" for i in range(TAPS)]
    for info in sessions:
        records = list(store.read_session(info.session_id))
        assert [ev.seq for ev in records] == list(range(1, len(records) + 1))
        calls = [ev.tool for ev in records if ev.method == "tools/call"]
        assert calls == [name for name, _ in EXAMPLE_CALLS * 4]
    assert store.verify() == []
    store.close()
