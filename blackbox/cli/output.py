"""Everything the CLI renders: rows as a table, markdown, CSV, JSON or JSONL, the rows of the
store's listings (sessions, one session's timeline), reports, and progress lines on stderr.

Commands build data and hand it here, so every listing looks and escapes alike. Tables and text
fit the terminal (`terminal_width`: COLUMNS, else the terminal's own width; a pipe or a file gets
every character), long text is paged on a terminal only, colour is for a terminal without NO_COLOR,
and progress bars go to stderr, on a terminal only, so stdout stays machine-readable.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from blackbox.analytics import Report

FORMATS = ("table", "json", "jsonl", "csv")


# ---------------------------------------------------------------------------------------------
# The terminal: width, colour, paging

# Below this many columns nothing fits anyway: lines are cut at it rather than at fewer.
NARROWEST = 20
# A table column is never cut below this many characters (its header's first letters still say
# which column it is).
CELL_FLOOR = 4


def _isatty(stream: IO[Any]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def terminal_width() -> int | None:
    """The columns output must fit: the command's `terminal_width` (click's context setting),
    else, when stdout is a terminal, COLUMNS or the terminal's own width; None (no limit) for a
    pipe or a file, which get every character whatever COLUMNS says (test runners and CI
    export it)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.terminal_width:
        return max(NARROWEST, ctx.terminal_width)
    if _isatty(sys.stdout):  # get_terminal_size reads COLUMNS first, then asks the terminal
        return max(NARROWEST, shutil.get_terminal_size().columns)
    return None


def cut(text: str, width: int | None) -> str:
    """`text` in at most `width` characters, cut with `…` (whole when `width` is None)."""
    if width is None or len(text) <= width:
        return text
    return text[: width - 1] + "…" if width > 0 else ""


def fit_widths(
    widths: Sequence[int], limit: int, headers: Sequence[str] = (), gap: int = 2
) -> tuple[list[int], int]:
    """Column widths whose row fits `limit`, and the gap to put between columns: the widest
    columns give way first, so short columns (seq, kind, counts) stay whole while an excerpt or
    a name shrinks. A column keeps its header's width while it can, then `CELL_FLOOR`; the gap
    narrows to one space before headers are cut."""
    names = list(headers) or [""] * len(widths)
    attempts = [
        (gap, [min(w, max(len(h), CELL_FLOOR)) for w, h in zip(widths, names, strict=True)]),
        (1, [min(w, max(len(h), CELL_FLOOR)) for w, h in zip(widths, names, strict=True)]),
        (1, [min(w, CELL_FLOOR) for w in widths]),
    ]
    if sum(widths) + gap * (len(widths) - 1) <= limit:
        return list(widths), gap
    for space, floors in attempts:
        room = limit - space * (len(widths) - 1)
        if sum(floors) <= room:
            break
    # The largest cap under which every column, cut to it (never below its floor), fits.
    low, high = 0, max(widths)
    while low < high:
        cap = (low + high + 1) // 2
        if sum(max(f, min(w, cap)) for w, f in zip(widths, floors, strict=True)) <= room:
            low = cap
        else:
            high = cap - 1
    fitted = [max(f, min(w, low)) for w, f in zip(widths, floors, strict=True)]
    # What the cap leaves over (less than one per cut column) goes to the last cut columns,
    # where a table keeps its longest text (an excerpt, a command).
    spare = room - sum(fitted)
    for i in reversed(range(len(widths))):
        if spare <= 0:
            break
        if fitted[i] < widths[i]:
            fitted[i] += 1
            spare -= 1
    return fitted, space


