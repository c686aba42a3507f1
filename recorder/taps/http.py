"""The HTTP proxy tap: a streaming reverse proxy that records every MCP message it forwards.

Why it exists: remote MCP servers speak HTTP, and the current protocol (2026-07-28) is stateless
HTTP first, so the recorder must sit on that wire too. The host points at this proxy instead of the
server; the proxy forwards each exchange unchanged and journals what crossed it.

Design decisions:

- One ASGI application served by uvicorn; upstream requests go through the SDK's httpx fork
  (`httpx2`). Nothing new to install, and the same stack the SDK itself runs on.
- Paths are forwarded unchanged to the upstream origin: a client points at
  `http://LISTEN<upstream path>` (e.g. `http://127.0.0.1:8750/mcp`). So relative URLs the server
  hands out (a 2024-11-05 `endpoint` event) stay valid; an absolute one naming the upstream origin
  is rewritten to the proxy.
- Headers are forwarded as sent, Host included (an upstream's DNS-rebinding protection must see
  what the client sent; `rewrite_host` is for virtual-hosted upstreams), hop-by-hop ones dropped,
  and `Accept-Encoding` forced to `identity` so that what is recorded is readable JSON.
- Journal first: every record is appended to the journal before the bytes it describes are
  forwarded. A request body is read whole (one message), journaled, then sent; a JSON reply is read
  whole (one message), journaled, then sent; an SSE stream is relayed event by event, each event
  journaled before its bytes go on, so nothing is buffered beyond one event. If the journal cannot
  be written the proxy answers 503 and forwards nothing (fail closed).
- What is recorded: each JSON-RPC message of a request body (c2s), of a JSON reply and of each SSE
  event's `data` (s2c) as a `frame` whose raw bytes are the message exactly as sent; per exchange
  an `http_exchange` record (method, path, status, content type, duration, headers with secrets
  fingerprinted, and the SSE event ids, event types and retry times in `sse_events`, each tied to
  the seq of the frame it carried); `fault` records for 4xx/5xx, unreachable or TLS-failing
  upstreams, timeouts, streams cut mid-event and invalid JSON. Faults never change what the client
  gets: a cut stream is cut for the client too (after the partial bytes), and only an upstream that
  cannot be reached (502) or does not answer in time (504) gets a reply made by the proxy, a
  JSON-RPC error that says so.
- Recording sessions follow `recorder.taps.http_sessions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import httpx2
import orjson
import uvicorn

from recorder import __version__
from recorder.errors import BlackboxError
from recorder.journal import Journal, JournalError
from recorder.jsonrpc import META_CLIENT_INFO, META_PROTOCOL_VERSION, parse
from recorder.model import Direction, Kind
from recorder.shipper import Shipper, ship_leftovers_quietly
from recorder.store import EventStore
from recorder.taps.http_headers import forwardable, recorded
from recorder.taps.http_sessions import (
    DEFAULT_IDLE_GAP_S,
    RecordingSession,
    SessionRouter,
    trace_id,
)
from recorder.taps.http_sse import SseEvent, SseParser

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Notice = Callable[[str], None]

DEFAULT_LISTEN = "127.0.0.1:8750"
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_JSON_REPLY_BYTES = 64 * 1024 * 1024
SSE_EVENTS_PER_RECORD = 500
URL_CACHE_SIZE = 256
EVIDENCE_BYTES = 2048
PROXY_ERROR_CODE = -32000  # JSON-RPC implementation-defined server error

_HANDSHAKE_METHODS = {"initialize", "notifications/initialized", "server/discover"}
_DISCOVERY_METHODS = {
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
}
_DROP_REQUEST = frozenset({b"content-length", b"accept-encoding", b"expect"})
_DROP_RESPONSE_STREAM = frozenset({b"content-length"})


class ProxyError(BlackboxError):
    """The proxy cannot start as asked (bad upstream URL, listen address in use, ...)."""


class _StreamAborted(Exception):
    """Raised inside the ASGI app to make uvicorn drop the client connection, the way the
    upstream dropped ours (a stream cut mid-event, a timeout mid-stream)."""


class _QuietAbort(logging.Filter):
    """uvicorn logs every exception that leaves an app; a deliberate abort is not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _StreamAborted)


