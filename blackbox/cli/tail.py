"""`blackbox tail`: records as they are stored, a request and its response on one line.

Why it exists: debugging a live MCP session means watching it, not querying it afterwards. This
module turns the `blackbox.recorder.query.live_feed` feed into lines: a request is held back briefly
(`HOLD_S`) so that, when its response comes quickly, both print as one line with the latency; a slow
call prints its request at once and its response later with the latency. Errors and faults stand out
(red on a terminal; plain words when piped, as `click.echo` strips colour off a pipe). Payloads
longer than the line allows (`PAYLOAD_CHARS`, or the terminal's width) are cut and their size shown.
Each line names its session by handle (`blackbox.recorder.query.handles`) and by name, the server.
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click

from blackbox.cli.output import stderr_line, stderr_run
from blackbox.recorder import BlackboxError
from blackbox.recorder.log import request_key, response_key
from blackbox.recorder.query import Record, backlog, follow, handles_for, session_handle
from blackbox.recorder.store import EventStore

# How long a request waits for its response to share its line: short enough to keep a frame on
# screen within a second of the wire, long enough that most calls print as one line.
HOLD_S = 0.3
# Characters of payload shown per message before it is cut.
PAYLOAD_CHARS = 160
# Characters of a session's name shown on each line: enough to tell servers apart.
NAME_CHARS = 20
# How often a session the store does not hold yet (its records read from a running tap's
# journal) is looked up again for its name.
NAME_RETRY_S = 1.0


class SessionLabels:
    """Each line's session: its handle (the one `sessions` prints and `show` takes) and its name
    (the server), read from the store once per session."""

    def __init__(self, store: EventStore, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self._known: dict[str, str] = {}
        self._missing: dict[str, float] = {}  # session id -> when the store last lacked it

    def __call__(self, session_id: str) -> str:
        known = self._known.get(session_id)
        if known is not None:
            return known
        handle = session_handle(self.store, session_id)
        tried = self._missing.get(session_id)
        if tried is not None and self.clock() - tried < NAME_RETRY_S:
            return f"{handle} -"
        try:
            name = self.store.session(session_id).name
        except BlackboxError:  # not shipped yet: the journal is ahead of the store
            self._missing[session_id] = self.clock()
            return f"{handle} -"
        self._missing.pop(session_id, None)
        label = f"{handle} {_cut(name or '-', NAME_CHARS)}"
        self._known[session_id] = label
        return label


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split()) or "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def _handle_only(session_id: str) -> str:
    return handles_for([session_id])[session_id]


@dataclass(frozen=True)
class TailFilter:
    """Which records a tail shows: by method and by tool (shell globs), errors and faults only."""

    method: str | None = None
    tool: str | None = None
    errors: bool = False

    def keeps(self, method: str | None, tool: str | None, failed: bool) -> bool:
        if self.method is not None and not fnmatch.fnmatchcase(method or "", self.method):
            return False
        if self.tool is not None and not fnmatch.fnmatchcase(tool or "", self.tool):
            return False
        return not (self.errors and not failed)


def _clock(wall_ns: int) -> str:
    return datetime.fromtimestamp(wall_ns / 1e9, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} kB"
    return f"{n / 1024 / 1024:.1f} MB"


def payload(rec: Record, width: int = PAYLOAD_CHARS) -> str:
    """The record's bytes as one line of text, cut at `width` with its full size shown."""
    text = rec.raw[: width * 4].decode("utf-8", errors="replace")
    text = " ".join(text.split())
    if len(text) <= width and rec.raw_size is None and len(rec.raw) <= width * 4:
        return text
    return f"{text[: width - 1]}… ({_size(rec.size)})"


def failed(rec: Record) -> bool:
    """An error response, a result with isError, or a fault."""
    return rec.kind == "fault" or rec.msg_type == "error" or bool(rec.is_error)


def _outcome(rec: Record) -> str:
    if rec.msg_type == "error":
        return "error" + (f" {rec.error_code}" if rec.error_code is not None else "")
    if rec.is_error:
        return "isError"
    return "ok"


def _ms(ns: int) -> str:
    ms = ns / 1e6
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


@dataclass
class _Held:
    rec: Record
    since: float
    printed: bool = False


