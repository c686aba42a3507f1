"""Each stdio fault becomes a fault event, and the host still gets exactly what the server sent.

The misbehaving servers here are real processes (tiny scripts that do the one wrong thing), driven
through `blackbox record` over real pipes; the example server covers the SDK cases.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store

from tests.fixtures import peers
from tests.fixtures.documents import document
from tests.fixtures.polling import eventually
from tests.fixtures.taps import INIT, INITIALIZED, call


def script(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def tap(tmp_path: Path, server: list[str], store_url: str, *extra: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=store_url)
    return subprocess.Popen(
        peers.record_command(server, "faulty", None, *extra),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        **kw,
    )


def session_events(store_url: str) -> list:
    store = open_store(store_url)
    eventually(
        lambda: any(s.sealed for s in store.list_sessions()[:1]),
        timeout=60,
        message="the tap's session to be sealed",
    )
    (info,) = store.list_sessions()
    assert store.verify(info.session_id) == []
    return list(store.read_session(info.session_id))


def faults(events: list) -> list[dict]:
    return [document(ev) for ev in events if ev.kind == "fault"]


def ended(events: list) -> dict:
    return next(document(ev) for ev in events if ev.kind == "session_ended")


def test_stdout_pollution_from_the_example_server_via_sdk(tmp_path: Path, sqlite_url: str) -> None:
    calls = [("print_stdout", {"text": "DEBUG connecting to db"}), ("echo", {"message": "x"})]
    env = peers.tap_env(tmp_path / "home", sqlite_url)
    direct = peers.run_client("legacy", peers.params(peers.EXAMPLE_SERVER), calls)
    tapped = peers.run_client(
        "legacy", peers.params(peers.record_command(peers.EXAMPLE_SERVER), env), calls
    )
    assert tapped == direct
    events = session_events(sqlite_url)
    (fault,) = faults(events)
    assert fault["fault"] == "stdout_pollution" and fault["stage"] == "transport"
    assert fault["quarantined"] is False
    polluting = next(ev for ev in events if ev.seq == fault["seq"])
    assert polluting.raw == b"DEBUG connecting to db" and polluting.direction == "s2c"


def test_quarantine_noise_diverts_non_json_lines_to_stderr(tmp_path: Path, sqlite_url: str) -> None:
    server = script(
        "import sys\n"
        "sys.stdin.readline()\n"
        'sys.stdout.write(\'Loading model...\\n{"jsonrpc":"2.0","id":1,"result":{}}\\n\')\n'
    )
    proc = tap(tmp_path, server, sqlite_url, "--quarantine-noise")
    out, err = proc.communicate(INIT, timeout=60)
    assert out == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    assert b"Loading model...\n" in err
    events = session_events(sqlite_url)
    s2c = [ev.raw for ev in events if ev.kind == "frame" and ev.direction == "s2c"]
    assert s2c == [b"Loading model...", b'{"jsonrpc":"2.0","id":1,"result":{}}']
    (fault,) = faults(events)
    assert fault["fault"] == "stdout_pollution" and fault["quarantined"] is True


def test_invalid_json_and_invalid_utf8(tmp_path: Path, sqlite_url: str) -> None:
    server = script(
        "import sys, os\n"
        "line = sys.stdin.buffer.readline()\n"
        "os.write(1, b'\\xff\\xfe not utf-8\\n' + line)\n"
    )
    proc = tap(tmp_path, server, sqlite_url)
    out, _ = proc.communicate(b"this is not json\n", timeout=60)
    assert out == b"\xff\xfe not utf-8\nthis is not json\n"
    found = {f["fault"]: f for f in faults(session_events(sqlite_url))}
    assert found["invalid_json"]["direction"] == "c2s"
    assert found["invalid_utf8"]["direction"] == "s2c"
    assert found["stdout_pollution"]["excerpt"] == "this is not json"


def test_eof_mid_frame_is_forwarded_and_recorded(tmp_path: Path, sqlite_url: str) -> None:
    server = script('import os\nos.write(1, b\'{"jsonrpc":"2.0","id":1,"res\')\n')
    proc = tap(tmp_path, server, sqlite_url)
    out, _ = proc.communicate(b"", timeout=60)
    assert out == b'{"jsonrpc":"2.0","id":1,"res'
    events = session_events(sqlite_url)
    (fault,) = [f for f in faults(events) if f["fault"] == "eof_mid_frame"]
    partial = next(ev for ev in events if ev.seq == fault["seq"])
    assert partial.raw == b'{"jsonrpc":"2.0","id":1,"res' and fault["direction"] == "s2c"


def test_broken_pipe_when_the_server_closes_its_stdin(tmp_path: Path, sqlite_url: str) -> None:
    server = script(
        "import os, time\nos.close(0)\nos.write(1, b'{\"ready\":true}\\n')\ntime.sleep(1.5)\n"
    )
    proc = tap(tmp_path, server, sqlite_url)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == b'{"ready":true}\n'
    proc.stdin.write(call(1, "echo", {"message": "x" * 100_000}))
    proc.stdin.close()
    assert proc.wait(60) == 0
    found = [f for f in faults(session_events(sqlite_url)) if f["fault"] == "broken_pipe"]
    assert found and found[0]["direction"] == "c2s"


def test_server_crash_names_the_outstanding_requests(tmp_path: Path, sqlite_url: str) -> None:
    proc = tap(tmp_path, peers.EXAMPLE_SERVER, sqlite_url)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INIT)
    proc.stdin.flush()
    assert b'"id":1' in proc.stdout.readline()
    proc.stdin.write(INITIALIZED + call(2, "crash", {"code": 3}) + call(3, "sleep", {"seconds": 5}))
    proc.stdin.flush()
    assert proc.stdout.read() == b""  # the server died without answering
    assert proc.wait(60) == 3  # the tap exits with the server's status
    events = session_events(sqlite_url)
    (fault,) = [f for f in faults(events) if f["fault"] == "exit_with_outstanding"]
    assert {(p["method"], p["tool"], p["id"]) for p in fault["outstanding"]} == {
        ("tools/call", "crash", "2"),
        ("tools/call", "sleep", "3"),
    }
    assert "tools/call crash (id 2)" in fault["detail"] and fault["exit_code"] == 3
    assert ended(events) == {
        "reason": "server_exited",
        "outcome": "crashed",
        "exit_code": 3,
        "signal": None,
    }
    assert any(ev.kind == "stderr" and b"crashing with exit code 3" in ev.raw for ev in events)


def test_oversize_frame_forwarded_intact_stored_as_prefix(tmp_path: Path, sqlite_url: str) -> None:
    big = b'{"jsonrpc":"2.0","id":1,"result":{"blob":"' + b"a" * 300_000 + b'"}}'
    head, tail = b'{"jsonrpc":"2.0","id":1,"result":{"blob":"', b'"}}\n'
    server = script(
        f"import os, sys\nsys.stdin.readline()\nos.write(1, {head!r} + b'a' * 300_000 + {tail!r})\n"
    )
    proc = tap(tmp_path, server, sqlite_url, "--max-frame", "100000")
    out, _ = proc.communicate(INIT, timeout=60)
    assert out == big + b"\n"
    events = session_events(sqlite_url)
    (fault,) = faults(events)
    assert fault["fault"] == "oversize_frame"
    assert fault["size"] == len(big) and fault["sha256"] == hashlib.sha256(big).hexdigest()
    frame = next(ev for ev in events if ev.seq == fault["seq"])
    assert frame.raw_size == len(big) and frame.raw == big[: len(frame.raw)]
    assert 0 < len(frame.raw) < len(big)


SIZES = [1024, 64 * 1024, 4 * 1024 * 1024]


def _frame_of(size: int) -> bytes:
    """A request of about `size` bytes, non-ASCII (two UTF-8 bytes a character), cut whole."""
    payload = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"d": "é" * (size // 2)}}
    )
    return payload.encode()[:size].rsplit(b"\xc3", 1)[0]


@pytest.fixture(scope="module")
def echoed_frames(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, list]:
    """Every size through ONE tap in front of an echo server: a tap (and its store worker) per
    size would prove nothing more, since each frame is forwarded and stored on its own. Returns
    what was sent, what the host got back and the stored frames."""
    tmp_path = tmp_path_factory.mktemp("frames")
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    echo = script(
        "import sys\nfor line in sys.stdin.buffer:\n"
        "    sys.stdout.buffer.write(line)\n    sys.stdout.buffer.flush()\n"
    )
    sent = b"".join(_frame_of(size) + b"\n" + _frame_of(size) + b"\n" for size in SIZES)
    proc = tap(tmp_path, echo, store_url)
    out, _ = proc.communicate(sent, timeout=120)
    stored = [ev for ev in session_events(store_url) if ev.kind == "frame"]
    return sent, out, stored


@pytest.mark.parametrize("size", SIZES)
def test_frames_up_to_4_mib_stored_intact(
    echoed_frames: tuple[bytes, bytes, list], size: int
) -> None:
    sent, out, stored = echoed_frames
    frame = _frame_of(size)
    assert out == sent  # each frame forwarded intact, twice, in order
    # Nothing cut or dropped: every stored frame is one of those sent, whole.
    assert len(stored) == 4 * len(SIZES)
    assert all(ev.raw in sent.split(b"\n") and ev.raw_size is None for ev in stored)
    # c2s and s2c interleave as the echo answers; each direction holds both frames intact
    mine = [ev for ev in stored if ev.raw == frame]
    assert sorted(ev.direction for ev in mine) == ["c2s", "c2s", "s2c", "s2c"]
    assert len(frame) > size * 0.9


def test_sigterm_is_forwarded_and_the_tap_exits_with_the_server_status(
    tmp_path: Path, sqlite_url: str
) -> None:
    server = script("import os, time\nos.write(1, b'{\"up\":1}\\n')\ntime.sleep(60)\n")
    proc = tap(tmp_path, server, sqlite_url)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b'{"up":1}\n'
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    doc = ended(session_events(sqlite_url))
    assert doc["reason"] == "interrupted" and doc["signal"] == "SIGTERM"
    assert doc["tap_signals"] == ["SIGTERM"]


def test_a_command_that_cannot_start_is_one_clear_error(tmp_path: Path, sqlite_url: str) -> None:
    proc = tap(tmp_path, ["/nonexistent/mcp-server"], sqlite_url)
    out, err = proc.communicate(b"", timeout=60)
    assert proc.returncode == 2 and out == b""
    assert err.decode().strip().splitlines()[-1].startswith("blackbox: cannot start")
    assert b"Traceback" not in err
    assert faults(session_events(sqlite_url))[0]["fault"] == "spawn_failed"


def test_a_server_that_ignores_stdin_close_is_terminated_like_an_mcp_client_would(
    tmp_path: Path, sqlite_url: str
) -> None:
    stubborn = script(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    )
    proc = tap(tmp_path, stubborn, sqlite_url)
    start = time.monotonic()
    proc.communicate(b"", timeout=60)  # the host closes stdin at once
    assert proc.returncode == 128 + signal.SIGKILL  # grace, SIGTERM (ignored), then SIGKILL
    assert 3.5 < time.monotonic() - start < 30
    doc = ended(session_events(sqlite_url))
    assert doc["reason"] == "client_closed" and doc["signal"] == "SIGKILL"
