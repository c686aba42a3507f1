"""The reports behind `blackbox report`: latency, errors, permissions, sessions.

A report is a list of sections (rows with named columns), computed by SQL over the views after an
incremental refresh of the Parquet copy. Percentiles are exact and interpolated (DuckDB's
`quantile_cont`, the same definition as numpy's default `percentile`).

A session's outcome and counts are the read model's (`blackbox.recorder.query.session_counts`),
given to the sessions report as the table `_read_model`, so that `report` and `sessions` say the
same of one session; the copy's own session rows hold only the stored ending.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import pyarrow as pa
from blackbox.analytics.parquet import ParquetCopy, Progress, RefreshResult, copy_dir
from blackbox.analytics.views import DEFAULT_WINDOW_S, connect
from blackbox.recorder import BlackboxError
from blackbox.recorder.query import COUNT_NAMES, session_counts, short_handles
from blackbox.recorder.store import EventStore

KINDS = ("latency", "errors", "permissions", "sessions")
GROUPS = ("method", "tool", "server", "session", "day", "version")
# `version` (the policy version that decided) groups decisions only: calls have no version.
ONLY_PERMISSIONS = ("version",)
DEFAULT_BY = {"latency": "tool", "errors": "tool", "permissions": "tool", "sessions": "server"}
OUTCOMES = (
    "ok",
    "rpc_error",
    "tool_error",
    "no_response",
    "transport_fault",
    "denied",
    "cancelled",
)


class ReportError(BlackboxError):
    """A report asked for in a way that cannot be answered (bad option value)."""


@dataclass(frozen=True)
class Filters:
    """Which calls, sessions or decisions a report covers. Times are UTC ns; `session` is a full
    id (resolve prefixes with the store first)."""

    since_ns: int | None = None
    until_ns: int | None = None
    session: str | None = None
    server: str | None = None  # a shell glob (DuckDB's GLOB reads it as fnmatch does)


@dataclass
class Section:
    """One table of a report."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict]


@dataclass
class Report:
    """A report: its kind, grouping, filters and sections (charts are for the HTML page)."""

    kind: str
    by: str
    filters: Filters
    sections: list[Section]
    refresh: RefreshResult | None = None
    charts: dict = field(default_factory=dict)


# -- SQL helpers ------------------------------------------------------------------------------


def _call_group(by: str) -> str:
    return {
        "method": "method",
        "tool": "tool",
        "server": "coalesce(server, '(unknown)')",
        "session": "session_id",
        "day": "CAST(day AS VARCHAR)",
        "version": "'(no decision)'",
    }[by]


def _call_where(filters: Filters, by: str, alias: str = "") -> tuple[str, list]:
    """WHERE clause and parameters over the calls view."""
    a = f"{alias}." if alias else ""
    clauses: list[str] = []
    params: list = []
    if by == "tool":
        clauses.append(f"{a}method = 'tools/call'")
    if filters.since_ns is not None:
        clauses.append(f"{a}started_ns >= ?")
        params.append(filters.since_ns)
    if filters.until_ns is not None:
        clauses.append(f"{a}started_ns < ?")
        params.append(filters.until_ns)
    if filters.session is not None:
        clauses.append(f"{a}session_id = ?")
        params.append(filters.session)
    if filters.server is not None:
        clauses.append(f"{a}server GLOB ?")
        params.append(filters.server)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> list[dict]:
    cursor = con.execute(sql, params)
    names = [d[0] for d in cursor.description or []]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _round(rows: list[dict], digits: int = 3) -> list[dict]:
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float):
                row[key] = round(value, digits)
    return rows


# -- the reports ------------------------------------------------------------------------------


