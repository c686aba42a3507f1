"""The CLI reference (docs/cli.md), rendered from the commands' own help so that it cannot drift.

Run `python -m blackbox.cli.reference > docs/cli.md` after changing a command, an option or a
docstring; tests/blackbox/test_cli_reference.py fails while the file and the commands disagree.
The help is rendered at a fixed width, whatever the terminal, so the file is the same everywhere.
"""

from __future__ import annotations

import click

from blackbox.cli.main import main
from blackbox.cli.options import AGE_HELP, DURATION_HELP, NAME_GLOB_HELP

# Columns the help is wrapped at in the file (click's own default is the terminal's width).
WIDTH = 100

INTRO = f"""# CLI reference

Generated from the commands by `python -m blackbox.cli.reference > docs/cli.md`: do not edit it
by hand (`tests/blackbox/test_cli_reference.py` fails while it and the commands disagree).
`blackbox COMMAND --help` prints the same text.

## Option grammar

Every command reads these the same way:

- **Durations** (`--timeout`, `--idle-after`, `--idle-gap`, `--every`, `--slow`,
  `--final-ship-seconds`): {DURATION_HELP}.
  ISO 8601 (`PT30S`) is read too.
- **Ages** (`--older-than`, retention's `--idle`):
  {AGE_HELP}.
  A unit is required: a bare number is refused, and so is `m`, minutes to some and months to others.
- **Points in time** (`--since`, `--until`): an age (that long ago) or an ISO date or time
  (`2026-11-30`, `2026-11-30T12:00Z`; UTC unless it says otherwise).
- **Names** (`sessions --name`, `replay --name`, `--server` of `report`, `export` and `tools`,
  `tail --tool` and `--method`): {NAME_GLOB_HELP}.
  A name without `*`, `?` or `[` matches itself only.
- **Filters before limits**: `sessions --limit` and `tail -n` count what the filters kept.
"""


def _commands(
    command: click.Command, path: list[str], parent: click.Context | None
) -> list[tuple[list[str], click.Context]]:
    """Each command under `command` (itself first) with a context to render its help in."""
    # The command's own context settings (the group's `-h`), as `blackbox CMD --help` has them:
    # click remembers a command's help option from the first context that asks for it.
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=path[-1], parent=parent, **settings)
    found = [(path, ctx)]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                found += _commands(sub, [*path, name], ctx)
    return found


def render() -> str:
    """docs/cli.md: the option grammar, then every command's --help, in command order."""
    parts = [INTRO]
    for path, ctx in _commands(main, ["blackbox"], None):
        parts.append(f"## {' '.join(path)}\n\n```text\n{ctx.command.get_help(ctx)}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    click.echo(render(), nl=False)
