"""A JSON / JSONC parser that keeps positions, and edits of spans of the text it parsed.

`blackbox attach` rewrites host configs the user and the host both edit, so it changes only the
few spans it must and leaves every other byte as it was. That needs each value's offsets in the
text. json5 and commentjson (like the json module) return plain values and lose those offsets,
so this hand-written parser stays: it reads JSON and VS Code's JSONC (comments, trailing commas)
into a tree of `Node`s with `start`/`end`, and the edit helpers below splice new text into it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Node:
    """A JSON value and where it sits in the text: `text[start:end]` is its source."""

    kind: str  # object, array, string, number, literal
    start: int
    end: int
    value: Any = None  # the decoded value for scalars
    members: list[Member] = field(default_factory=list)  # object
    items: list[Node] = field(default_factory=list)  # array

    def get(self, key: str) -> Node | None:
        """The value of `key` in an object (the last one wins, as in JSON.parse)."""
        for member in reversed(self.members):
            if member.key == key:
                return member.value
        return None

    def member(self, key: str) -> Member | None:
        for member in reversed(self.members):
            if member.key == key:
                return member
        return None

    def to_python(self) -> Any:
        if self.kind == "object":
            return {m.key: m.value.to_python() for m in self.members}
        if self.kind == "array":
            return [item.to_python() for item in self.items]
        return self.value


@dataclass
class Member:
    key: str
    key_start: int
    key_end: int
    value: Node


class JSONCError(ValueError):
    """Not JSON (nor JSONC): what was expected, and the character offset where it was not."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


# One pattern for every token. A position where nothing matches is an error, so no character is
# ever skipped silently. (The string pattern is the unrolled form: much faster than (a|b)*.)
_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r\n]+)"""
    r"""|(?P<str>"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*")"""
    r"""|(?P<punct>[{}\[\]:,])"""
    r"""|(?P<num>-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)"""
    r"""|(?P<lit>true|false|null)"""
    r"""|(?P<comment>//[^\n]*|/\*.*?\*/)""",
    re.DOTALL,
)
_LITERALS = {"true": True, "false": False, "null": None}
MAX_DEPTH = 200

# Parser states: what the innermost open container expects next.
_VALUE = 0  # a value (after ':' in an object, after ',' in an array)
_FIRST_KEY = 1  # after '{': a key or '}'
_KEY = 2  # after ',' in an object: a key (or '}', a trailing comma)
_COLON = 3
_NEXT = 4  # after a member or an item: ',' or the closing bracket
_FIRST_ITEM = 5  # after '[': a value or ']'
_ITEM = 6  # after ',' in an array: a value (or ']', a trailing comma)

_EXPECTING = {
    _VALUE: "expecting a value",
    _FIRST_KEY: "expecting a property name in double quotes",
    _KEY: "expecting a property name in double quotes",
    _COLON: "expecting ':' after a property name",
    _FIRST_ITEM: "expecting a value",
    _ITEM: "expecting a value",
}


