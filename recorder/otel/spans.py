"""A session's records -> span and metric data under the MCP conventions, with no SDK import.

Why it exists: the batch export and the live follower must produce the same spans from the same
records (the same ids too, so a resend is recognisably a resend), and this part is pure logic that
is tested and timed on its own. Requests are paired with their responses by
`blackbox.recorder.log.pairing`, the one pairing every reader uses.

The mapping (see docs/otel.md for the table): one CLIENT span per request/response pair, named
`{mcp.method.name} {target}`, from the request's wall time to the response's; server-initiated
requests (sampling, elicitation, roots) are CLIENT spans too, from the server's side. The session
is a span of its own, ended by `session_ended`; notifications and faults are its span events. A
request carrying `params._meta.traceparent` is parented there (the host's trace); every other
span lives in one trace per session whose id is the session's UUID.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
from blackbox.recorder.log import Pending, id_fields, parse, request_key, response_key
from blackbox.recorder.privacy import Redactor

# The conventions' bucket boundaries for both duration histograms (mcp.md, "Metrics").
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
OPERATION_METRIC = "mcp.client.operation.duration"
SESSION_METRIC = "mcp.client.session.duration"
SESSION_SPAN = "mcp.client.session"
# The attributes each metric may carry (mcp.md's tables): no session or request ids, no position.
OPERATION_METRIC_KEYS = (
    "mcp.method.name",
    "error.type",
    "gen_ai.prompt.name",
    "gen_ai.tool.name",
    "rpc.response.status_code",
    "gen_ai.operation.name",
    "mcp.protocol.version",
    "network.protocol.name",
    "network.transport",
    "server.address",
    "server.port",
)
SESSION_METRIC_KEYS = (
    "error.type",
    "mcp.protocol.version",
    "network.protocol.name",
    "network.transport",
    "server.address",
    "server.port",
)
META_VERSION = "io.modelcontextprotocol/protocolVersion"
OK_OUTCOMES = frozenset({"ok", "ended", "completed"})


_SURROGATE = re.compile("[\ud800-\udfff]")


def _sendable(text: str) -> str:
    """`text` as UTF-8 can carry it: lone surrogates replaced by U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _sendable_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {
        _sendable(k): _sendable(v)
        if isinstance(v, str)
        else [_sendable(x) if isinstance(x, str) else x for x in v]
        if isinstance(v, list | tuple)
        else v
        for k, v in attrs.items()
    }


@dataclass(slots=True)
class SpanData:
    """One span, SDK-free. `end_seq` is the seq of the record that completed it: the watermark
    counts in it. Ids are ints as the SDK wants them."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    remote_parent: bool
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    end_seq: int
    session_id: str
    status_message: str | None = None
    error: bool = False
    tracestate: str | None = None
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    is_session: bool = False

    def __post_init__(self) -> None:
        # A peer's lone surrogate escape (in a tool name, an id, a version) parses to text that
        # UTF-8 cannot hold, and both OTLP encoders raise on it: the span would never go, nor
        # the spans after it. Such text is sent with U+FFFD, as the store's derived columns are.
        self.name = _sendable(self.name)
        self.attributes = _sendable_attrs(self.attributes)
        if self.status_message is not None:
            self.status_message = _sendable(self.status_message)
        self.events = [(_sendable(n), ts, _sendable_attrs(a)) for n, ts, a in self.events]

    def metric_point(self) -> tuple[str, float, dict[str, Any]]:
        """(metric name, seconds, attributes without ids) for this span's histogram."""
        keys = SESSION_METRIC_KEYS if self.is_session else OPERATION_METRIC_KEYS
        attrs = {k: self.attributes[k] for k in keys if k in self.attributes}
        name = SESSION_METRIC if self.is_session else OPERATION_METRIC
        return name, max(0, self.end_ns - self.start_ns) / 1e9, attrs


