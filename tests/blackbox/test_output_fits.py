"""Output that fits: the main commands over a store of long names and values render within 80
columns, a server's consecutive stderr lines show as one row, NO_COLOR turns colour off even
where colour is asked for, and a pager runs on a terminal only (never for a pipe, never with
--no-pager). The store is a real SQLite store written through its own append; the replay drives
a real server process."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.log import events
from blackbox.recorder.log.model import Direction, Kind, NewEvent
from blackbox.recorder.store import open_store
from click.testing import CliRunner, Result

from blackbox.cli.main import main
from tests.fixtures.environment import BLACKBOX
from tests.fixtures.storekit import OF_SID, T0, session_events, tamper

SID = "019b0000-0000-7000-8000-00000000f175"
NAME = "a-server-with-a-name-much-longer-than-any-column-should-be-" + "x" * 40
TOOL = "get_the_weather_forecast_for_a_place_named_in_full_" + "y" * 40
STDERR_LINES = ["Traceback (most recent call last):", '  File "srv.py", line 3', "ValueError: boom"]
INIT_RESULT = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s"}}
LONG_TEXT = "sunny with a chance of very long values " * 12

# A server for the replay: answers the handshake as recorded and the call with other words.
SERVER = f"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {INIT_RESULT!r}
    else:
        result = {{"content": [{{"type": "text", "text": "rain " * 80}}], "isError": False}}
    print(json.dumps({{"jsonrpc": "2.0", "id": msg["id"], "result": result}}), flush=True)
"""


def _frame(msg: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **msg}).encode()


def _session_records() -> list[NewEvent]:
    started = events.SessionStarted(
        name=NAME,
        transport="stdio",
        command=["python", "-m", "a.very.long.module.path.for.the.server", "--flag=" + "z" * 60],
        cwd="/",
        env_names=[],
        tap_version="0.1.0",
        pid=1,
    )
    tool_def = {"name": TOOL, "description": "d" * 200, "inputSchema": {"type": "object"}}
    call = {"name": TOOL, "arguments": {"place": "Llanfairpwllgwyngyll" * 5}}
    item = {"kind": "tool", "name": TOOL, "hash": "ab" * 32}
    listed = events.ToolsListed(server=NAME, command=" ".join(started.command), items=[item], seq=6)
    c2s, s2c, none = Direction.CLIENT_TO_SERVER, Direction.SERVER_TO_CLIENT, Direction.NONE
    answer = {"content": [{"type": "text", "text": LONG_TEXT}]}
    refused = {"code": -32602, "message": "m" * 300}
    ended = events.SessionEnded(reason="client_closed", outcome="ok", exit_code=0)
    rows = [
        (Kind.SESSION_STARTED, none, events.encode(started)),
        (Kind.FRAME, c2s, _frame({"id": 1, "method": "initialize"})),
        (Kind.FRAME, s2c, _frame({"id": 1, "result": INIT_RESULT})),
        (Kind.FRAME, c2s, _frame({"method": "notifications/initialized"})),
        (Kind.FRAME, c2s, _frame({"id": 2, "method": "tools/list"})),
        (Kind.FRAME, s2c, _frame({"id": 2, "result": {"tools": [tool_def]}})),
        (events.ToolsListed.KIND, none, events.encode(listed)),
        *[(Kind.STDERR, none, events.encode(events.Stderr(line=s))) for s in STDERR_LINES],
        (Kind.FRAME, c2s, _frame({"id": 3, "method": "tools/call", "params": call})),
        (Kind.FRAME, s2c, _frame({"id": 3, "result": answer})),
        (Kind.FRAME, c2s, _frame({"id": 4, "method": "tools/call", "params": call})),
        (Kind.FRAME, s2c, _frame({"id": 4, "error": refused})),
        (Kind.SESSION_ENDED, none, events.encode(ended)),
    ]
    start_ns = 1_700_000_000_000_000_000
    return [
        NewEvent(SID, seq, start_ns + seq * 1_000_000, seq * 1_000_000, kind, direction, raw)
        for seq, (kind, direction, raw) in enumerate(rows, start=1)
    ]


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('fits') / 'store.db'}"
    store = open_store(url)
    try:
        store.append(_session_records())
    finally:
        store.close()
    return url


