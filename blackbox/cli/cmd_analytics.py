"""Commands of the analytics area: `blackbox report`, `blackbox sql`, `blackbox doctor`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from blackbox import config
from blackbox.analytics import (
    GROUPS,
    KINDS,
    SLOW_S,
    Filters,
    QueryCancelled,
    doctor,
    render_text,
    run_report,
    start_sql,
)
from blackbox.analytics import render as render_html
from blackbox.cli.options import (
    DURATION_HELP,
    NAME_GLOB_HELP,
    Duration,
    Moment,
    format_option,
    moment_ns,
    open_configured_store,
    store_option,
)
from blackbox.cli.output import refresh_progress, render_report, render_stream, wrap
from blackbox.recorder import BlackboxError
from blackbox.recorder.capture import REFUSED_DIR, refused_files
from blackbox.recorder.store import EventStore

TABLES_QUERY = (
    "SELECT view_name AS view FROM duckdb_views() "
    "WHERE NOT internal AND NOT starts_with(view_name, '_') ORDER BY 1;"
)


@click.command()
@click.argument("kind", type=click.Choice(KINDS))
@click.option(
    "--by", type=click.Choice(GROUPS), help="Group by (default: tool; server for sessions)."
)
@click.option("--since", type=Moment(), help="From this time: 7d, 30min, 6mo or an ISO date.")
@click.option("--until", type=Moment(), help="Before this time (same forms as --since).")
@click.option(
    "--session", metavar="ID", help="Only this session (handle, id, unique prefix or 'last')."
)
@click.option(
    "--server",
    metavar="GLOB",
    help=f"Only sessions whose server name matches ({NAME_GLOB_HELP}).",
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a self-contained HTML page with charts to this file.",
)
@store_option
@format_option(("table", "csv", "json", "markdown"))
def report(
    kind: str,
    by: str | None,
    since: str | None,
    until: str | None,
    session: str | None,
    server: str | None,
    html_file: Path | None,
    store_url: str | None,
    fmt: str,
) -> None:
    """Report latency, errors, permissions or sessions from the recorded log.

    \b
    latency      count, p50, p95, p99, max and mean latency of answered calls
    errors       calls and the share of each outcome (ok, rpc_error, tool_error,
                 no_response, transport_fault, denied, cancelled)
    permissions  decisions per tool, source, rule and verdict; tool calls with no
                 decision; decisions that match no call
    sessions     sessions, durations, frames, calls and outcomes

    Grouping by tool covers tools/call requests; by method, every request. The analytics
    copy (Parquet, in the data directory) is brought up to date first.

    \b
    Example:
      blackbox report latency --by tool --since 7d
      blackbox report errors --by day --server time --format markdown
      blackbox report permissions --html permissions.html
    """
    store = open_configured_store(store_url)
    filters = Filters(
        since_ns=moment_ns(since) if since else None,
        until_ns=moment_ns(until) if until else None,
        session=session,
        server=server,
    )
    result = run_report(
        store,
        config.analytics_dir(),
        kind,
        by,
        filters,
        progress=refresh_progress,
        with_charts=html_file is not None,
    )
    if html_file is not None:
        try:
            html_file.write_text(render_html(result, store.url), encoding="utf-8")
        except OSError as exc:
            raise BlackboxError(f"cannot write {html_file}: {exc.strerror}") from None
        click.echo(f"blackbox: wrote {html_file}", err=True)
    click.echo(render_report(result, fmt))


def _run_and_print(store: EventStore, text: str, fmt: str, timeout_s: float | None) -> None:
    """Run one query and print its rows as they come. Ctrl-C stops it (`QueryCancelled`)."""
    try:
        with start_sql(
            store, config.analytics_dir(), text, progress=refresh_progress, timeout_s=timeout_s
        ) as running:
            for chunk in render_stream(running.columns, running, fmt):
                click.echo(chunk, nl=False)
    except KeyboardInterrupt:
        raise QueryCancelled("query cancelled (Ctrl-C)") from None


def _interactive(store: EventStore, fmt: str, timeout_s: float | None) -> None:
    """Read statements ending in ';' (or a blank line) until EOF or .quit."""
    tty = sys.stdin.isatty()
    if tty:
        import readline  # noqa: F401  (line editing and history for input())

        click.echo(
            "blackbox sql: DuckDB over frames, messages, sessions, calls, faults, decisions "
            "(read-only). End a query with ';'; Ctrl-C stops a running one. .tables lists the "
            "views, .quit leaves.",
            err=True,
        )
    buffer: list[str] = []
    while True:
        try:
            line = input("sql> " if not buffer else "...> ") if tty else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            break
        if not tty and line == "":
            break
        line = line.rstrip("\n")
        if not buffer and line.strip() in (".quit", ".exit", "\\q", "quit", "exit"):
            break
        if not buffer and line.strip() == ".tables":
            line = TABLES_QUERY
        buffer.append(line)
        text = "\n".join(buffer).strip()
        if not text:
            buffer = []
            continue
        if not text.endswith(";") and line.strip():
            continue
        buffer = []
        try:
            _run_and_print(store, text, fmt, timeout_s)
        except BlackboxError as exc:
            click.echo(f"blackbox: {exc}", err=True)


@click.command()
@click.argument("query", required=False)
@click.option(
    "--timeout",
    "timeout_s",
    type=Duration(),
    metavar="DURATION",
    help=f"Stop a query that runs longer than this ({DURATION_HELP}).",
)
@store_option
@format_option(("table", "csv", "json", "jsonl", "markdown"))
def sql(query: str | None, timeout_s: float | None, store_url: str | None, fmt: str) -> None:
    """Run DuckDB SQL over the analytics views (read-only); without QUERY, a prompt.

    Views: frames, messages, sessions, calls, faults, decisions (columns in
    docs/analytics.md). Queries read these views and nothing else: statements that
    write, other files, URLs, extensions and settings are refused (exit status 2).
    Rows print as they are produced; Ctrl-C stops a running query (exit status 130
    here, back to the prompt in the prompt).

    \b
    Example:
      blackbox sql "SELECT tool, count(*) FROM calls WHERE outcome <> 'ok' GROUP BY 1"
      blackbox sql "SELECT * FROM faults ORDER BY time DESC LIMIT 5" --format json
      blackbox sql "SELECT * FROM frames" --format jsonl --timeout 30s > frames.jsonl
      blackbox sql            # interactive: end each query with ';'
    """
    store = open_configured_store(store_url)
    if query is None:
        _interactive(store, fmt, timeout_s)
        return
    try:
        _run_and_print(store, query, fmt, timeout_s)
    except QueryCancelled as exc:
        click.echo(f"blackbox: {exc}", err=True)
        sys.exit(130)


@click.command(name="doctor")
@click.argument("session")
@click.option(
    "--slow",
    "slow_s",
    type=Duration(),
    default=SLOW_S,
    show_default=True,
    metavar="DURATION",
    help=f"Calls slower than this are reported ({DURATION_HELP}).",
)
@store_option
@format_option(("table", "json"))
def doctor_command(session: str, slow_s: float, store_url: str | None, fmt: str) -> None:
    """Diagnose one session: transport -> handshake -> discovery -> execution.

    Prints each finding with its evidence (seqs, an excerpt) and the likely fix. Exits 0
    when nothing is wrong, 1 when an error or warning is found (info notes, such as an era
    fallback that worked, do not count).

    SESSION is a handle from `blackbox sessions`, a full id, a unique prefix, or 'last'.

    \b
    Example:
      blackbox doctor last
      blackbox doctor 01a2 --format json
    """
    store = open_configured_store(store_url)
    diagnosis = doctor(store, session, slow_s=slow_s)
    if fmt == "json":
        click.echo(json.dumps(diagnosis.as_dict(), indent=2))
    else:
        click.echo(wrap(render_text(diagnosis)))
    refused = refused_files(config.journal_dir() / REFUSED_DIR)
    if refused:  # records of any session that no store would take: said wherever one looks
        click.echo(
            f"note: {len(refused)} file(s) of records no store would take are kept in "
            f"{refused[0].parent} (JSON lines, raw bytes in base64)",
            err=True,
        )
    sys.exit(1 if diagnosis.failing else 0)


COMMANDS = [report, sql, doctor_command]
