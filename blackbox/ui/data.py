"""What the web UI shows beyond the store's pages (`blackbox.recorder.query.browse`): one record
whole, and the overview's charts from the analytics views.

Why it exists: the routes stay thin; the shapes the page's script reads are made here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, Protocol

from blackbox.recorder.log import StoredEvent
from blackbox.recorder.query import (
    PAGE,
    TIMELINE_PAGE,
    SessionQuery,
    newest_checkpoint,
    parse_cursor,
    session_counts,
    session_page,
    timeline_page,
)
from blackbox.recorder.store import EventStore

__all__ = [
    "PAGE",
    "TIMELINE_PAGE",
    "Redaction",
    "SessionQuery",
    "newest_checkpoint",
    "overview",
    "parse_cursor",
    "record_detail",
    "session_counts",
    "session_page",
    "timeline_page",
]


class Redaction(Protocol):
    """What the UI asks of the redactor `blackbox ui` was given (`Redactor` of the privacy
    context, the one `export` and `show` use): every payload a page shows passes through it."""

    def redact_frame(self, raw: bytes) -> bytes: ...

    def redact_record(self, ev: StoredEvent) -> StoredEvent: ...

    def redact_value(self, obj: object) -> object: ...


def record_detail(
    store: EventStore, session_id: str, seq: int, redactor: Redaction | None = None
) -> dict[str, Any] | None:
    """One record whole: its fields, its JSON pretty-printed, and its exact bytes (redacted
    first, with a redactor)."""
    for ev in store.read_session(session_id, after_seq=seq - 1):
        if ev.seq != seq:
            return None
        if redactor is not None:
            ev = redactor.redact_record(ev)
        try:
            pretty = json.dumps(json.loads(ev.raw), indent=2, ensure_ascii=False)
        except (ValueError, UnicodeDecodeError):
            pretty = None
        return {
            "seq": ev.seq,
            "position": ev.position,
            "kind": ev.kind,
            "direction": ev.direction,
            "method": ev.method,
            "tool": ev.tool,
            "rpc_id": ev.rpc_id,
            "size": ev.raw_size if ev.raw_size is not None else len(ev.raw),
            "truncated": ev.raw_size is not None,
            "pretty": pretty,
            "raw_text": ev.raw.decode("utf-8", errors="backslashreplace"),
            "raw_base64": base64.b64encode(ev.raw).decode(),
            "hash": ev.hash.hex(),
        }
    return None


class _Result(Protocol):
    @property
    def description(self) -> Sequence[Sequence[Any]]: ...

    def fetchall(self) -> list[tuple[Any, ...]]: ...


class AnalyticsConnection(Protocol):
    """What the overview uses of the analytics connection (DuckDB's, which only analytics/
    imports)."""

    def execute(self, sql: str, /) -> _Result: ...


def overview(con: AnalyticsConnection) -> dict[str, Any]:
    """The overview's charts from the analytics views: sessions per hour, calls and error rate
    per hour, latency p50/p95/p99 of the busiest tools (over the last 14 days recorded)."""

    def rows(sql: str) -> list[dict[str, Any]]:
        cursor = con.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]

    per_hour = rows(
        """
        SELECT CAST(date_trunc('hour', started) AS VARCHAR) AS hour, count(*) AS sessions
        FROM sessions WHERE started IS NOT NULL
          AND started >= (SELECT max(started) FROM sessions) - INTERVAL 14 DAY
        GROUP BY 1 ORDER BY 1
        """
    )
    calls = rows(
        """
        SELECT CAST(date_trunc('hour', started) AS VARCHAR) AS hour, count(*) AS calls,
               count(*) FILTER (WHERE outcome <> 'ok') / count(*) AS error_rate
        FROM calls WHERE started IS NOT NULL
          AND started >= (SELECT max(started) FROM calls) - INTERVAL 14 DAY
        GROUP BY 1 ORDER BY 1
        """
    )
    latency = rows(
        """
        SELECT coalesce(tool, method) AS tool, count(*) AS calls,
               quantile_cont(latency_ms, 0.5) AS p50, quantile_cont(latency_ms, 0.95) AS p95,
               quantile_cont(latency_ms, 0.99) AS p99
        FROM calls WHERE latency_ms IS NOT NULL
        GROUP BY 1 ORDER BY calls DESC, 1 LIMIT 12
        """
    )
    totals = rows(
        """
        SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM calls) AS calls,
               (SELECT count(*) FROM calls WHERE outcome <> 'ok') AS failed,
               (SELECT count(*) FROM faults) AS faults
        """
    )[0]
    return {"sessions_per_hour": per_hour, "calls_per_hour": calls, "latency": latency, **totals}
