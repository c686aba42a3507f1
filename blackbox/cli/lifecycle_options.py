"""Options of the session lifecycle shared by `record` and `proxy`: `--idle-after`."""

from __future__ import annotations

import click

from blackbox import config
from blackbox.cli.options import DURATION_HELP, BadTime, positive_seconds

idle_after_option = click.option(
    "--idle-after",
    "idle_after",
    metavar="DURATION",
    default=None,
    help="Record session_idle after this long without a frame, session_resumed when traffic "
    f"comes back ({DURATION_HELP}; default: BLACKBOX_IDLE_AFTER, else 120min; off: never).",
)


def idle_after_seconds(flag: str | None) -> float | None:
    """The idle limit in seconds from the flag or the configuration; None when off."""
    # Read here, not by a click type: the value may come from BLACKBOX_IDLE_AFTER, and "off".
    text = config.idle_after(flag)
    if text.strip().lower() in ("off", "0", "never"):
        return None
    try:
        return positive_seconds(text)
    except BadTime as exc:
        raise click.BadParameter(str(exc), param_hint="'--idle-after'") from None
