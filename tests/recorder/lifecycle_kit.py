"""A JSON-RPC line client for `blackbox record` run as a real process: the tests of session
lifecycle (live policy, idle, heartbeats) drive the tap's stdin and read its stdout and stderr
themselves, so they can pause, rewrite a file mid-session, and see what the tap said."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

from tests.conftest import BLACKBOX

PROTOCOL = "2025-11-25"


class TapProcess:
    """`blackbox record ARGS -- COMMAND` with pipes; requests answered in order by id."""

    def __init__(
        self,
        args: list[str],
        command: list[str],
        store_url: str,
        home: Path,
        keepalive: float | None = None,
    ) -> None:
        # With `keepalive`, waiting for an answer pings the server every `keepalive` seconds: the
        # client is never silent longer, however long the server takes (its start alone, the
        # imports, can take seconds on a loaded machine).
        self.keepalive = keepalive
        env = {**os.environ, "BLACKBOX_STORE": store_url, "BLACKBOX_HOME": str(home)}
        self.proc = subprocess.Popen(
            [BLACKBOX, "record", *args, "--", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.lines: queue.SimpleQueue[dict | None] = queue.SimpleQueue()
        self.stderr: list[str] = []
        self._next = 0
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        self._next += 1
        rid = self._next
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        deadline = time.monotonic() + timeout
        while True:
            if self.keepalive is None:
                msg = self.lines.get(timeout=timeout)
            else:
                try:
                    left = deadline - time.monotonic()
                    msg = self.lines.get(timeout=max(0.0, min(self.keepalive, left)))
                except queue.Empty:
                    if time.monotonic() >= deadline:
                        raise
                    self._next += 1  # a ping's answer is skipped below like any other line
                    self.send({"jsonrpc": "2.0", "id": self._next, "method": "ping"})
                    continue
            assert msg is not None, "the tap closed its stdout"
            if msg.get("id") == rid and "method" not in msg:
                return msg

    def initialize(self) -> dict:
        answer = self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "lifecycle-test", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def call(self, tool: str, arguments: dict) -> dict:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self, timeout: float = 20) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout)


def write_atomically(path: Path, text: str) -> None:
    """Replace a file the way an editor or a deploy does: write beside it, rename over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
