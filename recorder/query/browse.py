"""Paged reads of the store for the live views (`blackbox ui`): one page, never a whole log.

Why it exists: the pages must open fast whatever the store holds (10,000 sessions, a session of
100,000 frames), so nothing here reads more than one page: the session list is a keyset page over
the sessions projection (newest first) with calls, errors and faults counted for that page only,
and a timeline is a range of seqs over the (session_id, seq) index, its requests paired to their
responses by id within a bounded window. The overview shows the newest signed checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from blackbox.recorder.log import DERIVED, request_key, response_key
from blackbox.recorder.query.counts import (
    NORMAL_ENDINGS,
    SessionCounts,
    count_sessions,
    derived_outcome,
)
from blackbox.recorder.query.handles import short_handles
from blackbox.recorder.query.name_glob import contains_condition
from blackbox.recorder.store import (
    EventStore,
    events,
    layout,
    session_info,
    sessions,
    with_traffic,
)
from sqlalchemy import and_, func, or_, select

if TYPE_CHECKING:
    from blackbox.recorder.store import SqlEventStore
    from sqlalchemy.engine import Connection, Engine, Row

PAGE = 100
TIMELINE_PAGE = 200
EXCERPT = 160
ANSWER_WINDOW = 5000
# The outcomes `derived_outcome` makes from the counts of a session that ended normally.
_FROM_COUNTS = ("ok", "errors", "faults", "open", "server_exited")
_NORMAL_STORED = [ending for ending in NORMAL_ENDINGS if ending is not None]
_IDS_PER_QUERY = 1000  # PostgreSQL binds at most 65,535 parameters a statement, SQLite 32,766


def _engine(store: EventStore) -> Engine:
    # Every backend is a SqlEventStore (recorder/store/sql.py); the protocol names no engine.
    return cast("SqlEventStore", store).engine


def _info_name(doc: str | None) -> str | None:
    if not doc:
        return None
    try:
        value = json.loads(doc)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        version = value.get("version")
        return value["name"] + (f" {version}" if isinstance(version, str) and version else "")
    return None


@dataclass(frozen=True)
class SessionQuery:
    """Filter and page of the session list: `q` searches name, command and id; `outcome` keeps
    one outcome ('open' for sessions still recording); `before` is the page's keyset cursor."""

    q: str | None = None
    outcome: str | None = None
    before: tuple[int, str] | None = None
    limit: int = PAGE
    background: bool = False  # also sessions without traffic (the store's `with_traffic`)


def session_page(store: EventStore, query: SessionQuery) -> dict[str, Any]:
    """One page of sessions, newest first, each with its counts and outcome as `blackbox
    sessions` gives them (`counts.SessionCounts`, `counts.derived_outcome`): the page's sessions
    are counted, and with an `outcome` filter the pages after it too, until enough are kept.
    `session_counts` gives one session's counts again as it grows."""
    s = sessions.c
    started = func.coalesce(s.started_ns, 0)
    stmt = select(sessions).order_by(started.desc(), s.session_id.desc())
    if query.q:
        dialect = _engine(store).dialect.name
        columns = (s.name, s.command, s.session_id)
        stmt = stmt.where(or_(*(contains_condition(c, query.q, dialect) for c in columns)))
    if not query.background:
        stmt = stmt.where(with_traffic())
    if query.outcome in _FROM_COUNTS:
        # Derived from the counts: only a normal (or no) stored ending can become one of these.
        stmt = stmt.where(or_(s.outcome.is_(None), s.outcome.in_(_NORMAL_STORED)))
        if query.outcome == "open":
            stmt = stmt.where(s.sealed_count.is_(None))
    elif query.outcome:
        stmt = stmt.where(s.outcome == query.outcome)  # an abnormal ending is the outcome
    kept: list[tuple[Row, str, SessionCounts]] = []
    before, more = query.before, False
    while True:
        batch_stmt = stmt
        if before is not None:
            at, sid = before
            batch_stmt = stmt.where(or_(started < at, and_(started == at, s.session_id < sid)))
        with _engine(store).connect() as conn:
            rows = list(conn.execute(batch_stmt.limit(query.limit + 1)))
        counted = count_sessions(store, [r.session_id for r in rows])
        for r in rows:
            outcome = derived_outcome(session_info(r), counted[r.session_id])
            if not query.outcome or outcome == query.outcome:
                kept.append((r, outcome, counted[r.session_id]))
        if len(kept) > query.limit:
            more = True
            break
        if len(rows) <= query.limit:
            break
        before = (rows[-1].started_ns or 0, rows[-1].session_id)
    kept = kept[: query.limit]
    out = []
    for r, outcome, counts in kept:
        duration = None
        if r.started_ns is not None and r.ended_ns is not None:
            duration = round((r.ended_ns - r.started_ns) / 1e9, 3)
        out.append(
            {
                "id": r.session_id,
                "name": r.name,
                "transport": r.transport,
                "era": r.era,
                "client": _info_name(r.client_info),
                "server": _info_name(r.server_info) or r.command,
                "command": r.command,
                "started_ns": r.started_ns,
                "duration_s": duration,
                "frames": r.frames,
                "outcome": outcome,
                "ended": r.outcome,
                "replay_of": r.replay_of,
                "sealed": r.sealed_count is not None,
                **counts.as_dict(),
            }
        )
    handles = short_handles(store, [row["id"] for row in out])
    for row in out:
        row["handle"] = handles[row["id"]]
    cursor = None
    if more and kept:
        last = kept[-1][0]
        cursor = f"{last.started_ns or 0}:{last.session_id}"
    return {"sessions": out, "next": cursor}


