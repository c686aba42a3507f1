"""Transports the replayer drives a server through: a stdio child process, or a Streamable HTTP
endpoint.

A driver only moves bytes. It sends the frames it is given exactly as given and reports what comes
back as `Inbound` items on one queue (frames with their arrival time, stderr lines, transport
faults, the end of the stream), so the replayer above it is the same for both transports and
records what really crossed the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from blackbox.recorder.log import META_PROTOCOL_VERSION
from blackbox.replay.recording import ReplayError

if TYPE_CHECKING:
    import httpx2

# A frame longer than this is a server bug; reading it whole would exhaust memory.
MAX_LINE = 64 * 1024 * 1024
EXIT_GRACE_S = 2.0


class TransportClosed(Exception):
    """The server can no longer be written to (exited, pipe closed, connection cut)."""


@dataclass(frozen=True, slots=True)
class Inbound:
    """Something the server produced. kind: frame | stderr | fault | eof (no more frames) |
    end (nothing more at all)."""

    kind: str
    mono_ns: int
    raw: bytes = b""
    detail: dict | None = None


@dataclass(frozen=True, slots=True)
class ExitInfo:
    """How the server ended: exit status or signal, and whether the replay had to stop it."""

    exit_code: int | None
    signal: str | None
    stopped: bool  # the replay terminated it after the grace period


class StdioDriver:
    """Runs the target command and speaks newline-delimited JSON-RPC on its stdin/stdout."""

    transport = "stdio"

    def __init__(
        self, argv: Sequence[str], cwd: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        if not argv:
            raise ReplayError("no command to run: the session recorded none; use --against")
        self.argv = list(argv)
        self.cwd = cwd
        self.env = env
        self.inbound: asyncio.Queue[Inbound] = asyncio.Queue()
        self.proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task] = []
        self._closed = False

    @property
    def description(self) -> list[str]:
        return self.argv

    async def start(self) -> None:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.cwd,
                env=self.env,
                limit=MAX_LINE,
                start_new_session=True,  # so stopping it reaches its children too
            )
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ReplayError(f"cannot start {' '.join(self.argv)}: {reason}") from None
        self._tasks = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
        ]
        self._tasks.append(asyncio.create_task(self._end_when_drained(list(self._tasks))))

    async def _end_when_drained(self, readers: list[asyncio.Task]) -> None:
        # `eof` (stdout closed) says the server is gone; `end` comes once stderr is drained too.
        await asyncio.gather(*readers, return_exceptions=True)
        self.inbound.put_nowait(Inbound("end", time.monotonic_ns()))

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        reader = self.proc.stdout
        while True:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                self.inbound.put_nowait(
                    Inbound("fault", time.monotonic_ns(), detail={"fault": "oversize_frame"})
                )
                break
            if not line:
                break
            now = time.monotonic_ns()
            if not line.endswith(b"\n"):
                if line.strip():  # a frame cut off by the end of the stream
                    self.inbound.put_nowait(Inbound("frame", now, line))
                    detail = {"fault": "eof_mid_frame"}
                    self.inbound.put_nowait(Inbound("fault", now, detail=detail))
                break
            raw = line.rstrip(b"\r\n")
            if raw.strip():
                self.inbound.put_nowait(Inbound("frame", now, raw))
        self.inbound.put_nowait(Inbound("eof", time.monotonic_ns()))

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with contextlib.suppress(ValueError, asyncio.LimitOverrunError):
            async for line in self.proc.stderr:
                text = line.decode("utf-8", errors="replace").rstrip("\r\n")
                item = Inbound("stderr", time.monotonic_ns(), line, {"line": text})
                self.inbound.put_nowait(item)

    async def send(self, raw: bytes) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or self._closed or proc.stdin.is_closing():
            raise TransportClosed("the server's stdin is closed")
        try:
            proc.stdin.write(raw + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
            raise TransportClosed(f"broken pipe: {exc}") from None

    async def close_input(self) -> None:
        """Close the server's stdin: the stdio way to say the client is done."""
        self._closed = True
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
                await self.proc.stdin.wait_closed()

    async def cut(self) -> None:
        """Drop the connection abruptly: close stdin and stop reading."""
        await self.close_input()
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def exited(self) -> bool:
        return self.proc is not None and self.proc.returncode is not None

    async def finish(self, grace_s: float = EXIT_GRACE_S) -> ExitInfo:
        """Close stdin, give the server `grace_s` to exit, then stop it (TERM, then KILL)."""
        await self.close_input()
        proc = self.proc
        stopped = False
        if proc is None:
            return ExitInfo(None, None, False)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            stopped = True
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    await asyncio.wait_for(proc.wait(), grace_s)
                    break
                except TimeoutError:
                    continue
        # Let the readers drain what the server wrote before it exited.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), grace_s)
        for task in self._tasks:
            task.cancel()
        code = proc.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return ExitInfo(None, name, stopped)
        return ExitInfo(code, None, stopped)


CONNECT_TIMEOUT_S = 3.0


