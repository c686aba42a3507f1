"""The semantic comparison: key order, JSON inside text, masks and --ignore paths."""

from __future__ import annotations

import json

import pytest
from blackbox.replay.compare import (
    ABSENT,
    DEFAULT_MASKS,
    BadPath,
    Masks,
    compare_messages,
    diff,
    parse_pattern,
)


def test_key_order_and_spacing_do_not_matter() -> None:
    a = json.loads('{"jsonrpc":"2.0","id":1,"result":{"a":1,"b":[1,2]}}')
    b = json.loads('{ "result": {"b": [1, 2], "a": 1}, "id": 1, "jsonrpc": "2.0" }')
    assert compare_messages(a, b, Masks()) == []


def test_changed_value_names_path_and_both_values() -> None:
    a = {"result": {"content": [{"type": "text", "text": "hi"}]}}
    b = {"result": {"content": [{"type": "text", "text": "HI"}]}}
    (d,) = diff(a, b)
    assert (d.path, d.recorded, d.replayed, d.change) == (
        "$.result.content[0].text",
        "hi",
        "HI",
        "changed",
    )


def test_json_inside_text_is_compared_as_json_and_paths_reach_inside() -> None:
    rec = {"text": json.dumps({"timezone": "UTC", "datetime": "10:00"}, indent=2)}
    rep = {"text": json.dumps({"datetime": "10:05", "timezone": "UTC"})}
    (d,) = diff(rec, rep)
    assert d.path == "$.text.datetime"
    assert (d.recorded, d.replayed) == ("10:00", "10:05")
    assert diff(rec, rep, Masks(["$.text.datetime"])) == []
    assert diff(rec, rep, Masks(["$..datetime"])) == []


def test_default_masks_hide_trace_and_session_ids_only() -> None:
    rec = {"result": {"_meta": {"traceparent": "00-a-b-01"}, "sessionId": "s1", "value": 1}}
    rep = {"result": {"_meta": {"traceparent": "00-c-d-01"}, "sessionId": "s2", "value": 2}}
    differences = diff(rec, rep, Masks(DEFAULT_MASKS))
    assert [d.path for d in differences] == ["$.result.value"]


def test_removed_tool_is_one_difference_not_a_shift() -> None:
    tools = [{"name": n, "description": n.upper()} for n in ("a", "b", "c")]
    rec = {"result": {"tools": tools}}
    rep = {"result": {"tools": [tools[0], tools[2]]}}
    (d,) = diff(rec, rep)
    assert d.path == "$.result.tools[1]"
    assert d.recorded == tools[1] and d.replayed is ABSENT and d.change == "removed"


def test_added_member_and_type_change() -> None:
    differences = diff({"a": 1, "b": True}, {"a": "1", "b": 1, "c": None})
    assert {(d.path, d.change) for d in differences} == {
        ("$.a", "changed"),
        ("$.b", "changed"),
        ("$.c", "added"),
    }


def test_ids_are_not_compared() -> None:
    assert compare_messages({"id": 1, "result": {}}, {"id": "x", "result": {}}, Masks()) == []


def test_patterns_with_wildcards_quotes_and_indexes() -> None:
    rec = {"a": [{"io.x/y": 1, "k": 1}, {"io.x/y": 2, "k": 2}]}
    rep = {"a": [{"io.x/y": 5, "k": 1}, {"io.x/y": 6, "k": 3}]}
    assert [d.path for d in diff(rec, rep, Masks(["$.a[*]['io.x/y']"]))] == ["$.a[1].k"]
    assert [d.path for d in diff(rec, rep, Masks(["$.a[1]"]))] == ["$.a[0]['io.x/y']"]
    assert parse_pattern("result.content[0]") == ("result", "content", 0)


@pytest.mark.parametrize("bad", ["$.a[", "$.a b", "$..["])
def test_bad_pattern_is_a_clear_error(bad: str) -> None:
    with pytest.raises(BadPath, match="cannot parse path"):
        parse_pattern(bad)
