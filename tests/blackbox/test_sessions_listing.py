"""`sessions` shows what went wrong: sessions recorded through `blackbox record` from real
processes (mcp-server-time from PyPI, and a server that pollutes its stdout), one for each kind of
problem, then listed with counts, outcomes, filters, handles, and a replay hidden by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.log import events
from blackbox.recorder.log.model import Direction, Kind, NewEvent
from blackbox.recorder.query import counts as counts_module
from blackbox.recorder.query import handles as handles_module
from blackbox.recorder.query import handles_for, listing
from blackbox.recorder.query.counts import SessionCounts
from blackbox.recorder.store import open_store

from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.polling import eventually
from tests.fixtures.taps import INIT_MESSAGE, INITIALIZED_MESSAGE


def _three(counts: SessionCounts) -> dict[str, int]:
    """The counts the table shows."""
    return {name: getattr(counts, name) for name in ("calls", "errors", "faults")}


def _call(rpc_id: int, timezone: str) -> dict:
    params = {"name": "get_current_time", "arguments": {"timezone": timezone}}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


NOISY = [
    sys.executable,
    "-c",
    "import sys; print('booting...', flush=True); sys.stdin.read()",
]


def _record(tmp_path: Path, store_url: str, name: str, server: list[str], msgs: list) -> None:
    """Send `msgs` through `blackbox record`, wait for the answer to each request (or for the
    server's first line), then close stdin the way a host does."""
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=store_url)
    proc = subprocess.Popen(
        peers.record_command(server, name),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
    proc.stdin.flush()
    waiting = {m["id"] for m in msgs if "id" in m}
    while waiting:
        line = proc.stdout.readline()
        if not line:
            break
        try:
            waiting.discard(json.loads(line).get("id"))
        except ValueError:
            break  # the noisy server: its first line is not JSON
    proc.stdin.close()
    proc.stdout.read()
    assert proc.wait(60) in (0, 1)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp_path = tmp_path_factory.mktemp("sessions")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    time_server = peers.TIME_SERVER
    hello = [INIT_MESSAGE, INITIALIZED_MESSAGE]
    _record(tmp_path, url, "clean", time_server, [*hello, _call(2, "UTC")])
    _record(tmp_path, url, "tool-error", time_server, [*hello, _call(2, "Not/AZone")])
    unknown = {"jsonrpc": "2.0", "id": 2, "method": "nope/method"}
    _record(tmp_path, url, "rpc-error", time_server, [*hello, unknown])
    _record(tmp_path, url, "noisy", NOISY, [INIT_MESSAGE])
    store = open_store(url)
    try:
        eventually(
            lambda: sum(s.sealed for s in store.list_sessions()) == 4,
            timeout=60,
            message="four sealed sessions",
        )
    finally:
        store.close()
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=url)
    clean = _cli(url, "--name", "clean", "--format", "json")[0]["id"]
    against = " ".join(time_server)
    replay = run_blackbox(
        "replay", clean, "--allow-writes", "--store", url, "--against", against, env=env
    )
    assert replay.returncode in (0, 1), replay.stderr
    return url


