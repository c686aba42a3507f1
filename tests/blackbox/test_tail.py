"""`blackbox tail` against real taps: the SDK's example server recorded by `blackbox record` and
driven by the SDK client. A frame of a running session reaches `tail -f` within a second of
crossing the wire (its wall time), filters keep what they name, and piped output has no colour
while a terminal gets it."""

from __future__ import annotations

import json
import os
import pty
import queue
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from blackbox.recorder.query.live_feed import Follower, Record
from blackbox.recorder.store import open_store

from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.polling import eventually
from tests.fixtures.taps import record, wait_sessions

pytestmark = pytest.mark.timeout(240)


def tail_env(home: Path) -> dict[str, str]:
    return {**os.environ, "BLACKBOX_HOME": str(home)}


def tail(home: Path, url: str, *args: str) -> str:
    proc = run_blackbox("tail", "--store", url, *args, env=tail_env(home))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("tail")
    url = f"sqlite:///{tmp / 'store.db'}"
    record(tmp / "home", url, "first")
    wait_sessions(url, 1)
    return tmp / "home", url


def first_session(url: str) -> str:
    store = open_store(url, create=False)
    try:
        return next(s.session_id for s in store.list_sessions() if s.name == "first")
    finally:
        store.close()


class Lines:
    """A child's stdout read line by line on a thread, each line with its arrival time."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        self.q: queue.Queue[tuple[float, str]] = queue.Queue()
        self.all: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            self.q.put((time.time(), line))

    def next(self, timeout: float = 30) -> tuple[float, str]:
        at, line = self.q.get(timeout=timeout)
        self.all.append(line)
        return at, line


@dataclass
class Live:
    """What three observers of one running session saw: `tail -f` as a process (each line with
    its arrival time), a follower of the taps' journals alone, and a follower of both sources."""

    tail_lines: list[tuple[float, str]]
    journal_only: list[Record]
    both: list[Record]
    store_head: dict[str, int]


