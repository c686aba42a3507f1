"""The stdio bridge to a Streamable HTTP server: how an attached HTTP entry works with no proxy.

A host config's HTTP entry points at a URL; to record it, `attach` rewrites it into a stdio entry
that runs `blackbox bridge URL`. The bridge is the stdio tap (recorder/capture/taps/stdio.py, so the
journal, faults and sealing are the tap's own) wrapped around this module run as a child process:
a relay that reads JSON-RPC messages from stdin, one per line, POSTs each to the server with the
headers of the entry (credentials included: they stay in the child's environment, never in a
record), and writes every message the server sends back (a JSON body, or each `data:` of an SSE
reply, or of the GET stream a session opens for the server's own requests) to stdout, one per
line. `Mcp-Session-Id` and `Mcp-Protocol-Version` are kept and sent back as the specification
says; the session is ended with DELETE when the host closes stdin.

A request the server cannot answer (unreachable, HTTP error) gets a JSON-RPC error reply with its
id, so the host never waits for an answer that will not come.

    python -m blackbox.recorder.capture.taps.bridge URL

(headers come in BLACKBOX_BRIDGE_HEADERS, a JSON object)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from blackbox.recorder.log import encode_json

HEADERS_ENV = "BLACKBOX_BRIDGE_HEADERS"
BRIDGE_ERROR = -32000
ACCEPT = "application/json, text/event-stream"


def parse_header(text: str) -> tuple[str, str]:
    """`Name: value` (as curl takes it) -> (name, value); ValueError when there is no name."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        raise ValueError(f"not a header: {text!r} (use 'Name: value')")
    return name.strip(), value.strip()


def compact(message: Any) -> bytes:
    return encode_json(message)


def one_line(body: bytes) -> bytes | None:
    """A message body as one stdout line (re-encoded only when it spans lines)."""
    body = body.strip()
    if not body:
        return None
    if b"\n" not in body:
        return body
    try:
        return compact(json.loads(body))
    except ValueError:
        return body.replace(b"\r", b"").replace(b"\n", b" ")


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """The `data` of each server-sent event (empty priming events skipped)."""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data and "".join(data).strip():
                yield "\n".join(data).encode("utf-8")
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data and "".join(data).strip():
        yield "\n".join(data).encode("utf-8")


class Bridge:
    """One host connection: stdin lines out as POSTs, every server message back on stdout."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        import httpx2

        self.url = url
        self.headers = headers
        self.client = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=None))
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.tasks: set[asyncio.Task] = set()
        self.get_stream: asyncio.Task | None = None
        self.out = sys.stdout.buffer
        self.out_lock = asyncio.Lock()

    def _headers(self) -> dict[str, str]:
        headers = {**self.headers, "accept": ACCEPT, "content-type": "application/json"}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        if self.protocol_version:
            headers["mcp-protocol-version"] = self.protocol_version
        return headers

    async def write(self, line: bytes) -> None:
        async with self.out_lock:
            self.out.write(line + b"\n")
            self.out.flush()

    def _learn(self, line: bytes) -> None:
        """Keep the negotiated protocol version (sent back on every later request)."""
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            result = json.loads(line).get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(version, str):
                self.protocol_version = version

    async def _deliver(self, response: Any) -> None:
        kind = response.headers.get("content-type", "")
        if "text/event-stream" in kind:
            async for data in sse_data(response.aiter_lines()):
                line = one_line(data)
                if line is not None:
                    self._learn(line)
                    await self.write(line)
            return
        line = one_line(await response.aread())
        if line is not None:
            self._learn(line)
            await self.write(line)

    async def _fail(self, message: Any, why: str) -> None:
        if isinstance(message, dict) and "method" in message and "id" in message:
            error = {"code": BRIDGE_ERROR, "message": f"blackbox bridge: {why}"}
            await self.write(compact({"jsonrpc": "2.0", "id": message["id"], "error": error}))
        else:
            sys.stderr.write(f"blackbox bridge: {why}\n")
            sys.stderr.flush()

    async def post(self, raw: bytes) -> None:
        import httpx2

        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        try:
            async with self.client.stream(
                "POST", self.url, content=raw, headers=self._headers()
            ) as response:
                sid = response.headers.get("mcp-session-id")
                if sid:
                    self.session_id = sid
                if response.status_code >= 400:
                    body = (await response.aread())[:200].decode("utf-8", "replace")
                    line = one_line(body.encode())
                    if line and line.startswith(b"{") and b'"error"' in line:
                        await self.write(line)  # the server's own JSON-RPC error
                    else:
                        await self._fail(message, f"HTTP {response.status_code} from {self.url}")
                    return
                if response.status_code == 202:
                    await response.aread()
                else:
                    await self._deliver(response)
        except httpx2.HTTPError as exc:
            await self._fail(message, f"cannot reach {self.url}: {exc or type(exc).__name__}")
            return
        if self.session_id and self.get_stream is None:
            self.get_stream = asyncio.create_task(self.listen())

    async def listen(self) -> None:
        """The GET stream a server uses for its own requests and notifications (optional)."""
        import httpx2

        headers = {k: v for k, v in self._headers().items() if k != "content-type"}
        headers["accept"] = "text/event-stream"
        with contextlib.suppress(httpx2.HTTPError):
            async with self.client.stream("GET", self.url, headers=headers) as response:
                if response.status_code == 200:
                    await self._deliver(response)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 30)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                break
            raw = line.rstrip(b"\r\n")
            if not raw.strip():
                continue
            # Each POST on its own: a reply that streams for a while holds nothing back. The
            # first (the handshake) is awaited, so later requests carry its session id.
            if self.session_id is None and not self.tasks:
                await self.post(raw)
                continue
            task = asyncio.create_task(self.post(raw))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=30)
        await self.close()

    async def close(self) -> None:
        import httpx2

        if self.get_stream is not None:
            self.get_stream.cancel()
        if self.session_id:
            with contextlib.suppress(httpx2.HTTPError):
                await self.client.delete(self.url, headers=self._headers(), timeout=5)
        await self.client.aclose()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m blackbox.recorder.capture.taps.bridge URL\n")
        return 2
    try:
        headers = json.loads(os.environ.get(HEADERS_ENV) or "{}")
    except ValueError:
        headers = {}
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(Bridge(argv[0], headers).run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
