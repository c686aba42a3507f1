"""`make demo`: write a small real session into the default store, then list and show it.

Uses the store API directly; the recording taps make real sessions the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from blackbox import config
from recorder.model import Direction, Kind, NewEvent, new_session_id
from recorder.store import open_store

BLACKBOX = str(Path(sys.executable).with_name("blackbox"))


def frames() -> list[tuple[str, str, dict]]:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "demo"}}
    return [
        (
            Kind.FRAME,
            Direction.CLIENT_TO_SERVER,
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        ),
        (
            Kind.FRAME,
            Direction.SERVER_TO_CLIENT,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "demo-server"},
                },
            },
        ),
        (
            Kind.FRAME,
            Direction.CLIENT_TO_SERVER,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ),
        (
            Kind.FRAME,
            Direction.CLIENT_TO_SERVER,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "hello"}},
            },
        ),
        (
            Kind.FRAME,
            Direction.SERVER_TO_CLIENT,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "result": {"content": [{"type": "text", "text": "hello"}], "isError": False},
            },
        ),
    ]


def main() -> None:
    store = open_store(config.store_url())
    sid = new_session_id()
    start = time.monotonic_ns()
    events = [
        NewEvent(
            sid,
            1,
            time.time_ns(),
            0,
            Kind.SESSION_STARTED,
            Direction.NONE,
            json.dumps({"name": "demo", "transport": "stdio", "command": ["demo-server"]}).encode(),
        ),
    ]
    for kind, direction, message in frames():
        raw = json.dumps(message, separators=(",", ":")).encode()
        events.append(
            NewEvent(
                sid,
                len(events) + 1,
                time.time_ns(),
                time.monotonic_ns() - start,
                kind,
                direction,
                raw,
            )
        )
    events.append(
        NewEvent(
            sid,
            len(events) + 1,
            time.time_ns(),
            time.monotonic_ns() - start,
            Kind.SESSION_ENDED,
            Direction.NONE,
            b'{"reason":"client_closed","outcome":"ok"}',
        )
    )
    store.append(events)
    print(f"recorded session {sid} into {store.url}\n")
    for args in (["sessions", "--limit", "5"], ["show", "last"], ["verify", "last"]):
        print(f"$ blackbox {' '.join(args)}")
        subprocess.run([BLACKBOX, *args], check=True)
        print()


if __name__ == "__main__":
    main()
