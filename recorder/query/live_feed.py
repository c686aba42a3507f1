"""Follows the log as it grows: the feed of `blackbox tail -f` and the live views of `blackbox ui`.

Why it exists: a reader that only polls the store sees a frame when the shipper has committed it,
and the HTTP proxy ships once a second (the stdio tap every 0.2 s, more under load), so "on screen
within a second of crossing the wire" cannot be met from the store alone. `Follower` therefore
reads two sources: the store past a log position (`read_log`), and the journal segments of the
taps that are running (`blackbox.recorder.capture.journal`, the same files the shipper reads,
written for this store), from where they ended when following began. A record seen in both is given
once: the first copy wins, keyed by (session, seq), which the store and the journal share.

A record taken from a journal has no log position yet and no chain hash; its derived fields are
computed from its bytes exactly as the store's append computes them (`projection.derive`).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from blackbox.recorder.capture import JournalReader, StoreMark, parse_segment_name, read_store_mark
from blackbox.recorder.log import NewEvent, StoredEvent
from blackbox.recorder.store import EventStore, derive

# How often `follow` asks both sources for news when nothing came: well under the one second a
# frame may take to reach the screen, and cheap (one indexed query, one stat per journal file).
POLL_SECONDS = 0.1
# How many (session, seq) keys are remembered to drop the second copy of a record. A copy turns
# up at most a shipper cadence after the first (seconds), far fewer records than this.
DEDUP_WINDOW = 200_000


@dataclass(frozen=True, slots=True)
class Record:
    """A record as a follower yields it: the stored fields, `position` None (and `hash` empty)
    when it was read from a running tap's journal before the store had it."""

    session_id: str
    seq: int
    wall_ns: int
    mono_ns: int
    kind: str
    direction: str
    raw: bytes
    raw_size: int | None
    msg_type: str | None
    method: str | None
    rpc_id: str | None
    rpc_id_type: str | None
    tool: str | None
    is_error: bool | None
    error_code: int | None
    era: str | None
    position: int | None
    source: str  # "store" or "journal"

    @property
    def size(self) -> int:
        """The record's size on the wire (`raw` may hold only a prefix of an oversize frame)."""
        return self.raw_size if self.raw_size is not None else len(self.raw)


def from_stored(ev: StoredEvent) -> Record:
    return Record(
        ev.session_id,
        ev.seq,
        ev.wall_ns,
        ev.mono_ns,
        ev.kind,
        ev.direction,
        ev.raw,
        ev.raw_size,
        ev.msg_type,
        ev.method,
        ev.rpc_id,
        ev.rpc_id_type,
        ev.tool,
        None if ev.is_error is None else bool(ev.is_error),
        ev.error_code,
        ev.era,
        ev.position,
        "store",
    )


def from_journal(ev: NewEvent) -> Record:
    derived = derive(ev.kind, ev.raw)
    msg_type, method, rpc_id, rpc_id_type, tool, is_error, error_code, era, _degraded = derived
    return Record(
        ev.session_id,
        ev.seq,
        ev.wall_ns,
        ev.mono_ns,
        ev.kind,
        ev.direction,
        ev.raw,
        ev.raw_size,
        msg_type,
        method,
        rpc_id,
        rpc_id_type,
        tool,
        is_error,
        error_code,
        era,
        None,
        "journal",
    )


class _Seen:
    """The (session, seq) keys given out lately, oldest forgotten first."""

    def __init__(self, size: int = DEDUP_WINDOW) -> None:
        self._keys: set[tuple[str, int]] = set()
        self._order: deque[tuple[str, int]] = deque()
        self._size = size

    def add(self, key: tuple[str, int]) -> bool:
        """True when `key` is new (and remember it)."""
        if key in self._keys:
            return False
        self._keys.add(key)
        self._order.append(key)
        if len(self._order) > self._size:
            self._keys.discard(self._order.popleft())
        return True


