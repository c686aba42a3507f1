"""A session's counts and outcome, computed in one place for every surface.

`sessions`, the UI, the OTel export and `report` once each counted a session's calls and errors
their own way, and told one session apart: one counted requests in both directions, another the
client's only; one derived the outcome from the errors, another showed the stored ending. Every
surface now takes `SessionCounts` from `count_sessions` and the outcome from `derived_outcome`.

The counts are one aggregate over each session's own records, through the (session_id, seq)
index; on PostgreSQL one aggregate per session (LATERAL), whatever the planner's statistics say,
so counting costs what is shown, not the size of the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from blackbox.recorder.log import SessionInfo
from blackbox.recorder.store import events, layout
from sqlalchemy import LargeBinary, String, and_, case, column, func, select, true, values

_FRAME = events.c.kind == "frame"
# name -> what is counted over a session's records: calls are requests in either direction (a
# server's sampling or ping is a call too), pings among them; errors are split by who said so.
_COUNTED: dict[str, Any] = {
    "calls": and_(_FRAME, events.c.msg_type == "request"),
    "is_error": and_(_FRAME, events.c.msg_type == "response", events.c.is_error.is_(True)),
    "rpc_errors": and_(_FRAME, events.c.msg_type == "error"),
    "faults": events.c.kind == "fault",
    "notifications": and_(_FRAME, events.c.msg_type == "notification"),
    "pings": and_(_FRAME, events.c.msg_type == "request", events.c.method == "ping"),
}

# Stored outcomes that say the session ended normally: a derived one may replace them.
NORMAL_ENDINGS = (None, "ok", "server_exited")

# Ids bound in one statement (PostgreSQL takes at most 65,535 parameters, SQLite 32,766).
_IDS_PER_QUERY = 1000


@dataclass(frozen=True)
class SessionCounts:
    """What happened in one session: requests either way (`calls`, `pings` among them), tool
    results with isError, JSON-RPC error responses, transport faults, notifications."""

    calls: int = 0
    is_error: int = 0
    rpc_errors: int = 0
    faults: int = 0
    notifications: int = 0
    pings: int = 0

    @property
    def errors(self) -> int:
        """Error replies: isError results and JSON-RPC errors (faults are counted apart)."""
        return self.is_error + self.rpc_errors

    def as_dict(self) -> dict[str, int]:
        """Every count by name, `errors` included, as the surfaces print them."""
        return {**asdict(self), "errors": self.errors}


# The names `as_dict` gives, in the order listings show them.
COUNT_NAMES = ("calls", "errors", "is_error", "rpc_errors", "faults", "notifications", "pings")


def derived_outcome(info: SessionInfo, counts: SessionCounts) -> str:
    """How the session went: an abnormal ending as stored (crashed, interrupted, recovered), else
    `faults` when a fault was recorded, `errors` when a reply was an error, else `ok` (or `open`
    for a session still running)."""
    if info.outcome not in NORMAL_ENDINGS:
        return str(info.outcome)
    if counts.faults:
        return "faults"
    if counts.errors:
        return "errors"
    if info.outcome is None and not info.sealed:
        return "open"
    return info.outcome or "ok"


def _engine(store: Any) -> Any:
    engine = getattr(store, "engine", None)
    if engine is None:
        raise TypeError(f"{type(store).__name__} is not an SQL store")
    return engine


def count_sessions(store: Any, session_ids: Sequence[str]) -> dict[str, SessionCounts]:
    """The counts of each session, by session id (zeros for one without records)."""
    ids = list(dict.fromkeys(session_ids))
    result = {sid: SessionCounts() for sid in ids}
    if not ids:
        return result
    sums = [func.sum(case((cond, 1), else_=0)).label(name) for name, cond in _COUNTED.items()]
    with _engine(store).connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:
            # Without statistics on `events` (after a bulk load, or with autovacuum off) the
            # planner overestimates each session's share of the log and compiles the per-session
            # index scans (JIT), which costs several times the counting itself.
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
                    .where(events.c.sid.in_([layout.sid_bytes(sid) for sid in chunk]))
                    .group_by(events.c.session_id)
                )
            for row in conn.execute(query):
                result[row.sid] = SessionCounts(
                    **{name: int(getattr(row, name) or 0) for name in _COUNTED}
                )
    return result


def _counts_per_session(session_ids: list[str], sums: list[Any]) -> Any:
    """The counts as one aggregate per session (LATERAL), so that each is an index scan of that
    session's records. The same sums over `session_id IN (...) GROUP BY` let PostgreSQL choose a
    sequential scan of the whole log whenever its statistics are missing or stale (a bulk load,
    autovacuum not yet run), a cost that grows with the log, not with the listing. A LATERAL
    aggregate cannot be turned into a join, so no plan reads other sessions."""
    listed = values(column("sid", String), column("key", LargeBinary), name="listed").data(
        [(sid, layout.sid_bytes(sid)) for sid in session_ids]
    )
    per_session = select(*sums).where(events.c.sid == listed.c.key).lateral("counted")
    return select(listed.c.sid, *per_session.c).select_from(listed.join(per_session, true()))
