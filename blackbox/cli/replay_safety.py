"""The check every replay command runs before it sends anything: calls that may change something
are listed, then allowed, skipped, asked about or refused. Shared by `replay`, `minimize` and
suite runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from blackbox.replay import Recording, check_replay_safety, decide


def safety_guard(
    allow_writes: bool, read_only: bool, interactive: bool = True
) -> Callable[[Recording], frozenset[int]]:
    """The check every replay command runs before sending anything: list the calls that may
    change something (stderr), then allow, skip, ask a terminal (when `interactive` and there
    is one), or refuse (exit 2)."""
    if allow_writes and read_only:
        raise click.UsageError("--allow-writes and --read-only contradict each other")

    def guard(rec: Recording) -> frozenset[int]:
        risky = check_replay_safety(rec)
        if risky and not allow_writes:
            click.echo(f"{len(risky)} call(s) may change something on the server:", err=True)
            for call in risky:
                click.echo(f"  {call.describe()}", err=True)
        can_ask = interactive and sys.stdin.isatty() and sys.stderr.isatty()
        ask = (lambda: click.confirm("send them?", default=False, err=True)) if can_ask else None
        skip = decide(risky, allow_writes=allow_writes, read_only=read_only, confirm=ask)
        if skip:
            click.echo(f"skipping {len(skip)} call(s) (--read-only)", err=True)
        return skip

    return guard
