"""What `verify` checks beyond the chain, as plain functions: how a stored derived value compares
with a recomputed one, and how a mismatch is worded. `SqlEventStore.verify` streams the records;
`blackbox.recorder.store.projection` recomputes what they should say."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from blackbox.recorder.log import DERIVED, Kind, chain, fit_stored, stored_agrees

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPICursor

ERA_INDEX = DERIVED.index("era")
STARTED = str(Kind.SESSION_STARTED)


def prefetched(cursor: DBAPICursor, size: int) -> Iterator[Sequence[Any]]:
    """`cursor.fetchmany(size)` batches, the next fetched on a thread while the caller works on
    the current one: the database reads while Python re-derives (the driver waits without the
    GIL)."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(cursor.fetchmany, size)
        while chunk := pending.result():
            pending = pool.submit(cursor.fetchmany, size)
            yield chunk


def stored_value(column: str, value: object) -> object:
    """A stored derived value as `derive` gives it: SQLite keeps a boolean as 0 or 1, and a
    SQLite record appended before the derived text columns were fitted (`jsonrpc.fit_text`) may
    hold NUL where the view now holds U+FFFD, or an era longer than the view now keeps."""
    if column == "is_error" and value is not None and value in (0, 1):
        return bool(value)
    return fit_stored(column, value)


def derived_mismatch(
    session_id: str, seq: int, stored: Sequence, expected: Sequence
) -> list[chain.Finding]:
    return [
        chain.Finding(
            session_id,
            seq,
            "derived",
            f"{column}: stored {have!r}, its raw bytes say {want!r}",
        )
        for column, have, want in zip(DERIVED, stored, expected, strict=True)
        if not stored_agrees(column, stored_value(column, have), want)
    ]


def projection_mismatch(
    session_id: str, column: str, stored: object, expected: object
) -> chain.Finding:
    if isinstance(stored, bytes):
        stored = stored.hex()
    if isinstance(expected, bytes):
        expected = expected.hex()
    return chain.Finding(
        session_id,
        None,
        "projection",
        f"sessions.{column}: stored {stored!r}, the session's records say {expected!r}",
    )
