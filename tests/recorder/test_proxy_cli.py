"""`blackbox proxy` as a user runs it: a process that records into the store (SQLite and
PostgreSQL), stops cleanly on Ctrl-C, survives a store outage without losing a record, and says
what is wrong in one line."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path

import httpx2
import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox import proxy_service
from blackbox.cli.main import main
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import BLACKBOX
from tests.fixtures.fault_server import FaultServer
from tests.fixtures.polling import eventually, free_port, wait_listening

pytestmark = pytest.mark.timeout(90)

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def _call(i: int) -> bytes:
    meta = {"io.modelcontextprotocol/clientInfo": {"name": "cli-test", "version": "1"}}
    msg = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {"name": "echo", "_meta": meta},
    }
    return json.dumps(msg).encode()


@pytest.fixture(scope="module")
def faulty() -> FaultServer:
    with FaultServer() as server:
        yield server


def _start(args: list[str], env: dict[str, str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [BLACKBOX, "proxy", *args, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_listening(port, proc, timeout=20.0)
    return proc


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err


def test_proxy_records_into_the_store_and_stops_on_ctrl_c(
    faulty: FaultServer, store_url: str, blackbox_env: dict[str, str]
) -> None:
    port = free_port()
    proc = _start(
        ["--upstream", f"{faulty.url}/json", "--store", store_url, "--name", "api"],
        blackbox_env,
        port,
    )
    try:
        for i in range(3):
            reply = httpx2.post(f"http://127.0.0.1:{port}/json", content=_call(i), headers=HEADERS)
            assert reply.json()["id"] == i
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert f"at http://127.0.0.1:{port}/json" in err
    assert "stopped: 3 exchanges, 6 messages, 1 sessions, 0 faults" in err
    # A loopback upstream: nothing said about --rewrite-host over the whole run.
    assert "--rewrite-host" not in err
    store = open_store(store_url)
    try:
        sessions = store.list_sessions()
        assert len(sessions) == 1, err
        info = sessions[0]
        assert (info.name, info.transport, info.frames, info.sealed) == ("api", "http", 6, True)
        assert info.outcome == "interrupted"
        events = list(store.read_session(info.session_id))
        assert [e.tool for e in events if e.method == "tools/call"] == ["echo"] * 3
        assert store.verify() == []
    finally:
        store.close()
    journal = Path(blackbox_env["BLACKBOX_HOME"]) / "journal"
    assert not list(journal.glob("*.journal")), "a shipped journal is deleted"


def test_store_outage_loses_nothing(
    faulty: FaultServer, sqlite_url: str, blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    """The store is unusable the whole time: traffic flows, the records wait in the journal, and
    `blackbox ship` delivers them to that store once it can be used (never to another one)."""
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the store's directory should be")
    down = f"sqlite:///{blocker / 'store.db'}"
    port = free_port()
    proc = _start(["--upstream", f"{faulty.url}/json", "--store", down], blackbox_env, port)
    try:
        for i in range(5):
            reply = httpx2.post(f"http://127.0.0.1:{port}/json", content=_call(i), headers=HEADERS)
            assert reply.status_code == 200
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert "kept in the journal" in err
    journal = Path(blackbox_env["BLACKBOX_HOME"]) / "journal"
    assert list(journal.glob("*.journal"))

    def ship(url: str) -> str:
        # What `ship` delivers is the question, not its process: it runs in this one.
        done = run_blackbox("ship", "--store", url, env=blackbox_env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "is for another store" in ship(sqlite_url)
    blocker.unlink()
    assert "from 1 journal(s)" in ship(down)
    store = open_store(down)
    try:
        (info,) = store.list_sessions()
        assert info.frames == 10 and info.sealed and info.outcome == "interrupted"
        assert store.verify() == []
    finally:
        store.close()
    assert open_store(sqlite_url).list_sessions() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upstream", "ftp://x/y"], "bad upstream URL"),
        (["--upstream", "http://127.0.0.1:9/mcp", "--listen", "nowhere"], "bad --listen"),
        (["--upstream", "http://127.0.0.1:9/mcp", "--store", "mysql://x/y"], "unsupported store"),
    ],
)
def test_user_errors_are_one_line(
    args: list[str], message: str, blackbox_env: dict[str, str]
) -> None:
    result = CliRunner().invoke(main, ["proxy", *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert len(result.stderr.strip().splitlines()) == 1


def test_address_in_use_is_one_line(blackbox_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--listen", f"127.0.0.1:{port}"]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"blackbox: cannot listen on 127.0.0.1:{port}: the address is already in use"
    )


def test_help_documents_the_session_rule() -> None:
    result = CliRunner().invoke(main, ["proxy", "--help"])
    assert result.exit_code == 0
    for words in ("Mcp-Session-Id", "traceparent", "clientInfo", "--idle-gap", "Example"):
        assert words in result.output
    bad = CliRunner().invoke(main, ["proxy", "--upstream", "http://x/mcp", "--idle-gap", "soon"])
    assert bad.exit_code == 2 and "not a duration" in bad.stderr


def test_killed_proxy_loses_nothing_it_forwarded(
    faulty: FaultServer, sqlite_url: str, blackbox_env: dict[str, str]
) -> None:
    """SIGKILL: the proxy has no chance to end its session. Its shipper process still stores what
    was forwarded, and the session is closed as recovered from the journal it kept."""
    port = free_port()
    proc = _start(["--upstream", f"{faulty.url}/json", "--store", sqlite_url], blackbox_env, port)
    try:
        for i in range(4):
            reply = httpx2.post(f"http://127.0.0.1:{port}/json", content=_call(i), headers=HEADERS)
            assert reply.status_code == 200
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    store = open_store(sqlite_url)
    try:
        # the orphaned shipper finishes on its own
        eventually(
            lambda: any(s.frames == 8 for s in store.list_sessions()[:1]),
            timeout=20,
            interval=0.2,
            message="the orphaned shipper to store all 8 frames",
        )
        (info,) = store.list_sessions()
        assert info.frames == 8
        # Whoever gets there first (the shipper process's own leftovers pass, once the proxy's
        # lock on its journal is gone, or `blackbox ship`, run in this process: what it stores
        # is the question) closes the session as recovered.
        shipped = run_blackbox("ship", "--store", sqlite_url, env=blackbox_env)
        assert shipped.returncode == 0, shipped.stderr
        # the other one may be mid-way (it holds the journal's lock)
        eventually(
            lambda: store.session(info.session_id).sealed,
            timeout=20,
            interval=0.2,
            message="the recovered session to be sealed",
        )
        info = store.session(info.session_id)
        assert info.frames == 8 and info.sealed and info.outcome == "recovered"
        assert store.verify() == []
        journal = Path(blackbox_env["BLACKBOX_HOME"]) / "journal"
        assert not list(journal.glob("*.journal"))
    finally:
        store.close()


@pytest.mark.parametrize(
    ("upstream_host", "noticed"),
    [("127.0.0.1", False), ("localhost", False), ("127.attacker.example", True)],
)
def test_only_a_loopback_upstream_goes_without_the_host_notice(
    upstream_host: str, noticed: bool, sqlite_url: str, blackbox_env: dict[str, str]
) -> None:
    """The client's Host is forwarded as sent; for an upstream that is not loopback the proxy says
    --rewrite-host may be needed. A name that merely starts like loopback (`127.attacker.example`
    resolves wherever its owner likes) is not loopback (the one rule,
    `blackbox.recorder.serving.is_loopback`).

    The question is what the command says about its upstream, so it runs in this process with
    its listen address taken: it says what it has to say on starting, then stops with the one
    bind error instead of serving (a served proxy, Ctrl-C and all, is the first test's, whose
    loopback upstream gets no notice over the whole run; foreign Hosts refused with 403 are
    test_proxy_guard's)."""
    upstream = f"http://{upstream_host}:9/mcp"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--upstream", upstream, "--store", sqlite_url, "--listen", f"127.0.0.1:{port}"]
        result = run_blackbox("proxy", *args, env=blackbox_env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (
        f"blackbox: cannot listen on 127.0.0.1:{port}: the address is already in use"
    )
    assert ("--rewrite-host" in result.stderr) is noticed, result.stderr
    assert len(lines) == (2 if noticed else 1), result.stderr  # nothing else said


@pytest.mark.parametrize(
    ("upstream", "rewrite"),
    [
        ("http://127.0.0.1:9/mcp", False),
        ("http://127.0.0.2:9/mcp", False),
        ("http://localhost:9/mcp", False),
        ("http://[::1]:9/mcp", False),
        ("http://127.0.0.1.nip.io:9/mcp", True),
        ("http://127.attacker.example/mcp", True),
        ("https://mcp.example.com/mcp", True),
    ],
)
def test_attach_rewrites_the_host_for_exactly_the_upstreams_that_are_not_loopback(
    upstream: str, rewrite: bool
) -> None:
    """The proxy `blackbox attach` starts gets --rewrite-host by the same loopback rule."""
    argv = proxy_service.proxy_command("blackbox", upstream, 7400, "key", None)
    assert ("--rewrite-host" in argv) is rewrite
