"""Compliance export: write selected sessions as a self-describing bundle an auditor can verify
offline (`blackbox.recorder.compliance.bundle_check`), without access to the store or trust in this
tool.

A bundle is a directory:

- `records.<ext>`: every field of every record of the selected sessions, in session then seq
  order, including the raw bytes (binary in Parquet, base64 in JSONL/CSV) and each record's chain
  hash (hex), plus `redacted` (whether the raw was changed by redaction);
- `sessions.<ext>`: the sessions projection, with each session's head, record count and hold,
  its counts and outcome as `blackbox sessions` gives them (`blackbox.recorder.query`), and the
  stored ending as `ended`;
- `decisions.<ext>`: the permission decisions, one row per `decision` record;
- `manifest.json`, written last: tool and schema version, the selection, the time range, rows and
  sha256 per file, each session's chain head / last seq / sealed count / redacted count (and, with
  a checkpoint, its leaves in the log's tree), and `chain_coverage`, which says exactly what the
  hash chain proves about this bundle;
- with a checkpoint, `checkpoint.txt` and `proofs.jsonl` (`bundle_proof`), and, when the key that
  signed the checkpoint is at hand, `manifest.sig`: that key's signature over the manifest, which
  makes the list of sessions, records and files complete under signature (`bundle_sign`).

Redaction and the chain: the chain covers the stored record (session, kind, direction, times,
raw size and raw bytes; see `blackbox.recorder.log.chain.canonical`). An unredacted record is
re-hashed from the exported fields and must match its hash exactly. A redacted record cannot be
re-hashed from its redacted raw, so it carries its original hash, which the verifier accepts as
*attested*: the next record must link from it, the session must end at the manifest's head, and the
sealed count must hold, so it cannot be dropped, moved or have its hash changed without a finding —
but its own fields are covered only by the file hash. The manifest counts both kinds per session.
"""

from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
from blackbox.recorder import BlackboxError, __version__, private_dir, private_file
from blackbox.recorder.compliance import bundle_proof, bundle_sign, withhold
from blackbox.recorder.log import (
    Kind,
    SessionInfo,
    StoredEvent,
    arrow_columns,
    chain,
    commitment,
    document_columns,
    events,
)
from blackbox.recorder.privacy import Redactor
from blackbox.recorder.query import COUNT_NAMES, SessionCounts, count_sessions, derived_outcome
from blackbox.recorder.store import EventStore, tree
from blackbox.recorder.trust import Signer

FORMATS = ("parquet", "jsonl", "csv")
BUNDLE_FORMAT = "mcp-blackbox-export"
BUNDLE_VERSION = 1
MANIFEST = bundle_sign.MANIFEST_JSON  # "manifest.json"
CSV_NULL = "\\N"  # PostgreSQL COPY's null: CSV cannot tell an empty string from a missing value
BATCH_ROWS = 4096


class ExportError(BlackboxError):
    """An export that cannot be made as asked."""


# (name, arrow type) of each file's columns; the one definition writers and readers share. Record
# and decision columns derive from the record (`StoredEvent`) and the decision document's schema.
RECORD_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    *arrow_columns(StoredEvent, hash=pa.string()),  # the hash as hex text
    ("redacted", pa.bool_()),
    # The record's commitment disclosed (recorder/log/commitment.py): `salt`, the record's salt
    # as hex, for a record shown whole; `commitments`, for a redacted one, a JSON list with per
    # token of its shown raw ["salt", hex] or ["digest", hex] (withheld).
    ("salt", pa.string()),
    ("commitments", pa.string()),
)
SESSION_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("session_id", pa.string()),
    ("name", pa.string()),
    ("transport", pa.string()),
    ("command", pa.string()),
    ("started_ns", pa.int64()),
    ("ended_ns", pa.int64()),
    ("outcome", pa.string()),  # derived from the counts (`query.derived_outcome`)
    ("ended", pa.string()),  # the stored ending
    *((name, pa.int64()) for name in COUNT_NAMES),
    ("era", pa.string()),
    ("replay_of", pa.string()),
    ("frames", pa.int64()),
    ("records", pa.int64()),
    ("last_seq", pa.int64()),
    ("sealed", pa.bool_()),
    ("sealed_count", pa.int64()),
    ("head", pa.string()),
    ("held", pa.bool_()),
    ("hold_reason", pa.string()),
)
_DECISION_FIELDS = events.fields_of(Kind.DECISION)
DECISION_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("session_id", pa.string()),
    ("seq", pa.int64()),
    ("wall_ns", pa.int64()),
    *document_columns(_DECISION_FIELDS),
)
FILES = {"records": RECORD_COLUMNS, "sessions": SESSION_COLUMNS, "decisions": DECISION_COLUMNS}

