"""Moves journal records into the event store, off the relay's hot path.

Why it exists: a tap only appends to its local journal (`recorder.journal`); this module is what
makes those records reach the store, in batches, with retries, without ever stalling traffic:

- `Shipper` is a background thread that tails one live journal. It reads the segment files (not an
  in-memory queue: memory stays flat however long the store is down, and the journal stays the one
  durability point), appends batches to the store (appends are idempotent per (session, seq), so a
  retried batch is harmless), and deletes each segment once everything in it is committed. When the
  store is unreachable it says so once through `on_notice`, retries with backoff, and says so again
  when the store is back.
- `ship_leftovers` ships the journals of taps that died (SIGKILL, power loss) and closes their
  sessions with `session_ended {"reason": "recovered"}`. A live tap's journal is recognised by the
  flock its writer holds and left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recorder import events
from recorder.errors import BlackboxError, StoreError
from recorder.journal import Journal, JournalReader, parse_segment_name
from recorder.model import Direction, Kind, NewEvent
from recorder.observer import FrameObserver
from recorder.store import EventStore

BATCH_RECORDS = 1000
BATCH_BYTES = 4 * 1024 * 1024
POLL_SECONDS = 0.05
MAX_BACKOFF = 5.0
# A separate process cannot hold the relay's GIL; niced hard it was starved on a busy machine
# and could not ship a session's backlog within the exit budget, so only a little.
WORKER_NICE = 3
# How long a closing tap waits for the worker to observe what it has not shipped yet.
OBSERVE_REST_SECONDS = 2.0

Observer = Callable[[Sequence[NewEvent]], None]


class Shipper:
    """A background thread shipping one live journal into the store.

    `observer`, when given, sees every record once, in order, on the shipper's side (the stdio tap
    uses it to detect the protocol era and faults without parsing on the relay's path). It may
    append records to the same journal.
    """

    def __init__(
        self,
        journal: Journal,
        store_factory: Callable[[], EventStore],
        on_notice: Callable[[str], None],
        observer: Observer | None = None,
        batch_records: int = BATCH_RECORDS,
        poll_seconds: float = POLL_SECONDS,
        nice: int = 0,
        worker_url: str | None = None,
        leftovers_dir: Path | None = None,
    ) -> None:
        self.journal = journal
        self.store_factory = store_factory
        self.on_notice = on_notice
        self.observer = observer
        self.batch_records = batch_records
        self.poll_seconds = poll_seconds
        self.nice = nice
        # With a store URL, appends run in a child process (see _Worker): no store work can then
        # hold this process's GIL while the relay waits for it.
        self.worker_url = worker_url
        # Worker mode: the first worker also ships the journals dead taps left in this directory,
        # in the background of its own process (no store work in this one, even at start).
        self.leftovers_dir = leftovers_dir
        self._worker: _Worker | None = None
        self.shipped = 0
        self.last_error: str | None = None
        self._store: EventStore | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._cond = threading.Condition()
        self._committed: tuple[int, int] = (-1, 0)  # (segment number, offset) committed
        self._reader: JournalReader | None = None
        self._reader_segment = -1
        self._pending: list[NewEvent] = []
        self._pending_end: tuple[int, int] = (-1, 0)
        self._read_lock = threading.Lock()
        self._observed: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, name="blackbox-shipper", daemon=True)
        self._outage_since: int | None = None
        self._finished = False
        # Worker mode: where the next range to ship starts (segment number, path, offset); the
        # worker observes what it ships, so this process never reads the journal.
        self._remote_pos: tuple[int, Path, int] | None = None
        self._remote = worker_url is not None

    # -- the API -----------------------------------------------------------------------------------

    def start(self) -> None:
        if self.worker_url is not None:
            # Start the worker now: its imports and store connection take a while, and a short
            # session must not spend its exit budget waiting for them.
            self._worker = self._new_worker()
        self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait until everything appended before this call is committed; False on timeout."""
        target = self.journal.mark()
        deadline = time.monotonic() + timeout
        self._wake.set()
        with self._cond:
            while self._committed < target:
                left = deadline - time.monotonic()
                if left <= 0 or self._finished:
                    return self._committed >= target
                self._cond.wait(min(left, 0.05))
                self._wake.set()
        return True

    def stop(self, timeout: float) -> bool:
        """Ship what is left within `timeout`, then stop. True when everything is committed; then,
        if the journal is closed, its files are deleted. Otherwise they stay for the next tap or
        `blackbox ship`."""
        done = self.flush(timeout)
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(max(0.05, min(timeout, 0.5)))
        if done and self.journal.closed and self._committed >= self.journal.mark():
            self.journal.discard()
        if self._store is not None and not self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._store.close()
        if self._worker is not None and not self._thread.is_alive():
            self._worker.close()
        return done

    def observe_rest(self) -> None:
        """Feed the observer every record appended so far, even those the store has not taken
        yet (the store may be down): the tap calls this before it writes its closing events."""
        if self.observer is None:
            return
        if self._remote:
            self._observe_rest_remote()
            return
        with self._read_lock:
            segments = self.journal.segments()
            for path in segments:
                parsed = parse_segment_name(path)
                if parsed is None or parsed[1] < self._reader_segment:
                    continue
                offset = 0
                if parsed[1] == self._reader_segment and self._reader is not None:
                    offset = self._reader.offset
                reader = JournalReader(path, offset)
                try:
                    while batch := reader.read(self.batch_records, BATCH_BYTES):
                        self._observe(batch)
                finally:
                    reader.close()

    # -- the thread --------------------------------------------------------------------------------

    def _observe(self, batch: Sequence[NewEvent]) -> None:
        if self.observer is None:
            return
        seen = self._observed
        fresh = [ev for ev in batch if ev.seq > seen.get(ev.session_id, 0)]
        for ev in fresh:
            seen[ev.session_id] = ev.seq
        if fresh:
            self.observer(fresh)

    def _read(self) -> None:
        """Fill `_pending` with the next batch, moving to the next segment when one is done."""
        with self._read_lock:
            while True:
                segments = self.journal.segments()
                if self._reader is None:
                    if not segments:
                        return
                    path = segments[0]
                    self._reader = JournalReader(path)
                    self._reader_segment = _number(path)
                batch = self._reader.read(self.batch_records, BATCH_BYTES)
                if batch:
                    self._take(batch)
                    return
                later = [p for p in segments if _number(p) > self._reader_segment]
                if not later:
                    self._set_committed((self._reader_segment, self._reader.offset))
                    return
                # The writer moved on, so this segment is complete: read it once more (a write
                # may have finished since), then release it, since everything in it is committed.
                batch = self._reader.read(self.batch_records, BATCH_BYTES)
                if batch:
                    self._take(batch)
                    return
                done = self._reader.path
                self._reader.close()
                self._reader = JournalReader(later[0])
                self._reader_segment = _number(later[0])
                self.journal.release(done)

    def _take(self, batch: list[NewEvent]) -> None:
        assert self._reader is not None
        self._pending = batch
        self._pending_end = (self._reader_segment, self._reader.offset)
        self._observe(batch)

    def _set_committed(self, mark: tuple[int, int]) -> None:
        with self._cond:
            if mark > self._committed:
                self._committed = mark
            self._cond.notify_all()

    def _run(self) -> None:
        if self._remote:
            # Not niced: this thread does next to no work, but it takes the GIL for a moment
            # around each answer, and a niced thread preempted while holding it would stall
            # the relay until it ran again (priority inversion).
            self._run_remote()
            return
        if self.nice:
            lower_thread_priority(self.nice)
        backoff = 0.1
        try:
            while True:
                if not self._pending:
                    self._read()
                if not self._pending:
                    if self._stopping:
                        return
                    self._wake.wait(self.poll_seconds)
                    self._wake.clear()
                    continue
                try:
                    if self._store is None:
                        self._store = self.store_factory()
                    self._store.append(self._pending)
                except Exception as exc:  # any failure: keep the records in the journal, retry
                    retry = self._back_off(exc, backoff)
                    if retry is None:
                        return
                    backoff = retry
                    continue
                backoff = 0.1
                count, self._pending = len(self._pending), []
                self._shipped(count, self._pending_end)
        finally:
            self._finished = True
            if self._reader is not None:
                self._reader.close()
            with self._cond:
                self._cond.notify_all()

    # -- worker mode -------------------------------------------------------------------------------

    def _new_worker(self) -> _Worker:
        assert self.worker_url is not None
        leftovers, self.leftovers_dir = self.leftovers_dir, None
        return _Worker(self.worker_url, WORKER_NICE, self.observer, leftovers)

    def _run_remote(self) -> None:
        """The thread in worker mode: hand journal ranges to the worker and wait for its answer.

        Why: everything that costs CPU (reading records back, JSON parsing for the observer,
        hashing, SQL) happens in the worker process, so this thread only ever blocks in system
        calls and never holds the GIL the relay needs (a batch parsed here showed up at once in
        the relay's p99). Range ends come from the journal's own bookkeeping of complete records.
        """
        backoff = 0.1
        try:
            while True:
                extents = self.journal.extents()
                pos = self._remote_pos
                if pos is None:
                    if not extents:
                        if self._stopping:
                            return
                        self._wake.wait(self.poll_seconds)
                        self._wake.clear()
                        continue
                    pos = self._remote_pos = (extents[0][0], extents[0][1], 0)
                number, path, offset = pos
                size = next((sz for n, _p, sz in extents if n == number), offset)
                later = [(n, p) for n, p, _sz in extents if n > number]
                if size <= offset:
                    if later:
                        # The writer moved on and everything in this segment is committed.
                        self.journal.release(path)
                        self._remote_pos = (later[0][0], later[0][1], 0)
                        continue
                    self._set_committed((number, offset))
                    if self._stopping:
                        return
                    self._wake.wait(self.poll_seconds)
                    self._wake.clear()
                    continue
                try:
                    if self._worker is None:
                        self._worker = self._new_worker()
                    count = self._worker.ship(path, offset, size)
                except Exception as exc:  # any failure: keep the records in the journal, retry
                    retry = self._back_off(exc, backoff)
                    if retry is None:
                        return
                    backoff = retry
                    continue
                backoff = 0.1
                self._remote_pos = (number, path, size)
                self._shipped(count, (number, size))
        finally:
            self._finished = True
            with self._cond:
                self._cond.notify_all()

    def _observe_rest_remote(self) -> None:
        """Have the worker observe everything not shipped yet (the store may be down) and take
        over its list of outstanding requests; its events reach the journal before this returns."""
        worker = self._worker
        if worker is None or not isinstance(self.observer, FrameObserver):
            return
        start = self._remote_pos
        ranges = []
        for number, path, size in self.journal.extents():
            offset = start[2] if start is not None and number == start[0] else 0
            if start is not None and number < start[0]:
                continue
            if size > offset:
                ranges.append((path, offset, size))
        outstanding = worker.observe(ranges, OBSERVE_REST_SECONDS)
        if outstanding is not None:
            self.observer.set_outstanding(outstanding)

    def _shipped(self, count: int, mark: tuple[int, int]) -> None:
        """`count` records up to `mark` (segment, offset) are in the store; an outage is over."""
        self.shipped += count
        self._set_committed(mark)
        if self._outage_since is not None:
            self._outage_since = None
            self.last_error = None
            self.on_notice(f"store back; {self.shipped} records shipped in all")

    def _back_off(self, exc: BaseException, backoff: float) -> float | None:
        """Report a failed attempt and wait `backoff` seconds (a stop cuts the wait short); the
        next wait, doubled up to MAX_BACKOFF, or None when the shipper is stopping."""
        self._failed(exc)
        if self._stopping:
            return None
        self._wake.wait(backoff)
        self._wake.clear()
        return min(backoff * 2, MAX_BACKOFF)

    def _failed(self, exc: BaseException) -> None:
        message = describe_failure(exc)
        self.last_error = message.splitlines()[0] if message else type(exc).__name__
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()
            self._store = None
        if self._worker is not None and (self._worker.dead or self._worker.proc.poll() is not None):
            self._worker.close()
            self._worker = None  # it died: the next attempt starts a new one
        if self._outage_since is None:
            self._outage_since = time.monotonic_ns()
            waiting = max(0, self.journal.appended - self.shipped)
            self.on_notice(
                f"{self.last_error}; retrying in the background, {waiting} records kept in the "
                f"journal {self.journal.directory}"
            )


