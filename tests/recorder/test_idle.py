"""Idle sessions: `blackbox record --idle-after 2s` in front of a real server, and the proxy with
the same limit, record `session_idle` after the silence and `session_resumed` when traffic comes
back, in log order between the frames; the in-use time is then a query."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from blackbox.cli.lifecycle_options import idle_after_seconds
from blackbox.cli.main import main
from tests.fixtures.http_kit import RecordingProxy, doc, sdk_server
from tests.fixtures.lifecycle_kit import TapProcess, WarmServer
from tests.fixtures.polling import eventually

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).parent / "servers" / "call_log_server.py"


def _kinds(records) -> list[str]:  # type: ignore[no-untyped-def]
    return [ev.kind for ev in records if ev.kind in ("frame", "session_idle", "session_resumed")]


def test_stdio_session_idle_then_resumed(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    # The server is up before the tap: started by the tap, its start (its imports, seconds on a
    # loaded machine) fell between `initialize` and its answer, an idle stretch, rightly marked,
    # before the one this test makes. Pings would keep it busy, but they are frames to count.
    command = [sys.executable, str(SERVER), str(tmp_path / "calls.log")]
    with WarmServer(command, tmp_path / "server") as server:
        tap = TapProcess(
            ["--name", "idler", "--idle-after", "2s"],
            server.relay_command,
            store_url,
            tmp_path / "home",
        )
        try:
            tap.initialize()
            server.handed_over()
            assert "result" in tap.call("echo", {"message": "before"})
            time.sleep(3.0)
            assert "result" in tap.call("echo", {"message": "after"})
            assert tap.close() == 0
        finally:
            if tap.proc.poll() is None:
                tap.proc.kill()
    store = open_store(store_url)
    try:
        sid = eventually(
            lambda: [s for s in store.list_sessions(name="idler") if s.sealed], timeout=60
        )[0].session_id
        records = list(store.read_session(sid))
        assert store.verify(sid) == []
    finally:
        store.close()
    kinds = _kinds(records)
    assert kinds.count("session_idle") == 1 and kinds.count("session_resumed") == 1
    idle_at, resumed_at = kinds.index("session_idle"), kinds.index("session_resumed")
    # initialize, its answer, initialized, the call and its answer; then silence; then the call.
    assert kinds[:idle_at] == ["frame"] * 5 and resumed_at == idle_at + 1
    assert kinds[resumed_at + 1 :] == ["frame", "frame"]
    idle = doc(next(ev for ev in records if ev.kind == "session_idle"))
    resumed = doc(next(ev for ev in records if ev.kind == "session_resumed"))
    assert idle["idle_after_ns"] == 2_000_000_000
    assert 2.0e9 <= resumed["idle_ns"] < 10e9 and resumed["direction"] == "c2s"
    last_frame = [ev for ev in records if ev.kind == "frame"][4]
    assert abs(idle["last_frame_ns"] - last_frame.wall_ns) < 0.5e9
    out = CliRunner().invoke(main, ["sessions", "--idle", "--store", store_url, "--format", "json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert row["id"] == sid and row["idle_periods"] == 1


def test_busy_session_is_not_idle(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    # Busy: the client sends a frame at least every 0.5 s, pinging while an answer is slow. On a
    # loaded machine the server's start alone (its imports) left the tap 2 s without a frame
    # between `initialize` and its answer: an idle stretch, rightly marked.
    tap = TapProcess(
        ["--name", "busy", "--idle-after", "2s"],
        [sys.executable, str(SERVER), str(tmp_path / "calls.log")],
        store_url,
        tmp_path / "home",
        keepalive=0.5,
    )
    try:
        tap.initialize()
        for i in range(4):
            tap.call("echo", {"message": str(i)})
            time.sleep(0.5)
        assert tap.close() == 0
    finally:
        if tap.proc.poll() is None:
            tap.proc.kill()
    store = open_store(store_url)
    try:
        sid = eventually(
            lambda: [s for s in store.list_sessions(name="busy") if s.sealed], timeout=60
        )[0].session_id
        assert "session_idle" not in _kinds(store.read_session(sid))
    finally:
        store.close()
    out = CliRunner().invoke(main, ["sessions", "--idle", "--store", store_url, "--format", "json"])
    assert out.exit_code == 0 and json.loads(out.output) == []


def test_proxy_session_idle_then_resumed(tmp_path: Path) -> None:
    async def run(url: str) -> None:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            await s.call_tool("echo", {"message": "before"})
            await anyio.sleep(1.8)
            await s.call_tool("echo", {"message": "after"})

    with sdk_server() as upstream, RecordingProxy(upstream, tmp_path / "j", idle_after_s=1.0) as p:
        anyio.run(run, p.url)
    session = next(evs for evs in p.sessions().values() if any(e.kind == "frame" for e in evs))
    kinds = _kinds(session)
    assert kinds.count("session_idle") == 1 and kinds.count("session_resumed") == 1
    assert kinds.index("session_idle") + 1 == kinds.index("session_resumed")
    assert kinds[-1] == "frame" and kinds[0] == "frame"


def test_idle_after_reads_flag_then_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BLACKBOX_IDLE_AFTER", raising=False)
    assert idle_after_seconds(None) == 7200.0
    monkeypatch.setenv("BLACKBOX_IDLE_AFTER", "30min")
    assert idle_after_seconds(None) == 1800.0
    assert idle_after_seconds("2s") == 2.0 and idle_after_seconds("off") is None
    out = CliRunner().invoke(main, ["record", "--idle-after", "soon", "--", "true"])
    assert out.exit_code == 2 and "Traceback" not in out.output