CHAIN_FIELDS = ["session_id", "kind", "direction", "wall_ns", "mono_ns", "raw_size", "raw"]


def file_name(stem: str, fmt: str) -> str:
    return f"{stem}.{fmt}"


# -- writing and reading rows in each format ---------------------------------------------------


class _RowWriter:
    """Writes dict rows of one file in one format, streaming (bounded memory)."""

    def __init__(self, path: Path, columns: Sequence[tuple[str, pa.DataType]], fmt: str) -> None:
        self.path, self.columns, self.fmt = path, columns, fmt
        self.names = [name for name, _ in columns]
        self.rows = 0
        self._buffer: list[dict] = []
        # The bundle holds the records: 0600 whatever the umask (recorder/private.py). Made
        # before the writer opens it, which keeps the mode.
        private_file(path)
        if fmt == "parquet":
            schema = pa.schema(list(columns))
            self._pq = pq.ParquetWriter(path, schema, compression="zstd")
        else:
            self._fh = path.open("w", encoding="utf-8", newline="")
            if fmt == "csv":
                self._csv = csv.writer(self._fh, lineterminator="\n")
                self._csv.writerow(self.names)

    def write(self, row: dict) -> None:
        self.rows += 1
        if self.fmt == "parquet":
            self._buffer.append(row)
            if len(self._buffer) >= BATCH_ROWS:
                self._flush()
        elif self.fmt == "jsonl":
            doc = {name: _text_value(row.get(name)) for name in self.names}
            self._fh.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
        else:
            self._csv.writerow([_csv_value(row.get(name)) for name in self.names])

    def _flush(self) -> None:
        if self._buffer:
            table = pa.Table.from_pylist(self._buffer, schema=self._pq.schema)
            self._pq.write_table(table)
            self._buffer = []

    def close(self) -> None:
        if self.fmt == "parquet":
            self._flush()
            self._pq.close()
        else:
            self._fh.close()


def _text_value(value: object) -> object:
    return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value


def _csv_value(value: object) -> str:
    if value is None:
        return CSV_NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def read_rows(path: Path, columns: Sequence[tuple[str, pa.DataType]], fmt: str) -> Iterator[dict]:
    """The rows of a bundle file as dicts with Python values (raw as bytes), streaming.

    Raises ValueError (or pyarrow's errors) for a file that does not parse.
    """
    types = dict(columns)
    if fmt == "parquet":
        with pq.ParquetFile(path) as pf:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS):
                yield from batch.to_pylist()
        return
    with path.open("r", encoding="utf-8", newline="") as fh:
        if fmt == "jsonl":
            for line in fh:
                if not line.strip():
                    continue
                doc = json.loads(line)
                if not isinstance(doc, dict):
                    raise ValueError("a line is not a JSON object")
                yield {name: _from_text(doc.get(name), typ) for name, typ in columns}
            return
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise ValueError("the CSV file has no header")
        for values in reader:
            if len(values) != len(header):
                raise ValueError(f"a CSV row has {len(values)} fields, the header {len(header)}")
            yield {
                name: _from_csv(value, types[name]) if name in types else value
                for name, value in zip(header, values, strict=True)
            }


def _from_text(value: object, typ: pa.DataType) -> object:
    if value is None:
        return None
    if typ == pa.binary():
        if not isinstance(value, str):
            raise ValueError("a binary field is not base64 text")
        return base64.b64decode(value, validate=True)
    return value


