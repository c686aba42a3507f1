"""`attach` never leaves a server broken: a Streamable HTTP entry (server-everything from npm in
streamableHttp mode) is rewritten into a stdio `blackbox bridge` entry, and the official SDK client
started the way a host starts the entry gets its answers with no further step (no proxy to run),
while the session lands in the store attach named."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from blackbox import attach as lib
from recorder.store import open_store
from tests.conftest import BLACKBOX
from tests.peers import NODE_BIN
from tests.polling import eventually, wait_listening


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _echo(params: StdioServerParameters) -> str:
    async with Client(params, mode="legacy", read_timeout_seconds=30) as client:
        result = await client.call_tool("echo", {"message": "through the bridge"})
    return result.content[0].text


@pytest.mark.timeout(120)
def test_an_attached_http_entry_answers_an_sdk_client_with_no_further_step(
    tmp_path: Path,
) -> None:
    port = _free_port()
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
        '      "headers": {"X-Team": "blackbox"}\n    },\n  },\n}\n'
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
        entry = lib.parse_json_text(config.read_text(), jsonc=True).to_python()["servers"]
        entry = entry["everything"]
        assert entry["type"] == "stdio" and entry["args"][-1] == url
        assert "X-Team: blackbox" in entry["args"]
        # The host starts the entry as it is: the SDK's minimal environment, nothing added.
        params = StdioServerParameters(command=entry["command"], args=entry["args"])
        assert anyio.run(_echo, params) == "Echo: through the bridge"
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


def test_a_legacy_sse_entry_is_skipped_saying_why(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    entry = {"type": "sse", "url": "https://old.example/sse"}
    config.write_text(json.dumps({"mcpServers": {"old": entry}}))
    report = lib.attach(config, wrapper=BLACKBOX)
    (change,) = report.changes
    assert change.action == "skipped" and "--http proxy" in change.detail
    assert json.loads(config.read_text())["mcpServers"]["old"] == entry


def test_per_project_servers_of_claude_json_are_named_as_skipped(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "host_configs" / "claude_code" / ".claude.json"
    config = tmp_path / ".claude.json"
    config.write_bytes(fixture.read_bytes())
    original = config.read_bytes()
    report = lib.attach(config, wrapper=BLACKBOX)
    actions = {c.key: c.action for c in report.changes}
    assert actions == {"time": "wrapped", "/home/dev/src/webapp: db": "skipped"}
    data = json.loads(config.read_text())
    assert data["projects"] == json.loads(original)["projects"]  # untouched
    assert data["numStartups"] == 42
    lib.detach(config)
    assert config.read_bytes() == original


async def _whoami(params: StdioServerParameters) -> str:
    async with Client(params, mode="legacy", read_timeout_seconds=30) as client:
        result = await client.call_tool("whoami", {})
    return result.content[0].text


@pytest.mark.timeout(120)
def test_the_bridge_passes_the_entry_headers_and_never_records_them(tmp_path: Path) -> None:
    """A VS Code entry with an Authorization header, bridged: the SDK server sees both headers
    on the request, and no record of the session holds the token."""
    import sys

    port = _free_port()
    script = Path(__file__).parent / "servers" / "headers_server.py"
    server = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    home = tmp_path / "user-home"
    config = tmp_path / ".vscode" / "mcp.json"
    config.parent.mkdir()
    entry = {
        "type": "http",
        "url": f"http://127.0.0.1:{port}/mcp",
        "headers": {"X-Team": "blackbox", "Authorization": "Bearer s3cret-t0ken"},
    }
    config.write_text(json.dumps({"servers": {"who": entry}}, indent=2) + "\n")
    try:
        wait_listening(port, server, timeout=30.0)
        env = {**os.environ, "BLACKBOX_HOME": str(home)}
        proc = subprocess.run(
            [BLACKBOX, "attach", str(config)], capture_output=True, text=True, env=env, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        bridged = json.loads(config.read_text())["servers"]["who"]
        params = StdioServerParameters(command=bridged["command"], args=bridged["args"])
        assert anyio.run(_whoami, params) == "team=blackbox auth=Bearer s3cret-t0ken"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(15)
    store = open_store(f"sqlite:///{home / 'blackbox.db'}", create=False)
    try:
        records = eventually(
            lambda: [
                e.raw
                for s in store.list_sessions()
                if s.name == "who" and s.sealed
                for e in store.read_session(s.session_id)
            ],
            timeout=60,
            interval=0.2,
            message="the bridged session",
        )
    finally:
        store.close()
    # The tool's answer quotes the token (the server chose to say it); nothing else may.
    leaks = [r for r in records if b"s3cret-t0ken" in r and b"team=blackbox" not in r]
    assert leaks == []
