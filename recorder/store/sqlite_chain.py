"""Check one run of a session's hash chain in a SQLite store, in a process of its own.

Why it exists: verifying a chain is reading and hashing every stored byte in CPython, one core's
work however many the machine has. Each link needs only the stored hash before it
(`chain.intact_run`), so a long session splits into runs: `SqliteEventStore` checks the first
run itself while child processes running this module check the others, reading the same file
(WAL readers never block one another). Only what is needed is imported, so a child starts in a
few tens of milliseconds.

    python -m blackbox.recorder.store.sqlite_chain DATABASE SESSION FIRST LAST

prints one JSON line: `{"count": N, "seal_seq": S}` (`S` null when the run holds no seal) when
seq FIRST..LAST are all present and each links from the one before, `{"broken": true}` otherwise.
Any other outcome (no output, an exit status not 0) means the run was not checked here, and the
caller checks it itself.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from urllib.parse import quote

from blackbox.recorder.log import chain
from blackbox.recorder.store import layout

RUN_COLUMNS = ", ".join(chain.ChainRecord._fields)
RUN_READ = f"SELECT {RUN_COLUMNS} FROM event_log WHERE sid = ? AND seq BETWEEN ? AND ? ORDER BY seq"
HASH_AT = "SELECT hash FROM event_log WHERE sid = ? AND seq = ?"


def run_rows(conn: sqlite3.Connection, session_id: str, first: int, last: int) -> Iterator[tuple]:
    """The records of seq FIRST..LAST, streamed in chunks (bounded memory)."""
    cursor = conn.cursor()
    try:
        cursor.execute(RUN_READ, (layout.sid_bytes(session_id), first, last))
        while chunk := cursor.fetchmany(2000):
            yield from chunk
    finally:
        cursor.close()


def check_run(
    conn: sqlite3.Connection, session_id: str, first: int, last: int
) -> tuple[int, int | None] | None:
    """(how many records, the seq of the first seal) for an intact run, else None."""
    if first == 1:
        prev = chain.genesis(session_id)
    else:
        found = conn.execute(HASH_AT, (layout.sid_bytes(session_id), first - 1)).fetchone()
        if found is None:
            return None
        prev = found[0]
    result = chain.intact_run(session_id, run_rows(conn, session_id, first, last), first, prev)
    if result is None or result[0] != last - first + 1:
        return None
    count, seal = result
    return count, None if seal is None else seal.seq


def main(argv: list[str]) -> int:
    database, session_id, first, last = argv[0], argv[1], int(argv[2]), int(argv[3])
    conn = sqlite3.connect(f"file:{quote(os.path.abspath(database))}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA mmap_size = 268435456")  # as the store's own connections read
        result = check_run(conn, session_id, first, last)
    finally:
        conn.close()
    doc = {"broken": True} if result is None else {"count": result[0], "seal_seq": result[1]}
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
