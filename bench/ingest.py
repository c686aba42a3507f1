"""Ingest and verify throughput of the event store (not a test: prints figures).

Appends realistic 1 KiB JSON-RPC frames in batches of 1,000 into SQLite and PostgreSQL through the
store API (classification, hashing, the sessions projection, triggers and indexes included), and
times `verify` over one 100k-frame session. The baselines, measured in the same run, are a bare
`executemany` of the same bytes into a one-table SQLite database and a bare `COPY` of the same
rows into a one-table PostgreSQL database (no derived fields, no chain, no index): the floor any
store on each engine could reach. The bare SQLite file has the store's own page size and pragmas
(`blackbox.recorder.store.sqlite.tune`: 16 KiB pages, WAL, synchronous NORMAL, the store's
checkpoint and journal limits, its memory map), so that only the rows differ. PostgreSQL's floor is
a binary COPY, as the store's own append uses; a text COPY, the baseline of the figures before that,
is printed beside it.

A second baseline on each engine inserts the store's own full rows (every column, derived and
hashed beforehand) bare into the store's own schema, indexes and triggers included: what the
schema costs, so that the rest of the gap is the store's Python (deriving, chaining, the sessions
row). Figures before 2026-12-06 had the bare SQLite table in SQLite's default 4 KiB pages
against the store's 16 KiB: the store's rows bare into its schema could beat it, and the ratio of
the store's append to it swung from run to run (docs/performance.md).

    python bench/ingest.py [--frames 100000] [--pg postgresql://postgres@127.0.0.1/test]
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import psycopg
from blackbox.recorder.log import chain
from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.store import EventStore, open_store
from blackbox.recorder.store.layout import COPY_TYPES, ROW_COLUMNS, encode_row
from blackbox.recorder.store.postgres import use_c_bytea_dumper
from blackbox.recorder.store.projection import events_row
from blackbox.recorder.store.sqlite import PAGE_SIZE, tune

BATCH = 1000


def frames(n: int, session_id: str) -> list[NewEvent]:
    filler = "x" * 926
    out = []
    for seq in range(1, n + 1):
        if seq % 2:
            msg = {
                "jsonrpc": "2.0",
                "id": seq,
                "method": "tools/call",
                "params": {"name": "search", "arguments": {"query": filler}},
            }
            direction = Direction.CLIENT_TO_SERVER
        else:
            msg = {
                "jsonrpc": "2.0",
                "id": seq - 1,
                "result": {"content": [{"type": "text", "text": filler}], "isError": False},
            }
            direction = Direction.SERVER_TO_CLIENT
        raw = json.dumps(msg, separators=(",", ":")).encode()
        out.append(
            NewEvent(session_id, seq, time.time_ns(), seq * 1000, Kind.FRAME, direction, raw)
        )
    return out


def sqlite_file(path: Path) -> sqlite3.Connection:
    """A connection to a SQLite file with the store's own page size and pragmas."""
    conn = sqlite3.connect(path, isolation_level=None)
    tune(conn)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    return conn


def baseline(events: list[NewEvent], path: Path) -> float:
    """A bare `executemany` of (session_id, seq, raw) into a one-table SQLite file, no index."""
    conn = sqlite_file(path)
    conn.execute("CREATE TABLE t (sid TEXT, seq INTEGER, raw BLOB)")
    start = time.perf_counter()
    for i in range(0, len(events), BATCH):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO t VALUES (?, ?, ?)",
            [(e.session_id, e.seq, e.raw) for e in events[i : i + BATCH]],
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return len(events) / elapsed


def baseline_copy(events: list[NewEvent], admin_db: str, binary: bool) -> float:
    """A bare COPY of (session_id, seq, raw) into a one-table PostgreSQL database, in batches,
    in text format (the baseline of the figures before binary COPY) or binary (the floor)."""
    sql = "COPY t (sid, seq, raw) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")
    with psycopg.connect(admin_db) as conn:
        conn.execute("DROP TABLE IF EXISTS t")
        conn.execute("CREATE TABLE t (sid TEXT, seq BIGINT, raw BYTEA)")
        conn.commit()
        use_c_bytea_dumper(conn)
        start = time.perf_counter()
        for i in range(0, len(events), BATCH):
            with conn.cursor() as cur, cur.copy(sql) as copy:
                if binary:
                    copy.set_types(["text", "int8", "bytea"])
                for e in events[i : i + BATCH]:
                    copy.write_row((e.session_id, e.seq, e.raw))
            conn.commit()
        return len(events) / (time.perf_counter() - start)


