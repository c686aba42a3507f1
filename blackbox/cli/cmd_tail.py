"""`blackbox tail`: watch records as they are stored (see `blackbox.cli.tail`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from blackbox import config
from blackbox.cli.options import NAME_GLOB_HELP, open_configured_store, store_option
from blackbox.cli.output import colour, terminal_width
from blackbox.cli.redaction_options import configured_redactor, redaction_options
from blackbox.cli.tail import TailFilter, run_tail


@click.command()
@click.argument("session", required=False)
@click.option("--all", "all_sessions", is_flag=True, help="Every session (the default).")
@click.option("-f", "--follow", "follow_on", is_flag=True, help="Keep printing new records.")
@click.option(
    "-n",
    "--lines",
    "history",
    type=click.IntRange(min=0),
    metavar="N",
    default=20,
    show_default=True,
    help="Lines of history to print first, counted after the filters (a call and its answer "
    "on one line are one).",
)
@click.option(
    "--method",
    default=None,
    metavar="GLOB",
    help=f"Only these JSON-RPC methods (tools/call, 'resources/*'; {NAME_GLOB_HELP}).",
)
@click.option(
    "--tool", default=None, metavar="GLOB", help=f"Only calls of these tools ({NAME_GLOB_HELP})."
)
@click.option("--errors", is_flag=True, help="Only error responses, isError results and faults.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "jsonl"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@redaction_options("payloads")
@store_option
def tail(
    session: str | None,
    all_sessions: bool,
    follow_on: bool,
    history: int,
    method: str | None,
    tool: str | None,
    errors: bool,
    fmt: str,
    store_url: str | None,
    redact_rules: Path | None = None,
    no_redact: bool = False,
) -> None:
    """Print the newest records, a request and its response on one line with the latency.

    SESSION is a handle from `blackbox sessions`, a full id, a unique prefix, or 'last';
    without it (or with --all) every session is shown, including those that start while
    following. Each line starts with the time, the session's handle and name, and the seq.
    With -f, records of running taps show within a second of crossing the wire (their
    journals are read too). Lines fit the terminal (COLUMNS); colour only on a terminal,
    never with NO_COLOR set. Secrets are redacted as `show` and `export` redact them
    (--redact RULES, or --no-redact for the bytes as stored).

    \b
    Example:
      blackbox tail -f
      blackbox tail last -n 100 --errors
      blackbox tail -f --tool get_current_time --format jsonl | jq .latency_ms
    """
    if session and all_sessions:
        raise click.UsageError("give a SESSION or --all, not both")
    store = open_configured_store(store_url)
    session_id = store.resolve(session) if session else None
    filt = TailFilter(method=method, tool=tool, errors=errors)
    redactor = configured_redactor(redact_rules, no_redact, store_url)
    try:
        run_tail(
            store,
            config.journal_dir(),
            session_id,
            follow_on,
            history,
            filt,
            fmt,
            lambda line: click.echo(line, color=colour()),
            width=terminal_width(),
            redact=redactor.redact_record if redactor is not None else None,
        )
    except KeyboardInterrupt:
        return
    except BrokenPipeError:  # `blackbox tail -f | head`: the reader left, so do we, quietly
        sys.stderr.close()


COMMANDS = [tail]
