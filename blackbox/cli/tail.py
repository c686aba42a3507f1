"""`blackbox tail`: records as they are stored, a request and its response on one line.

Why it exists: debugging a live MCP session means watching it, not querying it afterwards. This
module turns the `blackbox.recorder.query.live_feed` feed into lines: a request is held back briefly
(`HOLD_S`) so that, when its response comes quickly, both print as one line with the latency; a slow
call prints its request at once and its response later with the latency. Errors and faults stand out
(red on a terminal; plain words when piped, as `click.echo` strips colour off a pipe). Payloads
longer than the line allows are cut and their size shown.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click

from blackbox.recorder.log import request_key, response_key
from blackbox.recorder.query import Record, follow
from blackbox.recorder.store import EventStore

# How long a request waits for its response to share its line: short enough to keep a frame on
# screen within a second of the wire, long enough that most calls print as one line.
HOLD_S = 0.3
# Characters of payload shown per message before it is cut.
PAYLOAD_CHARS = 160


@dataclass(frozen=True)
class TailFilter:
    """Which records a tail shows: by method, by tool, errors and faults only."""

    method: str | None = None
    tool: str | None = None
    errors: bool = False

    def keeps(self, method: str | None, tool: str | None, failed: bool) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.tool is not None and tool != self.tool:
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
    _pending: dict[tuple[str, tuple], _Held] = field(default_factory=dict)

    def _prefix(self, rec: Record) -> str:
        return f"{_clock(rec.wall_ns)} {rec.session_id[:8]} {rec.seq:>5}"

    def _request_line(self, rec: Record) -> str | None:
        if not self.filt.keeps(rec.method, rec.tool, False):
            return None
        arrow = "→" if rec.direction == "c2s" else "⇐"
        return f"{self._prefix(rec)} {arrow} {rec.method}  {payload(rec)}"

    def _pair_line(self, req: Record, resp: Record, joined: bool) -> str | None:
        bad = failed(resp)
        if not self.filt.keeps(req.method, req.tool, bad):
            return None
        latency = _ms(resp.mono_ns - req.mono_ns)
        outcome = _outcome(resp)
        style = {"fg": "red", "bold": True} if bad else {"fg": "green"}
        verdict = click.style(f"{outcome} {latency}", **style)
        if joined:
            arrow = "→" if req.direction == "c2s" else "⇐"
            head = f"{self._prefix(req)} {arrow} {req.method}  {payload(req, 80)}"
        else:
            head = f"{self._prefix(resp)} ← {req.method} (seq {req.seq})"
        return f"{head}  ⇒ {verdict}  {payload(resp)}"

    def _single_line(self, rec: Record) -> str | None:
        bad = failed(rec)
        if not self.filt.keeps(rec.method, rec.tool, bad):
            return None
        if rec.kind == "frame":
            what = rec.method or rec.msg_type or "frame"
            arrow = {"c2s": "→", "s2c": "←"}.get(rec.direction, "·")
            line = f"{self._prefix(rec)} {arrow} {what}  {payload(rec)}"
        else:
            line = f"{self._prefix(rec)} · {rec.kind}  {payload(rec)}"
        if rec.kind == "fault":
            return click.style("FAULT " + line, fg="red", bold=True)
        if bad:
            return click.style(line, fg="red")
        if rec.kind == "stderr":
            return click.style(line, dim=True)
        return line

    def feed(self, records: Iterable[Record]) -> Iterator[str]:
        """Lines for these records, then for requests held past `hold_s`."""
        for rec in records:
            yield from self._one(rec)
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
) -> None:
    """Print the last `history` records (then, with `follow_on`, every new one) through `emit`."""
    formatter: TailFormatter | JsonlFormatter = (
        JsonlFormatter(filt) if fmt == "jsonl" else TailFormatter(filt)
    )
    done = [False]

    def stopping() -> bool:
        return done[0] or (stop is not None and stop())

    for batch in follow(store, journal_dir, session_id, history, stop=stopping):
        for line in formatter.feed(batch):
            emit(line)
        if not follow_on:
            done[0] = True
    for line in formatter.flush(everything=True):
        emit(line)
