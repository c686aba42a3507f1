"""An incremental Server-Sent Events parser for the HTTP proxy tap.

Why it exists: the proxy must forward an SSE stream event by event, never buffering the whole
stream, and it must record each JSON-RPC message an event carries together with the event's id.
So the parser is fed the upstream body chunk by chunk (chunks split events, lines and even a CRLF
anywhere) and hands back complete events with their exact raw bytes, which the proxy journals and
then forwards unchanged. Bytes of an event not yet complete stay in the parser (`pending`), which
is how a stream cut mid-event is detected.

Parsing follows the WHATWG rules: lines end with CRLF, LF or CR; a blank line ends an event;
`data` lines are joined with LF; a single space after the colon is dropped; comment lines (`:`)
and unknown fields are kept in the raw bytes but carry no meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One complete SSE event block.

    `raw` is exactly the bytes received, through the blank line that ended the block. `data` is
    the joined data lines (None when the block had no `data` field: a comment, a keep-alive or a
    priming event that only sets an id or a retry time)."""

    raw: bytes
    data: bytes | None
    event: str | None
    id: str | None
    retry: int | None


class SseParser:
    """Feed chunks, get complete events; `pending()` is what is left of an unfinished one."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0  # where the next unparsed line starts, relative to _buf
        self._first = True
        self._reset()

    def _reset(self) -> None:
        self._data: list[bytes] | None = None
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Add bytes; return the events they complete, in order."""
        if not chunk:
            return []
        self._buf += chunk
        return self._scan(eof=False)

    def finish(self) -> list[SseEvent]:
        """The body ended: a CR at the very end was a line end after all. Returns the events that
        completes; `pending()` is then what the stream cut off."""
        return self._scan(eof=True)

    def _scan(self, eof: bool) -> list[SseEvent]:
        buf = self._buf
        if self._first:
            if not eof and len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []  # maybe a BOM still arriving
            self._first = False
            if buf.startswith(_BOM):
                self._pos = len(_BOM)
        out: list[SseEvent] = []
        pos = self._pos
        start = 0  # start of the current event block
        size = len(buf)
        while pos < size:
            nl = buf.find(b"\n", pos)
            cr = buf.find(b"\r", pos, nl if nl >= 0 else size)
            if cr >= 0:
                if cr + 1 == size and not eof:
                    break  # a CR at the end: it may be the first half of a CRLF
                end = cr
                nxt = cr + 2 if cr + 1 < size and buf[cr + 1] == 0x0A else cr + 1
            elif nl >= 0:
                end = nl
                nxt = nl + 1
            else:
                break
            if end == pos:
                out.append(self._dispatch(bytes(buf[start:nxt])))
                start = nxt
            else:
                self._field(bytes(buf[pos:end]))
            pos = nxt
        if start:
            del buf[:start]
            pos -= start
        self._pos = pos
        return out

    def _field(self, line: bytes) -> None:
        if line.startswith(b":"):
            return  # a comment
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            if self._data is None:
                self._data = []
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)

    def _dispatch(self, raw: bytes) -> SseEvent:
        data = b"\n".join(self._data) if self._data is not None else None
        event = SseEvent(raw, data, self._event, self._id, self._retry)
        self._reset()
        return event

    def pending(self) -> bytes:
        """The bytes of an event not yet ended by a blank line (empty when none)."""
        return bytes(self._buf)
