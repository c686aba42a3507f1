"""`blackbox attach` and `blackbox detach`: the command line over blackbox/hosts/attach.py.

The library returns a report; this module finds the wrapper executable and renders the report.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from blackbox import config as bbconfig
from blackbox.hosts import attach as lib
from blackbox.hosts import attached_configs
from blackbox.recorder import BlackboxError
from blackbox.recorder.capture import REFUSED_DIR, refused_files


def blackbox_executable() -> str:
    """The absolute path of the `blackbox` that is running, so a host finds it without PATH.

    Symlinks are kept as they are (a pipx or package-manager link survives upgrades better than
    what it points to today)."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name.startswith("blackbox") and argv0.is_file():
        return os.path.abspath(argv0)
    # Not started as the console script (tests, `python -c`): the one installed beside Python.
    sibling = Path(sys.executable).with_name("blackbox")
    if sibling.is_file():
        return str(sibling)
    raise lib.AttachError(
        "cannot find the blackbox executable to write into the config; run attach as `blackbox`"
    )


def pinned_store(flag: str | None) -> str:
    """The store written into the config: the flag, else this shell's store, spelled so that it
    means the same from any working directory (an absolute SQLite path)."""
    url = bbconfig.store_url(flag)
    if url.startswith("sqlite:"):
        from blackbox.recorder.store import public_url

        return public_url(url)
    return url


def public_or_raw(url: str) -> str:
    from blackbox.recorder.store import public_url

    try:
        return public_url(url)
    except BlackboxError:
        return url


def _echo_changes(report: lib.Report) -> None:
    width = max((len(c.key) for c in report.changes), default=0)
    for change in report.changes:
        note = "" if change.exact or change.action != "restored" else " (rebuilt, not byte-exact)"
        click.echo(f"  {change.action:<9} {change.key:<{width}}  {change.detail}{note}")


@click.command("attach")
@click.argument("config", type=click.Path(dir_okay=True, path_type=str))
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    default=None,
    help="Store the servers record into (default: the store of this shell, BLACKBOX_STORE or "
    "the one in the data directory). Written into the config with the data directory, because "
    "hosts start servers with a minimal environment.",
)
@click.option("--dry-run", is_flag=True, help="Print the diff; write nothing.")
@click.option(
    "--proxy-port-base",
    type=int,
    default=lib.DEFAULT_PORT_BASE,
    show_default=True,
    help="HTTP servers get a local proxy port in [N, N+1000), stable per server key.",
)
@click.option(
    "--http",
    type=click.Choice(["bridge", "proxy"]),
    default="bridge",
    show_default=True,
    help="bridge: run each Streamable HTTP server through a stdio `blackbox bridge` the host "
    "starts itself (works at once); proxy: point HTTP entries at a local `blackbox proxy` you "
    "run (printed), for legacy HTTP+SSE servers.",
)
@click.option(
    "--install-service",
    "service_dir",
    metavar="DIR",
    default=None,
    help="Write a systemd user unit per HTTP proxy into DIR (e.g. ~/.config/systemd/user).",
)
@click.option(
    "--otel",
    is_flag=True,
    help="Record with --otel: calls also go out as OpenTelemetry spans (OTEL_* variables).",
)
def attach_command(
    config: str,
    store_url: str | None,
    dry_run: bool,
    proxy_port_base: int,
    http: str,
    service_dir: str | None,
    otel: bool,
) -> None:
    """Record every server of an MCP host config.

    Rewrites CONFIG (Claude Desktop claude_desktop_config.json, Claude Code .mcp.json, Cursor
    mcp.json, VS Code .vscode/mcp.json) so each stdio server runs under
    `blackbox record --name KEY -- COMMAND ARGS...`, and each Streamable HTTP server becomes a
    stdio entry running `blackbox bridge URL` (headers passed on), which the host starts like any
    other: nothing else to run. A legacy HTTP+SSE server is skipped, saying why, unless
    --http proxy points HTTP entries at a local `blackbox proxy` you run. Only those entries
    change: env,
    cwd, comments, unknown keys and indentation stay as they were. Attaching twice changes
    nothing; a backup of CONFIG is written into the data directory first (`blackbox where` lists
    the attached configs); the originals are kept in CONFIG.blackbox-attach.json for
    `blackbox detach`. The store and the data directory are written into each wrapped command,
    so recordings land where `blackbox sessions` in this shell looks. Restart the host
    afterwards.

    \b
    Example:
      blackbox attach ~/.config/Claude/claude_desktop_config.json --dry-run
      blackbox attach .mcp.json --store postgresql://me@db/blackbox
    """
    pinned = pinned_store(store_url)
    home = str(bbconfig.data_dir().resolve())
    report = lib.attach(
        config,
        wrapper=blackbox_executable(),
        store_url=pinned,
        dry_run=dry_run,
        port_base=proxy_port_base,
        service_dir=service_dir,
        home=home,
        http=http,
        otel=otel,
    )
    if dry_run:
        click.echo(report.diff(), nl=False)
    verb = "would change" if dry_run else "changed" if report.written else "no change to"
    click.echo(f"{report.format} config {report.path}: {verb} the file")
    _echo_changes(report)
    if report.backup:
        click.echo(f"backup: {report.backup}")
    proxies = [c for c in report.changes if c.proxy_argv]
    if proxies and service_dir:
        click.echo("proxy service units:")
        for change in proxies:
            unit = change.unit_path or ""
            state = (
                "would be written"
                if dry_run
                else "written"
                if unit in report.units
                else "already installed"
            )
            click.echo(f"  {unit} ({state})")
        names = " ".join(Path(c.unit_path or "").name for c in proxies)
        click.echo(
            f"start them: systemctl --user daemon-reload && systemctl --user enable --now {names}"
        )
    elif proxies:
        click.echo("run a recording proxy for each HTTP server (or use --install-service DIR):")
        for change in proxies:
            click.echo(f"  {shlex.join(change.proxy_argv or [])}")
    click.echo(f"recordings go to: {public_or_raw(pinned)} (journals in {home})")
    if report.written:
        click.echo("restart the host so it starts the servers through blackbox")
    for name in (bbconfig.STORE_ENV, bbconfig.HOME_ENV):
        if os.environ.get(name) and not (name == bbconfig.STORE_ENV and store_url):
            # A host started from the desktop does not see this shell's variables: say that the
            # value was written into the config instead.
            click.echo(
                f"note: {name} is set here, but hosts started outside this shell may not see "
                "it; it was written into the wrapped commands instead",
                err=True,
            )


