"""Replay a session recorded in one protocol era against a server in another.

A team moving its server to the 2026-07-28 stateless protocol wants to know that nothing its
clients depend on changed. Its recorded sessions speak the legacy protocol, so they are rewritten
frame by frame before the replay: the `initialize` request becomes `server/discover` (same id),
`notifications/initialized` and client pings go, and every request carries in `params._meta` the
protocol version, client info and capabilities the handshake declared. Backwards, the first
request's `_meta` becomes an `initialize` (in place of `server/discover`, or inserted first) and
`notifications/initialized`, and the protocol keys leave `_meta`.

The comparison then ignores what the era change must change: the handshake's answer as a whole,
and the fields the 2026-07-28 era adds to every result (`resultType`, `cacheScope`, `ttlMs`,
`_meta`). Everything else is reported as usual. Stdio carries no session id; over HTTP the
driver handles `Mcp-Session-Id`, and headers are not compared.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from blackbox.recorder.log import (
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    MODERN_ERA,
    Direction,
    Kind,
    StoredEvent,
    classify,
    events,
)
from blackbox.replay.compare import parse_pattern
from blackbox.replay.recording import Recording, ReplayError, build_recording

META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
PROTOCOL_KEYS = (META_PROTOCOL_VERSION, META_CLIENT_INFO, META_CAPABILITIES)
LEGACY_ERAS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
ERAS = (MODERN_ERA, *LEGACY_ERAS)
HANDSHAKE_METHODS = ("initialize", "server/discover")
# What every result gains or loses between the eras, never a behaviour change.
ERA_MASKS = ("$.result.resultType", "$.result.cacheScope", "$.result.ttlMs", "$.result._meta")
BRIDGE_ID = "blackbox-era-handshake"  # the id of an inserted initialize (never a recorded one)


def check_era(era: str) -> str:
    if era not in ERAS:
        raise ReplayError(f"unknown era {era!r}: use one of {', '.join(ERAS)}")
    return era


def _message(ev: StoredEvent) -> dict | None:
    try:
        value = json.loads(ev.raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _with(ev: StoredEvent, message: dict) -> StoredEvent:
    """The record with new bytes and the derived columns classified from them."""
    raw = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    c = classify(raw)
    return dataclasses.replace(
        ev,
        raw=raw,
        raw_size=None,
        msg_type=c.msg_type,
        method=c.method,
        rpc_id=c.rpc_id,
        rpc_id_type=c.rpc_id_type,
        tool=c.tool,
        is_error=c.is_error,
        error_code=c.error_code,
        era=c.era,
    )


def _is_client_request(ev: StoredEvent, message: dict | None) -> bool:
    return (
        ev.kind == Kind.FRAME
        and ev.direction == Direction.CLIENT_TO_SERVER
        and message is not None
        and "method" in message
        and "id" in message
    )


def _params(message: dict) -> dict:
    params = message.get("params")
    return dict(params) if isinstance(params, dict) else {}


def _declared(records: Sequence[StoredEvent]) -> tuple[dict, dict]:
    """(client info, capabilities) the session declared: its initialize, else its first _meta."""
    for ev in records:
        message = _message(ev) if ev.kind == Kind.FRAME else None
        if not _is_client_request(ev, message):
            continue
        assert message is not None
        params = _params(message)
        if message.get("method") == "initialize":
            return params.get("clientInfo") or {}, params.get("capabilities") or {}
        meta = params.get("_meta")
        if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
            return meta.get(META_CLIENT_INFO) or {}, meta.get(META_CAPABILITIES) or {}
    return {"name": "blackbox-replay", "version": "1"}, {}


def to_modern(records: Sequence[StoredEvent]) -> list[StoredEvent]:
    """Legacy frames re-spoken in the 2026-07-28 era."""
    info, caps = _declared(records)
    meta = {META_PROTOCOL_VERSION: MODERN_ERA, META_CLIENT_INFO: info, META_CAPABILITIES: caps}
    dropped: set[tuple[str, str]] = set()  # (direction of the response, id) of dropped pings
    out: list[StoredEvent] = []
    for ev in records:
        message = _message(ev) if ev.kind == Kind.FRAME else None
        if ev.kind == Kind.ERA_DETECTED:
            doc = events.EraDetected(era=MODERN_ERA, client_info=info, via="era bridge")
            out.append(dataclasses.replace(ev, raw=events.encode(doc)))
            continue
        if message is None:
            out.append(ev)
            continue
        method, rid = message.get("method"), json.dumps(message.get("id"))
        if method == "notifications/initialized" and ev.direction == Direction.CLIENT_TO_SERVER:
            continue
        if method == "ping" and "id" in message:  # no ping in the stateless era, either way
            answer = Direction.SERVER_TO_CLIENT
            if ev.direction == Direction.SERVER_TO_CLIENT:
                answer = Direction.CLIENT_TO_SERVER
            dropped.add((answer, rid))
            continue
        if "method" not in message and (ev.direction, rid) in dropped:
            continue
        if _is_client_request(ev, message):
            params = _params(message)
            if method == "initialize":
                message = {**message, "method": "server/discover"}
                params = {}
            old = params.get("_meta")
            params["_meta"] = {**(old if isinstance(old, dict) else {}), **meta}
            message = {**message, "params": params}
            ev = _with(ev, message)
        out.append(ev)
    return out


def to_legacy(records: Sequence[StoredEvent], era: str) -> list[StoredEvent]:
    """2026-07-28 frames (or legacy ones of another version) re-spoken in a legacy era."""
    info, caps = _declared(records)
    init_params = {"protocolVersion": era, "capabilities": caps, "clientInfo": info}
    out: list[StoredEvent | _Pending] = []
    has_handshake = any(
        _is_client_request(ev, m) and m is not None and m.get("method") in HANDSHAKE_METHODS
        for ev in records
        if ev.kind == Kind.FRAME
        for m in [_message(ev)]
    )
    first_frame = next((ev for ev in records if ev.kind == Kind.FRAME), None)
    for ev in records:
        if ev.kind == Kind.ERA_DETECTED:
            doc = events.EraDetected(era=era, client_info=info, via="era bridge")
            out.append(dataclasses.replace(ev, raw=events.encode(doc)))
            continue
        if ev is first_frame and not has_handshake:
            request = {"jsonrpc": "2.0", "id": BRIDGE_ID, "method": "initialize"}
            answer = {"jsonrpc": "2.0", "id": BRIDGE_ID, "result": {}}
            out.append(_with(ev, request | {"params": init_params}))
            out.append(_with(dataclasses.replace(ev, direction=Direction.SERVER_TO_CLIENT), answer))
            out.append(_with(ev, {"jsonrpc": "2.0", "method": "notifications/initialized"}))
        message = _message(ev) if ev.kind == Kind.FRAME else None
        if not _is_client_request(ev, message):
            out.append(ev)
            continue
        assert message is not None
        params = _params(message)
        if message.get("method") in HANDSHAKE_METHODS:
            out.append(_with(ev, {**message, "method": "initialize", "params": init_params}))
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            response = _response_of(records, message.get("id"))
            out.append(_Pending(ev, note, response))
            continue
        meta = params.get("_meta")
        if isinstance(meta, dict):
            meta = {k: v for k, v in meta.items() if k not in PROTOCOL_KEYS}
            if meta:
                params["_meta"] = meta
            else:
                params.pop("_meta")
        message = {**message, "params": params} if params else _without_params(message)
        out.append(_with(ev, message))
    return _place_pending(out)


@dataclasses.dataclass
class _Pending:
    """`notifications/initialized`, to go right after the handshake's response."""

    ev: StoredEvent
    note: dict
    response_seq: int | None
    kind: str = "pending"


