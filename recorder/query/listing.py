"""The sessions listing: each session with what went wrong in it, filtered, with a short handle.

The `sessions` projection says how a session ended, not what happened inside it: a session whose
tool calls all failed ended `ok`. This module counts, from the log, each listed session's requests,
its error responses (JSON-RPC errors and tool results with `isError`) and its transport faults, and
derives an outcome that reflects them. Counting reads only the listed sessions' records through
the (session_id, seq) index, on PostgreSQL one aggregate per listed session whatever the
planner's statistics say, so a listing costs what it shows, not the size of the log.

Session ids are UUIDv7: ids from one hour share their first ten characters. A handle is the
shortest tail (six characters or more) of an id's random part that no other id ends with or
starts with, so `resolve` accepts it like a prefix. Only the listed sessions get one: the store
returns the few ids that share six characters with a listed id's tail (one pass over the ids in
the database, no index serves "ends with"), and the handles are counted among those. Replays are
hidden unless asked for.

`COLUMNS` lists the table's columns in order; a new count is one entry in `COUNTS` and one name in
`COLUMNS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from blackbox.recorder.log import SessionInfo
from blackbox.recorder.store import events, sessions
from sqlalchemy import String, and_, case, column, func, or_, select, true, values

# The columns the table shows, in order (json/jsonl/csv carry every key of the row).
COLUMNS = ["handle", "name", "server", "started", "duration_s", "calls", "errors", "faults"]
COLUMNS += ["outcome"]

# name -> SQL expression counted over a session's records.
COUNTS: dict[str, Any] = {
    "calls": and_(events.c.kind == "frame", events.c.msg_type == "request"),
    "errors": and_(
        events.c.kind == "frame",
        or_(events.c.msg_type == "error", events.c.is_error.is_(True)),
    ),
    "faults": events.c.kind == "fault",
}

# Stored outcomes that say the session ended normally: a derived one may replace them.
NORMAL_ENDINGS = (None, "ok", "server_exited")
OUTCOMES: tuple[str, ...] = ("ok", "errors", "faults", "open", "crashed", "interrupted")
OUTCOMES += ("recovered", "server_exited", "diverged")  # diverged: a replay not as recorded

HANDLE_MIN = 6
_BATCH = 200
# Ids bound in one statement (PostgreSQL takes at most 65,535 parameters, SQLite 32,766); above
# this many listed sessions, the handles are counted among every id, read once.
_IDS_PER_QUERY = 1000


@dataclass(frozen=True)
class SessionFilter:
    """What `sessions` keeps. None or False means no condition."""

    name: str | None = None
    server: str | None = None  # a substring of the server command (or URL)
    since_ns: int | None = None
    until_ns: int | None = None
    outcome: str | None = None
    errors: bool = False  # only sessions with at least one error response
    faults: bool = False  # only sessions with at least one fault
    replays: bool = False  # include replay sessions
    limit: int | None = 50

    def needs_counts(self) -> bool:
        return bool(self.outcome or self.errors or self.faults)


@dataclass
class SessionSummary:
    """One listed session: its projection row, its counts, its handle and derived outcome."""

    info: SessionInfo
    counts: dict[str, int] = field(default_factory=dict)
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
            **{name: self.counts.get(name, 0) for name in COUNTS},
            "outcome": self.outcome,
            "ended": info.outcome,
            "replay_of": info.replay_of,
        }


def derived_outcome(info: SessionInfo, counts: dict[str, int]) -> str:
    """How the session went: an abnormal ending as stored (crashed, interrupted, recovered), else
    `faults` when a fault was recorded, `errors` when a response was an error, else `ok` (or
    `open` for a session still running)."""
    if info.outcome not in NORMAL_ENDINGS:
        return str(info.outcome)
    if counts.get("faults"):
        return "faults"
    if counts.get("errors"):
        return "errors"
    if info.outcome is None and not info.sealed:
        return "open"
    return info.outcome or "ok"


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
    """The `COUNTS` of each session, by session id (zeros for one without records)."""
    result = {sid: dict.fromkeys(COUNTS, 0) for sid in session_ids}
    if not session_ids:
        return result
    sums = [func.sum(case((cond, 1), else_=0)).label(name) for name, cond in COUNTS.items()]
    ids = list(dict.fromkeys(session_ids))
    with _engine(store).connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:
            # Without statistics on `events` (after a bulk load, or with autovacuum off) the
            # planner overestimates each session's share of the log and compiles the per-session
            # index scans (JIT), which costs several times the listing itself.
            conn.exec_driver_sql("SET LOCAL jit = off")
        # A listing of every session (`--idle`) would pass more ids than a statement may bind.
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            if postgres:
                query = _counts_per_session(chunk, sums)
            else:
                # SQLite walks the index for each id of an IN list, whatever it knows of sizes.
                query = (
                    select(events.c.session_id.label("sid"), *sums)
                    .where(events.c.session_id.in_(chunk))
                    .group_by(events.c.session_id)
                )
            for row in conn.execute(query):
                result[row.sid] = {name: int(getattr(row, name) or 0) for name in COUNTS}
    return result


def _counts_per_session(session_ids: list[str], sums: list[Any]) -> Any:
    """The counts as one aggregate per listed session (LATERAL), so that each is an index scan
    of that session's records. The same sums over `session_id IN (...) GROUP BY` let PostgreSQL
    choose a sequential scan of the whole log whenever its statistics are missing or stale (a
    bulk load, autovacuum not yet run), a cost that grows with the log, not with the listing.
    A LATERAL aggregate cannot be turned into a join, so no plan reads other sessions."""
    listed = values(column("sid", String), name="listed").data([(sid,) for sid in session_ids])
    per_session = select(*sums).where(events.c.session_id == listed.c.sid).lateral("counted")
    return select(listed.c.sid, *per_session.c).select_from(listed.join(per_session, true()))


def _candidates(store: Any, filt: SessionFilter, offset: int, limit: int | None) -> list[Any]:
    query = select(sessions).order_by(sessions.c.started_ns.desc(), sessions.c.session_id.desc())
    if filt.name is not None:
        query = query.where(sessions.c.name == filt.name)
    if filt.server:
        escaped = filt.server.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(sessions.c.command.like(f"%{escaped}%", escape="\\"))
    if filt.since_ns is not None:
        query = query.where(sessions.c.started_ns >= filt.since_ns)
    if filt.until_ns is not None:
        query = query.where(sessions.c.started_ns < filt.until_ns)
    if not filt.replays:
        query = query.where(sessions.c.replay_of.is_(None))
    query = query.offset(offset)
    if limit is not None:
        query = query.limit(limit)
    with _engine(store).connect() as conn:
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
        counts = count_records(store, [i.session_id for i in infos])
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
    if filt.errors and not summary.counts.get("errors"):
        return False
    if filt.faults and not summary.counts.get("faults"):
        return False
    return not (filt.outcome and summary.outcome != filt.outcome)


def all_session_ids(store: Any) -> list[str]:
    with _engine(store).connect() as conn:
        return [row[0] for row in conn.execute(select(sessions.c.session_id))]


def short_handles(store: Any, session_ids: Sequence[str] | None = None) -> dict[str, str]:
    """The short handle of each of `session_ids`, or of every session id in the store (see the
    module docstring)."""
    if session_ids is None or len(session_ids) > _IDS_PER_QUERY:
        everyone = all_session_ids(store)
        return handles_for(everyone if session_ids is None else session_ids, everyone)
    return handles_for(session_ids, _rivals(store, session_ids))


def _rivals(store: Any, session_ids: Sequence[str]) -> list[str]:
    """The ids that could stand in the way of a handle of `session_ids`: those ending with one's
    last `HANDLE_MIN` characters or starting with `HANDLE_MIN` characters of one's last group.
    Any id that ends or starts with a longer tail is one of them, so the handles among these
    are the handles among all ids. The store filters its ids itself, so that a page's handles
    do not cost a read of every id into Python."""
    groups = [i.rsplit("-", 1)[-1] for i in session_ids]
    groups = [g for g in groups if len(g) >= HANDLE_MIN]
    if not groups:
        return []
    tails = sorted({g[-HANDLE_MIN:] for g in groups})
    starts = sorted({g[j : j + HANDLE_MIN] for g in groups for j in range(len(g) - HANDLE_MIN + 1)})
    sid = sessions.c.session_id
    with _engine(store).connect() as conn:
        if conn.dialect.name == "postgresql":
            last, first = func.right(sid, HANDLE_MIN), func.left(sid, HANDLE_MIN)
        else:
            last, first = func.substr(sid, -HANDLE_MIN), func.substr(sid, 1, HANDLE_MIN)
        query = select(sid).where(or_(last.in_(tails), first.in_(starts)))
        return [row[0] for row in conn.execute(query)]


def handles_for(ids: Iterable[str], others: Iterable[str] = ()) -> dict[str, str]:
    """The shortest tail of each of `ids` (at least `HANDLE_MIN` characters, within the last
    group) that no other id of `ids` or `others` ends with or starts with; ids not shaped like
    UUIDs keep their full text."""
    ids = list(dict.fromkeys(ids))
    among = list(dict.fromkeys([*ids, *others]))
    handles: dict[str, str] = {}
    pending = [i for i in ids if len(i.rsplit("-", 1)[-1]) >= HANDLE_MIN]
    for i in ids:
        handles[i] = i
    longest = max((len(i.rsplit("-", 1)[-1]) for i in pending), default=0)
    for size in range(HANDLE_MIN, longest + 1):
        if not pending:
            break
        tails = Counter(i[-size:] for i in among)
        heads = Counter(i[:size] for i in among)
        left = []
        for i in pending:
            tail = i[-size:]
            own_head = 1 if i[:size] == tail else 0
            if tails[tail] == 1 and heads[tail] == own_head and "-" not in tail:
                handles[i] = tail
            else:
                left.append(i)
        pending = left
    return handles
