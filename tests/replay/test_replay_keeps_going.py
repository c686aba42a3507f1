"""Replay keeps going past the calls it does not send. A real SDK server (tests/replay/servers/
notes.py) records a session whose `delete_note` asks the client to confirm (an elicitation) and
whose `write_note` writes; then, with the notes as they were:

- `--read-only` sends and compares only the read-only calls: the skipped calls, and the
  confirmation the server asked for during one of them, are not divergences, and the report says
  how many were skipped;
- "n" at the prompt of a terminal skips that call (its recorded answer stands in) and the replay
  goes on, "y" sends the next one;
- `minimize --read-only` leaves the writes out of every trial;
- every `--option` a message of replay, minimize or suite suggests is an option of the command
  that printed it.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import click
import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import load_command, main
from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.replay_kit import record_notes_session, tool_call
from tests.fixtures.taps import INITIALIZED_MESSAGE, wait_sealed

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


def _reset(notes: Path) -> None:
    """The notes as they were when the session started."""
    for path in notes.iterdir():
        path.unlink()
    (notes / "a.txt").write_text("first")
    (notes / "b.txt").write_text("to delete")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("keeps_going")
    notes = tmp / "notes"
    notes.mkdir()
    _reset(notes)
    url = f"sqlite:///{tmp / 'store.db'}"
    open_store(url).close()
    msgs = [
        INIT,
        INITIALIZED_MESSAGE,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        tool_call(3, "read_note", name="a.txt"),  # step 4
        tool_call(4, "delete_note", name="b.txt"),  # step 5: the server asks to confirm
        tool_call(5, "read_note", name="a.txt"),  # step 6
        tool_call(6, "write_note", name="c.txt", text="new"),  # step 7
    ]
    env = dict(os.environ, BLACKBOX_HOME=str(tmp / "home"), BLACKBOX_STORE=url)
    record_notes_session(notes, msgs, env)
    store = open_store(url)
    try:
        wait_sealed(store)
    finally:
        store.close()
    assert not (notes / "b.txt").exists() and (notes / "c.txt").read_text() == "new"
    return url, notes, {**env, "NO_COLOR": "1"}


def _replay(url: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`replay last` in this process, its stdin not a terminal (the prompt test below runs the
    installed command on a pseudo-terminal)."""
    return run_blackbox("replay", "last", "--store", url, *args, env=env)


def test_read_only_compares_only_the_calls_it_sent(recorded) -> None:  # type: ignore[no-untyped-def]
    url, notes, env = recorded
    _reset(notes)
    proc = _replay(url, env, "--read-only", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "equivalent", doc
    # The confirmation the server asked for inside the skipped delete was never due.
    assert doc["extras"] == []
    assert [(s["tool"], s["status"]) for s in doc["steps"]] == [
        ("delete_note", "skipped"),
        ("write_note", "skipped"),
    ]
    summary = doc["summary"]
    assert (summary["skipped"], summary["equivalent"], summary["diverged"]) == (2, 5, 0)
    assert (notes / "b.txt").exists() and not (notes / "c.txt").exists()  # nothing written

    _reset(notes)
    text = CliRunner().invoke(main, ["replay", "last", "--store", url, "--read-only"], env=env)
    assert text.exit_code == 0, text.output
    assert "2 skipped (may change something)" in text.stdout
    assert text.stdout.strip().endswith("verdict: equivalent")


def _until(master: int, text: bytes, seen: bytearray, deadline: float) -> None:
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} on the terminal: {bytes(seen)!r}"
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the other side closed
                chunk = b""
            assert chunk, f"the terminal closed before {text!r}: {bytes(seen)!r}"
            seen += chunk


