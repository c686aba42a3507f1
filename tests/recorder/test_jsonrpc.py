"""classify(): every frame gets a kind, ids keep their JSON type, and nothing raises."""

from __future__ import annotations

import pytest
from blackbox.recorder.log.jsonrpc import Classification, classify


def test_request_with_tool_and_number_id():
    c = classify(b'{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"echo"}}')
    assert (c.msg_type, c.method, c.rpc_id, c.rpc_id_type, c.tool) == (
        "request",
        "tools/call",
        "0",
        "number",
        "echo",
    )


def test_string_id_differs_from_number_id():
    assert classify(b'{"jsonrpc":"2.0","id":"0","method":"ping"}').rpc_id_type == "string"
    assert classify(b'{"jsonrpc":"2.0","id":0,"method":"ping"}').rpc_id_type == "number"


def test_notification_response_error_and_tool_error():
    assert classify(b'{"jsonrpc":"2.0","method":"notifications/initialized"}').msg_type == (
        "notification"
    )
    ok = classify(b'{"result":{"content":[],"isError":true},"jsonrpc":"2.0","id":3}')
    assert (ok.msg_type, ok.is_error, ok.rpc_id) == ("response", True, "3")
    err = classify(b'{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"nope"}}')
    assert (err.msg_type, err.error_code) == ("error", -32601)


def test_eras_from_handshake_and_meta():
    legacy = classify(
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}'
    )
    assert legacy.era == "2025-06-18"
    modern = classify(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":'
        b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}'
    )
    assert modern.era == "2026-07-28"
    reply = classify(b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}')
    assert reply.era == "2025-11-25"


def test_batch_lists_its_items():
    c = classify(b'[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}]')
    assert c.msg_type == "batch" and [i.msg_type for i in c.items] == ["request", "notification"]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"Listening on port 3000", "invalid_json"),
        (b'{"jsonrpc":"2.0","id":1,"method":"x\xff"}', "invalid_utf8"),
        (b"", "empty"),
        (b"   ", "empty"),
        (b"[1, 2]", "not_jsonrpc"),
        (b"[]", "not_jsonrpc"),
        (b'{"jsonrpc":"2.0"}', "not_jsonrpc"),
        (b'"just a string"', "not_jsonrpc"),
    ],
)
def test_invalid_frames_are_values_not_exceptions(raw, problem):
    c = classify(raw)
    assert (c.msg_type, c.problem) == ("invalid", problem)


def test_big_integers_and_odd_ids_do_not_raise():
    c = classify(b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"m"}')
    assert c.rpc_id == "123456789012345678901234567890"
    assert classify(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}').rpc_id_type == "null"
    assert classify(b'{"jsonrpc":"2.0","id":1.5,"method":"m"}').rpc_id == "1.5"


def test_classification_leads_with_the_logs_derived_columns():
    """The store writes a classification's leading fields straight into the derived columns."""
    from blackbox.recorder.log.jsonrpc import DERIVED_FIELDS
    from blackbox.recorder.log.model import DERIVED
    from blackbox.recorder.store.projection import INSERT_COLUMNS

    assert len(DERIVED) == DERIVED_FIELDS
    first = INSERT_COLUMNS.index("msg_type")
    assert Classification._fields[:DERIVED_FIELDS] == INSERT_COLUMNS[first : first + DERIVED_FIELDS]


def test_a_frame_reads_the_same_whatever_the_callers_stack() -> None:
    """The attack: a frame orjson refuses (a lone surrogate) nested 800 deep. The standard
    parser read it from a shallow stack and failed 300 calls deeper, so the append and `verify`
    (on another thread) disagreed on an untouched frame."""
    frame = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\ud800","arguments":'
        + b"[" * 800
        + b"]" * 800
        + b"}}"
    )

    def deeper(n: int) -> Classification:
        return classify(frame) if n == 0 else deeper(n - 1)

    shallow = classify(frame)
    assert deeper(300) == shallow
    assert shallow.msg_type == "invalid"  # deeper than FALLBACK_DEPTH: read by no parser
