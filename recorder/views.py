"""Plain-row views of the log for listings: the sessions list and one session's timeline."""

from __future__ import annotations

from recorder.model import SessionInfo, StoredEvent
from recorder.store import EventStore

EXCERPT = 80


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="milliseconds")


def session_row(info: SessionInfo) -> dict:
    duration = None
    if info.started_ns is not None and info.ended_ns is not None:
        duration = round((info.ended_ns - info.started_ns) / 1e9, 3)
    return {
        "id": info.session_id,
        "name": info.name,
        "server": info.command,
        "transport": info.transport,
        "era": info.era,
        "started": _iso(info.started_ns),
        "duration_s": duration,
        "frames": info.frames,
        "outcome": info.outcome or ("open" if not info.sealed else None),
        "replay_of": info.replay_of,
    }


SESSION_COLUMNS = ["id", "name", "server", "started", "duration_s", "frames", "outcome"]


def list_session_rows(store: EventStore, limit: int | None = None) -> list[dict]:
    """Sessions newest first, as rows."""
    return [session_row(info) for info in store.list_sessions(limit=limit)]


def excerpt(raw: bytes, width: int = EXCERPT) -> str:
    text = raw[: width * 4].decode("utf-8", errors="replace").replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def event_row(ev: StoredEvent, started_mono_ns: int = 0) -> dict:
    return {
        "seq": ev.seq,
        "offset_ms": round((ev.mono_ns - started_mono_ns) / 1e6, 3),
        "direction": ev.direction,
        "kind": ev.kind,
        "type": ev.msg_type,
        "method": ev.method,
        "id": ev.rpc_id,
        "tool": ev.tool,
        "bytes": ev.raw_size if ev.raw_size is not None else len(ev.raw),
        "excerpt": excerpt(ev.raw),
    }


TIMELINE_COLUMNS = ["seq", "offset_ms", "direction", "kind", "method", "id", "excerpt"]


def timeline(store: EventStore, session_id: str) -> list[dict]:
    """One session's records as rows, offsets relative to its first record."""
    rows: list[dict] = []
    first_mono: int | None = None
    for ev in store.read_session(session_id):
        if first_mono is None:
            first_mono = ev.mono_ns
        rows.append(event_row(ev, first_mono))
    return rows
