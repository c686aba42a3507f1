"""The refresh's fast paths agree with the plain ones: the orjson fingerprint with the producers'
`json.dumps`, `CallTracker.feed_rows` (driver tuples, inline pairing) with `feed` (one
StoredEvent at a time, as the doctor uses it), and the calls table built from the pairs' row
indices (`by_index`, `take_closed_table`) with the one built from call rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from blackbox.analytics import calls, parquet
from blackbox.analytics.calls import CallTracker
from blackbox.recorder.gate.decisions import args_fingerprint
from blackbox.recorder.store import open_store

from tests.fixtures.analytics_kit import BASE_NS, Session, fingerprint

TRICKY = [
    {},
    None,
    {"b": 1, "a": [1, "x", None, True, False]},
    {"f": 1.5, "g": 0.00001, "h": 1e16, "i": -0.0},
    {"s": "héllo", "t": "日本", "u": "\x7f", "v": '\x00\x1f\n\t"\\/'},
    {"big": 2**70, "neg": -(2**63)},
    {"nested": {"z": {"y": [1.0, {"x": "v1.2e5"}]}, "a": "3e"}},
    ["a", 1, 2.5],
    "text",
]


@pytest.mark.parametrize("arguments", TRICKY, ids=range(len(TRICKY)))
def test_fingerprint_is_the_producers_expression(arguments: object) -> None:
    """The one fingerprint (the gate's, used by the calls rows too) against the expression written
    out by hand, on inputs where a fast encoder could write other bytes."""
    assert args_fingerprint(arguments) == fingerprint(arguments)


def _varied_session(k: int) -> Session:
    s = Session(name=f"s{k}", start_ns=BASE_NS + k * 10**9)
    s.handshake()
    s.call("x", 10, 5.0, {"path": "/etc", "n": 1.5})
    s.call("y", 20, 1.0, {"q": "héllo"}, outcome="tool_error")
    s.call("x", 30, 2.0, {"big": 2**70}, outcome="rpc_error")
    s.call("x", 40, None, {"k": "v"})
    _, rid = s.call("y", 50, None)
    cancel = {"requestId": rid}
    s.frame("c2s", {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}, 51)
    s.request("tools/call", {"name": "x", "arguments": {}}, 60, rpc_id=7)
    s.request("tools/call", {"name": "x", "arguments": {"again": 1}}, 61, rpc_id=7)  # reused id
    s.result(7, {"content": []}, 62)
    s.request("tools/call", {"name": "x"}, 63, rpc_id="7")  # no arguments; "7" is not 7
    s.result("7", {"content": [], "isError": True}, 64)
    s.raw(
        "c2s",
        b'[{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"b"}},'
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}]',
        70,
    )
    s.raw("s2c", b'[{"jsonrpc":"2.0","id":100,"error":{"code":-1,"message":"no"}}]', 71)
    s.raw("c2s", b"{not json", 72)
    s.request("ping", None, 73, direction="s2c")
    s.result(s.next_id - 1, {}, 74, direction="c2s")
    s.call("x", 80, None, {"open": True})
    s.fault("pipe_broken", 81)
    if k % 3 == 0:
        s.end(90, outcome="crashed", reason="server_exit")
    elif k % 3 == 1:
        s.end(90)
    return s


def test_feed_rows_pairs_exactly_as_feed(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    for k in range(6):
        _varied_session(k).save(store)
    one_by_one, batched = CallTracker(), CallTracker()
    expected = {}
    for i, ev in enumerate(store.read_log()):
        extra = one_by_one.feed(ev)
        if extra is not None:
            expected[i] = extra
    extras: dict = {}
    done = 0
    for batch in store.read_log_rows(batch_size=7):
        batched.feed_rows(batch, extras, done)
        done += len(batch)
    store.close()
    assert extras == expected
    closed = batched.take_closed()
    assert closed == one_by_one.take_closed()
    assert batched.pending() == one_by_one.pending()
    outcomes = {c[calls.C_OUTCOME] for c in closed + batched.pending()}
    assert outcomes >= {"ok", "tool_error", "rpc_error", "cancelled", "no_response"}
    assert any(c[calls.C_FAULT] is not None for c in closed)


@pytest.mark.parametrize("chunk", [10_000, 13])
def test_calls_table_by_index_equals_call_rows(store_url: str, chunk: int) -> None:
    """Chunk by chunk, as a refresh goes (batches numbered within the chunk, requests answered
    in a later chunk), the table taken from the chunk's events equals the call rows, row for
    row and in closing order."""
    store = open_store(store_url)
    for k in range(6):
        _varied_session(k).save(store)
    records = [row for batch in store.read_log_rows() for row in batch]
    store.close()
    # Both paths must also agree on what the pairing ignores or defaults: a response with no
    # is_error at all, a tool on a request that is not a tools/call.
    for i, row in enumerate(records):
        if row[calls.R_MSG_TYPE] == "response" and i % 2:
            records[i] = (*row[: calls.R_IS_ERROR], None, *row[calls.R_IS_ERROR + 1 :])
        elif row[calls.R_MSG_TYPE] == "request" and row[calls.R_METHOD] != "tools/call":
            records[i] = (*row[: calls.R_TOOL], "t", *row[calls.R_TOOL + 1 :])
    by_rows, by_index = CallTracker(), CallTracker(by_index=True)
    paired = 0
    for start in range(0, len(records), chunk):
        pieces = []
        part = records[start : start + chunk]
        for first in range(0, len(part), 5):
            batch, extras = part[first : first + 5], {}
            by_rows.feed_rows(batch, {}, first)
            by_index.feed_rows(batch, extras, first)
            pieces.append(parquet._events_table(batch, extras, first))
        paired += sum(type(call) is tuple for call in by_index.closed)
        table = by_index.take_closed_table(pa.concat_tables(pieces))
        assert table.equals(calls.calls_table(by_rows.take_closed()), check_metadata=True)
    assert paired > 0  # the pairs kept as indices were exercised
    assert by_index.pending() == by_rows.pending()
