"""The SQLite event store: the embedded default, one file beside the user's data.

What SQLite needs of its own: connection pragmas tuned for the log, write transactions that take the
write lock up front, an `executemany` insert, and a long chain verified by child processes reading
the same file (`blackbox.recorder.store.sqlite_chain`), since hashing in CPython is one core's work.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from contextlib import closing, suppress
from pathlib import Path
from typing import Literal, cast

from blackbox.recorder import private_dir, private_file
from blackbox.recorder.store import sqlite_chain
from blackbox.recorder.store.layout import ROW_COLUMNS
from blackbox.recorder.store.sql import SqlEventStore
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.url import URL

# How much write-ahead log a store lets pile up before SQLite checkpoints it, and keeps on disk.
WAL_BYTES = 40 * 1024 * 1024
# The page size of a new store's file, and how much of the file its connections read mapped.
PAGE_SIZE = 16 * 1024
MMAP_BYTES = 256 * 1024 * 1024

_INSERT = (
    f"INSERT INTO events ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
)


def tune(connection: sqlite3.Connection) -> None:
    """The store's pragmas, on each of its connections (and on bench/ingest.py's bare baseline,
    so that it measures the same file settings)."""
    cursor = connection.cursor()
    try:
        # 16 KiB pages for a new file (set before WAL mode, which fixes the page size; an
        # existing store keeps its own): a record is about 1 KiB of raw JSON, and SQLite's
        # default 4 KiB pages make inserting the log's rows markedly slower.
        cursor.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        with suppress(Exception):  # a read-only file keeps its journal mode
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        # Checkpoint (and fsync) every 40 MiB of WAL rather than SQLite's 1,000 pages: fewer,
        # larger checkpoints raise ingest throughput. Counted in bytes, not pages, so the WAL
        # does not grow with the page size: a larger WAL stays on disk and buys no ingest
        # speed. The limit gives the file back after each checkpoint.
        page_size = cursor.execute("PRAGMA page_size").fetchone()[0]
        cursor.execute(f"PRAGMA wal_autocheckpoint = {WAL_BYTES // page_size}")
        cursor.execute(f"PRAGMA journal_size_limit = {WAL_BYTES}")
        # Read the database file through a memory map: verify and the analytics refresh read
        # whole sessions, and a map spares them a read() call per page.
        cursor.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    finally:
        cursor.close()


class SqliteEventStore(SqlEventStore):
    """The event store in one SQLite file (WAL mode)."""

    MARK = "?"
    # sqlite3 raises OverflowError for an integer it cannot bind.
    DRIVER_ERRORS = (sqlite3.Error, OverflowError)

    def _require_existing(self, parsed: URL) -> None:
        # Opening a SQLite file creates it, and the connection's pragmas write to an empty one:
        # a reader checks before anything is opened, and leaves the file exactly as it was.
        assert parsed.database is not None  # `normalise_url` refuses a SQLite URL without one
        path = Path(parsed.database).expanduser()
        if not path.is_file():
            raise self._missing()
        if path.stat().st_size == 0:
            raise self._missing("the file is empty")
        try:
            with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
                found = db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
                ).fetchone()
        except sqlite3.Error:
            return  # not readable this way (a WAL file in a read-only directory): the open says
        if found is None:
            raise self._missing("the file holds no mcp-blackbox schema")

    def _create_engine(self, parsed: URL, create: bool = True) -> Engine:
        if create:
            # Made 0600 before SQLite opens it: SQLite would make it 0644 less the umask, and it
            # gives the -wal and -shm files the main file's mode (recorder/private.py).
            # When the file cannot be made here, SQLite's open says why, as a store error.
            assert parsed.database is not None  # `normalise_url` refuses a URL without one
            path = Path(parsed.database).expanduser()
            folder = private_dir(path.parent)
            with suppress(OSError):
                private_file(folder / path.name)
        # sqlite3's own busy handler waits this long for a lock (`?timeout=N` overrides).
        given = parsed.query.get("timeout", 10)
        timeout = float(given)  # type: ignore[arg-type]  # a repeated one (a tuple) is refused
        engine = create_engine(parsed, connect_args={"timeout": timeout})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
            dbapi_connection.isolation_level = None
            tune(dbapi_connection)

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine

    def _begin_write(self, conn: Connection) -> None:
        # Take the write lock up front: two writers never deadlock upgrading a read lock.
        conn.execution_options(sqlite_begin="IMMEDIATE")

    def _insert_events(self, conn: Connection, rows: Iterable[tuple]) -> None:
        # On the driver's own cursor (the transaction has begun: the sessions rows were read
        # through the connection), its errors translated by `_translated` (DRIVER_ERRORS).
        cursor = _sqlite3(conn).cursor()
        try:
            cursor.executemany(_INSERT, rows)
        finally:
            cursor.close()

    def _check_runs(self, session_id: str, runs: list[tuple[int, int]]) -> tuple[bool, int | None]:
        """The first run checked here, each other by a child process (`sqlite_chain`) reading
        the same file: WAL readers never block one another."""
        found = self._seal_seqs(session_id, runs)
        return found is not None, next((s for s in found or () if s is not None), None)

    def _seal_seqs(self, session_id: str, runs: list[tuple[int, int]]) -> list[int | None] | None:
        """Check `runs` (the first here, each other in a child process); the seq of the first
        seal each holds, or None when any is broken. A child that cannot start or does not
        answer is replaced by checking its run here."""
        database = str(Path(self.engine.url.database or "").expanduser())
        children = [_start_run_check(database, session_id, run) for run in runs[1:]]
        try:
            with self._translated(), self.engine.connect() as conn:
                driver = _sqlite3(conn)
                mine = sqlite_chain.check_run(driver, session_id, *runs[0])
                if mine is None:
                    return None
                seals = [mine[1]]
                for child, run in zip(children, runs[1:], strict=True):
                    answer = _run_check_answer(child)
                    if answer is False:
                        answer = sqlite_chain.check_run(driver, session_id, *run)
                    if answer is None or answer[0] != run[1] - run[0] + 1:
                        return None
                    seals.append(answer[1])
                return seals
        finally:
            for child in children:
                if child is not None and child.poll() is None:
                    child.kill()
                    child.wait()


def _sqlite3(conn: Connection) -> sqlite3.Connection:
    """The driver connection under `conn`: the pysqlite dialect's is sqlite3's own (and a
    connection in use holds one)."""
    return cast(sqlite3.Connection, conn.connection.dbapi_connection)


def _start_run_check(
    database: str, session_id: str, run: tuple[int, int]
) -> subprocess.Popen | None:
    argv = [
        sys.executable,
        "-m",
        "blackbox.recorder.store.sqlite_chain",
        database,
        session_id,
        *map(str, run),
    ]
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None


def _run_check_answer(
    child: subprocess.Popen | None,
) -> tuple[int, int | None] | Literal[False] | None:
    """A child's verdict on its run: (count, first seal seq), None when broken, or False when
    it gave none (it could not start, failed or wrote nonsense)."""
    if child is None:
        return False
    out, _err = child.communicate()
    if child.returncode != 0:
        return False
    try:
        doc = json.loads(out)
    except ValueError:
        return False
    if doc.get("broken"):
        return None
    if not isinstance(doc.get("count"), int):
        return False
    return doc["count"], doc.get("seal_seq")