def _from_csv(value: str, typ: pa.DataType) -> object:
    if value == CSV_NULL:
        return None
    if typ == pa.binary():
        return base64.b64decode(value, validate=True)
    if typ == pa.int64():
        return int(value)
    if typ == pa.bool_():
        if value not in ("true", "false"):
            raise ValueError(f"{value!r} is not a boolean")
        return value == "true"
    return value


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# -- rows from the store -----------------------------------------------------------------------


def record_row(
    ev: StoredEvent, redactor: Redactor | None = None, key: tree.CommitKey | None = None
) -> dict:
    """One record as a bundle row; the raw is redacted when a redactor is given. With the
    store's commitment `key`, the row discloses the record's salt (shown whole) or the salts of
    the tokens it shows and the digests of those it withholds (redacted), which is what a
    committed leaf is recomputed from."""
    raw = ev.raw
    if redactor is not None:
        raw = redactor.redact_frame(ev.raw)
    salt = commitments = None
    if key is not None and key.key:
        r = key.salt(ev.session_id, ev.seq)
        if raw != ev.raw:
            assert redactor is not None  # the raw changed
            hidden = withhold.withheld_tokens(ev.raw, raw, redactor.fingerprint)
            # No token changed (an empty object under a secret's name): shown whole.
            raw = ev.raw
            if hidden:
                shown = commitment.disclose(ev.raw, r, set(hidden), hidden)
                raw = shown.raw
                commitments = json.dumps(shown.as_json(), separators=(",", ":"))
        if raw == ev.raw:
            salt = r.hex()
    return {
        "position": ev.position,
        "session_id": ev.session_id,
        "seq": ev.seq,
        "wall_ns": ev.wall_ns,
        "mono_ns": ev.mono_ns,
        "kind": ev.kind,
        "direction": ev.direction,
        "raw": raw,
        "raw_size": ev.raw_size,
        "msg_type": ev.msg_type,
        "method": ev.method,
        "rpc_id": ev.rpc_id,
        "rpc_id_type": ev.rpc_id_type,
        "tool": ev.tool,
        "is_error": ev.is_error,
        "error_code": ev.error_code,
        "era": ev.era,
        "degraded": ev.degraded,
        "hash": ev.hash.hex(),
        "redacted": raw != ev.raw,
        "salt": salt,
        "commitments": commitments,
    }


def decision_row(session_id: str, seq: object, wall_ns: object, raw: bytes) -> dict:
    """One `decision` record as a row of the decisions file (from its document; a document that
    does not decode gives a row of nulls). `seq` and `wall_ns` are copied as given: the verifier
    rebuilds rows from what a bundle's records file holds, whatever that is."""
    doc = events.decode_as(events.Decision, raw)
    row: dict[str, object] = {"session_id": session_id, "seq": seq, "wall_ns": wall_ns}
    for name, typ in DECISION_COLUMNS[3:]:
        value = getattr(doc, name) if doc is not None else None
        if typ == pa.int64():
            row[name] = value if isinstance(value, int) and not isinstance(value, bool) else None
        else:
            row[name] = None if value is None else str(value)
    return row