@click.command("detach")
@click.argument("config", type=click.Path(dir_okay=True, path_type=str))
@click.option("--dry-run", is_flag=True, help="Print the diff; write nothing.")
def detach_command(config: str, dry_run: bool) -> None:
    """Undo `blackbox attach`: restore the original server entries of CONFIG.

    Entries are restored byte for byte from CONFIG.blackbox-attach.json when they are as attach
    left them; a stdio entry the host has rewritten since is rebuilt from its wrapped command
    line. The backup file is left in place.

    \b
    Example:
      blackbox detach ~/.config/Claude/claude_desktop_config.json
    """
    report = lib.detach(config, dry_run=dry_run)
    if dry_run:
        click.echo(report.diff(), nl=False)
    verb = "would change" if dry_run else "changed" if report.written else "no change to"
    click.echo(f"{report.format} config {report.path}: {verb} the file")
    if not report.changes:
        click.echo("  nothing is attached")
    _echo_changes(report)
    for unit in report.units:
        name = Path(unit).name
        click.echo(
            f"proxy service left installed: systemctl --user disable --now {name} && rm {unit}"
        )
    if report.written:
        click.echo("restart the host so it starts the servers directly again")


def journals_waiting(directory: Path) -> int:
    """How many taps' journals are in `directory` (records not yet in a store, or a tap running)."""
    from blackbox.recorder.capture import parse_segment_name

    if not directory.is_dir():
        return 0
    taps = {parsed[0] for p in directory.iterdir() if (parsed := parse_segment_name(p))}
    return len(taps)


@click.command("where")
@click.option("--store", "store_url", metavar="URL", default=None, help="Store URL to show.")
def where_command(store_url: str | None) -> None:
    """Say where recordings go: the store, the data directory, journals waiting to be shipped,
    records no store would take (refused files), and the host configs attached from here.

    \b
    Example:
      blackbox where
      BLACKBOX_HOME=~/bb blackbox where
    """
    data = bbconfig.data_dir()
    url = bbconfig.store_url(store_url)
    source = (
        "--store"
        if store_url
        else bbconfig.STORE_ENV
        if os.environ.get(bbconfig.STORE_ENV)
        else "default"
    )
    click.echo(f"store:     {public_or_raw(url)} ({source})")
    home_source = bbconfig.HOME_ENV if os.environ.get(bbconfig.HOME_ENV) else "default"
    click.echo(f"data dir:  {data} ({home_source})")
    waiting = journals_waiting(bbconfig.journal_dir())
    hint = " (`blackbox ship` stores those of stopped taps)" if waiting else ""
    click.echo(f"journals:  {waiting} waiting in {bbconfig.journal_dir()}{hint}")
    refused = refused_files(bbconfig.journal_dir() / REFUSED_DIR)
    if refused:
        click.echo(
            f"refused:   {len(refused)} file(s) of records no store would take, in "
            f"{refused[0].parent} (JSON lines, raw bytes in base64)"
        )
    configs = attached_configs(data)
    if not configs:
        click.echo("attached:  none (blackbox attach CONFIG)")
    for n, (path, host, attached) in enumerate(configs):
        label = "attached:  " if n == 0 else "           "
        state = "" if attached else " (detached)"
        click.echo(f"{label}{path} [{host}]{state}")


COMMANDS = [attach_command, detach_command, where_command]
