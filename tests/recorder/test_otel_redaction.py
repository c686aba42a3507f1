"""Nothing leaves for a collector unredacted: a JSON-RPC error message, a resource URI, a fault's
detail and a session's end detail that carry secrets reach a real OTLP/HTTP receiver with the
secrets redacted, as the stored and exported records are. Before, the OTel export sent error
messages and resource URIs as recorded."""

from __future__ import annotations

import json
from pathlib import Path

from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.otel.batch import export
from blackbox.recorder.otel.sdk import Target
from blackbox.recorder.otel.watermark import Watermark
from blackbox.recorder.store import open_store

from tests.fixtures.otlp import Receiver, attrs

API_KEY = "sk-proj-Abc123Def456Ghi789Jkl012"
URL_PASSWORD = "hunter2hunter2"
BEARER = "abcdef0123456789ghijkl"
SECRETS = (API_KEY, URL_PASSWORD, BEARER)
T0 = 1_790_000_000_000_000_000


def _frame(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _leaky_session(store_url: str) -> str:
    sid = new_session_id(T0)
    c2s, s2c, none = Direction.CLIENT_TO_SERVER, Direction.SERVER_TO_CLIENT, Direction.NONE
    uri = f"https://deploy:{URL_PASSWORD}@files.example.com/config.json"
    records = [
        (Kind.SESSION_STARTED, none, {"name": "deploy", "transport": "stdio", "command": ["x"]}),
        (c2s, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "deploy"}}),
        (
            s2c,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "error": {"code": -32000, "message": f"upstream refused the key {API_KEY}"},
            },
        ),
        (c2s, {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": uri}}),
        (s2c, {"jsonrpc": "2.0", "id": 2, "result": {"contents": []}}),
        (
            Kind.FAULT,
            none,
            {
                "fault": "transport",
                "stage": "relay",
                "detail": f"sent Authorization: Bearer {BEARER}",
            },
        ),
        (
            Kind.SESSION_ENDED,
            none,
            {"reason": "crashed", "outcome": "server_crashed", "detail": f"key was {API_KEY}"},
        ),
    ]
    events = []
    for seq, record in enumerate(records, start=1):
        if len(record) == 2:
            direction, doc = record
            kind = Kind.FRAME
        else:
            kind, direction, doc = record
        events.append(NewEvent(sid, seq, T0 + seq * 1000, seq * 1000, kind, direction, _frame(doc)))
    store = open_store(store_url)
    try:
        store.append(events)
    finally:
        store.close()
    return sid


def test_error_messages_uris_and_details_reach_the_collector_redacted(
    sqlite_url: str, tmp_path: Path
) -> None:
    _leaky_session(sqlite_url)
    store = open_store(sqlite_url)
    try:
        with Receiver() as receiver:
            report = export(
                store, Watermark(tmp_path / "wm.sqlite", sqlite_url), Target(receiver.url)
            )
            assert report.failure is None
            spans = [span for _res, _scope, span in receiver.spans()]
    finally:
        store.close()
    names = [s.name for s in spans]
    assert any(n.startswith("tools/call") for n in names), names
    assert any(n.startswith("resources/read") for n in names), names
    sent = "\n".join(str(span) for span in spans)  # every attribute, event and status, as sent
    for secret in SECRETS:
        assert secret not in sent, f"{secret} reached the collector"
    call = next(s for s in spans if s.name.startswith("tools/call"))
    assert call.status.message.startswith("upstream refused the key ")  # the message still says
    read = next(s for s in spans if s.name.startswith("resources/read"))
    assert attrs(read)["mcp.resource.uri"].startswith("https://deploy:")