def full_rows(events: list[NewEvent]) -> list[tuple]:
    """The store's events rows for `events` (one session from seq 1), as its append makes them
    (`layout.ROW_COLUMNS`)."""
    head, rows = chain.genesis(events[0].session_id), []
    for ev in events:
        head = chain.link(head, ev)
        rows.append(encode_row(events_row(ev, head)))
    return rows


# The SQL type of each of the log table's columns, for a bare table of the same columns.
_SQLITE_TYPES = {"int8": "INTEGER", "int2": "INTEGER", "bytea": "BLOB", "bool": "INTEGER"}


def column_types(sqlite: bool) -> list[str]:
    """The SQL type of each of the log table's columns (`layout.ROW_COLUMNS`), on either engine."""
    types = [COPY_TYPES[c] for c in ROW_COLUMNS]
    return [_SQLITE_TYPES.get(t, "TEXT") for t in types] if sqlite else types


def bare_table(sqlite: bool) -> str:
    """CREATE TABLE t of the log table's columns, with no key, index or trigger."""
    columns = (f"{c} {t}" for c, t in zip(ROW_COLUMNS, column_types(sqlite), strict=True))
    return f"CREATE TABLE t ({', '.join(columns)})"


def same_columns_baseline(events: list[NewEvent], path: Path) -> float:
    """The issue's floor on SQLite: the store's full rows, computed beforehand, bare
    `executemany` into a table of the same columns (no key, no index, no trigger)."""
    rows = full_rows(events)
    conn = sqlite_file(path)
    conn.execute(bare_table(sqlite=True))
    insert = f"INSERT INTO t VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
    start = time.perf_counter()
    executemany_batches(conn, insert, rows, "BEGIN")
    elapsed = time.perf_counter() - start
    conn.close()
    return len(rows) / elapsed


def executemany_batches(conn: sqlite3.Connection, insert: str, rows: list, begin: str) -> None:
    """`rows` inserted BATCH at a time, each batch its own transaction opened with `begin`."""
    for i in range(0, len(rows), BATCH):
        conn.execute(begin)
        conn.executemany(insert, rows[i : i + BATCH])
        conn.execute("COMMIT")


def copy_batches(conn: psycopg.Connection, sql: str, rows: list, types: list[str]) -> None:
    """`rows` by binary `COPY` (`sql`), BATCH at a time, each batch its own transaction, bytea
    dumped by psycopg's compiled dumper as the store's own COPY does (its default by type is a
    pure-Python one: a floor that formats rows slower than the store would flatter the store)."""
    use_c_bytea_dumper(conn)
    for i in range(0, len(rows), BATCH):
        with conn.cursor() as cur, cur.copy(sql) as copy:
            copy.set_types(types)
            for row in rows[i : i + BATCH]:
                copy.write_row(row)
        conn.commit()


def same_columns_copy(events: list[NewEvent], bare_db: str) -> float:
    """The issue's floor on PostgreSQL: binary COPY of the store's full rows into a table of
    the same columns (no key, no index, no trigger)."""
    rows = full_rows(events)
    types = column_types(sqlite=False)
    with psycopg.connect(bare_db) as conn:
        conn.execute("DROP TABLE IF EXISTS t")
        conn.execute(bare_table(sqlite=False))
        conn.commit()
        start = time.perf_counter()
        copy_batches(conn, "COPY t FROM STDIN (FORMAT BINARY)", rows, types)
        elapsed = time.perf_counter() - start
        conn.execute("DROP TABLE t")
        conn.commit()
        return len(rows) / elapsed


