"""The 2024-11-05 HTTP+SSE transport through the proxy: the SDK's own SSE server and client.
The `endpoint` event keeps pointing through the proxy, the stream is one recording session, and
every message (posted requests, answers on the stream) is recorded once, in order."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp_types import ElicitResult

from tests.fixtures.http_kit import (
    RecordingProxy,
    check_session_integrity,
    doc,
    frames,
    of_kind,
    sdk_server,
)

pytestmark = pytest.mark.timeout(90)


async def _elicit(_ctx: object, _params: object) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Grace"})


async def conversation(url: str) -> dict:
    async with Client(sse_client(url), mode="legacy", elicitation_callback=_elicit) as client:
        return {
            "era": client.protocol_version,
            "tools": sorted(t.name for t in (await client.list_tools()).tools),
            "add": (await client.call_tool("add", {"a": 20, "b": 22})).content[0].text,
            "greet": (await client.call_tool("greet", {})).content[0].text,
        }


def test_sdk_sse_transport_through_proxy(tmp_path: Path) -> None:
    with sdk_server("sse") as upstream:
        direct = anyio.run(conversation, upstream)
        with RecordingProxy(upstream, tmp_path / "j") as proxy:
            through = anyio.run(conversation, proxy.url)
    assert through == direct
    assert direct["add"] == "42" and direct["greet"] == "hello Grace"

    sessions = proxy.sessions()
    assert len(sessions) == 1, "the SSE stream and the messages posted to its endpoint"
    (events,) = sessions.values()
    check_session_integrity(events)
    assert doc(events[0])["session_rule"] == "sse-endpoint"
    c2s = [json.loads(ev.raw).get("method") for ev in frames(events, "c2s")]
    assert c2s[:3] == ["initialize", "notifications/initialized", "tools/list"]
    s2c = [json.loads(ev.raw) for ev in frames(events, "s2c")]
    assert any(m.get("method") == "elicitation/create" for m in s2c)
    assert [doc(e)["era"] for e in of_kind(events, "era_detected")] == [direct["era"]]
    exchanges = [doc(e) for e in of_kind(events, "http_exchange")]
    (stream,) = [x for x in exchanges if x["method"] == "GET"]
    endpoint = stream["sse_events"][0]
    assert endpoint["event"] == "endpoint" and endpoint["endpoint"].startswith("/messages/")
    assert "rewritten_to" not in endpoint  # a relative endpoint already goes through the proxy
    posts = [x for x in exchanges if x["method"] == "POST"]
    assert posts and all(x["path"] == endpoint["endpoint"] for x in posts)
    assert all(x["status"] == 202 for x in posts)
    assert events[-1].kind == "session_ended"