def run(
    url: str,
    *args: str,
    width: int | None = None,
    env: dict[str, str] | None = None,
    color: bool = False,
) -> Result:
    """The CLI in-process; with `width`, as a terminal of that many columns (COLUMNS too)."""
    environ = {"COLUMNS": str(width)} if width else {}
    environ.update(env or {})
    return CliRunner().invoke(
        main, [*args, "--store", url], env=environ, color=color, terminal_width=width
    )


def test_main_commands_fit_80_columns(store_url: str, tmp_path: Path) -> None:
    server = tmp_path / "server.py"
    server.write_text(SERVER)
    commands = [
        ["sessions"],
        ["show", SID],
        ["tail", SID, "-n", "50"],
        ["report", "latency"],
        ["report", "sessions"],
        ["tools"],
        ["replay", SID, "--against", f"{sys.executable} {server}", "--allow-writes"],
        ["sql", "SELECT * FROM frames"],  # streamed: fitted batch by batch
        ["sql", "SELECT session_id, tool, raw FROM frames WHERE tool IS NOT NULL"],
        ["doctor", SID],
        ["verify"],
    ]
    # A store whose findings name long values: verify wraps them, whole.
    tampered = f"sqlite:///{tmp_path / 'tampered.db'}"
    store = open_store(tampered)
    store.append(_session_records())
    store.close()
    edit = f"UPDATE events SET tool = :tool WHERE {OF_SID} AND seq = 11"
    tamper(tampered, (edit, {"tool": "edited_" + TOOL, "sid": SID}))
    runs = [(store_url, argv) for argv in commands] + [(tampered, ["verify"])]
    for url, argv in runs:
        result = run(url, *argv, width=80)
        assert result.exit_code in (0, 1), (argv, result.output, result.exception)
        lines = result.stdout.splitlines()
        assert lines, argv
        too_long = [line for line in lines if len(line) > 80]
        assert not too_long, (argv, too_long)
        if argv[0] == "doctor" or url == tampered:  # long lines wrapped, not cut
            whole = run(url, *argv).stdout  # a pipe: every line as it is
            assert max(map(len, whole.splitlines())) > 80
            assert "".join(result.stdout.split()) == "".join(whole.split())
        if url == tampered:
            assert result.exit_code == 1
            finding = f"stored 'edited_{TOOL}', its raw bytes say '{TOOL}'"
            assert finding.replace(" ", "") in "".join(lines).replace(" ", "")
        if argv[-1].endswith("IS NOT NULL"):  # a few columns: headers whole, values cut
            assert lines[0].split() == ["session_id", "tool", "raw"]
            assert "…" in lines[2]
        if argv[0] == "replay":  # the diff is whole: wrapped, not cut
            assert result.exit_code == 1
            assert "rain rain" in result.stdout and "…" not in result.stdout
            joined = "".join(line.strip() for line in lines)
            assert ("sunny with a chance of very long values " * 12).replace(" ", "") in (
                joined.replace(" ", "")
            )


def test_stderr_lines_are_one_row(store_url: str) -> None:
    result = run(store_url, "show", SID, width=400)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if " stderr " in line]
    assert len(rows) == 1, rows
    assert rows[0].split()[0] == "8-10"
    assert "(3 lines)" in rows[0]
    assert all(text.strip() in rows[0] for text in STDERR_LINES)
    # Machine-readable formats keep one record per row.
    jsonl = run(store_url, "show", SID, "--format", "jsonl")
    assert sum(json.loads(line)["kind"] == "stderr" for line in jsonl.stdout.splitlines()) == 3


def test_tail_prints_stderr_lines_as_one_line(store_url: str) -> None:
    result = run(store_url, "tail", SID, "-n", "50")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if " stderr " in line]
    assert len(rows) == 1, rows
    assert " 8-10 · stderr  (3 lines) " in rows[0]
    assert all(" ".join(text.split()) in rows[0] for text in STDERR_LINES)
    # The grouped line is one line of the history -n counts.
    last = run(store_url, "tail", SID, "-n", "5").stdout.splitlines()
    assert len(last) == 5 and " 8-10 · stderr " in last[0], last
    jsonl = run(store_url, "tail", SID, "-n", "50", "--format", "jsonl")
    assert sum(json.loads(line)["kind"] == "stderr" for line in jsonl.stdout.splitlines()) == 3


