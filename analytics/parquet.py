"""The analytics copy of the log: the store exported to Parquet, incrementally.

The log is append-only, so a refresh reads only the records past the last exported global
position (`EventStore.read_log`) and appends new files; a refresh with nothing new costs one
`max_position()` query. Two datasets are written, each partitioned by UTC day
(`<dataset>/day=YYYY-MM-DD/p<first>-<last>.parquet`, the positions of the records a file came from):

- `events`: every record of the log with the store's derived columns, plus what analytics needs
  from the raw JSON, extracted once here (arguments fingerprint, error message, the id a
  `notifications/cancelled` names, the messages of a batch).
- `calls`: each request paired with its response. Pairing is done here, in log order, rather than
  by a join at query time: a 10,000,000-call join costs seconds on every query, the pairing costs
  microseconds per frame once. Requests still unanswered in a session that has not ended are kept
  in a small `pending` file and re-read by the next refresh; they become final rows when answered
  or when their session ends.

Crash safety: data files are written first, then the pending file, then `state.json` (atomic
rename) with the new position. Files past the recorded position are leftovers of an interrupted
refresh and are deleted before the next one, so a crash never duplicates or loses a record.
A record of retention (`retention_applied`), a store whose log shrank, or a schema version change
rebuilds the copy from scratch: it is a cache of the store, never the system of record.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recorder.jsonrpc import classify_message, id_fields, parse
from recorder.model import Kind, StoredEvent
from recorder.store import EventStore

SCHEMA_VERSION = 1
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

DATASETS = {"events": EVENTS_SCHEMA, "calls": CALLS_SCHEMA}
_FILE_RE = re.compile(r"^p(\d+)-(\d+)\.parquet$")
ERROR_MESSAGE_MAX = 500


def fingerprint(arguments: object) -> str:
    """sha256 hex of canonical JSON arguments: the same expression the decision producers use."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


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


def base_outcome(call: dict) -> str:
    """A call's outcome from its own messages; the views add `denied` from decisions."""
    cancel, response = call["cancel_seq"], call["response_seq"]
    if cancel is not None and (response is None or cancel < response):
        return "cancelled"
    if call["response_type"] == "error":
        return "rpc_error"
    if call["response_type"] == "response":
        return "tool_error" if call["is_error"] else "ok"
    if call["fault_seq"] is not None:
        return "transport_fault"
    return "no_response"


_OPPOSITE = {"c2s": "s2c", "s2c": "c2s"}


