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
from blackbox.recorder.log import Kind, NewEvent, chain, merkle, new_session_id
from blackbox.recorder.log import events as docs
from blackbox.recorder.store import layout, tree
from blackbox.recorder.store.schema import (
    event_rows,
    events,
    holds,
    retention_removals,
    session_ids,
    sessions,
    signed_removals,
    tree_removed_leaves,
)
from sqlalchemy import CompoundSelect, Join, delete, func, insert, select, text, union_all
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


# Signs what a removal takes (the filled-in `retention_applied` document, the log's store id)
# with the log's key: the trust context's, handed in so the store never holds a key.
Authorise = Callable[[docs.RetentionApplied, str], str]


def record_and_remove(
    conn: Connection,
    append: Callable[[Sequence[NewEvent]], int],
    ids: list[str],
    applied: docs.RetentionApplied | None,
    record_session: str | None,
    authorise: Authorise | None = None,
) -> int:
    """Inside the caller's write transaction: append the retention session (`session_started`
    named `retention`, `applied` with the removed ids, counts and leaves filled in and signed by
    `authorise`, `session_ended`, and the store's seal), list each removed session against its
    `retention_applied` record, and delete the sessions' records and rows. Returns how many
    records were deleted."""
    count = conn.execute(
        select(func.count()).select_from(events).where(events.c.session_id.in_(ids))
    ).scalar_one()
    # Every removed record is a leaf before the removal is signed: the signature names them.
    tree.sequence(conn)
    leaves = {
        sid: merkle.leaf_ranges([leaf.index for leaf in tree.session_leaves(conn, sid)])
        for sid in ids
    }
    doc = dataclasses.replace(
        applied or docs.RetentionApplied(),
        removed=ids,
        sessions_removed=len(ids),
        records_removed=count,
        removed_leaves=dict(leaves),
    )
    if authorise is not None:
        doc = dataclasses.replace(doc, authorisation=authorise(doc, tree.log_id(conn)))
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
            events.c.sid == layout.sid_bytes(rsid),
            events.c.kind == str(Kind.RETENTION_APPLIED),
        )
    ).scalar_one()
    conn.execute(insert(retention_removals), [{"session_id": sid, "removed_by": by} for sid in ids])
    # The removed records stay leaves of the Merkle tree: sequenced now if they were not yet,
    # their leaf hashes kept and marked with this record, so every earlier checkpoint verifies.
    tree.sequence(conn)
    tree.mark_removed(conn, ids, by)
    removed = 0
    for sid in ids:
        # One session at a time, through its (sid, seq) index: in seq order, the one order the
        # SQLite trigger accepts (a session's lowest remaining seq first).
        key = layout.sid_bytes(sid)
        removed += conn.execute(delete(event_rows).where(event_rows.c.sid == key)).rowcount
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


class RetentionRecord(NamedTuple):
    """A `retention_applied` record in the log: its position, session and document (None when
    it does not decode)."""

    position: int
    session_id: str
    doc: docs.RetentionApplied | None


def retention_query() -> CompoundSelect:
    """The rows that can be `retention_applied` records, read through the partial index
    `layout.RETENTION_ROWS` (no scan of the log): position, session id, raw, kind code and text.
    Two branches, each an equality the planner takes as rare: asked for the index's own
    predicate alone, PostgreSQL without statistics (autovacuum off, a bulk load) guesses that
    `kind_text IS NOT NULL` holds for nearly every row and scans the log instead."""
    kind = str(Kind.RETENTION_APPLIED)
    # In parentheses: text is pasted as it is, and AND binds tighter than its OR.
    indexed = text(f"({layout.RETENTION_ROWS})")
    columns = (
        event_rows.c.position,
        session_ids.c.session_id,
        event_rows.c.raw,
        event_rows.c.kind_code,
        event_rows.c.kind_text,
    )
    joined = select(*columns).join_from(
        event_rows, session_ids, session_ids.c.sid == event_rows.c.sid
    )
    return union_all(
        joined.where(indexed, event_rows.c.kind_code == layout.KIND_CODES[kind]),
        joined.where(indexed, event_rows.c.kind_text == kind),
    )


