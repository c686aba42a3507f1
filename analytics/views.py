"""DuckDB over the Parquet copy: the views that are the public face of the analytics.

Every report, `blackbox sql` and the compliance exports read these views, never the files, so
the columns documented in `COLUMNS` (and docs/analytics.md) are the stable interface:

- `frames`    every record of the log, with derived fields (one row per record).
- `messages`  every JSON-RPC message: frames, with batches expanded into their messages.
- `sessions`  one row per recording session.
- `calls`     each request joined to its response, with its outcome.
- `faults`    transport and protocol faults with stage, kind and evidence.
- `decisions` permission decisions and the call each one belongs to.

The connection is read-only and confined: the views are written to a private DuckDB file which is
then reopened with `read_only=True` and locked (`confine`): no file outside the copy, no network,
no extension, and no `SET` that could undo it. `query` also accepts only SELECT-like statements, so
a write is refused with a message that says why.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import duckdb
from blackbox.analytics.parquet import ParquetCopy
from blackbox.recorder import FILE_MODE, BlackboxError, private_dir

DEFAULT_WINDOW_S = 60.0


class QueryError(BlackboxError):
    """A query that cannot run: a syntax error, an unknown column, or a write."""


class ReadOnlyViolation(QueryError):
    """A statement that would write: the analytics are read-only."""


# The documented columns of each view (the tests hold both backends to these).
COLUMNS: dict[str, list[str]] = {
    "frames": [
        "position",
        "session_id",
        "seq",
        "time",
        "wall_ns",
        "mono_ns",
        "kind",
        "direction",
        "msg_type",
        "method",
        "rpc_id",
        "rpc_id_type",
        "tool",
        "is_error",
        "error_code",
        "era",
        "size",
        "truncated",
        "raw",
        "text",
        "doc",
        "hash",
        "args_fingerprint",
        "error_message",
        "ref_id",
        "ref_id_type",
        "items",
        "day",
    ],
    "messages": [
        "position",
        "session_id",
        "seq",
        "item",
        "time",
        "mono_ns",
        "direction",
        "msg_type",
        "method",
        "rpc_id",
        "rpc_id_type",
        "tool",
        "is_error",
        "error_code",
        "era",
    ],
    "sessions": [
        "session_id",
        "name",
        "server",
        "transport",
        "command",
        "cwd",
        "era",
        "client_name",
        "client_version",
        "server_name",
        "server_version",
        "client_info",
        "server_info",
        "started",
        "ended",
        "duration_s",
        "records",
        "frames",
        "faults",
        "outcome",
        "end_reason",
        "exit_code",
        "signal",
        "replay_of",
        "sealed",
    ],
    "calls": [
        "session_id",
        "server",
        "direction",
        "rpc_id",
        "rpc_id_type",
        "method",
        "tool",
        "args_fingerprint",
        "era",
        "started",
        "ended",
        "latency_ms",
        "outcome",
        "error_code",
        "error_message",
        "is_error",
        "request_seq",
        "response_seq",
        "cancel_seq",
        "fault_seq",
        "request_position",
        "final",
        "day",
        "started_ns",
        "ended_ns",
        "decision",
        "decision_source",
        "decision_by",
        "decision_rule",
    ],
    "faults": [
        "session_id",
        "server",
        "seq",
        "time",
        "stage",
        "fault",
        "detail",
        "related_seq",
        "origin",
        "evidence",
    ],
    "decisions": [
        "position",
        "session_id",
        "seq",
        "time",
        "server",
        "tool",
        "args_fingerprint",
        "decision",
        "final",
        "verdict",
        "source",
        "decided_by",
        "rule",
        "reason",
        "rpc_id",
        "request_seq",
        "host_session",
        "policy_version",
        "matched_by",
        "call_session_id",
        "call_request_seq",
        "call_rpc_id",
        "call_started",
        "call_outcome",
        "call_gap_ms",
    ],
}

# Statements a query may run: reading only.
ALLOWED = {"SELECT", "EXPLAIN"}


def _files(paths: Sequence[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def view_files(copy: ParquetCopy) -> dict[str, list[Path]]:
    """The copy's current files each base view reads: events, control and calls."""
    calls = list(copy.files("calls"))
    pending = copy.pending_file()
    if pending is not None and pending.exists():
        calls.append(pending)
    return {"events": copy.files("events"), "control": copy.files("control"), "calls": calls}


