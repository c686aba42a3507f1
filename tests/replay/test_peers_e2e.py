"""End to end against third-party servers recorded through `blackbox record`: mcp-server-time
(answers hold the current time: a plain replay diverges, --learn masks it) and
@modelcontextprotocol/server-everything (its own roots/list request is answered from the
recording). And --timing original keeps the recorded gaps."""

from __future__ import annotations

import time
from pathlib import Path

from blackbox.recorder.log.model import Direction, Kind
from blackbox.recorder.store import open_store
from blackbox.replay.replayer import ReplayOptions, replay_session
from blackbox.replay.report import render_text

from tests.fixtures import peers
from tests.fixtures.environment import ROOT
from tests.fixtures.replay_kit import c2s, record_session, s2c, store_session, wait_recorded

ECHO_SERVER = [peers.PYTHON, str(ROOT / "tests" / "fixtures" / "every_kind_server.py")]
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def test_time_server_diverges_on_time_fields_and_learn_masks_them(
    sqlite_url: str, tmp_path: Path
) -> None:
    store = open_store(sqlite_url)
    calls = [
        ("get_current_time", {"timezone": "Europe/Paris"}),
        (
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        ),
    ]
    sid = record_session(store, sqlite_url, tmp_path, peers.TIME_SERVER, calls, "modern", "time")
    time.sleep(1.1)  # the current time now differs from the recorded one, to the second
    plain = replay_session(store, sid)
    assert plain.exit_code == 1
    (diverged,) = [s for s in plain.steps if s.status == "diverged"]
    assert diverged.tool == "get_current_time"
    paths = {d.path for d in diverged.differences}
    # the time inside the text (JSON in a text field) and in structuredContent; nothing else
    assert paths == {"$.result.content[0].text.datetime", "$.result.structuredContent.datetime"}
    learned = replay_session(store, sid, options=ReplayOptions(learn=True))
    assert learned.exit_code == 0, render_text(learned)
    assert any("datetime" in path for path in learned.learned)
    # convert_time is deterministic: learning did not mask it
    convert_step = next(s.number for s in learned.steps if s.tool == "convert_time")
    assert not any(p.startswith(f"step {convert_step}:") for p in learned.learned)
    store.close()


def test_server_everything_server_requests_answered_from_the_recording(
    sqlite_url: str, tmp_path: Path
) -> None:
    import anyio
    from mcp import Client

    store = open_store(sqlite_url)
    env = peers.tap_env(tmp_path, sqlite_url)
    server = peers.params(peers.record_command(peers.EVERYTHING_SERVER, "ev", sqlite_url), env)

    async def session() -> str:
        # auto: server/discover fails, the client falls back to the handshake. The server then
        # asks for the client's roots (roots/list, id 0); get-roots-list reports what it got.
        with anyio.fail_after(90):
            async with Client(server, mode="auto", list_roots_callback=peers._roots) as client:
                await client.call_tool("echo", {"message": "hello"})
                while True:
                    await anyio.sleep(0.2)
                    result = await client.call_tool("get-roots-list", {})
                    text = result.content[0].text
                    if "blackbox/test-root" in text:
                        return text

    anyio.run(session)
    sid = wait_recorded(store, "ev")
    original = list(store.read_session(sid))
    assert any(
        e.method == "roots/list" and e.direction == Direction.SERVER_TO_CLIENT for e in original
    )
    result = replay_session(store, sid)
    assert result.exit_code == 0, render_text(result)
    replayed = list(store.read_session(result.replay_id))
    asked = [e for e in replayed if e.method == "roots/list"]
    answers = [
        e
        for e in replayed
        if e.direction == Direction.CLIENT_TO_SERVER and b"blackbox/test-root" in e.raw
    ]
    assert asked and answers and answers[0].rpc_id == asked[0].rpc_id
    assert [e.kind for e in replayed][-2:] == [Kind.SESSION_ENDED, "session_sealed"]
    store.close()


def test_timing_original_keeps_the_recorded_gaps(sqlite_url: str) -> None:
    store = open_store(sqlite_url)

    def call(i: int, message: str) -> dict:
        params = {"name": "echo", "arguments": {"message": message}, "_meta": META}
        return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}

    def answer(i: int, message: str) -> dict:
        result = {"content": [{"type": "text", "text": message}], "isError": False}
        return {"jsonrpc": "2.0", "id": i, "result": result}

    gaps_ms = [250, 120, 400, 60, 90, 30, 150, 200]
    frames = [c2s(call(1, "m0"), 0), s2c(answer(1, "m0"), 5)]
    t = 5.0
    for i, gap in enumerate(gaps_ms, start=2):
        t += gap
        frames += [c2s(call(i, f"m{i}"), t), s2c(answer(i, f"m{i}"), t + 5)]
        t += 5
    # The gaps are the replayer's to keep, whatever answers: a standard-library server that
    # echoes as recorded starts for a fraction of the CPU of an SDK server (two replays).
    sid = store_session(store, frames, command=ECHO_SERVER)
    errors = []
    for speed in (1.0, 2.0):
        result = replay_session(store, sid, options=ReplayOptions(timing="original", speed=speed))
        events = [e for e in store.read_session(result.replay_id) if e.kind == Kind.FRAME]
        measured = [
            (events[k].mono_ns - events[k - 1].mono_ns) / 1e6 for k in range(2, len(events), 2)
        ]
        # never early: each request waits at least its (scaled) recorded gap
        assert all(m >= g / speed - 1.0 for m, g in zip(measured, gaps_ms, strict=True)), measured
        errors += [abs(m - g / speed) for m, g in zip(measured, gaps_ms, strict=True)]
    # The bound is looser than the benchmark's figure (a median of a fraction of a millisecond):
    # on a CI machine whose cores are shared by many jobs, wake-ups come late by milliseconds.
    assert sorted(errors)[len(errors) // 2] <= 3.0, errors
    store.close()
