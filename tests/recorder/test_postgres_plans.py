"""PostgreSQL's planner against the store's per-session queries (docs/performance.md,
"PostgreSQL verify to 10M"): what made `verify` slow down as the log grew, held off."""

from __future__ import annotations

from blackbox.recorder.store import open_store

from tests.fixtures.storekit import session_events


def test_every_connection_of_the_store_runs_without_jit(pg_url: str) -> None:
    """The server compiles any query whose estimated cost passes `jit_above_cost`; on a large
    log each of verify's per-session queries paid for that. The server's default is on."""
    store = open_store(pg_url)
    store.append(session_events(calls=2))
    try:
        with store.engine.connect() as a, store.engine.connect() as b:
            assert a.exec_driver_sql("SHOW jit").scalar() == "off"
            assert b.exec_driver_sql("SHOW jit").scalar() == "off"
    finally:
        store.close()