def view_sql(
    copy: ParquetCopy,
    window_s: float = DEFAULT_WINDOW_S,
    files: dict[str, list[Path]] | None = None,
) -> list[str]:
    """The statements creating the views over the copy's current files (or over `files`)."""
    files = files if files is not None else view_files(copy)
    events = _files(files["events"])
    control = _files(files["control"])
    calls = _files(files["calls"])
    window_ns = int(window_s * 1e9)
    return [
        f"CREATE VIEW _events AS SELECT * FROM read_parquet({events})",
        f"CREATE VIEW _control AS SELECT * FROM read_parquet({control})",
        f"CREATE VIEW _calls AS SELECT * FROM read_parquet({calls})",
        """
        CREATE VIEW frames AS
        SELECT position, session_id, seq, make_timestamp(wall_ns // 1000) AS time, wall_ns,
               mono_ns, kind, direction, msg_type, method, rpc_id, rpc_id_type, tool, is_error,
               error_code, era, coalesce(raw_size, octet_length(raw)) AS size,
               raw_size IS NOT NULL AS truncated, raw, TRY(decode(raw)) AS text,
               CAST(doc AS JSON) AS doc,
               hex(hash) AS hash, args_fingerprint, error_message, ref_id, ref_id_type, items,
               CAST(make_timestamp(wall_ns // 1000) AS DATE) AS day
        FROM _events
        """,
        """
        CREATE VIEW messages AS
        SELECT position, session_id, seq, CAST(NULL AS INTEGER) AS item,
               make_timestamp(wall_ns // 1000) AS time, mono_ns, direction, msg_type, method,
               rpc_id, rpc_id_type, tool, is_error, error_code, era
        FROM _events WHERE kind = 'frame' AND msg_type <> 'batch'
        UNION ALL
        SELECT position, session_id, seq, CAST(item AS INTEGER), time, mono_ns, direction,
               it.msg_type, it.method, it.rpc_id, it.rpc_id_type, it.tool, it.is_error,
               it.error_code, era
        FROM (
            SELECT position, session_id, seq, make_timestamp(wall_ns // 1000) AS time, mono_ns,
                   direction, era, unnest(generate_series(0, len(items) - 1)) AS item,
                   unnest(items) AS it
            FROM _events WHERE kind = 'frame' AND msg_type = 'batch'
        )
        """,
        # Session metadata from the few non-frame records only: cheap enough to join to calls.
        """
        CREATE VIEW _session_meta AS
        WITH st AS (
            SELECT session_id, arg_min(wall_ns, seq) AS wall_ns,
                   CAST(arg_min(doc, seq) AS JSON) AS d
            FROM _control WHERE kind = 'session_started' GROUP BY session_id
        ), er AS (
            SELECT session_id, CAST(arg_max(doc, seq) AS JSON) AS d
            FROM _control WHERE kind = 'era_detected' GROUP BY session_id
        )
        SELECT coalesce(st.session_id, er.session_id) AS session_id, st.wall_ns AS started_ns,
               st.d AS started_doc, er.d AS era_doc,
               coalesce(st.d ->> 'name', er.d -> 'server_info' ->> 'name') AS server,
               er.d ->> 'era' AS era
        FROM st FULL OUTER JOIN er ON st.session_id = er.session_id
        """,
        """
        CREATE VIEW sessions AS
        WITH agg AS (
            SELECT session_id, min(wall_ns) AS first_ns, max(wall_ns) AS last_ns,
                   count(*) AS records, count(*) FILTER (WHERE kind = 'frame') AS frames,
                   count(*) FILTER (WHERE kind = 'fault') AS faults,
                   arg_min(era, seq) FILTER (WHERE era IS NOT NULL AND kind = 'frame')
                       AS frame_era,
                   bool_or(kind = 'session_sealed') AS sealed
            FROM _events GROUP BY session_id
        ), en AS (
            SELECT session_id, arg_max(wall_ns, seq) AS wall_ns,
                   CAST(arg_max(doc, seq) AS JSON) AS d
            FROM _control WHERE kind = 'session_ended' GROUP BY session_id
        )
        SELECT a.session_id, m.started_doc ->> 'name' AS name, m.server,
               m.started_doc ->> 'transport' AS transport,
               CASE WHEN json_type(m.started_doc -> 'command') = 'ARRAY'
                    THEN array_to_string(
                        from_json(m.started_doc -> 'command', '["VARCHAR"]'), ' ')
                    ELSE m.started_doc ->> 'command' END AS command,
               m.started_doc ->> 'cwd' AS cwd,
               coalesce(m.era, a.frame_era) AS era,
               m.era_doc -> 'client_info' ->> 'name' AS client_name,
               m.era_doc -> 'client_info' ->> 'version' AS client_version,
               m.era_doc -> 'server_info' ->> 'name' AS server_name,
               m.era_doc -> 'server_info' ->> 'version' AS server_version,
               m.era_doc -> 'client_info' AS client_info,
               m.era_doc -> 'server_info' AS server_info,
               make_timestamp(coalesce(m.started_ns, a.first_ns) // 1000) AS started,
               make_timestamp(en.wall_ns // 1000) AS ended,
               (coalesce(en.wall_ns, a.last_ns) - coalesce(m.started_ns, a.first_ns)) / 1e9
                   AS duration_s,
               a.records, a.frames, a.faults,
               coalesce(en.d ->> 'outcome',
                        CASE WHEN en.session_id IS NOT NULL OR a.sealed THEN 'ended'
                             ELSE 'open' END) AS outcome,
               en.d ->> 'reason' AS end_reason,
               TRY_CAST(en.d ->> 'exit_code' AS BIGINT) AS exit_code,
               en.d ->> 'signal' AS signal,
               m.started_doc ->> 'replay_of' AS replay_of,
               a.sealed
        FROM agg a
        LEFT JOIN _session_meta m ON m.session_id = a.session_id
        LEFT JOIN en ON en.session_id = a.session_id
        """,
        r"""
        CREATE VIEW _decisions AS
        WITH d AS (
            SELECT position, session_id, seq, wall_ns,
                   CAST(doc AS JSON) AS doc
            FROM _control WHERE kind = 'decision'
        ), p AS (
            SELECT *, doc ->> 'tool' AS raw_tool,
                   regexp_matches(coalesce(doc ->> 'tool', ''), '^mcp__.+?__.+$') AS prefixed
            FROM d
        )
        SELECT position, session_id, seq, wall_ns,
               coalesce(doc ->> 'server',
                        CASE WHEN prefixed THEN regexp_extract(raw_tool, '^mcp__(.+?)__', 1)
                        END) AS server,
               CASE WHEN prefixed THEN regexp_extract(raw_tool, '^mcp__(.+?)__(.+)$', 2)
                    ELSE raw_tool END AS tool,
               doc ->> 'args_fingerprint' AS args_fingerprint,
               doc ->> 'decision' AS decision, doc ->> 'final' AS final,
               CASE WHEN doc ->> 'decision' = 'ask' THEN
                        CASE doc ->> 'final' WHEN 'allow' THEN 'approved'
                                             WHEN 'deny' THEN 'denied' ELSE 'ask' END
                    ELSE coalesce(doc ->> 'final', doc ->> 'decision') END AS verdict,
               doc ->> 'source' AS source, doc ->> 'decided_by' AS decided_by,
               doc ->> 'rule' AS rule, doc ->> 'reason' AS reason,
               doc ->> 'rpc_id' AS rpc_id,
               TRY_CAST(doc ->> 'request_seq' AS BIGINT) AS request_seq,
               doc ->> 'host_session' AS host_session,
               doc ->> 'policy_sha256' AS policy_version
        FROM p
        """,
        # A policy deny makes its call `denied`, whatever the wire shows. (Tested with IN rather
        # than joined: DuckDB then always hashes the few denials, never the calls.)
        """
        CREATE VIEW _denied AS
        SELECT DISTINCT session_id, request_seq, rpc_id
        FROM _decisions
        WHERE verdict IN ('deny', 'denied') AND coalesce(source, '') <> 'host'
        """,
        """
        CREATE VIEW _calls_joined AS
        SELECT c.session_id, m.server, c.direction, c.rpc_id, c.rpc_id_type, c.method, c.tool,
               c.args_fingerprint, coalesce(c.era, m.era) AS era,
               make_timestamp(c.started_ns // 1000) AS started,
               make_timestamp(c.ended_ns // 1000) AS ended,
               c.latency_ns / 1e6 AS latency_ms,
               CASE WHEN (c.session_id, c.request_seq) IN (
                             SELECT session_id, request_seq FROM _denied
                             WHERE request_seq IS NOT NULL)
                      OR (c.direction = 'c2s' AND c.method = 'tools/call'
                          AND (c.session_id, c.rpc_id) IN (
                             SELECT session_id, rpc_id FROM _denied
                             WHERE request_seq IS NULL AND rpc_id IS NOT NULL))
                    THEN 'denied' ELSE c.base_outcome END AS outcome,
               c.error_code, c.error_message, c.is_error, c.request_seq, c.response_seq,
               c.cancel_seq, c.fault_seq, c.request_position, c.closed AS final,
               CAST(make_timestamp(c.started_ns // 1000) AS DATE) AS day,
               c.started_ns, c.ended_ns
        FROM _calls c
        LEFT JOIN _session_meta m ON m.session_id = c.session_id
        """,
        """
        CREATE VIEW faults AS
        SELECT f.session_id, m.server, f.seq, make_timestamp(f.wall_ns // 1000) AS time,
               coalesce(f.doc ->> 'stage', 'transport') AS stage,
               coalesce(f.doc ->> 'fault', 'unknown') AS fault, f.doc ->> 'detail' AS detail,
               TRY_CAST(f.doc ->> 'seq' AS BIGINT) AS related_seq, 'recorded' AS origin,
               f.doc AS evidence
        FROM (SELECT session_id, seq, wall_ns, CAST(doc AS JSON) AS doc
              FROM _control WHERE kind = 'fault') f
        LEFT JOIN _session_meta m ON m.session_id = f.session_id
        UNION ALL
        SELECT e.session_id, m.server, e.seq, make_timestamp(e.wall_ns // 1000), 'transport',
               'invalid_frame', 'the server sent a frame that is not JSON-RPC', e.seq, 'derived',
               to_json({'excerpt': left(coalesce(TRY(decode(e.raw)), '<binary>'), 200)})
        FROM _events e
        LEFT JOIN _session_meta m ON m.session_id = e.session_id
        WHERE e.kind = 'frame' AND e.msg_type = 'invalid' AND e.direction = 's2c'
          AND NOT EXISTS (SELECT 1 FROM _control f WHERE f.kind = 'fault'
                          AND f.session_id = e.session_id
                          AND TRY_CAST(CAST(f.doc AS JSON) ->> 'seq' AS BIGINT) = e.seq)
        UNION ALL
        SELECT c.session_id, c.server, c.response_seq, c.ended, 'handshake',
               CASE c.method WHEN 'initialize' THEN 'initialize_error'
                             ELSE 'discover_error' END,
               'the server answered ' || c.method || ' with error ' || coalesce(
                   CAST(c.error_code AS VARCHAR), '?') || ': ' || coalesce(c.error_message, ''),
               c.request_seq, 'derived',
               to_json({'code': c.error_code, 'message': c.error_message})
        FROM _calls_joined c
        WHERE c.method IN ('initialize', 'server/discover') AND c.outcome = 'rpc_error'
        """,
        f"""
        CREATE VIEW decisions AS
        WITH direct AS (
            SELECT d.position, c.session_id AS call_session_id, c.request_seq AS call_request_seq,
                   'request_seq' AS matched_by
            FROM _decisions d JOIN _calls_joined c
              ON c.session_id = d.session_id AND c.request_seq = d.request_seq
            WHERE coalesce(d.source, '') <> 'host' AND d.request_seq IS NOT NULL
            UNION ALL
            SELECT d.position, c.session_id, c.request_seq, 'rpc_id'
            FROM _decisions d JOIN _calls_joined c
              ON c.session_id = d.session_id AND c.rpc_id = d.rpc_id AND c.direction = 'c2s'
             AND c.method = 'tools/call'
            WHERE coalesce(d.source, '') <> 'host' AND d.request_seq IS NULL
        ), host AS (
            SELECT position, call_session_id, call_request_seq, 'time_window' AS matched_by
            FROM (
                SELECT d.position, c.session_id AS call_session_id,
                       c.request_seq AS call_request_seq,
                       row_number() OVER (PARTITION BY d.position
                                          ORDER BY abs(c.started_ns - d.wall_ns),
                                                   c.request_position) AS rank
                FROM _decisions d JOIN _calls_joined c
                  ON c.method = 'tools/call' AND c.tool = d.tool
                 AND c.args_fingerprint = d.args_fingerprint
                 AND (d.server IS NULL OR c.server = d.server)
                 AND abs(c.started_ns - d.wall_ns) <= {window_ns}
                WHERE d.source = 'host'
            ) WHERE rank = 1
        ), matched AS (
            SELECT * FROM direct UNION ALL SELECT * FROM host
        )
        SELECT d.position, d.session_id, d.seq, make_timestamp(d.wall_ns // 1000) AS time,
               d.server, d.tool, d.args_fingerprint, d.decision, d.final, d.verdict, d.source,
               d.decided_by, d.rule, d.reason, d.rpc_id, d.request_seq, d.host_session,
               d.policy_version, x.matched_by, x.call_session_id, x.call_request_seq,
               c.rpc_id AS call_rpc_id,
               c.started AS call_started, c.outcome AS call_outcome,
               (d.wall_ns - c.started_ns) / 1e6 AS call_gap_ms
        FROM _decisions d
        LEFT JOIN (SELECT * FROM matched QUALIFY row_number() OVER (
                       PARTITION BY position ORDER BY matched_by) = 1) x
               ON x.position = d.position
        LEFT JOIN _calls_joined c ON c.session_id = x.call_session_id
                         AND c.request_seq = x.call_request_seq
        """,
        # Each call with the decision that settled it beside it: of the records matched to the
        # call, the last one that carries a verdict (a host's final answer after an ask comes
        # after the ask itself). NULL: no decision was recorded for the call.
        """
        CREATE VIEW calls AS
        SELECT c.*, dd.verdict AS decision, dd.source AS decision_source,
               dd.decided_by AS decision_by, dd.rule AS decision_rule
        FROM _calls_joined c
        LEFT JOIN (
            SELECT call_session_id, call_request_seq, verdict, source, decided_by, rule
            FROM decisions
            WHERE call_session_id IS NOT NULL AND verdict IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY call_session_id, call_request_seq
                                       ORDER BY position DESC) = 1
        ) dd ON dd.call_session_id = c.session_id AND dd.call_request_seq = c.request_seq
        """,
    ]


