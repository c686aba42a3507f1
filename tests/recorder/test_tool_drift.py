"""Tool drift as it happens, with the SDK client and a real SDK server whose definitions change
between sessions and within one (after `notifications/tools/list_changed`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from recorder.store import EventStore, open_store
from tests import peers
from tests.recorder.test_stdio_tap import wait_sealed

DRIFT_SERVER = [sys.executable, str(Path(__file__).parent / "servers" / "drift_server.py")]


def run_session(
    tmp_path: Path, store_url: str, variant: str, rug_pull: bool = False, *extra: str
) -> dict:
    command = peers.record_command(DRIFT_SERVER, "drift", None, *extra)
    env = peers.tap_env(tmp_path / "home", store_url, DRIFT_VARIANT=variant)
    server = peers.params(command, env)
    seen: dict = {}

    async def drive() -> None:
        with anyio.fail_after(60):
            async with (
                stdio_client(server) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                tools = await session.list_tools()
                seen["first"] = {t.name: t.description for t in tools.tools}
                if rug_pull:
                    await session.call_tool("rug_pull", {})
                    tools = await session.list_tools()
                    seen["second"] = {t.name: t.description for t in tools.tools}
                try:
                    result = await session.call_tool("weather", {"city": "Oslo"})
                    seen["weather"] = result.content[0].text
                except Exception as exc:  # the gate's denial, in the pinning tests
                    seen["weather_error"] = str(exc)

    anyio.run(drive)
    return seen


def docs_of(store: EventStore, kind: str) -> list[dict]:
    found = []
    for info in store.list_sessions():
        for ev in store.read_session(info.session_id):
            if ev.kind == kind:
                found.append({**json.loads(ev.raw), "_session": info.session_id, "_seq": ev.seq})
    return found


def test_a_change_between_sessions_is_recorded_once_with_its_diff_and_findings(
    tmp_path: Path, sqlite_url: str
) -> None:
    run_session(tmp_path, sqlite_url, "clean")
    store = open_store(sqlite_url)
    wait_sealed(store, 1)
    assert docs_of(store, "tool_changed") == []  # a first listing is a snapshot, not a change
    (listed,) = docs_of(store, "tools_listed")
    assert {i["name"] for i in listed["items"]} == {"weather", "rug_pull"}
    assert listed["findings"] == {}

    run_session(tmp_path, sqlite_url, "poisoned")
    wait_sealed(store, 2)
    run_session(tmp_path, sqlite_url, "poisoned")  # the same definition again: no new change
    wait_sealed(store, 3)
    (change,) = docs_of(store, "tool_changed")
    assert (change["tool"], change["change"], change["server"]) == ("weather", "changed", "drift")
    assert change["old_hash"] != change["new_hash"]
    assert change["previous_session"] is not None
    diff = "\n".join(change["diff"])
    assert "+ description:" in diff and "<IMPORTANT>" in diff and "<U+200B>" in diff
    assert "- description: Get the weather forecast for a city." in diff
    rules = {f["rule"] for f in change["findings"]}
    assert {"invisible_unicode", "instruction_tag", "secret_reference"} <= rules
    assert store.verify() == []


def test_a_change_within_a_session_after_list_changed(tmp_path: Path, sqlite_url: str) -> None:
    seen = run_session(tmp_path, sqlite_url, "clean", True)
    assert "IMPORTANT" in seen["second"]["weather"]
    store = open_store(sqlite_url)
    (info,) = wait_sealed(store, 1)
    (change,) = docs_of(store, "tool_changed")
    assert change["_session"] == info.session_id
    assert change["previous_session"] == info.session_id
    assert change["after_list_changed"] is True
    listed = docs_of(store, "tools_listed")
    assert len(listed) == 2  # the first answer and the changed one
    assert "weather" in listed[1]["findings"]
