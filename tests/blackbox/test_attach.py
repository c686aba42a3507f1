"""`blackbox attach` / `blackbox detach` against real-shaped configs of the four hosts.

The fixtures under host_configs/ follow each host's documented shape (Claude Desktop, Claude Code,
Cursor, VS Code with JSONC comments, tabs and CRLF line endings); each test copies one into its own
tmp_path so the host's file-name rules (`.vscode/mcp.json`, `.cursor/mcp.json`) apply.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from blackbox import proxy_service
from blackbox.cli.main import main
from blackbox.hosts import attach as lib
from blackbox.hosts import jsonc
from blackbox.hosts.host_config import parse_json_text
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import BLACKBOX, NODE_BIN
from tests.fixtures.polling import eventually, free_port, wait_listening

FIXTURES = Path(__file__).parent / "host_configs"
HOSTS = {
    "claude-desktop": "claude_desktop/claude_desktop_config.json",
    "claude-code": "claude_code/.mcp.json",
    "cursor": "cursor/.cursor/mcp.json",
    "vscode": "vscode/.vscode/mcp.json",
}
SECTION = {"claude-desktop": "mcpServers", "claude-code": "mcpServers", "cursor": "mcpServers"}
SECTION["vscode"] = "servers"
WRAPPER = BLACKBOX  # the real executable of this checkout's venv


def place(tmp_path: Path, host: str) -> Path:
    """A copy of a host's fixture at the same relative path under tmp_path."""
    target = tmp_path / HOSTS[host]
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / HOSTS[host], target)
    return target


def parse(path: Path, host: str) -> dict:
    return parse_json_text(path.read_text("utf-8"), jsonc=host in ("vscode", "cursor")).to_python()


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


# --- the round trip the issue asks for -------------------------------------------------------


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_attach_then_detach_round_trips_byte_for_byte(tmp_path: Path, host: str) -> None:
    config = place(tmp_path, host)
    original = config.read_bytes()

    attached = lib.attach(config, wrapper=WRAPPER)
    assert attached.written and config.read_bytes() != original
    backup = lib.backup_path(lib.load_config(config), tmp_path / "bbhome")
    assert backup.read_bytes() == original

    detached = lib.detach(config)
    assert detached.written
    assert config.read_bytes() == original
    assert all(c.exact for c in detached.changes if c.action == "restored")
    # Nothing remains besides the config (the backup lives in the data directory, where it is
    # never committed with a project): the attach state is gone with the last entry.
    assert sorted(p.name for p in config.parent.iterdir()) == [config.name]


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_attach_wraps_stdio_and_keeps_everything_else(tmp_path: Path, host: str) -> None:
    config = place(tmp_path, host)
    before = parse(config, host)
    lib.attach(config, wrapper=WRAPPER, options=lib.RecordOptions(otel=True))
    after = parse(config, host)

    section = SECTION[host]
    # Top-level keys other than the servers (VS Code's "inputs", Claude Desktop's preferences).
    assert {k: v for k, v in after.items() if k != section} == {
        k: v for k, v in before.items() if k != section
    }
    assert list(after[section]) == list(before[section])  # same servers, same order
    for key, old in before[section].items():
        new = after[section][key]
        if "command" in old:
            assert new["command"] == WRAPPER
            assert new["args"] == [
                "record",
                "--name",
                key,
                "--otel",
                "--",
                old["command"],
                *old.get("args", []),
            ]
            rest_old = {k: v for k, v in old.items() if k not in ("command", "args")}
            rest_new = {k: v for k, v in new.items() if k not in ("command", "args")}
            assert rest_new == rest_old  # env, cwd, envFile, type, dev, unknown keys
        elif "${" not in old["url"]:
            # An HTTP server (either era) becomes a stdio entry running the bridge, its headers
            # passed in the entry's environment (never as arguments: `ps` shows those).
            assert new["command"] == WRAPPER and new["args"][:3] == ["bridge", "--name", key]
            sse = ["--transport", "sse"] if old.get("type") == "sse" else []
            assert new["args"][3:-1] == sse
            assert new["args"][-1] == old["url"] and "--header" not in new["args"]
            headers = old.get("headers", {})
            passed = {
                f"BLACKBOX_BRIDGE_HEADER_{i}": f"{k}: {v}"
                for i, (k, v) in enumerate(headers.items(), start=1)
            }
            assert new.get("env", {}) == {**old.get("env", {}), **passed}
            assert new.get("type", "stdio") == "stdio"
            rest_old = {k: v for k, v in old.items() if k not in ("url", "headers", "type", "env")}
            rest_new = {k: v for k, v in new.items() if k not in ("command", "args", "type", "env")}
            assert rest_new == rest_old
        else:
            assert new == old  # host variables in the URL: skipped, said why


