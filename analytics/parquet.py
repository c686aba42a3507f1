"""The analytics copy of the log: the store exported to Parquet, incrementally.

The log is append-only, so a refresh reads only the records past the last exported global
position (`EventStore.read_log_rows`: plain driver tuples, no object per record) and appends new
files; a refresh with nothing new costs one `max_position()` query. Two datasets are written,
each partitioned by UTC day (`<dataset>/day=YYYY-MM-DD/p<first>-<last>.parquet`, the positions
of the records a file came from):

- `events`: every record of the log with the store's derived columns, plus what analytics needs
  from the raw JSON, extracted once here (arguments fingerprint, error message, the id a
  `notifications/cancelled` names, the messages of a batch).
- `calls`: each request paired with its response. Pairing is done here, in log order, rather than
  by a join at query time: a 10,000,000-call join costs seconds on every query, the pairing costs
  microseconds per frame once. Requests still unanswered in a session that has not ended are kept
  in a small `pending` file and re-read by the next refresh; they become final rows when answered
  or when their session ends. A call answered within its chunk (nearly all) is kept as two row
  indices and its columns are taken from the chunk's `events` table in Arrow (`CallTracker`).

Crash safety: data files are written first, then the pending file, then `state.json` (atomic
rename) with the new position. Files past the recorded position are leftovers of an interrupted
refresh and are deleted before the next one, so a crash never duplicates or loses a record.
A record of retention (`retention_applied`), a store whose log shrank, or a schema version change
rebuilds the copy from scratch: it is a cache of the store, never the system of record.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from operator import attrgetter, itemgetter
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recorder.jsonrpc import classify_message, id_fields, parse
from recorder.model import Kind, StoredEvent
from recorder.store import EventStore

SCHEMA_VERSION = 2
META_KEY = b"mcp_blackbox.schema_version"
DAY_NS = 86_400 * 1_000_000_000
# How many records a refresh buffers before writing files (bounds memory on a big first export).
CHUNK = 200_000
# How often a refresh reports progress (records).
PROGRESS_EVERY = 25_000
# A day partition with more files than this is compacted into one file.
COMPACT_FILES = 8
# session_ended outcomes that are not faults: calls still open then are `no_response`, not
# `transport_fault`.
CLEAN_OUTCOMES = frozenset({"ok", "client_closed", "interrupted", "ended"})

Progress = Callable[[int, int], None]

ITEM_TYPE = pa.struct(
    [
        ("msg_type", pa.string()),
        ("method", pa.string()),
        ("rpc_id", pa.string()),
        ("rpc_id_type", pa.string()),
        ("tool", pa.string()),
        ("is_error", pa.bool_()),
        ("error_code", pa.int64()),
    ]
)

EVENTS_SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64(), nullable=False),
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("wall_ns", pa.int64(), nullable=False),
        pa.field("mono_ns", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("direction", pa.string(), nullable=False),
        pa.field("msg_type", pa.string()),
        pa.field("method", pa.string()),
        pa.field("rpc_id", pa.string()),
        pa.field("rpc_id_type", pa.string()),
        pa.field("tool", pa.string()),
        pa.field("is_error", pa.bool_()),
        pa.field("error_code", pa.int64()),
        pa.field("era", pa.string()),
        pa.field("raw", pa.binary(), nullable=False),
        pa.field("raw_size", pa.int64()),
        pa.field("hash", pa.binary(), nullable=False),
        pa.field("args_fingerprint", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("ref_id", pa.string()),
        pa.field("ref_id_type", pa.string()),
        pa.field("items", pa.list_(ITEM_TYPE)),
    ],
    metadata={META_KEY: str(SCHEMA_VERSION).encode()},
)

CALLS_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("direction", pa.string(), nullable=False),
        pa.field("rpc_id", pa.string()),
        pa.field("rpc_id_type", pa.string()),
        pa.field("method", pa.string()),
        pa.field("tool", pa.string()),
        pa.field("args_fingerprint", pa.string()),
        pa.field("era", pa.string()),
        pa.field("request_position", pa.int64(), nullable=False),
        pa.field("request_seq", pa.int64(), nullable=False),
        pa.field("request_item", pa.int32()),
        pa.field("started_ns", pa.int64(), nullable=False),
        pa.field("request_mono_ns", pa.int64(), nullable=False),
        pa.field("response_position", pa.int64()),
        pa.field("response_seq", pa.int64()),
        pa.field("response_type", pa.string()),
        pa.field("ended_ns", pa.int64()),
        pa.field("latency_ns", pa.int64()),
        pa.field("is_error", pa.bool_()),
        pa.field("error_code", pa.int64()),
        pa.field("error_message", pa.string()),
        pa.field("cancel_seq", pa.int64()),
        pa.field("fault_seq", pa.int64()),
        pa.field("base_outcome", pa.string(), nullable=False),
        pa.field("closed", pa.bool_(), nullable=False),
    ],
    metadata={META_KEY: str(SCHEMA_VERSION).encode()},
)

# `control` repeats the session events (every record but frames): the views that only need
# those (sessions, faults, decisions, the server of a call) then read a few thousand rows, not
# every frame.
DATASETS = {"events": EVENTS_SCHEMA, "control": EVENTS_SCHEMA, "calls": CALLS_SCHEMA}
_FILE_RE = re.compile(r"^p(\d+)-(\d+)\.parquet$")
ERROR_MESSAGE_MAX = 500


# One encoder for every fingerprint: `json.dumps` with these arguments builds a new encoder per
# call, which costs more than the encoding of a small arguments object. Same output.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
# A digit followed by "." or an exponent: where orjson may write a number differently from `json`
# (1e-05 vs 0.00001). Also matches inside strings ("v1.2"): those just take the slow path.
_FLOATISH = re.compile(rb"[0-9][.eE]")


def fingerprint(arguments: object) -> str:
    """sha256 hex of canonical JSON arguments: the producers' expression,
    `json.dumps(arguments, sort_keys=True, separators=(",", ":"))`.

    orjson encodes several times faster and writes the same bytes when the output is ASCII
    (`json` escapes the rest, and DEL), and holds no float (formatted differently); anything else
    is encoded by `json` itself, so the digest never depends on which path was taken."""
    try:
        text = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        text = None
    if text is None or not text.isascii() or b"\x7f" in text or _FLOATISH.search(text):
        text = _CANONICAL.encode(arguments).encode()
    return hashlib.sha256(text).hexdigest()


def store_key(url: str) -> str:
    """A directory name for a store URL: readable, and distinct for distinct stores."""
    ident = url
    if url.startswith("sqlite:///"):
        ident = "sqlite:///" + str(Path(url[len("sqlite:///") :]).expanduser().resolve())
    slug = re.sub(r"[^A-Za-z0-9]+", "-", ident.split("://", 1)[-1]).strip("-")[-40:] or "store"
    return f"{slug}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def copy_dir(base: Path, url: str) -> Path:
    """Where the Parquet copy of the store at `url` lives under `base`."""
    return base / store_key(url)


# -- the pairing of requests and responses ----------------------------------------------------

# A call is a list in CALLS_SCHEMA's column order while it is built (lists are far cheaper than
# dicts at a hundred thousand frames a second); `as_dict` names the fields for readers.
CALL_FIELDS = [f.name for f in CALLS_SCHEMA]
(
    C_SESSION, C_DIRECTION, C_ID, C_ID_TYPE, C_METHOD, C_TOOL, C_FINGERPRINT, C_ERA, C_REQ_POS,
    C_REQ_SEQ, C_ITEM, C_STARTED, C_REQ_MONO, C_RESP_POS, C_RESP_SEQ, C_RESP_TYPE, C_ENDED,
    C_LATENCY, C_IS_ERROR, C_CODE, C_MESSAGE, C_CANCEL, C_FAULT, C_OUTCOME, C_CLOSED,
) = range(len(CALL_FIELDS))  # fmt: skip


def as_dict(call: list) -> dict:
    """A call row with its field names."""
    return dict(zip(CALL_FIELDS, call, strict=True))


def base_outcome(call: list) -> str:
    """A call's outcome from its own messages; the views add `denied` from decisions."""
    cancel, response = call[C_CANCEL], call[C_RESP_SEQ]
    if cancel is not None and (response is None or cancel < response):
        return "cancelled"
    if call[C_RESP_TYPE] == "error":
        return "rpc_error"
    if call[C_RESP_TYPE] == "response":
        return "tool_error" if call[C_IS_ERROR] else "ok"
    if call[C_FAULT] is not None:
        return "transport_fault"
    return "no_response"


