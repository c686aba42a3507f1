"""Each request paired with its response: the rows of the analytics copy's `calls` dataset.

Pairing is done once, in log order, while the refresh reads the log (`blackbox.analytics.parquet`
stores what this builds), and by the doctor over one session. The wire rules of pairing come from
`blackbox.recorder.log.pairing`; this module adds what a call row holds (timing, outcome, cancels,
faults, the arguments' fingerprint) and the fast paths a 10,000,000-record refresh needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from operator import attrgetter, itemgetter
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
from blackbox.recorder.gate import args_fingerprint
from blackbox.recorder.log import (
    OPPOSITE,
    Key,
    Pending,
    StoredEvent,
    classify_message,
    events,
    id_fields,
    parse,
    request_key,
    response_key,
)

# The version of the copy's layout, stamped into every file of both datasets: a refresh rebuilds
# a copy of another version. Defined here, with the calls schema, because the storage
# (`blackbox.analytics.parquet`) imports this module and not the reverse.
SCHEMA_VERSION = 3  # 3: session events carry their upgraded document (`doc`)
META_KEY = b"mcp_blackbox.schema_version"

# session_ended outcomes that are not faults: calls still open then are `no_response`, not
# `transport_fault`.
CLEAN_OUTCOMES = frozenset({"ok", "client_closed", "interrupted", "ended"})

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

ERROR_MESSAGE_MAX = 500


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


# A record as `EventStore.read_log_rows` gives it: a tuple in StoredEvent's field order.
Row = tuple
STORED_FIELDS = [f.name for f in fields(StoredEvent)]
(
    R_POSITION, R_SESSION_ID, R_SEQ, R_WALL_NS, R_MONO_NS, R_KIND, R_DIRECTION, R_RAW, R_RAW_SIZE,
    R_MSG_TYPE, R_METHOD, R_RPC_ID, R_RPC_ID_TYPE, R_TOOL, R_IS_ERROR, R_ERROR_CODE, R_ERA,
    R_DEGRADED, R_HASH,
) = range(len(STORED_FIELDS))  # fmt: skip
_as_row = attrgetter(*STORED_FIELDS)

# What a record adds to its events row: (args_fingerprint, error_message, ref_id, ref_id_type,
# batch items) for a frame, and for a session event its document as `blackbox.recorder.log.events`
# reads it, upgraded to the current version, as JSON text (None when it does not decode).
Extras = tuple[str | None, str | None, str | None, str | None, list | None, str | None]


class CallTracker:
    """Pairs requests with responses over a stream of records in log order.

    Each session has its own table of open requests (`blackbox.recorder.log.pairing.Pending`, keyed
    per direction of the request, id and id type: both sides number their own requests, and 0 and
    "0" are different ids). A response closes the open request with its key; a session's end
    closes whatever it left open. Closed calls collect in `closed`.

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
        # session id -> its open calls. A session's table stays, empty once all is answered,
        # until the session ends: one small object per session, and no emptiness check per
        # response on the fast path.
        self.sessions: dict[str, Pending[list | tuple]] = {}
        self.closed: list[list | tuple] = []

    def load(self, rows: Iterable[dict]) -> None:
        """Take back the calls a previous refresh left open."""
        for row in rows:
            call = [row[name] for name in CALL_FIELDS]
            key = request_key(call[C_DIRECTION], call[C_ID], call[C_ID_TYPE])
            self._open(call[C_SESSION], key, call)

    def pending(self) -> list[list]:
        """The calls still open, as rows (outcome as known so far, not closed)."""
        self._make_full()
        opened = [call for table in self.sessions.values() for call in table.outstanding()]
        rows = sorted(opened, key=lambda c: (c[C_REQ_POS], c[C_ITEM] or 0))
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
        return cast("list[list]", closed)  # without by_index, only call rows

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
            return calls_table(rows)
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
        both = pa.concat_tables([calls_table(rows), paired])
        return both.take(pa.array(order, pa.int64()))

    def _make_full(self) -> None:
        """Turn every light open request into a call row."""
        for table in self.sessions.values():
            for key, call in table.items():
                if type(call) is tuple:
                    table.replace(key, _asked(*call[1:]))

    def _call(self, table: Pending[list | tuple], key: Key) -> list | None:
        """The open call with `key` as a call row (made one if it was light), or None."""
        call = table.get(key)
        if isinstance(call, tuple):
            call = _asked(*call[1:])
            table.replace(key, call)
        return call

    def _finish(self, call: list | tuple) -> None:
        """Close a call taken out of its table (answered, displaced, or its session ended)."""
        if isinstance(call, tuple):
            call = _asked(*call[1:])
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
        feed, sessions, opposite = self.feed_row, self.sessions, OPPOSITE
        closed, by_index = self.closed, self.by_index
        for i, ev in enumerate(rows, first):
            if ev[R_KIND] == "frame":
                mtype = ev[R_MSG_TYPE]
                if mtype == "request":
                    fp = _request_fingerprint(ev) if ev[R_METHOD] == "tools/call" else None
                    if fp is not None:
                        extras[i] = (fp, None, None, None, None, None)
                    # The keys are `request_key` and `response_key` written out: a function
                    # call per frame costs here.
                    key = (ev[R_DIRECTION], ev[R_RPC_ID], ev[R_RPC_ID_TYPE])
                    self._open(ev[R_SESSION_ID], key, (i, ev, fp))
                    continue
                if mtype == "response":
                    table = sessions.get(ev[R_SESSION_ID])
                    if table is None:
                        continue  # an orphan response: its session has nothing open
                    key = (opposite.get(ev[R_DIRECTION], ""), ev[R_RPC_ID], ev[R_RPC_ID_TYPE])
                    call = table.close(key)
                    if call is None:
                        continue  # an orphan response: nothing open asked for it
                    if type(call) is not list:  # light: nothing but this response touched it
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
                return (None, message, None, None, None, None) if message is not None else None
            if mtype == "notification":
                if ev[R_METHOD] != "notifications/cancelled":
                    return None
                value, problem = parse(ev[R_RAW])
                ref = _cancelled_id(value) if problem is None else None
                if ref is None:
                    return None
                self.cancel(ev, ref[0], ref[1])
                return (None, None, ref[0], ref[1], None, None)
            if mtype == "batch":
                return self._batch(ev)
            return None
        doc, _problem = events.decode(kind, ev[R_RAW])
        extra = None if doc is None else (None, None, None, None, None, _document_text(doc))
        if kind == "fault":
            table = self.sessions.get(ev[R_SESSION_ID])
            if table is not None:
                for key, _call in table.items():
                    call = self._call(table, key)
                    assert call is not None
                    if call[C_FAULT] is None:
                        call[C_FAULT] = ev[R_SEQ]
        elif kind == "session_ended":
            outcome = doc.outcome if isinstance(doc, events.SessionEnded) else "ended"
            ended = self.sessions.pop(ev[R_SESSION_ID], None)
            for left in ended.outstanding() if ended is not None else ():
                call = _asked(*left[1:]) if isinstance(left, tuple) else left
                if outcome not in CLEAN_OUTCOMES and call[C_FAULT] is None:
                    call[C_FAULT] = ev[R_SEQ]
                self._finish(call)
        return extra

    def _request_row(self, ev: Row) -> Extras | None:
        """Open the call a request starts; a `tools/call` adds its arguments' fingerprint."""
        method, tool, fp = ev[R_METHOD], None, None
        if method == "tools/call":
            fp = _request_fingerprint(ev)
            tool = ev[R_TOOL]
        self.request(ev, None, method, ev[R_RPC_ID], ev[R_RPC_ID_TYPE], tool, fp, ev[R_ERA])
        return (fp, None, None, None, None, None) if fp is not None else None

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
                    fp = args_fingerprint(args) if args is not _NO_ARGS else None
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
        return (None, None, None, None, items, None)

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
            sid,
            request_key(direction, rpc_id, rpc_id_type),
            [
                sid, direction, rpc_id, rpc_id_type, method, tool, fp, era, ev[R_POSITION],
                ev[R_SEQ], item, ev[R_WALL_NS], ev[R_MONO_NS], None, None, None, None, None, None,
                None, None, None, None, None, False,
            ],
        )  # fmt: skip

    def _open(self, sid: str, key: Key, call: list | tuple) -> None:
        """Open `call` (a call row, or a light request) under `key` in session `sid`'s table."""
        table = self.sessions.get(sid)
        if table is None:
            table = self.sessions[sid] = Pending()
        displaced = table.open(key, call)
        if displaced is not None:  # an id reused while outstanding: the first is never answered
            self._finish(displaced)

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
        table = self.sessions.get(ev[R_SESSION_ID])
        if table is None:
            return  # an orphan response: its session has nothing open
        key = response_key(ev[R_DIRECTION], rpc_id, rpc_id_type)
        call = self._call(table, key)
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
        table.close(key)
        self._finish(call)

    def cancel(self, ev: Row, ref_id: str | None, ref_id_type: str | None) -> None:
        # The requester cancels its own request: same direction as the request.
        table = self.sessions.get(ev[R_SESSION_ID])
        key = request_key(ev[R_DIRECTION], ref_id, ref_id_type)
        call = self._call(table, key) if table is not None else None
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
    return args_fingerprint(args) if args is not _NO_ARGS else None


def _document_text(doc: events.Document) -> str:
    """A session event's document for the `doc` column: JSON text of its current version."""
    return events.dumps(events.as_dict(doc)).decode()


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


def calls_table(rows: list[list]) -> pa.Table:
    """Call rows as a `calls` table."""
    if not rows:
        return CALLS_SCHEMA.empty_table()
    columns = list(zip(*rows, strict=True))
    return pa.Table.from_arrays(
        [pa.array(columns[i], type=f.type) for i, f in enumerate(CALLS_SCHEMA)],
        schema=CALLS_SCHEMA,
    )
