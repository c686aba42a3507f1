"""Reading the few records of some kinds back from the whole log (policy loads, idle marks,
retention runs), for commands that list them across sessions.

Why it exists: the store indexes records by session and position, not by kind; these kinds are
rare, so one pass over the log in plain-tuple batches (`EventStore.read_log_rows`, no object per
record) is the simple way, and it works the same on every backend."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from blackbox.recorder.store import EventStore

# StoredEvent's field order, as `read_log_rows` gives it.
_SESSION, _WALL_NS, _KIND, _RAW = 1, 3, 5, 7


def records_of_kinds(
    store: EventStore, kinds: Iterable[str]
) -> Iterator[tuple[str, str, int, bytes]]:
    """(session id, kind, wall ns, raw) of every record of these kinds, in log order."""
    wanted = frozenset(kinds)
    for batch in store.read_log_rows():
        for row in batch:
            if row[_KIND] in wanted:
                yield row[_SESSION], row[_KIND], row[_WALL_NS], bytes(row[_RAW])
