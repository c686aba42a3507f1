"""`blackbox ui`: the local web app (see `blackbox.ui`)."""

from __future__ import annotations

import click

from blackbox import config
from blackbox.cli.options import open_configured_store, store_option


@click.command()
@click.option(
    "--listen",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Address to serve on (port 0: any free port).",
)
@click.option("--no-open", is_flag=True, help="Do not open a browser.")
@store_option
def ui(listen: str, no_open: bool, store_url: str | None) -> None:
    """Serve the web UI: live sessions, timelines, replay diffs, SQL and charts.

    The URL printed on stdout carries a random token: every page and API refuses requests
    without it (the browser keeps it in a cookie after the first visit). It listens on
    loopback only unless --listen says otherwise, and warns then.

    \b
    Example:
      blackbox ui
      blackbox ui --listen 127.0.0.1:9000 --no-open
    """
    from blackbox.ui import run_ui, split_listen

    host, port = split_listen(listen)
    store = open_configured_store(store_url)
    run_ui(
        store,
        config.journal_dir(),
        config.analytics_dir(),
        host,
        port,
        open_browser=not no_open,
        say=click.echo,
        warn=lambda msg: click.echo(msg, err=True),
    )


COMMANDS = [ui]
