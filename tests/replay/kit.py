"""Helpers for the replay tests: sessions built through the store API, and real SDK sessions
recorded through `blackbox record` (the stdio tap)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from recorder.model import Direction, Kind, NewEvent, new_session_id
from recorder.store import EventStore

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"
ROOT = HERE.parent.parent
EXAMPLE_SERVER = ROOT / "examples" / "server.py"
BLACKBOX = str(Path(sys.executable).with_name("blackbox"))


def raw(message: dict | bytes) -> bytes:
    if isinstance(message, bytes):
        return message
    return json.dumps(message, separators=(",", ":")).encode()


def store_session(
    store: EventStore,
    frames: Sequence[tuple[str, dict | bytes, float]],
    command: list[str] | str | None = None,
    ended: dict | None = None,
    faults: Sequence[tuple[int, dict]] = (),
    name: str = "test",
) -> str:
    """A session from (direction, message, offset_ms) triples; `faults` are (after frame index,
    fault document) pairs. Returns its id."""
    sid = new_session_id()
    wall0 = time.time_ns()
    started = {"name": name, "transport": "stdio", "command": command, "replay_of": None}
    events = [NewEvent(sid, 1, wall0, 0, Kind.SESSION_STARTED, Direction.NONE, raw(started))]
    fault_after = dict(faults)
    last_ns = 0
    for i, (direction, message, offset_ms) in enumerate(frames):
        last_ns = int(offset_ms * 1e6)
        events.append(
            NewEvent(
                sid, len(events) + 1, wall0 + last_ns, last_ns, Kind.FRAME, direction, raw(message)
            )
        )
        if i in fault_after:
            events.append(
                NewEvent(
                    sid,
                    len(events) + 1,
                    wall0 + last_ns,
                    last_ns,
                    Kind.FAULT,
                    Direction.NONE,
                    raw(fault_after[i]),
                )
            )
    if ended is not None:
        events.append(
            NewEvent(
                sid,
                len(events) + 1,
                wall0 + last_ns,
                last_ns,
                Kind.SESSION_ENDED,
                Direction.NONE,
                raw(ended),
            )
        )
    store.append(events)
    return sid


def c2s(message: dict | bytes, at_ms: float = 0.0) -> tuple[str, dict | bytes, float]:
    return (Direction.CLIENT_TO_SERVER, message, at_ms)


def s2c(message: dict | bytes, at_ms: float = 0.0) -> tuple[str, dict | bytes, float]:
    return (Direction.SERVER_TO_CLIENT, message, at_ms)


def run_blackbox(
    args: Sequence[str], env: dict | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BLACKBOX, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or os.environ.copy(),
        cwd=cwd,
    )
