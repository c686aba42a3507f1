"""The SQLAlchemy implementation of the event store, for SQLite (embedded default) and PostgreSQL.

Driver errors are converted to `recorder.errors` in one place (`_translated`), so callers see one
clear message whatever the backend. On PostgreSQL an append takes an EXCLUSIVE lock on the log, so
log positions become visible in commit order and an incremental reader that remembers the last
position it saw can never skip a record committed late (the approach of eventsourcing's recorder).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

import orjson
from sqlalchemy import create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from recorder import chain
from recorder.errors import (
    AmbiguousSession,
    AppendRefused,
    BadStoreURL,
    BlackboxError,
    SessionNotFound,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
    StoreUnavailable,
)
from recorder.jsonrpc import classify
from recorder.model import Kind, NewEvent, SessionInfo, StoredEvent
from recorder.store import migrate, sqlite_chain
from recorder.store.schema import events, holds, retention_grants, sessions


def normalise_url(url: str) -> URL:
    """Parse a store URL; only SQLite and PostgreSQL (via psycopg 3) are accepted."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise BadStoreURL(
            f"malformed store URL {url!r}: use sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise BadStoreURL("an in-memory SQLite store would lose everything: give a file path")
        return parsed
    raise BadStoreURL(f"unsupported store {backend!r} in {url!r}: use sqlite or postgresql")


def describe_db_error(exc: BaseException, url: str) -> StoreError:
    """The one place driver errors become messages a user can act on."""
    text = str(getattr(exc, "orig", None) or exc)
    low = text.lower()
    if (
        (isinstance(exc, OSError) and exc.errno == errno.ENOSPC)
        or "disk is full" in low
        or ("no space left" in low)
    ):
        return StoreFull(f"store {url}: the disk is full ({text.splitlines()[0]})")
    if "database is locked" in low or "database table is locked" in low:
        return StoreLocked(f"store {url} is locked by another process; try again")
    if "readonly database" in low or "read-only" in low:
        return StoreReadOnly(f"store {url} is read-only: check the file's permissions")
    if "unable to open database file" in low:
        return StoreUnavailable(
            f"cannot open store {url}: check the directory exists and is writable"
        )
    if "file is not a database" in low:
        return StoreUnavailable(f"store {url} is not a SQLite database")
    if "connection refused" in low or "could not connect" in low or "connection failed" in low:
        return StoreUnavailable(f"store {url} is unreachable (is PostgreSQL running there?)")
    if "does not exist" in low and "database" in low:
        return StoreUnavailable(f"store {url}: {text.splitlines()[0]}")
    if "append-only" in low:
        return AppendRefused(f"store {url}: {text.splitlines()[0]}")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return StoreError(f"store {url}: {first}")