def sqlite_bytes(path: Path) -> int:
    """The store file's bytes once its write-ahead log is checkpointed into it."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def postgres_bytes(bare_db: str) -> int:
    """The log's tables and their indexes (TOAST included) in the store's database."""
    with psycopg.connect(bare_db, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).fetchone()
        return int(row[0] or 0)


def schema_baseline(events: list[NewEvent], path: Path) -> float:
    """The store's full rows, computed beforehand, bare `executemany` into the store's schema."""
    open_store(f"sqlite:///{path}").close()  # the schema, its pragmas and page size laid down
    rows = full_rows(events)
    conn = sqlite_file(path)
    insert = (
        f"INSERT INTO events ({', '.join(ROW_COLUMNS)}) "
        f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
    )
    start = time.perf_counter()
    executemany_batches(conn, insert, rows, "BEGIN IMMEDIATE")
    elapsed = time.perf_counter() - start
    conn.close()
    return len(rows) / elapsed


def schema_baseline_copy(events: list[NewEvent], store_url: str, bare_db: str) -> float:
    """The store's full rows, computed beforehand, bare binary `COPY` into the store's schema."""
    open_store(store_url).close()
    rows = full_rows(events)
    copy_sql = f"COPY events ({', '.join(ROW_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
    types = column_types(sqlite=False)
    with psycopg.connect(bare_db) as conn:
        start = time.perf_counter()
        copy_batches(conn, copy_sql, rows, types)
        return len(rows) / (time.perf_counter() - start)


def append_rate(store: EventStore, events: list[NewEvent]) -> float:
    """Frames a second the store's append takes `events` at, BATCH at a time."""
    start = time.perf_counter()
    for i in range(0, len(events), BATCH):
        store.append(events[i : i + BATCH])
    return len(events) / (time.perf_counter() - start)


def alternating(rounds: int, n: int, tmp: Path, pg_url: str, bare_db: str) -> list[tuple]:
    """Issue 39's two ingest ratios, `rounds` times, each append right after its floor: a
    shared machine's load then lands on both alike (a single pass of each swung 0.32-0.69x).
    Returns (SQLite append / same-columns executemany, PostgreSQL append / same-columns binary
    COPY) per round."""
    out = []
    sqlite_store, pg_store = open_store(f"sqlite:///{tmp}/rounds.db"), open_store(pg_url)
    try:
        for r in range(rounds):
            floor = same_columns_baseline(frames(n, new_session_id()), tmp / f"same{r}.db")
            sqlite = append_rate(sqlite_store, frames(n, new_session_id()))
            pg_floor = same_columns_copy(frames(n, new_session_id()), bare_db)
            pg = append_rate(pg_store, frames(n, new_session_id()))
            out.append((sqlite / floor, pg / pg_floor))
    finally:
        sqlite_store.close()
        pg_store.close()
    return out


