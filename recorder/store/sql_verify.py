"""The SQL event store's verification (`blackbox verify`, export checks): each session's chain and
seal, every record's derived columns and the session's row recomputed from its records, and the
evidence of removed records.

It reads the whole log in the worst case, so it has its own streaming and parallel paths: a
long session's chain is checked as runs on several cores (`_check_runs`, each backend its own
way) while its records are re-derived on a thread. The findings are `chain.Finding`s, named by
`chain`, `audit` and `removals`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from blackbox.recorder import SessionNotFound
from blackbox.recorder.log import DERIVED, Kind, chain, derived_columns
from blackbox.recorder.store import audit, layout, removals
from blackbox.recorder.store.projection import derive, replayed
from blackbox.recorder.store.schema import event_rows, events, sessions
from blackbox.recorder.store.sql_base import SqlStoreBase
from sqlalchemy import select

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


class VerifyMixin(SqlStoreBase):
    """`verify` and `verify_each`, and the reads they are made of."""

    def verify(
        self, session_id: str | None = None, progress: Callable[[int, int], None] | None = None
    ) -> list[chain.Finding]:
        query = select(sessions.c.session_id, sessions.c.sealed_count).order_by(
            sessions.c.session_id
        )
        if session_id is not None:
            query = query.where(sessions.c.session_id == session_id)
        with self._translated(), self.engine.connect() as conn:
            targets = conn.execute(query).all()
        if session_id is not None and not targets:
            raise SessionNotFound(f"no session {session_id}")
        checked = self._verify_targets(targets, progress)
        findings = [f for found in checked.values() for f in found]
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

    def _verify_targets(
        self, targets: Sequence, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, list[chain.Finding]]:
        """Each (session id, sealed count)'s findings: its chain and seal, derived columns and
        projection; `progress` gets (done, total) after each session."""
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
                if progress is not None:
                    progress(len(out), len(targets))
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
            f"SELECT seq, wall_ns, kind, raw, hash, {', '.join(DERIVED)} FROM event_log "
            f"WHERE sid = {self.MARK} ORDER BY seq"
        )
        frame, columns = str(Kind.FRAME), derived_columns
        others: list[tuple] = []
        frames, first_era, first_wall, last = 0, None, None, None
        with self._translated(), self.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None  # a connection in use holds its driver's
            cursor = self._bytes_cursor(driver)
            try:
                cursor.execute(sql, (layout.sid_bytes(session_id),))
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
        # Stream in chunks so a long session is checked in bounded memory, the driver refilling
        # the same fetch buffers rather than one list growing to the session's size.
        sql = f"SELECT {_CHAIN_COLUMNS} FROM event_log WHERE sid = {self.MARK} ORDER BY seq"
        with self._translated(), self.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None  # a connection in use holds its driver's
            cursor = driver.cursor()
            try:
                cursor.execute(sql, (layout.sid_bytes(session_id),))
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
        # The session's lowest and highest seq, each one probe of the (sid, seq) index. A count
        # here read every row of the session once more than the chain check does (on
        # PostgreSQL its heap pages too, unless a vacuum has marked them all visible;
        # docs/performance.md, "PostgreSQL verify to 10M"). The runs below count their records,
        # so a gap or a duplicate is still found; a record below 1 is found here.
        key, seq = layout.sid_bytes(session_id), event_rows.c.seq
        lowest = select(seq).where(event_rows.c.sid == key).order_by(seq).limit(1)
        highest = select(seq).where(event_rows.c.sid == key).order_by(seq.desc()).limit(1)
        with self._translated(), self.engine.connect() as conn:
            first, last = conn.execute(
                select(lowest.scalar_subquery(), highest.scalar_subquery())
            ).one()
        if first != 1 or last is None:
            return None  # no record, or one outside 1..N
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
                    events.c.sid == layout.sid_bytes(session_id), events.c.seq == seq
                )
            ).one()
        return chain.ChainRecord._make(row)
