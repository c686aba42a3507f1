"""Commands over the store itself: sessions, show, verify, db upgrade."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from blackbox.cli.options import (
    NAME_GLOB_HELP,
    Moment,
    format_option,
    moment_ns,
    open_configured_store,
    store_option,
)
from blackbox.cli.output import ProgressBar, group_stderr, page, pager_option, render, wrap
from blackbox.cli.redaction_options import configured_redactor, redaction_options
from blackbox.recorder import BlackboxError
from blackbox.recorder.log import StoredEvent
from blackbox.recorder.query import COLUMNS as TIMELINE_COLUMNS
from blackbox.recorder.query import listing, timeline_rows
from blackbox.recorder.store import schema_head


@click.command()
@store_option
@click.option(
    "--limit",
    type=int,
    default=50,
    show_default=True,
    help="At most this many, counted after the filters.",
)
@click.option(
    "--name",
    default=None,
    metavar="GLOB",
    help=f"Only sessions whose name (the server key) matches ({NAME_GLOB_HELP}).",
)
@click.option("--server", default=None, help="Only sessions whose server command/URL has this.")
@click.option("--since", type=Moment(), help="Started at/after: an age (7d, 30min) or a date.")
@click.option("--until", type=Moment(), help="Started before: an age or a date.")
@click.option("--outcome", type=click.Choice(listing.OUTCOMES), help="Only this outcome.")
@click.option("--errors", "only_errors", is_flag=True, help="Only sessions with error replies.")
@click.option("--faults", "only_faults", is_flag=True, help="Only sessions with faults.")
@click.option(
    "--idle",
    "idle_only",
    is_flag=True,
    help="Only sessions that went idle (session_idle), with their idle and in-use time.",
)
@click.option("--replays", is_flag=True, help="Also list replay sessions (hidden by default).")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every session: replays and background sessions without traffic (a proxy's tool "
    "watch, a server never spoken to) too.",
)
@format_option()
def sessions(
    store_url: str | None,
    limit: int,
    name: str | None,
    server: str | None,
    since: str | None,
    until: str | None,
    outcome: str | None,
    only_errors: bool,
    only_faults: bool,
    replays: bool,
    fmt: str,
    idle_only: bool = False,
    every: bool = False,
) -> None:
    """List recorded sessions, newest first, with their requests (calls), error replies
    (JSON-RPC errors and tool results with isError), transport faults, and an outcome that
    reflects them (ok, errors, faults, crashed, interrupted, recovered, open).

    HANDLE is short and unique in the store: every command taking a SESSION accepts it, as
    well as a full id, a unique prefix, or 'last' (the last recorded session with traffic: not a
    replay, nor a background session such as a proxy's "tool watch: NAME", which only --all
    lists).

    \b
    Example:
      blackbox sessions --limit 10
      blackbox sessions --errors --since 7d
      blackbox sessions --name 'time*' --outcome faults --format json
      blackbox sessions --idle
      blackbox sessions --all
    """
    store = open_configured_store(store_url)
    filt = listing.SessionFilter(
        name=name,
        server=server,
        since_ns=moment_ns(since) if since else None,
        until_ns=moment_ns(until) if until else None,
        outcome=outcome,
        errors=only_errors,
        faults=only_faults,
        replays=replays or every,
        background=every,
        limit=None if idle_only else limit,
    )
    rows = [summary.row() for summary in listing.list_summaries(store, filt)]
    columns = list(listing.COLUMNS)
    if idle_only:
        from blackbox.recorder.capture import IDLE_COLUMNS, idle_session_rows

        rows = idle_session_rows(store, rows, limit)
        columns = [*listing.COLUMNS, *IDLE_COLUMNS]
    columns = _with_tool_changes(store, rows, columns)
    click.echo(render(rows, fmt, columns if fmt == "table" else None))


def _with_tool_changes(store: object, rows: list[dict], columns: list[str]) -> list[str]:
    """Add `tools_changed` (how many tool definitions changed in the session) to the rows; the
    table shows the column only when some session has a change."""
    from blackbox.recorder.query import kind_counts

    counts = kind_counts(store, [r["id"] for r in rows], "tool_changed")
    for row in rows:
        row["tools_changed"] = counts.get(row["id"], 0)
    return [*columns, *(["tools_changed"] if counts else [])]


@click.command()
@click.argument("session")
@click.option("--frame", "frame_seq", type=int, metavar="SEQ", help="Print one record whole.")
@click.option("--full", is_flag=True, help="Print every record whole (raw bytes, then JSON).")
@click.option("--raw", is_flag=True, help="With --frame: only the exact raw bytes.")
@redaction_options("payloads")
@store_option
@format_option()
@pager_option
def show(
    session: str,
    frame_seq: int | None,
    full: bool,
    raw: bool,
    store_url: str | None,
    fmt: str,
    no_pager: bool = False,
    redact_rules: Path | None = None,
    no_redact: bool = False,
) -> None:
    """Show one session's timeline: seq, offset, direction, kind, method, tool, id, the request
    a response answers (re), its error (isError or the JSON-RPC code), latency, an excerpt.

    SESSION is a handle from `blackbox sessions`, a full id, a unique prefix, or 'last'. The
    table cuts payloads to an excerpt; --format json/jsonl carry each whole (`payload`, or
    `payload_b64` when it is not UTF-8); --frame SEQ prints one record's exact raw bytes and
    its pretty JSON (--raw: the bytes alone, e.g. to a file). Secrets are redacted as `export`
    redacts them (the built-in rules keyed per store; --redact RULES, or --no-redact for the
    bytes as stored). The table fits the terminal and shows a run of server stderr lines as
    one row; on a terminal, output taller than it goes through the pager (--no-pager: never).

    \b
    Example:
      blackbox show last
      blackbox show 4f2a9c --format jsonl
      blackbox show 4f2a9c --frame 7
      blackbox show 4f2a9c --frame 7 --raw > frame.json
    """
    redactor = configured_redactor(redact_rules, no_redact, store_url)
    store = open_configured_store(store_url)
    sid = store.resolve(session)
    read = store.read_session(sid)
    if frame_seq is not None or full:
        records = [ev for ev in read if frame_seq is None or ev.seq == frame_seq]
        if redactor is not None:
            records = [redactor.redact_record(ev) for ev in records]
        if not records:
            raise BlackboxError(f"session {sid} has no record with seq {frame_seq}")
        if not raw and sys.stdout.isatty():  # a person reads it: pretty, paged when long
            text = b"".join(whole_record(ev) for ev in records)
            page(text.decode("utf-8", errors="replace").rstrip("\n"), no_pager)
            return
        # The bytes exactly (once redacted): the binary stream under stdout, never through its
        # text encoding (click's get_binary_stream, which did this, is deprecated since click 8.5).
        out = sys.stdout.buffer
        for ev in records:
            out.write(ev.raw if raw else whole_record(ev))
        out.flush()
        return
    rows = list(timeline_rows(read if redactor is None else map(redactor.redact_record, read)))
    if fmt == "table":
        page(render(group_stderr(rows), fmt, TIMELINE_COLUMNS), no_pager)
        return
    page(render([{k: v for k, v in r.items() if k != "excerpt"} for r in rows], fmt), no_pager)


def whole_record(ev: StoredEvent) -> bytes:
    """A record as --frame prints it: a header line, the raw bytes exactly, then pretty JSON."""
    stored = len(ev.raw)
    size = ev.raw_size if ev.raw_size is not None else stored
    head = f"--- seq {ev.seq} {ev.direction} {ev.kind} {ev.method or ''} ({size} bytes"
    head += f"; stored {stored}: cut by --max-frame)" if size != stored else ")"
    parts = [head.encode() + b"\n--- raw\n", ev.raw]
    try:
        pretty = json.dumps(json.loads(ev.raw), indent=2, ensure_ascii=False)
        parts += [b"\n--- json\n", pretty.encode("utf-8")]
    except ValueError:
        parts.append(b"\n--- json: not JSON")
    parts.append(b"\n")
    return b"".join(parts)


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
    # Here, so that the import block stays as the store's own.
    from blackbox.recorder.trust import keys, logproof, removal_note

    if checkpoint_file is not None and not vkey:
        raise click.UsageError("--checkpoint is checked with --key VKEY (`blackbox keys show`)")
    store = open_configured_store(store_url)
    target = store.resolve(session) if session else None
    with ProgressBar("verifying sessions") as bar:  # a large store takes a while
        findings = store.verify(target, progress=bar if target is None else None)
    trust = None
    if checkpoint_file is not None and vkey:
        note = checkpoint_file.read_text(encoding="utf-8", errors="replace")
        trust = logproof.verify_checkpoint(store, note, vkey)
    elif target is None:
        trust = logproof.verify_stored(store, vkey)
    problems = trust.findings if trust else []
    # Removals are checked against the log's key: --key, else the signing key configured here.
    verifier = logproof.read_verifier(vkey) if vkey else None
    if verifier is None:
        with contextlib.suppress(BlackboxError):
            signer = keys.configured_signer()
            verifier = signer.verifier if signer is not None else None
    removal = removal_note.check_removals(store, verifier)
    problems = [*problems, *removal.findings]
    checked = 1 if target else len(store.list_sessions())
    removed = [] if target else store.removals()
    if fmt == "json":
        doc: dict[str, object] = {"intact": not findings, "sessions_checked": checked}
        doc["findings"] = [f.as_dict() for f in findings]
        doc["removed_by_retention"] = [r._asdict() for r in removed]
        doc["signed_removals"] = {
            "signatures_checked": removal.signed_checked,
            "not_checked_no_key": removal.unchecked,
            "before_signed_removals": removal.legacy,
            "findings": removal.findings,
        }
        doc["intact"] = not findings and not problems
        if trust is not None:
            doc["checkpoints"] = {
                "checked_sizes": trust.checked,
                "log_size": trust.log_size,
                "signed_by_key": bool(vkey),
                "findings": trust.findings,
            }
        click.echo(json.dumps(doc, indent=2))
        sys.exit(1 if findings or problems else 0)

    def say(text: str) -> None:  # a finding's line is wrapped to the terminal, never cut
        click.echo(wrap(text))

    for f in findings:
        where = "log" if f.session_id == "-" else f.session_id
        at = "" if f.seq is None else f" seq {f.seq}"
        say(f"{where}{at}: {f.problem}: {f.detail}")
    for problem in trust.findings if trust else []:
        say(f"log: checkpoint: {problem}")
    for problem in removal.findings:
        say(f"log: removal: {problem}")
    if not findings and not problems:
        say(f"intact: {checked} session(s) verified")
    if trust is not None and trust.checked and not problems:
        sizes = ", ".join(map(str, trust.checked[-3:]))
        if checkpoint_file is not None:
            say(f"consistent with the checkpoint signed by the key (size {sizes})")
        else:
            how = "signatures checked with the key" if vkey else "without --key"
            say(
                f"{len(trust.checked)} stored checkpoint(s) match the log (latest sizes {sizes}; "
                f"{how}): stored checkpoints are only as trustworthy as the database; check a "
                "copy kept elsewhere with --checkpoint FILE --key VKEY"
            )
    if removal.unchecked:
        say(
            f"{removal.unchecked} signed removal(s) match their records, signatures not "
            "checked: pass --key VKEY (`blackbox keys show`) to check them"
        )
    if removal.legacy:
        say(
            f"{removal.legacy} removal(s) were made before removals were signed: bound to "
            "their retention records only"
        )
    # Every removal is said, not only the suspect ones: a writer who forged a retention record
    # can remove whole sessions the log then explains, and only a reader of this line sees it.
    for r in removed:
        say(
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
