"""Replay is safe by default. A session recorded through `blackbox record` against a real SDK
server whose tools carry annotations (tests/replay/servers/notes.py) writes a note; the attack is
replaying it (not on a terminal) after the note changed: without --allow-writes the replay refuses
and the note stays as it is; --read-only skips the writes; --allow-writes sends them. A --url
where nothing answers fails with exit 2: at once when it refuses, after the connect timeout when
it accepts and stays silent."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from blackbox.replay.drivers import CONNECT_TIMEOUT_S
from blackbox.replay.recording import load_recording
from blackbox.replay.safety import UnsafeReplay, check_replay_safety, decide, tool_annotations

from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.replay_kit import NOTES_SERVER, record_notes_session, tool_call
from tests.fixtures.taps import INIT_MESSAGE, INITIALIZED_MESSAGE, wait_sealed


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    tmp = tmp_path_factory.mktemp("safety")
    notes = tmp / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("first")
    url = f"sqlite:///{tmp / 'store.db'}"
    open_store(url).close()
    msgs = [
        INIT_MESSAGE,
        INITIALIZED_MESSAGE,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        tool_call(3, "read_note", name="a.txt"),
        tool_call(4, "write_note", name="a.txt", text="recorded"),
        tool_call(5, "touch_note", name="b.txt"),
        tool_call(6, "count_notes"),
    ]
    env = dict(os.environ, BLACKBOX_HOME=str(tmp / "home"), BLACKBOX_STORE=url)
    record_notes_session(notes, msgs, env)
    store = open_store(url)
    try:
        wait_sealed(store)
    finally:
        store.close()
    return url, notes, tmp


def _replay(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`replay last` run in this process, its stdin not a terminal: nobody to ask."""
    env = dict(os.environ, BLACKBOX_HOME=str(tmp / "home"))
    return run_blackbox("replay", "last", "--store", url, *args, env=env)


