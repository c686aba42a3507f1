"""The HTTP proxy's wire half: the request body is read whole, the journaled request goes upstream,
its answer comes back.

Why it exists: these are the proxy's hot loops (a pass per chunk or SSE event), and they read best
apart from the ASGI entry and the session bookkeeping of `blackbox.recorder.capture.taps.http`.
`ResponseRelays` is a mixin of `HttpProxyTap`, not an object of its own, so that a relay's calls
into the recorder (`self._record`, `self._fault`, ...) cost no more than calls within one class.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, NoReturn

import httpx2
from blackbox.recorder.capture.taps.http_exchange import Exchange, ProxySettings, Receive, Send
from blackbox.recorder.capture.taps.http_headers import forwardable
from blackbox.recorder.capture.taps.http_sse import SseEvent, SseParser
from blackbox.recorder.log import Direction, Kind

if TYPE_CHECKING:
    from blackbox.recorder.capture.taps.http_sessions import SessionRouter

URL_CACHE_SIZE = 256
EVIDENCE_BYTES = 2048

_HANDSHAKE_METHODS = {"initialize", "notifications/initialized", "server/discover"}
_DISCOVERY_METHODS = {
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
}
_DROP_REQUEST = frozenset({b"content-length", b"accept-encoding", b"expect"})
_DROP_RESPONSE_STREAM = frozenset({b"content-length"})


class BodyTooLarge(Exception):
    """The request body is over the limit; the message says how it is known."""


class BodyIncomplete(Exception):
    """The client went away before its request body ended: `detail` says how far it got (the
    fault's sentence and the exchange's note), `evidence` is the fault's extra fields."""

    def __init__(self, detail: str, evidence: dict[str, object]) -> None:
        super().__init__(detail)
        self.detail = detail
        self.evidence = evidence

    @classmethod
    def of(cls, ex: Exchange, body: bytes, declared: int | None) -> BodyIncomplete:
        """Say how far `body` got: of the declared length, or into a chunked body."""
        size = len(body)
        closed = "arrived before the client closed the connection"
        evidence: dict[str, object] = {"received_bytes": size}
        if declared is not None:
            evidence["declared_bytes"] = declared
            framing = f"{size} of {declared} bytes {closed}"
        elif b"chunked" in (_transfer_coding(ex) or b""):
            framing = f"{size} bytes of a chunked body {closed}, before its last chunk"
        else:
            framing = f"{size} bytes {closed}"
        if body:
            # The start of what did arrive, as `_cut` keeps a cut reply's: evidence of which call
            # was lost, never a message (no frame is recorded for it).
            evidence["partial"] = body[:EVIDENCE_BYTES].decode("utf-8", "replace")
        return cls(f"request body incomplete: {framing}; not forwarded", evidence)


def _transfer_coding(ex: Exchange) -> bytes | None:
    """The request's Transfer-Encoding, lower-cased (ASGI header names are already)."""
    for key, value in ex.request_headers:
        if key == b"transfer-encoding":
            return value.lower()
    return None


def _has_body(ex: Exchange, declared: int | None) -> bool:
    """Whether the request's headers announce a body (HTTP/1.1: a Content-Length above 0 or a
    Transfer-Encoding; without either a request has none)."""
    if declared is not None:
        return declared > 0
    return _transfer_coding(ex) is not None


class StreamAborted(Exception):
    """Raised inside the ASGI app to make uvicorn drop the client connection, the way the
    upstream dropped ours (a stream cut mid-event, a timeout mid-stream)."""


def fault_stage(method: str | None) -> str:
    """The lifecycle stage a fault is filed under, from the first method of the request."""
    if method is None:
        return "transport"
    if method in _HANDSHAKE_METHODS:
        return "handshake"
    if method in _DISCOVERY_METHODS:
        return "discovery"
    return "execution"


def _is_tls_error(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLError) or "SSL" in type(cur).__name__:
            return True
        if "certificate verify failed" in str(cur) or "[SSL" in str(cur):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