def wrap(text: str, width: int | None = None) -> str:
    """Text whose long lines are wrapped, not cut, to `width` (default: `terminal_width()`): each
    continuation is indented two more than its line, so a diff or a report stays whole."""
    limit = width if width is not None else terminal_width()
    if limit is None:
        return text
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= limit:
            out.append(line)
            continue
        indent = " " * min(len(line) - len(line.lstrip(" ")) + 2, limit // 2)
        out.extend(
            textwrap.wrap(
                line,
                limit,
                subsequent_indent=indent,
                break_long_words=True,
                break_on_hyphens=False,
            )
            or [""]
        )
    return "\n".join(out)


def colour() -> bool | None:
    """What to pass as `click.echo(color=...)`: False under NO_COLOR (any value, no-color.org),
    else None, click's own rule (colour on a terminal, stripped elsewhere)."""
    return False if os.environ.get("NO_COLOR") else None


def page(text: str, no_pager: bool = False) -> None:
    """Print `text`; through the pager ($PAGER, else less or more) when stdout is a terminal,
    the text is taller than it and `no_pager` is not set. A pipe never waits on a pager."""
    tall = text.count("\n") + 1 >= shutil.get_terminal_size().lines
    if not no_pager and tall and _isatty(sys.stdout):
        click.echo_via_pager(text, color=colour())
    else:
        click.echo(text, color=colour())


pager_option = click.option(
    "--no-pager", is_flag=True, help="Print long output straight out, never through a pager."
)


class ProgressBar:
    """A progress bar on stderr, on a terminal only (a log or a pipe gets nothing from it). Call
    it with (done, total) as a library loop reports them; a new `label` starts a new bar."""

    def __init__(self, label: str, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = _isatty(sys.stderr) if enabled is None else enabled
        self._bar: Any = None
        self._done = 0

    def __call__(self, done: int, total: int, label: str | None = None) -> None:
        if not self.enabled or total <= 0:
            return
        if self._bar is not None and (label not in (None, self.label) or total != self._bar.length):
            self.close()
        if label is not None:
            self.label = label
        if self._bar is None:
            self._bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self._bar.__enter__()
            self._done = 0
        self._bar.update(max(0, min(done, total) - self._done))
        self._done = max(self._done, min(done, total))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_lines(bar: ProgressBar, fallback: Callable[[str], None]) -> Callable[[str], None]:
    """Where a command's progress lines go: nowhere while a bar shows it, else `fallback`."""
    return (lambda _message: None) if bar.enabled else fallback


# ---------------------------------------------------------------------------------------------
# Rows


def render(
    rows: Sequence[dict], fmt: str, columns: Sequence[str] | None = None, width: int | None = None
) -> str:
    """Rows (dicts sharing keys) in the given format (table, json, jsonl, csv or markdown), as one
    string without a trailing newline. A table fits `width` columns (default: `terminal_width()`),
    its widest cells cut with `…`; the other formats carry every value whole."""
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
    return _table(rows, cols, width)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _table(rows: Sequence[dict], cols: list[str], width: int | None = None) -> str:
    if not rows:
        return "(no rows)"
    cells = [[_cell(r.get(c)).replace("\n", " ") for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    limit = width if width is not None else terminal_width()
    gap = 2
    if limit is not None:
        widths, gap = fit_widths(widths, limit, cols)
    lines = [_row(cols, widths, gap, limit), _row(["-" * w for w in widths], widths, gap, limit)]
    lines.extend(_row(row, widths, gap, limit) for row in cells)
    return "\n".join(lines)


def _row(values: Sequence[str], widths: Sequence[int], gap: int, limit: int | None) -> str:
    """One line of a table: each cell cut to its column, the line cut to `limit`."""
    cells = (cut(v, w).ljust(w) for v, w in zip(values, widths, strict=True))
    text = (" " * gap).join(cells).rstrip()
    return cut(text, limit) if limit is not None else text


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
    columns: Sequence[str], batches: Iterable[Sequence[tuple]], fmt: str, width: int | None = None
) -> Iterator[str]:
    """Rows that arrive in batches, rendered as they arrive: text chunks whose concatenation is
    `render(all rows, fmt, columns)` and a newline. Nothing but the current batch is held, so a
    result of any size prints in bounded memory. A table sizes its columns on the first batch and
    widens them when a later row needs it (from that row on); it fits `width` columns (default:
    `terminal_width()`), each batch fitted as `render` fits a whole table."""
    cols = list(columns)
    limit = width if width is not None else terminal_width()
    widths: list[int] | None = None
    started = False
    for batch in batches:
        if not batch:
            continue
        if fmt == "table":
            cells = [[_cell(v).replace("\n", " ") for v in row] for row in batch]
            if widths is None:
                widths = [len(c) for c in cols]
            widths = [max(w, *(len(r[i]) for r in cells)) for i, w in enumerate(widths)]
            # Earlier batches are printed: the columns fit from this batch on, as wide as the
            # rows so far need and the terminal allows.
            shown, gap = fit_widths(widths, limit, cols) if limit is not None else (widths, 2)
            head = []
            if not started:
                head = [
                    _row(cols, shown, gap, limit),
                    _row(["-" * w for w in shown], shown, gap, limit),
                ]
            body = [_row(r, shown, gap, limit) for r in cells]
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


def stderr_line(document: str | bytes) -> str | None:
    """The line a `stderr` record's document holds (its `line`); None when it holds none."""
    try:
        line = json.loads(document)["line"]
    except (ValueError, TypeError, KeyError):
        return None
    return str(line).rstrip("\r\n")


def stderr_run(lines: Sequence[str]) -> str:
    """A run of a server's stderr lines as one row's text: `(3 lines) one ⏎ two ⏎ three`."""
    return f"({len(lines)} lines) " + " ⏎ ".join(lines)


def _stderr_line(row: dict) -> str:
    """The line a `stderr` row holds, else its excerpt."""
    line = stderr_line(row.get("payload") or "")
    return str(row.get("excerpt") or "") if line is None else line


def group_stderr(rows: Iterable[dict]) -> list[dict]:
    """Timeline rows with each run of consecutive `stderr` records as one row: its seqs as a
    range (`12-15`), its bytes summed, its lines joined with ` ⏎ ` (a server's traceback reads as
    one block, not one row per line). Other rows pass unchanged."""
    out: list[dict] = []
    run: list[dict] = []

    def close_run() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            lines = [_stderr_line(r) for r in run]
            out.append(
                run[0]
                | {
                    "seq": f"{run[0]['seq']}-{run[-1]['seq']}",
                    "bytes": sum(r.get("bytes") or 0 for r in run),
                    "excerpt": stderr_run(lines),
                }
            )
        run.clear()

    for row in rows:
        if row.get("kind") == "stderr":
            run.append(row)
            continue
        close_run()
        out.append(row)
    close_run()
    return out


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
