"""What a tap learns from the frames it relayed, worked out by the shipper, never by the relay.

Why it exists: parsing JSON on the relay's path would cost every round trip; the relay only splits
lines and journals them. This observer sees each journalled record once (through
`blackbox.recorder.capture.shipper.Shipper`'s observer hook) and turns what it finds into session
events appended to the same journal:

- `era_detected` from the `initialize` exchange (legacy eras) or from the first request carrying
  `_meta` with a protocol version (2026-07-28; after `server/discover` answers when that comes
  first, so the server's info is included);
- `fault` events for lines that are not JSON-RPC: `stdout_pollution` from the server,
  `invalid_json` from the client, `invalid_utf8` from either side;
- the requests still waiting for an answer, which the tap names in an `exit_with_outstanding` fault
  when the server exits under them;
- pings left unanswered (`blackbox.recorder.capture.heartbeat`): an `unresponsive` fault, then
  `peer_back`;
- with a `blackbox.recorder.gate.tool_watch.ToolWatch`, what the server offered and when it changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from blackbox.recorder.capture.heartbeat import PING, HeartbeatWatch
from blackbox.recorder.log import (
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    Direction,
    Kind,
    NewEvent,
    Pending,
    events,
    id_fields,
    parse,
    request_key,
    response_key,
)

Emit = Callable[[str, events.Document], None]  # (session id, document)
# Plain str constants for the per-frame tests: `Direction.CLIENT_TO_SERVER` is an attribute lookup
# through the enum's class on every use (about 0.15 µs on Python 3.11), for every frame shipped.
_FRAME = str(Kind.FRAME)
_C2S, _S2C = str(Direction.CLIENT_TO_SERVER), str(Direction.SERVER_TO_CLIENT)
Observer = Callable[[Sequence[NewEvent]], None]


class FrameObserver:
    """Follows one stdio session's frames: era, invalid lines, outstanding requests."""

    def __init__(
        self, emit: Emit, quarantine_noise: bool = False, tools: Observer | None = None
    ) -> None:
        self.emit = emit
        self.tools = tools
        self.quarantine_noise = quarantine_noise
        self.era: str | None = None
        self._lock = threading.Lock()
        self._initialize: dict[str, Any] | None = None  # the pending initialize request
        self._discover: dict[str, Any] | None = None
        # Every request of either side waiting for its answer -> what the request was.
        self._pending: Pending[dict[str, Any]] = Pending()
        self.heartbeats = HeartbeatWatch(emit)  # pings: `unresponsive` faults and `peer_back`

    def __call__(self, events: Sequence[NewEvent]) -> None:
        with self._lock:
            for ev in events:
                if ev.kind == _FRAME and ev.raw_size is None:
                    self._frame(ev)
        if self.tools is not None:
            self.tools(events)

    def outstanding(self) -> list[dict[str, Any]]:
        """The client's requests the server has not answered, oldest first."""
        with self._lock:
            return [dict(req) for req in self._pending.outstanding(Direction.CLIENT_TO_SERVER)]

    def set_outstanding(self, requests: list[dict[str, Any]]) -> None:
        """Take over the outstanding requests as another process's observer of this session
        saw them (the store worker observes when the tap ships through one)."""
        with self._lock:
            self._pending = Pending()
            for req in requests:
                key = request_key(Direction.CLIENT_TO_SERVER, req.get("id"), req.get("id_type"))
                self._pending.open(key, dict(req))

    # -- per frame ---------------------------------------------------------------------------------

    def _frame(self, ev: NewEvent) -> None:
        value, problem = parse(ev.raw)
        if problem is None and isinstance(value, dict):  # nearly every frame: one message
            self._message(ev, value)
            return
        if problem == "empty":
            return
        if problem is not None or not isinstance(value, list):
            self._invalid(ev, problem or "not_jsonrpc")
            return
        for item in value:
            if isinstance(item, dict):
                self._message(ev, item)
            else:
                self._invalid(ev, "not_jsonrpc")
                return

    def _invalid(self, ev: NewEvent, problem: str) -> None:
        server = ev.direction == Direction.SERVER_TO_CLIENT
        if problem == "invalid_utf8":
            fault, detail = "invalid_utf8", "a line that is not valid UTF-8"
        elif server:
            fault, detail = "stdout_pollution", "the server wrote a line that is not JSON-RPC"
        else:
            fault = "invalid_json"
            detail = "the client sent a line that is not JSON-RPC"
        doc: dict[str, Any] = {
            "fault": fault,
            "stage": "transport",
            "detail": f"{detail} ({problem})",
            "seq": ev.seq,
            "direction": str(ev.direction),
            "excerpt": ev.raw[:200].decode("utf-8", errors="replace"),
        }
        if server and fault == "stdout_pollution":
            doc["quarantined"] = self.quarantine_noise
        self.emit(ev.session_id, events.from_dict(Kind.FAULT, doc))

    def _message(self, ev: NewEvent, msg: dict[str, Any]) -> None:
        direction = str(ev.direction)
        method = msg.get("method")
        has_id = "id" in msg
        if isinstance(method, str):
            if has_id:
                rpc_id, id_type = id_fields(msg.get("id"))
                raw_params = msg.get("params")
                params = raw_params if isinstance(raw_params, dict) else {}
                tool = params.get("name") if method == "tools/call" else None
                request = {
                    "id": rpc_id,
                    "id_type": id_type,
                    "method": method,
                    "tool": tool if isinstance(tool, str) else None,
                    "seq": ev.seq,
                }
                self._pending.open(request_key(direction, rpc_id, id_type), request)
                if method == PING:
                    self.heartbeats.ping(ev.session_id, direction, rpc_id, ev.seq, ev.wall_ns)
                if direction == _C2S and self.era is None:
                    self._era_from_request(ev, method, (rpc_id, id_type), params)
            return
        if not has_id:
            return
        rpc_id, id_type = id_fields(msg.get("id"))
        asked = self._pending.close(response_key(direction, rpc_id, id_type))
        if asked is not None:
            asker = "s2c" if direction == _C2S else "c2s"
            if asked["method"] == PING:
                self.heartbeats.answered(ev.session_id, asker, rpc_id, ev.seq, ev.wall_ns)
            else:
                self.heartbeats.overtaken(ev.session_id, asker, asked["seq"], ev.seq, ev.wall_ns)
        # Only the server's answer to a client's request can tell the era.
        if asked is None or self.era is not None or direction != _S2C:
            return
        result = msg.get("result")
        if not isinstance(result, dict):
            return
        for pending in (self._initialize, self._discover):
            if pending is not None and pending["id"] == (rpc_id, id_type):
                era = result.get("protocolVersion") or pending.get("era")
                if isinstance(era, str):
                    self._detected(ev.session_id, era, pending, result.get("serverInfo"))

    def _era_from_request(
        self,
        ev: NewEvent,
        method: str,
        ident: tuple[str | None, str | None],
        params: dict[str, Any],
    ) -> None:
        raw_meta = params.get("_meta")
        meta = raw_meta if isinstance(raw_meta, dict) else {}
        version = meta.get(META_PROTOCOL_VERSION)
        if method == "initialize":
            self._initialize = {
                "id": ident,
                "era": params.get("protocolVersion"),
                "client_info": params.get("clientInfo"),
                "requested": params.get("protocolVersion"),
                "via": "initialize",
            }
        elif isinstance(version, str):
            pending = {
                "id": ident,
                "era": version,
                "client_info": meta.get(META_CLIENT_INFO),
                "via": method,
            }
            if method == "server/discover":
                self._discover = pending
            else:
                self._detected(ev.session_id, version, pending, None)

    def _detected(
        self, session_id: str, era: str, pending: dict[str, Any], server_info: object
    ) -> None:
        self.era = era
        requested = pending.get("requested")
        doc = events.EraDetected(
            era=era,
            client_info=pending.get("client_info"),
            server_info=server_info,
            via=pending.get("via"),
            requested=requested if requested and requested != era else None,
        )
        self.emit(session_id, doc)