@dataclass(frozen=True)
class ProxySettings:
    """What a proxy forwards to and how it records."""

    upstream: str
    name: str | None = None
    idle_gap_s: float = DEFAULT_IDLE_GAP_S
    timeout_s: float = 300.0
    connect_timeout_s: float = 10.0
    rewrite_host: bool = False
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_json_reply_bytes: int = MAX_JSON_REPLY_BYTES

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProxyError(f"bad upstream URL {self.upstream!r}: give http(s)://HOST[:PORT]/PATH")

    @property
    def origin(self) -> str:
        parts = urlsplit(self.upstream)
        return urlunsplit((parts.scheme, parts.netloc, "", "", ""))

    @property
    def path(self) -> str:
        parts = urlsplit(self.upstream)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    @property
    def server_name(self) -> str:
        """The name sessions are recorded under (and that a policy's `server` globs match)."""
        return self.name or (urlsplit(self.upstream).hostname or "http")


@dataclass
class ProxyStats:
    """Counters a running proxy keeps (read by the CLI and the tests)."""

    exchanges: int = 0
    frames: int = 0
    faults: int = 0
    sessions: int = 0
    refused: int = 0
    fault_names: dict[str, int] = field(default_factory=dict)


def _dumps(value: object) -> bytes:
    """Compact UTF-8 JSON of a record document, by orjson (several times faster than `json`;
    the same text but for the spelling of some floats, which readers parse anyway). What it
    refuses (an integer past 64 bits a client sent in its clientInfo) goes through `json`."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _stage(method: str | None) -> str:
    if method is None:
        return "transport"
    if method in _HANDSHAKE_METHODS:
        return "handshake"
    if method in _DISCOVERY_METHODS:
        return "discovery"
    return "execution"


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


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


@dataclass
class _Exchange:
    """One HTTP exchange in flight: what the records about it need."""

    method: str
    target: str
    remote: str
    request_headers: list[tuple[bytes, bytes]]
    started_ns: int
    session: RecordingSession | None = None
    legacy_id: str | None = None
    trace: str | None = None
    era: str | None = None
    messages: list[dict] = field(default_factory=list)
    first_method: str | None = None
    rpc_id: object = None
    single_request: bool = False
    client_info: object = None
    initialize: bool = False
    request_seq: int | None = None
    status: int | None = None
    content_type: str | None = None
    response_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    sse_events: list[dict] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    upstream_answered: bool = False
    client_disconnected: bool = False
    response_started: bool = False
    sse_stream: bool = False
    note: str | None = None
    partial_records: int = 0


def _messages(value: object) -> list[dict]:
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return []


def _meta(message: dict) -> dict:
    params = message.get("params")
    if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        return params["_meta"]
    return {}


class HttpProxyTap:
    """The ASGI application: forward to the upstream, journal what crosses.

    `journal` receives every record; `policy` (a `recorder.policy.Policy`) gates client messages
    when given; `on_notice` gets one-line messages for the operator (the journal failing).
    """

    def __init__(
        self,
        settings: ProxySettings,
        journal: Journal,
        policy: Any = None,
        on_notice: Notice | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.policy = policy
        self.on_notice = on_notice or (lambda _msg: None)
        self.router = SessionRouter(settings.idle_gap_s)
        self.stats = ProxyStats()
        self._transport = transport
        self._upstream: httpx2.AsyncBaseTransport | None = None
        s = settings
        self._timeouts = httpx2.Timeout(
            connect=s.connect_timeout_s, read=s.timeout_s, write=s.timeout_s, pool=None
        ).as_dict()
        self._origin = settings.origin
        # Parsed upstream URLs by request target: a host sends to one or two paths, and parsing
        # the URL string was a twentieth of a forwarded request's Python work.
        self._urls: dict[str, httpx2.URL] = {}
        self._upstream_netloc = urlsplit(settings.upstream).netloc
        self._journal_failed = False
        self._reaper: asyncio.Task | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def _upstream_transport(self) -> httpx2.AsyncBaseTransport:
        """The connection pool to the upstream, used directly rather than through an
        `AsyncClient`: a client keeps a cookie jar (a Set-Cookie from the upstream would be sent
        on every later request, whichever client made it) and merges its own headers, and a proxy
        wants neither; it also spends a hundred-odd Python calls per request on auth, redirect
        and hook handling the proxy does not use."""
        if self._upstream is None:
            self._upstream = self._transport or httpx2.AsyncHTTPTransport(
                # Long-lived GET streams each hold a connection: never make a request queue.
                limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64),
                trust_env=False,
            )
        return self._upstream

    async def startup(self) -> None:
        self._upstream_transport()
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def shutdown(self) -> None:
        """End every open session (the proxy stops recording them) and close the upstream pool."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        self.end_all("proxy_stopped", "interrupted")
        if self._upstream is not None:
            await self._upstream.aclose()
            self._upstream = None

    def end_all(self, reason: str, outcome: str) -> None:
        for session in self.router.open_sessions():
            self.router.close(session, reason, outcome)
            self._end(session)

    async def _reap(self) -> None:
        interval = max(0.05, min(30.0, self.settings.idle_gap_s / 4))
        while True:
            await asyncio.sleep(interval)
            for session in self.router.expire():
                self._end(session)

    # -- records -------------------------------------------------------------------------------

    def _append(
        self,
        session: RecordingSession,
        kind: str,
        direction: str,
        raw: bytes,
        raw_size: int | None = None,
    ) -> int:
        try:
            seq = self.journal.append(session.session_id, kind, direction, raw, raw_size=raw_size)
        except JournalError as exc:
            if not self._journal_failed:
                self._journal_failed = True
                self.on_notice(f"{exc}; refusing to forward unrecorded traffic (503)")
            raise
        if kind == Kind.FRAME:
            self.stats.frames += 1
        return seq

    def _end(self, session: RecordingSession) -> None:
        if session.ended:
            return
        reason, outcome = session.closing or ("proxy_stopped", "interrupted")
        self.router.mark_ended(session)
        doc = {"reason": reason, "outcome": outcome, "exit_code": None, "signal": None}
        with contextlib.suppress(JournalError):
            self._append(session, Kind.SESSION_ENDED, Direction.NONE, _dumps(doc))

    def _era(
        self, session: RecordingSession, era: object, client_info: object, server_info: object
    ):  # type: ignore[no-untyped-def]
        if session.era is not None or not isinstance(era, str):
            return
        session.era = era
        doc = {"era": era, "client_info": client_info, "server_info": server_info}
        self._append(session, Kind.ERA_DETECTED, Direction.NONE, _dumps(doc))

    def _fault(
        self,
        ex: _Exchange,
        name: str,
        stage: str,
        detail: str,
        seq: int | None = None,
        **evidence: object,
    ) -> None:
        self.stats.faults += 1
        self.stats.fault_names[name] = self.stats.fault_names.get(name, 0) + 1
        doc: dict[str, object] = {
            "fault": name,
            "stage": stage,
            "detail": detail,
            "seq": seq if seq is not None else ex.request_seq,
            "http_method": ex.method,
            "path": ex.target,
        }
        doc.update(evidence)
        self._record(ex, Kind.FAULT, Direction.NONE, _dumps(doc))

    def _exchange_doc(self, ex: _Exchange, partial: bool = False) -> bytes:
        doc: dict[str, object] = {
            "method": ex.method,
            "path": ex.target,
            "status": ex.status,
            "content_type": ex.content_type,
            "duration_ms": round((time.monotonic_ns() - ex.started_ns) / 1e6, 3),
            "request_headers": recorded(ex.request_headers),
            "response_headers": recorded(ex.response_headers),
            "request_seq": ex.request_seq,
            "remote": ex.remote,
            "bytes_in": ex.bytes_in,
            "bytes_out": ex.bytes_out,
            "upstream_answered": ex.upstream_answered,
        }
        if ex.sse_events or ex.content_type == "text/event-stream":
            doc["sse_events"] = ex.sse_events
        if ex.client_disconnected:
            doc["client_disconnected"] = True
        if ex.note:
            doc["note"] = ex.note
        if partial or ex.partial_records:
            doc["partial"] = partial
            doc["part"] = ex.partial_records + 1
        return _dumps(doc)

    # -- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._handle(scope, receive, send)
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await self.startup()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.shutdown()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        else:  # websockets are not part of MCP
            await send({"type": "websocket.close", "code": 1003})

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_path = scope.get("raw_path") or scope["path"].encode()
        target = raw_path.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        client = scope.get("client")
        ex = _Exchange(
            method=scope["method"],
            target=target,
            remote=client[0] if client else "?",
            request_headers=list(scope["headers"]),
            started_ns=time.monotonic_ns(),
        )
        self.stats.exchanges += 1
        try:
            body = await self._read_body(receive, ex)
            self._parse(ex, body)
            if body.strip() or ex.legacy_id is not None:
                self._session(ex)  # a request with a message is routed (and journaled) first
            if body.strip():
                ex.request_seq = self._record(ex, Kind.FRAME, Direction.CLIENT_TO_SERVER, body)
                gated = ex.first_method is not None and self.policy is not None
                if gated and await self._gate(ex, body, send):
                    return
            await self._forward(ex, body, receive, send)
        except _TooLarge:
            await self._reply_plain(send, ex, 413, "request body too large for the recorder")
        except JournalError as exc:
            self.stats.refused += 1
            if ex.response_started:
                raise _StreamAborted(str(exc)) from None
            await self._reply_plain(
                send, ex, 503, f"cannot record this exchange, so it was not forwarded: {exc}"
            )
        finally:
            self._finish(ex)

    def _finish(self, ex: _Exchange) -> None:
        """The exchange's own record, then the session's end if this closed it."""
        if ex.session is None and ex.status is not None and ex.status != 413:
            with contextlib.suppress(JournalError):
                self._session(ex)  # a bodiless exchange is recorded in the client's session
        session = ex.session
        if session is None:
            return
        with contextlib.suppress(JournalError):
            if not session.ended:
                self._append(session, Kind.HTTP_EXCHANGE, Direction.NONE, self._exchange_doc(ex))
        if ex.sse_stream and session.closing is None:
            # A 2024-11-05 stream is its session: when it closes, the session is over.
            reason = "client_closed" if ex.client_disconnected else "server_closed"
            self.router.close(session, reason, "ok")
        if self.router.leave(session):
            self._end(session)

    async def _read_body(self, receive: Receive, ex: _Exchange) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                ex.client_disconnected = True
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_request_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        ex.bytes_in = size
        return b"".join(chunks)

    def _parse(self, ex: _Exchange, body: bytes) -> None:
        """What the request says about itself: its messages, client, trace and legacy session."""
        headers = ex.request_headers
        if body.strip():
            value, _problem = parse(body)
            ex.messages = _messages(value)
            ex.single_request = isinstance(value, dict) and "method" in value and "id" in value
        for message in ex.messages:
            method = message.get("method")
            meta = _meta(message)
            if ex.first_method is None and isinstance(method, str):
                ex.first_method = method
                ex.rpc_id = message.get("id")
            if method == "initialize":
                ex.initialize = True
                params = message.get("params")
                if isinstance(params, dict):
                    ex.client_info = params.get("clientInfo")
            if ex.client_info is None and meta.get(META_CLIENT_INFO) is not None:
                ex.client_info = meta.get(META_CLIENT_INFO)
            if ex.era is None and isinstance(meta.get(META_PROTOCOL_VERSION), str):
                ex.era = meta[META_PROTOCOL_VERSION]
            if ex.trace is None:
                ex.trace = trace_id(meta.get("traceparent"))
        trace = trace_id(_header(headers, b"traceparent"))
        if trace is not None:
            ex.trace = trace
        session_header = _header(headers, b"mcp-session-id")
        if session_header:
            ex.legacy_id = f"mcp:{session_header}"
        elif self.router.knows(f"sse:{ex.target}"):
            ex.legacy_id = f"sse:{ex.target}"

    def _session(self, ex: _Exchange, new_stream: bool = False) -> RecordingSession:
        """The exchange's recording session, routed on first need (journaling a new session's
        start, and the era when the request names it)."""
        if ex.session is not None and not new_stream:
            return ex.session
        routing = self.router.route(
            remote=ex.remote,
            legacy_id=None if new_stream else ex.legacy_id,
            trace=ex.trace,
            client_info=ex.client_info,
            handshake=ex.initialize and ex.legacy_id is None,
            new_stream=new_stream,
        )
        for closed in routing.closed:
            if closed.inflight <= 0:
                self._end(closed)
        session = routing.session
        self.router.enter(session)
        ex.session = session
        if routing.created:
            self.stats.sessions += 1
            doc = {
                "name": self.settings.server_name,
                "transport": "http",
                "command": self.settings.upstream,
                "cwd": None,
                "env_names": [],
                "tap_version": __version__,
                "pid": os.getpid(),
                "replay_of": None,
                "session_rule": session.rule,
                "session_key": session.key,
                "remote": ex.remote,
            }
            self._append(session, Kind.SESSION_STARTED, Direction.NONE, _dumps(doc))
        if ex.initialize:
            session.client_info = ex.client_info
        if session.era is None and ex.era is not None:
            self._era(session, ex.era, ex.client_info, None)
        elif session.era is None and not ex.initialize:
            version = _header(ex.request_headers, b"mcp-protocol-version")
            if version:
                self._era(session, version, session.client_info, None)
        return session

    def _record(self, ex: _Exchange, kind: str, direction: str, raw: bytes, **kw: Any) -> int:
        return self._append(self._session(ex), kind, direction, raw, **kw)

    async def _gate(self, ex: _Exchange, body: bytes, send: Send) -> bool:
        """Consult the policy; True when the request was refused (and answered here)."""
        verdict = self.policy.check(self.settings.server_name, body)
        if verdict is None:
            return False
        for doc in verdict.decision_docs:
            self._record(ex, Kind.DECISION, Direction.NONE, doc)
        if verdict.allowed:
            return False
        ex.note = "denied by policy: not forwarded"
        if verdict.reply is None:
            await self._reply(send, ex, 202, b"", None)
        else:
            self._record(ex, Kind.FRAME, Direction.SERVER_TO_CLIENT, verdict.reply)
            await self._reply(send, ex, 200, verdict.reply, b"application/json")
        return True

    # -- replies made by the proxy -------------------------------------------------------------

    async def _reply(
        self, send: Send, ex: _Exchange, status: int, body: bytes, content_type: bytes | None
    ) -> None:
        headers = [(b"content-length", str(len(body)).encode())]
        if content_type is not None:
            headers.append((b"content-type", content_type))
        ex.status = status
        ex.content_type = content_type.decode() if content_type else None
        ex.response_headers = headers
        ex.bytes_out = len(body)
        ex.response_started = True
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _reply_plain(self, send: Send, ex: _Exchange, status: int, text: str) -> None:
        await self._reply(
            send, ex, status, f"blackbox proxy: {text}\n".encode(), b"text/plain; charset=utf-8"
        )

    async def _reply_error(self, send: Send, ex: _Exchange, status: int, text: str) -> None:
        """The proxy's own answer when the upstream gave none: a JSON-RPC error for a request
        (so an SDK client shows the message), plain text otherwise. Recorded as a frame, since it
        is what the client received."""
        message = f"blackbox proxy: {text}"
        if not ex.single_request:
            await self._reply_plain(send, ex, status, text)
            return
        body = _dumps(
            {
                "jsonrpc": "2.0",
                "id": ex.rpc_id,
                "error": {"code": PROXY_ERROR_CODE, "message": message},
            }
        )
        self._record(ex, Kind.FRAME, Direction.SERVER_TO_CLIENT, body)
        await self._reply(send, ex, status, body, b"application/json")

    # -- forwarding ----------------------------------------------------------------------------

    async def _forward(self, ex: _Exchange, body: bytes, receive: Receive, send: Send) -> None:
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
        upstream = self.settings.upstream
        try:
            response = await self._upstream_transport().handle_async_request(request)
            response.request = request
        except httpx2.TimeoutException as exc:
            connect = isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout)
            self._fault(
                ex,
                "timeout",
                "transport" if connect else _stage(ex.first_method),
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

    def _after_headers(self, ex: _Exchange, response: httpx2.Response) -> None:
        """What the status line and headers say: a session id to bind, a session closed by
        DELETE, an HTTP error."""
        status = response.status_code
        sid = response.headers.get("mcp-session-id")
        if sid and ex.initialize and 200 <= status < 300:
            self.router.bind(f"mcp:{sid}", self._session(ex))
        if ex.method == "DELETE" and status in (200, 202, 204) and ex.legacy_id is not None:
            self.router.close(self._session(ex), "client_closed", "ok")
        if status >= 400:
            self._fault(
                ex,
                "http_status",
                _stage(ex.first_method),
                f"upstream answered HTTP {status} {response.reason_phrase}".strip(),
                status=status,
            )

    async def _until_disconnect(
        self, ex: _Exchange, receive: Receive, relay: Coroutine[Any, Any, None]
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
        self, send: Send, ex: _Exchange, response: httpx2.Response, drop: frozenset[bytes]
    ) -> None:
        headers = forwardable(ex.response_headers, drop)
        ex.response_started = True
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )

    async def _relay_json(self, ex: _Exchange, response: httpx2.Response, send: Send) -> None:
        """A JSON reply is one message: read it whole, journal it, then send it (one too large to
        hold is streamed on and only its first bytes recorded).

        With a Content-Length the message is journaled and sent the moment its last byte is in
        hand, before the upstream response is wound up (end of message, connection back to the
        pool), as a streaming relay would. Measured in paired runs of 4,000 sequential calls:
        the journal-only proxy went from 1.17x to 1.04x the bare proxy (docs/proxy.md)."""
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
                _stage(ex.first_method),
                f"a JSON reply of {size} bytes exceeds {limit}: its first {len(body)} bytes kept",
                seq=seq,
                size=size,
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self._deliver_json(ex, response, send, b"".join(chunks), False)

    async def _deliver_json(
        self, ex: _Exchange, response: httpx2.Response, send: Send, body: bytes, more: bool
    ) -> None:
        """Journal a whole JSON reply, then send it (`more`: the final empty body follows)."""
        if body.strip():
            self._server_message(ex, body)
        await self._start_response(send, ex, response, frozenset())
        await send({"type": "http.response.body", "body": body, "more_body": more})

    def _server_message(self, ex: _Exchange, data: bytes) -> int:
        """Journal one message from the server and learn what it says (the negotiated era); an
        unparseable one is a fault too."""
        seq = self._record(ex, Kind.FRAME, Direction.SERVER_TO_CLIENT, data)
        value, problem = parse(data)
        if problem is not None:
            self._fault(
                ex, "invalid_json", _stage(ex.first_method), "the server sent invalid JSON", seq=seq
            )
            return seq
        session = ex.session
        if session is not None and session.era is None:
            # The initialize result may come on another exchange (the 2024-11-05 SSE stream).
            for message in _messages(value):
                result = message.get("result")
                if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                    self._era(
                        session,
                        result["protocolVersion"],
                        session.client_info,
                        result.get("serverInfo"),
                    )
        return seq

    async def _relay_sse(self, ex: _Exchange, response: httpx2.Response, send: Send) -> None:
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

    async def _sse_events(self, ex: _Exchange, events: list[SseEvent], send: Send) -> None:
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

    def _endpoint(self, ex: _Exchange, data: bytes, raw: bytes, entry: dict[str, object]) -> bytes:
        """A 2024-11-05 stream announced where to POST: the stream is a new session, and an
        absolute endpoint on the upstream's origin is rewritten to go through the proxy."""
        text = data.decode("utf-8", "replace").strip()
        parts = urlsplit(text)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        if not path.startswith("/"):
            path = ex.target.split("?")[0].rsplit("/", 1)[0] + "/" + path
        if not ex.sse_stream:
            ex.sse_stream = True
            if ex.session is not None:  # routed by a legacy id it should not have had
                self.router.leave(ex.session)
            session = self._session(ex, new_stream=True)
            self.router.bind(f"sse:{path}", session)
        entry["endpoint"] = text
        if not parts.netloc or parts.netloc != self._upstream_netloc:
            return raw
        host = _header(ex.request_headers, b"host") or self._upstream_netloc
        rewritten = urlunsplit(("http", host, parts.path, parts.query, parts.fragment))
        entry["rewritten_to"] = rewritten
        return f"event: endpoint\ndata: {rewritten}\n\n".encode()

    def _note_sse(self, ex: _Exchange, entry: dict[str, object]) -> None:
        ex.sse_events.append(entry)
        if len(ex.sse_events) >= SSE_EVENTS_PER_RECORD:
            # A long stream: write what we have so far rather than hold it all in memory.
            self._record(ex, Kind.HTTP_EXCHANGE, Direction.NONE, self._exchange_doc(ex, True))
            ex.partial_records += 1
            ex.sse_events = []

    async def _relay_bytes(self, ex: _Exchange, response: httpx2.Response, send: Send) -> None:
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
        ex: _Exchange,
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
            _stage(ex.first_method),
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
        raise _StreamAborted(detail)


