"""The check every replay command runs before it sends anything: calls that may change something
are listed, then allowed, skipped, asked about one by one or refused. Shared by `replay`,
`minimize` and suite runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from blackbox.replay import Recording, RiskyCall, check_replay_safety, decide

# The answers to "send it?": this call, or this one and every later one.
ANSWERS = {"y": "send it", "n": "skip it", "a": "send it and the rest", "s": "skip it and the rest"}


def _asker() -> Callable[[RiskyCall], bool]:
    """Ask a person about each call in turn; "a" and "s" answer for the calls after it too."""
    standing: list[bool] = []

    def ask(call: RiskyCall) -> bool:
        if standing:
            return standing[0]
        answer = click.prompt(
            f"send {call.describe()}?",
            type=click.Choice(list(ANSWERS)),
            default="n",
            err=True,
        )
        if answer in ("a", "s"):
            standing.append(answer == "a")
        return answer in ("y", "a")

    return ask


def safety_guard(
    allow_writes: bool, read_only: bool, interactive: bool = True
) -> Callable[[Recording], frozenset[int]]:
    """The check every replay command runs before sending anything: list the calls that may
    change something (stderr), then allow, skip, ask a terminal about each (when `interactive`
    and there is one: "n" skips that call and the replay goes on), or refuse (exit 2)."""
    if allow_writes and read_only:
        raise click.UsageError("--allow-writes and --read-only contradict each other")

    def guard(rec: Recording) -> frozenset[int]:
        risky = check_replay_safety(rec)
        if risky and not allow_writes:
            click.echo(f"{len(risky)} call(s) may change something on the server:", err=True)
            for call in risky:
                click.echo(f"  {call.describe()}", err=True)
        can_ask = interactive and sys.stdin.isatty() and sys.stderr.isatty()
        if can_ask and risky and not (allow_writes or read_only):
            click.echo("; ".join(f"{key}: {what}" for key, what in ANSWERS.items()), err=True)
        skip = decide(
            risky,
            allow_writes=allow_writes,
            read_only=read_only,
            confirm=_asker() if can_ask else None,
        )
        if skip:
            why = "--read-only" if read_only else "answered no"
            click.echo(
                f"skipping {len(skip)} call(s) ({why}): their recorded answers stand in", err=True
            )
        return skip

    return guard