_OPPOSITE = {"c2s": "s2c", "s2c": "c2s"}

# A record as `EventStore.read_log_rows` gives it: a tuple in StoredEvent's field order.
Row = tuple
STORED_FIELDS = [f.name for f in fields(StoredEvent)]
(
    R_POSITION, R_SESSION_ID, R_SEQ, R_WALL_NS, R_MONO_NS, R_KIND, R_DIRECTION, R_RAW, R_RAW_SIZE,
    R_MSG_TYPE, R_METHOD, R_RPC_ID, R_RPC_ID_TYPE, R_TOOL, R_IS_ERROR, R_ERROR_CODE, R_ERA, R_HASH,
) = range(len(STORED_FIELDS))  # fmt: skip
_as_row = attrgetter(*STORED_FIELDS)
_KIND = itemgetter(R_KIND)

# What a frame adds to its events row: (args_fingerprint, error_message, ref_id, ref_id_type,
# batch items).
Extras = tuple[str | None, str | None, str | None, str | None, list | None]


class CallTracker:
    """Pairs requests with responses over a stream of records in log order.

    Ids are keyed per (session, direction of the request, id, id type): both sides number their
    own requests, and 0 and "0" are different ids. A response closes the open request with its
    key; a session's end closes whatever it left open. Closed calls collect in `closed`.

    `feed_rows` keeps the common case light: a plain request opens as `(index, record,
    fingerprint)` rather than a call row. Anything else that touches a light request (a cancel,
    a fault, an error response, an id reused, a session's end, a new chunk) first makes it a
    full call row, so every other path is the plain one. A plain response closing a light
    request makes the call row then, unless `by_index` (the refresh): the pair is then kept as
    `(request index, response index)` and `take_closed_table` turns the pairs into columns with
    Arrow `take`s on the chunk's events table, instead of building, transposing and converting
    a 25-element list per call. The pairs hold no record, so a chunk's records are let go as
    soon as its batches are converted, as before.
    """

    def __init__(self, by_index: bool = False) -> None:
        self.by_index = by_index
        self.open: dict[tuple, list | tuple] = {}
        self.by_session: dict[str, set] = {}
        self.closed: list[list | tuple] = []

    def load(self, rows: Iterable[dict]) -> None:
        """Take back the calls a previous refresh left open."""
        for row in rows:
            call = [row[name] for name in CALL_FIELDS]
            key = (call[C_SESSION], call[C_DIRECTION], call[C_ID], call[C_ID_TYPE])
            self.open[key] = call
            self.by_session.setdefault(call[C_SESSION], set()).add(key)

    def pending(self) -> list[list]:
        """The calls still open, as rows (outcome as known so far, not closed)."""
        self._make_full()
        rows = sorted(self.open.values(), key=lambda c: (c[C_REQ_POS], c[C_ITEM] or 0))
        out = []
        for call in rows:
            row = list(call)
            row[C_OUTCOME] = base_outcome(row)
            row[C_CLOSED] = False
            out.append(row)
        return out

    def take_closed(self) -> list[list]:
        """The calls closed since the last take, as call rows, in the order they closed."""
        if self.by_index:
            raise ValueError("a by_index tracker keeps pairs as indices: use take_closed_table")
        closed, self.closed = self.closed, []
        return closed  # type: ignore[return-value]  # without by_index, only call rows

    def take_closed_table(self, events: pa.Table) -> pa.Table:
        """The calls closed since the last take as a `calls` table, rows in the order they
        closed. The indices `feed_rows` was given (its `first`) are rows of `events`, the
        chunk's events table; requests still open stop referring to it."""
        closed, self.closed = self.closed, []
        self._make_full()
        # Comprehensions and `map` rather than one loop with appends: a refresh closes tens of
        # thousands of calls per chunk, nearly all of them light pairs.
        rows = [call for call in closed if type(call) is list]
        if len(rows) == len(closed):
            return _calls_table(rows)
        light = [call for call in closed if type(call) is tuple] if rows else closed
        paired = _paired_table(events, list(map(_FIRST, light)), list(map(_SECOND, light)))
        if not rows:
            return paired
        # Both kinds: put the rows back in closing order (call rows first in the concatenation).
        order, next_row, next_pair = [], 0, len(rows)
        for call in closed:
            if type(call) is tuple:
                order.append(next_pair)
                next_pair += 1
            else:
                order.append(next_row)
                next_row += 1
        both = pa.concat_tables([_calls_table(rows), paired])
        return both.take(pa.array(order, pa.int64()))

    def _make_full(self) -> None:
        """Turn every light open request into a call row."""
        opened = self.open
        for key in [key for key, call in opened.items() if type(call) is tuple]:
            opened[key] = _asked(*opened[key][1:])

    def _call(self, key: tuple) -> list | None:
        """The open call with `key` as a call row (made one if it was light), or None."""
        call = self.open.get(key)
        if type(call) is tuple:
            call = self.open[key] = _asked(*call[1:])
        return call

    def _close(self, key: tuple) -> None:
        call = self.open.pop(key)
        if type(call) is tuple:
            call = _asked(*call[1:])
        keys = self.by_session.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.by_session[key[0]]
        call[C_OUTCOME] = base_outcome(call)
        call[C_CLOSED] = True
        self.closed.append(call)

    def feed(self, ev: StoredEvent) -> Extras | None:
        """Fold one record in. Returns what the record adds to its events row, if anything."""
        return self.feed_row(_as_row(ev))

    def feed_rows(self, rows: Sequence[Row], extras: dict[int, Extras], first: int = 0) -> None:
        """`feed_row` over a batch, what row i adds kept in `extras[first + i]`; `first + i` is
        also the row's index for `take_closed_table`.

        Requests and plain responses (most of a log) are dispatched and paired inline here: at
        a hundred thousand frames a refresh, method calls per record cost as much as the
        pairing. Everything else goes through `feed_row`."""
        feed, opened, by_session, opposite = self.feed_row, self.open, self.by_session, _OPPOSITE
        closed, by_index = self.closed, self.by_index
        for i, ev in enumerate(rows, first):
            if ev[R_KIND] == "frame":
                mtype = ev[R_MSG_TYPE]
                if mtype == "request":
                    fp = _request_fingerprint(ev) if ev[R_METHOD] == "tools/call" else None
                    if fp is not None:
                        extras[i] = (fp, None, None, None, None)
                    key = (ev[R_SESSION_ID], ev[R_DIRECTION], ev[R_RPC_ID], ev[R_RPC_ID_TYPE])
                    self._open(key, (i, ev, fp))
                    continue
                if mtype == "response":
                    sid = ev[R_SESSION_ID]
                    key = (sid, opposite.get(ev[R_DIRECTION], ""), ev[R_RPC_ID], ev[R_RPC_ID_TYPE])
                    call = opened.pop(key, None)
                    if call is None:
                        continue  # an orphan response: nothing open asked for it
                    keys = by_session.get(sid)
                    if keys is not None:
                        keys.discard(key)
                        if not keys:
                            del by_session[sid]
                    if type(call) is tuple:  # light: nothing but this response touched it
                        closed.append((call[0], i) if by_index else _answered(call[1], ev, call[2]))
                        continue
                    is_error = _answer_plainly(call, ev)
                    call[C_CODE] = call[C_MESSAGE] = None
                    cancel = call[C_CANCEL]
                    if cancel is not None and cancel < call[C_RESP_SEQ]:
                        call[C_OUTCOME] = "cancelled"
                    else:
                        call[C_OUTCOME] = "tool_error" if is_error else "ok"
                    call[C_CLOSED] = True
                    closed.append(call)
                    continue
            extra = feed(ev)
            if extra is not None:
                extras[i] = extra

    def feed_row(self, ev: Row) -> Extras | None:
        """`feed` for a record as a tuple in `StoredEvent` field order (`read_log_rows`): the
        refresh reads plain tuples, as building an object per record cost more than pairing."""
        kind = ev[R_KIND]
        if kind == "frame":
            mtype = ev[R_MSG_TYPE]
            if mtype == "request":
                return self._request_row(ev)
            if mtype == "response":
                self.response(
                    ev, "response", ev[R_RPC_ID], ev[R_RPC_ID_TYPE], ev[R_IS_ERROR], None, None
                )
                return None
            if mtype == "error":
                value, problem = parse(ev[R_RAW])
                message = _error_message(value) if problem is None else None
                self.response(
                    ev, "error", ev[R_RPC_ID], ev[R_RPC_ID_TYPE], None, ev[R_ERROR_CODE], message
                )
                return (None, message, None, None, None) if message is not None else None
            if mtype == "notification":
                if ev[R_METHOD] != "notifications/cancelled":
                    return None
                value, problem = parse(ev[R_RAW])
                ref = _cancelled_id(value) if problem is None else None
                if ref is None:
                    return None
                self.cancel(ev, ref[0], ref[1])
                return (None, None, ref[0], ref[1], None)
            if mtype == "batch":
                return self._batch(ev)
            return None
        if kind == "fault":
            for key in self.by_session.get(ev[R_SESSION_ID], ()):
                call = self._call(key)
                assert call is not None
                if call[C_FAULT] is None:
                    call[C_FAULT] = ev[R_SEQ]
        elif kind == "session_ended":
            doc = _doc(ev[R_RAW])
            outcome = str(doc.get("outcome") or doc.get("reason") or "ended")
            for key in list(self.by_session.get(ev[R_SESSION_ID], ())):
                call = self._call(key)
                assert call is not None
                if outcome not in CLEAN_OUTCOMES and call[C_FAULT] is None:
                    call[C_FAULT] = ev[R_SEQ]
                self._close(key)
        return None

    def _request_row(self, ev: Row) -> Extras | None:
        """Open the call a request starts; a `tools/call` adds its arguments' fingerprint."""
        method, tool, fp = ev[R_METHOD], None, None
        if method == "tools/call":
            fp = _request_fingerprint(ev)
            tool = ev[R_TOOL]
        self.request(ev, None, method, ev[R_RPC_ID], ev[R_RPC_ID_TYPE], tool, fp, ev[R_ERA])
        return (fp, None, None, None, None) if fp is not None else None

    def _batch(self, ev: Row) -> Extras | None:
        value, problem = parse(ev[R_RAW])
        if problem is not None or not isinstance(value, list):
            return None
        items = []
        for index, message in enumerate(value):
            c = classify_message(message)
            items.append(
                {
                    "msg_type": c.msg_type,
                    "method": c.method,
                    "rpc_id": c.rpc_id,
                    "rpc_id_type": c.rpc_id_type,
                    "tool": c.tool,
                    "is_error": c.is_error,
                    "error_code": c.error_code,
                }
            )
            if c.msg_type == "request":
                fp = None
                if c.method == "tools/call":
                    args = _arguments(message)
                    fp = fingerprint(args) if args is not _NO_ARGS else None
                era = c.era or ev[R_ERA]
                self.request(ev, index, c.method, c.rpc_id, c.rpc_id_type, c.tool, fp, era)
            elif c.msg_type in ("response", "error"):
                error = _error_message(message) if c.msg_type == "error" else None
                self.response(
                    ev, c.msg_type, c.rpc_id, c.rpc_id_type, c.is_error, c.error_code, error
                )
            elif c.method == "notifications/cancelled":
                ref = _cancelled_id(message)
                if ref is not None:
                    self.cancel(ev, ref[0], ref[1])
        return (None, None, None, None, items)

    def request(
        self,
        ev: Row,
        item: int | None,
        method: str | None,
        rpc_id: str | None,
        rpc_id_type: str | None,
        tool: str | None,
        fp: str | None,
        era: str | None,
    ) -> None:
        sid, direction = ev[R_SESSION_ID], ev[R_DIRECTION]
        self._open(
            (sid, direction, rpc_id, rpc_id_type),
            [
                sid, direction, rpc_id, rpc_id_type, method, tool, fp, era, ev[R_POSITION],
                ev[R_SEQ], item, ev[R_WALL_NS], ev[R_MONO_NS], None, None, None, None, None, None,
                None, None, None, None, None, False,
            ],
        )  # fmt: skip

    def _open(self, key: tuple, call: list | tuple) -> None:
        """Open `call` (a call row, or a light request) under `key` = (session, direction, id,
        id type), and note it among its session's open calls."""
        if key in self.open:  # an id reused while outstanding: the first is never answered
            self._close(key)
        self.open[key] = call
        keys = self.by_session.get(key[0])
        if keys is None:
            self.by_session[key[0]] = {key}
        else:
            keys.add(key)

    def response(
        self,
        ev: Row,
        kind: str,
        rpc_id: str | None,
        rpc_id_type: str | None,
        is_error: bool | None,
        error_code: int | None,
        message: str | None,
    ) -> None:
        key = (ev[R_SESSION_ID], _OPPOSITE.get(ev[R_DIRECTION], ""), rpc_id, rpc_id_type)
        call = self._call(key)
        if call is None:
            return  # an orphan response: nothing open asked for it
        call[C_RESP_POS] = ev[R_POSITION]
        call[C_RESP_SEQ] = ev[R_SEQ]
        call[C_RESP_TYPE] = kind
        call[C_ENDED] = ev[R_WALL_NS]
        call[C_LATENCY] = ev[R_MONO_NS] - call[C_REQ_MONO]
        call[C_IS_ERROR] = bool(is_error) if kind == "response" else None
        call[C_CODE] = error_code
        call[C_MESSAGE] = message
        self._close(key)

    def cancel(self, ev: Row, ref_id: str | None, ref_id_type: str | None) -> None:
        # The requester cancels its own request: same direction as the request.
        call = self._call((ev[R_SESSION_ID], ev[R_DIRECTION], ref_id, ref_id_type))
        if call is not None and call[C_CANCEL] is None:
            call[C_CANCEL] = ev[R_SEQ]