class SqlEventStore:
    """The event store over one SQLAlchemy engine."""

    def __init__(self, url: str) -> None:
        parsed = normalise_url(url)
        self.url = parsed.render_as_string(hide_password=True)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = self._create_engine(parsed)
        except NoSuchModuleError as exc:
            raise BadStoreURL(f"unsupported store driver in {url!r}: {exc}") from None
        with self._translated():
            self._migrate()

    def _migrate(self) -> None:
        # Read the revision without a write lock, so a read-only store or a busy writer does not
        # stop read commands; take the write lock only when there is something to apply.
        with self.engine.connect() as conn:
            if migrate.is_current(conn):
                return
        with self.engine.connect() as conn:
            self._begin(conn, write=True)
            migrate.upgrade(conn)
            conn.commit()

    def _create_engine(self, parsed: URL) -> Engine:
        if self.dialect == "sqlite":
            # sqlite3's own busy handler waits this long for a lock (`?timeout=N` overrides).
            timeout = float(parsed.query.get("timeout", 10))
            engine = create_engine(parsed, connect_args={"timeout": timeout})

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
                # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
                dbapi_connection.isolation_level = None
                cursor = dbapi_connection.cursor()
                # 16 KiB pages for a new store (set before WAL mode, which fixes the page size;
                # an existing store keeps its own): a record is about 1 KiB of raw JSON, and with
                # SQLite's default 4 KiB pages inserting the log's rows took 1.6-1.9x as long
                # (measured like bench/ingest.py).
                cursor.execute("PRAGMA page_size = 16384")
                with suppress(Exception):  # a read-only file keeps its journal mode
                    cursor.execute("PRAGMA journal_mode = WAL")
                cursor.execute("PRAGMA synchronous = NORMAL")
                # Checkpoint (and fsync) every ~40 MB of WAL rather than every 4 MB: a third more
                # ingest throughput measured in bench/ingest.py, at the cost of a larger WAL file.
                cursor.execute("PRAGMA wal_autocheckpoint = 10000")
                # Read the database file through a memory map: verify and the analytics refresh
                # read whole sessions, and a third of that time went to read() calls.
                cursor.execute("PRAGMA mmap_size = 268435456")
                cursor.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Connection) -> None:
                mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
                conn.exec_driver_sql(f"BEGIN {mode}")

            return engine
        return create_engine(
            parsed,
            connect_args={"connect_timeout": 5},
            pool_pre_ping=True,
        )

    def _begin(self, conn: Connection, write: bool) -> None:
        if write and self.dialect == "sqlite":
            # Take the write lock up front: two writers never deadlock upgrading a read lock.
            conn.execution_options(sqlite_begin="IMMEDIATE")

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except BlackboxError:
            raise
        except (SQLAlchemyError, DBAPIError, OSError) as exc:
            raise describe_db_error(exc, self.url) from exc

    # -- writing -----------------------------------------------------------------------------

    def append(self, new_events: Sequence[NewEvent]) -> int:
        if not new_events:
            return 0
        with self._translated(), self.engine.connect() as conn:
            self._begin(conn, write=True)
            if self.dialect == "postgresql":
                conn.exec_driver_sql("LOCK TABLE events IN EXCLUSIVE MODE")
            by_session: dict[str, list[NewEvent]] = {}
            for ev in new_events:
                by_session.setdefault(ev.session_id, []).append(ev)
            existing = {
                row.session_id: row
                for row in conn.execute(
                    select(sessions).where(sessions.c.session_id.in_(list(by_session)))
                )
            }
            rows: list[tuple] = []
            for sid, evs in by_session.items():
                rows.extend(self._chain_rows(conn, sid, evs, existing.get(sid)))
            if rows:
                self._insert_events(conn, rows)
            conn.commit()
            return sum(1 for r in rows if r[_KIND] != Kind.SESSION_SEALED)

    def _insert_events(self, conn: Connection, rows: list[tuple]) -> None:
        # The hot path of every shipper: hand tuples straight to the driver (COPY on PostgreSQL,
        # executemany on SQLite) instead of compiling a Core insert per batch.
        if self.dialect == "postgresql":
            cursor = conn.connection.dbapi_connection.cursor()
            with cursor.copy(f"COPY events ({', '.join(INSERT_COLUMNS)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.close()
        else:
            conn.exec_driver_sql(_SQLITE_INSERT, rows)

    def _chain_rows(self, conn: Connection, sid: str, evs: list[NewEvent], current) -> list[tuple]:  # type: ignore[no-untyped-def]
        last_seq = current.last_seq if current is not None else 0
        head = current.head_hash if current is not None else chain.genesis(sid)
        if current is not None and current.sealed_count is not None:
            fresh = [ev for ev in evs if ev.seq > last_seq]
            if fresh:
                raise AppendRefused(f"session {sid} is sealed; seq {fresh[0].seq} refused")
            return []
        proj: dict = {}
        frames = 0
        rows: list[tuple] = []
        link, frame, ended = chain.link, Kind.FRAME, Kind.SESSION_ENDED
        # The hot loop of every append: one link, one row and (for a frame) one era check each.
        for ev in evs:
            seq = ev.seq
            if seq <= last_seq:
                continue  # already stored: a retried batch
            if seq != last_seq + 1:
                raise AppendRefused(f"session {sid}: seq {seq} would leave a gap after {last_seq}")
            if "sealed_count" in proj:
                raise AppendRefused(f"session {sid} is sealed; seq {seq} refused")
            head = link(head, ev)
            row = _row(ev, head)
            rows.append(row)
            last_seq = seq
            if ev.kind == frame:
                frames += 1
                if "era" not in proj and row[_ERA]:
                    proj["era"] = row[_ERA]
                continue
            _project(proj, ev)
            if ev.kind == ended:
                seal = NewEvent(
                    sid,
                    last_seq + 1,
                    ev.wall_ns,
                    ev.mono_ns,
                    Kind.SESSION_SEALED,
                    "-",
                    chain.seal_payload(last_seq, head),
                )
                head = link(head, seal)
                rows.append(_row(seal, head))
                last_seq = seal.seq
                proj["sealed_count"] = seal.seq - 1
        if not rows:
            return rows
        era_detected = proj.pop("era_detected", False)
        proj.update(last_seq=last_seq, head_hash=head, last_wall_ns=rows[-1][_WALL_NS])
        if current is None:
            proj.setdefault("started_ns", rows[0][_WALL_NS])
            conn.execute(insert(sessions).values(session_id=sid, frames=frames, **proj))
        else:
            if current.era is not None and not era_detected:
                proj.pop("era", None)
            if current.started_ns is not None:
                proj.pop("started_ns", None)
            conn.execute(
                update(sessions)
                .where(sessions.c.session_id == sid)
                .values(frames=sessions.c.frames + frames, **proj)
            )
        return rows

    # -- reading -----------------------------------------------------------------------------

    def head(self, session_id: str) -> tuple[int, bytes]:
        with self._translated(), self.engine.connect() as conn:
            row = conn.execute(
                select(sessions.c.last_seq, sessions.c.head_hash).where(
                    sessions.c.session_id == session_id
                )
            ).first()
        if row is None:
            return 0, chain.genesis(session_id)
        return row.last_seq, row.head_hash

    def session(self, session_id: str) -> SessionInfo:
        with self._translated(), self.engine.connect() as conn:
            row = conn.execute(select(sessions).where(sessions.c.session_id == session_id)).first()
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        return _session_info(row)

    def list_sessions(
        self,
        limit: int | None = None,
        since_ns: int | None = None,
        name: str | None = None,
    ) -> list[SessionInfo]:
        query = select(sessions).order_by(
            sessions.c.started_ns.desc(), sessions.c.session_id.desc()
        )
        if since_ns is not None:
            query = query.where(sessions.c.started_ns >= since_ns)
        if name is not None:
            query = query.where(sessions.c.name == name)
        if limit is not None:
            query = query.limit(limit)
        with self._translated(), self.engine.connect() as conn:
            return [_session_info(row) for row in conn.execute(query)]

    def resolve(self, ref: str) -> str:
        ref = ref.strip()
        if not ref:
            raise SessionNotFound("no session given: pass an id, a unique prefix, or 'last'")
        with self._translated(), self.engine.connect() as conn:
            if ref == "last":
                row = conn.execute(
                    select(sessions.c.session_id)
                    .order_by(sessions.c.started_ns.desc(), sessions.c.session_id.desc())
                    .limit(1)
                ).first()
                if row is None:
                    raise SessionNotFound("no sessions recorded yet")
                return row.session_id
            escaped = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            found = [
                row.session_id
                for row in conn.execute(
                    select(sessions.c.session_id)
                    .where(sessions.c.session_id.like(escaped + "%", escape="\\"))
                    .order_by(sessions.c.session_id)
                    .limit(6)
                )
            ]
        if ref in found:
            return ref
        if not found:
            raise SessionNotFound(f"no session matches {ref!r}")
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
            raise AmbiguousSession(
                f"{ref!r} matches several sessions ({shown}): give more of the id"
            )
        return found[0]

    def read_session(self, session_id: str, after_seq: int = 0) -> Iterator[StoredEvent]:
        query = (
            select(*_EVENT_COLUMNS)
            .where(events.c.session_id == session_id, events.c.seq > after_seq)
            .order_by(events.c.seq)
        )
        yield from self._stream(query)

    def read_log(self, after_position: int = 0, limit: int | None = None) -> Iterator[StoredEvent]:
        query = (
            select(*_EVENT_COLUMNS)
            .where(events.c.position > after_position)
            .order_by(events.c.position)
        )
        if limit is not None:
            query = query.limit(limit)
        yield from self._stream(query)

    def read_log_rows(
        self, after_position: int = 0, limit: int | None = None, batch_size: int = 5000
    ) -> Iterator[list[tuple]]:  # type: ignore[type-arg]
        """`read_log` as batches of plain driver tuples in `StoredEvent` field order, for bulk
        readers (the analytics refresh): SQLAlchemy row processing and one object per record
        cost more than the rest of a refresh. `is_error` comes as the driver holds it (0/1 on
        SQLite); everything else is as `read_log` gives it."""
        columns = ", ".join(column.name for column in _EVENT_COLUMNS)
        mark = "?" if self.dialect == "sqlite" else "%s"
        sql = f"SELECT {columns} FROM events WHERE position > {mark} ORDER BY position"
        params: tuple[int, ...] = (after_position,)
        if limit is not None:
            sql += f" LIMIT {mark}"
            params += (limit,)
        with self._translated(), self.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None
            # A named (server-side) cursor streams on PostgreSQL; SQLite's steps as it is fetched.
            # The pool rolls the driver's transaction back when the connection is returned.
            if self.dialect == "postgresql":
                cursor = driver.cursor(name="read_log_rows")  # type: ignore[call-arg]
            else:
                cursor = driver.cursor()
            try:
                cursor.execute(sql, params)
                while batch := cursor.fetchmany(batch_size):
                    yield batch
            finally:
                cursor.close()

    def _stream(self, query) -> Iterator[StoredEvent]:  # type: ignore[no-untyped-def]
        with self._translated(), self.engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=2000).execute(query)
            for row in result:
                yield StoredEvent(*row)

    def max_position(self) -> int:
        with self._translated(), self.engine.connect() as conn:
            return conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one()

    def verify(self, session_id: str | None = None) -> list[chain.Finding]:
        query = select(sessions.c.session_id, sessions.c.sealed_count).order_by(
            sessions.c.session_id
        )
        if session_id is not None:
            query = query.where(sessions.c.session_id == session_id)
        with self._translated(), self.engine.connect() as conn:
            targets = conn.execute(query).all()
        if session_id is not None and not targets:
            raise SessionNotFound(f"no session {session_id}")
        findings: list[chain.Finding] = []
        for sid, sealed_count in targets:
            summary = self._intact_chain_summary(sid)
            if summary is not None:
                findings.extend(chain.check_seal(sid, summary, sealed_count, False))
            else:
                rows = list(self._stream_chain_records(sid))  # broken: read whole, diagnose
                findings.extend(chain.verify_session(sid, rows, sealed_count))
        return findings

    def _stream_chain_records(self, session_id: str) -> Iterator[tuple]:  # type: ignore[type-arg]
        # Stream in chunks so a long session is checked in bounded memory, and the same buffers
        # are reused: the first read of a whole session into one list cost twice the later ones.
        with self._translated(), self.engine.connect() as conn:
            cursor = conn.connection.dbapi_connection.cursor()
            try:
                cursor.execute(_CHAIN_READ[self.dialect], (session_id,))
                while chunk := cursor.fetchmany(2000):
                    yield from chunk
            finally:
                cursor.close()

    def _intact_chain_summary(self, session_id: str) -> chain.SealSummary | None:
        """The seal summary of a session whose records are seq 1..N, each linking from the one
        before; None when anything is off (then the records are read whole and
        `chain.verify_session` names what is wrong).

        A long session is checked as runs on several cores (`chain.split_runs`): on SQLite a
        child process per run after the first (`sqlite_chain`), on PostgreSQL a connection per
        run, the server hashing the same canonical bytes as `chain.canonical`, so an intact run
        costs one aggregate row on the wire rather than all its raw bytes."""
        with self._translated(), self.engine.connect() as conn:
            count, last = conn.execute(
                select(func.count(), func.max(events.c.seq)).where(
                    events.c.session_id == session_id
                )
            ).one()
        if not count or count != last:
            return None  # a gap, or records outside 1..N
        parts = verify_cores() if last >= PARALLEL_VERIFY_RECORDS else 1
        runs = chain.split_runs(last, parts)
        if self.dialect == "postgresql":
            with ThreadPoolExecutor(len(runs)) as pool:
                intact = all(pool.map(lambda run: self._pg_run_intact(session_id, *run), runs))
            seal_seq = None if not intact else self._first_seal_seq(session_id)
        else:
            found = self._sqlite_runs(session_id, runs)
            intact = found is not None
            seal_seq = next((s for s in found or () if s is not None), None)
        if not intact:
            return None
        seal = None if seal_seq is None else self._chain_record(session_id, seal_seq)
        return chain.gapless_summary(seal, last)

    def _sqlite_runs(self, session_id: str, runs: list[tuple[int, int]]) -> list[int | None] | None:
        """Check `runs` (the first here, each other in a child process); the seq of the first
        seal each holds, or None when any is broken. A child that cannot start or does not
        answer is replaced by checking its run here."""
        database = str(Path(self.engine.url.database or "").expanduser())
        children = [_start_run_check(database, session_id, run) for run in runs[1:]]
        try:
            with self._translated(), self.engine.connect() as conn:
                driver = conn.connection.dbapi_connection
                mine = sqlite_chain.check_run(driver, session_id, *runs[0])  # type: ignore[arg-type]
                if mine is None:
                    return None
                seals = [mine[1]]
                for child, run in zip(children, runs[1:], strict=True):
                    answer = _run_check_answer(child)
                    if answer is False:
                        answer = sqlite_chain.check_run(driver, session_id, *run)  # type: ignore[arg-type]
                    if answer is None or answer[0] != run[1] - run[0] + 1:
                        return None
                    seals.append(answer[1])
                return seals
        finally:
            for child in children:
                if child is not None and child.poll() is None:
                    child.kill()
                    child.wait()

    def _pg_run_intact(self, session_id: str, first: int, last: int) -> bool:
        with self._translated(), self.engine.connect() as conn:
            if first == 1:
                prev = chain.genesis(session_id)
            else:
                prev = conn.execute(
                    select(events.c.hash).where(
                        events.c.session_id == session_id, events.c.seq == first - 1
                    )
                ).scalar()
                if prev is None:
                    return False
            # Walk the (session_id, seq) index, which yields seq order: with stale statistics the
            # planner chose a bitmap scan and an on-disk sort of every raw byte instead, which
            # took twice as long (bench/ingest.py).
            conn.exec_driver_sql("SET LOCAL enable_bitmapscan = off")
            conn.exec_driver_sql("SET LOCAL enable_sort = off")
            count, low, high, intact = conn.exec_driver_sql(
                _PG_RUN_CHECK,
                {"sid": session_id, "first": first, "last": last, "prev": prev},
            ).one()
        return bool(intact) and count == last - first + 1 and (low, high) == (first, last)

    def _first_seal_seq(self, session_id: str) -> int | None:
        with self._translated(), self.engine.connect() as conn:
            return conn.execute(
                select(func.min(events.c.seq)).where(
                    events.c.session_id == session_id,
                    events.c.kind == str(Kind.SESSION_SEALED),
                )
            ).scalar()

    def _chain_record(self, session_id: str, seq: int) -> chain.ChainRecord:
        with self._translated(), self.engine.connect() as conn:
            row = conn.execute(
                select(*(events.c[name] for name in chain.ChainRecord._fields)).where(
                    events.c.session_id == session_id, events.c.seq == seq
                )
            ).one()
        return chain.ChainRecord._make(row)

    # -- holds and retention -----------------------------------------------------------------

    def add_hold(self, session_id: str, reason: str) -> None:
        with self._translated(), self.engine.connect() as conn:
            self._begin(conn, write=True)
            conn.execute(delete(holds).where(holds.c.session_id == session_id))
            conn.execute(
                insert(holds).values(
                    session_id=session_id, reason=reason, created_ns=time.time_ns()
                )
            )
            conn.commit()

    def remove_hold(self, session_id: str) -> bool:
        with self._translated(), self.engine.connect() as conn:
            self._begin(conn, write=True)
            removed = conn.execute(delete(holds).where(holds.c.session_id == session_id)).rowcount
            conn.commit()
        return bool(removed)

    def list_holds(self) -> list[tuple[str, str, int]]:
        with self._translated(), self.engine.connect() as conn:
            return [
                (row.session_id, row.reason, row.created_ns)
                for row in conn.execute(select(holds).order_by(holds.c.created_ns))
            ]

    def remove_sessions(self, session_ids: Sequence[str]) -> int:
        ids = list(session_ids)
        if not ids:
            return 0
        with self._translated(), self.engine.connect() as conn:
            self._begin(conn, write=True)
            held = conn.execute(select(holds.c.session_id).where(holds.c.session_id.in_(ids))).all()
            if held:
                raise AppendRefused(f"session {held[0].session_id} is on legal hold")
            conn.execute(insert(retention_grants), [{"session_id": sid} for sid in ids])
            removed = conn.execute(delete(events).where(events.c.session_id.in_(ids))).rowcount
            conn.execute(delete(sessions).where(sessions.c.session_id.in_(ids)))
            conn.execute(delete(retention_grants).where(retention_grants.c.session_id.in_(ids)))
            conn.commit()
        return removed

    def close(self) -> None:
        self.engine.dispose()


