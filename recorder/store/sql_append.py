"""The append path of the SQL event store: one write transaction that chains each session's new
records from its stored head, refuses gaps and appends after a seal, inserts the rows and updates
the sessions' rows.

It is the hottest code in the store (every shipped batch goes through `_chain_rows`), so it lives
apart from the reads and the verification, where it can be read and profiled on its own.
Retention (`SqlEventStore.remove_sessions`) appends its record through `_append_in` in its own
transaction.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from blackbox.recorder import AppendRefused
from blackbox.recorder.log import Kind, NewEvent, chain, derived_columns
from blackbox.recorder.store import audit, layout, session_rows
from blackbox.recorder.store.projection import events_row, project
from blackbox.recorder.store.sql_base import SqlStoreBase
from sqlalchemy.engine import Connection


class AppendMixin(SqlStoreBase):
    """`append`, and the chaining and insertion it is made of."""

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
        new = [sid for sid in by_session if sid not in existing]
        if new:
            # The way back from a new session's 16 id bytes to its id (`layout.sid_bytes`).
            mark = self.MARK
            conn.exec_driver_sql(
                f"INSERT INTO session_ids (sid, session_id) VALUES ({mark}, {mark}) "
                "ON CONFLICT DO NOTHING",
                [(layout.sid_bytes(sid), sid) for sid in new],
            )
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
        # Rows in the table's layout (`layout.ROW_COLUMNS`): the session's 16 id bytes and the
        # codes of the enumerated columns.
        sid_key, encode, frame_code = layout.sid_bytes(sid), layout.encode_row, layout.FRAME
        directions, msg_types = layout.DIRECTION_CODES, layout.MSG_TYPE_CODES
        id_types = layout.RPC_ID_TYPE_CODES
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
                msg, method, rpc_id, id_type, tool, is_error, code, frame_era, note = derived
                try:
                    yield (sid_key, seq, ev.wall_ns, ev.mono_ns, frame_code, None,
                           directions[ev.direction], None, raw, ev.raw_size,
                           None if msg is None else msg_types[msg], method, rpc_id,
                           None if id_type is None else id_types[id_type], tool, is_error, code,
                           frame_era, note, head)  # fmt: skip
                except KeyError:
                    yield encode(events_row(ev, head))  # a direction kept as text, or refused
                frames += 1
                stored += 1
                if era is None:  # the first frame that names one, as `verify` reads it
                    era = derived[era_at]
                continue
            yield encode(events_row(ev, head))
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
                yield encode(events_row(seal, head))
                last_seq = seal.seq
                proj["sealed_count"] = seal.seq - 1
        if first_wall is None:
            return
        if era is not None:
            proj.setdefault("era", era)  # an era_detected verdict in this batch wins
        proj.update(last_seq=last_seq, head_hash=head, last_wall_ns=last_wall)
        done.append(session_rows.Appended(sid, current, frames, stored, first_wall, proj))