def latency(con: duckdb.DuckDBPyConnection, by: str, filters: Filters) -> list[Section]:
    """count, p50, p95, p99, max and mean latency of answered calls per group."""
    where, params = _call_where(filters, by)
    where += (" AND " if where else " WHERE ") + "latency_ms IS NOT NULL"
    rows = _rows(
        con,
        f"""
        SELECT {by}, calls, q[1] AS p50_ms, q[2] AS p95_ms, q[3] AS p99_ms, max_ms, mean_ms
        FROM (
            SELECT {_call_group(by)} AS {by}, count(*) AS calls,
                   quantile_cont(latency_ms, [0.5, 0.95, 0.99]) AS q,
                   max(latency_ms) AS max_ms, avg(latency_ms) AS mean_ms
            FROM _calls_joined {where} GROUP BY 1
        ) ORDER BY calls DESC, 1
        """,
        params,
    )
    columns = [by, "calls", "p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms"]
    return [Section("latency", f"Latency by {by} (answered calls)", columns, _round(rows))]


def errors(con: duckdb.DuckDBPyConnection, by: str, filters: Filters) -> list[Section]:
    """Calls and the share of each outcome per group."""
    where, params = _call_where(filters, by)
    g = _call_group(by)
    summary = _rows(
        con,
        f"""
        SELECT {g} AS {by}, count(*) AS calls,
               count(*) FILTER (WHERE outcome <> 'ok') AS failed,
               count(*) FILTER (WHERE outcome <> 'ok') / count(*) AS error_rate
        FROM _calls_joined {where} GROUP BY 1 ORDER BY calls DESC, 1
        """,
        params,
    )
    detail = _rows(
        con,
        f"""
        SELECT {by}, outcome, calls, calls / sum(calls) OVER (PARTITION BY {by}) AS rate
        FROM (SELECT {g} AS {by}, outcome, count(*) AS calls
              FROM _calls_joined {where} GROUP BY 1, 2)
        ORDER BY sum(calls) OVER (PARTITION BY {by}) DESC, {by}, calls DESC, outcome
        """,
        params,
    )
    return [
        Section(
            "summary",
            f"Error rate by {by}",
            [by, "calls", "failed", "error_rate"],
            _round(summary, 4),
        ),
        Section(
            "outcomes",
            f"Outcomes by {by}",
            [by, "outcome", "calls", "rate"],
            _round(detail, 4),
        ),
    ]


def _decision_where(filters: Filters) -> tuple[str, list]:
    clauses: list[str] = []
    params: list = []
    if filters.since_ns is not None:
        clauses.append("time >= make_timestamp(? // 1000)")
        params.append(filters.since_ns)
    if filters.until_ns is not None:
        clauses.append("time < make_timestamp(? // 1000)")
        params.append(filters.until_ns)
    if filters.session is not None:
        clauses.append("(session_id = ? OR call_session_id = ?)")
        params.extend([filters.session, filters.session])
    if filters.server is not None:
        clauses.append("server GLOB ?")
        params.append(filters.server)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def permissions(con: duckdb.DuckDBPyConnection, by: str, filters: Filters) -> list[Section]:
    """Decisions per group, source, rule and verdict; calls that ran with no decision; decisions
    that match no call."""
    group = {
        "tool": "coalesce(tool, '(none)')",
        "server": "coalesce(server, '(unknown)')",
        "session": "session_id",
        "day": "CAST(CAST(time AS DATE) AS VARCHAR)",
        "method": "'tools/call'",
        "version": "coalesce(left(policy_version, 12), '(no policy version)')",
    }[by]
    where, params = _decision_where(filters)
    decided = _rows(
        con,
        f"""
        SELECT {group} AS {by}, source, coalesce(rule, '') AS rule, verdict,
               count(*) AS decisions, count(matched_by) AS matched_calls
        FROM decisions {where} GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        """,
        params,
    )
    cwhere, cparams = _call_where(filters, "tool", alias="c")
    undecided = _rows(
        con,
        f"""
        SELECT {_call_group(by)} AS {by}, count(*) AS calls
        FROM _calls_joined c
        ANTI JOIN (SELECT call_session_id, call_request_seq FROM decisions
                   WHERE matched_by IS NOT NULL) d
               ON d.call_session_id = c.session_id AND d.call_request_seq = c.request_seq
        {cwhere} GROUP BY 1 ORDER BY calls DESC, 1
        """,
        cparams,
    )
    uwhere = where + (" AND " if where else " WHERE ") + "matched_by IS NULL"
    unmatched = _rows(
        con,
        f"""
        SELECT CAST(time AS VARCHAR) AS time, session_id, tool, server, source, verdict,
               coalesce(rule, '') AS rule, reason
        FROM decisions {uwhere} ORDER BY time LIMIT 200
        """,
        params,
    )
    return [
        Section(
            "decisions",
            f"Decisions by {by}, source, rule and verdict",
            [by, "source", "rule", "verdict", "decisions", "matched_calls"],
            decided,
        ),
        Section(
            "undecided_calls", f"Tool calls with no decision, by {by}", [by, "calls"], undecided
        ),
        Section(
            "unmatched_decisions",
            "Decisions that match no recorded call (first 200)",
            ["time", "session_id", "tool", "server", "source", "verdict", "rule", "reason"],
            unmatched,
        ),
    ]


