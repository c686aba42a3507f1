"""The tool inventory: what every server offered, under which definition, when, and how it was
used; the recorded definition changes; and the calls made under each definition.

Why it exists: `tools_listed` and `tool_changed` records (written by
`blackbox.recorder.gate.tool_watch` on the shipper side) say what a server offered; this module
answers "which tools, since when, used how often, changed when" with DuckDB over the Parquet copy.
It reads only the small `_control` dataset (non-frame records) and the calls dataset, never the
frames, so it stays fast however many frames the log holds. A server is its recorded name and its
command line or URL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
from blackbox.analytics.parquet import Progress
from blackbox.analytics.reports import refreshed_connection
from blackbox.recorder import BlackboxError
from blackbox.recorder.store import EventStore, storable_text

INVENTORY_COLUMNS = [
    "server",
    "command",
    "kind",
    "name",
    "hash",
    "first_seen",
    "last_seen",
    "sessions",
    "calls",
    "errors",
    "flags",
]
HISTORY_COLUMNS = [
    "server",
    "name",
    "hash",
    "first_seen",
    "last_seen",
    "sessions",
    "calls",
    "errors",
    "flags",
    "session_ids",
]
CHANGES_COLUMNS = [
    "time",
    "session_id",
    "server",
    "command",
    "kind",
    "name",
    "change",
    "old_hash",
    "new_hash",
    "flags",
    "diff",
]


class ToolsError(BlackboxError):
    """A tools query asked for in a way that cannot be answered."""


@dataclass(frozen=True)
class ToolFilters:
    """Which servers and times an inventory covers; times are UTC ns."""

    server: str | None = None  # a shell glob
    since_ns: int | None = None
    tool: str | None = None


# Every tools_listed document once: the session it was seen in (the proxy's watcher names it),
# the seq of the answer, the server, and its items as text (`listing`, keyed by `lkey`): most
# sessions of a server list the same items, so items are unnested once per distinct listing,
# not once per session.
_DOCS = """
    SELECT coalesce(d ->> 'observed_session', session_id) AS session_id, wall_ns,
           CAST(d ->> 'seq' AS BIGINT) AS seq, d ->> 'server' AS server,
           d ->> 'command' AS command, d ->> 'method' AS method,
           md5(CAST(d -> 'items' AS VARCHAR)) AS lkey, CAST(d -> 'items' AS VARCHAR) AS listing,
           CASE WHEN (d -> 'findings') = '{{}}' THEN NULL ELSE d -> 'findings' END AS fmap
    FROM (SELECT session_id, wall_ns, CAST(doc AS JSON) AS d
          FROM _control WHERE kind = 'tools_listed' {where})
"""

_LISTINGS = """
    SELECT lkey, it ->> 'kind' AS kind, it ->> 'name' AS name, it ->> 'hash' AS hash
    FROM (SELECT lkey, unnest(CAST(CAST(any_value(listing) AS JSON) AS JSON[])) AS it
          FROM docs GROUP BY lkey)
"""

# Each tools/call attributed to the definition of its tool in the tools listing its session saw
# last before it (a join keeping the latest listing: faster here than an ASOF join).
_CALLS = """
    SELECT x.server, x.command, x.name, l.hash, count(*) AS calls,
           count(*) FILTER (WHERE x.base_outcome <> 'ok') AS errors
    FROM (
        SELECT c.session_id, c.request_seq, c.tool AS name,
               any_value(c.base_outcome) AS base_outcome, arg_max(d.lkey, d.seq) AS lkey,
               arg_max(d.server, d.seq) AS server, arg_max(d.command, d.seq) AS command
        FROM (SELECT session_id, tool, request_seq, base_outcome FROM _calls
              WHERE method = 'tools/call' AND tool IS NOT NULL) c
        JOIN docs d ON c.session_id = d.session_id AND d.seq <= c.request_seq
             AND d.method IN ('tools/list', 'server/discover')
        GROUP BY c.session_id, c.request_seq, c.tool
    ) x
    JOIN listings l ON l.lkey = x.lkey AND l.name = x.name AND l.kind = 'tool'
    GROUP BY ALL
