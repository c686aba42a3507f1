"""Replay suites on the command line: `blackbox replay SESSION... --jobs N --junit FILE` (the suite
form of `blackbox replay`, whose options are defined here and added to it by one decorator) and
`blackbox suite add|list|show` for suites saved in the store.
"""

from __future__ import annotations

import click

from blackbox.cli.options import open_configured_store, store_option
from blackbox.replay import list_suites, load_suite, save_suite


@click.group()
def suite() -> None:
    """Named sets of sessions to replay together (`blackbox replay --suite NAME`).

    \b
    Example:
      blackbox suite add smoke 01a2 01b7 last
      blackbox replay --suite smoke --against "python server_v2.py" --junit replay.xml
    """


@suite.command("add")
@click.argument("name")
@click.argument("sessions", nargs=-1, required=True)
@store_option
def suite_add(name: str, sessions: tuple[str, ...], store_url: str | None) -> None:
    """Save suite NAME as these sessions (saving a name again replaces it).

    \b
    Example:
      blackbox suite add smoke 01a2 01b7 last
    """
    store = open_configured_store(store_url)
    _sid, ids = save_suite(store, name, sessions)
    click.echo(f"suite {name}: {len(ids)} session(s)")


@suite.command("list")
@store_option
def suite_list(store_url: str | None) -> None:
    """List saved suites.

    \b
    Example:
      blackbox suite list
    """
    store = open_configured_store(store_url)
    for name, count, _at in list_suites(store):
        click.echo(f"{name}\t{count} session(s)")


@suite.command("show")
@click.argument("name")
@store_option
def suite_show(name: str, store_url: str | None) -> None:
    """Print the session ids of suite NAME, one a line.

    \b
    Example:
      blackbox suite show smoke
    """
    store = open_configured_store(store_url)
    for sid in load_suite(store, name):
        click.echo(sid)


COMMANDS = [suite]
