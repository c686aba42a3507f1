"""`blackbox proxy` between the official SDK client and an SDK server, in both protocol eras:
the client gets identical results with and without the proxy, and every message is recorded once,
in order, in the right session."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx2
import pytest
from blackbox.recorder.store import open_store
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult, Implementation

from tests.fixtures.http_kit import (
    RecordingProxy,
    check_session_integrity,
    doc,
    frames,
    of_kind,
    sdk_server,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def upstream() -> str:
    with sdk_server() as url:
        yield url


async def _elicit(_ctx: object, _params: object) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Ada"})


class Wire:
    """What the client put on the wire: each POST body, in order (an httpx2 request hook)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def hook(self, request: httpx2.Request) -> None:
        if request.method == "POST":
            self.bodies.append(request.content)

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            event_hooks={"request": [self.hook]}, timeout=httpx2.Timeout(30, read=60)
        )


async def scenario(url: str, mode: str, wire: Wire, name: str = "proxy-test") -> dict:
    """The same conversation every run: tools, plain and failing calls, progress, a question."""
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    out: dict = {}
    async with (
        wire.client() as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            elicitation_callback=_elicit,
            client_info=Implementation(name=name, version="1.0"),
        ) as client,
    ):
        out["era"] = client.protocol_version
        out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
        out["add"] = (await client.call_tool("add", {"a": 2, "b": 40})).content[0].text
        echo = await client.call_tool("echo", {"message": "héllo \u2603"})
        out["echo"] = echo.content[0].text
        failed = await client.call_tool("fail", {"reason": "on purpose"})
        out["fail"] = (failed.is_error, failed.content[0].text)
        count = await client.call_tool("countdown", {"n": 3}, progress_callback=on_progress)
        out["countdown"] = count.content[0].text
        out["greet"] = (await client.call_tool("greet", {})).content[0].text
    out["progress"] = progress
    return out


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_client_identical_through_proxy_and_recorded_once(
    upstream: str, mode: str, tmp_path: Path
) -> None:
    direct = anyio.run(scenario, upstream, mode, Wire())
    wire = Wire()
    with RecordingProxy(upstream, tmp_path / "journal") as proxy:
        through = anyio.run(scenario, proxy.url, mode, wire)
    assert through == direct
    assert direct["add"] == "42" and direct["greet"] == "hello Ada"
    assert direct["era"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")

    sessions = proxy.sessions()
    assert len(sessions) == 1, "one client conversation is one recording session"
    (events,) = sessions.values()
    check_session_integrity(events)
    # Every body the client posted is recorded byte for byte, once, in the order it was sent.
    assert [ev.raw for ev in frames(events, "c2s")] == wire.bodies
    era = of_kind(events, "era_detected")
    assert [doc(e)["era"] for e in era] == [direct["era"]]
    started = doc(events[0])
    assert started["transport"] == "http" and started["command"] == upstream
    assert started["session_rule"] == ("initialize" if mode == "legacy" else "client")
    # One http_exchange per POST (plus the GET stream and DELETE of a stateful session).
    exchanges = [doc(e) for e in of_kind(events, "http_exchange")]
    assert sum(1 for x in exchanges if x["method"] == "POST") == len(wire.bodies)
    assert all(x["status"] in (200, 202) for x in exchanges)
    s2c = [json.loads(ev.raw) for ev in frames(events, "s2c")]
    progress = [m for m in s2c if m.get("method") == "notifications/progress"]
    assert len(progress) == len(direct["progress"])
    if mode == "legacy":
        assert events[-1].kind == "session_ended"
        assert doc(events[-1])["reason"] == "client_closed"
        assert any(m.get("method") == "elicitation/create" for m in s2c)
    else:
        # 2026-07-28: the question comes back as an InputRequiredResult and the retry carries
        # requestState; no Mcp-Session-Id, so the session is the client's identity.
        assert any("inputRequests" in (m.get("result") or {}) for m in s2c)
        retry = [json.loads(ev.raw) for ev in frames(events, "c2s")][-1]
        assert "requestState" in retry["params"]
        headers = [x["request_headers"] for x in exchanges]
        assert all(h.get("mcp-method") for h in headers)
        assert any(h.get("mcp-name") == "greet" for h in headers)


def test_streamable_http_client_raw_session(upstream: str, tmp_path: Path) -> None:
    """The transport alone (`streamable_http_client` + ClientSession): handshake, GET stream,
    DELETE at the end: the session id binds the whole conversation and DELETE ends it."""
    from mcp.client.session import ClientSession

    async def run(url: str) -> tuple[str, list[str]]:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            result = await session.call_tool("echo", {"message": "raw"})
            return result.content[0].text, sorted(t.name for t in tools.tools)

    direct = anyio.run(run, upstream)
    with RecordingProxy(upstream, tmp_path / "journal") as proxy:
        through = anyio.run(run, proxy.url)
    assert through == direct
    (events,) = proxy.sessions().values()
    check_session_integrity(events)
    methods = [json.loads(ev.raw).get("method") for ev in frames(events, "c2s")]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    exchanges = [doc(e) for e in of_kind(events, "http_exchange")]
    assert {x["method"] for x in exchanges} == {"POST", "GET", "DELETE"}
    session_ids = {x["response_headers"].get("mcp-session-id") for x in exchanges} - {None}
    assert len(session_ids) == 1
    assert doc(events[-1])["reason"] == "client_closed"


def test_two_clients_two_sessions_and_store_roundtrip(
    upstream: str, tmp_path: Path, store_url: str
) -> None:
    """Two concurrent handshake-era clients are two sessions; shipped to the store (SQLite and
    PostgreSQL) they are sealed, intact, and keep their derived fields."""

    async def both(url: str) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(scenario, url, "legacy", Wire(), "client-a")
            tg.start_soon(scenario, url, "legacy", Wire(), "client-b")

    with RecordingProxy(upstream, tmp_path / "journal", name="sdk") as proxy:
        anyio.run(both, proxy.url)
    sessions = proxy.sessions()
    assert len(sessions) == 2
    names = set()
    for events in sessions.values():
        check_session_integrity(events)
        names.add(doc(of_kind(events, "era_detected")[0])["client_info"]["name"])
    assert names == {"client-a", "client-b"}

    proxy.ship(store_url)
    store = open_store(store_url)
    try:
        for sid, events in sessions.items():
            info = store.session(sid)
            assert info.sealed and info.transport == "http" and info.name == "sdk"
            assert info.era == "2025-11-25"
            stored = list(store.read_session(sid))
            assert [e.raw for e in stored[: len(events)]] == [e.raw for e in events]
            tools = {e.tool for e in stored if e.method == "tools/call"}
            assert tools == {"add", "echo", "fail", "countdown", "greet"}
        assert store.verify() == []
    finally:
        store.close()


def test_modern_clients_grouped_by_trace_then_identity(upstream: str, tmp_path: Path) -> None:
    """2026-07-28 has no session id: a traceparent groups by trace id; without one, the client's
    identity does, and a new session starts after the idle gap."""
    trace_a = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    async def call(url: str, name: str, traceparent: str | None) -> str:
        meta = {"traceparent": traceparent} if traceparent else None
        async with Client(
            url, mode="2026-07-28", client_info=Implementation(name=name, version="2")
        ) as client:
            result = await client.call_tool("add", {"a": 1, "b": 1}, meta=meta)
            return result.content[0].text

    with RecordingProxy(upstream, tmp_path / "journal", idle_gap_s=1.5) as proxy:
        assert anyio.run(call, proxy.url, "traced", trace_a) == "2"
        assert anyio.run(call, proxy.url, "agent", None) == "2"
        assert anyio.run(call, proxy.url, "agent", None) == "2"  # within the gap: same session
        anyio.run(anyio.sleep, 2.0)
        assert anyio.run(call, proxy.url, "agent", None) == "2"  # after the gap: a new one
    sessions = list(proxy.sessions().values())
    by_key: dict[str, list] = {}
    for events in sessions:
        by_key.setdefault(doc(events[0])["session_key"], []).append(events)

    def calls(events: list) -> list[dict]:
        msgs = [json.loads(ev.raw) for ev in frames(events, "c2s")]
        return [m for m in msgs if m.get("method") == "tools/call"]

    # The traced call is in the trace's session (the client's own tools/list, which carries no
    # traceparent, is grouped by its identity instead).
    (traced,) = by_key.pop("trace:0af7651916cd43dd8448eb211c80319c")
    assert [c["params"]["_meta"]["traceparent"] for c in calls(traced)] == [trace_a]
    assert not calls(by_key.pop("client:traced/2@127.0.0.1")[0])
    # Without a trace: two calls inside the gap share a session, the one after it gets a new one.
    agent = by_key.pop("client:agent/2@127.0.0.1")
    assert [len(calls(events)) for events in agent] == [2, 1]
    assert not by_key
    assert doc(agent[0][-1]) == {
        "reason": "idle_gap",
        "outcome": "ok",
        "exit_code": None,
        "signal": None,
    }
