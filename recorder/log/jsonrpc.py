"""Classify a raw wire frame into the fields the log indexes.

`classify` never raises: a frame that is not JSON, not UTF-8 or not JSON-RPC is described by
`problem`, because the recorder must keep every byte it forwarded, parseable or not.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import orjson

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
MODERN_ERA = "2026-07-28"

# The derived columns are views of the raw bytes, best effort: every store's columns must hold
# them whatever a peer sends, or one hostile frame fails its whole batch. Text cannot hold NUL
# (PostgreSQL) or a lone surrogate escape such as "\ud800" (valid JSON text, not encodable as
# UTF-8 by any driver): each becomes U+FFFD. An error code must fit a signed 64-bit BIGINT and an
# era the 16 characters of its column, else NULL. Each such change is named in the record's
# `degraded` column ("column:reason", comma-separated), which is derived like the others; the
# raw bytes keep the exact value, and the chain and the Merkle leaf cover them.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
ERA_MAX = 16
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(value: str) -> str | None:
    """Why a text cannot be stored as it is ("nul", "surrogate" or both, "+"-joined), or None."""
    if value.isascii():
        return "nul" if "\x00" in value else None
    reasons = {"nul" if ch == "\x00" else "surrogate" for ch in _UNSTORABLE.findall(value)}
    return "+".join(sorted(reasons)) or None


def fit_text(value: str | None) -> str | None:
    """A derived text column as every store can hold it: NUL and lone surrogates replaced by
    U+FFFD."""
    if value is not None and unstorable(value) is not None:
        return _UNSTORABLE.sub("\ufffd", value)
    return value


def fit_era(value: object) -> str | None:
    """A protocol version as the era column holds it: text of 1 to ERA_MAX characters (an empty
    version names no era: the append, which takes a session's first era, skips it)."""
    if value.__class__ is str and 0 < len(value) <= ERA_MAX:
        return fit_text(value)
    return None


def fit_stored(column: str, value: object) -> object:
    """A derived value as stored by an older version, seen as the fitted view gives it: records
    appended before the views were fitted may hold NUL in a text column or an era of any length,
    and they are no sign of tampering."""
    if column == "era":
        return fit_era(value)
    if value.__class__ is str:
        return fit_text(value)
    return value


def stored_agrees(column: str, stored: object, derived: object) -> bool:
    """Whether a stored derived value says what the raw bytes do. A NULL `degraded` agrees with
    any note: records appended before the column existed hold NULL, and the note only names a
    fitting that the stored value itself shows (the raw bytes and the fitted value are checked)."""
    if column == "degraded" and stored is None:
        return True
    return fit_stored(column, stored) == derived


def fit_code(value: object) -> int | None:
    """A JSON-RPC error code as the error_code column holds it: a signed 64-bit integer."""
    if value.__class__ is int and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


def degradation(**texts: object) -> str | None:
    """The `degraded` note for derived values as they came from the frame, before fitting:
    text columns by keyword (method, rpc_id, tool), `error_code` an integer, `era` a version."""
    notes = []
    for column, value in texts.items():
        if value.__class__ is not str:
            if column == "error_code" and value.__class__ is int and fit_code(value) is None:
                notes.append("error_code:out_of_range")
            continue
        if column == "era" and len(value) > ERA_MAX:
            notes.append("era:too_long")
            continue
        why = unstorable(value)
        if why is not None:
            notes.append(f"{column}:{why}")
    return ",".join(notes) or None


class Classification(NamedTuple):
    """What a frame is. `msg_type` is one of request, notification, response, error, batch,
    invalid. `problem` names why a frame is invalid: invalid_utf8, invalid_json, not_jsonrpc,
    empty. The first nine fields are the log's derived columns, in their order; `degraded` names
    those that had to be fitted to be stored (see `degradation`).

    A named tuple rather than a frozen dataclass: every appended frame builds one, and a named
    tuple is several times cheaper to construct."""

    msg_type: str
    method: str | None = None
    rpc_id: str | None = None
    rpc_id_type: str | None = None
    tool: str | None = None
    is_error: bool | None = None
    error_code: int | None = None
    era: str | None = None
    degraded: str | None = None
    problem: str | None = None
    items: tuple[Classification, ...] = ()


INVALID_JSON = Classification("invalid", problem="invalid_json")


# The standard parser and encoder recurse once per level of nesting, and whether they reach the
# end depends on how deep the caller's stack already is: the append and `verify` (on another
# thread) could read one frame two ways. They are given frames at most this deep, whatever the
# stack; orjson, which reads nearly every frame, has its own fixed limit (1024).
FALLBACK_DEPTH = 400
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def too_deep(raw: bytes, limit: int = FALLBACK_DEPTH) -> bool:
    """Whether JSON text nests arrays and objects deeper than `limit` (brackets inside strings
    do not count). Linear, with no recursion; cheap when the text has few brackets."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for byte in _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw)):
        depth += 1 if byte in (0x5B, 0x7B) else -1
        if depth > limit:
            return True
    return False


def _nested_deeper(value: object, limit: int = FALLBACK_DEPTH) -> bool:
    """Whether a parsed value nests deeper than `limit`, walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if item.__class__ is dict:
            item = list(item.values())
        elif item.__class__ is not list:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in item)
    return False


