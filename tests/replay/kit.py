"""Helpers for the replay tests: sessions built through the store API, and real SDK sessions
recorded through `blackbox record` (the stdio tap)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.store import EventStore

from tests.polling import eventually

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"


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


def record_session(
    store: EventStore,
    store_url: str,
    home: Path,
    server: Sequence[str],
    calls: Sequence[tuple[str, dict]],
    era: str,
    name: str,
    timeout: float = 60,
) -> str:
    """Record a real SDK client session through `blackbox record`; return its id once sealed.

    A call that makes the server crash ends the client with an error: that is the point of such
    a session, so the error is swallowed and the recording kept."""
    from tests import peers

    env = peers.tap_env(home, store_url)
    with contextlib.suppress(Exception):
        peers.run_client(
            era, peers.params(peers.record_command(server, name, store_url), env), calls
        )
    return wait_recorded(store, name, timeout)


def wait_recorded(store: EventStore, name: str, timeout: float = 60) -> str:
    """The id of the sealed session called `name`, once the tap has shipped it."""
    found = eventually(
        lambda: [s for s in store.list_sessions(name=name) if s.sealed],
        timeout=timeout,
        interval=0.2,
        message=f"session {name} to be recorded",
    )
    return found[0].session_id


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
