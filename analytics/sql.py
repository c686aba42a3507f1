"""`blackbox sql`: DuckDB SQL over the analytics views, read-only.

Each query first refreshes the Parquet copy (almost free when nothing is new), then runs on a
fresh read-only connection, so an interactive session always sees what was recorded meanwhile.
"""

from __future__ import annotations

from pathlib import Path

from analytics.parquet import Progress
from analytics.reports import refreshed_connection
from analytics.views import DEFAULT_WINDOW_S, query
from recorder.store import EventStore


def run_sql(
    store: EventStore,
    base_dir: Path,
    sql: str,
    progress: Progress | None = None,
    window_s: float = DEFAULT_WINDOW_S,
) -> tuple[list[str], list[tuple]]:
    """Refresh the copy and run one read-only query: (column names, rows).

    Writes (CREATE, INSERT, COPY, ATTACH, SET, ...) raise `ReadOnlyViolation`; other failures
    raise `QueryError` with DuckDB's one-line message.
    """
    con, _ = refreshed_connection(store, base_dir, progress, window_s)
    try:
        return query(con, sql)
    finally:
        con.close()