class _Worker:
    """A child process that stores journal ranges and observes their frames:
    `python -m recorder.shipper URL NICE [observe|observe-quarantine]`.

    Lines to the worker: "ship<TAB>PATH<TAB>START<TAB>END" (observe, then store that range; the
    worker reads the records from the journal file itself, nothing is copied through the pipe),
    "observe<TAB>PATH<TAB>START<TAB>END" (observe only: the store may be down), "outstanding", and
    "leftovers<TAB>DIRECTORY" (ship dead taps' journals in a thread of its own, unanswered).
    Lines back: "ok N" or "err MESSAGE" per ship, in order; "event<TAB>SESSION<TAB>KIND<TAB>JSON"
    for what the observer found, which this side appends to the journal (the journal assigns
    seqs, so only its owner may write it); "outstanding<TAB>JSON". A reader thread takes the
    answers as they come, so asking for outstanding requests never waits behind a slow store.
    The worker runs niced, ignores the signals a host sends to the tap's process group (the tap
    decides when shipping ends), and exits when its stdin closes, after the stores queued.
    """

    def __init__(
        self,
        url: str,
        nice: int,
        observer: Observer | None = None,
        leftovers_dir: Path | None = None,
    ) -> None:
        self.observer = observer if isinstance(observer, FrameObserver) else None
        mode = []
        if self.observer is not None:
            mode = ["observe-quarantine" if self.observer.quarantine_noise else "observe"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "recorder.shipper", url, str(nice), *mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.dead = False
        self._send_lock = threading.Lock()
        self._answers: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._outstanding: queue.SimpleQueue[list[dict[str, object]] | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name="blackbox-worker-reader")
        self._reader.daemon = True
        self._reader.start()
        if leftovers_dir is not None:
            with contextlib.suppress(StoreError):  # it died at once: the next tap ships them
                self._send(f"leftovers\t{leftovers_dir}\n")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                text = line.decode().rstrip("\n")
                tag, _, rest = text.partition("\t")
                if tag == "event":
                    sid, kind, raw = rest.split("\t", 2)
                    doc, _problem = events.decode(kind, raw.encode())
                    if self.observer is not None and doc is not None:
                        self.observer.emit(sid, doc)
                elif tag == "outstanding":
                    self._outstanding.put(json.loads(rest))
                else:
                    self._answers.put(text)
        except (OSError, ValueError):
            pass
        finally:
            self.dead = True  # before the sentinels: a caller that checks it never blocks
            self._answers.put("")
            self._outstanding.put(None)

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        with self._send_lock:
            try:
                self.proc.stdin.write(text.encode())
                self.proc.stdin.flush()
            except (OSError, ValueError):
                raise StoreError("the store worker process exited") from None

    def ship(self, path: Path, start: int, end: int) -> int:
        """Store the records in [start, end) of a segment; how many there were."""
        if self.dead:
            raise StoreError("the store worker process exited")
        self._send(f"ship\t{path}\t{start}\t{end}\n")
        answer = self._answers.get()
        if answer.startswith("ok"):
            return int(answer[3:] or 0)
        if answer.startswith("err "):
            raise StoreError(answer[4:])
        raise StoreError("the store worker process exited")

    def observe(
        self, ranges: Sequence[tuple[Path, int, int]], timeout: float
    ) -> list[dict[str, object]] | None:
        """Have the worker observe these ranges; its outstanding requests then (None when it
        cannot say in time)."""
        if self.observer is None or self.dead:
            return None
        with contextlib.suppress(queue.Empty):
            while True:  # a late answer to an earlier call that timed out
                self._outstanding.get_nowait()
        lines = "".join(f"observe\t{p}\t{s}\t{e}\n" for p, s, e in ranges)
        try:
            self._send(lines + "outstanding\n")
            return self._outstanding.get(timeout=timeout)
        except (StoreError, queue.Empty):
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        # It exits once it sees EOF (after the stores queued, if any): no need to wait.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(0.1)


def _worker_main(url: str, nice: int, mode: str = "") -> None:
    """The store worker's loop (see `_Worker`): this thread reads commands and observes, a second
    one stores, so a store that hangs never holds up observation."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(nice)
    out_lock = threading.Lock()

    def say(line: str) -> None:
        # A tap that is gone needs no answer; the work it asked for is still done.
        with out_lock, contextlib.suppress(OSError, ValueError):
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    observer: FrameObserver | None = None
    if mode.startswith("observe"):

        def emit(sid: str, doc: events.Document) -> None:
            # One line a document: encoded JSON escapes every newline inside it.
            say(f"event\t{sid}\t{doc.KIND}\t{events.encode(doc).decode()}")

        observer = FrameObserver(emit, quarantine_noise=mode == "observe-quarantine")
    seen: dict[str, int] = {}

    def observe(path: str, start: int, end: int) -> None:
        if observer is None:
            return
        reader = JournalReader(Path(path), start)
        try:
            while batch := reader.read(BATCH_RECORDS, BATCH_BYTES, until=end):
                fresh = [ev for ev in batch if ev.seq > seen.get(ev.session_id, 0)]
                for ev in fresh:
                    seen[ev.session_id] = ev.seq
                if fresh:
                    observer(fresh)
        finally:
            reader.close()

    jobs: queue.SimpleQueue[tuple[str, int, int] | None] = queue.SimpleQueue()

    def store_loop() -> None:
        # Storing is most of the CPU a session costs (classify, hash chain, SQL), more than the
        # relay itself: it gets only CPU nobody else wants, so a waking relay, host or server
        # preempts it at once (niced, it could finish its time slice first: that was p99). Only
        # this thread: observing, which a closing tap waits for, keeps the worker's priority.
        idle_thread_priority()
        from recorder.store import open_store

        store: EventStore | None = None
        with contextlib.suppress(Exception):  # connect before the first batch; errors come later
            store = open_store(url)
        while (job := jobs.get()) is not None:
            path, start, end = job
            try:
                if store is None:
                    store = open_store(url)
                count = 0
                reader = JournalReader(Path(path), start)
                try:
                    while reader.offset < end:
                        batch = reader.read(BATCH_RECORDS, BATCH_BYTES, until=end)
                        if not batch:
                            raise StoreError(f"journal {path} ends before offset {end}")
                        store.append(batch)
                        count += len(batch)
                finally:
                    reader.close()
                answer = f"ok {count}"
            except Exception as exc:
                answer = "err " + " ".join(describe_failure(exc).split())
                if store is not None:
                    with contextlib.suppress(Exception):
                        store.close()
                    store = None
            say(answer)

    storing = threading.Thread(target=store_loop, name="blackbox-worker-store")
    storing.start()
    try:
        for line in sys.stdin:
            command, *args = line.rstrip("\n").split("\t")
            if command in ("ship", "observe"):
                path, start, end = args[0], int(args[1]), int(args[2])
                # Observation never fails the ship: a frame it cannot read is the store's to report.
                with contextlib.suppress(Exception):
                    observe(path, start, end)
                if command == "ship":
                    jobs.put((path, start, end))
            elif command == "outstanding":
                pending = observer.outstanding() if observer is not None else []
                say("outstanding\t" + json.dumps(pending, separators=(",", ":")))
            elif command == "leftovers":
                # Not a daemon: what it started it finishes, even after the tap has exited.
                threading.Thread(target=_ship_leftovers_idle, args=(url, Path(args[0]))).start()
    finally:  # also when the tap is gone (a broken pipe): the queued stores still finish
        jobs.put(None)
    storing.join()


def describe_failure(exc: BaseException) -> str:
    """A failed store attempt as the user reads it: our own errors say it all; anything else
    is named by its type."""
    return str(exc) if isinstance(exc, BlackboxError) else f"{type(exc).__name__}: {exc}"


def lower_thread_priority(nice: int) -> None:
    """Give the calling thread a lower CPU priority (Linux schedules threads as tasks).

    Why: on a busy machine the relay thread, the host and the server must win the CPU over the
    shipper's parsing, hashing and SQL; measured in bench/tap_overhead.py, a niced shipper thread
    halves the tap's p90 and mean round trip. Elsewhere this quietly does nothing."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def _ship_leftovers_idle(url: str, directory: Path) -> None:
    from recorder.store import open_store

    idle_thread_priority()
    ship_leftovers_quietly(directory, lambda: open_store(url))


def idle_thread_priority() -> None:
    """Run the calling thread only when a CPU has nothing else to do (Linux SCHED_IDLE; the
    lowest nice value elsewhere). A backlog it cannot ship before the tap exits is handed off."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread, on Linux
    except (AttributeError, OSError):
        lower_thread_priority(19)


def _number(path: Path) -> int:
    parsed = parse_segment_name(path)
    return parsed[1] if parsed is not None else 0


# -- leftovers -------------------------------------------------------------------------------------


@dataclass
class ShipReport:
    """What `ship_leftovers` did."""

    journals: int = 0
    records: int = 0
    recovered: list[str] = field(default_factory=list)
    live: int = 0


def ship_leftovers(
    directory: Path,
    store: EventStore,
    on_progress: Callable[[str], None] | None = None,
) -> ShipReport:
    """Ship every journal not locked by a live tap, close its unfinished sessions as recovered,
    then delete it. A store error propagates and leaves the remaining journals in place."""
    report = ShipReport()
    if not directory.is_dir():
        return report
    groups: dict[str, list[tuple[int, Path]]] = {}
    for path in directory.iterdir():
        parsed = parse_segment_name(path)
        if parsed is not None:
            groups.setdefault(parsed[0], []).append((parsed[1], path))
    for tap_id in sorted(groups):
        locked = _lock_group(sorted(groups[tap_id]))
        if locked is None:
            report.live += 1
            continue
        try:
            count = _ship_group(locked, store, report)
            report.journals += 1
            report.records += count
            if on_progress is not None:
                on_progress(f"shipped {count} records from journal {tap_id}")
            for path, _fd in locked:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        finally:
            for _path, fd in locked:
                os.close(fd)
    return report


def ship_leftovers_quietly(directory: Path, store_factory: Callable[[], EventStore]) -> bool:
    """Ship journals of dead taps in the background of a tap; False when the store could not
    take them (an unreachable store is the tap's own shipper's to report; the journals wait)."""
    try:
        store = store_factory()
        try:
            ship_leftovers(directory, store)
        finally:
            store.close()
    except Exception:
        return False
    return True


def _lock_group(segments: list[tuple[int, Path]]) -> list[tuple[Path, int]] | None:
    """Lock every segment of a dead tap's journal; None when a live tap still holds one."""
    locked: list[tuple[Path, int]] = []
    for _seg, path in segments:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for _p, other in locked:
                os.close(other)
            return None
        if os.fstat(fd).st_nlink == 0:  # shipped and deleted by someone else meanwhile
            os.close(fd)
            continue
        locked.append((path, fd))
    return locked


def _ship_group(locked: list[tuple[Path, int]], store: EventStore, report: ShipReport) -> int:
    last: dict[str, NewEvent] = {}
    ended: set[str] = set()
    count = 0
    for path, _fd in locked:
        reader = JournalReader(path)
        try:
            while batch := reader.read(2000, 8 * 1024 * 1024):
                store.append(batch)
                count += len(batch)
                for ev in batch:
                    last[ev.session_id] = ev
                    if ev.kind == Kind.SESSION_ENDED:
                        ended.add(ev.session_id)
        finally:
            reader.close()
    for sid, ev in last.items():
        if sid in ended:
            continue
        info = store.session(sid)
        if info.sealed:
            continue
        doc = events.SessionEnded(
            reason="recovered",
            outcome="recovered",
            detail="the tap stopped without closing the session; shipped from its journal",
            recovered_ns=time.time_ns(),
        )
        store.append(
            [
                NewEvent(
                    sid,
                    info.last_seq + 1,
                    ev.wall_ns,
                    ev.mono_ns,
                    Kind.SESSION_ENDED,
                    Direction.NONE,
                    events.encode(doc),
                )
            ]
        )
        report.recovered.append(sid)
    return count


def hand_off_leftovers(store_url: str, directory: Path, after_pid: int) -> int:
    """Start a detached process that ships `directory`'s journals once `after_pid` has exited.

    Why: a tap must exit inside its host's shutdown window (the MCP SDK SIGTERMs the process group
    about 2 s after closing stdin), and a store that is slow or down can need longer. The helper
    runs in a session of its own, so the host's signals do not reach it, and it waits for the tap
    to exit because a live tap's journal is locked. Returns the helper's pid.
    """
    args = [sys.executable, "-m", "recorder.shipper", "--hand-off", store_url]
    proc = subprocess.Popen(
        [*args, str(directory), str(after_pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    return proc.pid


HAND_OFF_WAIT_SECONDS = 60.0
HAND_OFF_RETRY_SECONDS = 600.0


def _hand_off_main(url: str, directory: Path, after_pid: int) -> None:
    """The detached shipper of `hand_off_leftovers`: wait for the tap, then ship, retrying with
    backoff for a while if the store is unreachable (what is left waits for the next tap)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    deadline = time.monotonic() + HAND_OFF_WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            os.kill(after_pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        time.sleep(0.05)
    from recorder.store import open_store

    delay, give_up = 0.5, time.monotonic() + HAND_OFF_RETRY_SECONDS
    # The store is away: back off, then leave the journal to the next tap.
    while not ship_leftovers_quietly(directory, lambda: open_store(url)):
        if time.monotonic() + delay > give_up:
            return
        time.sleep(delay)
        delay = min(delay * 2, 30.0)


if __name__ == "__main__":
    if sys.argv[1] == "--hand-off":
        _hand_off_main(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
    else:
        _worker_main(
            sys.argv[1],
            int(sys.argv[2]) if len(sys.argv) > 2 else 0,
            sys.argv[3] if len(sys.argv) > 3 else "",
        )