_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def _asked(ev: Row, fp: str | None) -> list:
    """The open call row of a plain request (`request` for a frame that is not a batch)."""
    method = ev[R_METHOD]
    return [
        ev[R_SESSION_ID], ev[R_DIRECTION], ev[R_RPC_ID], ev[R_RPC_ID_TYPE], method,
        ev[R_TOOL] if method == "tools/call" else None, fp, ev[R_ERA], ev[R_POSITION], ev[R_SEQ],
        None, ev[R_WALL_NS], ev[R_MONO_NS], None, None, None, None, None, None, None, None, None,
        None, None, False,
    ]  # fmt: skip


def _answered(asked: Row, answer: Row, fp: str | None) -> list:
    """The closed call row of a light request `answer` answers: what `feed_rows` writes into a
    call row for a plain response (no cancel or fault can have touched a light request)."""
    call = _asked(asked, fp)
    call[C_OUTCOME] = "tool_error" if _answer_plainly(call, answer) else "ok"
    call[C_CLOSED] = True
    return call


def _answer_plainly(call: list, answer: Row) -> bool:
    """Write a plain response (a `result`, not an error) into an open call row; its isError."""
    call[C_RESP_POS] = answer[R_POSITION]
    call[C_RESP_SEQ] = answer[R_SEQ]
    call[C_RESP_TYPE] = "response"
    call[C_ENDED] = answer[R_WALL_NS]
    call[C_LATENCY] = answer[R_MONO_NS] - call[C_REQ_MONO]
    call[C_IS_ERROR] = is_error = bool(answer[R_IS_ERROR])
    return is_error