def _response_of(records: Sequence[StoredEvent], rid: object) -> int | None:
    for ev in records:
        if ev.kind == Kind.FRAME and ev.direction == Direction.SERVER_TO_CLIENT:
            message = _message(ev)
            if message is not None and "method" not in message and message.get("id") == rid:
                return ev.seq
    return None


def _place_pending(items: Sequence[StoredEvent | _Pending]) -> list[StoredEvent]:
    out: list[StoredEvent] = []
    waiting: list[_Pending] = []
    for item in items:
        if isinstance(item, _Pending):
            if item.response_seq is None:
                out.append(_with(item.ev, item.note))
            else:
                waiting.append(item)
            continue
        out.append(item)
        for pending in [p for p in waiting if p.response_seq == item.seq]:
            out.append(_with(pending.ev, pending.note))
            waiting.remove(pending)
    out.extend(_with(p.ev, p.note) for p in waiting)
    return out


def _without_params(message: dict) -> dict:
    return {k: v for k, v in message.items() if k != "params"}


def _renumber(records: list[StoredEvent]) -> list[StoredEvent]:
    """Gapless seqs again (frames were dropped or inserted); fault records' `seq` follows."""
    new_seq: dict[int, int] = {}
    out: list[StoredEvent] = []
    for i, ev in enumerate(records, start=1):
        new_seq.setdefault(ev.seq, i)
        out.append(dataclasses.replace(ev, seq=i))
    olds = sorted(new_seq)
    for i, ev in enumerate(out):
        if ev.kind != Kind.FAULT:
            continue
        doc = events.decode_dict(ev.kind, ev.raw)
        if doc is not None and isinstance(doc.get("seq"), int):
            earlier = [s for s in olds if s <= doc["seq"]]
            doc["seq"] = new_seq[earlier[-1]] if earlier else 1
            out[i] = dataclasses.replace(ev, raw=events.encode(events.from_dict(ev.kind, doc)))
    return out


def bridge_records(records: Sequence[StoredEvent], era: str) -> list[StoredEvent]:
    """A session's records re-spoken in protocol era `era`."""
    check_era(era)
    bridged = to_modern(records) if era == MODERN_ERA else to_legacy(records, era)
    return _renumber(bridged)


def bridged_recording(
    session_id: str, records: Sequence[StoredEvent], era: str
) -> tuple[Recording, list[str], dict[int, list[tuple]]]:
    """The recording re-spoken in `era`, the paths to ignore everywhere, and per-step masks (the
    handshake's answer is compared as a whole by nobody: its shape is the era's)."""
    rec = build_recording(session_id, bridge_records(records, era))
    whole = [parse_pattern("$.result")]
    step_masks = {s.number: whole for s in rec.steps if s.frame.method in HANDSHAKE_METHODS}
    return rec, list(ERA_MASKS), step_masks