def test_attach_keeps_indentation_comments_and_line_endings(tmp_path: Path) -> None:
    config = place(tmp_path, "vscode")
    lib.attach(config, wrapper=WRAPPER)
    text = config.read_bytes().decode()
    # Every line still ends in CRLF and is indented with tabs, comments untouched.
    lines = text.split("\r\n")
    assert "\n" not in "".join(lines)
    assert all(not line.startswith(" ") for line in lines)
    assert "\t// Workspace MCP servers (JSONC: comments and trailing commas are fine here)" in lines
    assert "\t\t/* a Node server under development */" in lines
    assert (
        '"args": ["record", "--name", "fetch", "--", "uvx", "mcp-server-fetch"], // pinned' in text
    )
    # A multi-line args array stays multi-line, one element per line in the same indentation.
    assert '\t\t\t"args": [\r\n\t\t\t\t"record",\r\n\t\t\t\t"--name",\r\n' in text


def test_entry_without_args_gets_args_in_its_own_style(tmp_path: Path) -> None:
    config = place(tmp_path, "cursor")
    original = config.read_bytes()
    lib.attach(config, wrapper=WRAPPER)
    text = config.read_text()
    assert (
        f'"bare": {{"command": {json.dumps(WRAPPER)}, "args": ["record", "--name", "bare", "--", '
        '"my-mcp-server"]}' in text
    )
    lib.detach(config)
    assert config.read_bytes() == original


