"""Commands of the tool-drift area: `blackbox tools` (inventory, history, changes) and
`blackbox tools approve` (an approval the policy gate's pinning honours)."""

from __future__ import annotations

import click

from blackbox import config
from blackbox.cli.options import (
    NAME_GLOB_HELP,
    Moment,
    format_option,
    moment_ns,
    open_configured_store,
    store_option,
)
from blackbox.cli.output import page, pager_option, refresh_progress, render, wrap


@click.group(invoke_without_command=True)
@click.option(
    "--server", metavar="GLOB", help=f"Only servers whose recorded name matches ({NAME_GLOB_HELP})."
)
@click.option("--since", type=Moment(), help="Seen from this time: 7d, 12h or an ISO date.")
@click.option(
    "--history", "history", metavar="TOOL", help="Each definition of TOOL, with sessions."
)
@click.option("--changes", is_flag=True, help="The recorded changes, with their diffs.")
@click.option("--full", is_flag=True, help="Whole hashes (the table shows 12 characters).")
@store_option
@format_option(("table", "json", "jsonl", "csv", "markdown"))
@pager_option
@click.pass_context
def tools(
    ctx: click.Context,
    server: str | None,
    since: str | None,
    history: str | None,
    changes: bool,
    full: bool,
    store_url: str | None,
    fmt: str,
    no_pager: bool = False,
) -> None:
    """Every tool, prompt and resource template each server offered: definition hash, first and
    last seen, sessions, calls and errors under that definition, and suspicious-definition
    flags (a heuristic). A server is its recorded name plus its command or URL. --changes
    prints each diff whole, wrapped to the terminal and paged when long (--no-pager: never).

    \b
    Example:
      blackbox tools --server weather
      blackbox tools --history get_forecast
      blackbox tools --changes --since 7d --format json
      blackbox tools approve weather get_forecast
    """
    if ctx.invoked_subcommand is not None:
        return
    from blackbox.analytics import ToolFilters, run_tools, shorten

    mode = "changes" if changes else "history" if history else "inventory"
    filters = ToolFilters(server=server, since_ns=moment_ns(since) if since else None, tool=history)
    store = open_configured_store(store_url)
    rows, columns = run_tools(store, config.analytics_dir(), mode, filters, refresh_progress)
    if fmt == "table":
        rows = rows if full else shorten(rows)
        if mode == "changes":
            columns = [c for c in columns if c not in ("command", "diff")]
    text = render(rows, fmt, columns)
    if fmt == "table" and mode == "changes":
        for row in rows:
            text += f"\n\n{row['time']} {row['server']} {row['name']} {row['change']}:"
            text += "\n" + (row["diff"] or "(no diff)")
        text = wrap(text)
    page(text, no_pager)


@tools.command()
@click.argument("server")
@click.argument("tool")
@click.argument("hash_", metavar="[HASH]", required=False)
@click.option("--reason", help="Why (kept in the decision record).")
@store_option
def approve(
    server: str, tool: str, hash_: str | None, reason: str | None, store_url: str | None
) -> None:
    """Approve a tool's definition for the policy gate's pinning: without HASH, the definition
    last recorded for SERVER's TOOL. The approval is a `decision` record in the log.

    \b
    Example:
      blackbox tools approve weather get_forecast
      blackbox tools approve weather get_forecast 3f9a1c2b7d4e --reason "reviewed v2"
    """
    from blackbox.recorder.gate import approve as record_approval

    store = open_configured_store(store_url, create=True)
    approved = record_approval(store, server, tool, hash_, reason)
    click.echo(f"approved {server} {tool} {approved}")


COMMANDS = [tools]
