"""`jsonrpc.derived_columns`, the append's and verify's fast derivation, gives exactly the columns
of the general classifier (`classify(raw)[:8]`) for every frame: the common shapes it answers
itself, and everything it hands over (batches, errors, odd ids, non-objects, invalid bytes, NUL,
huge numbers). A difference would make `verify` report records the append stored correctly."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from blackbox.recorder.log.jsonrpc import (
    DERIVED_FIELDS,
    ERA_MAX,
    INT64_MAX,
    INT64_MIN,
    META_PROTOCOL_VERSION,
    classify,
    derived_columns,
)

IDS = [
    0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, "", "0", "a",
    "a\x00b", "\x00", None, True, False, 1.5, 0.0, -0.0, 1e300, [1], {"k": 1}, "é\u2028",
    "\ud800", "a\udc00b", "\ud83d\ude00",
]  # fmt: skip
METHODS = [
    "tools/call", "initialize", "server/discover", "notifications/initialized", "",
    "tools/\x00call", 7, None, ["x"], {"m": 1}, "tools/\udfffcall",
]  # fmt: skip
VERSIONS = [
    "2025-11-25",
    "2026-07-28",
    "x" * ERA_MAX,
    "x" * (ERA_MAX + 1),
    "2025\x00",
    "2025\ud800",
    "",
    20251125,
]
PARAMS = [
    {"name": "search", "arguments": {"q": "x"}},
    {"name": "t\x00"},
    {"name": 5},
    {"protocolVersion": "2025-06-18", "clientInfo": {"name": "c"}},
    *({"_meta": {META_PROTOCOL_VERSION: v}, "name": "n"} for v in VERSIONS),
    *({"protocolVersion": v} for v in VERSIONS),
    {"_meta": "not a dict", "protocolVersion": "2025-03-26"},
    {"_meta": {META_PROTOCOL_VERSION: None}, "protocolVersion": "2025-03-26"},
    [],
    "params",
    None,
]
RESULTS = [
    {},
    {"isError": True},
    {"isError": False},
    {"isError": 1},
    {"isError": "true"},
    *({"protocolVersion": v} for v in VERSIONS),
    [],
    None,
    "ok",
    0,
]
ERRORS = [
    {"code": -32601, "message": "m"},
    *({"code": c} for c in (INT64_MAX, INT64_MAX + 1, INT64_MIN, INT64_MIN - 1, 2**64 - 1, 10**40)),
    {"code": True},
    {"code": 1.0},
    {"code": "1"},
    {},
    "error",
    None,
]


def shapes() -> list[bytes]:
    out: list[bytes] = []
    absent = object()
    for rid, method, params in itertools.product([absent, *IDS], METHODS, [absent, *PARAMS]):
        msg: dict = {"jsonrpc": "2.0"}
        if rid is not absent:
            msg["id"] = rid
        msg["method"] = method
        if params is not absent:
            msg["params"] = params
        out.append(json.dumps(msg).encode())
    for rid, result in itertools.product([absent, *IDS], RESULTS):
        msg = {"jsonrpc": "2.0", "result": result}
        if rid is not absent:
            msg["id"] = rid
        out.append(json.dumps(msg).encode())
    for rid, error in itertools.product([absent, *IDS], ERRORS):
        msg = {"jsonrpc": "2.0", "error": error}
        if rid is not absent:
            msg["id"] = rid
        out.append(json.dumps(msg).encode())
        out.append(json.dumps({**msg, "result": {}}).encode())
    out += [json.dumps([json.loads(raw)]).encode() for raw in out[:: len(out) // 60]]
    out += [
        b"", b" ", b"null", b"1", b'"text"', b"[]", b"[1, 2]", b"{}", b"{", b"\xff\xfe",
        b'{"id": 1, "method": "\xff"}', b'{"id":1,"method":"m","params":{"_meta":{}},"result":{}}',
        b'{"id":1,"method":"m","result":{"protocolVersion":"2025-11-25"}}',
        b'{"id":1,"method":"m","params":7,"result":{"protocolVersion":"2025-11-25"}}',
        b'{"id":1,"id":"dup","method":"m"}', b'{"id":123456789012345678901234567890,"result":{}}',
        b'{"id":1e999,"result":{}}', b'{"id":NaN,"result":{}}', b"\xef\xbb\xbf{}",
        b'{"id":"a\\u0000","method":"tools/call","params":{"name":"\\u0000"}}',
        b'{"id":1,"method":"initialize","params":{"protocolVersion":"' + b"9" * 5000 + b'"}}',
        b'{"id":' + b"9" * 5000 + b',"result":{}}',
        b'{"id":1,"method":"m","params":{"_meta":{"' + META_PROTOCOL_VERSION.encode()
        + b'":"2026-07-28"}}} ',
        b"  \n" + json.dumps({"id": 3, "method": "tools/call", "params": PARAMS[0]}).encode(),
    ]  # fmt: skip
    return out


SHAPES = shapes()


def test_the_shapes_cover_what_the_fast_path_answers_and_what_it_hands_over():
    kinds = {classify(raw).msg_type for raw in SHAPES}
    assert kinds == {"request", "notification", "response", "error", "batch", "invalid"}
    assert len(SHAPES) > 1000


@pytest.mark.parametrize("chunk", range(8))
def test_the_fast_path_gives_the_general_classifiers_columns(chunk):
    for raw in SHAPES[chunk::8]:
        assert derived_columns(raw) == classify(raw)[:DERIVED_FIELDS], raw


def test_random_frames_agree_and_every_column_fits_every_store():
    rng = random.Random(23)
    pools = [IDS, METHODS, PARAMS, RESULTS, ERRORS]
    keys = ["id", "method", "params", "result", "error"]
    for _ in range(5000):
        msg = {
            k: rng.choice(pool) for k, pool in zip(keys, pools, strict=True) if rng.random() < 0.5
        }
        # Lone surrogates travel as JSON escapes, or (encoded as they are) as invalid UTF-8.
        raw = json.dumps(msg, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        columns = derived_columns(raw)
        assert columns == classify(raw)[:DERIVED_FIELDS], raw
        _kind, method, rpc_id, _id_type, tool, _is_error, code, era, degraded = columns
        for text in (method, rpc_id, tool, era, degraded):
            if text:
                assert "\x00" not in text
                text.encode("utf-8")  # no lone surrogate: every driver can send it
        assert code is None or INT64_MIN <= code <= INT64_MAX
        assert era is None or len(era) <= ERA_MAX
        if degraded is None:  # a value left as it was sent is never fitted silently
            assert all("\ufffd" not in text for text in (method, rpc_id, tool, era) if text)