# What a light pair takes from its request's events row, in CALLS_SCHEMA's names.
_ASKED_COLUMNS = {
    "session_id": "session_id",
    "direction": "direction",
    "rpc_id": "rpc_id",
    "rpc_id_type": "rpc_id_type",
    "method": "method",
    "tool": "tool",
    "args_fingerprint": "args_fingerprint",  # the request row's extra is its fingerprint
    "era": "era",
    "request_position": "position",
    "request_seq": "seq",
    "started_ns": "wall_ns",
    "request_mono_ns": "mono_ns",
}


def _paired_table(events: pa.Table, asked: list[int], answered: list[int]) -> pa.Table:
    """The `calls` rows of light pairs (`_answered`, column-wise): each column a `take` of the
    request's or the response's events row, or a constant."""
    n = len(asked)
    request = events.select(list(_ASKED_COLUMNS.values())).take(pa.array(asked, pa.int64()))
    response = events.select(["position", "seq", "wall_ns", "mono_ns", "is_error"]).take(
        pa.array(answered, pa.int64())
    )
    columns = {name: request[column] for name, column in _ASKED_COLUMNS.items()}
    # Only a tools/call carries its tool (a null method gives a null tool, as in Python).
    is_call = pc.equal(columns["method"], pa.scalar("tools/call"))
    columns["tool"] = pc.if_else(is_call, columns["tool"], pa.scalar(None, pa.string()))
    is_error = pc.fill_null(response["is_error"], False)
    columns.update(
        request_item=pa.nulls(n, pa.int32()),
        response_position=response["position"],
        response_seq=response["seq"],
        response_type=pa.repeat(pa.scalar("response"), n),
        ended_ns=response["wall_ns"],
        latency_ns=pc.subtract(response["mono_ns"], columns["request_mono_ns"]),
        is_error=is_error,
        error_code=pa.nulls(n, pa.int64()),
        error_message=pa.nulls(n, pa.string()),
        cancel_seq=pa.nulls(n, pa.int64()),
        fault_seq=pa.nulls(n, pa.int64()),
        base_outcome=pc.if_else(is_error, pa.scalar("tool_error"), pa.scalar("ok")),
        closed=pa.repeat(pa.scalar(True), n),
    )
    return pa.Table.from_arrays([columns[name] for name in CALLS_SCHEMA.names], schema=CALLS_SCHEMA)


