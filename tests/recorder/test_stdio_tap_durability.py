"""Journal-first durability of `blackbox record`: a SIGKILLed tap loses nothing it forwarded, a
store outage never stalls the host and loses nothing, and a journal that cannot be written stops
forwarding instead of letting traffic through unrecorded."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from blackbox.recorder.store import open_store

from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.polling import eventually
from tests.fixtures.taps import INIT, INITIALIZED, call, wait_sealed


def start_tap(tmp_path: Path, store_url: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=store_url)
    return subprocess.Popen(
        peers.record_command(peers.EXAMPLE_SERVER, "durable"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        **kw,
    )


def handshake(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INIT)
    proc.stdin.flush()
    assert b'"id":1' in proc.stdout.readline()
    proc.stdin.write(INITIALIZED)
    proc.stdin.flush()


def round_trip(proc: subprocess.Popen, rpc_id: int, message: str) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(call(rpc_id, "echo", {"message": message}))
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert f'"id":{rpc_id}'.encode() in line and message.encode() in line
    return line


def test_sigkill_mid_burst_then_ship_recovers_every_forwarded_frame(
    tmp_path: Path, sqlite_url: str
) -> None:
    # The tap's store worker ships dead taps' journals when the tap starts, at idle priority: on
    # a loaded machine that pass came after the kill below, found this tap's journal unlocked and
    # shipped it itself, racing `blackbox ship`. A dead journal whose tap id sorts after every
    # live one's (the pass goes in that order) is gone only once the pass is past this tap's.
    last = _dead_journal(
        tmp_path / "home" / "journal", sqlite_url, "f" * 8 + "-ffff-7fff-bfff-" + "f" * 12
    )
    proc = start_tap(tmp_path, sqlite_url)
    handshake(proc)
    assert proc.stdin is not None and proc.stdout is not None
    eventually(lambda: not last.exists(), timeout=120, message="the tap's pass over dead journals")
    burst = b"".join(call(100 + i, "echo", {"message": f"burst {i}"}) for i in range(400))
    writer = threading.Thread(target=_write_quietly, args=(proc.stdin, burst))
    writer.start()
    received = []
    while len(received) < 60:
        received.append(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    # What the tap had forwarded before it died is still in the pipe: the host gets it.
    received.extend(line for line in proc.stdout.read().splitlines(keepends=True) if line)
    proc.wait(30)
    writer.join(30)
    assert 60 <= len(received) < 400

    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=sqlite_url)
    # `ship` in this process: the question is what it recovers, not how its process behaves.
    shipped = run_blackbox("ship", env=env)
    assert shipped.returncode == 0, shipped.stderr
    assert "1 session(s) closed as recovered" in shipped.stdout
    assert not list((tmp_path / "home" / "journal").iterdir())

    store = open_store(sqlite_url)
    (info,) = store.list_sessions(name="durable")
    assert info.outcome == "recovered" and info.sealed
    events = list(store.read_session(info.session_id))
    s2c = {ev.raw for ev in events if ev.kind == "frame" and ev.direction == "s2c"}
    assert all(line.rstrip(b"\n") in s2c for line in received)
    assert json.loads(events[-2].raw)["reason"] == "recovered"
    assert store.verify() == []


def _write_quietly(stream, data: bytes) -> None:  # type: ignore[no-untyped-def]
    with contextlib.suppress(OSError):
        stream.write(data)
        stream.flush()


def _dead_journal(directory: Path, store_url: str, tap_id: str) -> Path:
    """The journal a dead tap `tap_id` left for `store_url`: one session, never ended."""
    code = f"""
import os
from pathlib import Path
from blackbox.recorder.capture.journal import Journal, StoreMark
directory = Path({str(directory)!r})
directory.mkdir(parents=True, exist_ok=True)
j = Journal(directory, {tap_id!r}, store=StoreMark.for_url({store_url!r}))
j.append("dead-session", "session_started", "-", b'{{"name":"dead"}}')
print(j.path, flush=True)
os._exit(0)
"""
    done = subprocess.run(
        [peers.PYTHON, "-c", code], check=True, capture_output=True, text=True, timeout=30
    )
    return Path(done.stdout.strip())


class Forwarder:
    """A TCP forwarder between the tap and PostgreSQL that the test can cut and restore."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.conns: list[socket.socket] = []
        self.listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        assert self.listener is not None
        # shutdown() wakes the thread blocked in accept(); close() alone would leave it listening
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def test_store_outage_mid_session_loses_nothing(tmp_path: Path, pg_url: str) -> None:
    forwarder = Forwarder(("127.0.0.1", 5432))
    forwarder.start()
    tap_url = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{forwarder.port}")
    assert tap_url != pg_url
    store = open_store(pg_url)
    proc = start_tap(tmp_path, tap_url)
    assert proc.stderr is not None
    notices: list[str] = []
    threading.Thread(
        target=lambda: notices.extend(line.decode() for line in proc.stderr), daemon=True
    ).start()
    handshake(proc)
    lines = [round_trip(proc, 10 + i, f"before {i}") for i in range(5)]

    def frames_stored() -> int:
        sessions = store.list_sessions()
        return sessions[0].frames if sessions else 0

    eventually(lambda: frames_stored() >= 13, timeout=30, message=notices)
    forwarder.stop()
    started = time.monotonic()
    lines += [round_trip(proc, 100 + i, f"during {i}") for i in range(20)]
    assert time.monotonic() - started < 20  # the host kept working
    eventually(lambda: any("retrying" in n for n in notices), timeout=30, message=notices)
    assert frames_stored() == 13  # nothing reached the store while it was cut off
    forwarder.start()  # same port
    eventually(lambda: frames_stored() >= 53, timeout=60, message=(notices, frames_stored()))
    lines += [round_trip(proc, 200 + i, f"after {i}") for i in range(5)]
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(60) == 0
    forwarder.stop()

    (info,) = store.list_sessions()
    assert info.sealed and info.outcome == "ok"
    s2c = [ev.raw for ev in store.read_session(info.session_id) if ev.direction == "s2c"]
    assert [line.rstrip(b"\n") for line in lines] == s2c[1:]
    assert info.frames == 2 + 1 + 2 * 30
    assert len([n for n in notices if "retrying" in n]) == 1
    assert len([n for n in notices if "store back" in n]) == 1
    assert store.verify() == []


