"""`blackbox attach` and `blackbox detach`: the command line over blackbox/attach.py.

The library returns a report; this module finds the wrapper executable and renders the report.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from blackbox import attach as lib
from blackbox import config as bbconfig


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
    help="Store the servers record into, written into the config (default: none written; each "
    "server then uses BLACKBOX_STORE or the default store of the host's environment).",
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
    service_dir: str | None,
    otel: bool,
) -> None:
    """Record every server of an MCP host config.

    Rewrites CONFIG (Claude Desktop claude_desktop_config.json, Claude Code .mcp.json, Cursor
    mcp.json, VS Code .vscode/mcp.json) so each stdio server runs under
    `blackbox record --name KEY -- COMMAND ARGS...`, and each HTTP server is pointed at a local
    `blackbox proxy` (the commands to start them are printed). Only those values change: env,
    cwd, comments, unknown keys and indentation stay as they were. Attaching twice changes
    nothing; a backup CONFIG.blackbox-backup is written first; the originals are kept in
    CONFIG.blackbox-attach.json for `blackbox detach`. Restart the host afterwards.

    \b
    Example:
      blackbox attach ~/.config/Claude/claude_desktop_config.json --dry-run
      blackbox attach .mcp.json --store postgresql://me@db/blackbox
    """
    report = lib.attach(
        config,
        wrapper=blackbox_executable(),
        store_url=store_url,
        dry_run=dry_run,
        port_base=proxy_port_base,
        service_dir=service_dir,
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
    if report.written:
        click.echo("restart the host so it starts the servers through blackbox")
    if store_url is None and bbconfig.store_url(None) != bbconfig.default_store_url():
        # BLACKBOX_STORE is set in this shell; a host started from the desktop may not see it.
        click.echo(
            "note: BLACKBOX_STORE is set here, but hosts started outside this shell may not "
            "see it; pass --store URL to write the store into the config",
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


COMMANDS = [attach_command, detach_command]
