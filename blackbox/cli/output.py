"""Everything the CLI renders: rows as a table, markdown, CSV, JSON or JSONL, the rows of the
store's listings (sessions, one session's timeline), reports, and progress lines on stderr.

Commands build data and hand it here, so every listing looks and escapes alike. Output is plain
text with no colour or terminal control codes: what a pipe, a file or a test reads is what a
terminal shows. Progress goes to stderr so stdout stays machine-readable.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from blackbox.recorder.query import COLUMNS as timeline_columns
from blackbox.recorder.query import listing, timeline_rows
from blackbox.recorder.store import EventStore

if TYPE_CHECKING:
    from blackbox.analytics import Report

FORMATS = ("table", "json", "jsonl", "csv")


# ---------------------------------------------------------------------------------------------
# Rows


def render(rows: Sequence[dict], fmt: str, columns: Sequence[str] | None = None) -> str:
    """Rows (dicts sharing keys) in the given format (table, json, jsonl, csv or markdown), as one
    string without a trailing newline."""
    cols = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    if fmt == "json":
        return json.dumps([{c: r.get(c) for c in cols} for r in rows], indent=2, default=str)
    if fmt == "jsonl":
        return "\n".join(json.dumps({c: r.get(c) for c in cols}, default=str) for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")
    if fmt == "markdown":
        return markdown(rows, cols)
    return _table(rows, cols)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _table(rows: Sequence[dict], cols: list[str]) -> str:
    if not rows:
        return "(no rows)"
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
    return "\n".join(lines)


def _md_cell(value: object) -> str:
    return _cell(value).replace("|", "\\|").replace("\n", " ")


def markdown(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Rows as a GitHub-flavoured markdown table (pipes escaped, newlines folded)."""
    if not rows:
        return "(no rows)"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_md_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def render_stream(
    columns: Sequence[str], batches: Iterable[Sequence[tuple]], fmt: str
) -> Iterator[str]:
    """Rows that arrive in batches, rendered as they arrive: text chunks whose concatenation is
    `render(all rows, fmt, columns)` and a newline. Nothing but the current batch is held, so a
    result of any size prints in bounded memory. A table sizes its columns on the first batch and
    widens them when a later row needs it (from that row on)."""
    cols = list(columns)
    widths: list[int] | None = None
    started = False
    for batch in batches:
        if not batch:
            continue
        if fmt == "table":
            cells = [[_cell(v) for v in row] for row in batch]
            head = []
            if widths is None:
                widths = [len(c) for c in cols]
            widths = [max(w, *(len(r[i]) for r in cells)) for i, w in enumerate(widths)]
            if not started:
                head = [
                    "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip(),
                    "  ".join("-" * w for w in widths),
                ]
            body = [
                "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
                for r in cells
            ]
            yield "\n".join(head + body) + "\n"
        elif fmt == "csv":
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            if not started:
                writer.writerow(cols)
            writer.writerows(batch)
            yield buf.getvalue()
        elif fmt == "markdown":
            lines = [] if started else ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in batch]
            yield "\n".join(lines) + "\n"
        elif fmt == "jsonl":
            yield "".join(
                json.dumps(dict(zip(cols, row, strict=True)), default=str) + "\n" for row in batch
            )
        else:  # json: one array, its items indented as json.dumps(rows, indent=2) does
            items = ",\n".join(
                textwrap.indent(
                    json.dumps(dict(zip(cols, row, strict=True)), indent=2, default=str), "  "
                )
                for row in batch
            )
            yield ("," if started else "[") + "\n" + items
        started = True
    if not started:
        yield render([], fmt, cols) + "\n"
    elif fmt == "json":
        yield "\n]\n"


def render_report(report: Report, fmt: str) -> str:
    """An analytics report: one block per section (json: one document of all sections)."""
    if fmt == "json":
        doc = {
            "report": report.kind,
            "by": report.by,
            "filters": {k: v for k, v in vars(report.filters).items() if v is not None},
            "sections": {s.name: s.rows for s in report.sections},
        }
        return json.dumps(doc, indent=2, default=str)
    blocks = []
    for section in report.sections:
        if fmt == "markdown":
            blocks.append(f"## {section.title}\n\n{markdown(section.rows, section.columns)}")
        elif fmt == "csv":
            body = render(section.rows, "csv", section.columns)
            blocks.append(body if len(report.sections) == 1 else f"# {section.name}\n{body}")
        else:
            blocks.append(f"{section.title}\n{render(section.rows, 'table', section.columns)}")
    return "\n\n".join(blocks)


# ---------------------------------------------------------------------------------------------
# The store's listings: sessions and one session's timeline


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="milliseconds")


# The sessions listing lives in recorder/query/listing.py (counts, outcome, handles, filters).
SESSION_COLUMNS = listing.COLUMNS


def list_session_rows(store: EventStore, limit: int | None = None) -> list[dict]:
    """Sessions newest first, as rows (replays hidden)."""
    return [s.row() for s in listing.list_summaries(store, listing.SessionFilter(limit=limit))]


TIMELINE_COLUMNS = timeline_columns


def timeline(store: EventStore, session_id: str) -> list[dict]:
    """One session's records as rows (recorder/query/timeline.py), offsets relative to its first."""
    return list(timeline_rows(store.read_session(session_id)))


# ---------------------------------------------------------------------------------------------
# Progress (stderr)

# Analytics refreshes shorter than this many records stay quiet.
QUIET_BELOW = 20_000


def refresh_progress(done: int, total: int) -> None:
    """Progress of bringing the analytics copy up to date; quiet for small refreshes."""
    if total >= QUIET_BELOW:
        click.echo(f"blackbox: updating the analytics copy: {done:,}/{total:,} records", err=True)


class Throttled:
    """Print progress to stderr at most once a second, and the last state at the end."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self, message: str, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self.last >= 1.0:
            self.last = now
            click.echo(message, err=True)