def test_unwritable_journal_stops_forwarding_with_a_clear_message(
    tmp_path: Path, pg_url: str
) -> None:
    # RLIMIT_FSIZE stands in for a full disk: journal writes past 256 KiB fail with EFBIG.
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    proc = start_tap(tmp_path, pg_url, preexec_fn=limit)
    handshake(proc)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    answered = []
    for i in range(40):
        try:
            proc.stdin.write(call(10 + i, "echo", {"message": f"{i} " + "z" * 20_000}))
            proc.stdin.flush()
        except BrokenPipeError:
            break
        line = proc.stdout.readline()
        if not line:
            break
        answered.append(line)
    assert proc.wait(60) == 2
    err = proc.stderr.read().decode()
    assert "cannot write the journal" in err and "stopped forwarding" in err
    assert 3 <= len(answered) < 40  # it stopped, and only once the journal failed

    store = open_store(pg_url)
    (info,) = store.list_sessions()
    s2c = {ev.raw for ev in store.read_session(info.session_id) if ev.direction == "s2c"}
    assert all(line.rstrip(b"\n") in s2c for line in answered)  # nothing passed unrecorded
    events = list(store.read_session(info.session_id))
    c2s = [ev for ev in events if ev.direction == "c2s"]
    # The write that failed was the next request (not forwarded) or its answer (not delivered).
    assert len(c2s) in (2 + len(answered), 2 + len(answered) + 1)
    ended = json.loads(next(ev.raw for ev in events if ev.kind == "session_ended"))
    assert ended["reason"] == "journal_failed" and "file size limit" in ended["detail"]
    assert info.sealed and store.verify() == []


def test_a_new_tap_ships_dead_journals_in_the_background(tmp_path: Path, sqlite_url: str) -> None:
    journal_dir = tmp_path / "home" / "journal"
    code = f"""
import os
from pathlib import Path
from blackbox.recorder.capture.journal import Journal, StoreMark
j = Journal.create(Path({str(journal_dir)!r}), store=StoreMark.for_url({sqlite_url!r}))
j.append("dead-session", "session_started", "-", b'{{"name":"dead"}}')
j.append("dead-session", "frame", "c2s", b'{{"jsonrpc":"2.0","id":1,"method":"ping"}}')
os._exit(0)
"""
    subprocess.run([peers.PYTHON, "-c", code], check=True, timeout=30)
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=sqlite_url)
    echo = [peers.PYTHON, "-c", "import sys\nfor line in sys.stdin: print(line, end='')"]
    done = subprocess.run(
        peers.record_command(echo, "alive"), input=b"{}\n", capture_output=True, env=env, timeout=60
    )
    assert done.returncode == 0 and done.stdout == b"{}\n"
    store = open_store(sqlite_url)
    eventually(
        lambda: any(s.outcome == "recovered" for s in store.list_sessions()),
        timeout=30,
        message="a session closed as recovered",
    )
    dead = store.session("dead-session")
    assert dead.outcome == "recovered" and dead.frames == 1
    assert store.session(store.resolve("last")).name in ("alive", "dead")
    assert store.verify() == []


def test_records_not_shipped_by_exit_are_handed_to_a_detached_shipper(
    tmp_path: Path, sqlite_url: str
) -> None:
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=sqlite_url)
    # No time at all to ship at exit: everything must go through the hand-off.
    argv = peers.record_command(peers.EXAMPLE_SERVER, "handoff", None, "--final-ship-seconds=0")
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    handshake(proc)
    lines = [round_trip(proc, 10 + i, f"call {i}") for i in range(3)]
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.close()
    assert proc.wait(60) == 0
    assert "background shipper" in proc.stderr.read().decode()

    store = open_store(sqlite_url)
    wait_sealed(store)  # shipped by the hand-off
    (info,) = store.list_sessions()
    assert info.outcome == "ok"  # the tap's own ending, not a recovery
    s2c = [ev.raw for ev in store.read_session(info.session_id) if ev.direction == "s2c"]
    assert [line.rstrip(b"\n") for line in lines] == s2c[1:]
    eventually(
        lambda: not list((tmp_path / "home" / "journal").iterdir()),
        timeout=30,
        message="journal trimmed",
    )
    assert store.verify() == []
