"""Request matching (ids and _meta ignored, nearest explained) and --inject parsing."""

from __future__ import annotations

import pytest
from blackbox.replay.inject import parse_injection
from blackbox.replay.matchers import matches, nearest
from blackbox.replay.recording import ReplayError

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}


def call(rpc_id: object, name: str, args: dict, meta: dict | None = None) -> dict:
    params: dict = {"name": name, "arguments": args}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


def test_match_ignores_ids_and_meta() -> None:
    assert matches(call(1, "echo", {"m": "hi"}, META), call("abc", "echo", {"m": "hi"}))
    assert not matches(call(1, "echo", {"m": "hi"}), call(1, "echo", {"m": "ho"}))
    assert not matches(call(1, "echo", {}), {"id": 1, "method": "tools/list"})


def test_handshake_matches_on_method_alone() -> None:
    a = {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "a"}}}
    b = {"id": 0, "method": "initialize", "params": {"clientInfo": {"name": "b"}}}
    assert matches(a, b)


def test_nearest_prefers_the_method_and_names_the_difference() -> None:
    recorded = [
        {"id": 1, "method": "tools/list"},
        call(2, "echo", {"message": "hello"}),
        call(3, "add", {"a": 1, "b": 2}),
    ]
    near = nearest(call(9, "echo", {"message": "bye"}), recorded)
    assert near is not None and near.index == 1 and near.same_method
    text = near.explain()
    assert "$.params.arguments.message" in text and '"hello"' in text and '"bye"' in text


@pytest.mark.parametrize(
    ("spec", "action", "step", "method", "ms"),
    [
        ("delay@tools/call:250", "delay", None, "tools/call", 250.0),
        ("delay@3:10ms", "delay", 3, None, 10.0),
        ("drop@4", "drop", 4, None, 0.0),
        ("corrupt@tools/list", "corrupt", None, "tools/list", 0.0),
        ("cut@5", "cut", 5, None, 0.0),
        ("close-stdin@2", "close-stdin", 2, None, 0.0),
    ],
)
def test_inject_specs(spec: str, action: str, step: int | None, method: str | None, ms: float):
    inj = parse_injection(spec)
    assert (inj.action, inj.step, inj.method, inj.delay_ms) == (action, step, method, ms)


@pytest.mark.parametrize("spec", ["explode@3", "drop", "delay@3", "cut@tools/call", "drop@0"])
def test_bad_inject_specs_are_one_line_errors(spec: str) -> None:
    with pytest.raises(ReplayError, match="bad --inject"):
        parse_injection(spec)
