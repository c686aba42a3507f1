"""What the SQLite and PostgreSQL event stores share: one SQLAlchemy engine, the append path,
the reads, verification, holds and retention.

A backend (`blackbox.recorder.store.sqlite`, `blackbox.recorder.store.postgres`) subclasses
`SqlEventStore` with its engine, its bulk insert and its way of checking a long chain, and overrides
the few steps where the databases differ; `open_store` picks the class. Driver errors are converted
to `blackbox.recorder.errors` in one place (`_translated`), so callers see one clear message
whatever the backend.
"""

from __future__ import annotations

import errno
import itertools
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, cast

from blackbox.recorder.errors import (
    AmbiguousSession,
    AppendRefused,
    BadStoreURL,
    BlackboxError,
    SessionNotFound,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreMissing,
    StoreReadOnly,
    StoreUnavailable,
)
from blackbox.recorder.log import chain
from blackbox.recorder.log import events as record_docs
from blackbox.recorder.log.jsonrpc import derived_columns
from blackbox.recorder.log.model import DERIVED, Kind, NewEvent, SessionInfo, StoredEvent
from blackbox.recorder.store import audit, migrate, normalise_url, removals, session_rows
from blackbox.recorder.store.projection import (
    INSERT_COLUMNS,
    derive,
    events_row,
    project,
    replayed,
    session_info,
)
from blackbox.recorder.store.schema import events, holds, sessions
from sqlalchemy import Select, delete, func, insert, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.interfaces import DBAPIConnection, DBAPICursor
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import DBAPIError, NoSuchModuleError, SQLAlchemyError


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


