"""Semantic comparison of JSON messages, with masks.

Two SDKs serialise the same message with different key order and spacing, so replay compares JSON
values, never bytes. Tools often return JSON inside a `text` field; a string that parses as a JSON
object or array on both sides is compared as JSON, and paths continue inside it as if it were
nested (`$.result.content[0].text.datetime`), so `--ignore` reaches inside it too.

Paths are JSONPath-like: `$` the root, `.key` or `['odd.key']` for members, `[3]` for items.
Patterns add `*` / `[*]` (any one member or item) and `..` (any depth): `$..traceparent`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from blackbox.recorder import BlackboxError

Segment = str | int


class _Absent:
    """A member or item present on one side only."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()

# Volatile values masked by default wherever they appear: trace context, session and SSE event
# ids, and the opaque state of 2026-07-28 input-required rounds.
DEFAULT_MASKS = (
    "$..traceparent",
    "$..tracestate",
    "$..baggage",
    "$..sessionId",
    "$..session_id",
    "$..['mcp-session-id']",
    "$..eventId",
    "$..lastEventId",
    "$..requestState",
)

# Lists of objects keyed by one of these members are aligned by it, so a removed tool is one
# difference rather than a shift of every later item.
ALIGN_KEYS = ("name", "uri", "id")


@dataclass(frozen=True, slots=True)
class Difference:
    """One path where two values differ. `recorded` or `replayed` is ABSENT for a missing side."""

    path: str
    recorded: object
    replayed: object

    @property
    def change(self) -> str:
        if self.recorded is ABSENT:
            return "added"
        if self.replayed is ABSENT:
            return "removed"
        return "changed"

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "change": self.change,
            "recorded": None if self.recorded is ABSENT else self.recorded,
            "replayed": None if self.replayed is ABSENT else self.replayed,
        }


class BadPath(BlackboxError):
    """An --ignore pattern that cannot be parsed."""


def format_path(segments: Sequence[Segment]) -> str:
    out = ["$"]
    for seg in segments:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$-]*", seg):
            out.append(f".{seg}")
        else:
            out.append("[" + json.dumps(seg).replace('"', "'") + "]")
    return "".join(out)


_TOKEN = re.compile(
    r"""\.\.|\.(?P<name>[A-Za-z_$*][A-Za-z0-9_$-]*)|\[(?P<index>\d+|\*)\]|\[(?P<quoted>'[^']*'|"[^"]*")\]"""
)

DEEP = ("..",)  # a pattern segment matching any number of path segments


def parse_pattern(pattern: str) -> tuple:
    """A pattern as a tuple of segments: str key, int index, '*' any one, DEEP any depth."""
    text = pattern.strip()
    if not text.startswith("$"):
        text = "$." + text if not text.startswith("[") else "$" + text
    pos = 1
    segments: list = []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise BadPath(
                f"cannot parse path {pattern!r} at {text[pos:]!r}: "
                "use $.a.b[0], $..key, $.a[*].b or $['odd.key']"
            )
        if m.group(0) == "..":
            segments.append(DEEP)
            nxt = _TOKEN.match(text, m.end())
            if nxt is None and m.end() < len(text):
                # `$..key` : the key follows the dots directly
                name = re.match(r"[A-Za-z_$*][A-Za-z0-9_$-]*", text[m.end() :])
                if name is None:
                    raise BadPath(f"cannot parse path {pattern!r} after '..'")
                segments.append(name.group(0))
                pos = m.end() + name.end()
                continue
        elif m.group("name") is not None:
            segments.append(m.group("name"))
        elif m.group("index") is not None:
            index = m.group("index")
            segments.append("*" if index == "*" else int(index))
        else:
            segments.append(m.group("quoted")[1:-1])
        pos = m.end()
    return tuple(segments)


def _matches(pattern: tuple, path: tuple) -> bool:
    if not pattern:
        return not path
    head = pattern[0]
    if head is DEEP:
        return any(_matches(pattern[1:], path[i:]) for i in range(len(path) + 1))
    if not path:
        return False
    seg = path[0]
    if head == "*" or head == seg:
        return _matches(pattern[1:], path[1:])
    return False