def parse_cursor(text_value: str | None) -> tuple[int, str] | None:
    if not text_value or ":" not in text_value:
        return None
    at, _, sid = text_value.partition(":")
    try:
        return int(at), sid
    except ValueError:
        return None


def session_counts(store: EventStore, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The counts (`counts.SessionCounts.as_dict`) and derived outcome of each listed session,
    the numbers `blackbox sessions` shows for it."""
    if not ids:
        return {}
    rows: list[Row] = []
    with _engine(store).connect() as conn:
        # A report passes every session of the store: more ids than one statement may bind.
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            rows += conn.execute(select(sessions).where(sessions.c.session_id.in_(chunk)))
    infos = {row.session_id: session_info(row) for row in rows}
    counted = count_sessions(store, list(infos))
    return {
        sid: {**counted[sid].as_dict(), "outcome": derived_outcome(info, counted[sid])}
        for sid, info in infos.items()
    }


def _excerpt(raw: bytes) -> str:
    body = raw[: EXCERPT * 4].decode("utf-8", errors="replace")
    body = " ".join(body.split())
    return body if len(body) <= EXCERPT else body[: EXCERPT - 1] + "…"


def _stderr_line(head: bytes) -> str | None:
    """The line a stderr record holds, for the page to show consecutive lines as one block;
    None when the record runs past the excerpt's bytes (the page shows the excerpt instead)."""
    try:
        doc = json.loads(head)
    except (ValueError, UnicodeDecodeError):
        return None
    line = doc.get("line") if isinstance(doc, dict) else None
    return line if isinstance(line, str) else None


_ROW = (
    events.c.seq,
    events.c.wall_ns,
    events.c.mono_ns,
    events.c.kind,
    events.c.direction,
    func.substr(events.c.raw, 1, EXCERPT * 4).label("head"),
    func.coalesce(events.c.raw_size, func.length(events.c.raw)).label("size"),
    *(getattr(events.c, name) for name in DERIVED),
)


def timeline_page(
    store: EventStore,
    session_id: str,
    after_seq: int = 0,
    limit: int = TIMELINE_PAGE,
    redact: Callable[[bytes], bytes] | None = None,
) -> dict[str, Any]:
    """Records `after_seq`+1 ... of a session (at most `limit`), raw bytes cut to an excerpt,
    each request with the seq and latency of its response when there is one. `redact` is
    applied to the bytes an excerpt is cut from, which run well past what it shows, so a
    secret is replaced whole before the cut could leave a piece of it. A stderr record also
    carries its `line`."""
    e, key = events.c, layout.sid_bytes(session_id)
    with _engine(store).connect() as conn:
        first = conn.execute(
            select(e.mono_ns).where(e.sid == key).order_by(e.seq).limit(1)
        ).scalar()
        rows = list(
            conn.execute(
                select(*_ROW).where(e.sid == key, e.seq > after_seq).order_by(e.seq).limit(limit)
            )
        )
        requests = [r for r in rows if r.kind == "frame" and r.msg_type == "request"]
        answers = _answers(conn, session_id, requests)
        last_seq = conn.execute(
            select(sessions.c.last_seq).where(sessions.c.session_id == session_id)
        ).scalar()
    base = first or 0
    out = []
    for r in rows:
        head = bytes(r.head) if redact is None else redact(bytes(r.head))
        row = {
            "seq": r.seq,
            "t_ms": round((r.mono_ns - base) / 1e6, 3),
            "wall_ns": r.wall_ns,
            "kind": r.kind,
            "direction": r.direction,
            "type": r.msg_type,
            "method": r.method,
            "id": r.rpc_id,
            "tool": r.tool,
            "error": bool(r.is_error) or r.msg_type == "error" or r.kind == "fault",
            "size": r.size,
            "excerpt": _excerpt(head),
        }
        if r.kind == "stderr":
            row["line"] = _stderr_line(head)
        answer = answers.get(r.seq)
        if answer is not None:
            row["response_seq"], mono, bad = answer
            row["latency_ms"] = round((mono - r.mono_ns) / 1e6, 3)
            row["error"] = bad
        out.append(row)
    return {"records": out, "last_seq": last_seq or 0}


def _answers(
    conn: Connection, session_id: str, requests: list[Row[Any]]
) -> dict[int, tuple[int, int, bool]]:
    """request seq -> (response seq, response mono_ns, failed) for these requests."""
    if not requests:
        return {}
    e, key = events.c, layout.sid_bytes(session_id)
    ids = sorted({r.rpc_id for r in requests if r.rpc_id is not None})
    found = conn.execute(
        select(e.seq, e.mono_ns, e.direction, e.rpc_id, e.rpc_id_type, e.msg_type, e.is_error)
        .where(
            e.sid == key,
            e.seq > requests[0].seq,
            # A response this far past the page's last request is not looked for: the page
            # stays one bounded index range however long the session.
            e.seq <= requests[-1].seq + ANSWER_WINDOW,
            e.msg_type.in_(("response", "error")),
            e.rpc_id.in_(ids),
        )
        .order_by(e.seq)
    )
    waiting: dict[tuple, list] = {}
    for r in requests:
        waiting.setdefault(request_key(r.direction, r.rpc_id, r.rpc_id_type), []).append(r)
    out: dict[int, tuple[int, int, bool]] = {}
    for resp in found:
        queue = waiting.get(response_key(resp.direction, resp.rpc_id, resp.rpc_id_type))
        if queue and queue[0].seq < resp.seq:
            req = queue.pop(0)
            out[req.seq] = (resp.seq, resp.mono_ns, resp.msg_type == "error" or bool(resp.is_error))
    return out


def answer_seq(store: EventStore, session_id: str, rpc_id: str, direction: str) -> int | None:
    """The seq of the first response (or error) sent in `direction` with this id in a session:
    where a replay's answer to a recorded request is (a replay sends the recorded ids)."""
    e, key = events.c, layout.sid_bytes(session_id)
    with _engine(store).connect() as conn:
        return conn.execute(
            select(e.seq)
            .where(
                e.sid == key,
                e.direction == direction,
                e.rpc_id == rpc_id,
                e.msg_type.in_(("response", "error")),
            )
            .order_by(e.seq)
            .limit(1)
        ).scalar()


def newest_checkpoint(store: EventStore) -> dict[str, Any] | None:
    """The newest signed checkpoint the store keeps (recorder/store/tree.py), None before the
    first: its tree size, root hash, when it was signed and the signed note itself."""
    from blackbox.recorder.store import tree

    with _engine(store).connect() as conn:
        newest = tree.stored_checkpoints(conn, last=True)
    if not newest:
        return None
    cp = newest[0]
    signed = datetime.fromtimestamp(cp.created_ns / 1e9, tz=UTC) if cp.created_ns else None
    return {
        "size": cp.size,
        "root_hash": cp.root_hash.hex(),
        "signed": signed.isoformat(timespec="seconds") if signed else None,
        "note": cp.note,
    }
