"""Which tokens of a record a redacted export withholds, so that what it shows stays provable.

The redactor works on parsed JSON and may hide a whole value (a secret's key names it), a
subtree, or a piece of a string (a token inside a text). A bundle row of a committed record can
only show or withhold whole tokens (recorder/log/commitment.py): this module lines the
redactor's output up with the raw bytes' tokens and withholds every token the redactor changed,
whole. Anything that does not line up one for one (a frame that is not JSON, duplicate keys, a
number JSON cannot hold) fails closed: every token is withheld and only the skeleton is shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from blackbox.recorder.log import commitment as commitments

_ALL = None  # `changed_tokens`: withhold every token


def changed_tokens(raw: bytes, redacted: bytes) -> set[int] | None:
    """The indices of the raw bytes' tokens that the redactor changed (`redacted` is its
    output for `raw`), or None when they cannot be lined up and every token must be withheld."""
    try:
        before = json.loads(raw)
        after = json.loads(redacted)
    except (ValueError, RecursionError):
        return _ALL
    split = commitments.tokens(raw)
    changed: set[int] = set()
    i = 0
    for value, kept in _walk(before, after, True):
        if i >= len(split.tokens) or not _same(_decode(split.tokens[i]), value):
            return _ALL
        if not kept:
            changed.add(i)
        i += 1
    return changed if i == len(split.tokens) else _ALL


def _walk(before: object, after: object, kept: bool) -> Iterator[tuple[object, bool]]:
    """Every token of `before` in document order (object keys too), each with whether the
    redactor left it as it was in `after`: a value it replaced whole withholds all its tokens."""
    if isinstance(before, dict):
        twin = after if isinstance(after, dict) and list(after) == list(before) else None
        for key, value in before.items():
            yield key, kept and twin is not None
            yield from _walk(value, None if twin is None else twin[key], kept and twin is not None)
    elif isinstance(before, list):
        pair = after if isinstance(after, list) and len(after) == len(before) else None
        for j, value in enumerate(before):
            yield from _walk(value, None if pair is None else pair[j], kept and pair is not None)
    else:
        yield before, kept and _same(before, after)


def _decode(token: bytes) -> object:
    try:
        return json.loads(token)
    except ValueError:
        return _Unreadable


class _Unreadable:
    """A token that is no JSON value: equal to nothing."""


def _same(a: object, b: object) -> bool:
    # 1, 1.0 and True are equal in Python and differ in JSON.
    return type(a) is type(b) and a == b


def marker_text(token: bytes, fingerprint: Callable[[str | bytes], str]) -> str:
    """The marker a withheld token is shown as: `[redacted:<16 hex>]`, the redactor's keyed
    fingerprint of the token's value (a string's text, any other token's bytes)."""
    value = _decode(token)
    secret = value if isinstance(value, str) else token
    return f"[redacted:{fingerprint(secret)}]"
