"""Moves journal records into the event store, off the relay's hot path.

Why it exists: a tap only appends to its local journal (`blackbox.recorder.capture.journal`); this
module is what makes those records reach the store, in batches, with retries, without ever stalling
traffic. `Shipper` is a background thread that tails one live journal. It reads the segment files
(not an in-memory queue: memory stays flat however long the store is down, and the journal stays the
one durability point), appends batches to the store (appends are idempotent per (session, seq), so a
retried batch is harmless), and deletes each segment once everything in it is committed. When the
store is unreachable it says so once through `on_notice`, retries with backoff, and says so again
when the store is back. With a store URL the appends run in a child process
(`blackbox.recorder.capture.ship_worker`); journals of taps that died are shipped by
`blackbox.recorder.capture.leftovers`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from blackbox.recorder.capture.journal import Journal, JournalReader, parse_segment_name
from blackbox.recorder.capture.observer import FrameObserver
from blackbox.recorder.capture.salvage import REFUSED_DIR, Salvage, append_salvaging, keep_unstored
from blackbox.recorder.capture.ship_worker import (
    BATCH_BYTES,
    BATCH_RECORDS,
    WORKER_NICE,
    StoreWorker,
    describe_failure,
    lower_thread_priority,
)
from blackbox.recorder.log import NewEvent
from blackbox.recorder.store import EventStore

if TYPE_CHECKING:
    from blackbox.recorder.trust import AutoCheckpoints

POLL_SECONDS = 0.05
MAX_BACKOFF = 5.0
# How long a closing tap waits for the worker to observe what it has not shipped yet.
OBSERVE_REST_SECONDS = 2.0

Observer = Callable[[Sequence[NewEvent]], None]


class ShippedJournal(Protocol):
    """What `Shipper` uses of a journal: a tap's own `Journal`, or the `JournalTail` through which
    the HTTP proxy's shipper process reads another process's journal. Worker mode also needs
    `Journal.extents`, and is only used with the tap's own `Journal`."""

    @property
    def directory(self) -> Path: ...

    @property
    def appended(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def segments(self) -> list[Path]: ...

    def mark(self) -> tuple[int, int]: ...

    def release(self, path: Path) -> None: ...

    def discard(self) -> None: ...


class Shipper:
    """A background thread shipping one live journal into the store.

    `observer`, when given, sees every record once, in order, on the shipper's side (the stdio tap
    uses it to detect the protocol era and faults without parsing on the relay's path). It may
    append records to the same journal.
    """

    def __init__(
        self,
        journal: ShippedJournal,
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
        # With a store URL, appends run in a child process (see `StoreWorker`): no store work can
        # then hold this process's GIL while the relay waits for it.
        self.worker_url = worker_url
        # Worker mode: the first worker also ships the journals dead taps left in this directory,
        # in the background of its own process (no store work in this one, even at start).
        self.leftovers_dir = leftovers_dir
        self._worker: StoreWorker | None = None
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
        self._checkpoints: AutoCheckpoints | None = None  # set by `start`, in the caller's thread

    # -- the API -----------------------------------------------------------------------------------

    def start(self) -> None:
        if self.worker_url is not None:
            # Start the worker now: its imports and store connection take a while, and a short
            # session must not spend its exit budget waiting for them.
            self._worker = self._new_worker()
        else:
            # Imported here, in the caller's thread, not in ours: it imports SQLAlchemy, and a
            # thread importing it while another opens the store (the proxy's shipper process
            # ships leftovers at the same moment) caught it half imported, died of the
            # ImportError and shipped nothing.
            from blackbox.recorder.trust import AutoCheckpoints

            self._checkpoints = AutoCheckpoints.configured()  # off unless a key is configured
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
        checkpoints = self._checkpoints
        assert checkpoints is not None, "started by start()"
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
                    salvage = append_salvaging(self._store, self._pending)
                    checkpoints.after_append(self._store, self._pending)
                    if salvage.degraded:
                        self._degraded(salvage)
                except Exception as exc:  # any failure: keep the records in the journal, retry
                    retry = self._back_off(exc, backoff)
                    if retry is None:
                        return
                    backoff = retry
                    continue
                backoff = 0.1
                count, self._pending = len(self._pending), []
                self._shipped(count, self._pending_end)
        except Exception as exc:  # the journal itself failed: say so, not a thread's traceback
            self._gave_up(exc)
        finally:
            self._finished = True
            if self._reader is not None:
                self._reader.close()
            with self._cond:
                self._cond.notify_all()

    # -- worker mode -------------------------------------------------------------------------------

    def _new_worker(self) -> StoreWorker:
        assert self.worker_url is not None
        leftovers, self.leftovers_dir = self.leftovers_dir, None
        return StoreWorker(self.worker_url, WORKER_NICE, self.observer, leftovers)

    def _extents(self) -> list[tuple[int, Path, int]]:
        # Worker mode is set up by the stdio tap only, which ships its own `Journal`.
        return cast(Journal, self.journal).extents()

    def _run_remote(self) -> None:
        """The thread in worker mode: hand journal ranges to the worker and wait for its answer.

        Why: everything that costs CPU (reading records back, JSON parsing for the observer,
        hashing, SQL) happens in the worker process, so this thread only ever blocks in system
        calls and never holds the GIL the relay needs (a batch parsed here would show in the
        relay's p99). Range ends come from the journal's own bookkeeping of complete records.
        """
        backoff = 0.1
        try:
            while True:
                extents = self._extents()
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
                    if self._worker.degraded:
                        self.on_notice(self._worker.degraded)
                except Exception as exc:  # any failure: keep the records in the journal, retry
                    retry = self._back_off(exc, backoff)
                    if retry is None:
                        return
                    backoff = retry
                    continue
                backoff = 0.1
                self._remote_pos = (number, path, size)
                self._shipped(count, (number, size))
        except Exception as exc:  # the journal itself failed: say so, not a thread's traceback
            self._gave_up(exc)
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
        for number, path, size in self._extents():
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

    def _degraded(self, salvage: Salvage) -> None:
        """The store refused records of a batch and the rest was stored: say what was kept how."""
        kept = keep_unstored(self.journal.directory / REFUSED_DIR, salvage.unstored)
        self.on_notice(salvage.summary() + (f" in {kept}" if kept else ""))

    def _gave_up(self, exc: BaseException) -> None:
        """Shipping cannot go on in this process (store failures are retried, not this)."""
        self.last_error = describe_failure(exc)
        self.on_notice(
            f"shipping stopped: {self.last_error}; the records stay in the journal "
            f"{self.journal.directory} for the next tap or `blackbox ship`"
        )

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


def _number(path: Path) -> int:
    parsed = parse_segment_name(path)
    return parsed[1] if parsed is not None else 0
