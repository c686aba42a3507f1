"""`blackbox record --policy` and `--redact` with the SDK client and the example server: a denied
call never reaches the server and the client gets the policy's error; redaction changes what is
journalled, never what is forwarded."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from blackbox.recorder.store import open_store
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from tests.fixtures import peers
from tests.fixtures.taps import wait_sealed

POLICY = """
default = "allow"

[[rule]]
id = "no-crash"
decision = "deny"
tool = "crash"
reason = "crashing the server is not allowed"
"""

REDACT = """
builtins = false
key = "test-key"
paths = [
    "$.params.arguments.message",
    "$.result.content[*].text",
    "$.result.structuredContent.result",
]
"""


def test_policy_denies_and_redaction_applies_to_the_record_only(
    tmp_path: Path, sqlite_url: str
) -> None:
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "redact.toml").write_text(REDACT)
    command = peers.record_command(
        peers.EXAMPLE_SERVER,
        "gated",
        None,
        "--policy",
        str(tmp_path / "policy.toml"),
        "--redact",
        str(tmp_path / "redact.toml"),
    )
    server = peers.params(command, peers.tap_env(tmp_path / "home", sqlite_url))
    seen: dict[str, object] = {}

    async def drive() -> None:
        with anyio.fail_after(60):
            async with (
                stdio_client(server) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                try:
                    await session.call_tool("crash", {"code": 4})
                except MCPError as exc:
                    seen["denied"] = str(exc)
                result = await session.call_tool("echo", {"message": "card 4111-secret"})
                seen["echo"] = result.content[0].text

    anyio.run(drive)
    assert "no-crash" in str(seen["denied"]) or "not allowed" in str(seen["denied"])
    assert seen["echo"] == "card 4111-secret"  # forwarded unredacted; the server is alive

    store = open_store(sqlite_url)
    (info,) = wait_sealed(store)
    assert info.outcome == "ok"
    events = list(store.read_session(info.session_id))
    decisions = [json.loads(ev.raw) for ev in events if ev.kind == "decision"]
    assert [(d["tool"], d["decision"]) for d in decisions] == [("crash", "deny"), ("echo", "allow")]
    assert decisions[0]["rule"] == "no-crash"
    crash_request = next(ev for ev in events if ev.tool == "crash")
    reply = next(ev for ev in events if ev.direction == "s2c" and ev.rpc_id == crash_request.rpc_id)
    assert reply.error_code is not None and reply.seq > crash_request.seq
    assert [ev.raw for ev in events if b"4111-secret" in ev.raw] == []  # redacted in the record
    echo_request = next(ev for ev in events if ev.tool == "echo")
    assert b"card" not in echo_request.raw
    assert store.verify() == []
