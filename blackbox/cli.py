"""The `blackbox` command: a click group whose commands live one area per module.

Every command calls one library function and turns `BlackboxError` into one line on stderr and
exit status 2 (sqlite-utils' pattern); only a programming error shows a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from recorder import __version__
from recorder.errors import BlackboxError

# Each module defines click commands in a list named COMMANDS.
COMMAND_MODULES = [
    "blackbox.cmd_store",
    "blackbox.cmd_record",
    "blackbox.cmd_attach",
    "blackbox.cmd_proxy",
    "blackbox.cmd_replay",
    "blackbox.cmd_analytics",
    "blackbox.cmd_policy",
    "blackbox.cmd_compliance",
]


class BlackboxGroup(click.Group):
    """A group that reports library errors as one line with exit status 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BlackboxError as exc:
            click.echo(f"blackbox: {exc}", err=True)
            sys.exit(2)


@click.group(cls=BlackboxGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mcp-blackbox")
def main() -> None:
    """mcp-blackbox: a flight recorder for the Model Context Protocol.

    Record every JSON-RPC frame between an MCP host and its servers into an append-only,
    tamper-evident store, replay sessions, and query them.

    \b
    Quick tour:
      blackbox record -- python -m my_server      # wrap a stdio server
      blackbox sessions                           # what happened, newest first
      blackbox show last                          # one session's timeline
      blackbox verify                             # is the record intact?

    The store is SQLite in $XDG_DATA_HOME/mcp-blackbox unless --store or BLACKBOX_STORE says
    otherwise (postgresql://USER@HOST/DB for a shared store).
    """


for _name in COMMAND_MODULES:
    for _command in importlib.import_module(_name).COMMANDS:
        main.add_command(_command)
