"""Serving the HTTP proxy tap: the listening socket, uvicorn, and `blackbox proxy`'s run.

Why it exists: how the proxy is served (the shipper beside it, the final ship at exit) changes for
reasons of its own and has nothing to say about what an exchange records;
`blackbox.recorder.capture.taps.http` is the ASGI app, this module runs it. The socket, uvicorn's
configuration and its signals are the project's one server setup, shared with `blackbox ui`
(`blackbox.recorder.serving`). `ProxyServer` serves it in a thread (tests, benchmarks,
embedding), `run_proxy` in the foreground.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox.recorder import is_loopback as is_loopback
from blackbox.recorder import serving
from blackbox.recorder.capture.journal import Journal, JournalError, StoreMark
from blackbox.recorder.capture.leftovers import ship_leftovers_quietly
from blackbox.recorder.capture.shipper import Shipper
from blackbox.recorder.capture.taps.http import HttpProxyTap
from blackbox.recorder.capture.taps.http_exchange import (
    Notice,
    ProxyError,
    ProxySettings,
    ProxyStats,
)
from blackbox.recorder.capture.taps.http_relay import StreamAborted
from blackbox.recorder.store import EventStore

DEFAULT_LISTEN = "127.0.0.1:8750"


class _QuietAbort(logging.Filter):
    """uvicorn logs every exception that leaves an app; a deliberate abort is not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StreamAborted)


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`, or a bare port meaning loopback) as (host, port)."""
    text = listen.strip()
    if text.isdigit():
        return "127.0.0.1", int(text)
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not host:
        raise ProxyError(f"bad --listen {listen!r}: give HOST:PORT, e.g. 127.0.0.1:8750")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    number = int(port)
    if number > 65535:
        raise ProxyError(f"bad --listen {listen!r}: port {number} is out of range")
    return host, number


def _bind(host: str, port: int) -> socket.socket:
    try:
        return serving.bind(host, port)
    except OSError as exc:
        why = "is already in use" if exc.errno == errno.EADDRINUSE else f"fails: {exc.strerror}"
        raise ProxyError(f"cannot listen on {host}:{port}: the address {why}") from None


_quiet_installed = False


def _server(app: HttpProxyTap, sock: socket.socket) -> serving.Server:
    """The project's uvicorn setup (`blackbox.recorder.serving.Server`) for the proxy: with the
    lifespan (the upstream pool and the reaper), without uvicorn's own Server and Date headers
    (transparency: the upstream's go through), two seconds for open requests at stop."""
    global _quiet_installed
    if not _quiet_installed:
        logging.getLogger("uvicorn.error").addFilter(_QuietAbort())
        _quiet_installed = True
    return serving.Server(
        app, sock, lifespan=True, graceful_s=2, own_headers=False, name="blackbox-proxy"
    )


class ProxyServer:
    """A proxy tap served on a socket in a background thread (tests, benchmarks, embedding)."""

    def __init__(self, tap: HttpProxyTap, host: str = "127.0.0.1", port: int = 0) -> None:
        self.tap = tap
        self._server = _server(tap, _bind(host, port))
        self.host, self.port = self._server.host, self._server.port

    @property
    def base_url(self) -> str:
        return serving.http_url(self.host, self.port)

    @property
    def url(self) -> str:
        """The URL a client uses instead of the upstream's."""
        return self.base_url + self.tap.settings.path

    def start(self, timeout: float = 10.0) -> ProxyServer:
        if not self._server.start(timeout):
            raise ProxyError("the proxy did not start")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.stop(timeout)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


@dataclass
class ProxyConfig:
    """Everything `run_proxy` needs; the CLI fills it from flags and `blackbox.config`."""

    settings: ProxySettings
    listen: str
    journal_dir: Path
    store_factory: Callable[[], EventStore]
    on_notice: Notice
    policy: Any = None
    on_ready: Callable[[str], None] | None = None
    ship_leftovers: bool = True
    final_ship_seconds: float = 2.5
    # Ship in fewer, larger batches than the stdio tap: less CPU per record. Measured with
    # bench/proxy_overhead.py, shipping every 0.25 s cost 1.4-1.5x the bare proxy's CPU per call
    # sequentially, every 1 s 1.1-1.25x; records reach the store about a second after the client
    # got them (they are in the journal before).
    ship_poll_seconds: float = 1.0
    # With a store URL the shipper runs in a child process
    # (blackbox.recorder.capture.taps.http_ship), off the event loop's GIL; without one, in a thread
    # here using store_factory.
    store_url: str | None = None


@dataclass(frozen=True)
class ProxyReport:
    """How a proxy run went."""

    url: str
    stats: ProxyStats
    shipped: bool


def _ship_process(config: ProxyConfig, journal: Journal) -> subprocess.Popen | None:
    argv = [
        sys.executable,
        "-m",
        "blackbox.recorder.capture.taps.http_ship",
        str(journal.directory),
        journal.tap_id,
        str(config.store_url),
        str(config.final_ship_seconds),
        str(config.ship_poll_seconds),
    ]
    if config.ship_leftovers:
        argv.append("leftovers")
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    except OSError as exc:
        config.on_notice(f"cannot start the shipper process ({exc}); shipping in this one")
        return None


def _stop_ship_process(proc: subprocess.Popen, final_seconds: float) -> bool:
    """Tell the shipper process the journal is complete; True when it stored everything."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(b"closed\n")
        proc.stdin.close()
    try:
        return proc.wait(final_seconds + 15) == 0
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return False


def run_proxy(config: ProxyConfig) -> ProxyReport:
    """Serve the proxy until SIGINT or SIGTERM; then end the open sessions and ship the journal.

    Records are journaled locally first and shipped to the store by a background thread, so a
    slow or unreachable store never stalls traffic; what is not shipped at exit stays in the
    journal for the next tap or `blackbox ship`.
    """
    host, port = parse_listen(config.listen)
    sock = _bind(host, port)
    try:
        # The journal names its store: if it is left behind, only that store gets it.
        mark = StoreMark.for_url(config.store_url) if config.store_url is not None else None
        journal = Journal.create(config.journal_dir, store=mark)
    except JournalError as exc:
        sock.close()
        raise ProxyError(f"{exc}; not starting a proxy that cannot record") from None
    ship_proc = _ship_process(config, journal) if config.store_url is not None else None
    shipper: Shipper | None = None
    if ship_proc is None:
        store_factory = config.store_factory
        shipper = Shipper(
            journal, store_factory, config.on_notice, poll_seconds=config.ship_poll_seconds
        )
        shipper.start()
        if config.ship_leftovers:
            threading.Thread(
                target=ship_leftovers_quietly,
                args=(config.journal_dir, store_factory),
                daemon=True,
            ).start()
    if config.policy is not None:
        from blackbox.recorder.gate import pinning

        pinning.attach(config.policy, config.store_factory, journal, config.settings.server_name)
    tap = HttpProxyTap(config.settings, journal, config.policy, config.on_notice)
    server = _server(tap, sock)
    url = serving.http_url(server.host, server.port, config.settings.path)
    if config.on_ready is not None:
        config.on_ready(url)
    # What exists now (modules, the app, the pool) lives as long as the proxy: moved out of the
    # collector's reach, a full collection walks only what calls allocate, and its pauses stay
    # out of the tail latency.
    gc.freeze()
    try:
        server.run()  # a SIGINT or SIGTERM stops it; the journal is shipped below
    finally:
        sock.close()
        if tap.router.open_sessions():  # uvicorn did not get to run the lifespan shutdown
            tap.end_all("proxy_stopped", "interrupted")
        journal.close()
        if ship_proc is not None:
            shipped = _stop_ship_process(ship_proc, config.final_ship_seconds)
        else:
            assert shipper is not None
            shipped = shipper.stop(config.final_ship_seconds)
        if not shipped:
            config.on_notice(
                "the store did not take every record in time; they are kept in the journal "
                f"{config.journal_dir} and will be shipped by the next tap or `blackbox ship`"
            )
    return ProxyReport(url, tap.stats, shipped)
