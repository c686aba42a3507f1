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
  an `http_exchange` record (method, path and headers with credentials fingerprinted, status,
  content type, duration, and the SSE event ids, event types and retry times in `sse_events`,
  each tied to the seq of the frame it carried); `fault` records for 4xx/5xx, unreachable or
  TLS-failing upstreams, timeouts, streams cut mid-event, invalid JSON and request bodies the
  client cut short (`request_incomplete`: never forwarded, since the upstream would take the
  prefix for a whole, shorter request; the client is gone, so nothing answers). Faults never
  change what the client gets: a cut stream is cut for the client too (after the partial
  bytes), and only an upstream that cannot be reached (502) or does not answer in time (504)
  gets a reply made by the proxy, a JSON-RPC error that says so.
- Only requests for the proxy's own address are served (`http_headers.HostGuard`): a foreign
  Host or Origin, as a DNS-rebinding page sends, gets 403 before anything is read; a body over
  the limit gets 413. Either is recorded as an `http_exchange` with a `note`, and not forwarded.
- Recording sessions follow `blackbox.recorder.capture.taps.http_sessions`. Reading the request
  body, forwarding and the response relays are in `blackbox.recorder.capture.taps.http_relay`;
  serving (sockets, uvicorn, `run_proxy`) in `blackbox.recorder.capture.taps.http_server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
from blackbox.recorder.capture.heartbeat import FrameHeartbeats
from blackbox.recorder.capture.idle import IdleSessions, check_interval
from blackbox.recorder.capture.journal import Journal, JournalError
from blackbox.recorder.capture.taps.http_exchange import (
    PROXY_ERROR_CODE,
    SSE_EVENTS_PER_RECORD,
    Exchange,
    Notice,
    ProxySettings,
    ProxyStats,
    Receive,
    Scope,
    Send,
)
from blackbox.recorder.capture.taps.http_headers import (
    HostGuard,
    fingerprint,
    recorded,
    recorded_target,
    recorded_url,
)
from blackbox.recorder.capture.taps.http_relay import (
    BodyIncomplete,
    BodyTooLarge,
    ResponseRelays,
    StreamAborted,
    fault_stage,
)
from blackbox.recorder.capture.taps.http_sessions import RecordingSession, SessionRouter, trace_id
from blackbox.recorder.gate import pinner_of
from blackbox.recorder.log import (
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    Direction,
    Kind,
    events,
    parse,
)

# The start of every error the proxy writes itself (the upstream gave no answer).
OWN_ERROR_PREFIX = "blackbox proxy:"


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _scan(
    headers: list[tuple[bytes, bytes]],
) -> tuple[bytes | None, int, bytes | None, int | None]:
    """What the entry checks need, in one pass: the Host (and how many were sent), the Origin and
    the declared Content-Length. ASGI names are lower-case."""
    host = origin = None
    hosts = 0
    length: int | None = None
    for key, value in headers:
        if key == b"host":
            host = value
            hosts += 1
        elif key == b"origin":
            origin = value
        elif key == b"content-length" and value.isdigit():
            length = int(value)
    return host, hosts, origin, length


def _shown_key(key: str, secret: bytes | None) -> str:
    """A session key as recorded: a server's session id is a bearer secret, kept as a
    fingerprint (under `secret`, the store's fingerprint key)."""
    if key.startswith("mcp:"):
        return "mcp:" + fingerprint(key[4:], secret)
    return key


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


class HttpProxyTap(ResponseRelays):
    """The ASGI application: forward to the upstream, journal what crosses.

    `journal` receives every record; `policy` (a `blackbox.recorder.gate.policy.Policy`) gates
    client messages when given; `on_notice` gets one-line messages for the operator (the journal
    failing).
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
        self.idle = (
            IdleSessions(
                settings.idle_after_s, lambda s, k, raw: self._append(s, k, Direction.NONE, raw)
            )
            if settings.idle_after_s
            else None
        )
        self.stats = ProxyStats()
        self.heartbeats = FrameHeartbeats(
            lambda session, doc: self._append(
                session, doc.KIND, Direction.NONE, events.encode(doc)
            ),
            own_prefix=OWN_ERROR_PREFIX,
        )
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
        # The DNS-rebinding check, by listen address (the ASGI scope's `server`: one, in practice).
        self._guards: dict[object, HostGuard] = {}
        self._shown_upstream = recorded_url(settings.upstream, settings.fingerprint_key)

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
        if hasattr(self.policy, "watch"):
            self.policy.watch()

    async def shutdown(self) -> None:
        """End every open session (the proxy stops recording them) and close the upstream pool."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        self.end_all("proxy_stopped", "interrupted")
        if hasattr(self.policy, "stop"):
            self.policy.stop()
        if self._upstream is not None:
            await self._upstream.aclose()
            self._upstream = None

    def end_all(self, reason: str, outcome: str) -> None:
        for session in self.router.open_sessions():
            self.router.close(session, reason, outcome)
            self._end(session)

    async def _reap(self) -> None:
        interval = max(0.05, min(30.0, self.settings.idle_gap_s / 4))
        if self.idle is not None:
            interval = min(interval, check_interval(self.idle.idle_after_s))
        while True:
            await asyncio.sleep(interval)
            if self.idle is not None:
                with contextlib.suppress(JournalError):
                    self.idle.sweep(self.router.open_sessions(), time.monotonic())
            for session in self.router.expire():
                self._end(session)

    def _guard(self, server: object) -> HostGuard:
        listen = None
        if isinstance(server, tuple | list) and len(server) >= 2 and server[1] is not None:
            listen = (str(server[0]), int(server[1]))
        guard = HostGuard(listen, self.settings.allow_hosts, self.settings.allow_origins)
        if type(server) is tuple:
            self._guards[server] = guard
        return guard

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
            if (
                raw_size is None
            ):  # pings: `unresponsive` faults and `peer_back` (blackbox.recorder.capture.heartbeat)
                self.heartbeats.frame(session, direction, raw, seq)
            pinner = pinner_of(self.policy)
            if pinner is not None:  # tool pinning: the definitions each session was given
                pinner.frame(session.session_id, direction, raw)
        return seq

    def _end(self, session: RecordingSession) -> None:
        if session.ended:
            return
        reason, outcome = session.closing or ("proxy_stopped", "interrupted")
        self.router.mark_ended(session)
        if self.idle is not None:
            self.idle.forget(session)
        self.heartbeats.forget(session)
        doc = events.encode(events.SessionEnded(reason=reason, outcome=outcome))
        with contextlib.suppress(JournalError):
            self._append(session, Kind.SESSION_ENDED, Direction.NONE, doc)

    def _era(
        self, session: RecordingSession, era: object, client_info: object, server_info: object
    ) -> None:
        if session.era is not None or not isinstance(era, str):
            return
        session.era = era
        doc = events.EraDetected(era=era, client_info=client_info, server_info=server_info)
        self._append(session, Kind.ERA_DETECTED, Direction.NONE, events.encode(doc))

    def _fault(
        self,
        ex: Exchange,
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
            "path": recorded_target(ex.target, self.settings.fingerprint_key),
        }
        doc.update(evidence)
        raw = events.encode(events.from_dict(Kind.FAULT, doc))
        self._record(ex, Kind.FAULT, Direction.NONE, raw)

    def _exchange_doc(self, ex: Exchange, partial: bool = False) -> bytes:
        stream = bool(ex.sse_events) or ex.content_type == "text/event-stream"
        parted = partial or bool(ex.partial_records)
        # The proxy writes one of these a request: encoded without building the frozen object.
        return events.encode_fields(
            events.HttpExchange,
            method=ex.method,
            path=recorded_target(ex.target, self.settings.fingerprint_key),
            status=ex.status,
            content_type=ex.content_type,
            duration_ms=round((time.monotonic_ns() - ex.started_ns) / 1e6, 3),
            request_headers=recorded(ex.request_headers, self.settings.fingerprint_key),
            response_headers=recorded(ex.response_headers, self.settings.fingerprint_key),
            request_seq=ex.request_seq,
            remote=ex.remote,
            bytes_in=ex.bytes_in,
            bytes_out=ex.bytes_out,
            upstream_answered=ex.upstream_answered,
            sse_events=ex.sse_events if stream else None,
            client_disconnected=True if ex.client_disconnected else None,
            note=ex.note or None,
            partial=partial if parted else None,
            part=ex.partial_records + 1 if parted else None,
        )

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
        ex = Exchange(
            method=scope["method"],
            target=target,
            remote=client[0] if client else "?",
            request_headers=list(scope["headers"]),
            started_ns=time.monotonic_ns(),
        )
        self.stats.exchanges += 1
        try:
            host, hosts, origin, length = _scan(ex.request_headers)
            server = scope.get("server")
            guard = self._guards.get(server) if type(server) is tuple else None
            if guard is None:
                guard = self._guard(server)
            refusal = guard.refusal(host, hosts, origin)
            if refusal is not None:
                # A DNS-rebinding page (or a misdirected client): answered before anything of the
                # request is read, parsed or forwarded; only the exchange is recorded.
                ex.refused = True
                self.stats.rejected += 1
                ex.note = refusal
                await self._reply_plain(send, ex, 403, refusal)
                return
            if not target.startswith("/"):
                # An absolute-form or `@host` target would be joined to the upstream's origin as
                # a different URL (`http://UPSTREAM@evil.example/`): the proxy only forwards paths.
                ex.refused = True
                self.stats.rejected += 1
                ex.note = f"refused: request target {target[:100]!r} is not a path"
                await self._reply_plain(send, ex, 400, ex.note)
                return
            if length is not None and length > self.settings.max_request_bytes:
                raise BodyTooLarge(f"Content-Length {length}")
            body = await self._read_body(receive, ex, length)
            self._parse(ex, body)
            if body.strip() or ex.legacy_id is not None:
                self._session(ex)  # a request with a message is routed (and journaled) first
            if body.strip():
                ex.request_seq = self._record(ex, Kind.FRAME, Direction.CLIENT_TO_SERVER, body)
                # Every body, even one without a method the proxy could read: the gate refuses an
                # unparseable one that mentions a gated method, as the stdio tap's does.
                if self.policy is not None and await self._gate(ex, body, send):
                    return
            await self._forward(ex, body, receive, send)
        except BodyTooLarge as exc:
            self.stats.rejected += 1
            limit = self.settings.max_request_bytes
            ex.note = (
                f"refused: request body over the recorder's {limit}-byte limit ({exc}); "
                "not forwarded"
            )
            self._parse(ex, b"")  # headers only: the exchange goes to the client's session
            await self._reply_plain(send, ex, 413, "request body too large for the recorder")
        except BodyIncomplete as exc:
            # The client hung up mid-body: nothing was forwarded and no one is left to answer
            # (uvicorn drops what is sent to a closed connection), so the fault and the exchange
            # record are all there is to do. Filed under the client's session, by its headers
            # only: the partial body is not a message and is not parsed.
            ex.note = exc.detail
            self._parse(ex, b"")
            with contextlib.suppress(JournalError):  # already told to the operator, if so
                self._fault(
                    ex, "request_incomplete", "transport", exc.detail, seq=None, **exc.evidence
                )
        except JournalError as exc:
            self.stats.refused += 1
            if ex.response_started:
                raise StreamAborted(str(exc)) from None
            await self._reply_plain(
                send, ex, 503, f"cannot record this exchange, so it was not forwarded: {exc}"
            )
        finally:
            self._finish(ex)

    def _finish(self, ex: Exchange) -> None:
        """The exchange's own record, then the session's end if this closed it."""
        if ex.session is None and ex.status is not None:
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

    def _parse(self, ex: Exchange, body: bytes) -> None:
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

    def _session(self, ex: Exchange, new_stream: bool = False) -> RecordingSession:
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
        if self.idle is not None:
            self.idle.resume(session, time.monotonic())
        self.router.enter(session)
        ex.session = session
        if routing.created:
            self.stats.sessions += 1
            doc = events.started_here(
                name=self.settings.server_name,
                transport="http",
                command=self._shown_upstream,
                session_rule=session.rule,
                session_key=_shown_key(session.key, self.settings.fingerprint_key),
                remote=ex.remote,
            )
            self._append(session, Kind.SESSION_STARTED, Direction.NONE, events.encode(doc))
        if ex.initialize:
            session.client_info = ex.client_info
        if session.era is None and ex.era is not None:
            self._era(session, ex.era, ex.client_info, None)
        elif session.era is None and not ex.initialize and not ex.refused:
            version = _header(ex.request_headers, b"mcp-protocol-version")
            if version:
                self._era(session, version, session.client_info, None)
        return session

    def _record(self, ex: Exchange, kind: str, direction: str, raw: bytes, **kw: Any) -> int:
        return self._append(self._session(ex), kind, direction, raw, **kw)

    async def _gate(self, ex: Exchange, body: bytes, send: Send) -> bool:
        """Consult the policy; True when the request was refused (and answered here)."""
        if hasattr(self.policy, "unrecorded"):  # a live policy: the versions not recorded here yet
            for doc in self.policy.unrecorded(self._session(ex).session_id):
                self._record(ex, "policy_loaded", Direction.NONE, doc)
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
        self, send: Send, ex: Exchange, status: int, body: bytes, content_type: bytes | None
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

    async def _reply_plain(self, send: Send, ex: Exchange, status: int, text: str) -> None:
        await self._reply(
            send, ex, status, f"blackbox proxy: {text}\n".encode(), b"text/plain; charset=utf-8"
        )

    async def _reply_error(self, send: Send, ex: Exchange, status: int, text: str) -> None:
        """The proxy's own answer when the upstream gave none: a JSON-RPC error for a request
        (so an SDK client shows the message), plain text otherwise. Recorded as a frame, since it
        is what the client received."""
        message = f"{OWN_ERROR_PREFIX} {text}"
        if not ex.single_request:
            await self._reply_plain(send, ex, status, text)
            return
        body = events.dumps(
            {
                "jsonrpc": "2.0",
                "id": ex.rpc_id,
                "error": {"code": PROXY_ERROR_CODE, "message": message},
            }
        )
        self._record(ex, Kind.FRAME, Direction.SERVER_TO_CLIENT, body)
        await self._reply(send, ex, status, body, b"application/json")

    # -- what the upstream's answer tells the recorder (called by the relays) ----------------------

    def _after_headers(self, ex: Exchange, response: httpx2.Response) -> None:
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
                fault_stage(ex.first_method),
                f"upstream answered HTTP {status} {response.reason_phrase}".strip(),
                status=status,
            )

    def _server_message(self, ex: Exchange, data: bytes) -> int:
        """Journal one message from the server and learn what it says (the negotiated era); an
        unparseable one is a fault too."""
        seq = self._record(ex, Kind.FRAME, Direction.SERVER_TO_CLIENT, data)
        value, problem = parse(data)
        if problem is not None:
            self._fault(
                ex,
                "invalid_json",
                fault_stage(ex.first_method),
                "the server sent invalid JSON",
                seq=seq,
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

    def _endpoint(self, ex: Exchange, data: bytes, raw: bytes, entry: dict[str, object]) -> bytes:
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
        entry["endpoint"] = recorded_target(text, self.settings.fingerprint_key)
        if not parts.netloc or parts.netloc != self._upstream_netloc:
            return raw
        host = _header(ex.request_headers, b"host") or self._upstream_netloc
        rewritten = urlunsplit(("http", host, parts.path, parts.query, parts.fragment))
        entry["rewritten_to"] = recorded_target(rewritten, self.settings.fingerprint_key)
        return f"event: endpoint\ndata: {rewritten}\n\n".encode()

    def _note_sse(self, ex: Exchange, entry: dict[str, object]) -> None:
        ex.sse_events.append(entry)
        if len(ex.sse_events) >= SSE_EVENTS_PER_RECORD:
            # A long stream: write what we have so far rather than hold it all in memory.
            self._record(ex, Kind.HTTP_EXCHANGE, Direction.NONE, self._exchange_doc(ex, True))
            ex.partial_records += 1
            ex.sse_events = []
