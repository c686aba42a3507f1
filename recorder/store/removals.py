"""Retention's removals, as the log records them: how a removal is recorded and carried out in one
transaction, which sessions were removed on whose record, and what `verify` finds when a removal
is not what the log says.

The database holds the rule (migration 0003): a session's records can be deleted only once the
session is listed in `retention_removals`, and a listing is refused unless it points at a
`retention_applied` record of another session that names the session. That record cannot be
deleted, so every removal — retention's own or a writer's who forged the record — stays in the
log, and `verify` lists it; what no record explains is tampering.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from blackbox.recorder import AppendRefused
from blackbox.recorder.log import Kind, NewEvent, chain, new_session_id
from blackbox.recorder.log import events as docs
from blackbox.recorder.store import tree
from blackbox.recorder.store.schema import events, retention_removals, sessions
from sqlalchemy import Join, delete, func, insert, select
from sqlalchemy.engine import Connection

RETENTION_SESSION = "retention"


class Removal(NamedTuple):
    """One removed session and the `retention_applied` record that removed it: its log position,
    its session (None when the record is gone, which only bypassing the triggers allows) and
    its time."""

    session_id: str
    removed_by: int
    record_session: str | None
    record_wall_ns: int | None


def record_and_remove(
    conn: Connection,
    append: Callable[[Sequence[NewEvent]], int],
    ids: list[str],
    applied: docs.RetentionApplied | None,
    record_session: str | None,
) -> int:
    """Inside the caller's write transaction: append the retention session (`session_started`
    named `retention`, `applied` with the removed ids and counts filled in, `session_ended`, and
    the store's seal), list each removed session against its `retention_applied` record, and
    delete the sessions' records and rows. Returns how many records were deleted."""
    count = conn.execute(
        select(func.count()).select_from(events).where(events.c.session_id.in_(ids))
    ).scalar_one()
    doc = dataclasses.replace(
        applied or docs.RetentionApplied(),
        removed=ids,
        sessions_removed=len(ids),
        records_removed=count,
    )
    now = time.time_ns()
    rsid = record_session or new_session_id(now)
    if rsid in ids:
        raise AppendRefused(f"session {rsid} cannot record its own removal")
    documents = [
        docs.started_here(
            name=RETENTION_SESSION, transport=None, command=["blackbox", "retention", "apply"]
        ),
        doc,
        docs.SessionEnded(reason="completed", outcome="ok", exit_code=0),
    ]
    append(
        [
            NewEvent(rsid, seq, now + seq, seq, d.KIND, "-", docs.encode(d))
            for seq, d in enumerate(documents, start=1)
        ]
    )
    by = conn.execute(
        select(events.c.position).where(
            events.c.session_id == rsid, events.c.kind == str(Kind.RETENTION_APPLIED)
        )
    ).scalar_one()
    conn.execute(insert(retention_removals), [{"session_id": sid, "removed_by": by} for sid in ids])
    # The removed records stay leaves of the Merkle tree: sequenced now if they were not yet,
    # their leaf hashes kept and marked with this record, so every earlier checkpoint verifies.
    tree.sequence(conn)
    tree.mark_removed(conn, ids, by)
    removed = 0
    for sid in ids:
        # One session at a time, through its (session_id, seq) index: in seq order, the one
        # order the SQLite trigger accepts (a session's lowest remaining seq first).
        removed += conn.execute(delete(events).where(events.c.session_id == sid)).rowcount
    conn.execute(delete(sessions).where(sessions.c.session_id.in_(ids)))
    return removed


def _with_record() -> Join:
    return retention_removals.outerjoin(
        events, events.c.position == retention_removals.c.removed_by
    )


def listed(conn: Connection) -> list[Removal]:
    """Every removed session with its record, in the order they were removed."""
    query = (
        select(
            retention_removals.c.session_id,
            retention_removals.c.removed_by,
            events.c.session_id,
            events.c.wall_ns,
        )
        .select_from(_with_record())
        .order_by(retention_removals.c.removed_by, retention_removals.c.session_id)
    )
    return [Removal(*row) for row in conn.execute(query)]


