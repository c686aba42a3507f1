"""Recordings land where the user looks: the store is the user's (`attach --store` saves it in the
user configuration, never in the host's file), so a server a desktop host starts with next to no
environment still records there, and `blackbox where` says where that is and which configs are
attached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from blackbox.recorder.store import open_store

from tests.fixtures.environment import BLACKBOX
from tests.fixtures.polling import eventually

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "empty-env-host", "version": "1"},
    },
}


def _attach(config: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BLACKBOX_HOME": str(home)}
    env.pop("BLACKBOX_STORE", None)
    return subprocess.run(
        [BLACKBOX, "attach", str(config)], capture_output=True, text=True, timeout=60, env=env
    )


def test_a_desktop_host_with_a_bare_environment_records_into_the_users_store(
    tmp_path: Path,
) -> None:
    """Claude Desktop starts servers with HOME and a PATH that has none of the user's tools: the
    entry runs the launcher in the data directory, which finds blackbox, which finds the store
    `attach --store` saved in the user configuration."""
    user_home = tmp_path / "home"
    config = user_home / ".config" / "Claude" / "claude_desktop_config.json"
    config.parent.mkdir(parents=True)
    entry = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
    config.write_text(json.dumps({"mcpServers": {"clock": entry}}, indent=2) + "\n")
    store_path = tmp_path / "team.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLACKBOX_")}
    env.update(HOME=str(user_home), XDG_DATA_HOME="")  # the default data directory
    proc = subprocess.run(
        [BLACKBOX, "attach", str(config), "--store", f"sqlite:///{store_path}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    data_dir = user_home / ".local" / "share" / "mcp-blackbox"
    assert f"saved as this user's store in {data_dir / 'config.toml'}" in proc.stdout
    assert str(store_path) not in config.read_text()  # the store is the user's, not the file's
    open_store(f"sqlite:///{store_path}").close()  # the user's store exists before the host runs

    wrapped = json.loads(config.read_text())["mcpServers"]["clock"]
    assert wrapped["command"] == str(data_dir / "bin" / "blackbox")
    server = subprocess.Popen(
        [wrapped["command"], *wrapped["args"]],
        env={"HOME": str(user_home), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines = [INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines.append({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("".join(json.dumps(m) + "\n" for m in lines).encode())
    server.stdin.flush()
    replies = [server.stdout.readline() for _ in range(2)]  # initialize, tools/list
    server.stdin.close()  # then the host closes stdin, as hosts do at shutdown
    server.wait(60)
    assert b'"get_current_time"' in replies[1], replies

    store = open_store(f"sqlite:///{store_path}", create=False)
    try:
        found = eventually(
            lambda: [s for s in store.list_sessions() if s.name == "clock" and s.sealed],
            timeout=30,
            interval=0.2,
            message="the session in the user's store",
        )
    finally:
        store.close()
    assert len(found) == 1


def test_where_names_store_data_dir_journals_and_attached_configs(tmp_path: Path) -> None:
    home = tmp_path / "user-home"
    config = tmp_path / ".mcp.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "srv"}}}))
    assert _attach(config, home).returncode == 0
    env = {**os.environ, "BLACKBOX_HOME": str(home)}
    env.pop("BLACKBOX_STORE", None)
    proc = subprocess.run([BLACKBOX, "where"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"store:     sqlite:///{(home / 'blackbox.db').resolve()}")
    assert lines[1] == f"data dir:  {home} (BLACKBOX_HOME)"
    assert lines[2].startswith("journals:  0 waiting")
    assert lines[3] == f"attached:  {config.resolve()} [Claude Code]"
    # No backup and no attach state next to the config, where a project would commit them.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".mcp")) == [".mcp.json"]