@pytest.fixture(scope="module")
def live(recorded: tuple[Path, str]) -> Live:
    """ONE session ("live", the example server's every call) recorded while `tail -f` and two
    followers watch it. A recording costs a tap, its store worker and an SDK server (about 1.5 s
    of CPU); each observer reads the running tap on its own, so one session serves all three
    tests, each asserting on its own observer. The followers are polled from this thread while
    the client runs on another, as each test did on its own."""
    home, url = recorded
    proc = subprocess.Popen(
        [peers.BLACKBOX, "tail", "-f", "-n", "1", "--format", "jsonl", "--store", url],
        env=tail_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = open_store(url, create=False)
    try:
        lines = Lines(proc.stdout)
        lines.next()  # the one record of history: tail is following now
        # The journal side on its own: the store side pointed past the log's end.
        journal_only = Follower(store, home / "journal", after_position=10**12)
        both = Follower(store, home / "journal")
        got_journal: list[Record] = []
        got_both: list[Record] = []
        client = threading.Thread(target=record, args=(home, url, "live"))
        client.start()

        def followed() -> bool:
            got_journal.extend(journal_only.poll())
            got_both.extend(both.poll())
            return (
                not client.is_alive()
                and any(r.tool == "echo" for r in got_journal)
                and any(r.kind == "session_sealed" for r in got_both)
            )

        try:
            eventually(followed, timeout=60, message="the live session, followed to its seal")
            time.sleep(1.0)  # let the store side catch up: its copies must be dropped
            got_both.extend(both.poll())
            got_journal.extend(journal_only.poll())
        finally:
            client.join(60)
            journal_only.close()
            both.close()
        tail_lines: list[tuple[float, str]] = []
        while True:  # tail's lines up to the last call's response: the whole session went by
            at, line = lines.next()
            tail_lines.append((at, line))
            doc = json.loads(line)
            if doc.get("msg_type") == "response" and "x" * 100 in (doc.get("text") or ""):
                break
        sids = {r.session_id for r in got_both}
        heads = {sid: store.head(sid)[0] for sid in sids}
    finally:
        store.close()
        proc.terminate()
        proc.wait(10)
    return Live(tail_lines, got_journal, got_both, heads)


def test_follow_shows_frames_of_a_running_session_within_a_second(live: Live) -> None:
    lags: list[float] = []
    methods: set[str] = set()
    for at, line in live.tail_lines:
        doc = json.loads(line)
        if doc["kind"] != "frame":
            continue
        lags.append(at - datetime.fromisoformat(doc["time"]).timestamp())
        methods.add(doc["method"] or "")
    assert {"initialize", "tools/list", "tools/call"} <= methods
    lags.sort()
    p95 = lags[int(0.95 * (len(lags) - 1))]
    assert p95 < 1.0, f"wire -> tail lag p95 {p95:.3f}s (all: {lags})"
    assert statistics.median(lags) < 1.0


def test_follower_reads_running_taps_journals_before_the_store(live: Live) -> None:
    """The journal side on its own: with the store side pointed past the log's end, records of
    a running session still arrive (from the tap's journal), each once."""
    got = live.journal_only
    assert any(r.tool == "echo" for r in got)
    assert all(r.source == "journal" and r.position is None for r in got)
    keys = [(r.session_id, r.seq) for r in got]
    assert len(keys) == len(set(keys))


def test_follower_gives_each_record_once_from_either_source(live: Live) -> None:
    """Both sources on: a session recorded while following arrives whole (seq 1 to its seal,
    no gap) and each record once, whichever source had it first."""
    got = live.both
    sid = next(r.session_id for r in got if r.kind == "session_sealed")
    seqs = [r.seq for r in got if r.session_id == sid]
    assert sorted(seqs) == list(range(1, live.store_head[sid] + 1))
    keys = [(r.session_id, r.seq) for r in got]
    assert len(keys) == len(set(keys))


def test_request_and_response_on_one_line_filters_and_cut(recorded: tuple[Path, str]) -> None:
    home, url = recorded
    first = first_session(url)
    # A real pipe, in a child: in-process, click's test runner strips styles itself, so only a
    # child's stdout says whether the command leaves colour off a pipe.
    piped = subprocess.run(
        [peers.BLACKBOX, "tail", "--store", url, first, "-n", "1000"],
        env=tail_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0, piped.stderr
    out = piped.stdout
    assert "\x1b[" not in out  # piped: no colour codes
    calls = [line for line in out.splitlines() if "tools/call" in line]
    echo = next(line for line in calls if '"hello"' in line)
    assert "⇒ ok" in echo and " ms" in echo  # request, response and latency on one line
    big = next(line for line in calls if "xxxx" in line)
    assert "… (" in big and "kB)" in big  # the 5000-byte payload is cut, its size shown
    assert len(big) < 600

    only_echo = tail(home, url, first, "-n", "1000", "--tool", "echo").splitlines()
    assert only_echo and all("echo" in line for line in only_echo)
    assert not any("tools/list" in line for line in only_echo)

    errors = tail(home, url, first, "-n", "1000", "--errors").splitlines()
    assert errors and all("isError" in line or "error" in line for line in errors)
    assert any("nope" in line for line in errors)
    assert not any('"hello"' in line for line in errors)

    listed = tail(home, url, "--all", "-n", "1000", "--method", "tools/list").splitlines()
    assert listed and all("tools/list" in line for line in listed)

    jsonl = tail(home, url, first, "-n", "1000", "--format", "jsonl", "--tool", "fail")
    docs = [json.loads(line) for line in jsonl.splitlines()]
    assert {d["msg_type"] for d in docs} == {"request", "response"}
    assert any(d["is_error"] and d["latency_ms"] is not None for d in docs)


def test_colour_only_on_a_terminal(recorded: tuple[Path, str]) -> None:
    home, url = recorded
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [peers.BLACKBOX, "tail", first_session(url), "-n", "100", "--errors", "--store", url],
        env=tail_env(home),
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(30)
    os.close(master)
    assert b"\x1b[31m" in out or b"\x1b[1m" in out, out[:300]


def test_unknown_session_is_one_line(recorded: tuple[Path, str]) -> None:
    home, url = recorded
    proc = run_blackbox("tail", "zzzz", "--store", url, env=tail_env(home))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