"""


def _where(filters: ToolFilters) -> tuple[str, list]:
    clauses: list[str] = []
    params: list[object] = []
    if filters.server is not None and not storable_text(filters.server):
        clauses.append("FALSE")  # no recorded server name could hold it
    elif filters.server is not None:
        clauses.append("json_extract_string(doc, '$.server') GLOB ?")
        params.append(filters.server)
    if filters.since_ns is not None:
        clauses.append("wall_ns >= ?")
        params.append(filters.since_ns)
    return "".join(f" AND {c}" for c in clauses), params


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def inventory(con: duckdb.DuckDBPyConnection, filters: ToolFilters) -> list[dict]:
    """One row per server, item and definition hash: first and last seen, sessions, calls and
    errors made under that definition, and whether the heuristics flagged it."""
    where, params = _where(filters)
    tool = " WHERE d.name = ?" if filters.tool is not None else ""
    sql = f"""
        WITH docs AS MATERIALIZED ({_DOCS.format(where=where)}),
        listings AS MATERIALIZED ({_LISTINGS}),
        per AS (
            SELECT server, command, lkey, session_id, min(wall_ns) AS first_ns,
                   max(wall_ns) AS last_ns, any_value(fmap) FILTER (WHERE fmap IS NOT NULL) AS fmap
            FROM docs GROUP BY ALL
        ),
        calls AS ({_CALLS}),
        defs AS (
            SELECT p.server, p.command, l.kind, l.name, l.hash,
                   make_timestamp(min(p.first_ns) // 1000) AS first_seen,
                   make_timestamp(max(p.last_ns) // 1000) AS last_seen,
                   count(DISTINCT p.session_id) AS sessions,
                   {{session_ids}}
                   any_value(p.fmap -> l.name) FILTER (WHERE (p.fmap -> l.name) IS NOT NULL)
                       AS findings
            FROM per p JOIN listings l ON l.lkey = p.lkey GROUP BY ALL
        )
        SELECT d.*, coalesce(c.calls, 0) AS calls, coalesce(c.errors, 0) AS errors
        FROM defs d LEFT JOIN calls c
          ON c.server IS NOT DISTINCT FROM d.server AND c.command IS NOT DISTINCT FROM d.command
         AND c.name = d.name AND c.hash = d.hash
        {tool}
        ORDER BY d.server, d.command, d.kind, d.name, d.first_seen
    """
    # The session ids only for one tool's history: a list per definition costs more than the
    # rest of the inventory together over thousands of sessions.
    sql = sql.replace(
        "{session_ids}",
        "list(DISTINCT p.session_id ORDER BY p.session_id) AS session_ids,"
        if filters.tool is not None
        else "",
    )
    rows = _rows(con, sql, params + ([filters.tool] if filters.tool is not None else []))
    for row in rows:
        row["flags"] = _flags(row.pop("findings"))
    return rows


def _flags(findings: object) -> str:
    import json

    if findings is None:
        return ""
    items = json.loads(findings) if isinstance(findings, str) else findings
    if not isinstance(items, list):
        return ""
    return ",".join(sorted({str(f.get("rule")) for f in items if isinstance(f, dict)}))


def changes(con: duckdb.DuckDBPyConnection, filters: ToolFilters) -> list[dict]:
    """Every recorded `tool_changed`, oldest first."""
    where, params = _where(filters)
    if filters.tool is not None:
        where += " AND (CAST(doc AS JSON) ->> 'tool') = ?"
        params.append(filters.tool)
    sql = f"""
        SELECT make_timestamp(wall_ns // 1000) AS time,
               coalesce(d ->> 'observed_session', session_id) AS session_id,
               d ->> 'server' AS server, d ->> 'command' AS command,
               d ->> 'item_kind' AS kind, d ->> 'tool' AS name, d ->> 'change' AS change,
               d ->> 'old_hash' AS old_hash, d ->> 'new_hash' AS new_hash,
               d -> 'findings' AS findings,
               array_to_string(from_json(d -> 'diff', '["VARCHAR"]'), chr(10)) AS diff
        FROM (SELECT wall_ns, session_id, position, CAST(doc AS JSON) AS d
              FROM _control WHERE kind = 'tool_changed' {where})
        ORDER BY time
    """
    rows = _rows(con, sql, params)
    for row in rows:
        row["flags"] = _flags(row.pop("findings"))
    return rows


def shorten(rows: list[dict]) -> list[dict]:
    """Rows with hashes in their 12-character form, for a table on screen."""
    out = []
    for row in rows:
        row = dict(row)
        for key in ("hash", "old_hash", "new_hash"):
            if isinstance(row.get(key), str):
                row[key] = row[key][:12]
        out.append(row)
    return out


MODES: dict[str, tuple[Callable[[duckdb.DuckDBPyConnection, ToolFilters], list[dict]], list]] = {
    "inventory": (inventory, INVENTORY_COLUMNS),
    "history": (inventory, HISTORY_COLUMNS),
    "changes": (changes, CHANGES_COLUMNS),
}


def run_tools(
    store: EventStore,
    base_dir: Path,
    mode: str = "inventory",
    filters: ToolFilters | None = None,
    progress: Progress | None = None,
) -> tuple[list[dict], list[str]]:
    """Refresh the analytics copy and answer one tools query: (rows, columns)."""
    if mode not in MODES:
        raise ToolsError(f"unknown tools query {mode!r}")
    filters = filters or ToolFilters()
    if mode == "history" and filters.tool is None:
        raise ToolsError("--history needs a tool name")
    con, _result = refreshed_connection(store, base_dir, progress)
    try:
        builder, columns = MODES[mode]
        return builder(con, filters), columns
    finally:
        con.close()
