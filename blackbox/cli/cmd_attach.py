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
from blackbox.cli.options import rules_file_option
from blackbox.hosts import attach as lib
from blackbox.hosts import attached_configs
from blackbox.recorder import BlackboxError
from blackbox.recorder.capture import REFUSED_DIR, refused_files


def blackbox_executable() -> str | None:
    """The `blackbox` that is running, which the launcher of a user config tries first (it is
    never written into a config); None when there is none to name."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name.startswith("blackbox") and argv0.is_file():
        return os.path.abspath(argv0)
    # Not started as the console script (tests, `python -c`): the one installed beside Python.
    sibling = Path(sys.executable).with_name("blackbox")
    return str(sibling) if sibling.is_file() else None


def absolute_store(url: str) -> str:
    """A store URL spelled so that it means the same from any working directory (an absolute
    SQLite path)."""
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


def check_rules(policy: Path | None, redact: Path | None) -> None:
    """Load the policy and the redaction rules now, so a mistake is one error at attach rather
    than a server that will not start in the host."""
    if policy is not None:
        from blackbox.recorder.gate import Policy

        Policy.load(policy)
    if redact is not None:
        from blackbox.recorder.privacy import Redactor

        Redactor.load(redact)


def store_source(flag: str | None) -> str:
    """Where the store of this shell comes from, as `where` and `attach` say it."""
    if flag:
        return "--store"
    if os.environ.get(bbconfig.STORE_ENV):
        return bbconfig.STORE_ENV
    if bbconfig.configured_store():
        return str(bbconfig.user_config_file())
    return "default"


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
    help="Make URL this user's store (saved in config.toml in the data directory, where the "
    "servers a host starts find it). Never written into CONFIG.",
)
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Gate every attached server's tools/call requests with this policy file (TOML).",
)
@rules_file_option(
    "Redact every attached server's frames with these rules before they are recorded.",
    exists=True,
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
    help="bridge: run each HTTP server (Streamable HTTP or legacy HTTP+SSE) through a stdio "
    "`blackbox bridge` the host starts itself (works at once); proxy: point HTTP entries at a "
    "local `blackbox proxy` you run (printed).",
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
    policy_file: Path | None,
    redact_file: Path | None,
    dry_run: bool,
    proxy_port_base: int,
    http: str,
    service_dir: str | None,
    otel: bool,
) -> None:
    """Record every server of an MCP host config.

    Rewrites CONFIG (Claude Desktop claude_desktop_config.json, Claude Code .mcp.json, Cursor
    mcp.json, VS Code .vscode/mcp.json, Windsurf mcp_config.json) so each stdio server runs
    under `blackbox record --name KEY -- COMMAND ARGS...`, and each HTTP server (`url` or
    Windsurf's `serverUrl`; Streamable HTTP or legacy HTTP+SSE) becomes a stdio entry running
    `blackbox bridge URL`, which the host starts like any other: nothing else to run. Only those
    entries change: env, cwd, comments, unknown keys and indentation stay as they were.

    The config stays shareable: a project config (.mcp.json, .vscode/mcp.json, .cursor/mcp.json)
    runs plain `blackbox` from PATH, a user config a launcher in the data directory; no store
    and no path of this checkout are written. The store is the user's: --store saves it in the
    user configuration, else BLACKBOX_STORE or the default. --policy and --redact apply to every
    server. Attaching twice changes nothing; the backup and what `blackbox detach` needs are kept
    in the data directory (`blackbox where` lists the attached configs). Restart the host
    afterwards.

    \b
    Example:
      blackbox attach ~/.config/Claude/claude_desktop_config.json --dry-run
      blackbox attach .mcp.json --policy .blackbox/policy.toml
      blackbox attach .mcp.json --store postgresql://me@db/blackbox
    """
    check_rules(policy_file, redact_file)
    chosen = absolute_store(store_url) if store_url else None
    if chosen:
        from blackbox.recorder.store import normalise_url

        normalise_url(chosen)  # a malformed URL is one clear error, before anything is written
    options = lib.RecordOptions(policy=policy_file, redact=redact_file, otel=otel)
    report = lib.attach(
        config,
        installed=blackbox_executable(),
        options=options,
        dry_run=dry_run,
        port_base=proxy_port_base,
        service_dir=service_dir,
        http=http,
    )
    if chosen and not dry_run:
        saved = bbconfig.save_store(chosen)
        click.echo(f"store: {public_or_raw(chosen)} saved as this user's store in {saved}")
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
    home = bbconfig.data_dir()
    url = chosen or bbconfig.store_url(None)
    source = "--store" if chosen else store_source(None)
    click.echo(f"recordings go to: {public_or_raw(url)} ({source}; journals in {home})")
    if report.written:
        click.echo("restart the host so it starts the servers through blackbox")
    # A host started from the desktop does not see this shell's variables.
    if os.environ.get(bbconfig.STORE_ENV) and not chosen:
        click.echo(
            f"note: {bbconfig.STORE_ENV} is set here, but hosts started outside this shell may "
            "not see it; --store URL makes it this user's store",
            err=True,
        )
    if os.environ.get(bbconfig.HOME_ENV):
        click.echo(
            f"note: {bbconfig.HOME_ENV} is set here, but hosts started outside this shell may "
            "not see it; their servers then use the default data directory",
            err=True,
        )


@click.command("detach")
@click.argument("config", type=click.Path(dir_okay=True, path_type=str))
@click.option("--dry-run", is_flag=True, help="Print the diff; write nothing.")
def detach_command(config: str, dry_run: bool) -> None:
    """Undo `blackbox attach`: restore the original server entries of CONFIG.

    Entries are restored byte for byte from the attach state in the data directory (or the
    CONFIG.blackbox-attach.json an earlier version left beside CONFIG) when they are as attach
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
    click.echo(f"store:     {public_or_raw(url)} ({store_source(store_url)})")
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