# Not passed through the redaction rules as text: captured content, redacted as parsed JSON (by
# key and by value) when it was captured; and values that are ids, numbers or names from a fixed
# set (methods, versions, outcomes, fault names), which redacting would only slow: every span has
# them, and on the batch export that was a 1.4x slowdown for nothing.
_NOT_TEXT = frozenset(
    {
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "error.type",
        "gen_ai.operation.name",
        "jsonrpc.request.id",
        "mcp.method.name",
        "mcp.protocol.version",
        "mcp.session.id",
        "mcp_blackbox.direction",
        "mcp_blackbox.fault",
        "mcp_blackbox.outcome",
        "mcp_blackbox.session_id",
        "mcp_blackbox.stage",
        "network.protocol.name",
        "network.transport",
        "rpc.response.status_code",
    }
)


@dataclass(frozen=True, slots=True)
class Options:
    """What the mapping may include: arguments and results are opt-in (the conventions say so),
    and only ever after redaction."""

    capture_content: bool = False
    redactor: Redactor | None = None


def span_id_of(session_id: str, seq: int, index: int = 0) -> int:
    """A stable span id: a resend of the same record gives the same id, so a backend can
    recognise it (and so can a test)."""
    digest = hashlib.blake2b(f"{session_id}/{seq}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def trace_id_of(session_id: str) -> int:
    """The session's own trace: its UUID is 128 bits, time-ordered with a random tail."""
    try:
        value = int(session_id.replace("-", ""), 16)
    except ValueError:
        value = 0
    if not value or value >> 128:
        digest = hashlib.blake2b(session_id.encode(), digest_size=16).digest()
        value = int.from_bytes(digest, "big") or 1
    return value


def parse_traceparent(value: object) -> tuple[int, int] | None:
    """(trace id, parent span id) from a W3C `traceparent`, or None if it is not one."""
    if not isinstance(value, str):
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or parts[0] == "ff":
        return None
    try:
        trace, parent = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    if not trace or not parent:
        return None
    return trace, parent


@dataclass(slots=True)
class _Request:
    seq: int
    index: int
    wall_ns: int
    method: str
    rpc_id: str | None
    direction: str
    attrs: dict[str, Any]
    parent: tuple[int, int] | None
    tracestate: str | None
    arguments: Any = None


class SessionSpans:
    """Feed a session's records in seq order (`add`); spans come out as calls complete
    (`take`). Incremental, so the live follower keeps one per open session."""

    def __init__(self, session_id: str, options: Options | None = None) -> None:
        self.session_id = session_id
        self.options = options or Options()
        self.trace_id = trace_id_of(session_id)
        self.session_span_id = span_id_of(session_id, 0, -1)
        self.base: dict[str, Any] = {"mcp_blackbox.session_id": session_id}
        self.version: str | None = None
        self.name: str | None = None
        self.started_ns: int | None = None
        self.last_ns = 0
        self.pending: Pending[_Request] = Pending()
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.last_fault: str | None = None
        self.done: list[SpanData] = []
        self.ended = False
        self._redactor: Redactor | None = None
        self._texts: dict[str, str] = {}

    # -- feeding -------------------------------------------------------------------------------

    def add(self, position: int | None, seq: int, wall_ns: int, kind: str, direction: str,
            raw: bytes, derived: Sequence[Any] | None = None) -> None:  # fmt: skip
        """One record. `position` (the log position, None before the store has it) goes on the
        span as `mcp_blackbox.position`. `derived`, when given, is the store's derived columns
        (msg_type, method, rpc_id, rpc_id_type, tool, is_error, error_code): the common frames
        then need no parse at all, and parsing is a large share of the batch export's time."""
        self.last_ns = wall_ns
        if (
            kind == "frame"
            and derived is not None
            and self._fast(position, seq, wall_ns, direction, raw, derived)
        ):
            return
        if kind == "frame":
            value, problem = parse(raw)
            if problem is not None:
                return
            if isinstance(value, list):
                for index, message in enumerate(value):
                    if isinstance(message, dict):
                        self._message(message, position, seq, index, wall_ns, direction)
            elif isinstance(value, dict):
                self._message(value, position, seq, 0, wall_ns, direction)
        elif kind == "session_started":
            self._started(raw, wall_ns)
        elif kind == "era_detected":
            doc = _doc(raw)
            if isinstance(doc.get("era"), str):
                self.version = doc["era"]
                self.base["mcp.protocol.version"] = self.version
        elif kind == "fault":
            doc = _doc(raw)
            fault = str(doc.get("fault") or "unknown")
            self.last_fault = fault
            attrs = {"mcp_blackbox.fault": fault, "mcp_blackbox.stage": str(doc.get("stage", ""))}
            if doc.get("detail"):
                attrs["mcp_blackbox.detail"] = str(doc["detail"])[:500]
            self.events.append(("fault", wall_ns, attrs))
        elif kind == "http_exchange" and "mcp.session.id" not in self.base:
            self._exchange(raw)
        elif kind == "session_ended":
            self._ended(raw, seq, wall_ns, position)

    def take(self) -> list[SpanData]:
        """The spans completed since the last `take`, redacted: every text that leaves for a
        collector goes through the same rules as the stored and exported records."""
        done, self.done = self.done, []
        return [self._redacted(span) for span in done]

    def _text(self, text: str) -> str:
        # Short texts (tool and prompt names) repeat span after span: redacted once each.
        done = self._texts.get(text)
        if done is not None:
            return done
        if self._redactor is None:
            self._redactor = self.options.redactor or Redactor.default()
        done = self._redactor.redact_text(text)
        if len(text) <= 128 and len(self._texts) < 1024:
            self._texts[text] = done
        return done

    def _redacted_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return {
            k: self._text(v) if isinstance(v, str) and k not in _NOT_TEXT else v
            for k, v in attrs.items()
        }

    def _redacted(self, span: SpanData) -> SpanData:
        """Error messages, resource URIs, fault details and every other text attribute and
        event of `span` redacted (the captured content is redacted as JSON already)."""
        span.attributes = self._redacted_attrs(span.attributes)
        if span.status_message is not None:
            span.status_message = self._text(span.status_message)
        span.events = [(n, ts, self._redacted_attrs(a)) for n, ts, a in span.events]
        return span

    # -- the records ---------------------------------------------------------------------------

    def _started(self, raw: bytes, wall_ns: int) -> None:
        doc = _doc(raw)
        self.started_ns = wall_ns
        self.name = doc.get("name") if isinstance(doc.get("name"), str) else None
        transport = doc.get("transport")
        if transport == "stdio":
            self.base["network.transport"] = "pipe"
        elif transport == "http":
            self.base["network.transport"] = "tcp"
            self.base["network.protocol.name"] = "http"
            command = doc.get("command")
            if isinstance(command, str):
                address, port = _address(command)
                if address:
                    self.base["server.address"] = address
                if port:
                    self.base["server.port"] = port
            key = doc.get("session_key")
            # A server's session id is a bearer secret: the record holds its fingerprint, and that
            # fingerprint is what goes out (stable per session, useless to an attacker).
            if isinstance(key, str) and key.startswith("mcp:"):
                self.base["mcp.session.id"] = key[4:]

    def _fast(self, position: int | None, seq: int, wall_ns: int, direction: str, raw: bytes,
              derived: Sequence[Any]) -> bool:  # fmt: skip
        """A frame from the derived columns alone; False when it needs the full parse."""
        msg_type, method, rpc_id, id_type, tool, is_error, _code = derived[:7]
        if msg_type == "response":
            request = self.pending.get(response_key(direction, rpc_id, id_type))
            if request is None:
                return True  # an orphan: no span
            attrs = request.attrs
            if attrs["mcp.method.name"] == "initialize" or self.options.capture_content:
                return False
            self.pending.close(response_key(direction, rpc_id, id_type))
            error_type = "tool_error" if is_error else None
            if error_type is not None:
                attrs["error.type"] = error_type
            if self.version is not None and "mcp.protocol.version" not in attrs:
                attrs["mcp.protocol.version"] = self.version
            self.done.append(self._span(request, wall_ns, seq, error_type, None))
            return True
        if msg_type != "request" or b'"_meta"' in raw or self.options.capture_content:
            return False
        if method != "tools/call" and (method == "prompts/get" or method.startswith("resources/")):
            return False
        attrs = dict(self.base)
        attrs["mcp.method.name"] = method
        if rpc_id is not None and id_type != "null":
            attrs["jsonrpc.request.id"] = rpc_id
        if tool is not None:
            attrs["gen_ai.tool.name"] = tool
            attrs["gen_ai.operation.name"] = "execute_tool"
        attrs["mcp_blackbox.direction"] = direction
        if position is not None:
            attrs["mcp_blackbox.position"] = position
        attrs["mcp_blackbox.seq"] = seq
        name = f"{method} {tool}" if tool is not None else method
        request = _Request(seq, 0, wall_ns, name, rpc_id, direction, attrs, None, None)
        self.pending.open(request_key(direction, rpc_id, id_type), request)
        return True

    def _exchange(self, raw: bytes) -> None:
        # A legacy HTTP session's id comes in the initialize reply's Mcp-Session-Id header; the
        # record keeps only its fingerprint (a bearer secret), and that is what goes out.
        doc = _doc(raw)
        for headers in (doc.get("response_headers"), doc.get("request_headers")):
            if isinstance(headers, dict):
                for name, value in headers.items():
                    if name.lower() == "mcp-session-id" and isinstance(value, str):
                        self.base["mcp.session.id"] = value
                        return

    def _message(self, msg: dict, position: int | None, seq: int, index: int, wall_ns: int,
                 direction: str) -> None:  # fmt: skip
        method = msg.get("method")
        if isinstance(method, str):
            if "id" not in msg:
                self._notification(msg, method, wall_ns, direction)
                return
            rpc_id, id_type = id_fields(msg["id"])
            params = msg.get("params")
            params = params if isinstance(params, dict) else {}
            attrs = dict(self.base)
            attrs["mcp.method.name"] = method
            if rpc_id is not None and id_type != "null":
                attrs["jsonrpc.request.id"] = rpc_id
            target = None
            name = params.get("name")
            if method == "tools/call" and isinstance(name, str):
                attrs["gen_ai.tool.name"] = target = name
                attrs["gen_ai.operation.name"] = "execute_tool"
            elif method == "prompts/get" and isinstance(name, str):
                attrs["gen_ai.prompt.name"] = target = name
            elif method.startswith("resources/") and isinstance(params.get("uri"), str):
                attrs["mcp.resource.uri"] = params["uri"]
            meta = params.get("_meta")
            parent = tracestate = None
            if isinstance(meta, dict):
                parent = parse_traceparent(meta.get("traceparent"))
                if parent is not None and isinstance(meta.get("tracestate"), str):
                    tracestate = meta["tracestate"]
                version = meta.get(META_VERSION)
                if isinstance(version, str):
                    attrs["mcp.protocol.version"] = version
            attrs["mcp_blackbox.direction"] = direction
            if position is not None:
                attrs["mcp_blackbox.position"] = position
            attrs["mcp_blackbox.seq"] = seq
            span_name = f"{method} {target}" if target else method
            request = _Request(seq, index, wall_ns, span_name, rpc_id, direction, attrs, parent,
                               tracestate)  # fmt: skip
            if self.options.capture_content and method == "tools/call":
                request.arguments = params.get("arguments")
            self.pending.open(request_key(direction, rpc_id, id_type), request)
            return
        if "id" in msg and ("result" in msg or "error" in msg):
            rpc_id, id_type = id_fields(msg["id"])
            asked = self.pending.close(response_key(direction, rpc_id, id_type))
            if asked is not None:
                self._answered(asked, msg, seq, wall_ns)

    def _answered(self, request: _Request, msg: dict, seq: int, wall_ns: int) -> None:
        attrs = request.attrs
        error_type = message = None
        error = msg.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            error_type = str(code) if code is not None else "_OTHER"
            attrs["rpc.response.status_code"] = error_type
            if isinstance(error.get("message"), str):
                message = error["message"]
        else:
            result = msg.get("result")
            if attrs["mcp.method.name"] == "initialize" and isinstance(result, dict):
                # The handshake's answer names the version; era_detected may come later.
                version = result.get("protocolVersion")
                if isinstance(version, str):
                    self.version = self.base["mcp.protocol.version"] = version
            if isinstance(result, dict) and result.get("isError") is True:
                error_type = "tool_error"
            if self.options.capture_content and attrs["mcp.method.name"] == "tools/call":
                self._content(attrs, "gen_ai.tool.call.arguments", request.arguments)
                if error_type is None:
                    self._content(attrs, "gen_ai.tool.call.result", result)
        if error_type is not None:
            attrs["error.type"] = error_type
        if self.version is not None and "mcp.protocol.version" not in attrs:
            attrs["mcp.protocol.version"] = self.version
        self.done.append(self._span(request, wall_ns, seq, error_type, message))

    def _span(self, request: _Request, end_ns: int, end_seq: int, error_type: str | None,
              message: str | None) -> SpanData:  # fmt: skip
        if request.parent is not None:
            trace_id, parent_id = request.parent
            remote = True
        else:
            trace_id, parent_id, remote = self.trace_id, self.session_span_id, False
        return SpanData(
            name=request.method,
            trace_id=trace_id,
            span_id=span_id_of(self.session_id, request.seq, request.index),
            parent_id=parent_id,
            remote_parent=remote,
            start_ns=request.wall_ns,
            end_ns=max(end_ns, request.wall_ns),
            attributes=request.attrs,
            end_seq=end_seq,
            session_id=self.session_id,
            status_message=message if error_type is not None else None,
            error=error_type is not None,
            tracestate=request.tracestate,
        )

    def _content(self, attrs: dict[str, Any], key: str, value: Any) -> None:
        if value is None:
            return
        if self._redactor is None:
            self._redactor = self.options.redactor or Redactor.default()
        attrs[key] = orjson.dumps(self._redactor.redact_value(value)).decode()

    def _notification(self, msg: dict, method: str, wall_ns: int, direction: str) -> None:
        attrs: dict[str, Any] = {"mcp.method.name": method, "mcp_blackbox.direction": direction}
        params = msg.get("params")
        if method == "notifications/cancelled" and isinstance(params, dict):
            rid = params.get("requestId")
            if rid is not None:
                attrs["jsonrpc.request.id"] = id_fields(rid)[0]
        self.events.append((method, wall_ns, attrs))

    def _ended(self, raw: bytes, seq: int, wall_ns: int, position: int | None) -> None:
        doc = _doc(raw)
        outcome = str(doc.get("outcome") or "ended")
        # Requests never answered end with the session, failed by what ended it.
        why = self.last_fault or ("no_response" if outcome in OK_OUTCOMES else outcome)
        for _key, request in self.pending.items():
            request.attrs["error.type"] = why
            self.done.append(self._span(request, wall_ns, seq, why, "no response recorded"))
        self.pending = Pending()
        attrs = dict(self.base)
        attrs["mcp_blackbox.outcome"] = outcome
        if self.name:
            attrs["mcp_blackbox.session_name"] = self.name
        if position is not None:
            attrs["mcp_blackbox.position"] = position
        error = outcome not in OK_OUTCOMES
        if error:
            attrs["error.type"] = outcome
        start = self.started_ns if self.started_ns is not None else wall_ns
        self.done.append(
            SpanData(
                name=SESSION_SPAN,
                trace_id=self.trace_id,
                span_id=self.session_span_id,
                parent_id=None,
                remote_parent=False,
                start_ns=start,
                end_ns=max(wall_ns, start),
                attributes=attrs,
                end_seq=seq,
                session_id=self.session_id,
                status_message=str(doc.get("detail")) if error and doc.get("detail") else None,
                error=error,
                events=self.events,
                is_session=True,
            )
        )
        self.events = []
        self.ended = True


def spans_of(records: Iterable[Sequence[Any]], options: Options | None = None) -> list[SpanData]:
    """Spans of records given as (position, session_id, seq, wall_ns, kind, direction, raw),
    sessions interleaved as in the log, each session's in seq order."""
    builders: dict[str, SessionSpans] = {}
    out: list[SpanData] = []
    for position, sid, seq, wall_ns, kind, direction, raw in records:
        builder = builders.get(sid)
        if builder is None:
            builder = builders[sid] = SessionSpans(sid, options)
        builder.add(position, seq, wall_ns, kind, direction, raw)
        if builder.done:
            out.extend(builder.take())
    return out


def _doc(raw: bytes) -> dict[str, Any]:
    value, _problem = parse(raw)
    return value if isinstance(value, dict) else {}


def _address(url: str) -> tuple[str | None, int | None]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None, None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname, port
