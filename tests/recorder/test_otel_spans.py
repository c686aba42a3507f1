"""The pure parts of the OpenTelemetry export: the span mapping's edge cases (server-initiated
requests, batches, notifications and faults as events, unanswered requests, opt-in redacted
content, a JSON-RPC error) and the direct wire encoding, checked against protobuf message
objects decoded with `opentelemetry-proto`."""

from __future__ import annotations

import json

from blackbox.recorder.otel import wire
from blackbox.recorder.otel.sdk import _scope, encode, resource
from blackbox.recorder.otel.spans import Options, SessionSpans, SpanData, spans_of
from blackbox.recorder.privacy.redact import Redactor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

SID = "0193c2a0-1111-7000-8000-00000000abcd"


def _rec(seq: int, kind: str, direction: str, doc: object) -> tuple:
    raw = json.dumps(doc).encode()
    return (100 + seq, SID, seq, 1_000_000 * seq, kind, direction, raw)


def _session(
    *messages: tuple[str, object], extra: list[tuple] | None = None, options: Options | None = None
) -> list[SpanData]:
    records = [
        _rec(1, "session_started", "-", {"name": "s", "transport": "stdio", "command": ["x"]})
    ]
    for direction, doc in messages:
        records.append(_rec(len(records) + 1, "frame", direction, doc))
    for kind, doc in extra or []:
        records.append(_rec(len(records) + 1, kind, "-", doc))
    return spans_of(records, options)


def test_server_request_batch_error_and_unanswered() -> None:
    spans = _session(
        (
            "c2s",
            [
                {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "review"}},
            ],
        ),
        ("s2c", {"jsonrpc": "2.0", "id": 0, "method": "roots/list"}),
        ("c2s", {"jsonrpc": "2.0", "id": 0, "result": {"roots": []}}),
        (
            "s2c",
            [
                {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}},
                {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "no such"}},
            ],
        ),
        ("s2c", {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
        ("c2s", {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow"}}),
        extra=[
            ("fault", {"fault": "server_exited", "stage": "transport"}),
            ("session_ended", {"reason": "server_exited", "outcome": "crashed"}),
        ],
    )
    by = {s.name: s for s in spans}
    roots = by["roots/list"]
    assert roots.attributes["mcp_blackbox.direction"] == "s2c"  # the server's own request
    assert roots.attributes["jsonrpc.request.id"] == "0" and not roots.error
    prompt = by["prompts/get review"]
    assert prompt.attributes["gen_ai.prompt.name"] == "review"
    assert prompt.attributes["error.type"] == "-32602"
    assert prompt.attributes["rpc.response.status_code"] == "-32602"
    assert prompt.error and prompt.status_message == "no such"
    assert by["tools/list"].span_id != prompt.span_id  # one batch, two spans
    slow = by["tools/call slow"]
    assert slow.error and slow.attributes["error.type"] == "server_exited"
    session = by["mcp.client.session"]
    assert session.error and session.attributes["error.type"] == "crashed"
    assert [name for name, _ts, _a in session.events] == [
        "notifications/tools/list_changed",
        "fault",
    ]
    assert session.events[1][2]["mcp_blackbox.fault"] == "server_exited"


def test_content_is_opt_in_and_redacted() -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "login", "arguments": {"user": "ada", "password": "hunter2"}},
    }
    answer = {"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": "ok"}]}}
    plain = _session(("c2s", call), ("s2c", answer))
    assert "gen_ai.tool.call.arguments" not in plain[0].attributes
    opted = _session(
        ("c2s", call),
        ("s2c", answer),
        options=Options(capture_content=True, redactor=Redactor.default()),
    )
    args = json.loads(opted[0].attributes["gen_ai.tool.call.arguments"])
    assert args["user"] == "ada" and "hunter2" not in json.dumps(args)
    assert json.loads(opted[0].attributes["gen_ai.tool.call.result"])["content"][0]["text"] == "ok"


def test_incremental_builder_gives_the_same_spans_as_a_whole_pass() -> None:
    messages = [
        ("c2s", {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "t"}})
        for i in range(3)
    ] + [("s2c", {"jsonrpc": "2.0", "id": i, "result": {}}) for i in range(3)]
    whole = _session(*messages)
    builder = SessionSpans(SID)
    records = [_rec(1, "session_started", "-", {"transport": "stdio"})]
    records += [_rec(i + 2, "frame", d, m) for i, (d, m) in enumerate(messages)]
    got = []
    for pos, _sid, seq, wall, kind, direction, raw in records:
        builder.add(pos, seq, wall, kind, direction, raw)
        got.extend(builder.take())
    assert [(s.name, s.span_id, s.end_seq) for s in got] == [
        (s.name, s.span_id, s.end_seq) for s in whole
    ]


def test_wire_bytes_equal_the_protobuf_objects() -> None:
    # An attribute pair seen first on a span, then on an event (a different field number): the
    # pair cache must not hand the span's encoding to the event.
    warm = _session(
        ("s2c", {"jsonrpc": "2.0", "id": 9, "method": "ping"}),
        ("c2s", {"jsonrpc": "2.0", "id": 9, "result": {}}),
    )
    wire.request_bytes(warm, b"", b"", "", "")
    spans = _session(
        (
            "c2s",
            {
                "jsonrpc": "2.0",
                "id": "a",
                "method": "tools/call",
                "params": {
                    "name": "t",
                    "_meta": {
                        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        "tracestate": "rojo=00f067aa0ba902b7",
                    },
                },
            },
        ),
        ("s2c", {"jsonrpc": "2.0", "id": "a", "error": {"code": -1, "message": "bad"}}),
        ("s2c", {"jsonrpc": "2.0", "method": "notifications/message"}),
        extra=[("session_ended", {"reason": "client_closed", "outcome": "ok"})],
    )
    res = resource()
    reference = encode(spans, res)
    resource_bytes = reference.resource_spans[0].resource.SerializeToString()
    got = ExportTraceServiceRequest.FromString(
        wire.request_bytes(
            spans,
            resource_bytes,
            _scope().SerializeToString(),
            reference.resource_spans[0].scope_spans[0].schema_url,
            reference.resource_spans[0].schema_url,
        )
    )
    assert got == reference
    (call, session) = got.resource_spans[0].scope_spans[0].spans
    assert call.trace_state == "rojo=00f067aa0ba902b7"
    assert call.status.code == call.status.STATUS_CODE_ERROR and call.status.message == "bad"
    assert [e.name for e in session.events] == ["notifications/message"]