class Follower:
    """Records stored or journaled after it was made, each once, as `poll()` finds them.

    `session_id` limits it to one session. `journal_dir` is where the taps of this store keep
    their journals (None: the store alone). `after_position` starts the store side elsewhere than
    at its current end (0: the whole log).
    """

    def __init__(
        self,
        store: EventStore,
        journal_dir: Path | None = None,
        session_id: str | None = None,
        after_position: int | None = None,
    ) -> None:
        self.store = store
        self.journal_dir = journal_dir
        self.session_id = session_id
        self.position = store.max_position() if after_position is None else after_position
        self._seen = _Seen()
        self._mark = StoreMark.for_url(store.url).fingerprint
        self._readers: dict[Path, JournalReader] = {}
        self._foreign: set[Path] = set()
        # Segments present now are read from their end: what they hold already is either stored
        # (before `position`) or will come from the store (after it).
        self._start_journals(at_end=True)

    # -- the journal side ----------------------------------------------------------------------

    def _segments(self) -> list[Path]:
        if self.journal_dir is None:
            return []
        try:
            names = list(self.journal_dir.iterdir())
        except OSError:
            return []
        found = [(parsed, p) for p in names if (parsed := parse_segment_name(p)) is not None]
        return [p for _parsed, p in sorted(found)]

    def _start_journals(self, at_end: bool) -> None:
        present = self._segments()
        for path in present:
            if path in self._readers or path in self._foreign:
                continue
            mark = read_store_mark(path)
            if mark is None or mark.fingerprint != self._mark:
                # Another store's journal (or one whose header is not written yet: look again).
                if mark is not None:
                    self._foreign.add(path)
                continue
            try:
                reader = JournalReader(path)
            except OSError:
                continue
            if at_end:
                with contextlib.suppress(OSError):
                    while reader.read(max_records=5000):
                        pass
            self._readers[path] = reader
        gone = set(self._readers) - set(present)
        for path in gone:
            self._readers.pop(path).close()
        self._foreign &= set(present)

    def _journal_records(self) -> list[Record]:
        self._start_journals(at_end=False)
        out: list[Record] = []
        for reader in list(self._readers.values()):
            try:
                batch = reader.read()
            except (OSError, UnicodeDecodeError, ValueError):
                continue
            for ev in batch:
                if self.session_id is None or ev.session_id == self.session_id:
                    out.append(from_journal(ev))
        return out

    # -- the store side ------------------------------------------------------------------------

    def _store_records(self, limit: int = 5000) -> list[Record]:
        out: list[Record] = []
        for ev in self.store.read_log(self.position, limit=limit):
            self.position = ev.position
            if self.session_id is None or ev.session_id == self.session_id:
                out.append(from_stored(ev))
        return out

    # -- the API --------------------------------------------------------------------------------

    def poll(self) -> list[Record]:
        """What is new since the last call, each record once: journal copies first (they are the
        freshest), then the store's; a session's records in seq order within each source."""
        fresh: list[Record] = []
        for rec in [*self._journal_records(), *self._store_records()]:
            if self._seen.add((rec.session_id, rec.seq)):
                fresh.append(rec)
        return fresh

    def mark_seen(self, records: list[Record]) -> None:
        """Treat these records as given already (a backlog printed before following)."""
        for rec in records:
            self._seen.add((rec.session_id, rec.seq))

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


def backlog(store: EventStore, session_id: str | None, count: int) -> list[Record]:
    """The last `count` records stored (of one session, or of the whole log), oldest first."""
    if count <= 0:
        return []
    if session_id is not None:
        last_seq, _ = store.head(session_id)
        start = max(0, last_seq - count)
        return [from_stored(ev) for ev in store.read_session(session_id, after_seq=start)]
    top = store.max_position()
    return [from_stored(ev) for ev in store.read_log(max(0, top - count))]


def follow(
    store: EventStore,
    journal_dir: Path | None = None,
    session_id: str | None = None,
    history: int = 0,
    poll_seconds: float = POLL_SECONDS,
    stop: Callable[[], bool] | None = None,
) -> Iterator[list[Record]]:
    """The last `history` records, then every new one as it is stored or journaled, in batches,
    until `stop()` says so (never, by default). An empty batch is yielded after each quiet poll
    so a caller can flush what it holds back (a request waiting for its response)."""
    follower = Follower(store, journal_dir, session_id)
    try:
        first = backlog(store, session_id, history)
        # The backlog ends at or before the follower's start: later records come through `poll`.
        first = [r for r in first if r.position is None or r.position <= follower.position]
        follower.mark_seen(first)
        if first:
            yield first
        while stop is None or not stop():
            batch = follower.poll()
            yield batch
            if not batch:
                time.sleep(poll_seconds)
    finally:
        follower.close()