INSERT_COLUMNS = (
    "session_id",
    "seq",
    "wall_ns",
    "mono_ns",
    "kind",
    "direction",
    "raw",
    "raw_size",
    "msg_type",
    "method",
    "rpc_id",
    "rpc_id_type",
    "tool",
    "is_error",
    "error_code",
    "era",
    "hash",
)
# StoredEvent's fields in order: the log position, then what was inserted.
_EVENT_COLUMNS = [events.c.position, *(events.c[name] for name in INSERT_COLUMNS)]
_SQLITE_INSERT = (
    f"INSERT INTO events ({', '.join(INSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in INSERT_COLUMNS)})"
)
_WALL_NS, _KIND, _ERA = 2, 4, INSERT_COLUMNS.index("era")
# Classification's leading fields are the derived columns, from msg_type to era.
DERIVED_FIELDS = INSERT_COLUMNS.index("era") - INSERT_COLUMNS.index("msg_type") + 1
_CHAIN_COLUMNS = ", ".join(chain.ChainRecord._fields)
_CHAIN_READ = {
    "sqlite": f"SELECT {_CHAIN_COLUMNS} FROM events WHERE session_id = ? ORDER BY seq",
    "postgresql": f"SELECT {_CHAIN_COLUMNS} FROM events WHERE session_id = %s ORDER BY seq",
}


