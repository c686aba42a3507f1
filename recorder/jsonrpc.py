"""Classify a raw wire frame into the fields the log indexes.

`classify` never raises: a frame that is not JSON, not UTF-8 or not JSON-RPC is described by
`problem`, because the recorder must keep every byte it forwarded, parseable or not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
MODERN_ERA = "2026-07-28"


@dataclass(frozen=True, slots=True)
class Classification:
    """What a frame is. `msg_type` is one of request, notification, response, error, batch,
    invalid. `problem` names why a frame is invalid: invalid_utf8, invalid_json, not_jsonrpc,
    empty."""

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
    if isinstance(value, int | float):
        return json.dumps(value), "number"
    if isinstance(value, str):
        return value, "string"
    return json.dumps(value, sort_keys=True), "other"


def _era_of(message: dict, method: str | None) -> str | None:
    params = message.get("params")
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict) and isinstance(meta.get(META_PROTOCOL_VERSION), str):
            return meta[META_PROTOCOL_VERSION]
        if method == "initialize" and isinstance(params.get("protocolVersion"), str):
            return params["protocolVersion"]
    result = message.get("result")
    if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
        return result["protocolVersion"]
    return None


def classify_message(message: object) -> Classification:
    """Classify one parsed JSON-RPC message (not a batch)."""
    if not isinstance(message, dict):
        return Classification("invalid", problem="not_jsonrpc")
    method = message.get("method")
    method = method if isinstance(method, str) else None
    has_id = "id" in message
    rpc_id, rpc_id_type = id_fields(message.get("id")) if has_id else (None, None)
    era = _era_of(message, method)
    if method is not None:
        tool = None
        params = message.get("params")
        if (
            method == "tools/call"
            and isinstance(params, dict)
            and isinstance(params.get("name"), str)
        ):
            tool = params["name"]
        return Classification(
            "request" if has_id else "notification",
            method=method,
            rpc_id=rpc_id,
            rpc_id_type=rpc_id_type,
            tool=tool,
            era=era,
        )
    if "error" in message and has_id:
        error = message["error"]
        code = error.get("code") if isinstance(error, dict) else None
        return Classification(
            "error",
            rpc_id=rpc_id,
            rpc_id_type=rpc_id_type,
            error_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        )
    if "result" in message and has_id:
        result = message["result"]
        is_error = result.get("isError") is True if isinstance(result, dict) else False
        return Classification(
            "response",
            rpc_id=rpc_id,
            rpc_id_type=rpc_id_type,
            is_error=is_error,
            era=era,
        )
    return Classification("invalid", problem="not_jsonrpc")


def classify(raw: bytes) -> Classification:
    """Classify a raw frame. Never raises."""
    try:
        value, problem = parse(raw)
        if problem is not None:
            return Classification("invalid", problem=problem)
        if isinstance(value, list):
            if not value:
                return Classification("invalid", problem="not_jsonrpc")
            items = tuple(classify_message(item) for item in value)
            first = items[0]
            return Classification(
                "batch",
                method=first.method,
                era=next((item.era for item in items if item.era), None),
                items=items,
            )
        return classify_message(value)
    except Exception:  # a classifier that raises would lose a frame
        return INVALID_JSON