def findings(conn: Connection, session_id: str | None = None) -> list[chain.Finding]:
    """Removals the log does not explain as retention: a listed removal whose record is not a
    `retention_applied` of another session naming it (possible only with the triggers bypassed),
    and a removed session of which records or a `sessions` row remain — part of it deleted, or
    records put back after it went."""
    query = select(
        retention_removals.c.session_id,
        retention_removals.c.removed_by,
        events.c.session_id,
        events.c.kind,
        events.c.raw,
    ).select_from(_with_record())
    if session_id is not None:
        query = query.where(retention_removals.c.session_id == session_id)
    out: list[chain.Finding] = []
    for sid, by, record_sid, kind, raw in conn.execute(query).all():
        doc = None
        if kind == Kind.RETENTION_APPLIED:
            doc = docs.decode_as(docs.RetentionApplied, chain.as_bytes(raw))
        if doc is None or record_sid == sid or sid not in doc.removed:
            out.append(
                chain.Finding(
                    sid,
                    None,
                    "removed",
                    f"listed as removed by retention at log position {by}, but no "
                    "retention_applied record there names it: removed outside retention",
                )
            )
        left, first, last = conn.execute(
            select(func.count(), func.min(events.c.seq), func.max(events.c.seq)).where(
                events.c.session_id == sid
            )
        ).one()
        if left:
            out.append(
                chain.Finding(
                    sid,
                    first,
                    "removed",
                    f"retention removed this session (record at log position {by}), yet {left} "
                    f"of its records remain (seq {first}-{last}): part of it was deleted, or "
                    "records were put back, outside retention",
                )
            )
        row = conn.execute(select(sessions.c.session_id).where(sessions.c.session_id == sid))
        if row.first() is not None:
            out.append(
                chain.Finding(
                    sid,
                    None,
                    "projection",
                    f"retention removed this session (record at log position {by}), yet it "
                    "has a sessions row",
                )
            )
    return out


def orphan_findings(conn: Connection) -> list[chain.Finding]:
    """Records whose session has no `sessions` row and that retention did not remove: the row
    was deleted, and with it what `verify` would have checked the session by (records of a
    removed session are `findings`' to name)."""
    orphans = (
        conn.execute(
            select(events.c.session_id)
            .distinct()
            .where(
                ~select(sessions.c.session_id)
                .where(sessions.c.session_id == events.c.session_id)
                .exists(),
                ~select(retention_removals.c.session_id)
                .where(retention_removals.c.session_id == events.c.session_id)
                .exists(),
            )
            .order_by(events.c.session_id)
        )
        .scalars()
        .all()
    )
    return [
        chain.Finding(sid, None, "projection", "the session's records have no sessions row")
        for sid in orphans
    ]


def position_findings(conn: Connection) -> list[chain.Finding]:
    """Records removed without a recorded reason: positions missing from the log beyond what
    the `retention_applied` records say retention removed (a backend where gaps are evidence:
    SQLite)."""
    count, top = conn.execute(
        select(func.count(), func.coalesce(func.max(events.c.position), 0))
    ).one()
    missing = top - count
    if missing <= 0:
        return []
    explained = 0
    for (raw,) in conn.execute(
        select(events.c.raw).where(events.c.kind == str(Kind.RETENTION_APPLIED))
    ):
        doc = docs.decode_as(docs.RetentionApplied, bytes(raw))
        if doc is not None and isinstance(doc.records_removed, int):
            explained += doc.records_removed
    # Records missing from inside a session that still has its row are the chain's
    # findings (missing, truncated) already.
    listed = conn.execute(select(func.coalesce(func.sum(sessions.c.last_seq), 0))).scalar_one()
    present = conn.execute(
        select(func.count())
        .select_from(events)
        .where(
            select(sessions.c.session_id)
            .where(sessions.c.session_id == events.c.session_id)
            .exists()
        )
    ).scalar_one()
    explained += max(0, listed - present)
    if missing <= explained:
        return []
    gaps = conn.exec_driver_sql(
        "SELECT position, next FROM (SELECT position, "
        "lead(position) OVER (ORDER BY position) AS next FROM events) AS runs "
        "WHERE next > position + 1 ORDER BY position LIMIT 3"
    ).all()
    first = conn.execute(select(func.min(events.c.position))).scalar_one()
    spans = ([f"1-{first - 1}"] if first > 1 else []) + [
        f"{low + 1}-{high - 1}" if high - low > 2 else f"{low + 1}" for low, high in gaps
    ]
    return [
        chain.Finding(
            "-",
            None,
            "removed",
            f"{missing} log position(s) missing (first: {', '.join(spans[:3])}); "
            f"retention_applied records and the sessions' own gaps account for {explained}: "
            "records were deleted outside retention",
        )
    ]
