"""Classify a raw wire frame into the fields the log indexes.

`classify` never raises: a frame that is not JSON, not UTF-8 or not JSON-RPC is described by
`problem`, because the recorder must keep every byte it forwarded, parseable or not.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import orjson

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
MODERN_ERA = "2026-07-28"

# The derived columns are views that every store's columns must hold whatever a peer sends, or one
# hostile frame fails its whole batch: PostgreSQL text cannot hold NUL (it becomes U+FFFD), an
# error code must fit a signed 64-bit BIGINT and an era the 16 characters of its column (else
# NULL). The raw bytes keep the exact value, and the chain covers them.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
ERA_MAX = 16


def fit_text(value: str | None) -> str | None:
    """A derived text column as every store can hold it: NUL replaced by U+FFFD."""
    if value is not None and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


def fit_era(value: object) -> str | None:
    """A protocol version as the era column holds it: text of 1 to ERA_MAX characters (an empty
    version names no era: the append, which takes a session's first era, skips it)."""
    if value.__class__ is str and 0 < len(value) <= ERA_MAX:  # type: ignore[arg-type]
        return fit_text(value)  # type: ignore[arg-type]
    return None


def fit_stored(column: str, value: object) -> object:
    """A derived value as stored by an older version, seen as the fitted view gives it: records
    appended before the views were fitted may hold NUL in a text column or an era of any length,
    and they are no sign of tampering."""
    if column == "era":
        return fit_era(value)
    if value.__class__ is str:
        return fit_text(value)  # type: ignore[arg-type]
    return value


def fit_code(value: object) -> int | None:
    """A JSON-RPC error code as the error_code column holds it: a signed 64-bit integer."""
    if value.__class__ is int and INT64_MIN <= value <= INT64_MAX:  # type: ignore[operator]
        return value  # type: ignore[return-value]
    return None


class Classification(NamedTuple):
    """What a frame is. `msg_type` is one of request, notification, response, error, batch,
    invalid. `problem` names why a frame is invalid: invalid_utf8, invalid_json, not_jsonrpc,
    empty. The first eight fields are the log's derived columns, in their order.

    A named tuple rather than a frozen dataclass: every appended frame builds one, and a frozen
    dataclass took three times as long to construct (bench/ingest.py's hot path)."""

    msg_type: str
    method: str | None = None
    rpc_id: str | None = None
    rpc_id_type: str | None = None
    tool: str | None = None
    is_error: bool | None = None
    error_code: int | None = None
    era: str | None = None
    problem: str | None = None
    items: tuple[Classification, ...] = ()


INVALID_JSON = Classification("invalid", problem="invalid_json")


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
    try:
        return json.loads(text), None
    except ValueError:
        return None, "invalid_json"


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
    return json.dumps(value, sort_keys=True), "other"


def _era_of(message: dict, method: str | None) -> str | None:
    params = message.get("params")
    if params.__class__ is dict:
        meta = params.get("_meta")
        if meta.__class__ is dict:
            version = meta.get(META_PROTOCOL_VERSION)
            if isinstance(version, str):
                return fit_era(version)
        if method == "initialize":
            version = params.get("protocolVersion")
            if isinstance(version, str):
                return fit_era(version)
        return None
    result = message.get("result")
    if result.__class__ is dict:
        version = result.get("protocolVersion")
        if isinstance(version, str):
            return fit_era(version)
    return None


def classify_message(message: object) -> Classification:
    """Classify one parsed JSON-RPC message (not a batch)."""
    if message.__class__ is not dict:
        return Classification("invalid", problem="not_jsonrpc")
    get = message.get  # type: ignore[attr-defined]
    method = get("method")
    if method is not None and not isinstance(method, str):
        method = None
    has_id = "id" in message
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
        return Classification(
            "request" if has_id else "notification",
            method,
            rpc_id,
            rpc_id_type,
            tool,
            era=_era_of(message, method),  # type: ignore[arg-type]
        )
    if not has_id:
        return Classification("invalid", problem="not_jsonrpc")
    if "error" in message:
        error = get("error")
        code = fit_code(error.get("code")) if error.__class__ is dict else None
        return Classification("error", None, rpc_id, rpc_id_type, error_code=code)
    if "result" in message:
        result = get("result")
        is_error = result.__class__ is dict and result.get("isError") is True
        era = _era_of(message, None) if result.__class__ is dict else None  # type: ignore[arg-type]
        return Classification("response", None, rpc_id, rpc_id_type, is_error=is_error, era=era)
    return Classification("invalid", problem="not_jsonrpc")


def classify(raw: bytes) -> Classification:
    """Classify a raw frame. Never raises. Its derived columns fit every store's columns (see
    `fit_text`); a batch's items keep their exact text."""
    c = _classify(raw)
    # Checking the three short texts is ten times cheaper than scanning a 1 KiB frame for NUL.
    if (
        (c.method and "\x00" in c.method)
        or (c.rpc_id and "\x00" in c.rpc_id)
        or (c.tool and "\x00" in c.tool)
    ):
        c = c._replace(method=fit_text(c.method), rpc_id=fit_text(c.rpc_id), tool=fit_text(c.tool))
    return c


def _classify(raw: bytes) -> Classification:
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
            return Classification(
                "batch",
                method=first.method,
                era=next((item.era for item in items if item.era), None),
                items=items,
            )
        if value.__class__ is dict and value.get("id").__class__ is float:
            # orjson reads integers beyond 64 bits as floats; ids must keep their exact text.
            value = json.loads(raw)
        return classify_message(value)
    except Exception:  # a classifier that raises would lose a frame
        return INVALID_JSON


_NO_ID = object()
DERIVED_FIELDS = 8  # Classification's leading fields: the log's derived columns


def derived_columns(raw: bytes) -> tuple:  # type: ignore[type-arg]
    """`classify(raw)[:DERIVED_FIELDS]`, the derived columns of a frame, without building a
    classification for the shapes nearly every frame has: one request, notification or result
    object with an integer or string id and no NUL in its texts. Anything else (batches, errors,
    odd ids, non-objects, invalid bytes, NUL) takes `classify`, and
    tests/recorder/test_derived_fast_path.py holds the two to the same answer. The append and
    `verify` run this once per frame: it took 2.2 us of a 1 KiB frame's 13 (bench/ingest.py)."""
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return classify(raw)[:DERIVED_FIELDS]
    if message.__class__ is not dict:
        return classify(raw)[:DERIVED_FIELDS]
    get = message.get
    raw_id = get("id", _NO_ID)
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
                return classify(raw)[:DERIVED_FIELDS]  # `_era_of` would read the result
            return ("request" if rpc_id_type else "notification", method, rpc_id, rpc_id_type,
                    None, None, None, None)  # fmt: skip
        tool = era = None
        if method == "tools/call":
            name = params.get("name")
            if name.__class__ is str:
                if "\x00" in name:
                    return classify(raw)[:DERIVED_FIELDS]
                tool = name
        meta = params.get("_meta")
        version = meta.get(META_PROTOCOL_VERSION) if meta.__class__ is dict else None
        if version.__class__ is str:
            era = fit_era(version)
        elif method == "initialize":
            version = params.get("protocolVersion")
            if version.__class__ is str:
                era = fit_era(version)
        kind = "request" if rpc_id_type else "notification"
        return (kind, method, rpc_id, rpc_id_type, tool, None, None, era)
    if method is not None or rpc_id_type is None or "error" in message:
        return classify(raw)[:DERIVED_FIELDS]
    if "result" not in message or "params" in message:  # `_era_of` would read the params
        return classify(raw)[:DERIVED_FIELDS]
    result = get("result")
    if result.__class__ is not dict:
        return ("response", None, rpc_id, rpc_id_type, None, False, None, None)
    version = result.get("protocolVersion")
    era = fit_era(version) if version.__class__ is str else None
    return ("response", None, rpc_id, rpc_id_type, None, result.get("isError") is True, None, era)