# The table of each session's counts and derived outcome the sessions report reads.
READ_MODEL = "_read_model"


def _session_where(filters: Filters) -> tuple[str, list]:
    """WHERE clause and parameters over the sessions view (as `s`)."""
    clauses: list[str] = []
    params: list = []
    if filters.since_ns is not None:
        clauses.append("s.started >= make_timestamp(? // 1000)")
        params.append(filters.since_ns)
    if filters.until_ns is not None:
        clauses.append("s.started < make_timestamp(? // 1000)")
        params.append(filters.until_ns)
    if filters.session is not None:
        clauses.append("s.session_id = ?")
        params.append(filters.session)
    if filters.server is not None:
        clauses.append("s.server GLOB ?")
        params.append(filters.server)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def _give_read_model(store: EventStore, con: duckdb.DuckDBPyConnection, filters: Filters) -> None:
    """Register `READ_MODEL` on `con`: for each session the report covers, its counts
    (`COUNT_NAMES`) and outcome as the read model gives them."""
    where, params = _session_where(filters)
    found = con.execute(f"SELECT s.session_id FROM sessions s{where}", params).fetchall()
    ids = [sid for (sid,) in found]
    counted = session_counts(store, ids)
    columns: dict[str, list] = {"session_id": list(counted), "outcome": []}
    columns.update({name: [] for name in COUNT_NAMES})
    for row in counted.values():
        for name in ("outcome", *COUNT_NAMES):
            columns[name].append(row[name])
    schema = pa.schema(
        [("session_id", pa.string()), ("outcome", pa.string())]
        + [(name, pa.int64()) for name in COUNT_NAMES]
    )
    con.register(READ_MODEL, pa.table(columns, schema=schema))