class _Parser:
    """A table-driven JSON parser over one token pattern, iterative (no recursion limit). Comments
    and trailing commas are accepted (VS Code reads its files with a JSONC parser) and the first
    one seen is remembered, so that a caller can refuse it with its position for a host that
    reads strict JSON."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.first_extension: tuple[int, str] | None = None  # (pos, "comment"|"trailing comma")

    def parse(self) -> Node:
        text = self.text
        n = len(text)
        pos = 1 if text.startswith("\ufeff") else 0
        match = _TOKEN.match
        # Open containers: [node, state, key, key_start, key_end]
        stack: list[list[Any]] = []
        root: Node | None = None
        while True:
            m = match(text, pos)
            if m is None:
                if pos >= n:
                    break
                if text.startswith("/*", pos):
                    raise JSONCError("unterminated /* comment", pos)
                if text[pos] == '"':
                    raise JSONCError("invalid or unterminated string", pos)
                raise JSONCError(self._expecting(stack, root), pos)
            kind = m.lastgroup
            start, pos = pos, m.end()
            if kind == "ws":
                continue
            if kind == "comment":
                self._note(start, "comment")
                continue
            if not stack:
                if root is not None:
                    raise JSONCError("unexpected data after the JSON document", start)
                state = _VALUE
            else:
                frame = stack[-1]
                state = frame[1]
            token = m.group()
            node: Node | None = None
            if state in (_FIRST_KEY, _KEY):
                if kind == "str":
                    frame[2] = token[1:-1] if "\\" not in token else json.loads(token)
                    frame[3], frame[4], frame[1] = start, pos, _COLON
                    continue
                if token != "}":
                    raise JSONCError(_EXPECTING[state], start)
                if state == _KEY:
                    self._note(start, "trailing comma")
                node = stack.pop()[0]
                node.end = pos
            elif state == _COLON:
                if token != ":":
                    raise JSONCError(_EXPECTING[_COLON], start)
                frame[1] = _VALUE
                continue
            elif state == _NEXT:
                container = frame[0]
                if token == ",":
                    frame[1] = _KEY if container.kind == "object" else _ITEM
                    continue
                if token == ("}" if container.kind == "object" else "]"):
                    node = stack.pop()[0]
                    node.end = pos
                elif container.kind == "object":
                    raise JSONCError("expecting ',' or '}' in an object", start)
                else:
                    raise JSONCError("expecting ',' or ']' in an array", start)
            else:  # a value is expected (or, in an array, possibly its end)
                if token == "]" and state in (_FIRST_ITEM, _ITEM):
                    if state == _ITEM:
                        self._note(start, "trailing comma")
                    node = stack.pop()[0]
                    node.end = pos
                elif kind == "str":
                    value = token[1:-1] if "\\" not in token else json.loads(token)
                    node = Node("string", start, pos, value)
                elif kind == "num":
                    is_int = "." not in token and "e" not in token and "E" not in token
                    node = Node("number", start, pos, int(token) if is_int else float(token))
                elif kind == "lit":
                    node = Node("literal", start, pos, _LITERALS[token])
                elif token in "{[":
                    if len(stack) >= MAX_DEPTH:
                        # No host config nests this deep; the limit keeps every later step
                        # (recursive to_python, the C json module) clear of recursion limits.
                        raise JSONCError(f"nested deeper than {MAX_DEPTH} levels", start)
                    if token == "{":
                        stack.append([Node("object", start, start), _FIRST_KEY, None, 0, 0])
                    else:
                        stack.append([Node("array", start, start), _FIRST_ITEM, None, 0, 0])
                    continue
                else:
                    raise JSONCError(_EXPECTING[state], start)
            # A value is complete: hand it to its container, or it is the document.
            if stack:
                frame = stack[-1]
                if frame[0].kind == "object":
                    frame[0].members.append(Member(frame[2], frame[3], frame[4], node))
                else:
                    frame[0].items.append(node)
                frame[1] = _NEXT
            else:
                root = node
        if stack:
            raise JSONCError("unexpected end of file, " + self._expecting(stack, root), n)
        if root is None:
            raise JSONCError("unexpected end of file, expecting a value", n)
        return root

    def _note(self, pos: int, what: str) -> None:
        if self.first_extension is None:
            self.first_extension = (pos, what)

    @staticmethod
    def _expecting(stack: list[list[Any]], root: Node | None) -> str:
        if not stack:
            return "expecting a value" if root is None else "unexpected data after the document"
        frame = stack[-1]
        if frame[1] == _NEXT:
            if frame[0].kind == "object":
                return "expecting ',' or '}' in an object"
            return "expecting ',' or ']' in an array"
        return _EXPECTING[frame[1]]


def parse(text: str) -> tuple[Node, tuple[int, str] | None]:
    """The tree of a JSON document with comments and trailing commas allowed, and the first of
    those extensions seen as (offset, "comment"|"trailing comma"), so that a caller serving a
    host that reads strict JSON can refuse it; `JSONCError` with the offset otherwise."""
    parser = _Parser(text)
    root = parser.parse()
    return root, parser.first_extension


def line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


# ---------------------------------------------------------------------------------------------
# Span edits


@dataclass
class Edit:
    start: int
    end: int
    text: str


def apply_edits(text: str, edits: list[Edit]) -> str:
    out, last = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < last:
            raise AssertionError("overlapping edits")  # a bug, never a user error
        out.append(text[last : edit.start])
        out.append(edit.text)
        last = edit.end
    out.append(text[last:])
    return "".join(out)


def dump(value: Any) -> str:
    """`value` as JSON text to splice into a document."""
    # ensure_ascii=False keeps non-ASCII names readable, as the hosts themselves write them.
    return json.dumps(value, ensure_ascii=False)


def _trailing_ws(s: str) -> str:
    """The whitespace run at the end of `s` (what indents the next token)."""
    return s[len(s.rstrip(" \t\r\n")) :]


def _leading_ws(s: str) -> str:
    return s[: len(s) - len(s.lstrip(" \t\r\n"))]


def format_array_like(text: str, old: Node | None, values: list[str]) -> str:
    """`values` as a JSON array laid out like the array `old` was (one line or one per line)."""
    if old is None or not old.items or "\n" not in text[old.start : old.end]:
        sep = ", "
        if old is not None and len(old.items) > 1:
            between = text[old.items[0].end : old.items[1].start]
            sep = "," + _trailing_ws(between) if "\n" not in between else ", "
        return "[" + sep.join(dump(v) for v in values) + "]"
    first, last = old.items[0], old.items[-1]
    opening = _trailing_ws(text[old.start + 1 : first.start]) or "\n"
    closing = _leading_ws(text[last.end : old.end - 1])
    if len(old.items) > 1:
        sep = "," + _trailing_ws(text[old.items[0].end : old.items[1].start])
    else:
        sep = "," + opening
    return "[" + opening + sep.join(dump(v) for v in values) + closing + "]"


def set_member_edits(text: str, obj: Node, key: str, new_value: str, after: str) -> list[Edit]:
    """Edits that set `key` of `obj` to the JSON text `new_value`, inserting the member after the
    member `after` (in that member's indentation) when it is absent."""
    member = obj.member(key)
    if member is not None:
        return [Edit(member.value.start, member.value.end, new_value)]
    anchor = obj.member(after)
    if anchor is None:
        raise AssertionError(f"no member {after!r} to insert after")
    index = obj.members.index(anchor)
    before = obj.start + 1 if index == 0 else obj.members[index - 1].value.end
    indent = _trailing_ws(text[before : anchor.key_start])
    colon = text[anchor.key_end : anchor.value.start]
    if "\n" not in indent:
        # A one-line object: space like its other members do, else like its colon does.
        if len(obj.members) > 1:
            indent = _trailing_ws(text[obj.members[0].value.end : obj.members[1].key_start])
        else:
            indent = " " if colon.endswith(" ") else ""
    return [Edit(anchor.value.end, anchor.value.end, f",{indent}{dump(key)}{colon}{new_value}")]


def remove_member_edits(obj: Node, key: str) -> list[Edit]:
    """Edits that delete member `key` together with the comma and spacing that belong to it."""
    member = obj.member(key)
    if member is None:
        return []
    index = obj.members.index(member)
    if index > 0:
        return [Edit(obj.members[index - 1].value.end, member.value.end, "")]
    if len(obj.members) > 1:
        return [Edit(member.key_start, obj.members[1].key_start, "")]
    return [Edit(obj.start + 1, obj.end - 1, "")]


def rebase(text: str, node: Node, edits: list[Edit]) -> str:
    """The text of `node` after `edits` (which all fall inside it)."""
    local = [Edit(e.start - node.start, e.end - node.start, e.text) for e in edits]
    return apply_edits(text[node.start : node.end], local)