def _cli(url: str, *args: str) -> list[dict]:
    proc = run_blackbox("sessions", "--store", url, *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--format" in args else proc.stdout


def test_counts_and_outcomes_reflect_each_problem(recorded: str) -> None:
    rows = {r["name"]: r for r in _cli(recorded, "--format", "json")}
    assert set(rows) == {"clean", "tool-error", "rpc-error", "noisy"}  # the replay is hidden
    assert (rows["clean"]["calls"], rows["clean"]["errors"], rows["clean"]["faults"]) == (2, 0, 0)
    assert rows["clean"]["outcome"] == "ok"
    assert (rows["tool-error"]["errors"], rows["tool-error"]["outcome"]) == (1, "errors")
    assert (rows["rpc-error"]["errors"], rows["rpc-error"]["outcome"]) == (1, "errors")
    assert rows["noisy"]["faults"] >= 1 and rows["noisy"]["outcome"] == "faults"


def test_filters(recorded: str) -> None:
    names = lambda *a: sorted(r["name"] for r in _cli(recorded, *a, "--format", "json"))  # noqa: E731
    assert names("--errors") == ["rpc-error", "tool-error"]
    assert names("--faults") == ["noisy"]
    assert names("--outcome", "ok") == ["clean"]
    assert names("--name", "noisy") == ["noisy"]
    assert names("--server", "mcp_server_time") == ["clean", "rpc-error", "tool-error"]
    assert names("--since", "1h") == ["clean", "noisy", "rpc-error", "tool-error"]
    assert names("--until", "1h") == []
    assert names("--until", "2999-01-01", "--limit", "2") == ["noisy", "rpc-error"]
    assert names("--replays", "--name", "clean") == ["clean"]
    every = _cli(recorded, "--replays", "--format", "json")
    replays = [r for r in every if r["replay_of"]]
    assert len(replays) == 1 and replays[0]["replay_of"] == names_id(recorded, "clean")


def names_id(url: str, name: str) -> str:
    return _cli(url, "--name", name, "--format", "json")[0]["id"]


def test_handles_are_short_unique_and_accepted_as_session(recorded: str) -> None:
    rows = _cli(recorded, "--replays", "--format", "json")
    handles = [r["handle"] for r in rows]
    assert len(set(handles)) == len(handles)
    assert all(6 <= len(h) <= 12 for h in handles)
    table = _cli(recorded, "--replays")
    assert all(h in table for h in handles)
    store = open_store(recorded, create=False)
    try:
        for row in rows:
            assert store.resolve(row["handle"]) == row["id"]
        # `last` is the last recorded session, not the replay made after it.
        assert store.resolve("last") == names_id(recorded, "noisy")
    finally:
        store.close()
    shown = run_blackbox("show", rows[0]["handle"], "--store", recorded, "--format", "json")
    assert shown.returncode == 0 and json.loads(shown.stdout), shown.stderr


def test_handles_grow_until_unique() -> None:
    ids = [
        "019a0000-0000-7000-8000-0000001234ab",
        "019a0000-0000-7000-8000-0000991234ab",
        "019a0000-0000-7000-8000-000000abcdef",
    ]
    handles = handles_for(ids)
    assert handles[ids[2]] == "abcdef"
    assert handles[ids[0]] == "01234ab"[-7:] and handles[ids[1]] == "91234ab"
    # A tail that is also the start of another id is not a handle.
    tricky = ["019a0000-0000-7000-8000-00000019a000", "19a00000-0000-7000-8000-000000000001"]
    assert handles_for(tricky) == {tricky[0]: "019a000", tricky[1]: "000001"}


def _session(
    sid: str, start_ns: int, calls: int, rpc_errors: int, tool_errors: int, faults: int
) -> list[NewEvent]:
    """A session with known counts: `calls` tool calls, the first `rpc_errors` answered with a
    JSON-RPC error and the next `tool_errors` with `isError`, a notification, `faults` faults."""
    rows = [(Kind.SESSION_STARTED, Direction.NONE, events.encode(events.SessionStarted(
        name="known", transport="stdio", command=["srv"], cwd="/", env_names=[],
        tap_version="0.1.0", pid=1,
    )))]  # fmt: skip
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    rows.append((Kind.FRAME, Direction.CLIENT_TO_SERVER, json.dumps(note).encode()))
    for i in range(calls):
        call = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo"}}
        if i < rpc_errors:
            reply = {"jsonrpc": "2.0", "id": i, "error": {"code": -32602, "message": "no"}}
        else:
            result = {"content": [], "isError": i < rpc_errors + tool_errors}
            reply = {"jsonrpc": "2.0", "id": i, "result": result}
        rows.append((Kind.FRAME, Direction.CLIENT_TO_SERVER, json.dumps(call).encode()))
        rows.append((Kind.FRAME, Direction.SERVER_TO_CLIENT, json.dumps(reply).encode()))
    for _ in range(faults):
        rows.append((Kind.FAULT, Direction.NONE, events.encode(events.Fault(fault="timeout"))))
    ended = events.SessionEnded(reason="client_closed", outcome="ok", exit_code=0)
    rows.append((Kind.SESSION_ENDED, Direction.NONE, events.encode(ended)))
    return [
        NewEvent(sid, seq, start_ns + seq, seq, kind, direction, raw)
        for seq, (kind, direction, raw) in enumerate(rows, start=1)
    ]


def test_counts_and_handles_of_listed_sessions_on_each_backend(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts read per listed session, handles among every id: older sessions, not listed, with
    other counts and with ids that end (or start) like a listed one's tail, change neither."""
    sessions = [  # oldest first: (id, calls, JSON-RPC errors, tool errors, faults)
        ("019a0000-0000-7000-8000-0000991234ab", 40, 7, 9, 5),  # ends like the newest
        ("19a00000-0000-7000-8000-000000000001", 30, 0, 30, 0),  # starts like the 2nd newest
        ("019a0000-0000-7000-8000-000000abcdef", 0, 0, 0, 0),
        ("019a0000-0000-7000-8000-0000000f0f0f", 3, 0, 0, 0),
        ("019a0000-0000-7000-8000-00000019a000", 5, 1, 2, 0),  # "019a000" starts the others
        ("019a0000-0000-7000-8000-0000001234ab", 4, 0, 1, 3),
    ]
    store = open_store(store_url)
    try:
        for n, (sid, *counts) in enumerate(sessions):
            store.append(_session(sid, (n + 1) * 10**12, *counts))
        listed = listing.list_summaries(store, listing.SessionFilter(limit=4))
        got = {s.info.session_id: (_three(s.counts), s.outcome, s.handle) for s in listed}
        with_faults = listing.list_summaries(store, listing.SessionFilter(faults=True, limit=1))
        # Every session listed, a few ids per statement: the same counts, handles among all.
        monkeypatch.setattr(listing, "_IDS_PER_QUERY", 2)
        monkeypatch.setattr(counts_module, "_IDS_PER_QUERY", 2)
        monkeypatch.setattr(handles_module, "_IDS_PER_QUERY", 2)
        every = listing.list_summaries(store, listing.SessionFilter(limit=None))
    finally:
        store.close()
    k = ("calls", "errors", "faults")
    assert got == {
        sessions[5][0]: (dict(zip(k, (4, 1, 3), strict=True)), "faults", "01234ab"),
        sessions[4][0]: (dict(zip(k, (5, 3, 0), strict=True)), "errors", "0019a000"),
        sessions[3][0]: (dict(zip(k, (3, 0, 0), strict=True)), "ok", "0f0f0f"),
        sessions[2][0]: (dict(zip(k, (0, 0, 0), strict=True)), "ok", "abcdef"),
    }
    assert [s.info.session_id for s in with_faults] == [sessions[5][0]]
    # The handles of the listed sessions are those counted among every id of the store.
    everyone = handles_for([sid for sid, *_ in sessions])
    assert all(everyone[sid] == handle for sid, (_c, _o, handle) in got.items())
    assert {
        s.info.session_id: (_three(s.counts), s.outcome, s.handle)
        for s in every
        if s.info.session_id in got
    } == got
    assert [s.handle for s in every] == [everyone[sid] for sid, *_ in reversed(sessions)]
    assert (_three(every[-1].counts), every[-1].outcome) == (
        dict(zip(k, (40, 16, 5), strict=True)),
        "faults",
    )
