"""The analytics copy of the log: the store exported to Parquet, incrementally.

The log is append-only, so a refresh reads only the records past the last exported global
position (`EventStore.read_log_rows`: plain driver tuples, no object per record) and appends new
files; a refresh with nothing new costs one `max_position()` query. Two datasets are written,
each partitioned by UTC day (`<dataset>/day=YYYY-MM-DD/p<first>-<last>.parquet`, the positions
of the records a file came from):

- `events`: every record of the log with the store's derived columns, plus what analytics needs
  from the raw JSON, extracted once here (arguments fingerprint, error message, the id a
  `notifications/cancelled` names, the messages of a batch).
- `calls`: each request paired with its response (`blackbox.analytics.calls`). Pairing is done while
  the refresh reads the log, in log order, rather than by a join at query time: a join is paid
  on every query and grows with the log, the pairing is paid once per frame. Requests still
  unanswered in a session that has not ended are kept in a small `pending` file and re-read by
  the next refresh; they become final rows when answered or when their session ends. A call
  answered within its chunk (nearly all) is kept as two row indices and its columns are taken
  from the chunk's `events` table in Arrow (`CallTracker`).

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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from blackbox.analytics.calls import (
    CALLS_SCHEMA,
    META_KEY,
    R_IS_ERROR,
    R_KIND,
    R_POSITION,
    R_SEQ,
    R_SESSION_ID,
    SCHEMA_VERSION,
    STORED_FIELDS,
    CallTracker,
    Extras,
    Row,
    calls_table,
)
from blackbox.recorder import FILE_MODE, private_dir, private_file
from blackbox.recorder.log import Kind, StoredEvent, arrow_fields
from blackbox.recorder.store import EventStore

DAY_NS = 86_400 * 1_000_000_000
# How many records a refresh buffers before writing files (bounds memory on a big first export).
CHUNK = 200_000
# How often a refresh reports progress (records).
PROGRESS_EVERY = 25_000
# A day partition with more files than this is compacted into one file.
COMPACT_FILES = 8

Progress = Callable[[int, int], None]

_KIND = itemgetter(R_KIND)

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

# A record's stored fields (from `StoredEvent`), then what the refresh adds (`Extras`): a frame's
# fingerprint, error message, cancelled id and batch items, a session event's document.
EVENTS_SCHEMA = pa.schema(
    [
        *arrow_fields(StoredEvent),
        pa.field("args_fingerprint", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("ref_id", pa.string()),
        pa.field("ref_id_type", pa.string()),
        pa.field("items", pa.list_(ITEM_TYPE)),
        pa.field("doc", pa.string()),
    ],
    metadata={META_KEY: str(SCHEMA_VERSION).encode()},
)

# every frame.
DATASETS = {"events": EVENTS_SCHEMA, "control": EVENTS_SCHEMA, "calls": CALLS_SCHEMA}
_FILE_RE = re.compile(r"^p(\d+)-(\d+)\.parquet$")


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
        # The copy is the log's content: its folders 0700 and files 0600, whatever the umask
        # (recorder/private.py), like the store it copies.
        private_dir(self.root)
        with open(private_file(self.root / ".lock"), "a+") as handle:
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
            private_dir(self.dataset_dir(name))
            if not self.schema_file(name).exists():
                pq.write_table(schema.empty_table(), private_file(self.schema_file(name)))
        private_dir(self.root / "pending")

    def _write_state(self, state: dict) -> None:
        tmp = self.root / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        os.chmod(tmp, FILE_MODE)
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
            assert state is not None  # no state gave a reason ("new"): a fresh one was just made
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
            _write(calls_table(rows), self.root / "pending" / pending_name)
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


_EXTRAS = ["args_fingerprint", "error_message", "ref_id", "ref_id_type", "items", "doc"]


# The stored columns as one Arrow struct: Arrow converts the record tuples itself, faster than
# transposing them in Python first. is_error comes as 0/1 from SQLite and as a bool from
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


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector during an export: a refresh allocates hundreds of
    thousands of small objects that are never cyclic, and each collection would walk them all
    for nothing."""
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
    os.chmod(tmp, FILE_MODE)  # before it is visible under its name (recorder/private.py)
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
        private_dir(target)
        _write(part, target / name)
        written += 1
    return written