async def reachable(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail at once, as a bad `--against` command does, when nothing answers HTTP at `url`
    (instead of waiting out every step's response timeout and calling the run diverged). Any
    HTTP status is an answer; only the headers are read (a GET may open an SSE stream)."""
    import httpx2

    if not url.startswith(("http://", "https://")):
        raise ReplayError(f"--url {url!r} is not an http(s) URL")
    try:
        async with (
            httpx2.AsyncClient(timeout=timeout_s) as client,
            client.stream("GET", url, headers={"accept": "text/event-stream"}),
        ):
            pass
    except httpx2.HTTPError as exc:
        raise ReplayError(f"cannot reach {url}: {exc or type(exc).__name__}") from None


class HttpDriver:
    """POSTs each client frame to a Streamable HTTP endpoint and reads JSON or SSE replies.

    Carries `Mcp-Session-Id` once the server assigns one and `MCP-Protocol-Version` once it is
    known; a 2026-07-28 frame also gets the `Mcp-Method` / `Mcp-Name` headers that era requires
    to agree with its body. Each POST runs as its own task, so a request whose reply streams for
    a while does not hold back frames recorded as sent meanwhile.
    """

    transport = "http"

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.inbound: asyncio.Queue[Inbound] = asyncio.Queue()
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._client: httpx2.AsyncClient | None = None
        self._posts: set[asyncio.Task] = set()
        self._get_stream: asyncio.Task | None = None
        self._closed = False

    @property
    def description(self) -> str:
        return self.url

    async def start(self) -> None:
        import httpx2

        await reachable(self.url)
        self._client = httpx2.AsyncClient(timeout=self.timeout_s)

    def _headers(self, raw: bytes) -> dict[str, str]:
        from mcp.shared.inbound import NAME_BEARING_METHODS, encode_header_value

        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        version = self.protocol_version
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            params = message.get("params")
            if not isinstance(params, dict):
                params = {}
            meta = params.get("_meta")
            if not isinstance(meta, dict):
                meta = {}
            if isinstance(meta.get(META_PROTOCOL_VERSION), str):
                version = meta[META_PROTOCOL_VERSION]
                headers["mcp-method"] = message["method"]
                name_key = NAME_BEARING_METHODS.get(message["method"])
                if name_key and isinstance(params.get(name_key), str):
                    headers["mcp-name"] = encode_header_value(params[name_key])
        if version:
            headers["mcp-protocol-version"] = version
        return headers

    async def send(self, raw: bytes) -> None:
        if self._closed or self._client is None:
            raise TransportClosed("the connection was closed")
        if self.session_id and self._get_stream is None:
            # A legacy server sends requests unrelated to a POST (roots/list, list_changed) on
            # the standalone GET stream: open it once the session exists, as SDK clients do.
            self._get_stream = asyncio.create_task(self._listen())
        task = asyncio.create_task(self._post(raw, self._headers(raw)))
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)
        # Yield once so the POST is on its way before the next frame is considered.
        await asyncio.sleep(0)

    async def _post(self, raw: bytes, headers: dict[str, str]) -> None:
        import httpx2

        assert self._client is not None
        try:
            async with self._client.stream("POST", self.url, content=raw, headers=headers) as resp:
                sid = resp.headers.get("mcp-session-id")
                if sid:
                    self.session_id = sid
                ctype = resp.headers.get("content-type", "").lower()
                if resp.status_code == 202:
                    return
                if ctype.startswith("text/event-stream"):
                    await self._read_sse(resp)
                    return
                body = await resp.aread()
                if resp.status_code >= 400 and not ctype.startswith("application/json"):
                    detail = {
                        "fault": "http_status",
                        "status": resp.status_code,
                        "detail": body[:200].decode("utf-8", errors="replace"),
                    }
                    self.inbound.put_nowait(Inbound("fault", time.monotonic_ns(), detail=detail))
                    return
                if body.strip():
                    self._deliver(body.strip())
        except httpx2.HTTPError as exc:
            detail = {"fault": "upstream_unreachable", "detail": str(exc) or type(exc).__name__}
            self.inbound.put_nowait(Inbound("fault", time.monotonic_ns(), detail=detail))

    async def _listen(self) -> None:
        import httpx2

        assert self._client is not None
        headers = {"accept": "text/event-stream", "mcp-session-id": self.session_id or ""}
        if self.protocol_version:
            headers["mcp-protocol-version"] = self.protocol_version
        try:
            async with self._client.stream(
                "GET", self.url, headers=headers, timeout=httpx2.Timeout(None)
            ) as resp:
                if resp.status_code == 200 and resp.headers.get("content-type", "").startswith(
                    "text/event-stream"
                ):
                    await self._read_sse(resp)
        except httpx2.HTTPError:
            pass  # the GET stream is optional: a server may refuse it (405) or drop it

    async def _read_sse(self, resp: httpx2.Response) -> None:
        data: list[str] = []
        async for line in resp.aiter_lines():
            if line == "":
                if data:
                    self._deliver("\n".join(data).encode())
                data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            self._deliver("\n".join(data).encode())

    def _deliver(self, raw: bytes) -> None:
        if not raw.strip():
            return  # SSE priming events carry an empty data field
        with contextlib.suppress(ValueError):
            message = json.loads(raw)
            result = message.get("result") if isinstance(message, dict) else None
            if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                self.protocol_version = result["protocolVersion"]
        self.inbound.put_nowait(Inbound("frame", time.monotonic_ns(), raw))

    async def close_input(self) -> None:
        self._closed = True

    async def cut(self) -> None:
        self._closed = True
        for task in list(self._posts):
            task.cancel()

    def exited(self) -> bool:
        return False

    async def finish(self, grace_s: float = EXIT_GRACE_S) -> ExitInfo:
        """Wait for replies still streaming, end a legacy session with DELETE, close."""
        self._closed = True
        if self._posts:
            _done, pending = await asyncio.wait(set(self._posts), timeout=grace_s)
            for task in pending:
                task.cancel()
        if self._get_stream is not None:
            self._get_stream.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._get_stream
        if self._client is not None:
            if self.session_id:
                with contextlib.suppress(Exception):
                    await self._client.delete(
                        self.url,
                        headers={"mcp-session-id": self.session_id},
                        timeout=grace_s,
                    )
            await self._client.aclose()
        self.inbound.put_nowait(Inbound("eof", time.monotonic_ns()))
        self.inbound.put_nowait(Inbound("end", time.monotonic_ns()))
        return ExitInfo(None, None, False)
