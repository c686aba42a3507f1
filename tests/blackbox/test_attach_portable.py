"""An attached config can be committed and shared: it names no path of the machine that attached
it (no checkout, no virtual environment, no store), so a project moved elsewhere, with the tool
installed in another environment, records into the store that machine's user configuration
names. What `detach` needs lives in the data directory (and is still read beside the config,
where earlier versions kept it); `--policy` and `--redact` reach every attached server; Windsurf's
`serverUrl` and legacy HTTP+SSE servers are bridged with no step by hand."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from blackbox.cli.main import main
from blackbox.hosts import attach as lib
from tests.fixtures.environment import BLACKBOX, NODE_BIN, ROOT
from tests.fixtures.polling import eventually, free_port, wait_listening

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "a-host", "version": "1"},
    },
}


def _call(rid: int, tool: str, arguments: dict) -> dict:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def run_entry(entry: dict, env: dict[str, str], cwd: Path, calls: list[dict]) -> dict[int, dict]:
    """Start an attached stdio entry as a host does (its command and args, the host's env over
    the entry's, the project as working directory) and make a JSON-RPC exchange: initialize,
    then each call; the answers by id (a call the gate denies is answered first)."""
    proc = subprocess.Popen(
        [entry["command"], *entry["args"]],
        env={**entry.get("env", {}), **env},
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    messages = [INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *calls]
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    proc.stdin.flush()
    answers = [json.loads(proc.stdout.readline() or "null") for _ in range(1 + len(calls))]
    proc.stdin.close()  # the host closes stdin at shutdown
    proc.wait(60)
    assert all(answers), (answers, proc.stderr.read() if proc.stderr else b"")
    return {answer["id"]: answer for answer in answers}


def sealed_session(store_url: str, name: str) -> list:
    """The records of the one sealed session named `name` in the store."""
    store = open_store(store_url, create=False)
    try:
        sessions = eventually(
            lambda: [s for s in store.list_sessions() if s.name == name and s.sealed],
            timeout=30,
            interval=0.1,
            message=f"a sealed session {name!r} in {store_url}",
        )
        assert len(sessions) == 1
        return list(store.read_session(sessions[0].session_id))
    finally:
        store.close()


def fresh_environment(where: Path) -> Path:
    """A new virtual environment with the tool installed in it (this environment's packages
    reached through a .pth file, and a `blackbox` console script of its own); its bin/."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir, not a bare path: this environment's own .pth files (the editable install of
    # the tool) must be processed too.
    here = sysconfig.get_paths()["purelib"]
    Path(purelib, "installed.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    script = where / "bin" / "blackbox"
    script.write_text(
        f"#!{python}\nimport sys\nfrom blackbox.cli.main import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    return where / "bin"


# --- the done-when test of the issue ----------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_moved_project_records_in_a_fresh_environment_into_the_users_store(
    tmp_path: Path,
) -> None:
    first = tmp_path / "machine-a" / "proj"
    first.mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "server.py", first / "server.py")
    config = first / ".mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"example": {"command": "python", "args": ["server.py"]}}})
    )
    # Attached on machine A, with A's own store (the attach shell's environment and flag).
    env_a = {**os.environ, "BLACKBOX_HOME": str(tmp_path / "home-a")}
    env_a["BLACKBOX_STORE"] = f"sqlite:///{tmp_path / 'a.db'}"
    proc = subprocess.run(
        [BLACKBOX, "attach", str(config), "--store", f"sqlite:///{tmp_path / 'a-flag.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_a,
    )
    assert proc.returncode == 0, proc.stderr
    text = config.read_text()
    for machine_a in (str(tmp_path), sys.prefix, str(ROOT), ".venv", "sqlite", "--store"):
        assert machine_a not in text

    # Committed, pulled on machine B: another directory, another environment, another user.
    second = tmp_path / "machine-b" / "checkout" / "proj"
    second.parent.mkdir(parents=True)
    shutil.move(first, second)
    bin_b = fresh_environment(tmp_path / "machine-b" / "venv")
    home_b = tmp_path / "home-b"
    home_b.mkdir()
    store_b = f"sqlite:///{tmp_path / 'machine-b' / 'team.db'}"
    (home_b / "config.toml").write_text(f'store = "{store_b}"\n')
    open_store(store_b).close()  # B's store exists before the host starts a server

    entry = json.loads((second / ".mcp.json").read_text())["mcpServers"]["example"]
    host_env = {"PATH": f"{bin_b}:/usr/bin:/bin", "HOME": str(home_b)}
    host_env["BLACKBOX_HOME"] = str(home_b)
    answers = run_entry(entry, host_env, second, [_call(2, "echo", {"message": "from B"})])
    assert answers[2]["result"]["content"][0]["text"] == "from B"

    events = sealed_session(store_b, "example")
    calls = [e for e in events if e.kind == "frame" and e.method == "tools/call"]
    assert [(e.direction, e.tool) for e in calls] == [("c2s", "echo")]
    started = json.loads(next(e for e in events if e.kind == "session_started").raw)
    assert started["command"] == ["python", "server.py"]
    assert started["cwd"] == str(second)
    for elsewhere in ("a.db", "a-flag.db"):  # nothing went to machine A's stores
        assert not (tmp_path / elsewhere).exists()


# --- the attach state in the data directory ---------------------------------------------------


def test_the_attach_state_lives_in_the_data_directory_keyed_by_path_and_content(
    tmp_path: Path,
) -> None:
    home = tmp_path / "bbhome"
    project = tmp_path / "proj"
    project.mkdir()
    config = project / ".mcp.json"
    original = b'{\n  "mcpServers": {\n    "t": { "command": "srv", "args": ["-v"] }\n  }\n}\n'
    config.write_bytes(original)
    code = CliRunner().invoke(main, ["attach", str(config)])
    assert code.exit_code == 0, code.output
    assert sorted(p.name for p in project.iterdir()) == [".mcp.json"]  # nothing to commit
    state_file = lib.state_path(home, config.resolve())
    state = json.loads(state_file.read_text())
    assert state["content_sha256"] == hashlib.sha256(config.read_bytes()).hexdigest()
    assert state["entries"]["t"]["original"] == '{ "command": "srv", "args": ["-v"] }'

    # The project moves: detach finds its state by content, and restores byte for byte.
    moved = tmp_path / "elsewhere" / "proj"
    moved.parent.mkdir()
    shutil.move(project, moved)
    result = CliRunner().invoke(main, ["detach", str(moved / ".mcp.json")])
    assert result.exit_code == 0, result.output
    assert (moved / ".mcp.json").read_bytes() == original
    assert "restored  t" in result.output


def test_detach_undoes_a_config_attached_by_the_previous_version(tmp_path: Path) -> None:
    """The previous version pinned an absolute executable, the store and the data directory,
    and kept the originals in CONFIG.blackbox-attach.json beside the config."""
    config = tmp_path / ".mcp.json"
    # No "args" at first: only the old sidecar knows that (a rebuild would leave "args": []).
    original_entry = '{"command": "srv"}'
    wrapped_entry = (
        '{"command": "/old/venv/bin/blackbox", "args": ["record", "--name", "t", "--store", '
        '"sqlite:////old/bb.db", "--home", "/old/home", "--", "srv"]}'
    )
    original = '{\n  "mcpServers": {\n    "t": ' + original_entry + "\n  }\n}\n"
    config.write_text(original.replace(original_entry, wrapped_entry))
    sidecar = tmp_path / ".mcp.json.blackbox-attach.json"
    entries = {"t": {"kind": "stdio", "original": original_entry, "wrapped": wrapped_entry}}
    sidecar.write_text(
        json.dumps({"format": "mcp-blackbox attach state", "version": 1, "entries": entries})
    )
    result = CliRunner().invoke(main, ["detach", str(config)])
    assert result.exit_code == 0, result.output
    assert config.read_text() == original  # byte for byte, from the old sidecar
    assert not sidecar.exists()

    # Attaching such a config again moves its state into the data directory.
    config.write_text(original.replace(original_entry, wrapped_entry))
    sidecar.write_text(
        json.dumps({"format": "mcp-blackbox attach state", "version": 1, "entries": entries})
    )
    result = CliRunner().invoke(main, ["attach", str(config)])
    assert result.exit_code == 0, result.output
    assert "updated   t" in result.output and not sidecar.exists()
    assert json.loads(config.read_text())["mcpServers"]["t"]["command"] == "blackbox"
    assert CliRunner().invoke(main, ["detach", str(config)]).exit_code == 0
    assert config.read_text() == original


# --- --policy and --redact --------------------------------------------------------------------

POLICY = """\
default = "allow"

[[rule]]
id = "no-failing"
decision = "deny"
tool = "fail"
reason = "not in this project"
"""
REDACT = """\
key = "a-test-key-of-this-project"
patterns = ['\\bEMP-[0-9]{6}\\b']
"""


@pytest.mark.timeout(120)
def test_policy_and_redaction_apply_to_every_attached_server(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".blackbox").mkdir(parents=True)
    (project / ".blackbox" / "policy.toml").write_text(POLICY)
    (project / ".blackbox" / "redact.toml").write_text(REDACT)
    shutil.copyfile(ROOT / "examples" / "server.py", project / "server.py")
    config = project / ".mcp.json"
    servers = {
        "example": {"command": sys.executable, "args": ["server.py"]},
        "docs": {"type": "http", "url": "https://mcp.example.com/mcp"},
    }
    config.write_text(json.dumps({"mcpServers": servers}, indent=2))
    policy, redact = project / ".blackbox" / "policy.toml", project / ".blackbox" / "redact.toml"
    result = CliRunner().invoke(
        main, ["attach", str(config), "--policy", str(policy), "--redact", str(redact)]
    )
    assert result.exit_code == 0, result.output
    attached = json.loads(config.read_text())["mcpServers"]
    # Named relative to the project, so the committed file works in every checkout.
    gates = ["--policy", ".blackbox/policy.toml", "--redact", ".blackbox/redact.toml"]
    assert attached["example"]["args"] == [
        "record",
        "--name",
        "example",
        *gates,
        "--",
        sys.executable,
        "server.py",
    ]
    assert attached["docs"]["args"] == ["bridge", "--name", "docs", *gates, servers["docs"]["url"]]

    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(store_url).close()
    host_env = {"PATH": f"{Path(BLACKBOX).parent}:/usr/bin:/bin", "BLACKBOX_STORE": store_url}
    host_env["BLACKBOX_HOME"] = str(tmp_path / "bbhome")
    calls = [_call(2, "echo", {"message": "badge EMP-123456"}), _call(3, "fail", {})]
    answers = run_entry(attached["example"], host_env, project, calls)
    assert answers[2]["result"]["content"][0]["text"] == "badge EMP-123456"  # forwarded as is
    assert answers[3]["error"]["data"]["decision"] == "deny"  # the policy held the call back

    events = sealed_session(store_url, "example")
    frames = b"".join(e.raw for e in events if e.kind == "frame")
    assert b"EMP-123456" not in frames and b"[redacted:" in frames
    decisions = [json.loads(e.raw) for e in events if e.kind == "decision"]
    assert sorted((d["decision"], d["rule"]) for d in decisions) == [
        ("allow", "default"),  # echo
        ("deny", "no-failing"),
    ]

    # VS Code expands ${workspaceFolder}: its servers get the files through it.
    vscode = project / ".vscode" / "mcp.json"
    vscode.parent.mkdir()
    vscode.write_text(json.dumps({"servers": {"example": servers["example"]}}))
    lib.attach(vscode, options=lib.RecordOptions(policy=policy))
    args = json.loads(vscode.read_text())["servers"]["example"]["args"]
    assert args[3:5] == ["--policy", "${workspaceFolder}/.blackbox/policy.toml"]


# --- Windsurf's serverUrl and the legacy HTTP+SSE era -----------------------------------------


async def _echo(params: StdioServerParameters) -> str:
    async with Client(params, mode="legacy", read_timeout_seconds=30) as client:
        result = await client.call_tool("echo", {"message": "over the legacy stream"})
    return result.content[0].text


@pytest.mark.timeout(120)
def test_a_windsurf_server_url_of_a_legacy_sse_server_is_bridged_and_recorded(
    tmp_path: Path,
) -> None:
    port = free_port()
    server = subprocess.Popen(
        [str(NODE_BIN / "mcp-server-everything"), "sse"],
        env={**os.environ, "PORT": str(port)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    home = tmp_path / "bbhome"
    config = tmp_path / "home" / ".codeium" / "windsurf" / "mcp_config.json"
    config.parent.mkdir(parents=True)
    url = f"http://127.0.0.1:{port}/sse"
    original = json.dumps({"mcpServers": {"everything": {"serverUrl": url}}}, indent=2) + "\n"
    config.write_text(original)
    try:
        wait_listening(port, server, timeout=30.0)
        result = CliRunner().invoke(main, ["attach", str(config)])
        assert result.exit_code == 0, result.output
        assert "Windsurf config" in result.output and "bridged   everything" in result.output
        entry = json.loads(config.read_text())["mcpServers"]["everything"]
        # A user config: the launcher in the data directory; the era is found by the bridge.
        assert entry["command"] == str(home / "bin" / "blackbox")
        assert entry["args"] == ["bridge", "--name", "everything", url]
        params = StdioServerParameters(
            command=entry["command"], args=entry["args"], env={"BLACKBOX_HOME": str(home)}
        )
        assert anyio.run(_echo, params) == "Echo: over the legacy stream"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(15)

    events = sealed_session(f"sqlite:///{home / 'blackbox.db'}", "everything")
    calls = [e for e in events if e.kind == "frame" and e.method == "tools/call"]
    assert [(e.direction, e.tool) for e in calls] == [("c2s", "echo")]
    replies = [e for e in events if e.kind == "frame" and e.direction == "s2c"]
    assert any(b"over the legacy stream" in e.raw for e in replies)
    assert CliRunner().invoke(main, ["detach", str(config)]).exit_code == 0
    assert config.read_text() == original
