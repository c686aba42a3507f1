"""Commands of the compliance area: export, verify-export, retention apply, hold add|remove|list.

Each command parses its options, calls one library function (blackbox.recorder.compliance.export,
.verify_export, .retention) and renders the result; progress goes to stderr so stdout stays
machine-readable.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from blackbox import config
from blackbox.cli.options import (
    AGE_HELP,
    NAME_GLOB_HELP,
    Age,
    Moment,
    format_option,
    moment_ns,
    open_configured_store,
    span_seconds,
    store_option,
)
from blackbox.cli.output import ProgressBar, Throttled, render
from blackbox.cli.redaction_options import configured_redactor
from blackbox.cli.retention_commands import retention_schedule, retention_status_cmd
from blackbox.recorder.compliance import (
    DEFAULT_IDLE_NS,
    FORMATS,
    ExportProgress,
    Selection,
    add_hold,
    apply_retention,
    disclose,
    export_bundle,
    list_holds,
    remove_hold,
    verify_export,
)
from blackbox.recorder.trust import logproof, signing


def parse_age(text: str) -> int:
    """`90d`, `12h`, `30min`, `2w`, `6mo`, `1y`, `45s` -> nanoseconds."""
    return int(span_seconds(text, age=True) * 1_000_000_000)


@click.command("export")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="New or empty directory to write the bundle into.",
)
@click.option("--since", type=Moment(), help="Sessions started at/after: an age (30d) or a date.")
@click.option("--until", type=Moment(), help="Sessions started before: an age or a date.")
@click.option(
    "--session",
    "sessions",
    multiple=True,
    metavar="ID",
    help="Export this session (handle, id, unique prefix or 'last'); repeatable.",
)
@click.option(
    "--server",
    default=None,
    metavar="GLOB",
    help=f"Only sessions whose server name matches ({NAME_GLOB_HELP}).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="parquet",
    show_default=True,
    help="Format of the data files.",
)
@click.option(
    "--redact",
    "rules",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Redaction rules (TOML) instead of the built-in ones.",
)
@click.option("--no-redact", is_flag=True, help="Export raw payloads unredacted.")
@click.option(
    "--include-broken",
    is_flag=True,
    help="Export sessions that fail `blackbox verify` too, marked as broken in the manifest "
    "(verify-export then fails on them); without it such a session stops the export.",
)
@store_option
def export_cmd(
    out_dir: Path,
    since: str | None,
    until: str | None,
    sessions: tuple[str, ...],
    server: str | None,
    fmt: str,
    rules: Path | None,
    no_redact: bool,
    include_broken: bool,
    store_url: str | None,
) -> None:
    """Write a verifiable compliance bundle: records, sessions, decisions and manifest.json.

    Secrets are redacted with the built-in rules (bearer tokens, API keys, passwords, e-mail
    addresses) unless --redact RULES or --no-redact says otherwise. Fingerprints are HMACs
    keyed per store (a key file under keys/ in the data directory, never in the store or the
    bundle; or the rules file's key), so equal secrets match across exports of one store and a
    short secret cannot be found by hashing guesses. Check a bundle with `blackbox verify-export
    DIR`. Each session is checked as `blackbox verify` checks it first; one that fails stops
    the export unless --include-broken.

    \b
    Example:
      blackbox export --since 30d --out audit-2026-11/
      blackbox export --session last --format jsonl --out case-42/ --redact rules.toml
    """
    redactor = configured_redactor(rules, no_redact, store_url)
    store = open_configured_store(store_url)
    selection = Selection(
        since_ns=moment_ns(since) if since else None,
        until_ns=moment_ns(until) if until else None,
        session_ids=tuple(store.resolve(s) for s in sessions),
        server=server,
    )
    say = Throttled()
    bar = ProgressBar("exporting sessions")

    def progress(p: ExportProgress) -> None:
        if bar.enabled:  # a terminal: a bar; a log: a line a second
            bar(p.sessions_done, p.sessions_total)
            return
        say(
            f"exported {p.sessions_done}/{p.sessions_total} sessions, {p.records} records",
            final=p.sessions_done == p.sessions_total,
        )

    note = signing.note_for_export(store)
    with bar:
        result = export_bundle(
            store,
            out_dir,
            selection,
            fmt,
            redactor,
            progress,
            include_broken=include_broken,
            checkpoint_note=note,
        )
    counts = result.manifest["counts"]
    if result.broken:
        click.echo(
            f"warning: {len(result.broken)} session(s) fail the store's checks and are marked "
            f"broken; the bundle will not verify: {', '.join(result.broken)} "
            "(see `blackbox verify`)",
            err=True,
        )
    click.echo(
        f"wrote {out_dir}: {counts['sessions']} session(s), {counts['records']} records, "
        f"{counts['decisions']} decision(s), {counts['redacted_records']} redacted record(s); "
        f"manifest sha256 {result.manifest_sha256}"
    )
    if result.signed_by is not None:
        click.echo(f"manifest signed by {result.signed_by} (manifest.sig)")
    else:
        click.echo(
            "the manifest is not signed (no signing key is configured, or it is not the key of "
            "the bundle's checkpoint), so `verify-export --key` cannot check the bundle is "
            "complete (`blackbox keys init` makes a key)",
            err=True,
        )


@click.command("verify-export")
@click.argument("bundle", type=click.Path(path_type=Path, file_okay=False))
@format_option(("table", "json"))
@click.option("--key", "vkey", metavar="VKEY", default=None, help="The log's verifier key.")
@click.option(
    "--allow-unsigned-manifest",
    is_flag=True,
    help="With --key, accept a bundle whose manifest is not signed (exported without a key, or "
    "before manifests were signed): its completeness is then not checked.",
)
def verify_export_cmd(
    bundle: Path, fmt: str, vkey: str | None, allow_unsigned_manifest: bool
) -> None:
    """Check a bundle offline: file hashes, every session's hash chain, the inclusion proof
    of every record in the bundle's signed checkpoint, and its signed manifest.

    Exit 0 when everything holds, 1 with each finding (file_missing, file_hash_mismatch,
    modified, missing, reordered, truncated, not_included, checkpoint_refused,
    manifest_unsigned, manifest_signature_invalid, session_missing, record_missing,
    leaves_mismatch, ...) otherwise. Needs no store. With --key (`blackbox keys show` on the
    recording side) the checkpoint and the manifest must be signed by that key: the bundle's
    origin and its completeness (exactly the sessions, records and files its manifest lists)
    are checked, not only its integrity.

    \b
    Example:
      blackbox verify-export audit-2026-11/ --key "example.com/audit+1a2b3c4d+AU..."
      blackbox verify-export audit-2026-11/ --format json
    """
    if not bundle.is_dir():
        raise click.BadParameter(f"{bundle} is not a directory", param_hint="BUNDLE")
    verifier = logproof.read_verifier(vkey) if vkey else None
    say = Throttled()
    report = verify_export(
        bundle, lambda n: say(f"checked {n} records"), verifier, allow_unsigned_manifest
    )
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif report.ok:
        click.echo(
            f"intact: {report.files_checked} files, {report.sessions_checked} session(s), "
            f"{report.records_checked} records ({report.records_rehashed} re-hashed, "
            f"{report.records_attested} redacted, their chain hash attested; "
            f"{report.records_redacted_proven} of them proven from what they show by their "
            "leaf's commitment)"
        )
        if verifier is not None:
            click.echo(f"origin: every record is in the log signed by {verifier.name}")
        else:
            click.echo(
                "only the bundle's integrity was checked, not its origin: pass --key VKEY "
                "to check it comes from the log that key signs"
            )
        if report.completeness_checked and verifier is not None:
            click.echo(
                f"complete: the manifest signed by {verifier.name} lists exactly these "
                f"{report.sessions_checked} session(s), {report.records_checked} records and "
                f"{report.files_checked} files"
            )
        else:
            click.echo(
                "completeness was not checked against a signature: which sessions and records "
                "belong in the bundle is the unsigned manifest's word"
                + ("" if verifier is not None else " (pass --key VKEY)")
            )
    else:
        for finding in report.findings:
            click.echo(finding.message())
    sys.exit(0 if report.ok else 1)


@click.command("disclose")
@click.argument("session")
@click.argument("seq", type=click.IntRange(min=1))
@click.option(
    "--token",
    "tokens",
    type=click.IntRange(min=0),
    multiple=True,
    metavar="I",
    help="Disclose token I only (repeatable): its salt and bytes. Default: the whole record.",
)
@store_option
def disclose_cmd(session: str, seq: int, tokens: tuple[int, ...], store_url: str | None) -> None:
    """Print, as JSON, what a redacted export withheld from one record, for an auditor who may
    see it: a withheld token's salt and bytes (`--token I`, the index of its
    ["digest", ...] entry in the bundle row's `commitments`), or the whole record's salt and raw
    bytes. The auditor checks SHA256(salt || bytes) against the digest the bundle shows (or
    recomputes the record's chain hash and commitment): docs/trust.md, "Commitments". Only
    whoever can read the store can disclose; nothing else of the record is revealed by a
    token's disclosure.

    \b
    Example:
      blackbox disclose 01JQ 7 --token 5
      blackbox disclose last 12
    """
    store = open_configured_store(store_url)
    doc = disclose(store, store.resolve(session), seq, list(tokens))
    click.echo(json.dumps(doc, indent=2))


@click.group()
def retention() -> None:
    """Remove old sessions, after archiving them in a verified bundle."""


@retention.command("apply")
@click.option(
    "--older-than",
    "older_than",
    type=Age(),
    default=None,
    metavar="AGE",
    help=f"Remove sessions that ended longer ago than this ({AGE_HELP}; default: "
    "BLACKBOX_RETENTION, else 90d).",
)
@click.option(
    "--archive",
    "archive_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="New or empty directory for the archive bundle "
    "(default: archive/retention-<time> in the data directory).",
)
@click.option(
    "--archive-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Archive into a new retention-<time> directory under this one (default: "
    "BLACKBOX_ARCHIVE, else archive/ in the data directory); what scheduled runs use.",
)
@click.option("--dry-run", is_flag=True, help="Only say what would be sealed and removed.")
@click.option(
    "--idle",
    type=Age(),
    default="24h",
    show_default=True,
    metavar="AGE",
    help=f"An unsealed session with no record newer than this is sealed as abandoned ({AGE_HELP}).",
)
@click.option(
    "--archive-format",
    type=click.Choice(FORMATS),
    default="parquet",
    show_default=True,
    help="Format of the archive's data files.",
)
@store_option
@format_option(("table", "json"))
def retention_apply(
    older_than: str | None,
    archive_dir: Path | None,
    archive_root: Path | None,
    dry_run: bool,
    idle: str,
    archive_format: str,
    store_url: str | None,
    fmt: str,
) -> None:
    """Archive and remove sessions older than AGE; held sessions are never removed.

    Idle sessions that were never sealed (a crashed host) are first sealed as abandoned. The
    archive is verified before anything is removed, and the removal is itself recorded as a
    retention_applied event in a session named 'retention'.

    \b
    Example:
      blackbox retention apply --older-than 90d --dry-run
      blackbox retention apply --older-than 90d --archive /backups/blackbox-2026-12
    """
    older_than = config.retention(older_than)
    age = parse_age(older_than)
    idle_ns = parse_age(idle) if idle else DEFAULT_IDLE_NS
    if archive_dir is None and not dry_run:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        archive_dir = config.archive_dir(str(archive_root) if archive_root else None)
        archive_dir = archive_dir / f"retention-{stamp}"
    store = open_configured_store(store_url)
    throttled = Throttled()
    bar = ProgressBar("checking sessions")

    def say(message: str) -> None:
        # Each phase is worth a line; the per-session archive progress only once a second, or
        # on a terminal as a bar.
        if bar.enabled:
            if message.startswith("archived "):
                return
            bar.close()
        throttled(message, final=not message.startswith("archived "))

    with bar:
        result = apply_retention(
            store,
            age,
            archive_dir,
            dry_run=dry_run,
            idle_ns=idle_ns,
            archive_format=archive_format,
            progress=say,
            on_step=lambda phase, done, total: bar(done, total, phase),
        )
    if not dry_run:
        from blackbox.recorder.compliance import write_last_run

        write_last_run(config.data_dir(), result, older_than)
    doc = result.as_dict()
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    plan = result.plan
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {len(plan.remove)} session(s) that ended before {doc['cutoff']}"
        + ("" if dry_run else f" ({result.records_removed} records)")
    )
    for info in plan.remove:
        click.echo(f"  {info.session_id}  {info.name or ''}")
    if plan.abandoned:
        click.echo(
            f"{'would seal' if dry_run else 'sealed'} {len(plan.abandoned)} abandoned session(s)"
        )
    if plan.held:
        click.echo(f"kept {len(plan.held)} session(s) on legal hold")
    if plan.broken:
        click.echo(
            f"kept {len(plan.broken)} session(s) whose chain does not verify: "
            + ", ".join(plan.broken)
        )
    if result.archive is not None:
        click.echo(f"archive {result.archive} (manifest sha256 {result.archive_manifest_sha256})")
    if result.event_session:
        click.echo(f"recorded in session {result.event_session}")


@click.group()
def hold() -> None:
    """Legal holds: a held session is never removed by retention."""


@hold.command("add")
@click.argument("session")
@click.option("--reason", required=True, help="Why the session is held (case, ticket).")
@store_option
def hold_add(session: str, reason: str, store_url: str | None) -> None:
    """Put SESSION (a handle, id, unique prefix or 'last') on legal hold.

    \b
    Example:
      blackbox hold add 01a2 --reason "litigation 2026-114"
    """
    sid = add_hold(open_configured_store(store_url), session, reason)
    click.echo(f"held {sid}")


@hold.command("remove")
@click.argument("session")
@store_option
def hold_remove(session: str, store_url: str | None) -> None:
    """Release SESSION's legal hold.

    \b
    Example:
      blackbox hold remove 01a2
    """
    sid = remove_hold(open_configured_store(store_url), session)
    click.echo(f"released {sid}")


@hold.command("list")
@store_option
@format_option()
def hold_list(store_url: str | None, fmt: str) -> None:
    """List legal holds, oldest first.

    \b
    Example:
      blackbox hold list --format json
    """
    rows = list_holds(open_configured_store(store_url))
    click.echo(render(rows, fmt, ["session_id", "reason", "since"]))


retention.add_command(retention_schedule)
retention.add_command(retention_status_cmd)

COMMANDS = [export_cmd, verify_export_cmd, disclose_cmd, retention, hold]