class _TooLarge(Exception):
    pass


# -- serving ------------------------------------------------------------------------------------


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


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it Nagle + delayed ACK add ~40 ms to every reply written in two parts.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "is already in use" if exc.errno == errno.EADDRINUSE else f"fails: {exc.strerror}"
        raise ProxyError(f"cannot listen on {host}:{port}: the address {why}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


_quiet_installed = False


class _Server(uvicorn.Server):
    """uvicorn's server, except that a SIGINT or SIGTERM only stops it gracefully: uvicorn
    re-raises the signal afterwards, which would kill the process before the journal is shipped
    (SIGTERM) or surface as an abort (SIGINT)."""

    stop_signals: list[int]

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        self.stop_signals = []
        with super().capture_signals():
            try:
                yield
            finally:
                self.stop_signals = list(self._captured_signals)
                self._captured_signals.clear()


def _uvicorn_server(app: HttpProxyTap) -> _Server:
    global _quiet_installed
    if not _quiet_installed:
        logging.getLogger("uvicorn.error").addFilter(_QuietAbort())
        _quiet_installed = True
    config = uvicorn.Config(
        app,
        http="h11",
        loop="asyncio",
        ws="none",
        lifespan="on",
        log_config=None,
        access_log=False,
        # Transparency: the upstream's Server and Date headers go through, not uvicorn's.
        server_header=False,
        date_header=False,
        # The client's address is what the proxy records (and routes sessions by): never one
        # taken from an X-Forwarded-For header a local client could set.
        proxy_headers=False,
        timeout_graceful_shutdown=2,
        timeout_keep_alive=30,
    )
    return _Server(config)


class ProxyServer:
    """A proxy tap served on a socket in a background thread (tests, benchmarks, embedding)."""

    def __init__(self, tap: HttpProxyTap, host: str = "127.0.0.1", port: int = 0) -> None:
        self.tap = tap
        self._sock = _bind(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        self._server = _uvicorn_server(tap)
        self._thread = threading.Thread(target=self._run, name="blackbox-proxy", daemon=True)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        """The URL a client uses instead of the upstream's."""
        return self.base_url + self.tap.settings.path

    def _run(self) -> None:
        self._server.run(sockets=[self._sock])

    def start(self, timeout: float = 10.0) -> ProxyServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ProxyError("the proxy did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

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
    # With a store URL the shipper runs in a child process (recorder.taps.http_ship), off the
    # event loop's GIL; without one, in a thread here using store_factory.
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
        "recorder.taps.http_ship",
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
        journal = Journal.create(config.journal_dir)
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
    tap = HttpProxyTap(config.settings, journal, config.policy, config.on_notice)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    url = f"http://{shown}:{bound_port}{config.settings.path}"
    server = _uvicorn_server(tap)
    if config.on_ready is not None:
        config.on_ready(url)
    # What exists now (modules, the app, the pool) lives as long as the proxy: moved out of the
    # collector's reach, a full collection walks only what calls allocate, and its pauses stay
    # out of the tail latency.
    gc.freeze()
    try:
        server.run(sockets=[sock])
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
