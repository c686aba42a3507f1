"""What the store derives from a record, whatever the database: its row and its session's row.

An events row is the record's own fields, the columns derived from its raw bytes and its chain
hash; session events fold into the `sessions` projection. Both are pure functions of the records,
so they live apart from the SQL that stores them, in one place for every backend.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from blackbox.recorder.log import (
    Kind,
    NewEvent,
    SessionInfo,
    StoredEvent,
    derived_columns,
    events,
    fit_era,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Row

# A record's columns as the store inserts them: `StoredEvent`'s fields but the log position, which
# the database assigns.
INSERT_COLUMNS = tuple(f.name for f in fields(StoredEvent) if f.name != "position")


def events_row(ev: NewEvent, digest: bytes) -> tuple:
    """An events row in INSERT_COLUMNS order, derived fields computed from the raw bytes."""
    head = (ev.session_id, ev.seq, ev.wall_ns, ev.mono_ns, str(ev.kind), str(ev.direction))
    return (*head, ev.raw, ev.raw_size, *derive(ev.kind, ev.raw), digest)


def derive(kind: str, raw: bytes) -> tuple:
    """A record's derived columns (`DERIVED` order), computed from its kind and raw bytes: what
    the append stores and what `verify` recomputes."""
    if kind == Kind.FRAME:
        return derived_columns(raw)
    method, tool, era, degraded = events.derived_fields(raw)
    return (None, method, None, None, tool, None, None, era, degraded)


PROJECTED = frozenset({Kind.SESSION_STARTED, Kind.ERA_DETECTED, Kind.SESSION_ENDED})


def project(proj: dict, ev: NewEvent) -> None:
    """Fold one session event into the sessions projection being built for this append (frames
    only name the era, which the append loop takes from their derived columns). A document that
    does not decode adds nothing: the projection holds only what the schema vouches for."""
    if ev.kind not in PROJECTED:
        return  # faults, stderr, exchanges, decisions...: no need to parse them again
    doc, _problem = events.decode(ev.kind, ev.raw)
    if isinstance(doc, events.SessionStarted):
        proj["started_ns"] = ev.wall_ns
        for key in ("name", "transport", "replay_of"):
            if getattr(doc, key) is not None:
                proj[key] = getattr(doc, key)
        command = doc.command
        if isinstance(command, list):
            command = " ".join(str(part) for part in command)
        if command is not None:
            proj["command"] = command
    elif isinstance(doc, events.EraDetected):
        era = fit_era(doc.era)  # as the record's own era column holds it
        if era:
            # The tap's verdict wins over the first frame that named a version (a client in
            # auto mode first offers 2026-07-28 in `server/discover`, then falls back).
            proj["era"] = era
            proj["era_detected"] = True
        for key in ("client_info", "server_info"):
            if getattr(doc, key) is not None:
                proj[key] = json.dumps(getattr(doc, key), sort_keys=True)
    elif isinstance(doc, events.SessionEnded):
        proj["ended_ns"] = ev.wall_ns
        proj["outcome"] = doc.outcome


def session_info(row: Row[*tuple[Any, ...]]) -> SessionInfo:
    """A `sessions` row as the `SessionInfo` readers get."""
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


# The `sessions` columns that `verify` recomputes from a session's records.
CHECKED_COLUMNS = (
    "name",
    "transport",
    "command",
    "replay_of",
    "client_info",
    "server_info",
    "started_ns",
    "ended_ns",
    "outcome",
    "era",
    "frames",
    "last_seq",
    "last_wall_ns",
    "head_hash",
    "sealed_count",
)


def replayed(
    session_id: str, records: list[tuple], frames: int, first_frame_era: str | None
) -> dict:
    """The `sessions` columns the appends derived, recomputed from a session's records: `records`
    are its non-frame records as (seq, wall_ns, kind, raw) in seq order, `frames` how many frames
    it holds and `first_frame_era` the era of the first frame that names one. The seq, wall time
    and hash of the last record are the caller's (they come from frames too).

    `started_ns` is not fixed by the records alone (it is the `session_started` record's time,
    or the first record's when that record arrived in a later append), so it is left out here."""
    proj: dict = {}
    ended_seq = None
    for seq, wall_ns, kind, raw in records:
        if kind == Kind.SESSION_SEALED:
            if ended_seq is not None and seq == ended_seq + 1 and "sealed_count" not in proj:
                proj["sealed_count"] = ended_seq  # the store's own seal, after session_ended
            continue
        if kind == Kind.SESSION_ENDED and ended_seq is None:
            ended_seq = seq
        project(proj, NewEvent(session_id, seq, wall_ns, 0, kind, "-", raw))
    if not proj.pop("era_detected", False):
        proj["era"] = first_frame_era
    proj["frames"] = frames
    return {column: proj.get(column) for column in CHECKED_COLUMNS if column != "started_ns"}
