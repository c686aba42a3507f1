"""Which tokens of a record a redacted export withholds, so that what it shows stays provable.

The redactor works on parsed JSON and may hide a whole value (a secret's key names it), a
subtree, or a piece of a string (a token inside a text). A bundle row of a committed record can
only show or withhold whole tokens (recorder/log/commitment.py): this module lines the
redactor's output up with the raw bytes' tokens and withholds every token the redactor changed,
whole. A withheld token shows as the markers the redactor put in it (`[redacted:<fingerprint>]`
of each secret it held: record-time and export-time markers of a secret stay joinable), or as
the marker of its own value when the redactor replaced a whole subtree. Anything that does not
line up one for one (a frame that is not JSON, duplicate keys, a number JSON cannot hold) fails
closed: every token is withheld and only the skeleton (brackets, keys, separators) is shown.

`disclose` is the way back, for the store's holder only: a withheld token's salt and bytes (or a
whole record's salt and raw bytes), which an auditor checks against the digest the bundle shows.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator, Sequence

from blackbox.recorder import BlackboxError
from blackbox.recorder.log import commitment as commitments
from blackbox.recorder.store import EventStore, tree

_MARKER = re.compile(commitments.MARKER.decode())

Fingerprint = Callable[[str | bytes], str]


def withheld_tokens(raw: bytes, redacted: bytes, fingerprint: Fingerprint) -> dict[int, str]:
    """The tokens of `raw` to withhold, by index, each with the text it is shown as (markers
    only), given `redacted`, the redactor's output for `raw`."""
    split = commitments.tokens(raw)
    shown = _line_up(raw, redacted, split.tokens)
    if shown is None:
        shown = dict.fromkeys(range(len(split.tokens)), "")
    return {i: text or _marker(split.tokens[i], fingerprint) for i, text in shown.items()}


def _line_up(raw: bytes, redacted: bytes, tokens: list[bytes]) -> dict[int, str] | None:
    """Token index -> the markers the redactor left in its place ("" when there are none), for
    every token it changed; None when its output does not line up with the tokens."""
    try:
        before = json.loads(raw)
        after = json.loads(redacted)
    except (ValueError, RecursionError):
        return None
    changed: dict[int, str] = {}
    i = 0
    try:
        for value, replacement in _walk(before, after, True):
            if i >= len(tokens) or not _same(_decode(tokens[i]), value):
                return None
            if replacement is not _KEPT:
                found = _MARKER.findall(replacement) if isinstance(replacement, str) else []
                changed[i] = "".join(found)
            i += 1
    except RecursionError:  # nested deeper than the walk can follow: fail closed
        return None
    return changed if i == len(tokens) else None


_KEPT = object()  # `_walk`: the token is as it was


def _walk(before: object, after: object, whole: bool) -> Iterator[tuple[object, object]]:
    """Every token of `before` in document order (values: object keys are skeleton), each with
    `_KEPT` when the redactor left it as it was in `after`, else what stands in its place (a
    subtree replaced whole gives each of its tokens None: no marker of its own)."""
    if isinstance(before, dict):
        twin = after if whole and isinstance(after, dict) and list(after) == list(before) else None
        for key, value in before.items():
            yield from _walk(value, None if twin is None else twin[key], twin is not None)
    elif isinstance(before, list):
        pair = after if whole and isinstance(after, list) and len(after) == len(before) else None
        for j, value in enumerate(before):
            yield from _walk(value, None if pair is None else pair[j], pair is not None)
    elif whole and _same(before, after):
        yield before, _KEPT
    else:
        yield before, after if whole else None


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


def _marker(token: bytes, fingerprint: Fingerprint) -> str:
    """The marker of a token's own value: a string's text, any other token's bytes."""
    value = _decode(token)
    return f"[redacted:{fingerprint(value if isinstance(value, str) else token)}]"


# -- disclosing what a bundle withheld -------------------------------------------------------------


class DisclosureError(BlackboxError):
    """A disclosure cannot be made as asked (no such record, a token it does not have)."""


def disclose(store: EventStore, session_id: str, seq: int, token_indices: Sequence[int]) -> dict:
    """What the store's holder hands an auditor to reveal what a bundle withheld from one
    record: with `token_indices`, each token's salt and bytes (the auditor checks
    SHA256(salt || bytes) against the digest the bundle shows for it: the token and nothing
    else is revealed); without, the record's salt and raw bytes (the whole record, which then
    recomputes its chain hash and commitment). A JSON-ready document."""
    record = next(iter(store.read_session(session_id, after_seq=seq - 1)), None)
    if record is None or record.seq != seq:
        raise DisclosureError(f"session {session_id} has no record seq {seq}")
    with store.transaction() as conn:
        key = tree.commit_key(conn)
    if not key.key:
        raise DisclosureError("this store has no commitment key yet: nothing was committed")
    r = key.salt(session_id, seq)
    doc: dict[str, object] = {"session_id": session_id, "seq": seq}
    if not token_indices:
        doc["salt"] = r.hex()
        doc["raw"] = base64.b64encode(record.raw).decode("ascii")
        return doc
    split = commitments.tokens(record.raw)
    listed = []
    for index in token_indices:
        if not 0 <= index < len(split.tokens):
            raise DisclosureError(
                f"record seq {seq} of session {session_id} has {len(split.tokens)} tokens "
                f"(0-{len(split.tokens) - 1}), not {index}"
            )
        salt = commitments.token_salt(r, index)
        token = split.tokens[index]
        listed.append(
            {
                "index": index,
                "salt": salt.hex(),
                "token": base64.b64encode(token).decode("ascii"),
                "digest": commitments.token_digest(salt, token).hex(),
            }
        )
    doc["tokens"] = listed
    return doc
