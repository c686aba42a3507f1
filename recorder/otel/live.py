"""Live export: spans go out as calls complete, from a follower process, never on the host's path.

Why it exists: `record --otel`, `proxy --otel` (and hosts attached with `--otel`) want calls in the
team's traces within a second or two, but a slow or dead collector must never delay a frame. So
the tap only starts a follower process (`start`) and forgets it: the follower reads the store
after the shipper has committed records (the shipper is the one writer, so the follower sees
exactly what the store holds), builds spans for the sessions this tap recorded (those whose
`session_started.pid` is the tap's), sends them and advances the watermark. Nothing it does can
reach the relay: a separate process, its own store connection, its own exporter timeouts.

The follower must not compete with the relay, least of all in a session's first seconds, when its
own start-up (the SDK's imports, about a second of CPU, and the store's opening) would overlap
the tap's: it stays in the tap's session (a session of its own is an autogroup of its own on
Linux, where its nice value counts for nothing against the tap's group), runs at nice 19 and
SCHED_IDLE, and waits `START_SECONDS` before importing anything heavy.

When the collector fails, the follower stops sending that session (sending a later span would
move the watermark past the lost one); the next `blackbox otel export` sends what is missing. When
the tap exits the follower drains what the store receives in the next seconds, then exits too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported once the follower has waited; the SDK never in the tap's process
    from blackbox.recorder.otel.sdk import Sender
    from blackbox.recorder.otel.spans import SessionSpans, SpanData
    from blackbox.recorder.otel.watermark import Watermark
    from blackbox.recorder.store import EventStore

POLL_SECONDS = 0.5
METRICS_SECONDS = 10.0
# The follower is background work on the tap's machine: it yields the CPU to the relay.
FOLLOWER_NICE = 19
# How long the follower waits before its imports: past the tap's own start-up and first calls
# (bench/otel.py --startup). It starts at once when the tap ends sooner.
START_SECONDS = 1.0
# After the tap has gone: how long the follower keeps reading for records still being shipped.
DRAIN_QUIET_SECONDS = 1.5
DRAIN_MAX_SECONDS = 15.0
_POS, _SID, _SEQ, _WALL, _KIND, _DIR, _RAW = 0, 1, 2, 3, 5, 6, 7


@dataclass
class LiveHandle:
    """The tap's side: a follower process to tell when the tap is done (`close` never waits)."""

    process: subprocess.Popen[bytes] | None

    def close(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()


def start(store_url: str, watermark_path: Path, endpoint: str | None = None,
          protocol: str | None = None, pid: int | None = None,
          on_notice: Callable[[str], None] | None = None) -> LiveHandle:  # fmt: skip
    """Start the follower for the sessions recorded by process `pid` (this one by default)."""
    argv = [sys.executable, "-m", "blackbox.recorder.otel.live", "--store", store_url,
            "--watermark", str(watermark_path), "--pid", str(pid or os.getpid()),
            "--since-ns", str(time.time_ns())]  # fmt: skip
    if endpoint:
        argv += ["--endpoint", endpoint]
    if protocol:
        argv += ["--protocol", protocol]
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # A process group of its own: a Ctrl-C to the host does not cut the final drain
            # short. Not a session of its own (see the module docstring).
            process_group=0,
        )
    except OSError as exc:
        if on_notice is not None:
            on_notice(f"OpenTelemetry follower not started ({exc}); `blackbox otel export` later")
        return LiveHandle(None)
    return LiveHandle(process)


def _yield_cpu() -> None:
    """Lowest CPU priority there is for this process (SCHED_IDLE where the OS has it)."""
    with contextlib.suppress(OSError):
        os.nice(FOLLOWER_NICE)
    if hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