def parse(raw: bytes) -> tuple[object, str | None]:
    """Parse a frame: (value, None) or (None, problem)."""
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError:
        pass
    # orjson is strict (64-bit integers, UTF-8): let the standard parser have the last word.
    if not raw.strip():
        return None, "empty"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid_utf8"
    if too_deep(raw):
        return None, "invalid_json"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError):  # RecursionError: kept as a last guard
        return None, "invalid_json"


_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_json(value: object, *, sort_keys: bool = False) -> bytes:
    """Compact JSON as UTF-8, non-ASCII text kept as it is. A lone surrogate, which a peer can
    send as an escape and the parser then holds, is written back as its escape: every value a
    frame parses to can be encoded again (UTF-8 cannot hold it, and the encoder would raise)."""
    text = json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode()


def id_fields(value: object) -> tuple[str | None, str | None]:
    """A JSON-RPC id as (text, JSON type). Ids are of mixed type: 0 and "0" are different ids."""
    if value is None:
        return None, "null"
    if isinstance(value, bool):
        return json.dumps(value), "boolean"
    if isinstance(value, int):
        return str(value), "number"
    if isinstance(value, float):
        return json.dumps(value), "number"
    if isinstance(value, str):
        return value, "string"
    if _nested_deeper(value):
        return None, "other"
    return json.dumps(value, sort_keys=True), "other"


def _version_of(message: dict, method: str | None) -> str | None:
    """The protocol version a message names, as sent (the era column fits it)."""
    params = message.get("params")
    if params.__class__ is dict:
        meta = params.get("_meta")
        if meta.__class__ is dict:
            version = meta.get(META_PROTOCOL_VERSION)
            if isinstance(version, str):
                return version
        if method == "initialize":
            version = params.get("protocolVersion")
            if isinstance(version, str):
                return version
        return None
    result = message.get("result")
    if result.__class__ is dict:
        version = result.get("protocolVersion")
        if isinstance(version, str):
            return version
    return None


def classify_message(message: object) -> Classification:
    """Classify one parsed JSON-RPC message (not a batch); its derived columns fitted."""
    if message.__class__ is not dict:
        return Classification("invalid", problem="not_jsonrpc")
    get = message.get
    method = get("method")
    if method is not None and not isinstance(method, str):
        method = None
    has_id = "id" in message
    rpc_id: str | None
    rpc_id_type: str | None
    if has_id:
        raw_id = get("id")
        # The two id types clients use, without the general conversion's isinstance chain.
        if raw_id.__class__ is int:
            rpc_id, rpc_id_type = str(raw_id), "number"
        elif raw_id.__class__ is str:
            rpc_id, rpc_id_type = raw_id, "string"
        else:
            rpc_id, rpc_id_type = id_fields(raw_id)
    else:
        rpc_id = rpc_id_type = None
    if method is not None:
        tool = None
        if method == "tools/call":
            params = get("params")
            if params.__class__ is dict and isinstance(params.get("name"), str):
                tool = params["name"]
        version = _version_of(message, method)
        return Classification(
            "request" if has_id else "notification",
            fit_text(method),
            fit_text(rpc_id),
            rpc_id_type,
            fit_text(tool),
            era=fit_era(version),
            degraded=degradation(method=method, rpc_id=rpc_id, tool=tool, era=version),
        )
    if not has_id:
        return Classification("invalid", problem="not_jsonrpc")
    if "error" in message:
        error = get("error")
        code = error.get("code") if error.__class__ is dict else None
        return Classification(
            "error",
            None,
            fit_text(rpc_id),
            rpc_id_type,
            error_code=fit_code(code),
            degraded=degradation(rpc_id=rpc_id, error_code=code),
        )
    if "result" in message:
        result = get("result")
        is_error = result.__class__ is dict and result.get("isError") is True
        version = _version_of(message, None) if result.__class__ is dict else None
        return Classification(
            "response",
            None,
            fit_text(rpc_id),
            rpc_id_type,
            is_error=is_error,
            era=fit_era(version),
            degraded=degradation(rpc_id=rpc_id, era=version),
        )
    return Classification("invalid", problem="not_jsonrpc")


