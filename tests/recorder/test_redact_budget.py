"""`blackbox record --redact` never holds the host up on redaction (issue 35, point 1): a frame
whose redaction runs past the per-frame budget is forwarded unchanged and stored withheld (its
keyed fingerprint and length), with a `redaction_over_budget` fault naming the rule that was
running; the secret in it reaches neither the journal nor the store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store

from tests.fixtures import peers
from tests.fixtures.taps import wait_sealed

pytestmark = pytest.mark.timeout(60)

SECRET = "sk-proj-Budget7Secret9Value2Leak4Here8Now"
# A tool result of near-misses for the `NAME = value` rules (a name every few bytes, no value
# after it), with a real secret in the middle: tens of milliseconds of redaction at least.
HOSTILE_TEXT = "token =" * 6000 + f' "api_key": "{SECRET}" ' + "token =" * 6000
HOSTILE = json.dumps(
    {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": HOSTILE_TEXT}]}}
).encode()
PLAIN = b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"ok"}]}}'

# Answers each request line with the next line of the file it is given (not the secret itself on
# its command line, which the session's record keeps).
SERVER = """
import sys
frames = open(sys.argv[1], "rb").read().splitlines()
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(frames.pop(0) + b"\\n")
    sys.stdout.buffer.flush()
"""

RULES = 'builtins = true\nkey = "test-key"\n'


def test_a_frame_past_the_redaction_budget_is_forwarded_and_stored_withheld(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "redact.toml"
    rules.write_text(RULES)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    (tmp_path / "frames").write_bytes(HOSTILE + b"\n" + PLAIN + b"\n")
    command = peers.record_command(
        [sys.executable, "-c", SERVER, str(tmp_path / "frames")],
        "budget",
        url,
        "--redact",
        str(rules),
        "--redact-budget",
        "1ms",
    )
    env = {"PATH": "/usr/bin:/bin", **peers.tap_env(tmp_path / "home", url)}
    host = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert host.stdin is not None and host.stdout is not None
    host.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}\n')
    host.stdin.flush()
    assert host.stdout.readline() == HOSTILE + b"\n"  # forwarded byte for byte
    host.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}\n')
    host.stdin.flush()
    assert host.stdout.readline() == PLAIN + b"\n"  # and the relay goes on
    host.stdin.close()
    assert host.wait(timeout=30) == 0

    store = open_store(url)
    try:
        (info,) = wait_sealed(store)
        records = list(store.read_session(info.session_id))
    finally:
        store.close()
    frames = [ev for ev in records if ev.kind == "frame" and ev.direction == "s2c"]
    withheld, plain = frames
    assert withheld.raw.startswith(b"[redacted:") and withheld.raw_size == len(HOSTILE)
    assert plain.raw == PLAIN  # a frame within the budget is stored as it was
    faults = [json.loads(ev.raw) for ev in records if ev.kind == "fault"]
    (fault,) = [f for f in faults if f["fault"] == "redaction_over_budget"]
    assert fault["seq"] == withheld.seq and fault["size"] == len(HOSTILE)
    assert fault["rule"] and fault["rule"] in fault["detail"]
    assert fault["stored"] == withheld.raw.decode()

    # No secret on disk: not in the store's files, not in what is left of the journal.
    on_disk = [p for p in (*tmp_path.glob("store.db*"), *(tmp_path / "home").rglob("*"))]
    for path in on_disk:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
