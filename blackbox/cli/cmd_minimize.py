"""`blackbox minimize`: cut a session down to the requests that still reproduce its outcome."""

from __future__ import annotations

import sys

import click

from blackbox.cli.options import DURATION_HELP, Duration, open_configured_store, store_option
from blackbox.cli.replay_safety import safety_guard
from blackbox.recorder.query import session_handle
from blackbox.replay import ReplayOptions, minimize_session


@click.command()
@click.argument("session")
@click.option("--against", metavar="CMD", help="Minimise against this command.")
@click.option("--url", metavar="URL", help="Minimise against a Streamable HTTP endpoint.")
@click.option(
    "--until",
    default="fault",
    show_default=True,
    metavar="fault|divergence|TEXT",
    help="What must still happen: a recorded fault, the first divergence, or a text in the "
    "replay's report or the server's stderr.",
)
@click.option(
    "--ignore",
    "ignore",
    multiple=True,
    metavar="JSONPATH",
    help="Ignore differences at this path (repeatable).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=Duration(),
    default="10s",
    show_default=True,
    help=f"How long to wait for a response before calling it missing ({DURATION_HELP}).",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Send calls that may change something (minimisation replays them many times).",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Leave calls that may change something out of every trial and of the result.",
)
@store_option
def minimize(
    session: str,
    against: str | None,
    url: str | None,
    until: str,
    ignore: tuple[str, ...],
    timeout_s: float,
    allow_writes: bool,
    read_only: bool,
    store_url: str | None,
) -> None:
    """Minimise a session: the fewest requests (plus the handshake) that still reproduce it.

    Replays subsets of the session's client requests (delta debugging) until no single request
    can be removed; keeps what a kept request depends on (the handshake, the subscribe before
    a resource read). Calls to tools the recording does not mark read-only would be sent again
    at every trial: they are listed and a terminal is asked about each ("n" leaves that call
    out); elsewhere --allow-writes sends them and --read-only leaves them out. Stores the
    result as a new session derived from the original and prints its id. A recorded fault
    that does not reproduce at all is said so first (exit 1).

    \b
    Example:
      blackbox minimize last
      blackbox minimize 01a2 --against "python server_v2.py" --until divergence
      blackbox minimize 01a2 --until "Traceback"
      blackbox minimize 01a2 --until divergence --read-only
    """
    options = ReplayOptions(ignore=list(ignore), response_timeout_s=timeout_s)
    store = open_configured_store(store_url)
    result = minimize_session(
        store,
        session,
        against=against,
        url=url,
        until=until,
        options=options,
        progress=lambda msg: click.echo(msg, err=True),
        guard=safety_guard(allow_writes, read_only),
    )
    if result.not_reproduced:
        click.echo(f"nothing to minimise: {result.not_reproduced}")
        sys.exit(result.exit_code)
    click.echo(
        f"minimized {session_handle(store, result.original_id)} "
        f"for {result.goal.describe() if result.goal else ''}"
    )
    click.echo("kept: " + ", ".join(result.kept_labels))
    click.echo(result.summary())
    derived = result.derived_id
    handle = f" (handle {session_handle(store, derived)})" if derived else ""
    click.echo(f"derived session {derived}{handle}")


COMMANDS = [minimize]