# -- what a record contributes -------------------------------------------------------------------

_NO_ARGS = object()


def _request_fingerprint(ev: Row) -> str | None:
    """The fingerprint of a `tools/call` request's arguments (None when it has no params)."""
    value, problem = parse(ev[R_RAW])
    args = _arguments(value) if problem is None else None
    return fingerprint(args) if args is not _NO_ARGS else None


def _doc(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _arguments(message: object) -> object:
    """The arguments of a tools/call (absent arguments count as {}), or _NO_ARGS."""
    if not isinstance(message, dict) or not isinstance(message.get("params"), dict):
        return _NO_ARGS
    return message["params"].get("arguments", {})


def _error_message(message: object) -> str | None:
    error = message.get("error") if isinstance(message, dict) else None
    text = error.get("message") if isinstance(error, dict) else None
    return text[:ERROR_MESSAGE_MAX] if isinstance(text, str) else None


def _cancelled_id(message: object) -> tuple[str | None, str | None] | None:
    params = message.get("params") if isinstance(message, dict) else None
    if not isinstance(params, dict) or "requestId" not in params:
        return None
    return id_fields(params["requestId"])


# -- the copy on disk ---------------------------------------------------------------------------


@dataclass
class RefreshResult:
    """What a refresh did."""

    new_records: int
    position: int
    rebuilt: bool
    seconds: float
    files_written: int = 0
    compacted: int = 0


class ParquetCopy:
    """The Parquet copy of one store's log under `root` (see `copy_dir`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # layout
    def dataset_dir(self, name: str) -> Path:
        return self.root / name

    def schema_file(self, name: str) -> Path:
        return self.root / name / "_schema.parquet"

    def files(self, name: str) -> list[Path]:
        """The data files of a dataset, plus its empty schema file (so a view always has one)."""
        base = self.dataset_dir(name)
        found = sorted(base.glob("day=*/p*.parquet"))
        return [self.schema_file(name), *found]

    def pending_file(self) -> Path | None:
        state = self.state()
        name = state.get("pending") if state else None
        return self.root / "pending" / name if name else None

    def state(self) -> dict | None:
        try:
            return json.loads((self.root / "state.json").read_text())
        except (OSError, ValueError):
            return None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One refresh at a time per copy (other processes wait)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _reset(self) -> None:
        for name in (*DATASETS, "pending"):
            shutil.rmtree(self.root / name, ignore_errors=True)
        with suppress(FileNotFoundError):
            (self.root / "state.json").unlink()

    def _init_layout(self) -> None:
        for name, schema in DATASETS.items():
            self.dataset_dir(name).mkdir(parents=True, exist_ok=True)
            if not self.schema_file(name).exists():
                pq.write_table(schema.empty_table(), self.schema_file(name))
        (self.root / "pending").mkdir(parents=True, exist_ok=True)

    def _write_state(self, state: dict) -> None:
        tmp = self.root / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.root / "state.json")

    def _cleanup(self, position: int, pending: str | None) -> None:
        """Remove what an interrupted refresh or compaction left behind."""
        for name in DATASETS:
            for day in self.dataset_dir(name).glob("day=*"):
                ranges = []
                for path in day.glob("*"):
                    match = _FILE_RE.match(path.name)
                    if match is None or int(match.group(1)) > position:
                        path.unlink()  # a temporary file, or written past the committed state
                        continue
                    ranges.append((int(match.group(1)), int(match.group(2)), path))
                for first, last, path in ranges:  # a compaction that did not delete its inputs
                    if any(
                        (f <= first and last <= g) and (f, g) != (first, last) for f, g, _ in ranges
                    ):
                        path.unlink()
                if not any(day.iterdir()):
                    day.rmdir()
        for path in (self.root / "pending").glob("*"):
            if path.name != pending:
                path.unlink()

    # refresh
    def refresh(
        self,
        store: EventStore,
        progress: Progress | None = None,
        rebuild: bool = False,
    ) -> RefreshResult:
        """Bring the copy up to the store's last position; see the module docstring."""
        started = time.monotonic()
        with self.locked():
            state = self.state()
            top = store.max_position()
            reason = None if not rebuild else "asked"
            if state is None or state.get("schema_version") != SCHEMA_VERSION:
                reason = reason or "new"
            elif top < state["position"]:
                reason = "the store's log is shorter than the copy"
            elif top == state["position"]:
                return RefreshResult(0, top, False, time.monotonic() - started)
            elif state["position"] > 0 and not self._same_log(store, state):
                reason = "the store's log differs from the copy"
            if reason is not None:
                self._reset()
                state = {"schema_version": SCHEMA_VERSION, "position": 0, "pending": None}
            self._init_layout()
            self._cleanup(state["position"], state.get("pending"))
            with _no_gc():
                result = self._export(store, state, top, progress)
            if result is None:  # retention removed records: start again from an empty copy
                self._reset()
                self._init_layout()
                state = {"schema_version": SCHEMA_VERSION, "position": 0, "pending": None}
                result = self._export(store, state, store.max_position(), progress)
                assert result is not None
                result.rebuilt = True
            result.rebuilt = result.rebuilt or reason is not None
            result.compacted = self.compact()
            result.seconds = time.monotonic() - started
            return result

    def _same_log(self, store: EventStore, state: dict) -> bool:
        """Is the record at our last position still the one we exported? (a recreated store is
        not the same log even under the same URL)."""
        first = next(iter(store.read_log(state["position"] - 1, limit=1)), None)
        return (
            first is not None
            and first.position == state["position"]
            and [first.session_id, first.seq] == state.get("last_key")
        )

    def _export(
        self, store: EventStore, state: dict, top: int, progress: Progress | None
    ) -> RefreshResult | None:
        tracker = CallTracker(by_index=True)
        pending = self.pending_file() if state.get("pending") else None
        if pending is not None and pending.exists():
            tracker.load(pq.read_table(pending).to_pylist())
        start = state["position"]
        total = max(top - start, 0)
        # Each batch of records becomes Arrow as soon as it is paired, while its objects are
        # still in the CPU's caches, and is then let go: only Arrow data waits for the chunk.
        pieces: list[pa.Table] = []
        in_chunk = 0
        chunk_first = start + 1
        last = start
        last_key = state.get("last_key")
        done = 0
        files = 0
        retention = str(Kind.RETENTION_APPLIED)
        ev = None
        for batch in store.read_log_rows(start):
            if start > 0 and retention in map(_KIND, batch):
                return None  # records before it may be gone from the store: rebuild
            ev = batch[-1]
            while batch:  # the part of the batch that fits in the current chunk
                part, batch = batch[: CHUNK - in_chunk], batch[CHUNK - in_chunk :]
                extras: dict[int, Extras] = {}
                # Rows are numbered within the chunk: the calls table takes from its events.
                tracker.feed_rows(part, extras, in_chunk)
                pieces.append(_events_table(part, extras, in_chunk))
                in_chunk += len(part)
                reported, done = done, done + len(part)
                if progress is not None:
                    for mark in range(
                        reported - reported % PROGRESS_EVERY, done + 1, PROGRESS_EVERY
                    ):
                        if mark > reported:
                            progress(mark, max(mark, total))
                if in_chunk >= CHUNK:
                    last = part[-1][R_POSITION]
                    files += self._write_chunk(pa.concat_tables(pieces), tracker, chunk_first, last)
                    pieces, in_chunk, chunk_first = [], 0, last + 1
        if pieces:
            assert ev is not None
            files += self._write_chunk(
                pa.concat_tables(pieces), tracker, chunk_first, ev[R_POSITION]
            )
        if ev is not None:
            last, last_key = ev[R_POSITION], [ev[R_SESSION_ID], ev[R_SEQ]]
        if progress is not None and total:
            progress(done, max(done, total))
        pending_name = None
        rows = tracker.pending()
        if rows:
            pending_name = f"calls-p{last:012d}.parquet"
            _write(_calls_table(rows), self.root / "pending" / pending_name)
        self._write_state(
            {
                "schema_version": SCHEMA_VERSION,
                "position": last,
                "last_key": last_key,
                "pending": pending_name,
                "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "store": store.url,
            }
        )
        self._cleanup(last, pending_name)
        return RefreshResult(done, last, False, 0.0, files_written=files)

    def _write_chunk(self, events: pa.Table, tracker: CallTracker, first: int, last: int) -> int:
        """Write one chunk's files, the calls `tracker` closed in it included. Parquet encoding
        and compression release the GIL, so the events file (the largest) is written on a second
        thread while this one builds the calls table; all files exist when this returns, so
        crash safety is unchanged."""
        name = f"p{first:012d}-{last:012d}.parquet"
        with ThreadPoolExecutor(max_workers=1) as writer:
            pending = [
                writer.submit(_write_by_day, events, "wall_ns", self.dataset_dir("events"), name)
            ]
            control = events.filter(pc.not_equal(events["kind"], "frame"))
            if control.num_rows:
                pending.append(
                    writer.submit(
                        _write_by_day, control, "wall_ns", self.dataset_dir("control"), name
                    )
                )
            written = 0
            table = tracker.take_closed_table(events)
            if table.num_rows:
                written += _write_by_day(table, "started_ns", self.dataset_dir("calls"), name)
            return written + sum(job.result() for job in pending)

    def compact(self, max_files: int | None = None) -> int:
        """Merge the files of each day partition holding more than `max_files` (default
        `COMPACT_FILES`); returns how many partitions were compacted."""
        max_files = COMPACT_FILES if max_files is None else max_files
        merged = 0
        for name in DATASETS:
            for day in sorted(self.dataset_dir(name).glob("day=*")):
                parts = []
                for path in day.glob("p*.parquet"):
                    match = _FILE_RE.match(path.name)
                    if match:
                        parts.append((int(match.group(1)), int(match.group(2)), path))
                if len(parts) <= max_files:
                    continue
                parts.sort()
                table = pa.concat_tables(pq.read_table(p, schema=DATASETS[name]) for *_, p in parts)
                target = day / f"p{parts[0][0]:012d}-{max(p[1] for p in parts):012d}.parquet"
                _write(table, target)
                for *_, path in parts:
                    if path != target:
                        path.unlink()
                merged += 1
        return merged


_EXTRAS = ["args_fingerprint", "error_message", "ref_id", "ref_id_type", "items"]


# The stored columns as one Arrow struct: Arrow converts the record tuples itself, about twice as
# fast as transposing them in Python first. is_error comes as 0/1 from SQLite and as a bool from
# PostgreSQL; the struct takes whichever the chunk holds and the column is cast after.
_STORED_FIELDS = [EVENTS_SCHEMA.field(name) for name in STORED_FIELDS]
_ROW_TYPES = {
    flag: pa.struct([f.with_type(flag) if f.name == "is_error" else f for f in _STORED_FIELDS])
    for flag in (pa.bool_(), pa.int64())
}


def _events_table(buf: list[Row], extras: dict[int, Extras], first: int = 0) -> pa.Table:
    """The events rows of a batch, converted from the record tuples by Arrow in one call (no
    per-record object or per-column pass in Python), plus what `extras` adds (row i of `buf`
    at key `first + i`)."""
    flag = next((row[R_IS_ERROR] for row in buf if row[R_IS_ERROR] is not None), None)
    row_type = _ROW_TYPES[pa.int64() if type(flag) is int else pa.bool_()]
    stored = pa.RecordBatch.from_struct_array(pa.array(buf, type=row_type))
    columns = dict(zip(STORED_FIELDS, stored.columns, strict=True))
    columns["is_error"] = columns["is_error"].cast(pa.bool_())
    n = len(buf)
    for j, name in enumerate(_EXTRAS):
        values: list = [None] * n
        for i, extra in extras.items():
            values[i - first] = extra[j]
        columns[name] = pa.array(values, type=EVENTS_SCHEMA.field(name).type)
    return pa.Table.from_arrays(
        [columns[name] for name in EVENTS_SCHEMA.names], schema=EVENTS_SCHEMA
    )


def _calls_table(rows: list[list]) -> pa.Table:
    if not rows:
        return CALLS_SCHEMA.empty_table()
    columns = list(zip(*rows, strict=True))
    return pa.Table.from_arrays(
        [pa.array(columns[i], type=f.type) for i, f in enumerate(CALLS_SCHEMA)],
        schema=CALLS_SCHEMA,
    )


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector during an export: a refresh allocates hundreds of
    thousands of small objects that are never cyclic, and each collection would walk them all
    (about 15 % of a refresh)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _write(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def _write_by_day(table: pa.Table, time_column: str, base: Path, name: str) -> int:
    if not table.num_rows:
        return 0
    days = pc.divide(table[time_column], pa.scalar(DAY_NS, pa.int64()))
    bounds = pc.min_max(days).as_py()
    single = bounds["min"] == bounds["max"]  # the usual case: no filtering pass needed
    written = 0
    for day in [bounds["min"]] if single else pc.unique(days).to_pylist():
        part = table if single else table.filter(pc.equal(days, day))
        label = datetime.fromtimestamp(day * 86_400, tz=UTC).strftime("%Y-%m-%d")
        target = base / f"day={label}"
        target.mkdir(parents=True, exist_ok=True)
        _write(part, target / name)
        written += 1
    return written