@dataclass
class CallTracker:
    """Pairs requests with responses over a stream of records in log order.

    Ids are keyed per (session, direction of the request, id, id type): both sides number their
    own requests, and 0 and "0" are different ids. A response closes the open request with its
    key; a session's end closes whatever it left open.
    """

    open: dict[tuple[str, str, str | None, str | None], dict] = field(default_factory=dict)
    by_session: dict[str, set] = field(default_factory=dict)

    def load(self, rows: Iterable[dict]) -> None:
        for row in rows:
            key = (row["session_id"], row["direction"], row["rpc_id"], row["rpc_id_type"])
            self.open[key] = row
            self.by_session.setdefault(row["session_id"], set()).add(key)

    def pending(self) -> list[dict]:
        rows = []
        for row in sorted(
            self.open.values(), key=lambda r: (r["request_position"], r["request_item"] or 0)
        ):
            rows.append({**row, "base_outcome": base_outcome(row), "closed": False})
        return rows

    def _close(self, key: tuple, closed: list[dict]) -> None:
        row = self.open.pop(key)
        keys = self.by_session.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.by_session[key[0]]
        row["base_outcome"] = base_outcome(row)
        row["closed"] = True
        closed.append(row)

    def feed(
        self, ev: StoredEvent, messages: list[tuple[int | None, dict, dict | None]]
    ) -> list[dict]:
        """Fold one record in; returns the calls it closed. `messages` are a frame's messages as
        (batch item index, derived fields, parsed message or None)."""
        closed: list[dict] = []
        if ev.kind == Kind.FRAME:
            for item, m, obj in messages:
                self._message(ev, item, m, obj, closed)
        elif ev.kind == Kind.FAULT:
            for key in self.by_session.get(ev.session_id, ()):
                if self.open[key]["fault_seq"] is None:
                    self.open[key]["fault_seq"] = ev.seq
        elif ev.kind == Kind.SESSION_ENDED:
            doc = _doc(ev.raw)
            outcome = str(doc.get("outcome") or doc.get("reason") or "ended")
            for key in list(self.by_session.get(ev.session_id, ())):
                if outcome not in CLEAN_OUTCOMES and self.open[key]["fault_seq"] is None:
                    self.open[key]["fault_seq"] = ev.seq
                self._close(key, closed)
        return closed

    def _message(
        self, ev: StoredEvent, item: int | None, m: dict, obj: dict | None, closed: list[dict]
    ) -> None:
        kind = m["msg_type"]
        if kind == "request":
            key = (ev.session_id, ev.direction, m["rpc_id"], m["rpc_id_type"])
            if key in self.open:  # an id reused while outstanding: the first is never answered
                self._close(key, closed)
            self.open[key] = {
                "session_id": ev.session_id,
                "direction": ev.direction,
                "rpc_id": m["rpc_id"],
                "rpc_id_type": m["rpc_id_type"],
                "method": m["method"],
                "tool": m["tool"],
                "args_fingerprint": m.get("args_fingerprint"),
                "era": m.get("era"),
                "request_position": ev.position,
                "request_seq": ev.seq,
                "request_item": item,
                "started_ns": ev.wall_ns,
                "request_mono_ns": ev.mono_ns,
                "response_position": None,
                "response_seq": None,
                "response_type": None,
                "ended_ns": None,
                "latency_ns": None,
                "is_error": None,
                "error_code": None,
                "error_message": None,
                "cancel_seq": None,
                "fault_seq": None,
            }
            self.by_session.setdefault(ev.session_id, set()).add(key)
        elif kind in ("response", "error"):
            key = (ev.session_id, _OPPOSITE.get(ev.direction, ""), m["rpc_id"], m["rpc_id_type"])
            row = self.open.get(key)
            if row is None:
                return  # an orphan response: nothing asked for it (the doctor reports it)
            row.update(
                response_position=ev.position,
                response_seq=ev.seq,
                response_type=kind,
                ended_ns=ev.wall_ns,
                latency_ns=ev.mono_ns - row["request_mono_ns"],
                is_error=m["is_error"] if kind == "response" else None,
                error_code=m["error_code"],
                error_message=m.get("error_message"),
            )
            self._close(key, closed)
        elif kind == "notification" and m["method"] == "notifications/cancelled":
            # The requester cancels its own request: same direction as the request.
            key = (ev.session_id, ev.direction, m.get("ref_id"), m.get("ref_id_type"))
            row = self.open.get(key)
            if row is not None and row["cancel_seq"] is None:
                row["cancel_seq"] = ev.seq


# -- what a record contributes -------------------------------------------------------------------


