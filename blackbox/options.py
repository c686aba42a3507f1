"""Options and helpers shared by the command modules."""

from __future__ import annotations

import click

from blackbox import config
from blackbox.output import FORMATS
from recorder.store import EventStore, open_store

store_option = click.option(
    "--store",
    "store_url",
    metavar="URL",
    default=None,
    help="Store URL (default: BLACKBOX_STORE, else SQLite in the user data directory).",
)


def format_option(choices: tuple[str, ...] = FORMATS, default: str = "table"):  # type: ignore[no-untyped-def]
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="Output format.",
    )


def open_configured_store(store_url: str | None) -> EventStore:
    """The store named by the flag, the environment or the default."""
    return open_store(config.store_url(store_url))
