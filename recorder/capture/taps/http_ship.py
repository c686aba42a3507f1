"""The HTTP proxy's shipper, run in a process of its own.

Why it exists: the shipper's work (classify, hash chain, SQL insert of every record) is CPU-bound
Python. In the proxy's process it shares the GIL with the event loop, and under traffic each of
its bursts is latency and CPU added to the calls in flight. In a child process it runs on the
other core and the proxy only journals.

The child tails the proxy's journal files (`JournalTail` stands in for the writer's `Journal`: the
same segment files, read-only, listed from the directory) with the ordinary `Shipper`. When the
proxy stops it writes `closed` and closes the child's stdin; the child then ships what is left and
exits 0 when everything is committed (and deletes the journal), 3 when records are left for
`blackbox ship`. If the proxy dies instead (stdin ends without `closed`), the child ships what it
can but keeps the journal, so its unfinished sessions get closed as recovered later.

    python -m blackbox.recorder.capture.taps.http_ship \
        DIR TAP_ID STORE_URL FINAL_SECONDS POLL_SECONDS [leftovers]
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

from blackbox.recorder.capture.journal import parse_segment_name
from blackbox.recorder.capture.leftovers import ship_leftovers_quietly
from blackbox.recorder.capture.shipper import Shipper
from blackbox.recorder.gate import OwnSession, ToolWatch
from blackbox.recorder.store import EventStore, open_store


class JournalTail:
    """The reading side of another process's journal, with the interface `Shipper` uses."""

    def __init__(self, directory: Path, tap_id: str) -> None:
        self.directory = directory
        self.tap_id = tap_id
        self.appended = 0  # unknown here; only used in a progress message
        self._closed = False

    def segments(self) -> list[Path]:
        found = []
        for path in self.directory.glob(f"{self.tap_id}.*"):
            parsed = parse_segment_name(path)
            if parsed is not None and parsed[0] == self.tap_id:
                found.append((parsed[1], path))
        return [path for _n, path in sorted(found)]

    def mark(self) -> tuple[int, int]:
        segments = self.segments()
        if not segments:
            return (-1, 0)
        last = segments[-1]
        parsed = parse_segment_name(last)
        assert parsed is not None
        try:
            return (parsed[1], last.stat().st_size)
        except FileNotFoundError:
            return (parsed[1], 0)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def release(self, path: Path) -> None:
        # The writer keeps its descriptor (and lock) until it exits; the name goes now.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def discard(self) -> None:
        for path in self.segments():
            self.release(path)


def main(argv: list[str]) -> int:
    directory, tap_id, store_url = Path(argv[0]), argv[1], argv[2]
    final_seconds, poll_seconds = float(argv[3]), float(argv[4])
    # Not niced and not SCHED_IDLE, on purpose: at idle priority this process is preempted at
    # every wake-up of the proxy's and its peers' processes and spends far more CPU per record,
    # which on a small machine takes more from the proxy than the lower priority gives back.
    # Ctrl-C reaches the whole process group: the proxy decides when shipping ends (it closes
    # our stdin), so a signal must not cut the final shipping short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def notice(message: str) -> None:
        sys.stderr.write(f"blackbox proxy: {message}\n")
        sys.stderr.flush()

    tail = JournalTail(directory, tap_id)

    def factory() -> EventStore:
        return open_store(store_url)

    # Tool drift is watched here, off the proxy's path; it records in a session of its own.
    own = OwnSession(factory)
    watch = ToolWatch(own.emit, factory, own_session=own.session_id)
    shipper = Shipper(
        tail,
        factory,
        notice,
        observer=watch,
        poll_seconds=poll_seconds,
    )
    shipper.start()
    if len(argv) > 5 and argv[5] == "leftovers":
        threading.Thread(
            target=ship_leftovers_quietly, args=(directory, factory), daemon=True
        ).start()
    stopped = threading.Event()

    closed_cleanly = False

    def wait_for_eof() -> None:
        nonlocal closed_cleanly
        with contextlib.suppress(OSError):
            while line := sys.stdin.buffer.readline():
                closed_cleanly = closed_cleanly or line.strip() == b"closed"
        stopped.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    stopped.wait()
    if closed_cleanly:
        # The proxy closed its journal (sessions ended): once all is stored, it can go. Without
        # that word the proxy died; what we ship stays in the journal too, so that the next tap
        # or `blackbox ship` closes its sessions as recovered.
        tail.close()
    done = shipper.stop(final_seconds)
    watch.close()
    own.close()
    return 0 if done else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