def _doc(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _extras(m: dict, obj: object) -> None:
    """Fill the fields analytics reads from a message's JSON (only parsed when needed)."""
    if not isinstance(obj, dict):
        return
    params = obj.get("params")
    if m["msg_type"] == "request" and m["method"] == "tools/call" and isinstance(params, dict):
        m["args_fingerprint"] = fingerprint(params.get("arguments", {}))
    elif m["msg_type"] == "error":
        error = obj.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            m["error_message"] = message[:ERROR_MESSAGE_MAX]
    elif (
        m["method"] == "notifications/cancelled"
        and isinstance(params, dict)
        and "requestId" in params
    ):
        m["ref_id"], m["ref_id_type"] = id_fields(params["requestId"])


def _needs_parse(ev: StoredEvent) -> bool:
    return (
        ev.msg_type == "batch"
        or ev.msg_type == "error"
        or (ev.msg_type == "request" and ev.method == "tools/call")
        or (ev.msg_type == "notification" and ev.method == "notifications/cancelled")
    )


def messages_of(ev: StoredEvent) -> list[tuple[int | None, dict, object]]:
    """A frame's JSON-RPC messages as (batch item index or None, fields, parsed JSON or None)."""
    if ev.kind != Kind.FRAME:
        return []
    m = {
        "msg_type": ev.msg_type,
        "method": ev.method,
        "rpc_id": ev.rpc_id,
        "rpc_id_type": ev.rpc_id_type,
        "tool": ev.tool,
        "is_error": ev.is_error,
        "error_code": ev.error_code,
        "era": ev.era,
    }
    if not _needs_parse(ev):
        return [(None, m, None)]
    value, problem = parse(ev.raw)
    if problem is not None:
        return [(None, m, None)]
    if ev.msg_type != "batch":
        _extras(m, value)
        return [(None, m, value)]
    out: list[tuple[int | None, dict, object]] = []
    for index, item in enumerate(value if isinstance(value, list) else []):
        c = classify_message(item)
        im = {
            "msg_type": c.msg_type,
            "method": c.method,
            "rpc_id": c.rpc_id,
            "rpc_id_type": c.rpc_id_type,
            "tool": c.tool,
            "is_error": c.is_error,
            "error_code": c.error_code,
            "era": c.era or ev.era,
        }
        _extras(im, item)
        out.append((index, im, item))
    return out


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
        tracker = CallTracker()
        pending = self.pending_file() if state.get("pending") else None
        if pending is not None and pending.exists():
            tracker.load(pq.read_table(pending).to_pylist())
        start = state["position"]
        total = max(top - start, 0)
        events = _Columns(EVENTS_SCHEMA)
        calls: list[dict] = []
        chunk_first = start + 1
        last = start
        last_key = state.get("last_key")
        done = 0
        files = 0
        for ev in store.read_log(start):
            if ev.kind == Kind.RETENTION_APPLIED and start > 0:
                return None  # records before it may be gone from the store: rebuild
            messages = messages_of(ev)
            events.add(ev, messages)
            calls.extend(tracker.feed(ev, messages))
            last = ev.position
            last_key = [ev.session_id, ev.seq]
            done += 1
            if len(events) >= CHUNK:
                files += self._write_chunk(events, calls, chunk_first, last)
                events, calls, chunk_first = _Columns(EVENTS_SCHEMA), [], last + 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(done, max(done, total))
        if len(events):
            files += self._write_chunk(events, calls, chunk_first, last)
        if progress is not None and total:
            progress(done, max(done, total))
        pending_name = None
        rows = tracker.pending()
        if rows:
            pending_name = f"calls-p{last:012d}.parquet"
            _write(
                pa.Table.from_pylist(rows, schema=CALLS_SCHEMA),
                self.root / "pending" / pending_name,
            )
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

    def _write_chunk(self, events: _Columns, calls: list[dict], first: int, last: int) -> int:
        name = f"p{first:012d}-{last:012d}.parquet"
        written = _write_by_day(events.table(), "wall_ns", self.dataset_dir("events"), name)
        if calls:
            table = pa.Table.from_pylist(calls, schema=CALLS_SCHEMA)
            written += _write_by_day(table, "started_ns", self.dataset_dir("calls"), name)
        return written

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


class _Columns:
    """Column buffers for the events dataset (lists are far cheaper than row dicts)."""

    NAMES = [f.name for f in EVENTS_SCHEMA]

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.cols: dict[str, list] = {name: [] for name in self.NAMES}

    def __len__(self) -> int:
        return len(self.cols["position"])

    def add(self, ev: StoredEvent, messages: list[tuple[int | None, dict, object]]) -> None:
        c = self.cols
        for name in (
            "position",
            "session_id",
            "seq",
            "wall_ns",
            "mono_ns",
            "kind",
            "direction",
            "msg_type",
            "method",
            "rpc_id",
            "rpc_id_type",
            "tool",
            "is_error",
            "error_code",
            "era",
            "raw",
            "raw_size",
            "hash",
        ):
            c[name].append(getattr(ev, name))
        first = messages[0][1] if len(messages) == 1 and messages[0][0] is None else {}
        c["args_fingerprint"].append(first.get("args_fingerprint"))
        c["error_message"].append(first.get("error_message"))
        c["ref_id"].append(first.get("ref_id"))
        c["ref_id_type"].append(first.get("ref_id_type"))
        if ev.msg_type == "batch":
            c["items"].append([{k: m[k] for k in ITEM_TYPE.names} for _, m, _ in messages])
        else:
            c["items"].append(None)

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.cols, schema=self.schema)


def _write(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def _write_by_day(table: pa.Table, time_column: str, base: Path, name: str) -> int:
    days = pc.divide(table[time_column], pa.scalar(DAY_NS, pa.int64()))
    written = 0
    for day in pc.unique(days).to_pylist():
        part = table.filter(pc.equal(days, day))
        label = datetime.fromtimestamp(day * 86_400, tz=UTC).strftime("%Y-%m-%d")
        target = base / f"day={label}"
        target.mkdir(parents=True, exist_ok=True)
        _write(part, target / name)
        written += 1
    return written