# -- the export --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """Which sessions to export: started in [since_ns, until_ns), named as the glob `server`
    matches, or listed."""

    since_ns: int | None = None
    until_ns: int | None = None
    session_ids: tuple[str, ...] = ()
    server: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "since_ns": self.since_ns,
            "until_ns": self.until_ns,
            "since": iso(self.since_ns),
            "until": iso(self.until_ns),
            "sessions": list(self.session_ids),
            "server": self.server,
        }


@dataclass(frozen=True, slots=True)
class ExportProgress:
    """Where a long export is: sessions done of total, records written so far."""

    sessions_done: int
    sessions_total: int
    records: int


@dataclass(slots=True)
class ExportResult:
    out_dir: Path
    manifest: dict
    manifest_sha256: str
    sessions: list[str] = field(default_factory=list)
    # Sessions whose chain did not verify in the store at export time (exported anyway).
    broken: list[str] = field(default_factory=list)
    # The key that signed the manifest (manifest.sig), by name; None for an unsigned bundle.
    signed_by: str | None = None

    @property
    def records(self) -> int:
        return int(self.manifest["counts"]["records"])


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="milliseconds")


def select_sessions(store: EventStore, selection: Selection) -> list[SessionInfo]:
    """The sessions a selection names, oldest first."""
    if selection.session_ids:
        infos = [store.session(sid) for sid in dict.fromkeys(selection.session_ids)]
    else:
        infos = store.list_sessions(since_ns=selection.since_ns)
    out = []
    for info in infos:
        started = info.started_ns
        if selection.since_ns is not None and (started is None or started < selection.since_ns):
            continue
        if selection.until_ns is not None and (started is None or started >= selection.until_ns):
            continue
        if selection.server is not None and not fnmatch.fnmatchcase(
            info.name or "", selection.server
        ):
            continue
        out.append(info)
    out.sort(key=lambda i: (i.started_ns or 0, i.session_id))
    return out


def _prepare_dir(out_dir: Path) -> None:
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ExportError(f"{out_dir} exists and is not a directory")
        if any(out_dir.iterdir()):
            raise ExportError(f"{out_dir} is not empty: export into a new or empty directory")
    try:
        private_dir(out_dir)  # 0700 when made here; a folder the user made keeps its mode
    except OSError as exc:
        raise ExportError(f"cannot create {out_dir}: {exc.strerror or exc}") from None


def export_bundle(
    store: EventStore,
    out_dir: Path,
    selection: Selection | None = None,
    fmt: str = "parquet",
    redactor: Redactor | None = None,
    progress: Callable[[ExportProgress], None] | None = None,
    sessions: Iterable[SessionInfo] | None = None,
    include_broken: bool = False,
    checkpoint_note: str | None = None,
    manifest_signer: Signer | Literal["configured"] | None = bundle_sign.CONFIGURED,
) -> ExportResult:
    """Write the selected sessions (or `sessions`, when given) as a bundle in `out_dir`, which
    must be new or empty. The manifest is written last: a directory without one is incomplete.

    Every session is first checked as `blackbox verify` checks it (its chain against its seal
    and its `sessions` row, derived columns, projection, removals); a session that fails makes
    the export refuse, unless `include_broken`, when it is exported with its findings in the
    manifest (`store_findings`, `chain_intact_at_export: false`) and `verify-export` fails on
    it. A bundle thus never vouches for what the store already could not.

    With `checkpoint_note` (a signed checkpoint of the log), the bundle carries it and an
    inclusion proof of every record in it (recorder/compliance/bundle_proof.py), and the manifest
    lists each session's leaves. `manifest_signer` signs the manifest (manifest.sig,
    recorder/compliance/bundle_sign.py) with the key that signed that checkpoint: by default the
    configured key (`keys.configured_signer`) when it is that key, so that every export and
    retention archive made with a key is signed; None for an unsigned bundle; an explicit
    `Signer` must be the checkpoint's key, else ExportError before anything is written."""
    try:
        signer = bundle_sign.manifest_signer(manifest_signer, checkpoint_note)
    except bundle_sign.SignerMismatch as exc:
        raise ExportError(f"{exc}; nothing was written") from None
    try:
        return _export(
            store,
            out_dir,
            selection,
            fmt,
            redactor,
            progress,
            sessions,
            include_broken,
            checkpoint_note,
            signer,
        )
    except OSError as exc:  # a full disk or a vanished directory: one clear line, no traceback
        raise ExportError(
            f"cannot write the bundle in {out_dir}: {exc.strerror or exc}; it is incomplete "
            "(no manifest.json)"
        ) from None


