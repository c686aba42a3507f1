"""The sessions listing: each session with what went wrong in it, filtered, with a short handle.

The `sessions` projection says how a session ended, not what happened inside it: a session whose
tool calls all failed ended `ok`. Each listed session carries its counts and the outcome derived
from them, both from `counts` (the one place every surface takes them from), reading only the
listed sessions' records.

Each listed session carries its short handle (`handles`). Replays and background sessions (no
traffic: the store's `with_traffic`) are hidden unless asked for.

`COLUMNS` lists the table's columns in order; json/jsonl/csv rows carry every name of `COUNTS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from blackbox.recorder.log import SessionInfo
from blackbox.recorder.query.counts import (
    COUNT_NAMES,
    SessionCounts,
    count_sessions,
    derived_outcome,
)
from blackbox.recorder.query.handles import short_handles
from blackbox.recorder.query.name_glob import contains_condition, glob_condition
from blackbox.recorder.store import sessions, with_traffic
from sqlalchemy import select

# The columns the table shows, in order (json/jsonl/csv carry every key of the row).
COLUMNS = ["handle", "name", "server", "started", "duration_s", "calls", "errors", "faults"]
COLUMNS += ["outcome"]

# Every count a row carries (json/jsonl/csv), counted by `counts.count_sessions`.
COUNTS = COUNT_NAMES
OUTCOMES: tuple[str, ...] = ("ok", "errors", "faults", "open", "crashed", "interrupted")
OUTCOMES += ("recovered", "server_exited", "diverged")  # diverged: a replay not as recorded

_BATCH = 200
# Ids bound in one statement (PostgreSQL takes at most 65,535 parameters, SQLite 32,766).
_IDS_PER_QUERY = 1000


@dataclass(frozen=True)
class SessionFilter:
    """What `sessions` keeps. None or False means no condition."""

    name: str | None = None  # a shell glob (`name_glob`)
    server: str | None = None  # a substring of the server command (or URL)
    since_ns: int | None = None
    until_ns: int | None = None
    outcome: str | None = None
    errors: bool = False  # only sessions with at least one error response
    faults: bool = False  # only sessions with at least one fault
    replays: bool = False  # include replay sessions
    background: bool = False  # include sessions without traffic (a proxy's tool watch, ...)
    limit: int | None = 50

    def needs_counts(self) -> bool:
        return bool(self.outcome or self.errors or self.faults)


@dataclass
class SessionSummary:
    """One listed session: its projection row, its counts, its handle and derived outcome."""

    info: SessionInfo
    counts: SessionCounts = field(default_factory=SessionCounts)
    handle: str = ""

    @property
    def outcome(self) -> str:
        return derived_outcome(self.info, self.counts)

    def row(self) -> dict:
        info = self.info
        duration = None
        if info.started_ns is not None and info.ended_ns is not None:
            duration = round((info.ended_ns - info.started_ns) / 1e9, 3)
        return {
            "handle": self.handle,
            "id": info.session_id,
            "name": info.name,
            "server": info.command,
            "transport": info.transport,
            "era": info.era,
            "started": _iso(info.started_ns),
            "duration_s": duration,
            "frames": info.frames,
            **self.counts.as_dict(),
            "outcome": self.outcome,
            "ended": info.outcome,
            "replay_of": info.replay_of,
        }


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="milliseconds")


def _engine(store: Any) -> Any:
    engine = getattr(store, "engine", None)
    if engine is None:
        raise TypeError(f"{type(store).__name__} is not an SQL store")
    return engine


def count_records(store: Any, session_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """The `COUNTS` of each session by name, by session id (zeros for one without records)."""
    return {sid: c.as_dict() for sid, c in count_sessions(store, session_ids).items()}


def _candidates(store: Any, filt: SessionFilter, offset: int, limit: int | None) -> list[Any]:
    query = select(sessions).order_by(sessions.c.started_ns.desc(), sessions.c.session_id.desc())
    if filt.since_ns is not None:
        query = query.where(sessions.c.started_ns >= filt.since_ns)
    if filt.until_ns is not None:
        query = query.where(sessions.c.started_ns < filt.until_ns)
    if not filt.replays:
        query = query.where(sessions.c.replay_of.is_(None))
    if not filt.background:
        query = query.where(with_traffic())
    query = query.offset(offset)
    if limit is not None:
        query = query.limit(limit)
    with _engine(store).connect() as conn:
        dialect = conn.dialect.name
        if filt.server:
            query = query.where(contains_condition(sessions.c.command, filt.server, dialect))
        if filt.name is not None:  # in SQL: the limit counts matching sessions only
            query = query.where(glob_condition(sessions.c.name, filt.name, dialect))
        return list(conn.execute(query))


def list_summaries(store: Any, filt: SessionFilter | None = None) -> list[SessionSummary]:
    """Sessions newest first, with counts, derived outcome and handle, as `filt` keeps them."""
    from blackbox.recorder.store import session_info

    filt = filt or SessionFilter()
    found: list[SessionSummary] = []
    offset = 0
    while filt.limit is None or len(found) < filt.limit:
        # Without a condition on the counts, one query of `limit` rows is the answer; with one,
        # sessions are counted a batch at a time until enough are kept.
        size = filt.limit if not filt.needs_counts() else _BATCH
        rows = _candidates(store, filt, offset, size)
        offset += len(rows)
        infos = [session_info(row) for row in rows]
        counts = count_sessions(store, [i.session_id for i in infos])
        for info in infos:
            summary = SessionSummary(info, counts[info.session_id])
            if _kept(summary, filt):
                found.append(summary)
        if size is None or len(rows) < size or not filt.needs_counts():
            break
    found = found[: filt.limit] if filt.limit is not None else found
    handles = short_handles(store, [summary.info.session_id for summary in found])
    for summary in found:
        summary.handle = handles.get(summary.info.session_id, summary.info.session_id)
    return found


def _kept(summary: SessionSummary, filt: SessionFilter) -> bool:
    if filt.errors and not summary.counts.errors:
        return False
    if filt.faults and not summary.counts.faults:
        return False
    return not (filt.outcome and summary.outcome != filt.outcome)
