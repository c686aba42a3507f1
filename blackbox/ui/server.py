"""Serving the web UI: where it listens, the URL it prints, opening the browser, stopping.

Why it exists: `blackbox ui` and the tests start the same server; the socket is bound before the
URL is printed (port 0 picks a free port, and the URL names the real one), loopback is the
default and anything else is said out loud.
"""

from __future__ import annotations

import socket
import threading
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from blackbox.recorder.errors import BlackboxError
from blackbox.recorder.store import EventStore
from blackbox.ui.app import LIVE_POLL_S, Context, create_app
from blackbox.ui.security import is_loopback, new_token

if TYPE_CHECKING:
    import uvicorn


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
    spelled = f"[{host}]" if ":" in host else host
    return f"http://{spelled}:{port}/?token={token}"


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections made as soon as the URL is printed wait, not fail
    except OSError as exc:
        sock.close()
        raise BadListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


@dataclass
class Served:
    """A running UI: its URL (with the token), its port, and how to stop it."""

    url: str
    port: int
    token: str
    stop: Callable[[], None]


def _server(ctx: Context, host: str, port: int) -> uvicorn.Server:
    import uvicorn

    config = uvicorn.Config(
        create_app(ctx, host, port),
        log_level="warning",
        timeout_graceful_shutdown=1,
        lifespan="off",
    )
    return uvicorn.Server(config)


def serve_in_thread(
    store: EventStore,
    journal_dir: Path | None,
    analytics_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
) -> Served:
    """Start the UI on a thread (tests, benchmarks); port 0 picks a free one."""
    token = new_token()
    sock = bind(host, port)
    port = sock.getsockname()[1]
    ctx = Context(store, journal_dir, analytics_dir, token)
    server = _server(ctx, host, port)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise BlackboxError(f"the UI could not start on {host}:{port}")
        threading.Event().wait(0.02)

    def stop() -> None:
        ctx.stopping.set()
        threading.Event().wait(2 * LIVE_POLL_S)  # the event streams see it and end
        server.should_exit = True
        thread.join(10)
        sock.close()

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
) -> None:
    """Serve until interrupted: print the URL (with its token) and open it unless told not to."""
    if not is_loopback(host):
        warn(
            f"blackbox ui: listening on {host}, not loopback: anyone who can reach this address "
            "and learns the token can read every recorded session"
        )
    token = new_token()
    sock = bind(host, port)
    port = sock.getsockname()[1]
    url = url_for(host, port, token)
    ctx = Context(store, journal_dir, analytics_dir, token)
    server = _server(ctx, host, port)
    say(url)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run(sockets=[sock])
    finally:
        ctx.stopping.set()
        sock.close()
