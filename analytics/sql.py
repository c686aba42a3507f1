"""`blackbox sql`: DuckDB SQL over the analytics views, read-only, streamed, cancellable.

Each query first refreshes the Parquet copy (almost free when nothing is new), then runs on a
fresh read-only connection confined to the copy (`blackbox.analytics.views.confine`), so an
interactive session always sees what was recorded meanwhile and reads nothing else.

The query runs on a thread of its own and hands its rows over in batches through a short queue:
the caller prints each batch as it comes (memory stays flat and the first line shows at once,
however many rows the query returns), and stays free to stop it. DuckDB runs a query without
the GIL and without looking at signals, so a Ctrl-C or a time limit is turned into `interrupt()`
on the connection, which ends the query within milliseconds.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
from blackbox.analytics.parquet import Progress
from blackbox.analytics.reports import refreshed_connection
from blackbox.analytics.views import DEFAULT_WINDOW_S, QueryError, check_read_only, query_error
from blackbox.recorder.store import EventStore

# Rows per batch handed to the printer (DuckDB's own vector size).
BATCH_ROWS = 2048
# Batches waiting to be printed: what bounds the memory of a large result.
QUEUED_BATCHES = 4
# How often a waiting caller looks at the clock (a time limit is kept to about this).
POLL_S = 0.05
# How long closing waits for an interrupted query to let go of the connection.
JOIN_S = 10.0


class QueryTimedOut(QueryError):
    """A query that ran past its time limit (stopped)."""


class QueryCancelled(QueryError):
    """A query stopped by the user (Ctrl-C)."""


class RunningQuery:
    """One query running on its own thread: `columns`, then its rows in batches (iterate).

    Use it as a context manager: leaving it (normally, on an error or on KeyboardInterrupt)
    stops the query and closes the connection.
    """

    def __init__(
        self, con: duckdb.DuckDBPyConnection, sql: str, timeout_s: float | None = None
    ) -> None:
        check_read_only(sql)
        self._con = con
        # (kind, value), the value's type set by its kind: "columns" list[str], "rows"
        # list[tuple], "error" the exception, "end" None.
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=QUEUED_BATCHES)
        self._stopped = threading.Event()
        self._timeout_s = timeout_s
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(sql,), daemon=True)
        self._thread.start()
        self.columns: list[str] = []
        try:
            kind, value = self._next()
        except BaseException:
            self.close()
            raise
        assert kind == "columns"
        self.columns = value

    # -- the query's thread -------------------------------------------------------------------

    def _run(self, sql: str) -> None:
        try:
            cursor = self._con.execute(sql)
            self._put("columns", [d[0] for d in cursor.description or []])
            while not self._stopped.is_set():
                rows = cursor.fetchmany(BATCH_ROWS)
                if not rows:
                    break
                self._put("rows", rows)
            self._put("end", None)
        except BaseException as exc:  # handed to the caller, raised there
            self._put("error", exc)

    def _put(self, kind: str, value: object) -> None:
        while not self._stopped.is_set():
            try:
                self._queue.put((kind, value), timeout=POLL_S)
                return
            except queue.Full:
                continue

    # -- the caller's side --------------------------------------------------------------------

    def _next(self) -> tuple[str, Any]:
        while True:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self.close()
                raise QueryTimedOut(
                    f"query stopped: it ran longer than its time limit of {self._timeout_s:g}s"
                )
            try:
                kind, value = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if kind == "error":
                self.close()
                if isinstance(value, duckdb.Error):
                    raise query_error(value) from None
                raise value
            return kind, value

    def __iter__(self) -> Iterator[list[tuple]]:
        while not self._done:
            kind, value = self._next()
            if kind == "end":
                self._done = True
                break
            yield value
        self.close()

    def cancel(self) -> None:
        """Stop the query now (from any thread)."""
        self._stopped.set()
        self._con.interrupt()

    def close(self) -> None:
        """Stop the query if it still runs and close the connection."""
        if self._thread.is_alive():
            self.cancel()
            self._thread.join(JOIN_S)
        if not self._thread.is_alive():
            self._con.close()
        self._done = True

    def __enter__(self) -> RunningQuery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_sql(
    store: EventStore,
    base_dir: Path,
    sql: str,
    progress: Progress | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    timeout_s: float | None = None,
) -> RunningQuery:
    """Refresh the copy and start one read-only query, to be read batch by batch.

    Writes (CREATE, INSERT, COPY, ATTACH, SET, ...) raise `ReadOnlyViolation`; reaching past the
    views (another file, a URL, an extension, a setting) raises `OutsideAnalytics`; a query past
    `timeout_s` raises `QueryTimedOut`; other failures raise `QueryError` with DuckDB's one-line
    message.
    """
    con, _ = refreshed_connection(store, base_dir, progress, window_s)
    try:
        return RunningQuery(con, sql, timeout_s)
    except BaseException:
        con.close()
        raise


def run_sql(
    store: EventStore,
    base_dir: Path,
    sql: str,
    progress: Progress | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    timeout_s: float | None = None,
) -> tuple[list[str], list[tuple]]:
    """Refresh the copy and run one read-only query, whole: (column names, rows)."""
    with start_sql(store, base_dir, sql, progress, window_s, timeout_s) as running:
        rows = [row for batch in running for row in batch]
        return running.columns, rows