def classify(raw: bytes) -> Classification:
    """Classify a raw frame. Never raises. Its derived columns fit every store's columns (see
    `fit_text`), and `degraded` says where they had to; a batch's items are fitted the same way.
    A batch's row holds its first item's method and the first era an item names, and the notes
    of every item about those two columns."""
    try:
        try:
            value = orjson.loads(raw)  # the common case, without parse()'s fallbacks
        except orjson.JSONDecodeError:
            value, problem = parse(raw)
            if problem is not None:
                return Classification("invalid", problem=problem)
        if isinstance(value, list):
            if not value:
                return Classification("invalid", problem="not_jsonrpc")
            items = tuple(classify_message(item) for item in value)
            if all(item.msg_type == "invalid" for item in items):
                return Classification("invalid", problem="not_jsonrpc")
            first = items[0]
            notes = [
                note
                for i, item in enumerate(items)
                for note in (item.degraded or "").split(",")
                if note.startswith("era:") or (i == 0 and note.startswith("method:"))
            ]
            return Classification(
                "batch",
                method=first.method,
                era=next((item.era for item in items if item.era), None),
                degraded=",".join(dict.fromkeys(notes)) or None,
                items=items,
            )
        if value.__class__ is dict and value.get("id").__class__ is float and not too_deep(raw):
            # orjson reads integers beyond 64 bits as floats; ids must keep their exact text.
            value = json.loads(raw)
        return classify_message(value)
    except Exception:  # a classifier that raises would lose a frame
        return INVALID_JSON


_NO_ID = object()
DERIVED_FIELDS = 9  # Classification's leading fields: the log's derived columns


def derived_columns(raw: bytes) -> tuple:
    """`classify(raw)[:DERIVED_FIELDS]`, the derived columns of a frame, without building a
    classification for the shapes nearly every frame has: one request, notification or result
    object with an integer or string id and nothing to fit (`degraded` is None). Anything else
    (batches, errors, odd ids, non-objects, invalid bytes, NUL, long eras; orjson refuses lone
    surrogates) takes `classify`, and
    tests/recorder/test_derived_fast_path.py holds the two to the same answer. The append and
    `verify` run this once per frame, where a full classification is a visible share of the
    frame's cost."""
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return classify(raw)[:DERIVED_FIELDS]
    if message.__class__ is not dict:
        return classify(raw)[:DERIVED_FIELDS]
    get = message.get
    raw_id = get("id", _NO_ID)
    rpc_id: str | None
    rpc_id_type: str | None
    if raw_id.__class__ is int:
        rpc_id, rpc_id_type = str(raw_id), "number"
    elif raw_id.__class__ is str and "\x00" not in raw_id:
        rpc_id, rpc_id_type = raw_id, "string"
    elif raw_id is _NO_ID:
        rpc_id = rpc_id_type = None
    else:
        return classify(raw)[:DERIVED_FIELDS]
    method = get("method")
    if method.__class__ is str and "\x00" not in method:
        params = get("params")
        if params.__class__ is not dict:
            if "result" in message:
                return classify(raw)[:DERIVED_FIELDS]  # `_version_of` would read the result
            return ("request" if rpc_id_type else "notification", method, rpc_id, rpc_id_type,
                    None, None, None, None, None)  # fmt: skip
        tool = era = None
        if method == "tools/call":
            name = params.get("name")
            if name.__class__ is str:
                if "\x00" in name:
                    return classify(raw)[:DERIVED_FIELDS]
                tool = name
        meta = params.get("_meta")
        version = meta.get(META_PROTOCOL_VERSION) if meta.__class__ is dict else None
        if version.__class__ is not str and method == "initialize":
            version = params.get("protocolVersion")
        if version.__class__ is str:
            if len(version) > ERA_MAX or "\x00" in version:
                return classify(raw)[:DERIVED_FIELDS]  # a degraded era
            era = version or None
        kind = "request" if rpc_id_type else "notification"
        return (kind, method, rpc_id, rpc_id_type, tool, None, None, era, None)
    if method is not None or rpc_id_type is None or "error" in message:
        return classify(raw)[:DERIVED_FIELDS]
    if "result" not in message or "params" in message:  # `_version_of` would read the params
        return classify(raw)[:DERIVED_FIELDS]
    result = get("result")
    if result.__class__ is not dict:
        return ("response", None, rpc_id, rpc_id_type, None, False, None, None, None)
    version = result.get("protocolVersion")
    era = None
    if version.__class__ is str:
        if len(version) > ERA_MAX or "\x00" in version:
            return classify(raw)[:DERIVED_FIELDS]  # a degraded era
        era = version or None
    is_error = result.get("isError") is True
    return ("response", None, rpc_id, rpc_id_type, None, is_error, None, era, None)
