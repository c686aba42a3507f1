"""Waiting in tests for what another process does: one polling loop instead of a copy per file.

Taps ship their records in the background, servers take a moment to listen: a test asks again
until the answer is truthy or the deadline passes, then fails naming what it waited for.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    predicate: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.1,
    message: object = None,
) -> T:
    """Call `predicate` every `interval` seconds until it returns a truthy value, and return it.

    After `timeout` seconds without one, raise AssertionError naming what was awaited (`message`,
    called first when it is callable, else the predicate's name) and the last value seen.
    `message` is rendered only then, so a live object (the list of notices a tap printed so far)
    shows what it held at the deadline.
    The predicate is called at least once, and once more at the deadline. An exception it raises
    (an assertion that a server is still alive) propagates at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            if callable(message):  # a description worth building only now (a log read at the end)
                what = message()
            elif message is not None:
                what = message
            else:
                what = getattr(predicate, "__qualname__", predicate)
            last = repr(value)
            if len(last) > 200:
                last = last[:200] + "..."
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last})")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def listening(port: int, proc: subprocess.Popen | None = None) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`; fails at once if `proc`, the
    server meant to listen there, has exited (its stderr tail in the message, when piped)."""
    if proc is not None and proc.poll() is not None:
        out = proc.stderr.read() if proc.stderr else ""
        if isinstance(out, bytes):  # a pipe opened without text=True
            out = out.decode(errors="replace")
        raise AssertionError(
            f"server process {proc.pid} exited with {proc.returncode}: {out[-2000:]}"
        )
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_listening(
    port: int, proc: subprocess.Popen | None = None, *, timeout: float, interval: float = 0.05
) -> None:
    """Wait until a server listens on `port` (see `listening`)."""
    eventually(
        lambda: listening(port, proc),
        timeout=timeout,
        interval=interval,
        message=f"a listener on port {port}",
    )
