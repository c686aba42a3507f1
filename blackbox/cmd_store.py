"""Commands over the store itself: sessions, show, verify, db upgrade."""

from __future__ import annotations

import json
import sys

import click

from blackbox.options import format_option, open_configured_store, store_option
from blackbox.output import (
    SESSION_COLUMNS,
    TIMELINE_COLUMNS,
    list_session_rows,
    render,
    timeline,
)
from recorder.store import schema_head


@click.command()
@store_option
@click.option("--limit", type=int, default=50, show_default=True, help="At most this many.")
@click.option(
    "--idle",
    "idle_only",
    is_flag=True,
    help="Only sessions that went idle (session_idle), with their idle and in-use time.",
)
@format_option()
def sessions(store_url: str | None, limit: int, fmt: str, idle_only: bool = False) -> None:
    """List recorded sessions, newest first.

    \b
    Example:
      blackbox sessions --limit 10
      blackbox sessions --format json
      blackbox sessions --idle
    """
    store = open_configured_store(store_url)
    if idle_only:
        from recorder.idle import IDLE_COLUMNS, idle_session_rows

        rows = idle_session_rows(store, list_session_rows(store), limit)
        click.echo(render(rows, fmt, [*SESSION_COLUMNS, *IDLE_COLUMNS] if fmt == "table" else None))
        return
    rows = list_session_rows(store, limit=limit)
    columns = _with_tool_changes(store, rows)
    click.echo(render(rows, fmt, columns if fmt == "table" else None))


def _with_tool_changes(store: object, rows: list[dict]) -> list[str]:
    """Add `tools_changed` (how many tool definitions changed in the session) to the rows; the
    table shows the column only when some session has a change."""
    from recorder.store.kinds import kind_counts

    counts = kind_counts(store, [r["id"] for r in rows], "tool_changed")
    for row in rows:
        row["tools_changed"] = counts.get(row["id"], 0)
    return SESSION_COLUMNS + (["tools_changed"] if counts else [])


@click.command()
@click.argument("session")
@store_option
@format_option()
def show(session: str, store_url: str | None, fmt: str) -> None:
    """Show one session's timeline: seq, offset, direction, kind, method, id, excerpt.

    SESSION is a full id, a unique prefix of one, or 'last'.

    \b
    Example:
      blackbox show last
      blackbox show 01a2 --format jsonl
    """
    store = open_configured_store(store_url)
    rows = timeline(store, store.resolve(session))
    click.echo(render(rows, fmt, TIMELINE_COLUMNS if fmt == "table" else None))


@click.command()
@click.argument("session", required=False)
@store_option
@format_option(("table", "json"))
def verify(session: str | None, store_url: str | None, fmt: str) -> None:
    """Check the hash chains: exit 0 when intact, 1 with each finding otherwise.

    Findings name the session, the seq and what happened: modified, missing, inserted,
    reordered or truncated (the chain); derived (a column computed from a record's raw bytes
    differs from them); projection (the session's `sessions` row differs from its records).
    Without SESSION every session is checked, records removed outside retention are reported
    as `log: removed` (SQLite; see docs/trust.md), and every session retention removed is
    listed with the `retention_applied` record that removed it.

    \b
    Example:
      blackbox verify
      blackbox verify last --format json
    """
    store = open_configured_store(store_url)
    target = store.resolve(session) if session else None
    findings = store.verify(target)
    checked = 1 if target else len(store.list_sessions())
    removed = [] if target else store.removals()
    if fmt == "json":
        doc = {"intact": not findings, "sessions_checked": checked}
        doc["findings"] = [f.as_dict() for f in findings]
        doc["removed_by_retention"] = [r._asdict() for r in removed]
        click.echo(json.dumps(doc, indent=2))
        sys.exit(1 if findings else 0)
    for f in findings:
        where = "log" if f.session_id == "-" else f.session_id
        at = "" if f.seq is None else f" seq {f.seq}"
        click.echo(f"{where}{at}: {f.problem}: {f.detail}")
    if not findings:
        click.echo(f"intact: {checked} session(s) verified")
    # Every removal is said, not only the suspect ones: a writer who forged a retention record
    # can remove whole sessions the log then explains, and only a reader of this line sees it.
    for r in removed:
        click.echo(
            f"removed by retention: session {r.session_id} (retention_applied record at log "
            f"position {r.removed_by}, session {r.record_session})"
        )
    sys.exit(1 if findings else 0)


@click.group()
def db() -> None:
    """Manage the store's schema."""


@db.command()
@store_option
def upgrade(store_url: str | None) -> None:
    """Create the store, or apply the migrations to it (a tap's first use of a store does this
    too; read commands such as `sessions` never create one).

    \b
    Example:
      blackbox db upgrade --store postgresql://blackbox@db.internal/blackbox
    """
    store = open_configured_store(store_url, create=True)
    click.echo(f"{store.url} is at schema revision {schema_head()}")


COMMANDS = [sessions, show, verify, db]