def _replay_child(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`replay last` as a process of its own: what a user waits for, start-up included."""
    env = dict(os.environ, BLACKBOX_HOME=str(tmp / "home"))
    return subprocess.run(
        [peers.BLACKBOX, "replay", "last", "--store", url, *args],
        stdin=subprocess.DEVNULL,  # not a terminal: nobody to ask
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_the_calls_that_may_change_something_are_found_from_annotations(recorded) -> None:  # type: ignore[no-untyped-def]
    url, _, _ = recorded
    store = open_store(url, create=False)
    try:
        rec = load_recording(store, store.resolve("last"))
    finally:
        store.close()
    notes = tool_annotations(rec)
    assert notes["read_note"] == {"readOnlyHint": True}
    risky = check_replay_safety(rec)
    assert [(c.tool, c.reason, c.idempotent) for c in risky] == [
        ("write_note", "destructive", False),
        ("touch_note", "not marked read-only", True),
        ("count_notes", "destructive", False),  # no hints: the schema's defaults
    ]
    with pytest.raises(UnsafeReplay, match="--allow-writes"):
        decide(risky)
    assert decide(risky, read_only=True) == {c.step for c in risky}
    assert decide(risky, allow_writes=True) == frozenset()
    assert decide(risky, confirm=lambda _call: True) == frozenset()
    assert decide(risky, confirm=lambda call: call.tool != "touch_note") == {risky[1].step}


def test_replay_refuses_without_allow_writes_when_not_on_a_terminal(recorded) -> None:  # type: ignore[no-untyped-def]
    url, notes, tmp = recorded
    (notes / "a.txt").write_text("changed since")
    (notes / "b.txt").unlink(missing_ok=True)
    proc = _replay(url, tmp)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "3 call(s) may change something" in proc.stderr
    assert "write_note: destructive" in proc.stderr
    assert "pass --allow-writes to send them or --read-only to skip them" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (notes / "a.txt").read_text() == "changed since"  # nothing was sent
    assert not (notes / "b.txt").exists()


def test_read_only_skips_the_writes(recorded) -> None:  # type: ignore[no-untyped-def]
    url, notes, tmp = recorded
    (notes / "a.txt").write_text("first")  # as it was when the session read it
    (notes / "b.txt").unlink(missing_ok=True)
    proc = _replay(url, tmp, "--read-only", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    skipped = [s["tool"] for s in doc["steps"] if s["status"] == "skipped"]
    assert skipped == ["write_note", "touch_note", "count_notes"]
    assert doc["summary"]["skipped"] == 3 and doc["verdict"] == "equivalent"
    assert not (notes / "b.txt").exists() and (notes / "a.txt").read_text() == "first"


def test_allow_writes_sends_them(recorded) -> None:  # type: ignore[no-untyped-def]
    url, notes, tmp = recorded
    (notes / "a.txt").write_text("changed since")
    proc = _replay(url, tmp, "--allow-writes")
    assert proc.returncode in (0, 1), proc.stderr
    assert (notes / "a.txt").read_text() == "recorded"
    assert (notes / "b.txt").exists()


def test_a_dead_url_fails_within_5_s_with_exit_2(recorded) -> None:  # type: ignore[no-untyped-def]
    url, _, tmp = recorded
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    began = time.monotonic()
    proc = _replay_child(url, tmp, "--url", f"http://127.0.0.1:{port}/mcp", "--allow-writes")
    assert time.monotonic() - began < 5
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"blackbox: cannot reach http://127.0.0.1:{port}/mcp")
    )


def test_a_url_that_accepts_but_never_answers_fails_after_the_connect_timeout(recorded) -> None:  # type: ignore[no-untyped-def]
    """A server that accepts and never answers costs the user the connect timeout, not each
    step's 30 s response timeout. Measured against the same replay of a URL that refuses, run
    just before: the start-up both share swings from 1 s to over 2 s under the suite's load,
    the wait this test is about does not."""
    url, _, tmp = recorded
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        refused_port = sock.getsockname()[1]
    began = time.monotonic()
    refused = _replay_child(
        url, tmp, "--url", f"http://127.0.0.1:{refused_port}/mcp", "--allow-writes"
    )
    baseline = time.monotonic() - began
    assert refused.returncode == 2 and "cannot reach" in refused.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()  # the kernel accepts; nothing ever answers
        port = sock.getsockname()[1]
        began = time.monotonic()
        proc = _replay_child(url, tmp, "--url", f"http://127.0.0.1:{port}/mcp", "--allow-writes")
        waited = time.monotonic() - began - baseline
    assert proc.returncode == 2 and "cannot reach" in proc.stderr
    assert waited < CONNECT_TIMEOUT_S + 1.5, (waited, baseline)


def test_a_replay_nobody_answered_is_not_ok(recorded) -> None:  # type: ignore[no-untyped-def]
    url, _, tmp = recorded
    silent = f"{sys.executable} -c 'import sys; sys.stdin.read()'"
    proc = _replay(url, tmp, "--against", silent, "--timeout", "1", "--allow-writes")
    assert proc.returncode == 1, proc.stderr
    assert "the server answered none of the requests" in proc.stdout
    assert proc.stdout.strip().endswith("verdict: unanswered")
    listed = run_blackbox("sessions", "--replays", "--store", url, "--format", "json")
    newest = json.loads(listed.stdout)[0]
    assert newest["replay_of"] and newest["outcome"] == "diverged"


PLUGIN_TEST = """
import pytest

@pytest.mark.blackbox_replay(store={url!r}, name="notes", against={against!r}{writes})
def test_recorded(blackbox_session):
    blackbox_session.check()
"""


def test_the_pytest_plugin_refuses_writes_unless_the_marker_allows_them(
    recorded, pytester: pytest.Pytester
) -> None:  # type: ignore[no-untyped-def]
    url, notes, _ = recorded
    (notes / "a.txt").write_text("changed since")
    against = " ".join([*NOTES_SERVER, str(notes)])

    def run(writes: str) -> pytest.RunResult:
        pytester.makepyfile(
            test_replays=PLUGIN_TEST.format(url=url, against=against, writes=writes)
        )
        # In this process: the inner session still loads the plugin from its entry point into
        # a plugin manager of its own, its stdin no terminal; a subprocess would only add a
        # start of pytest and of blackbox's imports to each of the three runs.
        return pytester.runpytest_inprocess("-p", "no:cacheprovider")

    refused = run("")
    refused.assert_outcomes(failed=1)
    refused.stdout.fnmatch_lines(["*may change something*write_note*--allow-writes*"])
    assert (notes / "a.txt").read_text() == "changed since"  # nothing was written
    skipped = run(', writes="skip"')
    assert (notes / "a.txt").read_text() == "changed since"
    assert skipped.ret in (0, 1)  # skipped calls may make later answers differ; none was sent
    run(', writes="allow"')
    assert (notes / "a.txt").read_text() == "recorded"  # allowed: the write was sent again
