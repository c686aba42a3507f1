"""The `blackbox` command: a click group whose commands live one area per module.

Every command calls one library function and turns `BlackboxError` into one line on stderr and
exit status 2 (sqlite-utils' pattern); only a programming error shows a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from blackbox.recorder import BlackboxError, __version__

# Command name -> the module defining it. Modules are imported only when their command runs, so a
# hook or a tap does not pay for importing analytics, replay and the migration tooling.
COMMAND_MODULES = {
    "sessions": "blackbox.cli.cmd_store",
    "keys": "blackbox.cli.cmd_trust",
    "checkpoint": "blackbox.cli.cmd_trust",
    "prove": "blackbox.cli.cmd_trust",
    "verify-proof": "blackbox.cli.cmd_trust",
    "show": "blackbox.cli.cmd_store",
    "verify": "blackbox.cli.cmd_store",
    "db": "blackbox.cli.cmd_store",
    "record": "blackbox.cli.cmd_record",
    "ship": "blackbox.cli.cmd_record",
    "bridge": "blackbox.cli.cmd_record",
    "attach": "blackbox.cli.cmd_attach",
    "detach": "blackbox.cli.cmd_attach",
    "where": "blackbox.cli.cmd_attach",
    "proxy": "blackbox.cli.cmd_proxy",
    "replay": "blackbox.cli.cmd_replay",
    "serve": "blackbox.cli.cmd_replay",
    "suite": "blackbox.cli.cmd_suite",
    "minimize": "blackbox.cli.cmd_minimize",
    "report": "blackbox.cli.cmd_analytics",
    "sql": "blackbox.cli.cmd_analytics",
    "doctor": "blackbox.cli.cmd_analytics",
    "tools": "blackbox.cli.cmd_tools",
    "policy": "blackbox.cli.cmd_policy",
    "hook": "blackbox.cli.cmd_policy",
    "decision": "blackbox.cli.cmd_policy",
    "export": "blackbox.cli.cmd_compliance",
    "verify-export": "blackbox.cli.cmd_compliance",
    "disclose": "blackbox.cli.cmd_compliance",
    "retention": "blackbox.cli.cmd_compliance",
    "hold": "blackbox.cli.cmd_compliance",
    "tail": "blackbox.cli.cmd_tail",
    "ui": "blackbox.cli.cmd_ui",
    "otel": "blackbox.cli.cmd_otel",
}


def load_command(name: str) -> click.Command:
    """Import the module of command `name` and return the command (each module lists its
    commands in `COMMANDS`)."""
    module = importlib.import_module(COMMAND_MODULES[name])
    for command in module.COMMANDS:
        if command.name == name:
            return command
    raise LookupError(f"{COMMAND_MODULES[name]} defines no command {name!r}")


class BlackboxGroup(click.Group):
    """A group that reports library errors as one line with exit status 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMAND_MODULES:
            return None
        return load_command(cmd_name)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BlackboxError as exc:
            click.echo(f"blackbox: {exc}", err=True)
            sys.exit(2)
        except click.BadParameter as exc:
            # A value the option cannot read (a duration, a date, a path) is the user's typo:
            # one line naming the option and what it takes, like a library error, not click's
            # usage block above it.
            message = exc.format_message()
            click.echo(f"blackbox: {message[:1].lower()}{message[1:]}", err=True)
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
      blackbox where                              # where recordings go

    The store is SQLite in the data directory unless --store or BLACKBOX_STORE says otherwise
    (postgresql://USER@HOST/DB for a shared store). The data directory (store, journals) is
    BLACKBOX_HOME, else $XDG_DATA_HOME/mcp-blackbox. `blackbox where` shows both.
    """
