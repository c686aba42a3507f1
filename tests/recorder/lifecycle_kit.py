"""A JSON-RPC line client for `blackbox record` run as a real process: the tests of session
lifecycle (live policy, idle, heartbeats) drive the tap's stdin and read its stdout and stderr
themselves, so they can pause, rewrite a file mid-session, and see what the tap said."""

from __future__ import annotations

import json
import os
import queue
import select
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


class WarmServer:
    """A stdio server started, and answering, before the tap that fronts it: the tap runs
    `relay_command` (sh and two `cat`s, joined to the server by two FIFOs), which starts in
    milliseconds. A server the tap starts itself spends its start (its imports: seconds on a
    loaded machine) between `initialize` and its answer, a silence the tap counts; a test that
    needs its idle limit to see only the silences it makes starts the server this way.

    The server answers a `ping` (`warm-up`, which never reaches the tap) before the tap exists.
    Until `handed_over()` this side also holds the server's stdin open, so the server does not
    see EOF before the relay has opened it; after, the tap's EOF is the server's."""

    _PING = b'{"jsonrpc": "2.0", "id": "warm-up", "method": "ping"}\n'

    def __init__(self, command: list[str], workdir: Path, timeout: float = 60) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        to_server, from_server = workdir / "to-server", workdir / "from-server"
        os.mkfifo(to_server)
        os.mkfifo(from_server)
        # A FIFO's open waits for its other end: each read end is opened first, non-blocking.
        server_in = os.open(to_server, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(server_in, True)
        self._feed: int | None = os.open(to_server, os.O_WRONLY)
        # Kept to the end, never read after the ping: the server never writes to a FIFO nobody
        # has open (the relay's reader may open it after the server answered).
        self._answers = os.open(from_server, os.O_RDONLY | os.O_NONBLOCK)
        server_out = os.open(from_server, os.O_WRONLY)
        self.stderr_path = workdir / "server.stderr"
        try:
            with self.stderr_path.open("wb") as err:
                self.proc = subprocess.Popen(
                    command, stdin=server_in, stdout=server_out, stderr=err
                )
        finally:
            os.close(server_in)
            os.close(server_out)
        # The relay reads the tap's stdin on fd 3: sh gives a background command /dev/null.
        self.relay_command = [
            "sh",
            "-c",
            'exec 3<&0; cat <&3 >"$1" 3<&- & exec cat "$2" 3<&-',
            "relay",
            str(to_server),
            str(from_server),
        ]
        try:
            self._warm_up(timeout)
        except BaseException:
            self.close()
            raise

    def _warm_up(self, timeout: float) -> None:
        assert self._feed is not None
        os.write(self._feed, self._PING)
        deadline = time.monotonic() + timeout
        got = b""
        while not got.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                raise TimeoutError(f"the server did not answer a ping within {timeout} s")
            chunk = os.read(self._answers, 65536)
            if not chunk:
                raise RuntimeError(f"the server exited: {self.stderr_path.read_text()[-2000:]}")
            got += chunk
        answer = json.loads(got)
        assert answer.get("id") == "warm-up" and "result" in answer, answer

    def handed_over(self) -> None:
        """The relay is connected (the tap's `initialize` was answered): let go of the
        server's stdin, so the server sees EOF when the tap closes the relay's."""
        if self._feed is not None:
            os.close(self._feed)
            self._feed = None

    def close(self) -> None:
        self.handed_over()
        if self.proc.poll() is None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        os.close(self._answers)

    def __enter__(self) -> WarmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_atomically(path: Path, text: str) -> None:
    """Replace a file the way an editor or a deploy does: write beside it, rename over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