class SpanFollower:
    """Reads the log past a position, keeps a span builder per followed session, sends."""

    def __init__(self, store: EventStore, watermark: Watermark, sender: Sender, pid: int,
                 since_ns: int | None = None) -> None:  # fmt: skip
        self.store = store
        self.watermark = watermark
        self.sender = sender
        self.pid = pid
        self.position = store.max_position()
        self.builders: dict[str, SessionSpans | None] = {}
        self.broken: set[str] = set()
        self.sent = 0
        self._pending: list[SpanData] = []
        if since_ns is not None:
            self._catch_up(since_ns)

    def _catch_up(self, since_ns: int) -> None:
        """The tap may have shipped its first records before this process got going: adopt its
        sessions begun since `since_ns` up to our start position (their spans go out with the
        first poll)."""
        ready: list[SpanData] = []
        for info in self.store.list_sessions(since_ns=since_ns - 5_000_000_000):
            records = [ev for ev in self.store.read_session(info.session_id)
                       if ev.position <= self.position]  # fmt: skip
            if not records:
                continue
            first = records[0]
            row = (first.position, first.session_id, first.seq, first.wall_ns, 0, first.kind,
                   first.direction, first.raw)  # fmt: skip
            builder = self._follow(info.session_id, row)
            self.builders[info.session_id] = builder
            if builder is None:
                continue
            for ev in records:
                builder.add(ev.position, ev.seq, ev.wall_ns, ev.kind, ev.direction, ev.raw)
            ready.extend(builder.take())
            if builder.ended:
                self.builders[info.session_id] = None
        self._pending = ready

    def poll(self) -> int:
        """Read what the store has past our position; returns how many records were read."""
        read = 0
        ready, self._pending = self._pending, []
        for batch in self.store.read_log_rows(self.position):
            for row in batch:
                read += 1
                self.position = row[_POS]
                sid = row[_SID]
                if sid not in self.builders:
                    self.builders[sid] = self._follow(sid, row)
                builder = self.builders[sid]
                if builder is None:
                    continue
                builder.add(row[_POS], row[_SEQ], row[_WALL], row[_KIND], row[_DIR], row[_RAW],
                            row[9:])  # fmt: skip
                if builder.done:
                    ready.extend(builder.take())
                if builder.ended:
                    self.builders[sid] = None
        if ready:
            self._send(ready)
        return read

    def _follow(self, sid: str, row: tuple) -> SessionSpans | None:
        from blackbox.recorder.log import parse
        from blackbox.recorder.otel.spans import SessionSpans

        if row[_KIND] != "session_started" or row[_SEQ] != 1:
            return None  # a session that began before us, or another tap's
        doc, _problem = parse(row[_RAW])
        if not isinstance(doc, dict) or doc.get("pid") != self.pid:
            return None
        return SessionSpans(sid)

    def _send(self, spans: list[SpanData]) -> None:
        from blackbox.recorder.otel.batch import with_counts

        spans = list(with_counts(self.store, spans))
        by_session: dict[str, list[SpanData]] = {}
        for span in spans:
            if span.session_id not in self.broken:
                by_session.setdefault(span.session_id, []).append(span)
        marks: dict[str, int] = {}
        for sid, group in by_session.items():
            done = self.watermark.sent_seq(sid)  # a batch export may have sent some already
            group = [span for span in group if span.end_seq > done]
            if not group:
                continue
            sent = self.sender.send(group)
            self.sent += sent
            if sent:
                marks[sid] = group[sent - 1].end_seq
            if sent < len(group):
                self.broken.add(sid)
        if marks:
            self.watermark.advance(marks)


def follow(store_url: str, watermark_path: Path, endpoint: str | None, protocol: str | None,
           pid: int, since_ns: int | None = None) -> int:  # fmt: skip
    """The follower's main loop: until stdin closes, then drain. Returns spans sent."""
    _yield_cpu()
    closed = threading.Event()

    def watch_stdin() -> None:
        with contextlib.suppress(OSError):
            while sys.stdin.buffer.read(4096):
                pass
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    closed.wait(START_SECONDS)
    from blackbox.recorder.otel.sdk import Sender, Target
    from blackbox.recorder.otel.watermark import Watermark

    store = _open_when_there(store_url, closed)
    if store is None:
        return 0
    sender = Sender(Target(endpoint, protocol))
    follower = SpanFollower(store, Watermark(watermark_path, store_url), sender, pid, since_ns)
    flushed = time.monotonic()
    try:
        while not closed.wait(POLL_SECONDS):
            follower.poll()
            if time.monotonic() - flushed > METRICS_SECONDS:
                sender.flush_metrics()
                flushed = time.monotonic()
        quiet_since = began = time.monotonic()
        while time.monotonic() - began < DRAIN_MAX_SECONDS:
            if follower.poll():
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > DRAIN_QUIET_SECONDS and all(
                b is None for b in follower.builders.values()
            ):
                break
            time.sleep(POLL_SECONDS)
    finally:
        sender.close(timeout_ms=5000)
        store.close()
    return follower.sent


def _open_when_there(store_url: str, closed: threading.Event) -> EventStore | None:
    """The store, once the tap has created it (the follower never creates or migrates one: two
    processes migrating a fresh schema at once is what the tap's own lock exists to avoid)."""
    from blackbox.recorder import StoreMissing
    from blackbox.recorder.store import open_store

    deadline = None
    while True:
        try:
            return open_store(store_url, create=False)
        except StoreMissing:
            if closed.is_set():
                deadline = deadline or time.monotonic() + DRAIN_MAX_SECONDS
                if time.monotonic() > deadline:
                    return None
            time.sleep(POLL_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m blackbox.recorder.otel.live")
    parser.add_argument("--store", required=True)
    parser.add_argument("--watermark", required=True, type=Path)
    parser.add_argument("--pid", required=True, type=int)
    parser.add_argument("--endpoint")
    parser.add_argument("--protocol")
    parser.add_argument("--since-ns", type=int)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        follow(args.store, args.watermark, args.endpoint, args.protocol, args.pid, args.since_ns)


if __name__ == "__main__":
    main()