def test_no_at_the_prompt_skips_that_call_and_the_replay_goes_on(recorded) -> None:  # type: ignore[no-untyped-def]
    url, notes, env = recorded
    _reset(notes)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [peers.BLACKBOX, "replay", "last", "--store", url, "--format", "json"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    seen = bytearray()
    try:
        deadline = time.monotonic() + 30
        _until(master, b"send step 5 (seq", seen, deadline)
        assert b"delete_note: destructive" in seen
        os.write(master, b"n\n")
        _until(master, b"send step 7 (seq", seen, deadline)
        os.write(master, b"y\n")
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill() if proc.poll() is None else None
        os.close(master)
    assert proc.returncode == 0, (out, bytes(seen))
    doc = json.loads(out)
    assert doc["verdict"] == "equivalent"
    assert [(s["step"], s["tool"], s["status"]) for s in doc["steps"]] == [
        (5, "delete_note", "skipped")
    ]
    assert "recorded answer stands in" in doc["steps"][0]["note"]
    assert doc["summary"]["skipped"] == 1 and doc["summary"]["equivalent"] == 6
    assert (notes / "b.txt").exists()  # "n": not deleted
    assert (notes / "c.txt").read_text() == "new"  # "y": written again


def test_minimize_read_only_leaves_the_writes_out_of_every_trial(recorded) -> None:  # type: ignore[no-untyped-def]
    url, notes, env = recorded
    _reset(notes)
    (notes / "a.txt").write_text("changed since")  # the reads now diverge
    # In this process: the question is what minimisation prints and leaves on disk.
    proc = run_blackbox(
        "minimize", "last", "--store", url, "--until", "divergence", "--read-only", env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kept: initialize, notifications/initialized, tools/call read_note" in proc.stdout
    assert "delete_note" not in proc.stdout
    assert (notes / "b.txt").exists() and not (notes / "c.txt").exists()  # no trial wrote


# -- every option a message suggests exists --------------------------------------------------

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*[a-z]")
# An example line names the command its options belong to: `blackbox replay --suite smoke`.
NAMED = re.compile(r"blackbox ((?:replay|minimize|suite)(?: (?:add|list|show))?)\b")


def _suggestions(printer: str, text: str) -> list[tuple[str, str]]:
    """(command, option) for each option in `text`: of the command a line names before it,
    else of the command that printed it."""
    found = []
    for line in text.splitlines():
        named = NAMED.search(line)
        for match in OPTION.finditer(line):
            owner = named.group(1) if named and named.start() < match.start() else printer
            found.append((owner, match.group()))
    return found


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}


def test_every_option_a_message_suggests_is_an_option_of_its_command(recorded) -> None:  # type: ignore[no-untyped-def]
    url, notes, env = recorded
    _reset(notes)
    runner = CliRunner()
    both = ["--against", "true", "--url", "http://127.0.0.1:9/mcp"]
    # (the command that prints, its arguments): refusals, contradictions, bad values, help
    triggers: list[tuple[list[str], list[str]]] = [
        (["replay"], ["last"]),  # not a terminal: the writes are refused
        (["replay"], ["last", "last"]),  # a suite: refused per session
        (["replay"], []),
        (["replay"], ["last", *both]),
        (["replay"], ["last", "--allow-writes", "--read-only"]),
        (["replay"], ["last", "--read-only", "--inject", "nonsense"]),
        (["replay"], ["--help"]),
        (["minimize"], ["last"]),
        (["minimize"], ["last", "--read-only", *both]),
        (["minimize"], ["last", "--allow-writes", "--read-only"]),
        (["minimize"], ["last", "--read-only"]),  # no recorded fault: says what to use instead
        (["minimize"], ["--help"]),
        (["suite"], ["--help"]),
        (["suite", "add"], ["--help"]),
        (["suite", "add"], ["smoke"]),
        (["suite", "show"], ["no-such-suite"]),
        (["suite", "show"], ["--help"]),
        (["suite", "list"], ["--help"]),
    ]
    suggested: dict[str, set[str]] = {}
    for path, args in triggers:
        store = [] if "--help" in args else ["--store", url]
        result = runner.invoke(main, [*path, *args, *store], env=env)
        assert not isinstance(result.exception, AssertionError), result.output
        for owner, option in _suggestions(" ".join(path), result.stdout + result.stderr):
            suggested.setdefault(owner, set()).add(option)
    # The messages this test is about were printed.
    assert {"--allow-writes", "--read-only"} <= suggested["replay"]
    assert {"--allow-writes", "--read-only", "--until"} <= suggested["minimize"]
    missing = []
    for path, options in suggested.items():
        command: click.Command = load_command(path.split()[0])
        for name in path.split()[1:]:
            assert isinstance(command, click.Group)
            found = command.get_command(click.Context(command), name)
            assert found is not None
            command = found
        known = _options(command) | {"--help"}
        missing += [f"{path}: {option}" for option in sorted(options - known)]
    assert missing == []
