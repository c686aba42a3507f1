"""The PostgreSQL event store (through psycopg 3), for a team's shared log.

What PostgreSQL needs of its own: an append takes an EXCLUSIVE lock on the log, so log positions
become visible in commit order and an incremental reader that remembers the last position it saw can
never skip a record committed late (the approach of eventsourcing's recorder); rows go in by COPY;
and a long chain is verified by the server, one connection per run, hashing the same canonical
bytes as `chain.canonical`.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import psycopg
from blackbox.recorder.log import Kind, chain
from blackbox.recorder.store.layout import COPY_TYPES, ROW_COLUMNS, sid_bytes
from blackbox.recorder.store.schema import events
from blackbox.recorder.store.sql import SqlEventStore
from sqlalchemy import create_engine, event, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.url import URL

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIConnection, DBAPICursor

# Binary COPY: in text format every raw byte goes over as two hex digits, formatted in Python,
# and psycopg's row formatting becomes a large share of an append.
_COPY = f"COPY events ({', '.join(ROW_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COPY_TYPES = [COPY_TYPES[name] for name in ROW_COLUMNS]


class PostgresEventStore(SqlEventStore):
    """The event store in a PostgreSQL database (the schema on the connection's search path)."""

    MARK = "%s"
    DRIVER_ERRORS = (psycopg.Error,)
    # A gap in `position` is no evidence here: an identity column's values are taken from a
    # sequence outside the transaction, so an append that fails after its insert began (a lost
    # connection, a full disk) leaves the values it took unused, and after a crash the sequence
    # resumes up to 32 values further on. Removal on PostgreSQL is for the signed checkpoints.
    GAPS_ARE_EVIDENCE = False

    def _create_engine(self, parsed: URL, create: bool = True) -> Engine:
        engine = create_engine(
            parsed,
            connect_args={"connect_timeout": 5},
            pool_pre_ping=True,
        )
        event.listen(engine, "connect", _no_jit)
        event.listen(engine, "connect", lambda driver, _record: use_c_bytea_dumper(driver))
        return engine

    def _lock_log(self, conn: Connection) -> None:
        conn.exec_driver_sql("LOCK TABLE events IN EXCLUSIVE MODE")

    def _insert_events(self, conn: Connection, rows: Iterable[tuple]) -> None:
        # The psycopg dialect's DBAPI connection is psycopg's own (and one in use holds one).
        driver = cast("psycopg.Connection[Any]", conn.connection.dbapi_connection)
        with driver.cursor() as cursor, cursor.copy(_COPY) as copy:
            copy.set_types(_COPY_TYPES)
            for row in rows:
                copy.write_row(row)

    def _cursor(self, driver: DBAPIConnection) -> DBAPICursor:
        # A named (server-side) cursor streams; a plain one would fetch the whole result first.
        return driver.cursor(name="read_log_rows")

    def _bytes_cursor(self, driver: DBAPIConnection) -> DBAPICursor:
        # Server-side, and in binary: bytea as text is hex, twice the bytes on the wire and a
        # decode per row.
        return driver.cursor(name="verify_records", binary=True)

    def _check_runs(self, session_id: str, runs: list[tuple[int, int]]) -> tuple[bool, int | None]:
        """Each run checked by the server on a connection of its own, so an intact run costs one
        aggregate row on the wire rather than all its raw bytes; the first seal is found in the
        same pass (a query of its own read the session's rows once more)."""
        with ThreadPoolExecutor(len(runs)) as pool:
            checked = list(pool.map(lambda run: self._run_intact(session_id, *run), runs))
        if not all(intact for intact, _seal in checked):
            return False, None
        return True, min((seal for _intact, seal in checked if seal is not None), default=None)

    def _run_intact(self, session_id: str, first: int, last: int) -> tuple[bool, int | None]:
        """Whether the run is intact, and the seq of its first seal."""
        prev: bytes | None
        with self._translated(), self.engine.connect() as conn:
            if first == 1:
                prev = chain.genesis(session_id)
            else:
                prev = conn.execute(
                    select(events.c.hash).where(
                        events.c.sid == sid_bytes(session_id), events.c.seq == first - 1
                    )
                ).scalar()
                if prev is None:
                    return False, None
            # Walk the (session_id, seq) index, which yields seq order: with stale statistics the
            # planner may choose a bitmap scan and an on-disk sort of every raw byte instead, a
            # slower plan.
            conn.exec_driver_sql("SET LOCAL enable_bitmapscan = off")
            conn.exec_driver_sql("SET LOCAL enable_sort = off")
            count, low, high, intact, seal = conn.exec_driver_sql(
                _RUN_CHECK,
                {
                    "sid": sid_bytes(session_id),
                    "first": first,
                    "last": last,
                    "prev": prev,
                    "sealed": str(Kind.SESSION_SEALED),
                },
            ).one()
        ok = bool(intact) and count == last - first + 1 and (low, high) == (first, last)
        return ok, seal


def use_c_bytea_dumper(driver: Any) -> None:
    """Make `driver` (a psycopg connection) dump `bytea` with psycopg's compiled dumper.

    Why: a binary COPY looks its dumpers up by type (`copy.set_types`), and for `bytea` psycopg's
    registry answers with the last dumper registered for that type, the pure-Python one of its
    DB-API `Binary` wrapper, which unwraps a `Binary` and then calls the compiled one. Three bytea
    values a row (sid, raw, hash) went through it: a row's formatting took 1.8 µs instead of
    0.7 (docs/performance.md, "The store worker's CPU"). Registered again, the compiled dumper is
    the one found by type; a `bytes` value is dumped byte for byte as before."""
    from psycopg.types.string import BytesBinaryDumper

    driver.adapters.register_dumper(bytes, BytesBinaryDumper)


def _no_jit(driver: DBAPIConnection, _record: object) -> None:
    """Every connection of the store runs without JIT compilation. The server compiles a query
    whose estimated cost passes `jit_above_cost`, and estimates grow with the table: from about
    5M records the per-session queries of `verify` (each a few milliseconds of work) crossed it
    and each paid tens of milliseconds of compiling, which made `verify` at 10M records half as
    fast per record as at 1M (docs/performance.md, "PostgreSQL verify to 10M"). None of the
    store's queries runs long enough to win the compile back."""
    cursor = driver.cursor()
    try:
        cursor.execute("SET jit = off")
    finally:
        cursor.close()
    driver.commit()


def _utf8(column: str) -> str:
    """`chain._prefix`'s encoding of one text field: its UTF-8 length as two bytes, then it."""
    return f"convert_to({column}, 'UTF8')"


# chain.link in SQL: sha256(previous hash || length-prefixed session, kind, direction || wall_ns,
# mono_ns, raw_size (-1 for none), len(raw) as big-endian int8 || raw). A test checks the two
# agree by tampering on PostgreSQL and expecting the same findings as on SQLite.
_CANONICAL = " || ".join(
    [
        *(f"int2send(octet_length({_utf8(c)})::int2)" for c in ("session_id", "kind", "direction")),
        *(_utf8(c) for c in ("session_id", "kind", "direction")),
        "int8send(wall_ns)",
        "int8send(mono_ns)",
        "int8send(coalesce(raw_size, -1))",
        "int8send(octet_length(raw)::int8)",
        "raw",
    ]
)
_RUN_CHECK = f"""
SELECT count(*), min(seq), max(seq), bool_and(intact), min(seq) FILTER (WHERE sealed) FROM (
    SELECT seq, kind = %(sealed)s AS sealed, hash = sha256(
        coalesce(lag(hash) OVER (ORDER BY seq), %(prev)s) || {_CANONICAL}
    ) AS intact
    FROM event_log WHERE sid = %(sid)s AND seq BETWEEN %(first)s AND %(last)s
) AS links
"""
