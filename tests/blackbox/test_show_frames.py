"""`show` pairs answers with requests and prints a whole frame: a 4 MiB echo through
server-everything (npm), recorded by `blackbox record` over real pipes, comes back from
`show --frame SEQ --raw` byte for byte, and whole in `--frame`, `--full` and `--format json`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.taps import INIT, INITIALIZED, wait_sealed


def _show(url: str, *args: str) -> bytes:
    """`blackbox show ARGS` run in this process: what it prints is the question, and a child per
    call costs half a second of CPU. The bytes it wrote to stdout's binary stream, undecoded
    (`run_blackbox` answers in text, which could hide a byte that is not what was recorded)."""
    result = CliRunner().invoke(main, ["show", *args, "--store", url], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.stderr
    return result.stdout_bytes


@pytest.mark.timeout(180)
def test_a_4_mib_frame_is_printed_byte_exact(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    message = ("é—" + "x" * 1021) * 4096  # 4 MiB and more in UTF-8, not ASCII-only
    # Odd spacing and an unescaped non-ASCII text: only the raw bytes can reproduce this.
    call = (
        '{"jsonrpc": "2.0",  "id":2, "method":"tools/call", "params":{"name":"echo",'
        f'"arguments":{{"message":"{message}"}}}}}}'
    ).encode()
    assert len(call) > 4 * 1024 * 1024
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=url)
    tap = subprocess.Popen(
        peers.record_command(peers.EVERYTHING_SERVER, "big"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert tap.stdin is not None and tap.stdout is not None
    tap.stdin.write(INIT + INITIALIZED + call + b"\n")
    tap.stdin.flush()
    answer = b""
    while True:
        line = tap.stdout.readline()
        assert line, "server-everything answered the echo"
        if line.startswith(b"{") and json.loads(line).get("id") == 2:
            answer = line.rstrip(b"\n")
            break
    tap.stdin.close()
    tap.stdout.read()
    tap.wait(60)

    store = open_store(url, create=False)
    try:
        session = wait_sealed(store)[0]
        records = list(store.read_session(session.session_id))
    finally:
        store.close()
    request = next(e for e in records if e.method == "tools/call" and e.direction == "c2s")
    reply = next(e for e in records if e.direction == "s2c" and e.rpc_id == "2")

    assert _show(url, "last", "--frame", str(request.seq), "--raw") == call
    assert _show(url, "last", "--frame", str(reply.seq), "--raw") == answer
    whole = _show(url, "last", "--frame", str(request.seq))
    raw_at = whole.index(b"--- raw\n") + len(b"--- raw\n")
    assert whole[raw_at : raw_at + len(call)] == call
    pretty = whole[whole.index(b"--- json\n") + len(b"--- json\n") :]
    assert json.loads(pretty)["params"]["arguments"]["message"] == message

    rows = json.loads(_show(url, "last", "--format", "json"))
    by_seq = {r["seq"]: r for r in rows}
    assert by_seq[request.seq]["payload"].encode("utf-8") == call  # never cut
    assert by_seq[reply.seq]["re"] == request.seq and by_seq[reply.seq]["tool"] == "echo"
    assert by_seq[reply.seq]["latency_ms"] > 0
    lines = _show(url, "last", "--format", "jsonl").splitlines()
    assert json.loads(lines[request.seq - 1])["payload"].encode("utf-8") == call
    full = _show(url, "last", "--full")
    assert call in full and answer in full
    table = _show(url, "last").decode()
    assert max(len(line) for line in table.splitlines()) < 400  # the table still cuts


def test_a_missing_seq_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    from tests.fixtures.storekit import session_events

    store = open_store(url)
    store.append(session_events())
    store.close()
    proc = run_blackbox("show", "last", "--frame", "999", "--store", url)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no record with seq 999" in proc.stderr