def _export(
    store: EventStore,
    out_dir: Path,
    selection: Selection | None = None,
    fmt: str = "parquet",
    redactor: Redactor | None = None,
    progress: Callable[[ExportProgress], None] | None = None,
    sessions: Iterable[SessionInfo] | None = None,
    include_broken: bool = False,
    checkpoint_note: str | None = None,
    signer: Signer | None = None,
) -> ExportResult:
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    selection = selection or Selection()
    out_dir = Path(out_dir)
    infos = list(sessions) if sessions is not None else select_sessions(store, selection)
    checked = store.verify_each([info.session_id for info in infos])
    failing = [sid for sid, found in checked.items() if found]
    if failing and not include_broken:
        first = checked[failing[0]][0]
        raise ExportError(
            f"{len(failing)} session(s) fail verification in the store (first: session "
            f"{failing[0]}: {first.problem}: {first.detail}); nothing was written. See "
            "`blackbox verify`, or pass --include-broken to export them marked as broken"
        )
    _prepare_dir(out_dir)
    holds = {sid: reason for sid, reason, _ in store.list_holds()}
    with store.transaction() as conn:
        key = tree.commit_key(conn)
    counted = count_sessions(store, [info.session_id for info in infos])
    writers = {
        stem: _RowWriter(out_dir / file_name(stem, fmt), cols, fmt) for stem, cols in FILES.items()
    }
    per_session: dict[str, dict] = {}
    first_ns: int | None = None
    last_ns: int | None = None
    redacted_total = 0
    broken: list[str] = []
    try:
        for done, info in enumerate(infos, start=1):
            count = redacted = 0
            head: bytes | None = None
            last_seq = 0
            sealed_count: int | None = None
            # The store's chain is checked again on the way out (one hash per record), so a
            # record changed since `verify` ran is caught too: exported only when broken
            # sessions were asked for — they are evidence — and said so.
            prev, intact = chain.genesis(info.session_id), True
            for ev in store.read_session(info.session_id):
                if intact and (ev.seq != last_seq + 1 or chain.link(prev, ev) != ev.hash):
                    intact = False
                prev = ev.hash
                row = record_row(ev, redactor, key)
                writers["records"].write(row)
                count += 1
                redacted += row["redacted"]
                head, last_seq = ev.hash, ev.seq
                first_ns = ev.wall_ns if first_ns is None else min(first_ns, ev.wall_ns)
                last_ns = ev.wall_ns if last_ns is None else max(last_ns, ev.wall_ns)
                if ev.kind == Kind.SESSION_SEALED and sealed_count is None:
                    sealed_count = chain.seal_count(ev.raw)
                if ev.kind == Kind.DECISION:
                    writers["decisions"].write(
                        decision_row(ev.session_id, ev.seq, ev.wall_ns, row["raw"])
                    )
                if progress is not None and count % 10_000 == 0:
                    progress(ExportProgress(done - 1, len(infos), writers["records"].rows))
            redacted_total += redacted
            store_findings = [f.as_dict() for f in checked[info.session_id]]
            intact = intact and not store_findings
            per_session[info.session_id] = {
                "records": count,
                "last_seq": last_seq,
                "head": head.hex() if head is not None else None,
                "sealed_count": sealed_count,
                "redacted_records": redacted,
                "chain_intact_at_export": intact,
                "store_findings": store_findings,
            }
            if not intact:
                broken.append(info.session_id)
            writers["sessions"].write(
                _session_row(
                    info, per_session[info.session_id], counted[info.session_id], holds, redactor
                )
            )
            if progress is not None:
                progress(ExportProgress(done, len(infos), writers["records"].rows))
    finally:
        for writer in writers.values():
            writer.close()
    files = {}
    for stem, writer in writers.items():
        name = file_name(stem, fmt)
        files[name] = {
            "role": stem,
            "rows": writer.rows,
            "bytes": (out_dir / name).stat().st_size,
            "sha256": sha256_file(out_dir / name),
        }
    tree_entry = None
    if checkpoint_note is not None:
        tree_entry, proof_files, leaves = bundle_proof.write(
            store, out_dir, checkpoint_note, per_session
        )
        files.update(proof_files)
        for sid, entry in leaves.items():
            per_session[sid]["leaves"] = entry
    manifest = _manifest(
        selection, fmt, files, per_session, first_ns, last_ns, redactor, redacted_total, broken
    )
    manifest["tree"] = tree_entry
    manifest["manifest_signature"] = bundle_sign.manifest_entry(signer)
    data = (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8")
    if signer is not None:  # before the manifest, which stays the last file written
        bundle_sign.sign(out_dir, data, signer)
    private_file(out_dir / MANIFEST).write_bytes(data)
    return ExportResult(
        out_dir=out_dir,
        manifest=manifest,
        manifest_sha256=hashlib.sha256(data).hexdigest(),
        sessions=list(per_session),
        broken=broken,
        signed_by=signer.name if signer is not None else None,
    )


def _session_row(
    info: SessionInfo,
    summary: dict,
    counts: SessionCounts,
    holds: dict[str, str],
    redactor: Redactor | None,
) -> dict:
    command, name = info.command, info.name
    if redactor is not None:
        # argv and names can carry tokens (`--api-key sk-...`): the same rules apply.
        command = redactor.redact_text(command) if command else command
        name = redactor.redact_text(name) if name else name
    return {
        "session_id": info.session_id,
        "name": name,
        "transport": info.transport,
        "command": command,
        "started_ns": info.started_ns,
        "ended_ns": info.ended_ns,
        "outcome": derived_outcome(info, counts),
        "ended": info.outcome,
        **counts.as_dict(),
        "era": info.era,
        "replay_of": info.replay_of,
        "frames": info.frames,
        "records": summary["records"],
        "last_seq": summary["last_seq"],
        "sealed": summary["sealed_count"] is not None,
        "sealed_count": summary["sealed_count"],
        "head": summary["head"],
        "held": info.session_id in holds,
        "hold_reason": holds.get(info.session_id),
    }


def _manifest(
    selection: Selection,
    fmt: str,
    files: dict,
    per_session: dict[str, dict],
    first_ns: int | None,
    last_ns: int | None,
    redactor: Redactor | None,
    redacted_total: int,
    broken: list[str],
) -> dict:
    from blackbox.recorder.store import schema_head

    records = sum(s["records"] for s in per_session.values())
    created = time.time_ns()
    return {
        "format": BUNDLE_FORMAT,
        "bundle_version": BUNDLE_VERSION,
        "tool": {"name": "mcp-blackbox", "version": __version__},
        "schema_version": schema_head(),
        "created_ns": created,
        "created": iso(created),
        "selection": selection.as_dict(),
        "time_range": {
            "first_ns": first_ns,
            "last_ns": last_ns,
            "first": iso(first_ns),
            "last": iso(last_ns),
        },
        "data_format": fmt,
        "encoding": {
            "raw": "binary" if fmt == "parquet" else "base64",
            "hash": "hex",
            "null": CSV_NULL if fmt == "csv" else None,
        },
        "files": files,
        "counts": {
            "sessions": len(per_session),
            "records": records,
            "decisions": files[file_name("decisions", fmt)]["rows"],
            "redacted_records": redacted_total,
        },
        "redaction": {
            "applied": redactor is not None,
            "rules": redactor.source if redactor is not None else None,
            "replaced_values": dict(sorted(redactor.counts.items())) if redactor else {},
            "marker": "[redacted:<first 16 hex of HMAC-SHA256(key, secret)>]",
        },
        "chain_coverage": {
            "algorithm": "hash = sha256(prev_hash || canonical(record)); "
            "genesis = sha256('mcp-blackbox/chain/v1' || 0x00 || session_id)",
            "covered_fields": CHAIN_FIELDS,
            "not_covered": "position and the derived fields (msg_type, method, rpc_id, tool, "
            "is_error, error_code, era): the verifier re-derives them from unredacted frames",
            "records_rehashed": records - redacted_total,
            "records_attested": redacted_total,
            "attested_means": "a redacted record keeps its original hash: it is checked by the "
            "next record linking from it, the session head and the sealed count; what it shows "
            "is proven by its leaf's commitment (from tree.committed_from on, when the "
            "checkpoint covers it), else covered only by the file sha256",
            "complete_sessions": "every exported session is exported whole, from seq 1 to its "
            "head at export time",
            "broken_in_store": broken,
            "broken_means": "the session failed the store's own checks at export time "
            "(its findings are the session's store_findings): verify-export fails on it",
        },
        "sessions": per_session,
    }