class ResponseRelays:
    """Reading the request body, forwarding and the response relays of `HttpProxyTap`.

    The tap provides the state set in its `__init__` (annotated here) and the methods the relays
    call on it: `_upstream_transport` (the pool), `_record`, `_fault`, `_reply_error`, and what the
    upstream's answer tells the recorder (`_after_headers`, `_server_message`, `_endpoint`,
    `_note_sse`).
    """

    settings: ProxySettings
    router: SessionRouter
    _timeouts: dict[str, Any]
    _origin: str
    _urls: dict[str, httpx2.URL]
    _upstream_netloc: str
    _shown_upstream: str

    if TYPE_CHECKING:  # provided by `HttpProxyTap`; declared here only for the type checker

        def _upstream_transport(self) -> httpx2.AsyncBaseTransport: ...

        def _record(
            self, ex: Exchange, kind: str, direction: str, raw: bytes, **kw: Any
        ) -> int: ...

        def _fault(
            self,
            ex: Exchange,
            name: str,
            stage: str,
            detail: str,
            seq: int | None = None,
            **evidence: object,
        ) -> None: ...

        async def _reply_error(self, send: Send, ex: Exchange, status: int, text: str) -> None: ...

        def _after_headers(self, ex: Exchange, response: httpx2.Response) -> None: ...

        def _server_message(self, ex: Exchange, data: bytes) -> int: ...

        def _endpoint(
            self, ex: Exchange, data: bytes, raw: bytes, entry: dict[str, object]
        ) -> bytes: ...

        def _note_sse(self, ex: Exchange, entry: dict[str, object]) -> None: ...

    # -- the request body ----------------------------------------------------------------------

    async def _read_body(self, receive: Receive, ex: Exchange, declared: int | None) -> bytes:
        """The request body, whole, or an exception: `BodyTooLarge` past the limit,
        `BodyIncomplete` when the client closed its connection (or only its sending half) before
        the body ended.

        The server reports that close as `http.disconnect`, not as an error; the bytes read until
        then are a prefix, and forwarded they would reach the upstream as a complete, shorter
        request (the Content-Length is the proxy's own). h11 ends a body (`more_body` false) only
        once its Content-Length is reached or its last chunk came, so a body that ends that way
        is whole. `declared` is the request's Content-Length, if it gave one.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                ex.client_disconnected = True
                ex.bytes_in = size
                body = b"".join(chunks)
                if size == declared or (size == 0 and not _has_body(ex, declared)):
                    # All of it arrived (or there was none to send): the request is whole, and is
                    # forwarded as before; the relay notices the client is gone.
                    return body
                raise BodyIncomplete.of(ex, body, declared)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_request_bytes:
                ex.bytes_in = size
                raise BodyTooLarge(f"{size} bytes received before the refusal")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        ex.bytes_in = size
        return b"".join(chunks)

    # -- forwarding ----------------------------------------------------------------------------

    async def _forward(self, ex: Exchange, body: bytes, receive: Receive, send: Send) -> None:
        headers = forwardable(ex.request_headers, _DROP_REQUEST)
        if self.settings.rewrite_host:
            headers = [(k, v) for k, v in headers if k.lower() != b"host"]
            headers.append((b"host", self._upstream_netloc.encode()))
        headers.append((b"accept-encoding", b"identity"))
        url = self._urls.get(ex.target)
        if url is None:
            url = httpx2.URL(self._origin + ex.target)
            if len(self._urls) < URL_CACHE_SIZE:
                self._urls[ex.target] = url
        request = httpx2.Request(
            ex.method,
            url,
            headers=headers,
            content=body if body or ex.method in ("POST", "PUT", "PATCH") else None,
            extensions={"timeout": self._timeouts},
        )
        upstream = self._shown_upstream
        try:
            response = await self._upstream_transport().handle_async_request(request)
            response.request = request
        except httpx2.TimeoutException as exc:
            connect = isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout)
            self._fault(
                ex,
                "timeout",
                "transport" if connect else fault_stage(ex.first_method),
                f"upstream {upstream} did not {'connect' if connect else 'answer'} in time "
                f"({type(exc).__name__})",
                timeout_s=self.settings.connect_timeout_s if connect else self.settings.timeout_s,
            )
            await self._reply_error(send, ex, 504, f"upstream {upstream} did not answer in time")
            return
        except httpx2.RequestError as exc:
            tls = _is_tls_error(exc)
            detail = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
            why = "failed the TLS handshake" if tls else "is unreachable"
            self._fault(
                ex,
                "tls_error" if tls else "upstream_unreachable",
                "transport",
                f"upstream {upstream} {why}: {detail}",
            )
            await self._reply_error(send, ex, 502, f"upstream {upstream} {why} ({detail})")
            return
        try:
            ex.upstream_answered = True
            ex.status = response.status_code
            ex.content_type = response.headers.get("content-type")
            ex.response_headers = [(k.lower(), v) for k, v in response.headers.raw]
            self._after_headers(ex, response)
            ctype = (ex.content_type or "").split(";")[0].strip().lower()
            if ctype == "text/event-stream":
                await self._until_disconnect(ex, receive, self._relay_sse(ex, response, send))
            elif ctype == "application/json" or ctype.endswith("+json"):
                await self._relay_json(ex, response, send)
            else:
                await self._until_disconnect(ex, receive, self._relay_bytes(ex, response, send))
        finally:
            await response.aclose()

    # -- relays --------------------------------------------------------------------------------

    async def _until_disconnect(
        self, ex: Exchange, receive: Receive, relay: Coroutine[Any, Any, None]
    ) -> None:
        """Run a streaming relay, stopping it if the client goes away (else an endless GET stream
        would hold its upstream connection forever)."""
        relay_task = asyncio.ensure_future(relay)

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({relay_task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not relay_task.done():
                ex.client_disconnected = watcher.done()
                relay_task.cancel()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            with contextlib.suppress(asyncio.CancelledError):
                await relay_task

    async def _start_response(
        self, send: Send, ex: Exchange, response: httpx2.Response, drop: frozenset[bytes]
    ) -> None:
        headers = forwardable(ex.response_headers, drop)
        ex.response_started = True
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )

    async def _relay_json(self, ex: Exchange, response: httpx2.Response, send: Send) -> None:
        """A JSON reply is one message: read it whole, journal it, then send it (one too large to
        hold is streamed on and only its first bytes recorded).

        With a Content-Length the message is journaled and sent the moment its last byte is in
        hand, before the upstream response is wound up (end of message, connection back to the
        pool), as a streaming relay would: the client never waits for the proxy's
        bookkeeping of the upstream connection."""
        chunks: list[bytes] = []
        size = 0
        limit = self.settings.max_json_reply_bytes
        declared = response.headers.get("content-length", "")
        complete_at = int(declared) if declared.isdigit() else -1
        started = False  # oversize: streamed on as it comes, only its first bytes kept
        delivered = False  # the whole message was journaled and sent
        try:
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size <= limit:
                    chunks.append(chunk)
                    if size == complete_at:
                        await self._deliver_json(ex, response, send, b"".join(chunks), True)
                        delivered = True
                    continue
                if not started:
                    await self._start_response(send, ex, response, frozenset())
                    started = True
                    head = b"".join(chunks)
                    await send({"type": "http.response.body", "body": head, "more_body": True})
                    chunks = [head, chunk[: limit - len(head)]]  # the record keeps `limit` bytes
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (httpx2.TimeoutException, httpx2.TransportError) as exc:
            fault = "timeout" if isinstance(exc, httpx2.TimeoutException) else "stream_cut"
            pending = b"" if delivered else b"".join(chunks)
            await self._cut(ex, send, response, pending, started or delivered, fault, exc)
        ex.bytes_out = size
        if delivered:
            await send({"type": "http.response.body", "body": b""})
            return
        if started:
            body = b"".join(chunks)
            seq = self._record(ex, Kind.FRAME, Direction.SERVER_TO_CLIENT, body, raw_size=size)
            self._fault(
                ex,
                "oversize_frame",
                fault_stage(ex.first_method),
                f"a JSON reply of {size} bytes exceeds {limit}: its first {len(body)} bytes kept",
                seq=seq,
                size=size,
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self._deliver_json(ex, response, send, b"".join(chunks), False)

    async def _deliver_json(
        self, ex: Exchange, response: httpx2.Response, send: Send, body: bytes, more: bool
    ) -> None:
        """Journal a whole JSON reply, then send it (`more`: the final empty body follows)."""
        if body.strip():
            self._server_message(ex, body)
        await self._start_response(send, ex, response, frozenset())
        await send({"type": "http.response.body", "body": body, "more_body": more})

    async def _relay_sse(self, ex: Exchange, response: httpx2.Response, send: Send) -> None:
        """Relay an SSE stream event by event: journal each event's message, then forward the
        event's bytes. Only an unfinished event is ever held back."""
        parser = SseParser()
        await self._start_response(send, ex, response, _DROP_RESPONSE_STREAM)
        try:
            async for chunk in response.aiter_raw():
                events = parser.feed(chunk)
                if events:
                    await self._sse_events(ex, events, send)
        except httpx2.TimeoutException:
            await self._cut(ex, send, response, parser.pending(), True, "timeout")
        except httpx2.TransportError as exc:
            await self._cut(ex, send, response, parser.pending(), True, "stream_cut", exc)
        tail = parser.finish()  # a final CR ends a line once the body is over
        if tail:
            await self._sse_events(ex, tail, send)
        pending = parser.pending()
        if pending.strip():
            # The upstream ended its body cleanly but mid-event: the event never completed.
            await self._cut(ex, send, response, pending, True, "stream_cut")
        await send({"type": "http.response.body", "body": pending})

    async def _sse_events(self, ex: Exchange, events: list[SseEvent], send: Send) -> None:
        """Journal what complete events carry, then forward their bytes in one write."""
        out: list[bytes] = []
        for event in events:
            raw = event.raw
            entry: dict[str, object] = {}
            message_event = event.event in (None, "message")
            if event.event == "endpoint" and event.data is not None:
                raw = self._endpoint(ex, event.data, raw, entry)
            elif event.data is not None and event.data.strip() and message_event:
                entry["seq"] = self._server_message(ex, event.data)
            if event.id is not None:
                entry["id"] = event.id
            if event.event is not None:
                entry["event"] = event.event
            if event.retry is not None:
                entry["retry"] = event.retry
            if entry:
                self._note_sse(ex, entry)
            out.append(raw)
        data = b"".join(out)
        ex.bytes_out += len(data)
        await send({"type": "http.response.body", "body": data, "more_body": True})

    async def _relay_bytes(self, ex: Exchange, response: httpx2.Response, send: Send) -> None:
        """Anything else (an HTML error page, plain text): streamed through; its start kept as
        evidence on the exchange's record when it is an error."""
        await self._start_response(send, ex, response, frozenset())
        kept = b""
        try:
            async for chunk in response.aiter_raw():
                if len(kept) < EVIDENCE_BYTES:
                    kept += chunk[: EVIDENCE_BYTES - len(kept)]
                ex.bytes_out += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx2.TimeoutException:
            await self._cut(ex, send, response, b"", True, "timeout")
        except httpx2.TransportError as exc:
            await self._cut(ex, send, response, b"", True, "stream_cut", exc)
        await send({"type": "http.response.body", "body": b""})
        if kept and ex.status is not None and ex.status >= 400:
            ex.note = kept.decode("utf-8", "replace")

    async def _cut(
        self,
        ex: Exchange,
        send: Send,
        response: httpx2.Response,
        pending: bytes,
        started: bool,
        fault: str,
        exc: BaseException | None = None,
    ) -> NoReturn:
        """The upstream stopped mid-body: record it, give the client the same partial bytes,
        then drop the client's connection as ours was dropped."""
        if fault == "timeout":
            detail = f"the upstream sent nothing for {self.settings.timeout_s:g}s mid-response"
        else:
            why = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
            detail = f"the upstream's stream ended in the middle of a message{why}"
        self._fault(
            ex,
            fault,
            fault_stage(ex.first_method),
            detail,
            pending_bytes=len(pending),
            partial=pending[:EVIDENCE_BYTES].decode("utf-8", "replace"),
        )
        if ex.sse_stream and ex.session is not None:
            self.router.close(ex.session, fault, "crashed")
        if not started:
            await self._start_response(send, ex, response, _DROP_RESPONSE_STREAM)
        if pending:
            ex.bytes_out += len(pending)
            await send({"type": "http.response.body", "body": pending, "more_body": True})
        raise StreamAborted(detail)
