"""Heartbeats: a real server process that stops answering pings while it still answers tool calls
gives an `unresponsive` fault (stage transport) after its third unanswered ping, `peer_back` when
it answers one again, and `doctor` names both at the transport stage with the interval, jitter and
missed pings; `report sessions` shows the same figures."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx2
import pytest
from blackbox.recorder.capture.heartbeat import HeartbeatWatch, heartbeat_stats
from blackbox.recorder.log import events
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.fault_server import FaultServer
from tests.fixtures.http_kit import RecordingProxy, doc
from tests.fixtures.lifecycle_kit import TapProcess
from tests.fixtures.polling import eventually

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).parent / "servers" / "deaf_ping_server.py"


def _ping(tap: TapProcess, n: int) -> None:
    tap.send({"jsonrpc": "2.0", "id": f"hb-{n}", "method": "ping"})


def test_a_server_deaf_to_pings_is_unresponsive_then_back(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    tap = TapProcess(["--name", "deaf"], [sys.executable, str(SERVER)], store_url, tmp_path / "h")
    try:
        tap.initialize()
        assert tap.request("ping", {}) == {"jsonrpc": "2.0", "id": 2, "result": {}}
        tap.call("go_deaf", {})
        for n in (1, 2, 3):
            _ping(tap, n)
            time.sleep(0.2)
        # Tool calls are still answered: the three pings before this one were skipped.
        assert tap.call("echo", {"message": "still here"})["result"]["content"][0]["text"] == (
            "still here"
        )
        tap.call("wake_up", {})
        assert tap.request("ping", {})["result"] == {}
        assert tap.close() == 0
    finally:
        if tap.proc.poll() is None:
            tap.proc.kill()
    store = open_store(store_url)
    try:
        sid = eventually(
            lambda: [s for s in store.list_sessions(name="deaf") if s.sealed], timeout=60
        )[0].session_id
        records = list(store.read_session(sid))
    finally:
        store.close()
    faults = [
        (ev, events.as_dict(events.decode(ev.kind, ev.raw)[0]))  # type: ignore[arg-type]
        for ev in records
        if ev.kind == "fault"
    ]
    assert [d["fault"] for _, d in faults] == ["unresponsive"]
    fault_ev, fault = faults[0]
    assert fault["stage"] == "transport" and fault["peer"] == "server"
    assert fault["ping_ids"] == ['"hb-1"', '"hb-2"', '"hb-3"'] or fault["ping_ids"] == [
        "hb-1",
        "hb-2",
        "hb-3",
    ]
    assert fault["since_last_answer_ns"] > 0 and "3 pings in a row" in fault["detail"]
    # Recorded when the echo's answer showed the third ping was skipped, not before.
    echo_answer = next(
        ev
        for ev in records
        if ev.kind == "frame" and b"still here" in ev.raw and ev.direction == "s2c"
    )
    assert fault_ev.seq > echo_answer.seq
    back = [ev for ev in records if ev.kind == "peer_back"]
    assert len(back) == 1 and back[0].seq > fault_ev.seq
    out = CliRunner().invoke(main, ["doctor", sid, "--store", store_url])
    assert "[transport] error: unresponsive" in out.output, out.output
    assert "heartbeats: 5 pings (c2s)" in out.output and "3 missed" in out.output
    assert "answered again" in out.output
    report = CliRunner().invoke(main, ["report", "sessions", "--store", store_url])
    assert report.exit_code == 0, report.output
    assert "jitter_s" in report.output and "missed_pings" in report.output


def test_pings_answered_late_but_in_order_are_not_missed() -> None:
    found: list[events.Document] = []
    watch = HeartbeatWatch(lambda _sid, doc: found.append(doc), misses=3)
    for n in range(10):
        watch.ping("s", "c2s", str(n), 2 * n, n * 10**9)
        watch.answered("s", "c2s", str(n), 2 * n + 1, n * 10**9 + 5 * 10**8)
    assert found == []
    for n in range(10, 14):  # four pings, none answered: the fourth shows the third missed
        watch.ping("s", "c2s", str(n), 100 + n, n * 10**9)
    assert [d.KIND for d in found] == ["fault"]


def test_heartbeat_stats() -> None:
    calls = [
        {"method": "ping", "direction": "c2s", "started_ns": t * 10**9, "response_seq": r}
        for t, r in [(0, 1), (30, 2), (61, 3), (90, None)]
    ]
    stats = heartbeat_stats([*calls, {"method": "tools/call", "started_ns": 5}])
    assert stats == {
        "direction": "c2s",
        "pings": 4,
        "interval_s": 30.0,
        "jitter_s": 0.816,
        "missed": 1,
    }
    assert heartbeat_stats([]) is None


def test_proxy_records_an_upstream_deaf_to_pings(tmp_path: Path) -> None:
    """Over HTTP: pings POSTed to an upstream path that never answers (the client gives up on
    each), then the next ping after the third: `unresponsive`; a ping answered: `peer_back`."""
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    meta = {"io.modelcontextprotocol/clientInfo": {"name": "hb-test", "version": "1"}}

    def ping(base: str, path: str, rid: str) -> int | None:
        body = {"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {"_meta": meta}}
        try:
            reply = httpx2.post(f"{base}{path}", json=body, headers=headers, timeout=0.5)
        except httpx2.TimeoutException:
            return None
        return reply.status_code

    with FaultServer() as faulty, RecordingProxy(faulty.url, tmp_path / "j", timeout_s=1.0) as p:
        assert ping(p.base_url, "/json", "p0") == 200
        for n in (1, 2, 3):
            assert ping(p.base_url, "/hang", f"p{n}") is None
        assert ping(p.base_url, "/hang", "p4") is None  # shows the third one missed
        assert ping(p.base_url, "/json", "p5") == 200
    records = next(evs for evs in p.sessions().values() if any(e.kind == "frame" for e in evs))
    faults = [doc(ev) for ev in records if ev.kind == "fault" and b"unresponsive" in ev.raw]
    assert len(faults) == 1
    assert faults[0]["ping_ids"] == ["p1", "p2", "p3"] and faults[0]["stage"] == "transport"
    back = [doc(ev) for ev in records if ev.kind == "peer_back"]
    assert len(back) == 1 and back[0]["rpc_id"] == "p5"
