"""Commands over the store itself: sessions, show, verify, db upgrade."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
@format_option()
def sessions(store_url: str | None, limit: int, fmt: str) -> None:
    """List recorded sessions, newest first.

    \b
    Example:
      blackbox sessions --limit 10
      blackbox sessions --format json
    """
    store = open_configured_store(store_url)
    rows = list_session_rows(store, limit=limit)
    click.echo(render(rows, fmt, SESSION_COLUMNS if fmt == "table" else None))


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
@click.option(
    "--checkpoint",
    "checkpoint_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Also check the log against this signed checkpoint (or file of them), kept elsewhere.",
)
@click.option("--key", "vkey", metavar="VKEY", default=None, help="The log's verifier key.")
def verify(
    session: str | None,
    store_url: str | None,
    fmt: str,
    checkpoint_file: Path | None,
    vkey: str | None,
) -> None:
    """Check the hash chains: exit 0 when intact, 1 with each finding otherwise.

    Findings name the session, the seq and what happened: modified, missing, inserted,
    reordered or truncated (the chain); derived (a column computed from a record's raw bytes
    differs from them); projection (the session's `sessions` row differs from its records).
    Without SESSION every session is checked, records removed outside retention are reported
    as `log: removed` (SQLite; see docs/trust.md), and every session retention removed is
    listed with the `retention_applied` record that removed it.

    With --checkpoint FILE --key VKEY the log is also checked against a checkpoint kept
    outside the database: its signature with the key alone, and the Merkle root at its size
    recomputed from the records' bytes. Without them, the checkpoints the store keeps are
    checked, which are only as trustworthy as the database.

    \b
    Example:
      blackbox verify
      blackbox verify last --format json
      blackbox verify --checkpoint /mnt/audit/checkpoint.txt --key "$(cat log.vkey)"
    """
    from recorder import logproof  # here, so that the import block stays as the store's own

    if checkpoint_file is not None and not vkey:
        raise click.UsageError("--checkpoint is checked with --key VKEY (`blackbox keys show`)")
    store = open_configured_store(store_url)
    target = store.resolve(session) if session else None
    findings = store.verify(target)
    trust = None
    if checkpoint_file is not None and vkey:
        note = checkpoint_file.read_text(encoding="utf-8", errors="replace")
        trust = logproof.verify_checkpoint(store, note, vkey)
    elif target is None:
        trust = logproof.verify_stored(store, vkey)
    problems = trust.findings if trust else []
    checked = 1 if target else len(store.list_sessions())
    removed = [] if target else store.removals()
    if fmt == "json":
        doc = {"intact": not findings, "sessions_checked": checked}
        doc["findings"] = [f.as_dict() for f in findings]
        doc["removed_by_retention"] = [r._asdict() for r in removed]
        if trust is not None:
            doc["checkpoints"] = {
                "checked_sizes": trust.checked,
                "log_size": trust.log_size,
                "signed_by_key": bool(vkey),
                "findings": problems,
            }
            doc["intact"] = not findings and not problems
        click.echo(json.dumps(doc, indent=2))
        sys.exit(1 if findings or problems else 0)
    for f in findings:
        where = "log" if f.session_id == "-" else f.session_id
        at = "" if f.seq is None else f" seq {f.seq}"
        click.echo(f"{where}{at}: {f.problem}: {f.detail}")
    for problem in problems:
        click.echo(f"log: checkpoint: {problem}")
    if not findings and not problems:
        click.echo(f"intact: {checked} session(s) verified")
    if trust is not None and trust.checked and not problems:
        sizes = ", ".join(map(str, trust.checked[-3:]))
        if checkpoint_file is not None:
            click.echo(f"consistent with the checkpoint signed by the key (size {sizes})")
        else:
            how = "signatures checked with the key" if vkey else "without --key"
            click.echo(
                f"{len(trust.checked)} stored checkpoint(s) match the log (latest sizes {sizes}; "
                f"{how}): stored checkpoints are only as trustworthy as the database; check a "
                "copy kept elsewhere with --checkpoint FILE --key VKEY"
            )
    # Every removal is said, not only the suspect ones: a writer who forged a retention record
    # can remove whole sessions the log then explains, and only a reader of this line sees it.
    for r in removed:
        click.echo(
            f"removed by retention: session {r.session_id} (retention_applied record at log "
            f"position {r.removed_by}, session {r.record_session})"
        )
    sys.exit(1 if findings or problems else 0)


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