@dataclass
class TailFormatter:
    """Records in, text lines out (with click styles; `click.echo` drops them off a terminal)."""

    filt: TailFilter = field(default_factory=TailFilter)
    hold_s: float = HOLD_S
    clock: Callable[[], float] = time.monotonic
    # The terminal's columns: each line's payloads shrink to fit them (None: `PAYLOAD_CHARS`).
    width: int | None = None
    # A session id -> "handle name" (`SessionLabels`); without a store, the id's handle alone.
    label: Callable[[str], str] = _handle_only
    _pending: dict[tuple[str, tuple], _Held] = field(default_factory=dict)

    def _prefix(self, rec: Record) -> str:
        return f"{_clock(rec.wall_ns)} {self.label(rec.session_id)} {rec.seq:>5}"

    def _payload(self, rec: Record, head: str, cap: int = PAYLOAD_CHARS, share: int = 1) -> str:
        """The payload in what is left of the line after `head` (its `share`-th part of it)."""
        if self.width is None:
            return payload(rec, cap)
        room = min(cap, (self.width - len(click.unstyle(head)) - 2) // share)
        if room < 8:
            return ""
        text = payload(rec, room)
        if len(text) > room:  # the size shown after a cut payload takes room too
            text = payload(rec, max(2, room - (len(text) - room)))
        return text[:room]

    def _fit(self, line: str) -> str:
        """The line within `width` (styles dropped only when it has to be cut)."""
        if self.width is None or len(click.unstyle(line)) <= self.width:
            return line
        plain = click.unstyle(line)
        return plain[: self.width - 1] + "…"

    def _request_line(self, rec: Record) -> str | None:
        if not self.filt.keeps(rec.method, rec.tool, False):
            return None
        arrow = "→" if rec.direction == "c2s" else "⇐"
        head = f"{self._prefix(rec)} {arrow} {rec.method}"
        return self._fit(f"{head}  {self._payload(rec, head)}")

    def _pair_line(self, req: Record, resp: Record, joined: bool) -> str | None:
        bad = failed(resp)
        if not self.filt.keeps(req.method, req.tool, bad):
            return None
        latency = _ms(resp.mono_ns - req.mono_ns)
        outcome = _outcome(resp)
        style = {"fg": "red", "bold": True} if bad else {"fg": "green"}
        verdict = click.style(f"{outcome} {latency}", **style)
        tail = f"  ⇒ {outcome} {latency}"
        if joined:
            arrow = "→" if req.direction == "c2s" else "⇐"
            head = f"{self._prefix(req)} {arrow} {req.method}"
            # The request and the response share what the line has left.
            head += f"  {self._payload(req, head + tail + '  ', 80, share=2)}"
        else:
            head = f"{self._prefix(resp)} ← {req.method} (seq {req.seq})"
        return self._fit(f"{head}  ⇒ {verdict}  {self._payload(resp, head + tail)}")

    def _single_line(self, rec: Record) -> str | None:
        bad = failed(rec)
        if not self.filt.keeps(rec.method, rec.tool, bad):
            return None
        if rec.kind == "frame":
            what = rec.method or rec.msg_type or "frame"
            arrow = {"c2s": "→", "s2c": "←"}.get(rec.direction, "·")
            head = f"{self._prefix(rec)} {arrow} {what}"
        else:
            head = f"{self._prefix(rec)} · {rec.kind}"
        if rec.kind == "fault":
            head = "FAULT " + head
        line = f"{head}  {self._payload(rec, head)}"
        if rec.kind == "fault":
            return click.style(line, fg="red", bold=True)
        if bad:
            return click.style(line, fg="red")
        if rec.kind == "stderr":
            return click.style(line, dim=True)
        return line

    def _stderr_lines(self, run: list[Record]) -> Iterator[str]:
        """A run of one session's consecutive stderr records as one line, as `show` groups
        them: the seqs as a range, the lines joined (a traceback reads as one block)."""
        if len(run) < 2:
            line = self._single_line(run[0]) if run else None
            if line is not None:
                yield line
            return
        if not self.filt.keeps(None, None, False):
            return
        first = run[0]
        seqs = f"{first.seq}-{run[-1].seq}"
        head = f"{_clock(first.wall_ns)} {self.label(first.session_id)} {seqs:>5} · stderr"
        lines = []
        for rec in run:
            line = stderr_line(rec.raw)  # None: a document cut short (an oversize line)
            lines.append(payload(rec) if line is None else _cut(line, PAYLOAD_CHARS))
        text = stderr_run(lines)
        if self.width is not None:
            text = _cut(text, max(1, self.width - len(head) - 2))
        yield click.style(self._fit(f"{head}  {text}"), dim=True)

    def feed(self, records: Iterable[Record]) -> Iterator[str]:
        """Lines for these records (each run of a session's consecutive stderr records as one
        line), then for requests held past `hold_s`."""
        run: list[Record] = []
        for rec in records:
            if run and (rec.kind != "stderr" or rec.session_id != run[0].session_id):
                yield from self._stderr_lines(run)
                run = []
            if rec.kind == "stderr":
                run.append(rec)
                continue
            yield from self._one(rec)
        yield from self._stderr_lines(run)
        yield from self.flush()

    def _one(self, rec: Record) -> Iterator[str]:
        if rec.kind == "frame" and rec.msg_type == "request":
            key = (rec.session_id, request_key(rec.direction, rec.rpc_id, rec.rpc_id_type))
            self._pending[key] = _Held(rec, self.clock())
            return
        if rec.kind == "frame" and rec.msg_type in ("response", "error"):
            key = (rec.session_id, response_key(rec.direction, rec.rpc_id, rec.rpc_id_type))
            held = self._pending.pop(key, None)
            if held is not None:
                line = self._pair_line(held.rec, rec, joined=not held.printed)
                if line is not None:
                    yield line
                return
        line = self._single_line(rec)
        if line is not None:
            yield line

    def flush(self, everything: bool = False) -> Iterator[str]:
        """Print the requests that waited `hold_s` for their response (all with `everything`)."""
        now = self.clock()
        for held in self._pending.values():
            if not held.printed and (everything or now - held.since >= self.hold_s):
                held.printed = True
                line = self._request_line(held.rec)
                if line is not None:
                    yield line


def json_line(rec: Record, request: Record | None = None) -> str:
    """One record as a JSON object (for `--format jsonl`); a response names its request's method
    and tool and carries the latency."""
    doc = {
        "session_id": rec.session_id,
        "seq": rec.seq,
        "position": rec.position,
        "time": datetime.fromtimestamp(rec.wall_ns / 1e9, tz=UTC).isoformat(),
        "kind": rec.kind,
        "direction": rec.direction,
        "msg_type": rec.msg_type,
        "method": rec.method if request is None else request.method,
        "rpc_id": rec.rpc_id,
        "tool": rec.tool if request is None else request.tool,
        "is_error": rec.is_error,
        "error_code": rec.error_code,
        "latency_ms": None if request is None else round((rec.mono_ns - request.mono_ns) / 1e6, 3),
        "size": rec.size,
        "text": rec.raw.decode("utf-8", errors="replace"),
    }
    return json.dumps(doc, ensure_ascii=False)


class JsonlFormatter:
    """Records in, one JSON line each out, responses joined to their request's method."""

    def __init__(self, filt: TailFilter) -> None:
        self.filt = filt
        self._requests: dict[tuple[str, tuple], Record] = {}

    def feed(self, records: Iterable[Record]) -> Iterator[str]:
        for rec in records:
            request = None
            if rec.kind == "frame" and rec.msg_type == "request":
                key = (rec.session_id, request_key(rec.direction, rec.rpc_id, rec.rpc_id_type))
                self._requests[key] = rec
            elif rec.kind == "frame" and rec.msg_type in ("response", "error"):
                key = (rec.session_id, response_key(rec.direction, rec.rpc_id, rec.rpc_id_type))
                request = self._requests.pop(key, None)
            source = request or rec
            if self.filt.keeps(source.method, source.tool, failed(rec)):
                yield json_line(rec, request)

    def flush(self, everything: bool = False) -> Iterator[str]:
        return iter(())


def run_tail(
    store: EventStore,
    journal_dir: Path | None,
    session_id: str | None,
    follow_on: bool,
    history: int,
    filt: TailFilter,
    fmt: str,
    emit: Callable[[str], None],
    stop: Callable[[], bool] | None = None,
    width: int | None = None,
    redact: Callable[[Record], Record] | None = None,
) -> None:
    """Print the last `history` lines the filters keep (filters first, then the count; then,
    with `follow_on`, every new one) through `emit`; text lines fit `width` columns when given,
    each record through `redact` first (as `show` and `export` redact)."""
    formatter: TailFormatter | JsonlFormatter = (
        JsonlFormatter(filt)
        if fmt == "jsonl"
        else TailFormatter(filt, width=width, label=SessionLabels(store))
    )
    done = [False]

    def stopping() -> bool:
        return done[0] or (stop is not None and stop())

    depth = history_depth(store, session_id, history, filt)
    first = depth > 0  # `follow` yields the history first (when there is any)
    for batch in follow(store, journal_dir, session_id, depth, stop=stopping):
        if redact is not None:
            batch = [redact(rec) for rec in batch]
        if first:
            # The history is whole: a request it holds without its response prints now.
            lines = [*formatter.feed(batch), *formatter.flush(everything=True)]
            for line in lines[max(0, len(lines) - history) :]:
                emit(line)
            first = False
        else:
            for line in formatter.feed(batch):
                emit(line)
        if not follow_on:
            done[0] = True
    for line in formatter.flush(everything=True):
        emit(line)


# How far back `-n` reads for the lines its filters keep: a filter that matches nothing in a
# large log stops here instead of reading the whole log.
HISTORY_SCAN = 100_000


def history_depth(store: EventStore, session_id: str | None, lines: int, filt: TailFilter) -> int:
    """How many of the newest records hold the last `lines` lines that `filt` keeps: read four
    times deeper at each try until they do, or the log (or `HISTORY_SCAN`) ends."""
    depth = lines
    while depth > 0:
        records = backlog(store, session_id, depth)
        # Lines as text shows them: jsonl shows at least as many for the same records.
        formatter = TailFormatter(filt)
        shown = len([*formatter.feed(records), *formatter.flush(everything=True)])
        if shown >= lines or len(records) < depth or depth >= HISTORY_SCAN:
            break
        depth = min(depth * 4, HISTORY_SCAN)
    return depth