def ingest(url: str, events: list[NewEvent]) -> tuple[float, float]:
    store = open_store(url)
    rate = append_rate(store, events)
    start = time.perf_counter()
    findings = store.verify(events[0].session_id)
    verify_rate = len(events) / (time.perf_counter() - start)
    assert findings == [], findings
    store.close()
    return rate, verify_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds of issue 39's ingest ratios"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = baseline(frames(args.frames, new_session_id()), Path(tmp) / "base.db")
        schema_base = schema_baseline(frames(args.frames, new_session_id()), Path(tmp) / "s.db")
        same_base = same_columns_baseline(
            frames(args.frames, new_session_id()), Path(tmp) / "same.db"
        )
        stored = frames(args.frames, new_session_id())
        raw_bytes = sum(len(ev.raw) for ev in stored)
        sqlite_rate, sqlite_verify = ingest(f"sqlite:///{tmp}/store.db", stored)
        sqlite_size = sqlite_bytes(Path(tmp) / "store.db")
    # A scratch database through the driver itself: creating databases is no store operation.
    admin = args.pg.replace("postgresql+psycopg:", "postgresql:", 1)
    db = f"bbbench_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    try:
        pg_url = f"{args.pg.rsplit('/', 1)[0]}/{db}"
        bare_db = f"{admin.rsplit('/', 1)[0]}/{db}"
        pg_text = baseline_copy(frames(args.frames, new_session_id()), bare_db, binary=False)
        pg_base = baseline_copy(frames(args.frames, new_session_id()), bare_db, binary=True)
        with psycopg.connect(bare_db, autocommit=True) as conn:
            conn.execute("DROP TABLE t")
        pg_same = same_columns_copy(frames(args.frames, new_session_id()), bare_db)
        pg_schema_base = schema_baseline_copy(
            frames(args.frames, new_session_id()), pg_url, bare_db
        )
        with psycopg.connect(bare_db, autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
        pg_rate, pg_verify = ingest(pg_url, stored)
        pg_size = postgres_bytes(bare_db)
        with tempfile.TemporaryDirectory() as tmp:
            rounds = alternating(args.rounds, args.frames, Path(tmp), pg_url, bare_db)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    size = len(frames(1, "x")[0].raw)
    print(f"{args.frames:,} frames of {size} bytes, batches of {BATCH}")
    print(f"{'':34}{'frames/s':>12}{'vs bare sqlite':>16}")
    rows = [
        ("bare sqlite executemany (baseline)", base),
        ("store append, SQLite", sqlite_rate),
        ("store append, PostgreSQL", pg_rate),
        ("verify, SQLite", sqlite_verify),
        ("verify, PostgreSQL", pg_verify),
    ]
    for label, rate in rows:
        print(f"{label:34}{rate:>12,.0f}{rate / base:>15.2f}x")
    print(f"{'bare PostgreSQL COPY, text':34}{pg_text:>12,.0f}{pg_text / base:>15.2f}x")
    print(f"{'bare PostgreSQL COPY, binary (base)':34}{pg_base:>12,.0f}{pg_base / base:>15.2f}x")
    print(f"{'store rows bare, SQLite schema':34}{schema_base:>12,.0f}{schema_base / base:>15.2f}x")
    print(
        f"{'store rows bare, PostgreSQL schema':34}{pg_schema_base:>12,.0f}"
        f"{pg_schema_base / base:>15.2f}x"
    )
    print(
        f"store append / bare: SQLite {sqlite_rate / base:.2f}x executemany, "
        f"PostgreSQL {pg_rate / pg_base:.2f}x binary COPY ({pg_rate / pg_text:.2f}x text COPY)"
    )
    print(
        f"store rows bare / bare (the schema): SQLite {schema_base / base:.2f}x, "
        f"PostgreSQL {pg_schema_base / pg_base:.2f}x"
    )
    print(
        f"store append / store rows bare (the store's Python): SQLite "
        f"{sqlite_rate / schema_base:.2f}x, PostgreSQL {pg_rate / pg_schema_base:.2f}x"
    )
    print(
        f"{'same rows bare, same columns, SQLite':34}{same_base:>12,.0f}{same_base / base:>15.2f}x"
    )
    print(f"{'same rows bare, same columns, PG':34}{pg_same:>12,.0f}{pg_same / base:>15.2f}x")
    print("issue 39 point 1 (record format v2):")
    print(
        f"  SQLite append / executemany of the same rows into a table of the same columns: "
        f"{sqlite_rate / same_base:.2f}x (goal >= 0.7)"
    )
    print(
        f"  PostgreSQL append / binary COPY of the same rows, same columns: "
        f"{pg_rate / pg_same:.2f}x (goal >= 0.9)"
    )
    print(
        f"  store bytes / raw bytes ({raw_bytes:,} raw): SQLite {sqlite_size / raw_bytes:.3f}x, "
        f"PostgreSQL {pg_size / raw_bytes:.3f}x (goal <= 1.2)"
    )
    print(
        f"  the two ratios in {len(rounds)} alternating rounds (each append right after its floor):"
    )
    for i, (sqlite_ratio, pg_ratio) in enumerate(rounds, 1):
        print(f"    round {i}: SQLite {sqlite_ratio:.2f}x, PostgreSQL {pg_ratio:.2f}x")
    if rounds:
        print(
            f"    median: SQLite {statistics.median(r[0] for r in rounds):.2f}x (goal >= 0.7), "
            f"PostgreSQL {statistics.median(r[1] for r in rounds):.2f}x (goal >= 0.9)"
        )


if __name__ == "__main__":
    main()
