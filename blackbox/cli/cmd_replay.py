"""Commands of the replay area: `blackbox replay` and `blackbox serve`."""

from __future__ import annotations

import sys
from typing import Any

import click

from blackbox.cli.options import DURATION_HELP, Duration, open_configured_store, store_option
from blackbox.cli.output import page, pager_option, wrap
from blackbox.cli.redaction_options import configured_redactor
from blackbox.cli.replay_safety import safety_guard
from blackbox.cli.suite_options import replay_suite_cli, suite_options, wants_suite
from blackbox.replay import (
    ReplayOptions,
    parse_injection,
    render_json,
    render_text,
    replay_session,
    serve_session,
)


@click.command()
@click.argument("sessions", metavar="SESSION...", nargs=-1)
@click.option("--against", metavar="CMD", help="Replay against this command (a new version).")
@click.option("--url", metavar="URL", help="Replay against a Streamable HTTP endpoint.")
@click.option(
    "--timing",
    type=click.Choice(["none", "original"]),
    default="none",
    show_default=True,
    help="none: as fast as causal order allows; original: keep the recorded gaps.",
)
@click.option(
    "--speed",
    type=float,
    default=1.0,
    show_default=True,
    help="Scale recorded gaps (2 = twice as fast; implies --timing original).",
)
@click.option(
    "--ignore",
    "ignore",
    multiple=True,
    metavar="JSONPATH",
    help="Ignore differences at this path (repeatable), e.g. '$..datetime'.",
)
@click.option("--learn", is_flag=True, help="Run twice first and mask what differs between runs.")
@click.option(
    "--inject",
    "inject",
    multiple=True,
    metavar="SPEC",
    help="Inject a fault: delay@METHOD:MS, delay@STEP:MS, drop@STEP, corrupt@STEP, "
    "close-stdin@STEP, cut@STEP (repeatable).",
)
@click.option(
    "--expect-fault", is_flag=True, help="Fail (exit 1) unless recorded faults reproduce."
)
@click.option(
    "--timeout",
    "timeout_s",
    type=Duration(),
    default="10s",
    show_default=True,
    help=f"How long to wait for a response before calling it missing ({DURATION_HELP}).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "github"]),
    default="table",
    show_default=True,
    help="Report format (github: Actions annotations, for suites).",
)
@click.option(
    "--allow-writes", is_flag=True, help="Send calls that may change something without asking."
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Send and compare only read-only calls; skip the rest (see docs/replay.md).",
)
@suite_options
@store_option
@pager_option
def replay(
    sessions: tuple[str, ...],
    against: str | None,
    url: str | None,
    timing: str,
    speed: float,
    ignore: tuple[str, ...],
    learn: bool,
    inject: tuple[str, ...],
    expect_fault: bool,
    timeout_s: float,
    fmt: str,
    allow_writes: bool,
    read_only: bool,
    store_url: str | None,
    no_pager: bool = False,
    **suite: Any,  # suite_options' values, each of its own type
) -> None:
    """Re-drive a recorded session against a server and explain every divergence.

    Sends the client's frames as recorded, in causal order, answers the server's own requests
    from the recording, compares each response semantically (volatile ids masked) and says
    whether recorded faults reproduce. The replay is stored as a new session (replay_of).
    Exit status: 0 equivalent, 1 diverged (or a fault not reproduced under --expect-fault),
    2 could not run.

    Calls to tools the recorded tools/list did not mark read-only may change something on
    the server (a file written again): they are listed first, then a terminal is asked about
    each ("n" skips that call and the replay goes on); elsewhere the replay needs
    --allow-writes, or --read-only to skip them. A skipped call is not compared: its recorded
    answer stands in, and the report counts it as skipped.

    SESSION is a handle from `blackbox sessions`, a full id, a unique prefix, or 'last'.
    Several sessions (or --name, --since, --suite) replay as a suite, --jobs at a time: one
    line per session and a summary, exit 1 if any diverged, --junit FILE for CI.

    A session's report shows every difference whole, wrapped to the terminal, through the
    pager when it is taller than a terminal (--no-pager: never; a pipe never is).

    \b
    Example:
      blackbox replay last --read-only
      blackbox replay 01a2 --against "python server_v2.py" --ignore '$..datetime'
      blackbox replay 01a2 --learn --format json
      blackbox replay 01a2 --expect-fault --inject cut@5
      blackbox replay --name 'smoke-*' --since 7d --jobs 4 --junit replay.xml
      blackbox replay 01a2 --era 2026-07-28
    """
    options = ReplayOptions(
        timing=timing,
        speed=speed,
        ignore=list(ignore),
        learn=learn,
        injections=[parse_injection(spec) for spec in inject],
        expect_fault=expect_fault,
        response_timeout_s=timeout_s,
        era=suite.pop("era", None),
    )
    if wants_suite(sessions, fmt, suite):
        replay_suite_cli(
            sessions,
            against=against,
            url=url,
            options=options,
            fmt=fmt,
            store_url=store_url,
            # Sessions of a suite run in threads: nobody can be asked, so writes need a flag.
            guard=safety_guard(allow_writes, read_only, interactive=False),
            **suite,
        )
    redactor = configured_redactor(suite.pop("redact_rules"), suite.pop("no_redact"), store_url)
    store = open_configured_store(store_url)
    result = replay_session(
        store,
        sessions[0],
        against=against,
        url=url,
        options=options,
        progress=lambda msg: click.echo(msg, err=True),
        guard=safety_guard(allow_writes, read_only),
    )
    report = render_json(result) if fmt == "json" else render_text(result, whole=True)
    if redactor is not None:  # before wrapping, which could split a secret across lines
        report = redactor.redact_frame(report.encode()).decode("utf-8", "replace")
    page(report if fmt == "json" else wrap(report), no_pager)
    sys.exit(result.exit_code)


@click.command()
@click.argument("session")
@click.option("--strict-order", is_flag=True, help="Requests must come in the recorded order.")
@store_option
def serve(session: str, strict_order: bool, store_url: str | None) -> None:
    """Play a recorded session back as a stdio MCP server (a mock of the real one).

    Requests are matched to recorded ones on method and params (ids and _meta ignored) and
    answered with the recorded response; an unmatched request gets a JSON-RPC error naming the
    nearest recorded request and the difference. Usable as the --against of a replay.

    \b
    Example:
      blackbox serve last
      blackbox replay 01a2 --against "blackbox serve 01a2"
    """
    store = open_configured_store(store_url)
    sys.exit(serve_session(store, session, sys.stdin.buffer, sys.stdout.buffer, strict_order))


COMMANDS = [replay, serve]