def _pg_utf8(column: str) -> str:
    """`chain._prefix`'s encoding of one text field: its UTF-8 length as two bytes, then it."""
    return f"convert_to({column}, 'UTF8')"


# chain.link in SQL: sha256(previous hash || length-prefixed session, kind, direction || wall_ns,
# mono_ns, raw_size (-1 for none), len(raw) as big-endian int8 || raw). A test checks the two
# agree by tampering on PostgreSQL and expecting the same findings as on SQLite.
_PG_CANONICAL = " || ".join(
    [
        *(
            f"int2send(octet_length({_pg_utf8(c)})::int2)"
            for c in ("session_id", "kind", "direction")
        ),
        *(_pg_utf8(c) for c in ("session_id", "kind", "direction")),
        "int8send(wall_ns)",
        "int8send(mono_ns)",
        "int8send(coalesce(raw_size, -1))",
        "int8send(octet_length(raw)::int8)",
        "raw",
    ]
)
_PG_RUN_CHECK = f"""
SELECT count(*), min(seq), max(seq), bool_and(intact) FROM (
    SELECT seq, hash = sha256(
        coalesce(lag(hash) OVER (ORDER BY seq), %(prev)s) || {_PG_CANONICAL}
    ) AS intact
    FROM events WHERE session_id = %(sid)s AND seq BETWEEN %(first)s AND %(last)s
) AS links
"""

