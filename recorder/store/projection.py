"""What the store derives from a record, whatever the database: its row and its session's row.

An events row is the record's own fields, the columns derived from its raw bytes and its chain
hash; session events fold into the `sessions` projection. Both are pure functions of the records,
so they live apart from the SQL that stores them, in one place for every backend.
"""

from __future__ import annotations

import json

import orjson

from recorder.jsonrpc import classify
from recorder.model import Kind, NewEvent, SessionInfo

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
WALL_NS, KIND, ERA = 2, 4, INSERT_COLUMNS.index("era")
# Classification's leading fields are the derived columns, from msg_type to era.
DERIVED_FIELDS = INSERT_COLUMNS.index("era") - INSERT_COLUMNS.index("msg_type") + 1


def events_row(ev: NewEvent, digest: bytes) -> tuple:
    """An events row in INSERT_COLUMNS order, derived fields computed from the raw bytes."""
    head = (ev.session_id, ev.seq, ev.wall_ns, ev.mono_ns, str(ev.kind), str(ev.direction))
    if ev.kind == Kind.FRAME:
        derived = classify(ev.raw)[:DERIVED_FIELDS]
    else:
        doc = read_doc(ev.raw)
        tool, method, era = (
            doc.get(key) if isinstance(doc.get(key), str) else None
            for key in ("tool", "method", "era")
        )
        derived = (None, method, None, None, tool, None, None, era)
    return (*head, ev.raw, ev.raw_size, *derived, digest)


def read_doc(raw: bytes) -> dict:
    """A record's JSON document, or an empty one when it is not a JSON object."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


PROJECTED = frozenset({Kind.SESSION_STARTED, Kind.ERA_DETECTED, Kind.SESSION_ENDED})


def project(proj: dict, ev: NewEvent) -> None:
    """Fold one session event into the sessions projection being built for this append (frames
    only name the era, which the append loop takes from their derived columns)."""
    if ev.kind not in PROJECTED:
        return  # faults, stderr, exchanges, decisions...: no need to parse them again
    doc = read_doc(ev.raw)
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


def session_info(row) -> SessionInfo:  # type: ignore[no-untyped-def]
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