def test_no_color_turns_colour_off(store_url: str) -> None:
    coloured = run(store_url, "tail", SID, "-n", "50", color=True)
    assert "\x1b[" in coloured.stdout  # colour where it is asked for ...
    plain = run(store_url, "tail", SID, "-n", "50", color=True, env={"NO_COLOR": "1"})
    assert plain.exit_code == 0, plain.output
    assert "\x1b[" not in plain.stdout  # ... and none under NO_COLOR
    assert "error -32602" in plain.stdout


def _pager(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "paged.txt"
    pager = tmp_path / "pager.sh"
    pager.write_text(f"#!/bin/sh\ncat > {marker}\n")
    pager.chmod(0o755)
    return pager, marker


def test_no_pager_off_a_terminal(store_url: str, tmp_path: Path) -> None:
    pager, marker = _pager(tmp_path)
    env = {"PAGER": str(pager)}
    for args in (
        ["show", SID, "--format", "json"],
        ["show", SID, "--format", "json", "--no-pager"],
    ):
        result = run(store_url, *args, env=env)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)[0]["seq"] == 1
    assert not marker.exists()


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run the CLI with a pseudo-terminal as stdin, stdout and stderr; what it printed there."""
    parent, child = pty.openpty()
    proc = subprocess.Popen(
        [BLACKBOX, *args], stdin=child, stdout=child, stderr=child, env=env, close_fds=True
    )
    os.close(child)
    out = _read_until_closed(parent)
    assert proc.wait(30) == 0, out
    return out


def _read_until_closed(parent: int) -> str:
    """What was written to a pseudo-terminal until its other side closed (then closed too)."""
    out = b""
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the terminal's other side closed: the process is done
            break
        if not chunk:
            break
        out += chunk
    os.close(parent)
    return out.decode("utf-8", errors="replace")


def test_a_terminal_pages_long_json_unless_no_pager(store_url: str, tmp_path: Path) -> None:
    pager, marker = _pager(tmp_path)
    env = {**os.environ, "PAGER": str(pager), "LINES": "24", "COLUMNS": "80"}
    env.pop("NO_COLOR", None)
    _on_a_terminal(["show", SID, "--format", "json", "--store", store_url], env)
    assert json.loads(marker.read_text())[0]["seq"] == 1  # pretty-printed, through the pager
    marker.unlink()
    shown = _on_a_terminal(
        ["show", SID, "--format", "json", "--no-pager", "--store", store_url], env
    )
    assert not marker.exists()
    assert '"seq": 1' in shown


def test_a_progress_bar_on_a_terminal_only(tmp_path: Path, blackbox_env: dict[str, str]) -> None:
    url = f"sqlite:///{tmp_path / 'many.db'}"
    store = open_store(url)
    store.append(
        [ev for n in range(40) for ev in session_events(calls=1, start_ns=T0 + n * 10**12)]
    )
    store.close()
    # stderr is a pseudo-terminal, stdout a file: the bar is drawn on stderr alone.
    parent, child = pty.openpty()
    env = {**blackbox_env, "COLUMNS": "80"}
    with (tmp_path / "stdout").open("wb") as stdout:
        proc = subprocess.Popen(
            [BLACKBOX, "verify", "--store", url],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=child,
            env=env,
            close_fds=True,
        )
        os.close(child)
        drawn = _read_until_closed(parent)
        assert proc.wait(30) == 0, drawn
    assert (tmp_path / "stdout").read_text() == "intact: 40 session(s) verified\n"
    assert "verifying sessions" in drawn and "100%" in drawn, drawn
    assert "[####" in drawn  # the bar itself, not only its label
    # Off a terminal (a log, a pipe) nothing of it is printed.
    piped = CliRunner().invoke(main, ["verify", "--store", url])
    assert piped.exit_code == 0, piped.output
    assert piped.stdout == "intact: 40 session(s) verified\n"
    assert "verifying" not in piped.stderr and "%" not in piped.stderr