class SqlEventStore(ABC):
    """The event store over one SQLAlchemy engine; a backend supplies what is marked abstract."""

    # The driver's parameter marker, for the statements run on its own cursor (no SQLAlchemy
    # compilation on the bulk paths).
    MARK: str
    # What the driver raises on its own cursor, where SQLAlchemy does not wrap it (the bulk
    # paths): translated like any other database error.
    DRIVER_ERRORS: tuple[type[Exception], ...] = ()

    def __init__(self, url: str, create: bool = True) -> None:
        parsed = normalise_url(url)
        self.url = parsed.render_as_string(hide_password=True)
        if not create:
            self._require_existing(parsed)
        try:
            self.engine = self._create_engine(parsed, create)
        except NoSuchModuleError as exc:
            raise BadStoreURL(f"unsupported store driver in {url!r}: {exc}") from None
        try:
            with self._translated():
                self._migrate(create)
        except StoreMissing:
            self.engine.dispose()
            raise

    def _require_existing(self, parsed: URL) -> None:  # noqa: B027 - a hook, empty by default
        """Raise `StoreMissing` when a reader's store plainly is not there, before anything is
        opened (opening a SQLite file creates it); the schema itself is checked in `_migrate`."""

    def _missing(self, why: str = "") -> StoreMissing:
        hint = "a tap, `blackbox ship` or `blackbox db upgrade` creates one"
        return StoreMissing(f"no store at {self.url}{': ' + why if why else ''} ({hint})")

    def _migrate(self, create: bool = True) -> None:
        # Read the revision without a write lock, so a read-only store or a busy writer does not
        # stop read commands; take the write lock only when there is something to apply.
        with self.engine.connect() as conn:
            if migrate.is_current(conn):
                return
            if not create and migrate.current_revision(conn) is None:
                # A reader never lays a schema down: that would be creating the store.
                raise self._missing("the database holds no mcp-blackbox schema")
        with self.engine.connect() as conn:
            self._begin_write(conn)
            migrate.upgrade(conn)
            conn.commit()

    @abstractmethod
    def _create_engine(self, parsed: URL, create: bool = True) -> Engine:
        """The backend's engine, its connections set up as the store needs them (nothing made
        on disk unless `create`)."""

    def _begin_write(self, conn: Connection) -> None:  # noqa: B027 - a hook, empty by default
        """Prepare `conn` for a transaction that writes (nothing to do unless a backend says)."""

    def _lock_log(self, conn: Connection) -> None:  # noqa: B027 - a hook, empty by default
        """Serialise appends, so log positions become visible in commit order (a backend whose
        write transactions are already serial has nothing to do)."""

    @abstractmethod
    def _insert_events(self, conn: Connection, rows: Iterable[tuple]) -> None:
        """Insert events rows (in INSERT_COLUMNS order) the fastest way the driver offers, taking
        them from `rows` as it goes (they are made as they are taken)."""

    def _cursor(self, driver: DBAPIConnection) -> DBAPICursor:
        """A driver cursor that streams a large result as it is fetched."""
        return driver.cursor()

    def _bytes_cursor(self, driver: DBAPIConnection) -> DBAPICursor:
        """A driver cursor that streams a result holding raw bytes, the cheapest way."""
        return self._cursor(driver)

    @abstractmethod
    def _check_runs(self, session_id: str, runs: list[tuple[int, int]]) -> tuple[bool, int | None]:
        """Check the chain over each run of seq (first, last): whether every one is seq first..last,
        each record linking from the one before, and the seq of the session's first seal (None
        when it has none)."""

    @contextmanager
    def _translated(self) -> Iterator[None]:
        translated: tuple[type[Exception], ...] = (SQLAlchemyError, DBAPIError, OSError)
        try:
            yield
        except BlackboxError:
            raise
        except translated + self.DRIVER_ERRORS as exc:
            raise describe_db_error(exc, self.url) from exc

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Connection]:
        """A connection for the store's companion modules (`blackbox.recorder.store.tree`): a write
        transaction committed on success when `write`, errors translated either way."""
        with self._translated(), self.engine.connect() as conn:
            if write:
                self._begin_write(conn)
            yield conn
            if write:
                conn.commit()

    # -- writing -----------------------------------------------------------------------------

    def append(self, new_events: Sequence[NewEvent]) -> int:
        if not new_events:
            return 0
        with self._translated(), self.engine.connect() as conn:
            self._begin_write(conn)
            self._lock_log(conn)
            stored = self._append_in(conn, new_events)
            conn.commit()
            return stored

    def _append_in(self, conn: Connection, new_events: Sequence[NewEvent]) -> int:
        """Chain and insert `new_events` inside the caller's write transaction (the log already
        locked); returns how many were stored, seals not counted."""
        by_session: dict[str, list[NewEvent]] = {}
        for ev in new_events:
            by_session.setdefault(ev.session_id, []).append(ev)
        existing = session_rows.read(conn, self.MARK, list(by_session))
        done: list[session_rows.Appended] = []
        rows = (
            row
            for sid, evs in by_session.items()
            for row in self._chain_rows(sid, evs, existing.get(sid), done)
        )
        first = next(rows, None)
        if first is not None:
            # The rows are made as the driver takes them: on PostgreSQL the server stores the
            # COPY's first rows while the next are derived and chained (bench/ingest.py).
            self._insert_events(conn, itertools.chain((first,), rows))
        for appended in done:
            session_rows.write(conn, self.MARK, appended)
        return sum(appended.stored for appended in done)

    def _chain_rows(
        self,
        sid: str,
        evs: list[NewEvent],
        current: session_rows.Current | None,
        done: list[session_rows.Appended],
    ) -> Iterator[tuple]:
        """`evs`' rows, chained from the session's stored head; once they are all made, what
        the session's row must say is added to `done` (a session with no new record adds none)."""
        last_seq = current.last_seq if current is not None else 0
        head = current.head_hash if current is not None else chain.genesis(sid)
        if current is not None and current.sealed_count is not None:
            fresh = [ev for ev in evs if ev.seq > last_seq]
            if fresh:
                raise AppendRefused(f"session {sid} is sealed; seq {fresh[0].seq} refused")
            return
        proj: dict = {}
        frames = stored = 0
        first_wall = last_wall = era = None
        link, frame, ended, columns = chain.link, Kind.FRAME, Kind.SESSION_ENDED, derived_columns
        sealed, era_at = Kind.SESSION_SEALED, audit.ERA_INDEX
        # The hot loop of every append: one link and one row each, a frame's row built here from
        # its derived columns (`jsonrpc.derived_columns`, the fast path of `projection.derive`).
        for ev in evs:
            seq = ev.seq
            if seq <= last_seq:
                continue  # already stored: a retried batch
            if seq != last_seq + 1:
                raise AppendRefused(f"session {sid}: seq {seq} would leave a gap after {last_seq}")
            if "sealed_count" in proj:
                raise AppendRefused(f"session {sid} is sealed; seq {seq} refused")
            head = link(head, ev)
            last_seq, last_wall = seq, ev.wall_ns
            if first_wall is None:
                first_wall = last_wall
            if ev.kind == frame:
                raw = ev.raw
                derived = columns(raw)
                yield (sid, seq, ev.wall_ns, ev.mono_ns, "frame", str(ev.direction), raw,
                       ev.raw_size, *derived, head)  # fmt: skip
                frames += 1
                stored += 1
                if era is None:  # the first frame that names one, as `verify` reads it
                    era = derived[era_at]
                continue
            yield events_row(ev, head)
            stored += ev.kind != sealed
            project(proj, ev)
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
                yield events_row(seal, head)
                last_seq = seal.seq
                proj["sealed_count"] = seal.seq - 1
        if first_wall is None:
            return
        if era is not None:
            proj.setdefault("era", era)  # an era_detected verdict in this batch wins
        proj.update(last_seq=last_seq, head_hash=head, last_wall_ns=last_wall)
        done.append(session_rows.Appended(sid, current, frames, stored, first_wall, proj))

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
        return session_info(row)

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
            return [session_info(row) for row in conn.execute(query)]

    def resolve(self, ref: str) -> str:
        ref = ref.strip()
        if not ref:
            raise SessionNotFound("no session given: pass an id, a unique prefix, or 'last'")
        with self._translated(), self.engine.connect() as conn:
            if ref == "last":
                row = conn.execute(
                    select(sessions.c.session_id)
                    .where(sessions.c.replay_of.is_(None))  # the last recorded, not replayed
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
            if ref not in found and 6 <= len(ref) <= 12 and "-" not in ref:
                # A short handle (`sessions` shows it): the tail of the id's random part.
                found += [
                    row.session_id
                    for row in conn.execute(
                        select(sessions.c.session_id)
                        .where(sessions.c.session_id.like("%" + escaped, escape="\\"))
                        .limit(6)
                    )
                    if row.session_id not in found
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
    ) -> Iterator[list[tuple]]:
        """`read_log` as batches of plain driver tuples in `StoredEvent` field order, for bulk
        readers (the analytics refresh): SQLAlchemy row processing and one object per record
        cost more than the rest of a refresh. `is_error` comes as the driver holds it (0/1 on
        SQLite); everything else is as `read_log` gives it."""
        columns = ", ".join(column.name for column in _EVENT_COLUMNS)
        mark = self.MARK
        sql = f"SELECT {columns} FROM events WHERE position > {mark} ORDER BY position"
        params: tuple[int, ...] = (after_position,)
        if limit is not None:
            sql += f" LIMIT {mark}"
            params += (limit,)
        with self._translated(), self.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None
            # The pool rolls the driver's transaction back when the connection is returned.
            cursor = self._cursor(driver)
            try:
                cursor.execute(sql, params)
                while batch := cursor.fetchmany(batch_size):
                    yield cast("list[tuple]", batch)  # sqlite3's and psycopg's are lists
            finally:
                cursor.close()

    def _stream(self, query: Select[*tuple[Any, ...]]) -> Iterator[StoredEvent]:
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
        findings = [f for found in self._verify_targets(targets).values() for f in found]
        with self._translated(), self.engine.connect() as conn:
            if session_id is None:
                findings.extend(removals.orphan_findings(conn))
            findings.extend(removals.findings(conn, session_id))
        if session_id is None:
            findings.extend(self._position_findings())
        return findings

    def verify_each(self, session_ids: Sequence[str]) -> dict[str, list[chain.Finding]]:
        ids = list(dict.fromkeys(session_ids))
        targets: list = []
        with self._translated(), self.engine.connect() as conn:
            for start in range(0, len(ids), 500):  # bounded IN lists
                chunk = ids[start : start + 500]
                targets.extend(
                    conn.execute(
                        select(sessions.c.session_id, sessions.c.sealed_count).where(
                            sessions.c.session_id.in_(chunk)
                        )
                    ).all()
                )
            missing = set(ids) - {sid for sid, _ in targets}
            if missing:
                raise SessionNotFound(f"no session {sorted(missing)[0]}")
            order = {sid: i for i, sid in enumerate(ids)}
            out = self._verify_targets(sorted(targets, key=lambda t: order[t[0]]))
            for finding in removals.findings(conn):
                if finding.session_id in out:
                    out[finding.session_id].append(finding)
        return out

    def _verify_targets(self, targets: Sequence) -> dict[str, list[chain.Finding]]:
        """Each (session id, sealed count)'s findings: its chain and seal, derived columns and
        projection."""
        out: dict[str, list[chain.Finding]] = {}
        # Each session's records are re-derived on a thread while its chain is checked: on
        # PostgreSQL the chain check is the server's work, so the two overlap.
        with ThreadPoolExecutor(1) as pool:
            for sid, sealed_count in targets:
                rederived = pool.submit(self._rederived_findings, sid)
                summary = self._intact_chain_summary(sid)
                if summary is not None:
                    found = chain.check_seal(sid, summary, sealed_count, False)
                else:
                    rows = list(self._stream_chain_records(sid))  # broken: read whole, diagnose
                    found = chain.verify_session(sid, rows, sealed_count)
                derived, projection = rederived.result()
                # A record the chain already names is not compared with its derived columns;
                # a session whose chain is broken is reported as such, and its projection,
                # which then differs from what is left of its records, is not compared.
                named = {f.seq for f in found}
                out[sid] = [*found, *(f for f in derived if f.seq not in named)]
                if not found:
                    out[sid].extend(projection)
        return out

    def _rederived_findings(
        self, session_id: str
    ) -> tuple[list[chain.Finding], list[chain.Finding]]:
        """What the chain does not cover, checked against the records it does: every record's
        derived columns recomputed from its kind and raw bytes (`projection.derive`, as the
        append computed them), and the session's `sessions` row recomputed from its records
        (`projection.replayed`). One streaming pass over the session's records; returns the
        records' findings and the projection's."""
        findings: list[chain.Finding] = []
        mismatches: list[chain.Finding] = []
        sql = (
            f"SELECT seq, wall_ns, kind, raw, hash, {', '.join(DERIVED)} FROM events "
            f"WHERE session_id = {self.MARK} ORDER BY seq"
        )
        frame, columns = str(Kind.FRAME), derived_columns
        others: list[tuple] = []
        frames, first_era, first_wall, last = 0, None, None, None
        with self._translated(), self.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None  # a connection in use holds its driver's
            cursor = self._bytes_cursor(driver)
            try:
                cursor.execute(sql, (session_id,))
                # The hot loop: a frame costs one derivation and one tuple comparison (True == 1,
                # so SQLite's 0/1 booleans compare equal); only a mismatch is looked at closely.
                for chunk in audit.prefetched(cursor, 2000):
                    if first_wall is None:
                        first_wall = chunk[0][1]
                    for row in chunk:
                        kind, raw = row[2], row[3]
                        if type(raw) is not bytes:
                            raw = chain.as_bytes(raw)
                        if kind == frame:
                            expected = columns(raw)
                            frames += 1
                            if first_era is None:
                                first_era = expected[audit.ERA_INDEX]
                        else:
                            expected = derive(kind, raw)
                            others.append((row[0], row[1], kind, raw))
                        if row[5:] != expected:
                            findings.extend(
                                audit.derived_mismatch(session_id, row[0], row[5:], expected)
                            )
                    last = chunk[-1]
            finally:
                cursor.close()
            current = conn.execute(
                select(sessions).where(sessions.c.session_id == session_id)
            ).first()
        if current is None or last is None:
            return findings, mismatches
        expected_row = replayed(session_id, others, frames, first_era)
        expected_row.update(
            last_seq=last[0], last_wall_ns=last[1], head_hash=chain.as_bytes(last[4])
        )
        for column, value in expected_row.items():
            stored_value = getattr(current, column)
            if isinstance(stored_value, memoryview):
                stored_value = bytes(stored_value)
            if stored_value != value:
                mismatches.append(
                    audit.projection_mismatch(session_id, column, stored_value, value)
                )
        starts = {first_wall} | {wall for _seq, wall, kind, _raw in others if kind == audit.STARTED}
        if current.started_ns not in starts:
            expected_start = next(
                (wall for _seq, wall, kind, _raw in others if kind == audit.STARTED), first_wall
            )
            mismatches.append(
                audit.projection_mismatch(
                    session_id, "started_ns", current.started_ns, expected_start
                )
            )
        return findings, mismatches

    # Whether a gap in `position` is evidence of removed records on this backend (SQLite: yes,
    # a rolled-back insert gives its rowids back; PostgreSQL: no, see `PostgresEventStore`).
    GAPS_ARE_EVIDENCE = True

    def _position_findings(self) -> list[chain.Finding]:
        if not self.GAPS_ARE_EVIDENCE:
            return []
        with self._translated(), self.engine.connect() as conn:
            return removals.position_findings(conn)

    def _stream_chain_records(self, session_id: str) -> Iterator[tuple]:
        # Stream in chunks so a long session is checked in bounded memory, and the same buffers
        # are reused: the first read of a whole session into one list cost twice the later ones.
        sql = f"SELECT {_CHAIN_COLUMNS} FROM events WHERE session_id = {self.MARK} ORDER BY seq"
        with self._translated(), self.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None  # a connection in use holds its driver's
            cursor = driver.cursor()
            try:
                cursor.execute(sql, (session_id,))
                while chunk := cursor.fetchmany(2000):
                    yield from chunk
            finally:
                cursor.close()

    def _intact_chain_summary(self, session_id: str) -> chain.SealSummary | None:
        """The seal summary of a session whose records are seq 1..N, each linking from the one
        before; None when anything is off (then the records are read whole and
        `chain.verify_session` names what is wrong).

        A long session is checked as runs on several cores (`chain.split_runs`), each backend
        its own way (`_check_runs`)."""
        with self._translated(), self.engine.connect() as conn:
            count, last = conn.execute(
                select(func.count(), func.max(events.c.seq)).where(
                    events.c.session_id == session_id
                )
            ).one()
        if not count or count != last:
            return None  # a gap, or records outside 1..N
        parts = verify_cores() if last >= PARALLEL_VERIFY_RECORDS else 1
        intact, seal_seq = self._check_runs(session_id, chain.split_runs(last, parts))
        if not intact:
            return None
        seal = None if seal_seq is None else self._chain_record(session_id, seal_seq)
        return chain.gapless_summary(seal, last)

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
            self._begin_write(conn)
            conn.execute(delete(holds).where(holds.c.session_id == session_id))
            conn.execute(
                insert(holds).values(
                    session_id=session_id, reason=reason, created_ns=time.time_ns()
                )
            )
            conn.commit()

    def remove_hold(self, session_id: str) -> bool:
        with self._translated(), self.engine.connect() as conn:
            self._begin_write(conn)
            removed = conn.execute(delete(holds).where(holds.c.session_id == session_id)).rowcount
            conn.commit()
        return bool(removed)

    def list_holds(self) -> list[tuple[str, str, int]]:
        with self._translated(), self.engine.connect() as conn:
            return [
                (row.session_id, row.reason, row.created_ns)
                for row in conn.execute(select(holds).order_by(holds.c.created_ns))
            ]

    def remove_sessions(
        self,
        session_ids: Sequence[str],
        applied: record_docs.RetentionApplied | None = None,
        record_session: str | None = None,
    ) -> int:
        ids = list(dict.fromkeys(session_ids))
        if not ids:
            return 0
        with self._translated(), self.engine.connect() as conn:
            self._begin_write(conn)
            self._lock_log(conn)
            held = conn.execute(select(holds.c.session_id).where(holds.c.session_id.in_(ids))).all()
            if held:
                raise AppendRefused(f"session {held[0].session_id} is on legal hold")
            removed = removals.record_and_remove(
                conn, lambda evs: self._append_in(conn, evs), ids, applied, record_session
            )
            conn.commit()
        return removed

    def removals(self) -> list[removals.Removal]:
        with self._translated(), self.engine.connect() as conn:
            return removals.listed(conn)

    def close(self) -> None:
        self.engine.dispose()


# StoredEvent's fields in order: the log position, then what was inserted.
_EVENT_COLUMNS = [events.c.position, *(events.c[name] for name in INSERT_COLUMNS)]
_CHAIN_COLUMNS = ", ".join(chain.ChainRecord._fields)

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
