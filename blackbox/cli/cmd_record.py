"""Commands of the record area: `blackbox record` (the stdio tap), `blackbox bridge` (an HTTP
server through the stdio tap) and `blackbox ship`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from blackbox import config
from blackbox.cli.lifecycle_options import idle_after_option, idle_after_seconds
from blackbox.cli.options import (
    DURATION_HELP,
    Duration,
    home_option,
    policy_option,
    rules_file_option,
    store_option,
)
from blackbox.cli.otel_options import otel_options, start_live
from blackbox.cli.output import ProgressBar, progress_lines
from blackbox.recorder.capture import (
    DEFAULT_MAX_FRAME,
    FINAL_SHIP_SECONDS,
    REDACT_BUDGET_SECONDS,
    TapConfig,
    run_tap,
    ship_leftovers,
)
from blackbox.recorder.store import open_store


def _notice(message: str) -> None:
    # The tap's own diagnostics go to stderr only: stdout belongs to the protocol.
    sys.stderr.write(f"blackbox: {message}\n")
    sys.stderr.flush()


JOURNAL_REDACT_HELP = (
    "Redact frames with these rules before they are journalled (forwarded unchanged)."
)


def _gates(policy_file: Path | None, redact_file: Path | None) -> tuple[Any, Any]:
    """The live policy and the redactor a tap gates frames with (None for what is not asked)."""
    policy = redactor = None
    if policy_file is not None:
        from blackbox.recorder.gate import LivePolicy

        policy = LivePolicy(policy_file, on_notice=_notice)
    if redact_file is not None:
        from blackbox.recorder.privacy import Redactor

        redactor = Redactor.load(redact_file)
    return policy, redactor


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@store_option
@home_option
@click.option("--name", default=None, help="A name for the session (e.g. the host's server key).")
@policy_option
@idle_after_option
@rules_file_option(JOURNAL_REDACT_HELP)
@click.option(
    "--redact-budget",
    "redact_budget_s",
    type=Duration(),
    default=f"{REDACT_BUDGET_SECONDS * 1000:g}ms",
    show_default=True,
    metavar="DURATION",
    help="With --redact: the most redaction may take per frame; a frame past "
    "it is forwarded and stored withheld (keyed fingerprint and length), with a "
    "redaction_over_budget fault.",
)
@click.option(
    "--max-frame",
    type=click.IntRange(min=1024),
    default=DEFAULT_MAX_FRAME,
    show_default=True,
    metavar="BYTES",
    help="Frames above this size are forwarded intact but stored as a prefix, length and sha256.",
)
@click.option(
    "--quarantine-noise",
    is_flag=True,
    help="Divert non-JSON lines the server writes to stdout to stderr (still recorded as faults).",
)
@click.option(
    "--final-ship-seconds",
    type=Duration(allow_zero=True),
    default=FINAL_SHIP_SECONDS,
    show_default=True,
    metavar="DURATION",
    help="How long the tap ships at exit before a detached shipper takes over the rest "
    f"({DURATION_HELP}).",
)
@otel_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(
    store_url: str | None,
    name: str | None,
    policy_file: Path | None,
    idle_after: str | None,
    redact_file: Path | None,
    redact_budget_s: float,
    max_frame: int,
    quarantine_noise: bool,
    final_ship_seconds: float,
    otel: bool,
    otel_endpoint: str | None,
    otel_protocol: str | None,
    command: tuple[str, ...],
) -> None:
    """Run an MCP stdio server under the recorder: every frame is relayed byte for byte and
    recorded, with stderr, faults and how the session ended. Exits with the server's status.

    Put it in front of the server command in the host's configuration (or let `blackbox attach`
    do it). Records go to a local journal first and reach the store in the background, so a slow
    or unreachable store never stalls the host; `blackbox ship` moves what a killed tap left.

    \b
    Example:
      blackbox record --name time -- python -m mcp_server_time
      blackbox record --store postgresql://me@db/blackbox -- npx -y my-server
    """
    idle_seconds = idle_after_seconds(idle_after)
    policy, redactor = _gates(policy_file, redact_file)
    from blackbox.recorder.store import normalise_url

    url = config.store_url(store_url)
    normalise_url(url)  # a malformed URL is one clear error now, not a retry loop later
    tap = TapConfig(
        command=list(command),
        journal_dir=config.journal_dir(),
        store_factory=lambda: open_store(url),
        store_url=url,
        on_notice=_notice,
        name=name,
        cwd=os.getcwd(),
        env_names=sorted(os.environ),
        max_frame=max_frame,
        quarantine_noise=quarantine_noise,
        policy=policy,
        redactor=redactor,
        redact_budget_s=redact_budget_s,
        final_ship_seconds=final_ship_seconds,
        idle_after_s=idle_seconds,
    )
    # The follower ends its work when this process ends (its stdin closes), however it ends.
    live = start_live(url, otel_endpoint, otel_protocol) if otel else None
    result = run_tap(tap)
    if live is not None:
        live.close()
    sys.exit(result.exit_status)


@click.command()
@store_option
def ship(store_url: str | None) -> None:
    """Ship journals left behind by taps that were killed, and close their sessions as
    'recovered'. Journals of taps still running are left alone.

    A journal goes only to the store it was written for: journals of other stores are listed
    with their store (its URL without credentials, and fingerprint), to ship with `--store`.
    Journals from before journals named their store are shipped into the store named here.
    A record the store refuses does not stop the rest: it is stored as a `store_refused` fault
    holding its bytes, or kept in a refused file that `blackbox where` names (exit 0 all the
    same, each degradation said on a `degraded:` line).

    \b
    Example:
      blackbox ship
      blackbox ship --store postgresql://me@db/blackbox
    """
    store = open_store(config.store_url(store_url))  # a writer: creates the store if need be
    directory = config.journal_dir()
    try:
        with ProgressBar("shipping journals") as bar:
            notice = progress_lines(bar, _notice)
            report = ship_leftovers(directory, store, notice, unmarked=True, on_step=bar)
    finally:
        store.close()
    live = f"; {report.live} journal(s) of running taps left alone" if report.live else ""
    click.echo(
        f"shipped {report.records} records from {report.journals} journal(s) into {store.url}; "
        f"{len(report.recovered)} session(s) closed as recovered{live}"
    )
    for line in report.degraded:
        click.echo(f"degraded: {line}")
    for tap_id, mark in report.others:
        assert mark is not None  # unmarked journals are shipped here
        click.echo(
            f"journal {tap_id} is for another store, {mark.url} (fingerprint {mark.short}): "
            f"ship it with `blackbox ship --store {mark.url}`"
        )


@click.command()
@click.argument("url")
@store_option
@home_option
@click.option("--name", default=None, help="A name for the session (e.g. the host's server key).")
@click.option(
    "--transport",
    type=click.Choice(["auto", "streamable-http", "sse"]),
    default="auto",
    show_default=True,
    help="The server's HTTP era: Streamable HTTP, legacy HTTP+SSE (GET the event stream, POST "
    "to the endpoint it names), or auto: Streamable HTTP first, the legacy stream on 400/404/405.",
)
@policy_option
@rules_file_option(JOURNAL_REDACT_HELP)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="Send this header to the server with every request (repeatable). Every local user "
    "reads a command line with `ps`: for credentials set BLACKBOX_BRIDGE_HEADER_1, _2, ... "
    "to 'NAME: VALUE' instead (what `attach` does).",
)
@click.option(
    "--final-ship-seconds",
    type=Duration(allow_zero=True),
    default=FINAL_SHIP_SECONDS,
    show_default=True,
    metavar="DURATION",
    help="How long the bridge ships at exit before a detached shipper takes over the rest "
    f"({DURATION_HELP}).",
)
def bridge(
    url: str,
    store_url: str | None,
    name: str | None,
    transport: str,
    policy_file: Path | None,
    redact_file: Path | None,
    headers: tuple[str, ...],
    final_ship_seconds: float,
) -> None:
    """Record an HTTP server as a stdio one: speak stdio to the host and HTTP to URL, in either
    era (Streamable HTTP, or legacy HTTP+SSE with --transport sse or found by auto).

    What `blackbox attach` puts in place of an HTTP entry, so the host starts it like any stdio
    server and nothing else has to run. Every message is recorded as `blackbox record` records
    a stdio server; headers (credentials too) are passed to the server and never recorded.
    Headers come from the environment, BLACKBOX_BRIDGE_HEADER_1, _2, ... each 'NAME: VALUE'
    (attach puts an entry's headers there), and from --header, which any local user can read
    with `ps`: keep credentials out of it.

    \b
    Example:
      BLACKBOX_BRIDGE_HEADER_1='Authorization: Bearer T' \\
        blackbox bridge https://mcp.example.com/mcp --name docs
      blackbox bridge --transport sse http://127.0.0.1:3001/sse --policy policy.toml
    """
    import json

    from blackbox.recorder.capture import HEADERS_ENV, parse_header
    from blackbox.recorder.store import normalise_url

    if not url.startswith(("http://", "https://")):
        raise click.ClickException(f"{url!r} is not an http(s) URL")
    from blackbox.hosts import env_headers

    try:
        pairs = dict(parse_header(h) for h in [*env_headers(dict(os.environ)), *headers])
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    os.environ[HEADERS_ENV] = json.dumps(pairs)  # the relay's environment: never recorded
    policy, redactor = _gates(policy_file, redact_file)
    store = config.store_url(store_url)
    normalise_url(store)
    tap = TapConfig(
        command=[sys.executable, "-m", "blackbox.recorder.capture.taps.bridge", url, transport],
        journal_dir=config.journal_dir(),
        store_factory=lambda: open_store(store),
        store_url=store,
        on_notice=_notice,
        name=name,
        cwd=os.getcwd(),
        env_names=sorted(os.environ),
        final_ship_seconds=final_ship_seconds,
        policy=policy,
        redactor=redactor,
    )
    sys.exit(run_tap(tap).exit_status)


COMMANDS = [record, ship, bridge]
