"""Ships the journals that taps left behind, and closes their sessions as recovered.

Why it exists: a tap killed (SIGKILL, power loss) or out of time at exit leaves records in its
journal that no live `Shipper` will store. `ship_leftovers` ships every journal not locked by a live
tap (`blackbox ship`, and each tap at start, run it); `hand_off_leftovers` starts a detached process
that does so once a tap that ran out of its host's shutdown window has exited.

A journal goes only to the store it was written for (its segments' `StoreMark`): a journal left by
a tap whose store was unusable is never shipped by an unrelated tap into that tap's own store. An
unmarked journal (written before the mark existed) is shipped only by `blackbox ship`, into the
store its user names; journals of other stores are listed, with their store, for `blackbox ship
--store`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from blackbox.recorder.capture.journal import (
    JournalReader,
    StoreMark,
    parse_segment_name,
    read_store_mark,
)
from blackbox.recorder.capture.salvage import REFUSED_DIR, append_salvaging, keep_unstored
from blackbox.recorder.log import Direction, Kind, NewEvent, events
from blackbox.recorder.store import EventStore


@dataclass
class ShipReport:
    """What `ship_leftovers` did."""

    journals: int = 0
    records: int = 0
    recovered: list[str] = field(default_factory=list)
    live: int = 0
    # Journals left alone because they belong to another store: (tap id, its mark; None for an
    # unmarked journal, which only `blackbox ship` ships).
    others: list[tuple[str, StoreMark | None]] = field(default_factory=list)
    # What the store refused and how it was kept (`blackbox.recorder.capture.salvage`), a line each.
    degraded: list[str] = field(default_factory=list)


def ship_leftovers(
    directory: Path,
    store: EventStore,
    on_progress: Callable[[str], None] | None = None,
    unmarked: bool = False,
    on_step: Callable[[int, int], None] | None = None,
) -> ShipReport:
    """Ship every journal written for `store` and not locked by a live tap, close its unfinished
    sessions as recovered, then delete it; with `unmarked` (`blackbox ship` only), journals that
    name no store too. Journals of other stores are left in place and listed in the report. A
    store error propagates and leaves the remaining journals in place. `on_step` is told
    (journals done, journals found) before each journal and at the end."""
    report = ShipReport()
    if not directory.is_dir():
        return report
    mine = StoreMark.for_url(store.url).fingerprint
    groups: dict[str, list[tuple[int, Path]]] = {}
    for path in directory.iterdir():
        parsed = parse_segment_name(path)
        if parsed is not None:
            groups.setdefault(parsed[0], []).append((parsed[1], path))
    for step, tap_id in enumerate(sorted(groups)):
        if on_step is not None:
            on_step(step, len(groups))
        locked = _lock_group(sorted(groups[tap_id]))
        if locked is None:
            report.live += 1
            continue
        try:
            if not locked:  # shipped and deleted by another process meanwhile
                continue
            mark = _group_mark(locked)
            if mark.fingerprint != mine if mark is not None else not unmarked:
                report.others.append((tap_id, mark))
                continue
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
    if on_step is not None and groups:
        on_step(len(groups), len(groups))
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


def _group_mark(locked: list[tuple[Path, int]]) -> StoreMark | None:
    """The store a dead tap's journal was written for (every segment carries the same mark)."""
    for path, _fd in locked:
        mark = read_store_mark(path)
        if mark is not None:
            return mark
    return None


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
                salvage = append_salvaging(store, batch)
                if salvage.degraded:
                    kept = keep_unstored(path.parent / REFUSED_DIR, salvage.unstored)
                    report.degraded.append(salvage.summary() + (f" in {kept}" if kept else ""))
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
    args = [sys.executable, "-m", "blackbox.recorder.capture.leftovers", store_url]
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
    from blackbox.recorder.store import open_store

    delay, give_up = 0.5, time.monotonic() + HAND_OFF_RETRY_SECONDS
    # The store is away: back off, then leave the journal to the next tap.
    while not ship_leftovers_quietly(directory, lambda: open_store(url)):
        if time.monotonic() + delay > give_up:
            return
        time.sleep(delay)
        delay = min(delay * 2, 30.0)


if __name__ == "__main__":
    _hand_off_main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
