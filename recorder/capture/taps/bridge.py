"""The stdio bridge to an HTTP server, in either era: how an attached HTTP entry works with no
proxy.

A host config's HTTP entry points at a URL; to record it, `attach` rewrites it into a stdio entry
that runs `blackbox bridge URL`. The bridge is the stdio tap (recorder/capture/taps/stdio.py, so the
journal, faults and sealing are the tap's own) wrapped around this module run as a child process:
a relay that reads JSON-RPC messages from stdin, one per line, POSTs each to the server with the
headers of the entry (credentials included: they stay in the child's environment, never in a
record), and writes every message the server sends back (a JSON body, or each `data:` of an SSE
reply, or of the GET stream a session opens for the server's own requests) to stdout, one per
line. `Mcp-Session-Id` and `Mcp-Protocol-Version` are kept and sent back as the specification
says; the session is ended with DELETE when the host closes stdin.

A server of the legacy HTTP+SSE era (2024-11-05) is spoken to its way: a GET opens the event
stream, its `endpoint` event names where to POST, and every answer comes back on the stream.
With the transport `auto` (the default) the bridge does what the specification's
backwards-compatibility section tells a client to: POST the first message as Streamable HTTP, and
on 400, 404 or 405 open the legacy stream at the same URL and send it there.

A request the server cannot answer (unreachable, HTTP error) gets a JSON-RPC error reply with its
id, so the host never waits for an answer that will not come.

    python -m blackbox.recorder.capture.taps.bridge URL [auto|streamable-http|sse]

(headers come in BLACKBOX_BRIDGE_HEADERS, a JSON object)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urljoin

from blackbox.recorder.log import encode_json

HEADERS_ENV = "BLACKBOX_BRIDGE_HEADERS"
BRIDGE_ERROR = -32000
ACCEPT = "application/json, text/event-stream"
TRANSPORTS = ("auto", "streamable-http", "sse")
# What a legacy server answers a Streamable HTTP POST with (the specification's list).
LEGACY_STATUSES = (400, 404, 405)
ENDPOINT_WAIT = 30.0  # seconds for a legacy stream to name its endpoint
ANSWER_WAIT = 10.0  # seconds, at the end, for answers still due on a legacy stream


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


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, bytes]]:
    """(type, data) of each server-sent event (empty priming events skipped)."""
    event = "message"
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data and "".join(data).strip():
                yield event, "\n".join(data).encode("utf-8")
            event, data = "message", []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("event:"):
            event = line[6:].strip() or "message"
    if data and "".join(data).strip():
        yield event, "\n".join(data).encode("utf-8")


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """The `data` of each server-sent event (empty priming events skipped)."""
    async for _, data in sse_events(lines):
        yield data


def request_id(message: Any) -> Any:
    """The id of a request (None for a notification or a response)."""
    if isinstance(message, dict) and "method" in message:
        return message.get("id")
    return None


class Bridge:
    """One host connection: stdin lines out as POSTs, every server message back on stdout."""

    def __init__(self, url: str, headers: dict[str, str], transport: str = "auto") -> None:
        import httpx2

        self.url = url
        self.headers = headers
        self.transport = transport
        self.answered = False  # a Streamable HTTP POST succeeded: no fallback from now on
        self.endpoint: asyncio.Future[str] | None = None  # legacy: where to POST
        self.legacy_stream: asyncio.Task | None = None
        self.due: set[Any] = set()  # legacy: ids of requests whose answer has not come
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
        if self.transport == "sse":
            await self.post_legacy(raw, message)
            return
        try:
            async with self.client.stream(
                "POST", self.url, content=raw, headers=self._headers()
            ) as response:
                sid = response.headers.get("mcp-session-id")
                if sid:
                    self.session_id = sid
                fallback = self.transport == "auto" and not self.answered
                if fallback and response.status_code in LEGACY_STATUSES:
                    await response.aread()
                    self.transport = "sse"  # sent again below, outside this response
                elif response.status_code >= 400:
                    body = (await response.aread())[:200].decode("utf-8", "replace")
                    line = one_line(body.encode())
                    if line and line.startswith(b"{") and b'"error"' in line:
                        await self.write(line)  # the server's own JSON-RPC error
                    else:
                        await self._fail(message, f"HTTP {response.status_code} from {self.url}")
                    return
                elif response.status_code == 202:
                    self.answered = True
                    await response.aread()
                else:
                    self.answered = True
                    await self._deliver(response)
        except httpx2.HTTPError as exc:
            await self._fail(message, f"cannot reach {self.url}: {exc or type(exc).__name__}")
            return
        if self.transport == "sse":
            await self.post_legacy(raw, message)
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

    async def post_legacy(self, raw: bytes, message: Any) -> None:
        """POST to the endpoint the legacy stream named; the answer comes on the stream."""
        import httpx2

        if self.endpoint is None:
            self.endpoint = asyncio.get_running_loop().create_future()
            self.legacy_stream = asyncio.create_task(self.listen_legacy())
        try:
            endpoint = await asyncio.wait_for(asyncio.shield(self.endpoint), ENDPOINT_WAIT)
        except (TimeoutError, OSError) as exc:
            await self._fail(message, f"no legacy HTTP+SSE stream at {self.url}: {exc}")
            return
        rid = request_id(message)
        if rid is not None:
            self.due.add(json.dumps(rid))
        headers = {**self.headers, "content-type": "application/json"}
        try:
            response = await self.client.post(endpoint, content=raw, headers=headers)
        except httpx2.HTTPError as exc:
            self.due.discard(json.dumps(rid))
            await self._fail(message, f"cannot reach {endpoint}: {exc or type(exc).__name__}")
            return
        if response.status_code >= 400:
            self.due.discard(json.dumps(rid))
            await self._fail(message, f"HTTP {response.status_code} from {endpoint}")

    async def listen_legacy(self) -> None:
        """The legacy event stream: its `endpoint` event, then every message of the server."""
        import httpx2

        assert self.endpoint is not None
        headers = {**self.headers, "accept": "text/event-stream"}
        why = "the stream ended before naming its endpoint"
        try:
            async with self.client.stream("GET", self.url, headers=headers) as response:
                if response.status_code != 200:
                    why = f"HTTP {response.status_code} to GET"
                    return
                async for event, data in sse_events(response.aiter_lines()):
                    if event == "endpoint":
                        where = urljoin(self.url, data.decode("utf-8", "replace").strip())
                        if not self.endpoint.done():
                            self.endpoint.set_result(where)
                        continue
                    line = one_line(data)
                    if line is not None:
                        self._answered(line)
                        await self.write(line)
        except httpx2.HTTPError as exc:
            why = f"{exc or type(exc).__name__}"
        finally:
            if not self.endpoint.done():
                self.endpoint.set_exception(ConnectionError(why))

    def _answered(self, line: bytes) -> None:
        self._learn(line)
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            message = json.loads(line)
            if "method" not in message:
                self.due.discard(json.dumps(message.get("id")))

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
        # A legacy server answers on its stream: wait (a while) for what is still due.
        deadline = time.monotonic() + ANSWER_WAIT
        while self.due and self.legacy_stream is not None and not self.legacy_stream.done():
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        await self.close()

    async def close(self) -> None:
        import httpx2

        for stream in (self.get_stream, self.legacy_stream):
            if stream is not None:
                stream.cancel()
        if self.session_id:
            with contextlib.suppress(httpx2.HTTPError):
                await self.client.delete(self.url, headers=self._headers(), timeout=5)
        await self.client.aclose()


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[1] not in TRANSPORTS):
        choices = "|".join(TRANSPORTS)
        sys.stderr.write(
            f"usage: python -m blackbox.recorder.capture.taps.bridge URL [{choices}]\n"
        )
        return 2
    try:
        headers = json.loads(os.environ.get(HEADERS_ENV) or "{}")
    except ValueError:
        headers = {}
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(Bridge(argv[0], headers, argv[1] if len(argv) > 1 else "auto").run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