class Masks:
    """A set of path patterns; a difference at or under a masked path is ignored."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self.patterns: list[str] = []
        self._parsed: list[tuple] = []
        for pattern in patterns:
            self.add(pattern)

    def add(self, pattern: str) -> None:
        if pattern in self.patterns:
            return
        self._parsed.append(parse_pattern(pattern))
        self.patterns.append(pattern)

    def covers(self, path: tuple) -> bool:
        # The diff checks every node on its way down, so a masked container is never entered:
        # matching the full path is enough.
        return any(_matches(pattern, path) for pattern in self._parsed)

    def __bool__(self) -> bool:
        return bool(self._parsed)


def embedded_json(value: str) -> object:
    """The JSON object or array a string holds, or ABSENT."""
    text = value.strip()
    if not text or text[0] not in "[{":
        return ABSENT
    try:
        return json.loads(text)
    except ValueError:
        return ABSENT


def _same_scalar(a: object, b: object) -> bool:
    # JSON semantics: true is not 1, 1 equals 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _align_key(recorded: list, replayed: list) -> str | None:
    for key in ALIGN_KEYS:
        values = []
        ok = True
        for item in (*recorded, *replayed):
            if not isinstance(item, dict) or not isinstance(item.get(key), str | int):
                ok = False
                break
            values.append(item[key])
        # Only a key that is unique on both sides can align items.
        if (
            ok
            and len({str(i[key]) for i in recorded}) == len(recorded)
            and len({str(i[key]) for i in replayed}) == len(replayed)
        ):
            return key
    return None


def diff(
    recorded: object,
    replayed: object,
    masks: Masks | None = None,
    path: tuple = (),
) -> list[Difference]:
    """Every unmasked path where the two JSON values differ (empty: equivalent)."""
    out: list[Difference] = []
    _diff(recorded, replayed, masks or Masks(), path, out)
    return out


def _diff(a: object, b: object, masks: Masks, path: tuple, out: list[Difference]) -> None:
    if masks and path and masks.covers(path):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            _diff(a[key], b.get(key, ABSENT), masks, (*path, key), out)
        for key in b:
            if key not in a:
                _diff(ABSENT, b[key], masks, (*path, key), out)
        return
    if isinstance(a, list) and isinstance(b, list):
        key = _align_key(a, b) if a and b else None
        if key is not None:
            index_b = {str(item[key]): item for item in b}
            seen = set()
            for i, item in enumerate(a):
                k = str(item[key])
                seen.add(k)
                _diff(item, index_b.get(k, ABSENT), masks, (*path, i), out)
            for j, item in enumerate(b):
                if str(item[key]) not in seen:
                    _diff(ABSENT, item, masks, (*path, j), out)
            return
        for i in range(max(len(a), len(b))):
            _diff(
                a[i] if i < len(a) else ABSENT,
                b[i] if i < len(b) else ABSENT,
                masks,
                (*path, i),
                out,
            )
        return
    if isinstance(a, str) and isinstance(b, str):
        if a == b:
            return
        inner_a, inner_b = embedded_json(a), embedded_json(b)
        if inner_a is not ABSENT and inner_b is not ABSENT:
            _diff(inner_a, inner_b, masks, path, out)
            return
        out.append(Difference(format_path(path), a, b))
        return
    if a is ABSENT or b is ABSENT or (type(a) is not type(b) and not _both_numbers(a, b)):
        out.append(Difference(format_path(path), a, b))
        return
    if not _same_scalar(a, b):
        out.append(Difference(format_path(path), a, b))


def _both_numbers(a: object, b: object) -> bool:
    return (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    )


def strip_id(message: object) -> object:
    """A message without its JSON-RPC id (ids are matched, not compared)."""
    if isinstance(message, dict) and "id" in message:
        return {k: v for k, v in message.items() if k != "id"}
    return message


def compare_messages(recorded: object, replayed: object, masks: Masks) -> list[Difference]:
    """Differences between a recorded and a replayed message, ids aside. Equal values (the
    common case) return at once, without walking the tree."""
    a, b = strip_id(recorded), strip_id(replayed)
    if a == b and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True):
        return []
    return diff(a, b, masks)


def summarize(value: object, width: int = 120) -> str:
    """A value for a one-line report."""
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, dict):
        # An item's identity first, so a cut-off summary still says which tool or resource it is.
        first = [k for k in ALIGN_KEYS if k in value]
        value = {k: value[k] for k in first} | {
            k: value[k] for k in sorted(value) if k not in first
        }
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