def test_minified_config_round_trips(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    original = b'{"mcpServers":{"a":{"command":"x","args":["1"]},"b":{"command":"y","args":[]}}}'
    config.write_bytes(original)
    lib.attach(config, wrapper=WRAPPER)
    data = json.loads(config.read_bytes())
    assert data["mcpServers"]["b"]["args"] == ["record", "--name", "b", "--", "y"]
    assert b"\n" not in config.read_bytes()
    lib.detach(config)
    assert config.read_bytes() == original


# --- idempotence, dry run, backup ------------------------------------------------------------


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_attaching_twice_changes_nothing(tmp_path: Path, host: str) -> None:
    config = place(tmp_path, host)
    lib.attach(config, wrapper=WRAPPER)
    once = config.read_bytes()
    state_file = lib.state_path(tmp_path / "bbhome", config.resolve())
    state = state_file.read_bytes()
    mtime = config.stat().st_mtime_ns

    again = lib.attach(config, wrapper=WRAPPER)
    assert not again.written and not again.changed
    assert config.read_bytes() == once and config.stat().st_mtime_ns == mtime
    assert state_file.read_bytes() == state
    assert {c.action for c in again.changes} <= {"attached", "skipped"}


def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-desktop")
    original = config.read_bytes()
    code, out = run_cli(
        "attach", str(config), "--dry-run", "--install-service", str(tmp_path / "u")
    )
    assert code == 0, out
    assert f"--- {config} (current)" in out and f"+++ {config} (attached)" in out
    assert '-      "command": "npx",' in out
    launcher = tmp_path / "bbhome" / "bin" / "blackbox"  # a user config runs the launcher
    assert f'+      "command": {json.dumps(str(launcher))},' in out
    assert "would change the file" in out
    assert config.read_bytes() == original
    assert sorted(p.name for p in config.parent.iterdir()) == [config.name]
    assert not (tmp_path / "u").exists() and not launcher.exists()


def test_backup_is_the_pre_attach_file_even_after_a_second_attach(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-code")
    original = config.read_bytes()
    lib.attach(config, wrapper=WRAPPER)
    # The user adds a server while attached and attaches again: the backup keeps the original.
    data = config.read_text().replace(
        '"mcpServers": {', '"mcpServers": {\n    "new": {"command": "new-server"},', 1
    )
    config.write_text(data)
    report = lib.attach(config, wrapper=WRAPPER)
    assert [c.key for c in report.by_action("wrapped")] == ["new"]
    assert lib.backup_path(lib.load_config(config), tmp_path / "bbhome").read_bytes() == original


# --- the wrapper ------------------------------------------------------------------------------


def test_a_project_config_runs_blackbox_from_path_and_names_no_store(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-code")
    env = {**os.environ, "BLACKBOX_STORE": f"sqlite:///{tmp_path / 'shell.db'}"}
    # What attach writes is the question: it runs in this process (with the shell's store set).
    proc = run_blackbox("attach", str(config), env=env)
    assert proc.returncode == 0, proc.stderr
    text = config.read_text()
    entry = json.loads(text)["mcpServers"]["git"]
    assert entry["command"] == "blackbox"
    assert entry["args"][:4] == ["record", "--name", "git", "--"]
    # Nothing of this machine: no store, no data directory, no path of the checkout or its venv.
    for mine in (str(tmp_path), sys.prefix, "--store", "--home", "sqlite:"):
        assert mine not in text
    assert "restart the host" in proc.stdout


def test_a_user_config_runs_a_launcher_that_finds_the_installed_blackbox(
    tmp_path: Path,
) -> None:
    config = place(tmp_path, "claude-desktop")
    code, out = run_cli("attach", str(config))
    assert code == 0, out
    command = json.loads(config.read_text())["mcpServers"]["filesystem"]["command"]
    launcher = tmp_path / "bbhome" / "bin" / "blackbox"
    assert command == str(launcher) and os.access(launcher, os.X_OK)
    # A host started from the desktop has next to no PATH: the launcher still finds blackbox.
    proc = subprocess.run(
        [command, "where"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/nonexistent", "HOME": str(tmp_path), "BLACKBOX_HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "data dir:" in proc.stdout


def test_already_wrapped_entries_are_recognised_by_shape(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    wrapped = {"command": "blackbox", "args": ["record", "--name", "t", "--", "srv"]}
    config.write_text(json.dumps({"mcpServers": {"t": wrapped}}, indent=2))
    report = lib.attach(config)
    assert [c.action for c in report.changes] == ["attached"]
    assert not report.written


def test_an_entry_attached_by_an_earlier_version_is_made_portable(tmp_path: Path) -> None:
    """A config attached before (absolute venv path, store and data directory pinned) is
    rewritten into the portable form by attaching again, and detach still restores it."""
    config = tmp_path / ".mcp.json"
    original = '{\n  "mcpServers": {\n    "t": {"command": "srv", "args": ["-v"]}\n  }\n}\n'
    old_args = ["record", "--name", "t", "--store", "sqlite:////old/bb.db", "--home", "/old"]
    wrapped = {"command": "/old/venv/bin/blackbox", "args": [*old_args, "--", "srv", "-v"]}
    config.write_text(json.dumps({"mcpServers": {"t": wrapped}}, indent=2) + "\n")
    report = lib.attach(config)
    assert [c.action for c in report.changes] == ["updated"]
    entry = json.loads(config.read_text())["mcpServers"]["t"]
    assert entry == {"command": "blackbox", "args": ["record", "--name", "t", "--", "srv", "-v"]}
    lib.detach(config)
    assert json.loads(config.read_text()) == json.loads(original)


# --- HTTP entries -----------------------------------------------------------------------------


def test_http_entries_point_at_a_proxy_on_stable_ports(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    servers = {
        "alpha": {"type": "http", "url": "https://a.example/mcp", "headers": {"X": "1"}},
        "beta": {"type": "sse", "url": "https://b.example/sse"},
    }
    config.write_text(json.dumps({"mcpServers": servers}, indent=2) + "\n")
    first = lib.attach(config, wrapper=WRAPPER, port_base=9000, http="proxy")
    ports = {c.key: c.port for c in first.changes}
    assert all(9000 <= p < 9000 + proxy_service.PORT_WINDOW for p in ports.values())
    assert len(set(ports.values())) == 2
    data = json.loads(config.read_text())["mcpServers"]
    assert data["alpha"]["url"] == f"http://127.0.0.1:{ports['alpha']}/mcp"
    assert data["beta"]["url"] == f"http://127.0.0.1:{ports['beta']}/sse"
    assert data["alpha"]["headers"] == {"X": "1"}  # the host keeps sending them; the proxy forwards
    alpha = next(c for c in first.changes if c.key == "alpha")
    assert alpha.proxy_argv == [
        WRAPPER,
        "proxy",
        "--upstream",
        "https://a.example/mcp",
        "--listen",
        f"127.0.0.1:{ports['alpha']}",
        "--name",
        "alpha",
        "--rewrite-host",  # a remote server sees its own name
    ]

    # Detach, add servers, attach again: the old keys keep their ports.
    lib.detach(config)
    more = {f"s{i}": {"url": f"https://s{i}.example/mcp"} for i in range(40)}
    config.write_text(json.dumps({"mcpServers": {**more, **servers}}, indent=2) + "\n")
    second = lib.attach(config, wrapper=WRAPPER, port_base=9000, http="proxy")
    again = {c.key: c.port for c in second.changes}
    assert again["alpha"] == ports["alpha"] and again["beta"] == ports["beta"]
    assert len(set(again.values())) == len(again)  # collisions probed away


def test_cli_prints_the_proxy_command_for_each_http_server(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-code")
    code, out = run_cli("attach", str(config), "--http", "proxy")
    assert code == 0, out
    data = json.loads(config.read_text())["mcpServers"]
    port = data["docs"]["url"].split(":")[2].split("/")[0]
    assert (
        f"proxy --upstream https://mcp.example.com/mcp --listen 127.0.0.1:{port} --name docs" in out
    )


def test_install_service_writes_a_user_unit_per_proxy(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-code")
    units = tmp_path / "systemd" / "user"
    code, out = run_cli(
        "attach",
        str(config),
        "--http",
        "proxy",
        "--install-service",
        str(units),
        "--store",
        "sqlite:///a%b.db",
    )
    assert code == 0, out
    names = sorted(p.name for p in units.iterdir())
    assert names == ["blackbox-proxy-docs.service", "blackbox-proxy-legacy.service"]
    text = (units / "blackbox-proxy-docs.service").read_text()
    port = json.loads(config.read_text())["mcpServers"]["docs"]["url"].split(":")[2][:4]
    exec_line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert exec_line.endswith(
        f"proxy --upstream https://mcp.example.com/mcp --listen 127.0.0.1:{port} --name docs "
        "--rewrite-host"
    )
    # The store is the user's (the unit runs without this shell's environment): the relative
    # SQLite path is saved as an absolute one in the user configuration.
    saved = (tmp_path / "bbhome" / "config.toml").read_text()
    assert saved.startswith('store = "sqlite:////') and saved.rstrip().endswith('/a%b.db"')
    assert "[Install]\nWantedBy=default.target" in text
    assert "Description=mcp-blackbox recording proxy for MCP server 'docs'" in text
    assert (
        "systemctl --user daemon-reload && systemctl --user enable --now "
        "blackbox-proxy-docs.service blackbox-proxy-legacy.service" in out
    )
    # Again, with and without --install-service: nothing is rewritten, units included.
    stamps = {p.name: p.stat().st_mtime_ns for p in [*units.iterdir(), *config.parent.iterdir()]}
    for extra in (["--install-service", str(units)], []):
        code, out = run_cli("attach", str(config), "--store", "sqlite:///a%b.db", *extra)
        assert code == 0 and "no change to the file" in out
        assert ("(already installed)" in out) == bool(extra)
    assert stamps == {
        p.name: p.stat().st_mtime_ns for p in [*units.iterdir(), *config.parent.iterdir()]
    }
    code, out = run_cli("detach", str(config))
    assert code == 0 and "systemctl --user disable --now blackbox-proxy-docs.service" in out


def test_unit_names_and_exec_words_are_escaped() -> None:
    assert proxy_service.unit_name("docs") == "blackbox-proxy-docs.service"
    assert proxy_service.unit_name("a b") != proxy_service.unit_name("a/b")
    assert proxy_service.systemd_quote("plain/path-1.0") == "plain/path-1.0"
    assert proxy_service.systemd_quote('sp ace"q') == '"sp ace\\"q"'
    assert proxy_service.systemd_quote("$HOME%") == "$$HOME%%"


def test_http_url_with_host_variables_is_left_alone(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    config.write_text(json.dumps({"mcpServers": {"x": {"url": "https://${HOST}/mcp"}}}))
    report = lib.attach(config, wrapper=WRAPPER)
    assert [c.action for c in report.changes] == ["skipped"]
    assert not report.written


# --- detach when the host has been at the file ------------------------------------------------


def test_detach_after_the_host_reformatted_the_file(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-desktop")
    before = parse(config, "claude-desktop")
    lib.attach(config, wrapper=WRAPPER)
    # The host re-saves its config from what it parsed: new indentation, new bytes.
    config.write_text(json.dumps(json.loads(config.read_text()), indent=4))
    report = lib.detach(config)
    assert report.written
    assert parse(config, "claude-desktop") == before
    assert {c.exact for c in report.changes} == {False}
    code, out = run_cli("attach", str(config))
    assert code == 0
    code, out = run_cli("detach", str(config))
    assert "restored" in out


def test_detach_without_the_attach_state_unwraps_stdio_entries(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-code")
    before = parse(config, "claude-code")
    lib.attach(config, wrapper=WRAPPER)
    lib.state_path(tmp_path / "bbhome", config.resolve()).unlink()
    report = lib.detach(config)
    after = parse(config, "claude-code")["mcpServers"]
    assert after["git"] == before["mcpServers"]["git"]
    assert after["everything"] == before["mcpServers"]["everything"]
    # A bridged entry names its URL and headers: rebuilt from them (not byte-exact).
    assert after["docs"] == before["mcpServers"]["docs"]
    assert {c.key: (c.action, c.exact) for c in report.changes}["docs"] == ("restored", False)


def test_detach_keeps_an_entry_the_user_changed_since(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    config.write_text(json.dumps({"mcpServers": {"t": {"command": "srv"}}}, indent=2))
    lib.attach(config, wrapper=WRAPPER)
    config.write_text(json.dumps({"mcpServers": {"t": {"command": "other"}}}, indent=2))
    report = lib.detach(config)
    assert [(c.key, c.action) for c in report.changes] == [("t", "kept")]
    assert json.loads(config.read_text()) == {"mcpServers": {"t": {"command": "other"}}}
    assert not lib.state_path(tmp_path / "bbhome", config.resolve()).exists()


def test_detach_of_a_config_never_attached_is_a_no_op(tmp_path: Path) -> None:
    config = place(tmp_path, "cursor")
    original = config.read_bytes()
    code, out = run_cli("detach", str(config))
    assert code == 0 and "nothing is attached" in out
    assert config.read_bytes() == original


# --- errors: one line, exit 2, file untouched -------------------------------------------------


def assert_untouched(config: Path, original: bytes) -> None:
    assert config.read_bytes() == original
    assert sorted(p.name for p in config.parent.iterdir()) == [config.name]


def test_malformed_json_names_file_line_and_column(tmp_path: Path) -> None:
    config = tmp_path / "claude_desktop_config.json"
    original = b'{\n  "mcpServers": {\n    "a": {"command": "x" "args": []}\n  }\n}\n'
    config.write_bytes(original)
    code, out = run_cli("attach", str(config))
    assert code == 2
    assert out.count("\n") == 1 and out.startswith("blackbox: ")
    # The same position Python's own JSON parser reports for this text.
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads(original)
    assert (reference.value.lineno, reference.value.colno) == (3, 26)
    assert f"{config}: invalid JSON at line 3, column 26" in out
    assert "left untouched" in out and "Traceback" not in out
    assert_untouched(config, original)


def test_comments_are_refused_where_the_host_reads_strict_json(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    original = b'{\n  // mine\n  "mcpServers": {"a": {"command": "x"}}\n}\n'
    config.write_bytes(original)
    code, out = run_cli("attach", str(config))
    assert code == 2 and "line 2, column 3: a comment is not JSON" in out
    assert_untouched(config, original)


def test_comments_and_trailing_commas_are_fine_in_vscode(tmp_path: Path) -> None:
    config = tmp_path / ".vscode" / "mcp.json"
    config.parent.mkdir()
    original = b'{\n  // mine\n  "servers": {"a": {"type": "stdio", "command": "x",},},\n}\n'
    config.write_bytes(original)
    lib.attach(config, wrapper=WRAPPER)
    assert b"// mine" in config.read_bytes()
    lib.detach(config)
    assert config.read_bytes() == original


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing/.mcp.json", None, "no such file"),
        (".mcp.json", b'{"mcpServers": {}}', '"mcpServers" is empty: nothing to attach'),
        ("claude_desktop_config.json", b'{"globalShortcut": ""}', 'no "mcpServers" object'),
        ("settings.json", b'{"editor.fontSize": 12}', "not a known MCP host config"),
        (".mcp.json", b"[1, 2]", "not a known MCP host config"),
        (".mcp.json", b'{"mcpServers": {"a": {"command": "\xff"}}}', "not UTF-8 at line 1"),
        (".mcp.json", b"", "line 1, column 1: unexpected end of file"),
    ],
)
def test_clear_one_line_errors(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    config = tmp_path / name
    if content is not None:
        config.write_bytes(content)
    # Detaching an empty server list is fine (nothing is attached); every other case is an error
    # for both commands.
    commands = ("attach",) if message.endswith("nothing to attach") else ("attach", "detach")
    for command in commands:
        code, out = run_cli(command, str(config))
        assert code == 2, out
        assert out.count("\n") == 1 and message in out, out
        if content is not None:
            assert_untouched(config, content)


def test_a_file_changed_while_attaching_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = place(tmp_path, "claude-code")
    real_load = lib.load_config

    def load_then_host_saves(path):  # type: ignore[no-untyped-def]
        loaded = real_load(path)
        config.write_text(config.read_text().replace("docs", "documents"))
        return loaded

    monkeypatch.setattr(lib, "load_config", load_then_host_saves)
    with pytest.raises(lib.ConfigChanged):
        lib.attach(config, wrapper=WRAPPER)
    assert '"documents"' in config.read_text()  # the host's save survives
    assert not lib.state_path(tmp_path / "bbhome", config.resolve()).exists()


# --- how the file is written ------------------------------------------------------------------


def test_writes_keep_the_mode_and_leave_no_temporary_files(tmp_path: Path) -> None:
    config = place(tmp_path, "claude-desktop")
    config.chmod(0o600)
    lib.attach(config, wrapper=WRAPPER)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    lib.detach(config)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert not [p for p in config.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_symlinked_config_stays_a_symlink(tmp_path: Path) -> None:
    real = place(tmp_path, "claude-code")
    link_dir = tmp_path / "project"
    link_dir.mkdir()
    link = link_dir / ".mcp.json"
    link.symlink_to(real)
    original = real.read_bytes()
    lib.attach(link, wrapper=WRAPPER)
    assert link.is_symlink() and real.read_bytes() != original
    lib.detach(link)
    assert link.is_symlink() and real.read_bytes() == original


# --- a host launches the attached entry -------------------------------------------------------


async def _call_time(params: StdioServerParameters, mode: str) -> str:
    async with Client(params, mode=mode, read_timeout_seconds=30) as client:
        result = await client.call_tool("get_current_time", {"timezone": "UTC"})
    return result.content[0].text


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("backend", "mode"), [("sqlite", "legacy"), ("postgresql", "2026-07-28")])
def test_a_host_launching_the_attached_entry_is_recorded(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str, mode: str
) -> None:
    """Attach a Claude Code .mcp.json running mcp-server-time (PyPI), then start the entry the way
    a host does — the official SDK's stdio client with the command, args and env read from the
    attached file — and find the session, named after the server key, in the store. Each era
    once, each backend once (a server start costs seconds on a loaded machine)."""
    store_url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    config = tmp_path / ".mcp.json"
    original = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "env": {"TZ": "UTC"},
    }
    config.write_text(json.dumps({"mcpServers": {"clock": original}}, indent=2) + "\n")
    # Attaching is a command whose question is what it writes: it runs in this process. The host
    # starting the entry below is a real process (the SDK's stdio client), as a host's would be.
    proc = run_blackbox("attach", str(config), "--store", store_url, env=os.environ)
    assert proc.returncode == 0, proc.stderr

    # A user's store exists before the host starts a server: create its schema now, so the tap's
    # shutdown window (the SDK allows about 2 s) is not spent on a first migration.
    open_store(store_url).close()
    entry = json.loads(config.read_text())["mcpServers"]["clock"]
    # The host lays the entry's env over its own; BLACKBOX_HOME keeps the journal in tmp_path
    # (and holds the user configuration `--store` saved the store in); blackbox is on PATH.
    path = f"{Path(BLACKBOX).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**entry["env"], "BLACKBOX_HOME": str(tmp_path / "bbhome"), "PATH": path}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
    text = anyio.run(_call_time, params, mode)
    assert "UTC" in text

    store = open_store(store_url)
    try:
        sessions = eventually(
            lambda: [s for s in store.list_sessions() if s.name == "clock" and s.sealed],
            timeout=60,
            interval=0.2,
            message="a sealed session named after the server key",
        )
        assert len(sessions) == 1, "one sealed session named after the server key"
        events = list(store.read_session(sessions[0].session_id))
    finally:
        store.close()
    calls = [e for e in events if e.kind == "frame" and e.method == "tools/call"]
    assert [(e.direction, e.tool) for e in calls] == [("c2s", "get_current_time")]
    replies = [
        e
        for e in events
        if e.kind == "frame" and e.direction == "s2c" and e.rpc_id == calls[0].rpc_id
    ]
    assert replies and json.loads(replies[-1].raw)["result"]["content"][0]["text"] == text
    started = json.loads(next(e for e in events if e.kind == "session_started").raw)
    assert started["command"] == [sys.executable, *original["args"]]  # the server, not the wrapper
    assert "TZ" in started["env_names"]  # the entry's env reached the server through the wrapper


def test_absurd_nesting_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    original = '{"mcpServers": {"a": {"command": "x", "deep": ' + "[" * 50_000 + "]" * 50_000
    config.write_text(original + "}}}")
    code, out = run_cli("attach", str(config))
    assert code == 2 and f"nested deeper than {jsonc.MAX_DEPTH} levels" in out
    assert parse_json_text("[" * 150 + "]" * 150, jsonc=False).kind == "array"


def test_duplicate_keys_wrap_the_entry_the_host_reads(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    original = b'{"mcpServers": {"a": {"command": "old"}, "a": {"command": "new"}}}'
    config.write_bytes(original)
    report = lib.attach(config, wrapper=WRAPPER)
    assert [(c.key, c.action) for c in report.changes] == [("a", "skipped"), ("a", "wrapped")]
    assert json.loads(config.read_text())["mcpServers"]["a"]["args"][-1] == "new"
    assert b'{"command": "old"}' in config.read_bytes()
    lib.detach(config)
    assert config.read_bytes() == original


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


async def _echo_over_http(url: str) -> str:
    async with Client(url, mode="legacy", read_timeout_seconds=30) as client:
        result = await client.call_tool("echo", {"message": "through the attached proxy"})
    return result.content[0].text


@pytest.mark.timeout(120)
def test_an_attached_http_entry_is_recorded_through_the_printed_proxy_command(
    tmp_path: Path, sqlite_url: str
) -> None:
    """An HTTP entry for @modelcontextprotocol/server-everything (npm, Streamable HTTP): attach
    it, run the `blackbox proxy` command attach printed, connect the SDK client to the URL now in
    the config, and find the session under the server key."""
    upstream_port = free_port()
    server = subprocess.Popen(
        [str(NODE_BIN / "mcp-server-everything"), "streamableHttp"],
        env={**os.environ, "PORT": str(upstream_port)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    proxy = None
    try:
        wait_listening(upstream_port, server, timeout=30.0)
        config = tmp_path / ".mcp.json"
        entry = {"type": "http", "url": f"http://127.0.0.1:{upstream_port}/mcp"}
        config.write_text(json.dumps({"mcpServers": {"everything": entry}}, indent=2) + "\n")
        # A base that puts this key's hashed port on a port the OS just reported free.
        hashed = proxy_service.preferred_port("everything", 0)
        base = free_port() - hashed
        code, out = run_cli(
            "attach",
            str(config),
            "--store",
            sqlite_url,
            "--proxy-port-base",
            str(base),
            "--http",
            "proxy",
        )
        assert code == 0, out
        attached_url = json.loads(config.read_text())["mcpServers"]["everything"]["url"]
        printed = next(line for line in out.splitlines() if " proxy --upstream " in line)
        argv = shlex.split(printed)
        assert argv[1:4] == ["proxy", "--upstream", entry["url"]]
        proxy = subprocess.Popen(
            argv,
            env={**os.environ, "BLACKBOX_HOME": str(tmp_path / "bbhome")},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert attached_url == f"http://127.0.0.1:{base + hashed}/mcp"
        wait_listening(base + hashed, proxy, timeout=30.0)
        assert anyio.run(_echo_over_http, attached_url).endswith("through the attached proxy")
    finally:
        if proxy is not None:
            _stop(proxy)
        _stop(server)

    store = open_store(sqlite_url)
    try:
        calls = eventually(
            lambda: [
                e
                for s in store.list_sessions()
                if s.name == "everything"
                for e in store.read_session(s.session_id)
                if e.kind == "frame" and e.method == "tools/call"
            ],
            timeout=60,
            interval=0.2,
            message="the proxied tools/call in the store",
        )
    finally:
        store.close()
    assert [(e.direction, e.tool) for e in calls] == [("c2s", "echo")]


def test_the_diff_of_a_file_without_a_final_newline_applies_with_patch(tmp_path: Path) -> None:
    config = tmp_path / ".mcp.json"
    original = b'{"mcpServers": {"a": {"command": "x"}}}'  # no final newline
    config.write_bytes(original)
    report = lib.attach(config, wrapper=WRAPPER, dry_run=True)
    diff = report.diff()
    assert diff.endswith("\\ No newline at end of file\n")
    # The diff is a real patch: `patch` turns the current file into the attached one.
    patch = subprocess.run(
        ["patch", "--quiet", "-o", str(tmp_path / "patched"), str(config)],
        input=diff,
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert patch.returncode == 0, patch.stderr
    assert (tmp_path / "patched").read_text() == report.after
    assert config.read_bytes() == original


def test_a_store_only_in_this_shell_is_pointed_out(
    tmp_path: Path, blackbox_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = place(tmp_path, "cursor")
    code, out = run_cli("attach", str(config), "--dry-run")
    assert code == 0 and "BLACKBOX_STORE is set here" not in out
    monkeypatch.setenv("BLACKBOX_STORE", "postgresql://me@db/bb")
    code, out = run_cli("attach", str(config), "--dry-run")
    assert code == 0 and "note: BLACKBOX_STORE is set here" in out
