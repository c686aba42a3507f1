"""`blackbox ui`: the local web app (see `blackbox.ui`)."""

from __future__ import annotations

from pathlib import Path

import click

from blackbox import config
from blackbox.cli.options import open_configured_store, store_option
from blackbox.cli.redaction_options import configured_redactor, redaction_options


@click.command()
@click.option(
    "--listen",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Address to serve on (port 0: any free port).",
)
@click.option("--no-open", is_flag=True, help="Do not open a browser.")
@redaction_options("payloads")
@store_option
def ui(
    listen: str,
    no_open: bool,
    store_url: str | None,
    redact_rules: Path | None = None,
    no_redact: bool = False,
) -> None:
    """Serve the web UI: live sessions, timelines, replay diffs, SQL and charts.

    The URL printed on stdout carries a random token: every page and API refuses requests
    without it (the browser keeps it in a cookie after the first visit). It listens on
    loopback only unless --listen says otherwise, and warns then. Secrets in what it shows are
    redacted as `export` redacts them (the built-in rules keyed per store; --redact RULES, or
    --no-redact to show payloads as stored).

    \b
    Example:
      blackbox ui
      blackbox ui --listen 127.0.0.1:9000 --no-open
    """
    from blackbox.ui import run_ui, split_listen

    host, port = split_listen(listen)
    redactor = configured_redactor(redact_rules, no_redact, store_url)
    store = open_configured_store(store_url)
    try:
        run_ui(
            store,
            config.journal_dir(),
            config.analytics_dir(),
            host,
            port,
            open_browser=not no_open,
            say=click.echo,
            warn=lambda msg: click.echo(msg, err=True),
            redactor=redactor,
        )
    finally:  # also when the address cannot be bound
        store.close()


COMMANDS = [ui]
