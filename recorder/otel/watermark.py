"""What has been sent already, so that no span is sent twice.

Why a file in the data directory and not a record in the store: the spans of a session are sent
while it is open (live) and after it is sealed (batch), and a sealed session takes no more
records; the exporter needs only read access to the store (a read-only PostgreSQL role works);
and the audit log is not the place for delivery bookkeeping of a side channel. The file is a
small SQLite database, safe for the live followers and a batch export to update at once, and it
survives retention (a removed session's row is simply never consulted again).

What is kept, per store (keyed by a hash of its URL, never the URL: it may hold a password):
- per session, the seq of the last record whose spans were all sent. Spans of a session complete
  in seq order and are sent in that order, so "sent" is exactly "ends at or before that seq";
- the log position a batch export may start scanning from (everything before it was sent).
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path

from blackbox.recorder import private_dir, private_file

FILE_NAME = "otel-watermark.sqlite"


def store_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:24]


class Watermark:
    """The sent marks of one store."""

    def __init__(self, path: Path, store_url: str) -> None:
        self.path = path
        self.key = store_key(store_url)
        # 0600 before SQLite opens it, in a data directory made 0700 if made here.
        private_file(private_dir(path.parent) / path.name)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS sent (store TEXT, session_id TEXT, seq INTEGER,"
                " PRIMARY KEY (store, session_id))"
            )
            db.execute("CREATE TABLE IF NOT EXISTS scan (store TEXT PRIMARY KEY, position INTEGER)")

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                yield db
        finally:
            db.close()

    def position(self) -> int:
        with self._db() as db:
            row = db.execute("SELECT position FROM scan WHERE store = ?", (self.key,)).fetchone()
        return int(row[0]) if row else 0

    def sent(self) -> dict[str, int]:
        """Every session's sent seq."""
        with self._db() as db:
            rows = db.execute("SELECT session_id, seq FROM sent WHERE store = ?", (self.key,))
            return {sid: int(seq) for sid, seq in rows}

    def sent_seq(self, session_id: str) -> int:
        with self._db() as db:
            row = db.execute(
                "SELECT seq FROM sent WHERE store = ? AND session_id = ?", (self.key, session_id)
            ).fetchone()
        return int(row[0]) if row else 0

    def advance(self, sessions: Mapping[str, int], position: int | None = None) -> None:
        """Mark spans sent: per session up to a seq (never backwards), and the scan position."""
        with self._db() as db:
            db.executemany(
                "INSERT INTO sent (store, session_id, seq) VALUES (?, ?, ?)"
                " ON CONFLICT (store, session_id) DO UPDATE SET seq = max(seq, excluded.seq)",
                [(self.key, sid, seq) for sid, seq in sessions.items()],
            )
            if position is not None:
                db.execute(
                    "INSERT INTO scan (store, position) VALUES (?, ?) ON CONFLICT (store)"
                    " DO UPDATE SET position = max(position, excluded.position)",
                    (self.key, position),
                )
