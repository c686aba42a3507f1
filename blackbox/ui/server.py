"""Serving the web UI: where it listens, the URL it prints, opening the browser, stopping.

Why it exists: `blackbox ui` and the tests start the same server; the socket is bound before the
URL is printed (port 0 picks a free port, and the URL names the real one), loopback is the
default and anything else is said out loud. The socket and uvicorn are the project's one server
setup, shared with `blackbox proxy` (`blackbox.recorder.serving`).
"""

from __future__ import annotations

import socket
import threading
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from blackbox.recorder import BlackboxError, is_loopback, serving
from blackbox.recorder.store import EventStore
from blackbox.ui.app import create_app
from blackbox.ui.context import Context
from blackbox.ui.data import Redaction
from blackbox.ui.routes_api import LIVE_POLL_S
from blackbox.ui.security import new_token


class BadListen(BlackboxError):
    """A --listen address that cannot be used."""


def split_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as (host, port)."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise BadListen(f"--listen {text!r} is not HOST:PORT (for example 127.0.0.1:8765)")
    return host, int(port)


def url_for(host: str, port: int, token: str) -> str:
    return serving.http_url(host, port, f"/?token={token}")


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (`blackbox.recorder.serving.bind`), or BadListen saying why not."""
    try:
        return serving.bind(host, port)
    except OSError as exc:
        raise BadListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@dataclass
class Served:
    """A running UI: its URL (with the token), its port, and how to stop it."""

    url: str
    port: int
    token: str
    stop: Callable[[], None]


def _server(ctx: Context, host: str, port: int, sock: socket.socket) -> serving.Server:
    """The project's uvicorn setup (`blackbox.recorder.serving.Server`) for the UI: no lifespan,
    a second for open requests at stop (the event streams end on `ctx.stopping` first)."""
    return serving.Server(create_app(ctx, host, port), sock, graceful_s=1, name="blackbox-ui")


def serve_in_thread(
    store: EventStore,
    journal_dir: Path | None,
    analytics_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    redactor: Redaction | None = None,
) -> Served:
    """Start the UI on a thread (tests, benchmarks); port 0 picks a free one."""
    token = new_token()
    sock = bind(host, port)
    port = sock.getsockname()[1]
    ctx = Context(store, journal_dir, analytics_dir, token, redactor)
    server = _server(ctx, host, port, sock)
    if not server.start(timeout=None):
        sock.close()
        raise BlackboxError(f"the UI could not start on {host}:{port}")

    def stop() -> None:
        ctx.stopping.set()
        threading.Event().wait(2 * LIVE_POLL_S)  # the event streams see it and end
        server.stop(10)

    return Served(url_for(host, port, token), port, token, stop)


def run_ui(
    store: EventStore,
    journal_dir: Path | None,
    analytics_dir: Path,
    host: str,
    port: int,
    open_browser: bool,
    say: Callable[[str], None],
    warn: Callable[[str], None],
    redactor: Redaction | None = None,
) -> None:
    """Serve until interrupted: print the URL (with its token) and open it unless told not to.
    Ctrl-C and SIGTERM end the process as they would without the server (KeyboardInterrupt,
    death by SIGTERM), after the event streams were told to end."""
    if not is_loopback(host):
        warn(
            f"blackbox ui: listening on {host}, not loopback: anyone who can reach this address "
            "and learns the token can read every recorded session"
        )
    token = new_token()
    sock = bind(host, port)
    port = sock.getsockname()[1]
    url = url_for(host, port, token)
    ctx = Context(store, journal_dir, analytics_dir, token, redactor)
    server = _server(ctx, host, port, sock)
    say(url)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run()
    finally:
        ctx.stopping.set()
        sock.close()
    server.reraise_signals()