# A session this long is verified as runs on several cores; below it, starting the extra
# processes or connections costs more than they save.
PARALLEL_VERIFY_RECORDS = 20_000


def verify_cores() -> int:
    """How many runs a long session is verified as: the cores this process may use, up to 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def _start_run_check(
    database: str, session_id: str, run: tuple[int, int]
) -> subprocess.Popen | None:  # type: ignore[type-arg]
    argv = [
        sys.executable,
        "-m",
        "recorder.store.sqlite_chain",
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
    child: subprocess.Popen | None,  # type: ignore[type-arg]
) -> tuple[int, int | None] | bool | None:
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


def _row(ev: NewEvent, digest: bytes) -> tuple:
    """An events row in INSERT_COLUMNS order, derived fields computed from the raw bytes."""
    head = (ev.session_id, ev.seq, ev.wall_ns, ev.mono_ns, str(ev.kind), str(ev.direction))
    if ev.kind == Kind.FRAME:
        derived = classify(ev.raw)[:DERIVED_FIELDS]
    else:
        doc = _doc(ev.raw)
        tool, method, era = (
            doc.get(key) if isinstance(doc.get(key), str) else None
            for key in ("tool", "method", "era")
        )
        derived = (None, method, None, None, tool, None, None, era)
    return (*head, ev.raw, ev.raw_size, *derived, digest)


def _doc(raw: bytes) -> dict:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


_PROJECTED = frozenset({Kind.SESSION_STARTED, Kind.ERA_DETECTED, Kind.SESSION_ENDED})


def _project(proj: dict, ev: NewEvent) -> None:
    """Fold one session event into the sessions projection being built for this append (frames
    only name the era, which the append loop takes from their derived columns)."""
    if ev.kind not in _PROJECTED:
        return  # faults, stderr, exchanges, decisions...: no need to parse them again
    doc = _doc(ev.raw)
    if ev.kind == Kind.SESSION_STARTED:
        proj["started_ns"] = ev.wall_ns
        for key in ("name", "transport", "replay_of"):
            if doc.get(key) is not None:
                proj[key] = str(doc[key])
        command = doc.get("command")
        if isinstance(command, list):
            command = " ".join(str(part) for part in command)
        if command is not None:
            proj["command"] = str(command)
    elif ev.kind == Kind.ERA_DETECTED:
        if doc.get("era"):
            # The tap's verdict wins over the first frame that named a version (a client in
            # auto mode first offers 2026-07-28 in `server/discover`, then falls back).
            proj["era"] = str(doc["era"])
            proj["era_detected"] = True
        for key in ("client_info", "server_info"):
            if doc.get(key) is not None:
                proj[key] = json.dumps(doc[key], sort_keys=True)
    elif ev.kind == Kind.SESSION_ENDED:
        proj["ended_ns"] = ev.wall_ns
        proj["outcome"] = str(doc.get("outcome") or doc.get("reason") or "ended")


def _session_info(row) -> SessionInfo:  # type: ignore[no-untyped-def]
    return SessionInfo(
        session_id=row.session_id,
        name=row.name,
        transport=row.transport,
        command=row.command,
        started_ns=row.started_ns,
        ended_ns=row.ended_ns if row.ended_ns is not None else row.last_wall_ns,
        last_seq=row.last_seq,
        frames=row.frames,
        outcome=row.outcome,
        era=row.era,
        replay_of=row.replay_of,
        sealed=row.sealed_count is not None,
    )
