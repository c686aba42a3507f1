"""The position-keeping JSON / JSONC parser and the span edits of blackbox/hosts/jsonc.py, on their
own.

The parser must agree with the json module on every strict document (and on every one-character
corruption of one), and each node's span must be exactly its source text; the edits must change
only the spans they name and keep the layout around them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from blackbox.hosts import jsonc
from blackbox.hosts.jsonc import Edit, JSONCError

FIXTURES = Path(__file__).parent / "host_configs"
STRICT_FIXTURES = ["claude_desktop/claude_desktop_config.json", "claude_code/.mcp.json"]


def strict(text: str) -> jsonc.Node:
    """The tree of a strict JSON document: a comment or a trailing comma is refused too."""
    root, extension = jsonc.parse(text)
    if extension is not None:
        raise JSONCError(f"a {extension[1]} is not JSON", extension[0])
    return root


# --- the parser -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", STRICT_FIXTURES)
def test_parser_agrees_with_json_on_strict_files(fixture: str) -> None:
    text = (FIXTURES / fixture).read_text()
    assert strict(text).to_python() == json.loads(text)


def test_parser_spans_cover_exactly_each_value() -> None:
    text = '{"a": [1, "two", {"b": null}], "c": "\\u00e9"}'
    root = strict(text)
    for member in root.members:
        source = text[member.value.start : member.value.end]
        assert json.loads(source) == member.value.to_python()
    assert root.get("c").value == "é"


def test_member_spans_cover_the_key_and_the_last_duplicate_wins() -> None:
    text = '{"k": 1, "k": 2}'
    root = strict(text)
    assert root.get("k").value == 2
    member = root.member("k")
    assert member is not None and text[member.key_start : member.key_end] == '"k"'
    assert root.to_python() == json.loads(text)


def test_the_first_comment_or_trailing_comma_is_reported_with_its_offset() -> None:
    text = '{\n  // a comment\n  "a": [1, 2,],\n}'
    root, extension = jsonc.parse(text)
    assert root.to_python() == {"a": [1, 2]}
    assert extension == (text.index("//"), "comment")
    _, extension = jsonc.parse('{"a": [1,]}')
    assert extension == (9, "trailing comma")
    assert jsonc.parse('{"a": 1}')[1] is None


def test_errors_carry_the_offset_and_what_was_expected() -> None:
    with pytest.raises(JSONCError) as caught:
        jsonc.parse('{"a" 1}')
    assert caught.value.pos == 5 and "':'" in caught.value.message
    with pytest.raises(JSONCError, match="unterminated /\\* comment"):
        jsonc.parse("{} /* open")
    with pytest.raises(JSONCError, match=f"nested deeper than {jsonc.MAX_DEPTH} levels"):
        jsonc.parse("[" * (jsonc.MAX_DEPTH + 1))
    assert jsonc.parse("[" * 150 + "]" * 150)[0].kind == "array"


def test_line_col_is_one_based() -> None:
    text = "ab\ncd"
    assert jsonc.line_col(text, 0) == (1, 1)
    assert jsonc.line_col(text, 4) == (2, 2)


def _random_value(rng: random.Random, depth: int = 0) -> object:
    choice = rng.randrange(8 if depth < 4 else 5)
    if choice == 0:
        return rng.choice([True, False, None])
    if choice == 1:
        return rng.choice([0, -1, 7, 10**20, 1.5, -2.25e-7, 3e100])
    if choice in (2, 3, 4):
        alphabet = 'ab "\\/\n\t\u00e9\u2028\U0001f600{}[],:'
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
    if choice in (5, 6):
        return {
            "".join(rng.choice('kq"\\é') for _ in range(rng.randrange(1, 4))): _random_value(
                rng, depth + 1
            )
            for _ in range(rng.randrange(4))
        }
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_parser_agrees_with_json_on_random_documents_and_their_corruptions() -> None:
    rng = random.Random(20261202)
    for _ in range(400):
        value = _random_value(rng)
        text = json.dumps(
            value,
            indent=rng.choice([None, 0, 2, "\t"]),
            ensure_ascii=rng.choice([True, False]),
            separators=rng.choice([None, (",", ":"), (", ", ": ")]),
        )
        assert strict(text).to_python() == json.loads(text)
        # Spans: every member's source text decodes to that member's value.
        root = strict(text)
        for member in root.members if root.kind == "object" else []:
            assert (
                json.loads(text[member.value.start : member.value.end]) == member.value.to_python()
            )
        # Delete one character: both parsers accept the result (alike) or both refuse it.
        if text:
            cut = rng.randrange(len(text))
            broken = text[:cut] + text[cut + 1 :]
            try:
                expected = json.loads(broken)
            except ValueError:
                with pytest.raises(JSONCError):
                    strict(broken)
            else:
                assert strict(broken).to_python() == expected


# --- span edits -------------------------------------------------------------------------------


def test_apply_edits_splices_in_order_and_refuses_overlaps() -> None:
    text = "0123456789"
    assert jsonc.apply_edits(text, [Edit(8, 9, "x"), Edit(1, 3, "")]) == "034567x9"
    with pytest.raises(AssertionError):
        jsonc.apply_edits(text, [Edit(1, 5, "a"), Edit(4, 6, "b")])


def test_an_array_keeps_its_layout() -> None:
    one_line = '{"args": ["a",  "b"]}'
    node = strict(one_line).get("args")
    assert jsonc.format_array_like(one_line, node, ["x", "y", "z"]) == '["x",  "y",  "z"]'
    per_line = '{"args": [\n\t\t"a",\n\t\t"b"\n\t]}'
    node = strict(per_line).get("args")
    assert jsonc.format_array_like(per_line, node, ["x", "é"]) == '[\n\t\t"x",\n\t\t"é"\n\t]'
    assert jsonc.format_array_like("", None, []) == "[]"


def test_set_member_replaces_a_value_or_inserts_after_an_anchor_in_its_indentation() -> None:
    text = '{\r\n    "command": "x",\r\n    "env": {}\r\n}'
    root = strict(text)
    edits = jsonc.set_member_edits(text, root, "args", '["-v"]', after="command")
    after = jsonc.apply_edits(text, edits)
    assert after == '{\r\n    "command": "x",\r\n    "args": ["-v"],\r\n    "env": {}\r\n}'
    edits = jsonc.set_member_edits(after, strict(after), "args", "[]", after="command")
    assert json.loads(jsonc.apply_edits(after, edits))["args"] == []
    one_line = '{"command": "x"}'
    edits = jsonc.set_member_edits(one_line, strict(one_line), "args", "[]", after="command")
    assert jsonc.apply_edits(one_line, edits) == '{"command": "x", "args": []}'


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ('{"a": 1, "b": 2, "c": 3}', "b", '{"a": 1, "c": 3}'),
        ('{"a": 1, "b": 2}', "a", '{"b": 2}'),
        ('{"a": 1}', "a", "{}"),
        ('{"a": 1}', "z", '{"a": 1}'),
    ],
)
def test_remove_member_takes_its_comma_and_spacing(text: str, key: str, expected: str) -> None:
    assert jsonc.apply_edits(text, jsonc.remove_member_edits(strict(text), key)) == expected


def test_rebase_gives_the_edited_text_of_one_node() -> None:
    text = '{"s": {"url": "http://a"}, "t": 1}'
    node = strict(text).get("s")
    url = node.get("url")
    edits = [Edit(url.start, url.end, jsonc.dump("http://127.0.0.1:7400/"))]
    assert jsonc.rebase(text, node, edits) == '{"url": "http://127.0.0.1:7400/"}'
    assert jsonc.dump("é") == '"é"'