def retention_records(conn: Connection) -> dict[int, RetentionRecord]:
    """Every `retention_applied` record in the log, by log position: the rows of
    `retention_query` whose kind reads as `retention_applied` through `event_log` (the code's
    text, else `kind_text`)."""
    kind = str(Kind.RETENTION_APPLIED)
    return {
        p: RetentionRecord(p, sid, docs.decode_as(docs.RetentionApplied, chain.as_bytes(raw)))
        for p, sid, raw, code, kind_text in conn.execute(retention_query())
        if layout.KIND_NAMES.get(code, kind_text) == kind
    }


def signed_from(conn: Connection) -> int:
    """The log position from which a removal must be signed (migration 0008; 1 without a row)."""
    found = conn.execute(
        select(signed_removals.c.from_position).where(signed_removals.c.id == 1)
    ).scalar()
    return int(found) if found is not None else 1


def _within(ranges: object, idx: int) -> bool:
    return isinstance(ranges, list) and any(
        isinstance(r, list) and len(r) == 2 and r[0] <= idx <= r[1] for r in ranges
    )


def _leaf_count(ranges: object) -> int:
    if not isinstance(ranges, list):
        return -1
    return sum(r[1] - r[0] + 1 for r in ranges if isinstance(r, list) and len(r) == 2)


def kept_leaf_findings(conn: Connection, session_id: str | None = None) -> list[chain.Finding]:
    """What binds a removed record's kept leaf hash to its removal, checked (docs/trust.md,
    signed removals): each kept leaf names its session, and the retention record it names must
    list that session with that leaf; each such record since `signed_from` lists the leaves of
    every session it removes, carries a signature (checked with the key by
    `trust.removal_note`), keeps exactly the leaves it lists, and removes no held session."""
    records = retention_records(conn)
    start = signed_from(conn)
    held = set(conn.execute(select(holds.c.session_id)).scalars())
    query = select(
        tree_removed_leaves.c.idx,
        tree_removed_leaves.c.removed_by,
        tree_removed_leaves.c.session_id,
    ).order_by(tree_removed_leaves.c.idx)
    if session_id is not None:
        query = query.where(tree_removed_leaves.c.session_id == session_id)
    out: list[chain.Finding] = []
    bound: dict[tuple[int, str], int] = {}
    unbound = 0
    for idx, by, sid in conn.execute(query):
        rec = records.get(by) if by is not None else None
        if rec is None or rec.doc is None:
            unbound += 1
            if unbound <= 3:
                out.append(
                    chain.Finding(
                        sid or "-",
                        None,
                        "removed",
                        f"leaf {idx}'s hash is kept as removed by log position {by}, where no "
                        "retention_applied record is: records were deleted outside retention",
                    )
                )
            continue
        if rec.doc.removed_leaves is None and by < start:
            continue  # made before removals were signed (migration 0008): bound to the record
        ranges = (rec.doc.removed_leaves or {}).get(sid) if sid is not None else None
        if ranges is None or not _within(ranges, idx):
            unbound += 1
            if unbound <= 3:
                whose = f"session {sid}" if sid is not None else "its session"
                out.append(
                    chain.Finding(
                        sid or "-",
                        None,
                        "removed",
                        f"leaf {idx}'s hash is kept as removed by the retention record at log "
                        f"position {by}, which does not name {whose} with that leaf: a "
                        "deletion passed off as retention",
                    )
                )
            continue
        bound[(by, sid)] = bound.get((by, sid), 0) + 1
    if unbound > 3:
        out.append(
            chain.Finding(
                "-", None, "removed", f"... and {unbound - 3} more kept leaves no retention names"
            )
        )
    for by, rec in sorted(records.items()):
        doc = rec.doc
        if doc is None or not doc.removed:
            continue
        if session_id is not None and session_id not in doc.removed:
            continue
        for sid in doc.removed:
            if session_id is not None and sid != session_id:
                continue
            present = (
                conn.execute(
                    select(events.c.position).where(events.c.sid == layout.sid_bytes(sid)).limit(1)
                ).first()
                or conn.execute(
                    select(sessions.c.session_id).where(sessions.c.session_id == sid)
                ).first()
            )
            if present is not None:
                out.append(
                    chain.Finding(
                        sid,
                        None,
                        "removed",
                        f"the retention record at log position {by} names this session as "
                        "removed, yet it is still in the log: the record does not describe a "
                        "removal",
                    )
                )
        if by >= start and (doc.removed_leaves is None or not doc.authorisation):
            out.append(
                chain.Finding(
                    session_id or "-",
                    None,
                    "unauthorised_removal",
                    f"the retention record at log position {by} removes "
                    f"{len(doc.removed)} session(s) without naming their leaves under the log "
                    f"key's signature, as every removal does from log position {start}: "
                    "sessions were removed outside retention",
                )
            )
            continue
        if doc.removed_leaves is None:
            continue
        if sorted(doc.removed_leaves) != sorted(doc.removed):
            out.append(
                chain.Finding(
                    session_id or "-",
                    None,
                    "removed",
                    f"the retention record at log position {by} lists other sessions as removed "
                    "than it names leaves of: its document was forged",
                )
            )
        for sid in doc.removed:
            if session_id is not None and sid != session_id:
                continue
            if sid in held:
                out.append(
                    chain.Finding(
                        sid,
                        None,
                        "held",
                        f"removed by the retention record at log position {by} while on legal "
                        "hold: a held session is never removed",
                    )
                )
            want = _leaf_count(doc.removed_leaves.get(sid))
            have = bound.get((by, sid), 0)
            if want != have:
                out.append(
                    chain.Finding(
                        sid,
                        None,
                        "removed",
                        f"the retention record at log position {by} names {max(want, 0)} "
                        f"leaves of this session; {have} are kept for it: its leaves were "
                        "deleted or added outside retention",
                    )
                )
    return out


