"""The SQL event store's reads: a session's head and row, the session listing, resolving a
reference (`last`, a prefix, a short handle) to an id, and streaming records by session or by log
position.

They only read, through connections that never write, so they are kept apart from the append
path and the verification; `read_log_rows` is the bulk form the analytics refresh uses.

`with_traffic` is the one rule of which sessions carry traffic: `last` resolves among them, and
the default session lists (`sessions`, the web UI) show only them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from blackbox.recorder import AmbiguousSession, SessionNotFound
from blackbox.recorder.log import SessionInfo, StoredEvent, chain
from blackbox.recorder.store import layout, storable_text
from blackbox.recorder.store.projection import INSERT_COLUMNS, session_info
from blackbox.recorder.store.schema import HOOK_TRANSPORT, events, sessions
from blackbox.recorder.store.sql_base import SqlStoreBase
from sqlalchemy import ColumnElement, Select, func, or_, select

# StoredEvent's fields in order: the log position, then what was inserted.
_EVENT_COLUMNS = [events.c.position, *(events.c[name] for name in INSERT_COLUMNS)]


def with_traffic() -> ColumnElement[bool]:
    """The sessions that carry traffic: those holding at least one frame, and a host's hook
    decisions. The others are background sessions: an HTTP proxy's tool watch (`tool watch:
    NAME`, its own records only), tool approvals, retention's records, a server started and
    never spoken to (heartbeats, stderr, idle marks). `last` never names one, and the session
    lists hide them unless asked for every session."""
    return or_(sessions.c.frames > 0, sessions.c.transport == HOOK_TRANSPORT)


class ReadMixin(SqlStoreBase):
    """The store's reads of sessions and records."""

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
        if not storable_text(ref):
            raise SessionNotFound(f"no session matches {ref!r}")
        with self._translated(), self.engine.connect() as conn:
            if ref == "last":
                row = conn.execute(
                    select(sessions.c.session_id)
                    # The last recorded with traffic: not a replay, not a background session.
                    .where(sessions.c.replay_of.is_(None), with_traffic())
                    .order_by(sessions.c.started_ns.desc(), sessions.c.session_id.desc())
                    .limit(1)
                ).first()
                if row is None:
                    raise SessionNotFound(
                        "no session with traffic recorded yet "
                        "(`blackbox sessions --all` lists background sessions too)"
                    )
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
            .where(events.c.sid == layout.sid_bytes(session_id), events.c.seq > after_seq)
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
        readers (the analytics refresh), whose work per record is small enough that SQLAlchemy's
        row processing and one object per record would be most of it. `is_error` comes as the
        driver holds it (0/1 on SQLite); everything else is as `read_log` gives it."""
        columns = ", ".join(column.name for column in _EVENT_COLUMNS)
        mark = self.MARK
        sql = f"SELECT {columns} FROM event_log WHERE position > {mark} ORDER BY position"
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