def sessions(con: duckdb.DuckDBPyConnection, by: str, filters: Filters) -> list[Section]:
    """Sessions per group: counts, durations, frames, calls, errors and outcomes (the outcome
    and the counts are the read model's, `READ_MODEL`)."""
    if by not in ("server", "session", "day"):
        raise ReportError("a sessions report groups by server, day or session")
    g = {
        "server": "coalesce(s.server, '(unknown)')",
        "session": "s.session_id",
        "day": "CAST(CAST(s.started AS DATE) AS VARCHAR)",
    }[by]
    where, params = _session_where(filters)
    counts = ", ".join(f"coalesce(r.{name}, 0) AS {name}" for name in COUNT_NAMES)
    base = f"""
        WITH s AS (
            SELECT s.* EXCLUDE (outcome, faults), coalesce(r.outcome, s.outcome) AS outcome,
                   {counts}
            FROM sessions s
            LEFT JOIN {READ_MODEL} r ON r.session_id = s.session_id
            {where}
        )
    """
    summary = _rows(
        con,
        base
        + f"""
        SELECT {g.replace("s.", "")} AS {by}, count(*) AS sessions,
               count(*) FILTER (WHERE outcome = 'open') AS open,
               count(*) FILTER (WHERE outcome NOT IN ('ok', 'open', 'client_closed', 'ended'))
                   AS failed,
               quantile_cont(duration_s, 0.5) AS duration_p50_s,
               max(duration_s) AS duration_max_s, sum(frames) AS frames, sum(calls) AS calls,
               sum(errors) AS errors, sum(is_error) AS is_error, sum(rpc_errors) AS rpc_errors,
               sum(faults) AS faults
        FROM s GROUP BY 1 ORDER BY sessions DESC, 1
        """,
        params,
    )
    outcomes = _rows(
        con,
        base
        + f"""
        SELECT {by}, outcome, sessions, sessions / sum(sessions) OVER (PARTITION BY {by}) AS rate
        FROM (SELECT {g.replace("s.", "")} AS {by}, outcome, count(*) AS sessions
              FROM s GROUP BY 1, 2)
        ORDER BY {by}, sessions DESC, outcome
        """,
        params,
    )
    # Heartbeats: the gaps between one session's pings in one direction; a ping never answered
    # is missed (blackbox.recorder.capture.heartbeat records `unresponsive` as it happens).
    heartbeats = _rows(
        con,
        base
        + f"""
        , p AS (
            SELECT {g} AS {by}, c.outcome,
                   (c.started_ns - lag(c.started_ns) OVER (
                       PARTITION BY c.session_id, c.direction ORDER BY c.started_ns)) / 1e9 AS gap_s
            FROM _calls_joined c JOIN s ON s.session_id = c.session_id
            WHERE c.method = 'ping'
        )
        SELECT {by}, count(*) AS pings, avg(gap_s) AS interval_s, stddev_pop(gap_s) AS jitter_s,
               count(*) FILTER (WHERE outcome = 'no_response') AS missed_pings
        FROM p GROUP BY 1 ORDER BY 1
        """,
        params,
    )
    return [
        Section(
            "sessions",
            f"Sessions by {by}",
            [
                by,
                "sessions",
                "open",
                "failed",
                "duration_p50_s",
                "duration_max_s",
                "frames",
                "calls",
                "errors",
                "is_error",
                "rpc_errors",
                "faults",
            ],
            _round(summary),
        ),
        Section(
            "outcomes",
            f"Session outcomes by {by}",
            [by, "outcome", "sessions", "rate"],
            _round(outcomes, 4),
        ),
        Section(
            "heartbeats",
            f"Heartbeats (pings) by {by}: interval, jitter, missed",
            [by, "pings", "interval_s", "jitter_s", "missed_pings"],
            _round(heartbeats),
        ),
    ]


BUILDERS: dict[str, Callable[[duckdb.DuckDBPyConnection, str, Filters], list[Section]]] = {
    "latency": latency,
    "errors": errors,
    "permissions": permissions,
    "sessions": sessions,
}


