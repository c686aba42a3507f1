"""PostgreSQL's planner against the store's per-session queries (docs/performance.md,
"PostgreSQL verify to 10M"): what made `verify` slow down as the log grew, held off."""

from __future__ import annotations

import dataclasses

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


def test_copy_dumps_bytea_with_the_compiled_dumper_and_keeps_every_byte(pg_url: str) -> None:
    """The append's binary COPY finds its dumpers by type; psycopg's registry answers `bytea` with
    the pure-Python dumper of its DB-API `Binary` wrapper unless the compiled one is registered
    again on the connection (2.5x the row formatting). The bytes must come back as they went in."""
    from psycopg.pq import Format

    store = open_store(pg_url)
    try:
        raw = bytes(range(256)) * 3 + b"\x00\xff"
        evs = session_events(calls=1)
        evs = [evs[0], dataclasses.replace(evs[1], raw=raw), *evs[2:]]
        store.append(evs)
        with store.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            dumper = driver.adapters.get_dumper_by_oid(17, Format.BINARY)  # type: ignore[union-attr]
            assert dumper.__module__.startswith("psycopg_binary"), dumper
        stored = list(store.read_session(evs[0].session_id))
        assert stored[1].raw == raw
        assert store.verify() == []
    finally:
        store.close()
