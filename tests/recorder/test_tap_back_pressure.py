"""A tap that had to hold frames back for a slow server goes quiet again once the server caught up.

The relay watches a side for "writable" only while it holds bytes for it. When its buffer for the
server emptied, the watch stayed (the relay compared the buffer's contents with the empty
buffer's), so `poll()` answered "writable" at once, forever: a tap that had once met back-pressure
spun a core until the session ended, and on a busy host it took that core from the host, the
server and the other taps (bench/capacity.py: the tap's CPU per frame grew 3-10x with 2-4 taps).
The attack is a real slow server behind a real tap; the test reads the tap's own CPU from /proc.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.fixtures import peers

# Sleeps before reading anything, so the pipe to it fills and the tap buffers the rest; then
# answers every line.
SLOW_SERVER = r"""
import sys, time
time.sleep(1.0)
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":1,"result":{}}\n')
    sys.stdout.buffer.flush()
"""
LINES = 2000  # about 300 KB: several times a pipe's 64 KiB
REQUEST = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"pad":"'
    + b"y" * 64
    + b'"}}}\n'
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_idle_tap_after_back_pressure_uses_no_cpu(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        BLACKBOX_HOME=str(tmp_path / "home"),
        BLACKBOX_STORE=f"sqlite:///{tmp_path / 'store.db'}",
    )
    tap = subprocess.Popen(
        peers.record_command([sys.executable, "-c", SLOW_SERVER], "slow", None),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert tap.stdin is not None and tap.stdout is not None
    try:
        payload = REQUEST * LINES
        # Written from a thread: the tap stops reading its host while it holds 16 MiB, not here,
        # but the pipe to the tap itself holds only 64 KiB.
        writer = threading.Thread(target=tap.stdin.write, args=(payload,))
        writer.start()
        answers = 0
        while answers < LINES:
            assert tap.stdout.readline(), "the tap closed its stdout"
            answers += 1
        writer.join()
        tap.stdin.flush()
        time.sleep(0.3)  # let the tap's store worker settle
        before = cpu_seconds(tap.pid)
        time.sleep(1.5)
        idle = cpu_seconds(tap.pid) - before
        # A relay with nothing to do sleeps in poll(); a spinning one burns the whole 1.5 s.
        assert idle < 0.3, f"the idle tap used {idle:.2f} s of CPU in 1.5 s"
    finally:
        tap.stdin.close()
        tap.wait(timeout=30)