def chart_data(con: duckdb.DuckDBPyConnection, filters: Filters, top: int = 40) -> dict:
    """What the HTML page draws: latency histograms of the busiest tools (log2 buckets in ms;
    `latency_tools` counts every tool, so the page can say what it left out), the error rate per
    day, and decisions per tool and verdict."""
    where, params = _call_where(filters, "tool")
    total = _rows(
        con,
        f"""SELECT count(DISTINCT tool) AS n FROM _calls_joined {where}
            {"AND" if where else "WHERE"} latency_ms IS NOT NULL""",
        params,
    )
    hist_rows = _rows(
        con,
        f"""
        WITH c AS (SELECT tool, latency_ms FROM _calls_joined {where}
                   {"AND" if where else "WHERE"} latency_ms IS NOT NULL),
             t AS (SELECT tool FROM c GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT {int(top)})
        SELECT c.tool, CAST(floor(log2(greatest(latency_ms, 0.001))) AS INTEGER) AS bucket,
               count(*) AS calls
        FROM c JOIN t ON t.tool = c.tool GROUP BY 1, 2 ORDER BY 1, 2
        """,
        params,
    )
    latency_hist: dict[str, dict[int, int]] = {}
    for row in hist_rows:
        latency_hist.setdefault(row["tool"], {})[row["bucket"]] = row["calls"]
    where, params = _call_where(filters, "method")
    daily = _rows(
        con,
        f"""
        SELECT CAST(day AS VARCHAR) AS day, count(*) AS calls,
               count(*) FILTER (WHERE outcome <> 'ok') / count(*) AS error_rate
        FROM _calls_joined {where} GROUP BY 1 ORDER BY 1
        """,
        params,
    )
    dwhere, dparams = _decision_where(filters)
    decided = _rows(
        con,
        f"""
        SELECT coalesce(tool, '(none)') AS tool, verdict, count(*) AS decisions
        FROM decisions {dwhere} GROUP BY 1, 2 ORDER BY 1, 2
        """,
        dparams,
    )
    decisions: dict[str, dict[str, int]] = {}
    for row in decided:
        decisions.setdefault(row["tool"], {})[row["verdict"] or "?"] = row["decisions"]
    return {
        "latency_hist": latency_hist,
        "latency_tools": total[0]["n"] if total else len(latency_hist),
        "error_rate": daily,
        "decisions": decisions,
    }


def open_copy(store: EventStore, base_dir: Path) -> ParquetCopy:
    """The Parquet copy of this store under `base_dir` (one directory per store URL)."""
    return ParquetCopy(copy_dir(base_dir, store.url))


def refreshed_connection(
    store: EventStore,
    base_dir: Path,
    progress: Progress | None = None,
    window_s: float = DEFAULT_WINDOW_S,
) -> tuple[duckdb.DuckDBPyConnection, RefreshResult]:
    """Refresh the copy, then open the read-only views over it."""
    copy = open_copy(store, base_dir)
    result = copy.refresh(store, progress=progress)
    return connect(copy, window_s), result


def _add_handles(store: EventStore, sections: list[Section]) -> None:
    """A `handle` column after every column of session ids: the handle `blackbox sessions`
    prints and every command takes."""
    named = [(s, key) for s in sections for key in ("session", "session_id") if key in s.columns]
    ids = [row[key] for s, key in named for row in s.rows if isinstance(row.get(key), str)]
    if not ids:
        return
    handles = short_handles(store, sorted(set(ids)))
    for section, key in named:
        at = section.columns.index(key) + 1
        section.columns = [*section.columns[:at], "handle", *section.columns[at:]]
        for row in section.rows:
            row["handle"] = handles.get(str(row.get(key)), "")


def run_report(
    store: EventStore,
    base_dir: Path,
    kind: str,
    by: str | None = None,
    filters: Filters | None = None,
    progress: Progress | None = None,
    with_charts: bool = False,
    window_s: float = DEFAULT_WINDOW_S,
) -> Report:
    """Refresh the copy and compute one report (and the chart data when asked)."""
    if kind not in BUILDERS:
        raise ReportError(f"unknown report {kind!r}: choose one of {', '.join(KINDS)}")
    by = by or DEFAULT_BY[kind]
    if by not in GROUPS:
        raise ReportError(f"cannot group by {by!r}: choose one of {', '.join(GROUPS)}")
    if by in ONLY_PERMISSIONS and kind != "permissions":
        raise ReportError(f"only the permissions report groups by {by}")
    filters = filters or Filters()
    if filters.session is not None:
        filters = replace(filters, session=store.resolve(filters.session))
    con, result = refreshed_connection(store, base_dir, progress, window_s)
    try:
        if kind == "sessions":
            _give_read_model(store, con, filters)
        report = Report(kind, by, filters, BUILDERS[kind](con, by, filters), refresh=result)
        _add_handles(store, report.sections)
        if with_charts:
            report.charts = chart_data(con, filters)
    finally:
        con.close()
    return report