# DuckDB shares one database instance (settings included) among a process's connections to one
# file, so two threads opening the view database at once raced: one found it half confined and
# its `SET` failed ("the configuration has been locked"), or one replaced the file the other was
# opening. Building, opening and confining are therefore one step per process.
_CONNECT_LOCK = threading.Lock()


def connect(copy: ParquetCopy, window_s: float = DEFAULT_WINDOW_S) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection with the views over the copy's current files, confined to
    the copy (`confine`).

    Creating the views is slow for DuckDB (it binds every nested view against the Parquet
    metadata), so the view database is kept in the copy, named by a hash of its SQL
    (file list and window included), and only rebuilt after a refresh wrote new files.
    """
    with _CONNECT_LOCK:
        return _connect(ParquetCopy(copy.root.resolve()), window_s)


def _connect(copy: ParquetCopy, window_s: float) -> duckdb.DuckDBPyConnection:
    files = view_files(copy)
    statements = view_sql(copy, window_s, files)
    key = hashlib.sha256("\n;".join(statements).encode()).hexdigest()[:16]
    folder = private_dir(copy.root / "views")
    path = folder / f"views-{key}.duckdb"
    for attempt in range(2):
        if not path.exists():
            _build(path, statements)
            for old in folder.glob("views-*.duckdb"):
                if old != path:
                    with suppress(OSError):
                        old.unlink()
        try:
            con = duckdb.connect(str(path), read_only=True)
        except duckdb.Error:
            if attempt:
                raise
            with suppress(OSError):  # a damaged or vanished file: build it again
                path.unlink()
            continue
        confine(con, [f for group in files.values() for f in group])
        return con
    raise AssertionError("unreachable")


# What `confine` sets after the allowed files, in this order: the last one freezes them all.
LOCKDOWN = (
    "SET enable_external_access = false",  # no other file, no URL, no INSTALL or LOAD
    "SET autoinstall_known_extensions = false",  # read_parquet('https://...') would fetch httpfs
    "SET autoload_known_extensions = false",
    "SET lock_configuration = true",  # a query cannot SET, RESET or PRAGMA them back
)


def confine(con: duckdb.DuckDBPyConnection, files: Sequence[Path]) -> None:
    """Let `con` read the Parquet files its views read and nothing else.

    Once external access is off, DuckDB checks every file a statement touches (read_text,
    read_csv, glob, COPY TO, ATTACH, INSTALL, a URL) against `allowed_paths`; the views'
    `read_parquet` of exactly these files stays allowed, and so does DuckDB's own spill directory
    beside the view database. Paths are compared after resolving `..` and symbolic links. (A
    whole directory in `allowed_directories` would also let a statement create files in it;
    writing one of the allowed files is refused earlier, by `check_read_only`.)

    DuckDB shares one database instance, settings included, among the connections a process
    has open to one file: a second connection to the same view database (same name, so same
    files) finds it locked already and is left as it is.
    """
    (locked,) = con.execute("SELECT current_setting('lock_configuration')").fetchone() or (False,)
    if locked:
        return
    allowed = ", ".join("'" + str(f.resolve()).replace("'", "''") + "'" for f in files)
    con.execute(f"SET allowed_paths = [{allowed}]")
    for statement in LOCKDOWN:
        con.execute(statement)


def _build(path: Path, statements: list[str]) -> None:
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    writer = duckdb.connect(str(tmp))
    try:
        for statement in statements:
            writer.execute(statement)
    finally:
        writer.close()
    os.chmod(tmp, FILE_MODE)  # DuckDB made it 0644 less the umask (recorder/private.py)
    os.replace(tmp, path)  # readers only ever see a complete file


class OutsideAnalytics(QueryError):
    """A query that reaches past the views: another file, the network, an extension, a setting."""


_EXPLAIN = re.compile(r"\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?", re.IGNORECASE)


def check_read_only(sql: str) -> None:
    """Refuse anything but reading, with a message that says so.

    `EXPLAIN ANALYZE` runs the statement it explains, so that statement is checked too
    (`EXPLAIN ANALYZE COPY ... TO` wrote a file and `EXPLAIN ANALYZE SET` changed a setting).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"invalid query: {_first_line(exc)}") from None
    if not statements:
        raise QueryError("empty query: give a SELECT over frames, sessions, calls, faults, ...")
    for statement in statements:
        kind = statement.type.name
        if kind == "EXPLAIN":
            kind = _explained_kind(statement.query)
        if kind not in ALLOWED:
            raise ReadOnlyViolation(
                f"refused: {kind} statements are not allowed; the analytics are read-only "
                "(use SELECT over frames, messages, sessions, calls, faults, decisions)"
            )


