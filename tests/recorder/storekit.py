"""Builders of realistic sessions through the store API, for the store's own tests."""

from __future__ import annotations

import json

from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id

T0 = 1_790_000_000_000_000_000


def frame(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def session_events(
    session_id: str | None = None,
    calls: int = 3,
    ended: bool = True,
    start_ns: int = T0,
    name: str = "time",
) -> list[NewEvent]:
    """A legacy-era stdio session: started, handshake, `calls` tool calls, ended."""
    sid = session_id or new_session_id(start_ns)
    docs: list[tuple[str, str, bytes]] = [
        (
            Kind.SESSION_STARTED,
            Direction.NONE,
            frame({"name": name, "transport": "stdio", "command": ["python", "-m", "server"]}),
        ),
        (
            Kind.FRAME,
            Direction.CLIENT_TO_SERVER,
            frame(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "clientInfo": {"name": "t"}},
                }
            ),
        ),
        (
            Kind.FRAME,
            Direction.SERVER_TO_CLIENT,
            frame({"result": {"protocolVersion": "2025-11-25"}, "jsonrpc": "2.0", "id": 0}),
        ),
    ]
    for i in range(1, calls + 1):
        docs.append(
            (
                Kind.FRAME,
                Direction.CLIENT_TO_SERVER,
                frame(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": "get_current_time", "arguments": {"tz": "UTC"}},
                    }
                ),
            )
        )
        docs.append(
            (
                Kind.FRAME,
                Direction.SERVER_TO_CLIENT,
                frame({"jsonrpc": "2.0", "id": i, "result": {"content": [], "isError": i == 2}}),
            )
        )
    if ended:
        docs.append((Kind.SESSION_ENDED, Direction.NONE, frame({"reason": "client_closed"})))
    return [
        NewEvent(sid, seq, start_ns + seq * 1000, seq * 1000, kind, direction, raw)
        for seq, (kind, direction, raw) in enumerate(docs, start=1)
    ]
