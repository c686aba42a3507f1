"""`attach` never leaves a server broken: a Streamable HTTP entry (server-everything from npm in
streamableHttp mode) is rewritten into a stdio `blackbox bridge` entry, and the official SDK client
started the way a host starts the entry gets its answers with no further step (no proxy to run),
while the session lands in the store attach named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.store import open_store
from mcp import Client, StdioServerParameters

from blackbox.hosts import attach as lib
from blackbox.hosts.host_config import parse_json_text
from tests.fixtures.environment import BLACKBOX, NODE_BIN
from tests.fixtures.polling import eventually, free_port, wait_listening


def _command_lines() -> list[str]:
    """Every process's command line, as `ps` shows it to any local user."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended meanwhile
            continue
    return lines


async def _echo(params: StdioServerParameters, command_lines: list[str] | None = None) -> str:
    async with Client(params, mode="legacy", read_timeout_seconds=30) as client:
        result = await client.call_tool("echo", {"message": "through the bridge"})
        if command_lines is not None:
            command_lines.extend(_command_lines())
    return result.content[0].text


@pytest.mark.timeout(120)
def test_an_attached_http_entry_answers_an_sdk_client_with_no_further_step(
    tmp_path: Path,
) -> None:
    port = free_port()
    server = subprocess.Popen(
        [str(NODE_BIN / "mcp-server-everything"), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    home = tmp_path / "user-home"
    config = tmp_path / ".vscode" / "mcp.json"
    config.parent.mkdir()
    url = f"http://127.0.0.1:{port}/mcp"
    config.write_text(
        '{\n  // the team\'s servers\n  "servers": {\n    "everything": {\n'
        f'      "type": "http",\n      "url": "{url}",\n'
        '      "headers": {"X-Team": "blackbox", "Authorization": "Bearer s3cret-t0ken"}\n'
        "    },\n  },\n}\n"
    )
    original = config.read_bytes()
    try:
        wait_listening(port, server, timeout=30.0)
        env = {**os.environ, "BLACKBOX_HOME": str(home)}
        proc = subprocess.run(
            [BLACKBOX, "attach", str(config)], capture_output=True, text=True, env=env, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert "bridged   everything" in proc.stdout
        assert "proxy --upstream" not in proc.stdout  # nothing to run by hand
        entry = parse_json_text(config.read_text(), jsonc=True).to_python()["servers"]
        entry = entry["everything"]
        assert entry["type"] == "stdio" and entry["args"][-1] == url
        # Headers ride in the entry's environment, never on a command line `ps` shows.
        assert not any("s3cret" in a or "X-Team" in a for a in entry["args"])
        assert entry["env"] == {
            "BLACKBOX_BRIDGE_HEADER_1": "X-Team: blackbox",
            "BLACKBOX_BRIDGE_HEADER_2": "Authorization: Bearer s3cret-t0ken",
        }
        # The host starts the entry as it is: the SDK's minimal environment plus the entry's,
        # blackbox installed on PATH, the user's data directory in the user's environment.
        path = f"{Path(BLACKBOX).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        host_env = {**entry["env"], "PATH": path, "BLACKBOX_HOME": str(home)}
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=host_env)
        seen_on_command_lines: list[str] = []
        assert anyio.run(_echo, params, seen_on_command_lines) == "Echo: through the bridge"
        # What any local user saw with `ps` while the bridge ran: no credential.
        assert any("bridge" in line for line in seen_on_command_lines)
        assert not [line for line in seen_on_command_lines if "s3cret" in line]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(15)

    store = open_store(f"sqlite:///{home / 'blackbox.db'}", create=False)
    try:
        calls = eventually(
            lambda: [
                (e.direction, e.tool)
                for s in store.list_sessions()
                if s.name == "everything" and s.sealed
                for e in store.read_session(s.session_id)
                if e.kind == "frame" and e.method == "tools/call"
            ],
            timeout=60,
            interval=0.2,
            message="the bridged tools/call in the store attach named",
        )
    finally:
        store.close()
    assert calls == [("c2s", "echo")]
    lib.detach(config)
    assert config.read_bytes() == original


def test_a_legacy_sse_entry_is_bridged_in_its_own_era(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    entry = {"type": "sse", "url": "https://old.example/sse"}
    config.write_text(json.dumps({"mcpServers": {"old": entry}}))
    report = lib.attach(config, wrapper=BLACKBOX)
    (change,) = report.changes
    assert change.action == "bridged" and "legacy HTTP+SSE" in change.detail
    bridged = json.loads(config.read_text())["mcpServers"]["old"]
    assert bridged["args"] == ["bridge", "--name", "old", "--transport", "sse", entry["url"]]
    lib.state_path(tmp_path / "bbhome", config.resolve()).unlink()  # rebuilt without the state
    lib.detach(config)
    assert json.loads(config.read_text())["mcpServers"]["old"] == entry


def test_per_project_servers_of_claude_json_are_attached_too(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "host_configs" / "claude_code" / ".claude.json"
    config = tmp_path / ".claude.json"
    config.write_bytes(fixture.read_bytes())
    original = config.read_bytes()
    report = lib.attach(config, wrapper=BLACKBOX)
    actions = {c.key: c.action for c in report.changes}
    assert actions == {"time": "wrapped", "/home/dev/src/webapp: db": "wrapped"}
    data = json.loads(config.read_text())
    db = data["projects"]["/home/dev/src/webapp"]["mcpServers"]["db"]
    assert db["command"] == BLACKBOX
    assert db["args"][:3] == ["record", "--name", "db"]
    assert db["args"][-4:] == [
        "npx",
        "-y",
        "@modelcontextprotocol/server-postgres",
        "postgresql://localhost/app",
    ]
    assert data["numStartups"] == 42 and data["projects"]["/home/dev/src/empty"]["mcpServers"] == {}
    assert not lib.attach(config, wrapper=BLACKBOX).written  # attaching twice changes nothing
    detached = lib.detach(config)
    assert {c.key for c in detached.changes} == {"time", "/home/dev/src/webapp: db"}
    assert config.read_bytes() == original


def test_a_per_project_entry_the_host_reformatted_is_still_detached(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "host_configs" / "claude_code" / ".claude.json"
    config = tmp_path / ".claude.json"
    config.write_bytes(fixture.read_bytes())
    lib.attach(config, wrapper=BLACKBOX)
    # Claude Code rewrites ~/.claude.json from what it parsed: no trace of the original layout.
    config.write_text(json.dumps(json.loads(config.read_text()), indent=4))
    lib.detach(config)
    data = json.loads(config.read_text())
    want = json.loads(fixture.read_text())
    assert data == want
