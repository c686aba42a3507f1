"""The store worker: a child process that stores journal ranges and observes their frames.

Why it exists: storing (classify, hash chain, SQL) and observing (JSON parsing) cost CPU, and in the
tap's process they would take the GIL its relay needs. The tap's `Shipper` (worker mode) only hands
this process byte ranges of its journal over a pipe (`StoreWorker` is that side, `_worker_main` the
child's loop); the thread priorities here keep the work off the CPU the relay, host and server need.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from blackbox.recorder import BlackboxError, StoreError
from blackbox.recorder.capture.journal import JournalReader
from blackbox.recorder.capture.leftovers import ship_leftovers_quietly
from blackbox.recorder.capture.observer import FrameObserver
from blackbox.recorder.capture.salvage import REFUSED_DIR, Salvage, append_salvaging, keep_unstored
from blackbox.recorder.log import NewEvent, events
from blackbox.recorder.store import EventStore

if TYPE_CHECKING:
    from blackbox.recorder.trust import AutoCheckpoints

# One read of a journal (by the worker and the in-process Shipper alike): records, bytes.
BATCH_RECORDS = 1000
BATCH_BYTES = 4 * 1024 * 1024
# The largest range whose records observing hands on to storing rather than storing reading them
# again (a hand-off holds 0.2 s of traffic, far less than this; a larger one is a backlog).
REUSE_BYTES = 32 * 1024 * 1024
# A separate process cannot hold the relay's GIL; niced hard it is starved on a busy machine
# and cannot ship a session's backlog within the exit budget, so only a little.
WORKER_NICE = 3


class StoreWorker:
    """A child process that stores journal ranges and observes their frames:
    `python -m blackbox.recorder.capture.ship_worker URL NICE [observe|observe-quarantine]`.

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
        observer: Callable[[Sequence[NewEvent]], None] | None = None,
        leftovers_dir: Path | None = None,
    ) -> None:
        self.observer = observer if isinstance(observer, FrameObserver) else None
        mode = []
        if self.observer is not None:
            mode = ["observe-quarantine" if self.observer.quarantine_noise else "observe"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "blackbox.recorder.capture.ship_worker", url, str(nice), *mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.dead = False
        self.degraded = ""  # what the last `ship` had to degrade, if anything
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
        """Store the records in [start, end) of a segment; how many there were. What the worker
        had to degrade to store them (`salvage.Salvage.summary`) is left in `degraded`."""
        if self.dead:
            raise StoreError("the store worker process exited")
        self._send(f"ship\t{path}\t{start}\t{end}\n")
        answer = self._answers.get()
        if answer.startswith("ok"):
            count, _tab, self.degraded = answer[3:].partition("\t")
            return int(count or 0)
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
    """The store worker's loop (see `StoreWorker`): this thread reads commands and observes, a
    second one stores, so a store that hangs never holds up observation."""
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

    # Imported before any thread starts: the signing module imports SQLAlchemy, and a thread
    # importing it while another opens the store (the leftovers' thread) can catch it half
    # imported.
    from blackbox.recorder.store import open_store
    from blackbox.recorder.trust import AutoCheckpoints

    observer: FrameObserver | None = None
    if mode.startswith("observe"):

        def emit(sid: str, doc: events.Document) -> None:
            # One line a document: encoded JSON escapes every newline inside it.
            say(f"event\t{sid}\t{doc.KIND}\t{events.encode(doc).decode()}")

        from blackbox.recorder.gate import ToolWatch

        tools = ToolWatch(emit, lambda: open_store(url, create=False))
        observer = FrameObserver(emit, quarantine_noise=mode == "observe-quarantine", tools=tools)
    seen: dict[str, int] = {}

    def observe(path: str, start: int, end: int) -> list[list[NewEvent]] | None:
        """Observe the range; the batches it read, when they cover the whole range."""
        if observer is None:
            return None
        reader = JournalReader(Path(path), start)
        batches = []
        try:
            while batch := reader.read(BATCH_RECORDS, BATCH_BYTES, until=end):
                batches.append(batch)
                fresh = [ev for ev in batch if ev.seq > seen.get(ev.session_id, 0)]
                for ev in fresh:
                    seen[ev.session_id] = ev.seq
                if fresh:
                    observer(fresh)
            return batches if reader.offset >= end else None
        finally:
            reader.close()

    # A ship's range, and the batches observing it read when the storing thread may reuse them.
    jobs: queue.SimpleQueue[tuple[str, int, int, list[list[NewEvent]] | None] | None] = (
        queue.SimpleQueue()
    )
    checkpoints = AutoCheckpoints.configured()  # off unless a signing key is configured

    def store_loop() -> None:
        # Storing is most of the CPU a session costs (classify, hash chain, SQL), more than the
        # relay itself: it gets only CPU nobody else wants, so a waking relay, host or server
        # preempts it at once (niced, it could finish its time slice first, the relay's p99). Only
        # this thread: observing, which a closing tap waits for, keeps the worker's priority.
        idle_thread_priority()
        # But an append holds the store's write lock (PostgreSQL's log lock, SQLite's file lock),
        # which every other tap's worker on the same store waits for, and a SCHED_IDLE holder on
        # a busy machine keeps them all waiting. So the append itself runs at the worker's own
        # priority, and idle between batches; a single tap loses nothing by it.
        # Opening a new store migrates it, under its write lock, so it runs at the worker's own
        # priority too: an idle opener on a busy machine holds the lock long enough for another
        # opener to give up on it ("database is locked").
        store: EventStore | None = None
        with contextlib.suppress(Exception), own_priority():  # errors come with the first batch
            store = open_store(url)
        degraded: list[str] = []
        while (job := jobs.get()) is not None:
            path, start, end, observed = job
            try:
                if store is None:
                    with own_priority():
                        store = open_store(url)
                count = 0
                for batch in observed if observed is not None else _batches(path, start, end):
                    salvage = store_batch(store, batch, checkpoints)
                    count += len(batch)
                    if salvage.degraded:
                        keep_unstored(Path(path).parent / REFUSED_DIR, salvage.unstored)
                        degraded.append(salvage.summary())
                answer = f"ok {count}"
                if degraded:
                    answer += "\t" + " ".join("; ".join(degraded).split())
                    degraded.clear()
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
                observed = None
                with contextlib.suppress(Exception):
                    observed = observe(path, start, end)
                if command == "ship":
                    # The storing thread stores what observing just read instead of reading the
                    # range again (a read was a fifth of the worker's CPU a frame). The tap waits
                    # for each answer, so one range is held at a time, and only a range of at
                    # most REUSE_BYTES: the backlog of a long outage is read again, a batch at a
                    # time, rather than held whole in memory (so is a range queued behind
                    # another, should a caller not wait).
                    reuse = (
                        observed is not None and jobs.qsize() == 0 and end - start <= REUSE_BYTES
                    )
                    jobs.put((path, start, end, observed if reuse else None))
            elif command == "outstanding":
                pending = observer.outstanding() if observer is not None else []
                say("outstanding\t" + json.dumps(pending, separators=(",", ":")))
            elif command == "leftovers":
                # Not a daemon: what it started it finishes, even after the tap has exited.
                threading.Thread(target=_ship_leftovers_idle, args=(url, Path(args[0]))).start()
    finally:  # also when the tap is gone (a broken pipe): the queued stores still finish
        jobs.put(None)
    storing.join()


def _batches(path: str, start: int, end: int) -> Iterator[list[NewEvent]]:
    """The records of a journal range, a batch at a time; `StoreError` when the file ends first."""
    reader = JournalReader(Path(path), start)
    try:
        while reader.offset < end:
            batch = reader.read(BATCH_RECORDS, BATCH_BYTES, until=end)
            if not batch:
                if reader.offset >= end:  # the range held only the store mark
                    break
                raise StoreError(f"journal {path} ends before offset {end}")
            yield batch
    finally:
        reader.close()


def store_batch(
    store: EventStore, batch: Sequence[NewEvent], checkpoints: AutoCheckpoints
) -> Salvage:
    """Append a batch, and sign the checkpoint it is due, at the worker's own priority (the
    storing thread is idle otherwise): both hold a lock every other writer waits for, the store's
    write lock or (a checkpoint on PostgreSQL) the tree's, and an idle-priority holder of either
    stalls a fleet of taps on one store. A batch the store refuses is salvaged
    (`blackbox.recorder.capture.salvage`): what it had to degrade is returned."""
    with own_priority():
        salvage = append_salvaging(store, batch)
        checkpoints.after_append(store, batch)
    return salvage


def describe_failure(exc: BaseException) -> str:
    """A failed store attempt as the user reads it: our own errors say it all; anything else
    is named by its type."""
    return str(exc) if isinstance(exc, BlackboxError) else f"{type(exc).__name__}: {exc}"


def lower_thread_priority(nice: int) -> None:
    """Give the calling thread a lower CPU priority (Linux schedules threads as tasks).

    Why: on a busy machine the relay thread, the host and the server must win the CPU over the
    shipper's parsing, hashing and SQL, which would otherwise add to every round trip of the
    tap. Elsewhere this quietly does nothing."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def _ship_leftovers_idle(url: str, directory: Path) -> None:
    from blackbox.recorder.store import open_store

    def opened() -> EventStore:
        with own_priority():  # a first open migrates, under the store's write lock
            return open_store(url)

    idle_thread_priority()
    ship_leftovers_quietly(directory, opened)


def idle_thread_priority() -> None:
    """Run the calling thread only when a CPU has nothing else to do (Linux SCHED_IDLE; the
    lowest nice value elsewhere). A backlog it cannot ship before the tap exits is handed off."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread, on Linux
    except (AttributeError, OSError):
        lower_thread_priority(19)


@contextlib.contextmanager
def own_priority() -> Iterator[None]:
    """Run the block at the worker's own priority, then idle again: for a thread that runs idle
    but must not hold the store's write lock while it waits for a CPU nobody else wants."""
    normal_thread_priority()
    try:
        yield
    finally:
        idle_thread_priority()


def normal_thread_priority() -> None:
    """Undo `idle_thread_priority` for the calling thread (back to the process's nice value)."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


if __name__ == "__main__":
    _worker_main(
        sys.argv[1],
        int(sys.argv[2]) if len(sys.argv) > 2 else 0,
        sys.argv[3] if len(sys.argv) > 3 else "",
    )