def _explained_kind(text: str) -> str:
    """The kind of statement an EXPLAIN explains ('EXPLAIN ...' when it cannot be told)."""
    match = _EXPLAIN.match(text)
    if match is None:
        return "EXPLAIN"
    rest = text[match.end() :]
    candidates = [rest]
    if rest.lstrip().startswith("(") and ")" in rest:  # EXPLAIN (FORMAT json) SELECT ...
        candidates.append(rest[rest.index(")") + 1 :])
    for candidate in candidates:
        try:
            inner = duckdb.extract_statements(candidate)
        except duckdb.Error:
            continue
        if len(inner) == 1:
            return inner[0].type.name
    return "EXPLAIN (of a statement that cannot be read)"


def query_error(exc: duckdb.Error) -> QueryError:
    """DuckDB's error for a query as ours, on one line, saying why a guard refused it."""
    message = _first_line(exc)
    if "read-only" in message:
        return ReadOnlyViolation(f"refused: {message}")
    if (
        isinstance(exc, duckdb.PermissionException)
        or "disabled by configuration" in message
        or "disabled through configuration" in message
        or "configuration has been locked" in message
    ):
        return OutsideAnalytics(
            f"refused: {message} (blackbox sql reads the analytics views only: no other file, "
            "no network, no extension, no settings)"
        )
    return QueryError(message)


def query(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple]]:
    """Run one read-only query, whole: (column names, rows). `blackbox.analytics.sql` streams
    instead."""
    check_read_only(sql)
    try:
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchall()
    except duckdb.Error as exc:
        raise query_error(exc) from None
    return columns, rows


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
