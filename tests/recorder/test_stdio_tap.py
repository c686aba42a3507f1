"""`blackbox record` with the official SDK client and real servers, in both eras: the client gets
what it gets without the tap, and the store holds every frame, in order, byte-identical to what
crossed the pipe (checked against an independent capture relay between the tap and the server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blackbox.recorder.store import EventStore, open_store

from tests.fixtures import peers
from tests.fixtures.environment import backend_store_url
from tests.fixtures.taps import EXAMPLE_CALLS, wait_sealed

TIME_CALLS = [
    ("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
]
EVERYTHING_CALLS = [("echo", {"message": "hi"}), ("get-sum", {"a": 2, "b": 40})]

SERVERS = {
    "example": (peers.EXAMPLE_SERVER, EXAMPLE_CALLS),
    "time": (peers.TIME_SERVER, TIME_CALLS),
    "everything": (peers.EVERYTHING_SERVER, EVERYTHING_CALLS),
}


def frames(store: EventStore, sid: str, direction: str) -> list[bytes]:
    return [
        ev.raw for ev in store.read_session(sid) if ev.kind == "frame" and ev.direction == direction
    ]


def case(server: str, era: str, backend: str = "sqlite") -> object:
    """A (server, era) case on a store backend; the id names the backend only when not SQLite."""
    name = f"{server}-{era}" + ("" if backend == "sqlite" else f"-{backend}")
    return pytest.param(server, era, backend, id=name)


@pytest.mark.parametrize(
    ("server", "era", "backend"),
    [
        # One case stores on PostgreSQL: byte-exact on both backends, and everything a separate
        # PostgreSQL recording test used to check (the calls in order, a clean verify) without
        # that test's tap and server.
        case("example", "legacy", "postgresql"),
        case("example", "modern"),
        case("time", "legacy"),
        case("time", "modern"),
        case("everything", "legacy"),
        case("everything", "auto"),  # server-everything has no 2026-07-28 mode: discover, fall back
    ],
)
def test_client_sees_the_same_and_store_is_byte_exact(
    server: str, era: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with backend_store_url(request, backend, tmp_path) as store_url:
        check_byte_exact(server, era, store_url, tmp_path)


def check_byte_exact(server: str, era: str, store_url: str, tmp_path: Path) -> None:
    """The SDK client with `server` directly, then through the tap (and the capture relay) into
    `store_url`: the client sees the same, and the store holds exactly the bytes that crossed."""
    command, calls = SERVERS[server]
    direct = peers.run_client(era, peers.params(command), calls)
    capture = tmp_path / "capture"
    tapped_cmd = peers.record_command(peers.capture_command(command, capture), name=server)
    env = peers.tap_env(tmp_path / "home", store_url)
    tapped = peers.run_client(era, peers.params(tapped_cmd, env), calls)

    assert tapped == direct
    assert tapped.results and all("content" in r for r in tapped.results)

    store = open_store(store_url)
    (info,) = wait_sealed(store)
    assert info.name == server and info.outcome == "ok"
    c2s = frames(store, info.session_id, "c2s")
    s2c = frames(store, info.session_id, "s2c")
    assert b"".join(f + b"\n" for f in c2s) == (capture / "c2s.bin").read_bytes()
    assert b"".join(f + b"\n" for f in s2c) == (capture / "s2c.bin").read_bytes()
    events = list(store.read_session(info.session_id))
    assert [ev.seq for ev in events] == list(range(1, len(events) + 1))
    assert events[0].kind == "session_started" and events[-1].kind == "session_sealed"
    started = json.loads(events[0].raw)
    assert started["transport"] == "stdio" and started["command"][0] == peers.PYTHON
    assert "BLACKBOX_STORE" in started["env_names"]
    assert store_url not in events[0].raw.decode()  # names of variables, never values
    era_events = [json.loads(ev.raw) for ev in events if ev.kind == "era_detected"]
    assert len(era_events) == 1
    assert era_events[0]["era"] == tapped.protocol_version
    if era != "auto":
        # (In auto mode the rejected server/discover carried the modern version first; the
        # store's sessions projection keeps the first era it saw, see the report.)
        assert info.era == tapped.protocol_version
    if era != "modern":
        assert era_events[0]["server_info"]["name"] == tapped.server_name
    calls_made = [ev.tool for ev in events if ev.method == "tools/call"]
    if era == "modern":
        # 2026-07-28 sends a call again with the input the server asked for (`ask`): a repeat.
        calls_made = list(dict.fromkeys(calls_made))
    assert calls_made == [name for name, _ in calls]
    assert store.verify(info.session_id) == [] and store.verify() == []
    store.close()
    assert not list((tmp_path / "home" / "journal").iterdir())  # shipped, then trimmed