def findings(conn: Connection, session_id: str | None = None) -> list[chain.Finding]:
    """Removals the log does not explain as retention: a listed removal whose record is not a
    `retention_applied` of another session naming it (possible only with the triggers bypassed),
    a removed session of which records or a `sessions` row remain — part of it deleted, or
    records put back after it went — and kept leaves no retention record names
    (`kept_leaf_findings`)."""
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
                events.c.sid == layout.sid_bytes(sid)
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
    out.extend(kept_leaf_findings(conn, session_id))
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
    found = [
        chain.Finding(sid, None, "projection", "the session's records have no sessions row")
        for sid in orphans
    ]
    # Records whose 16 session-id bytes name no session (`session_ids` is append-only: its row
    # was deleted behind the triggers' back): no reader sees them through `event_log`, so they
    # are named here by their bytes.
    unmapped = (
        conn.execute(
            select(event_rows.c.sid)
            .distinct()
            .where(~select(session_ids.c.sid).where(session_ids.c.sid == event_rows.c.sid).exists())
            .order_by(event_rows.c.sid)
        )
        .scalars()
        .all()
    )
    found.extend(
        chain.Finding(
            bytes(key).hex(), None, "missing", "records whose session id maps to no session"
        )
        for key in unmapped
    )
    return found


def position_findings(conn: Connection) -> list[chain.Finding]:
    """Records removed without a recorded reason: positions missing from the log beyond what
    the `retention_applied` records say retention removed (a backend where gaps are evidence:
    SQLite)."""
    count, top = conn.execute(
        select(func.count(), func.coalesce(func.max(event_rows.c.position), 0))
    ).one()
    missing = top - count
    if missing <= 0:
        return []
    explained = 0
    start = signed_from(conn)
    for rec in retention_records(conn).values():
        doc = rec.doc
        if doc is None:
            continue
        if doc.removed_leaves is not None:
            # A signed removal explains the records whose leaves it keeps, not what it claims:
            # `kept_leaf_findings` checks each of those leaves is its to keep.
            explained += conn.execute(
                select(func.count())
                .select_from(tree_removed_leaves)
                .where(tree_removed_leaves.c.removed_by == rec.position)
            ).scalar_one()
        elif rec.position < start and isinstance(doc.records_removed, int):
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
    first = conn.execute(select(func.min(event_rows.c.position))).scalar_one()
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
