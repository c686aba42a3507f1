"""The per-session hash chain: how records are linked, and how a chain is checked.

`hash = sha256(prev_hash || canonical record)`. The canonical record covers what the producer
wrote (session, kind, direction, times, raw bytes and their wire size), not the derived fields,
which are recomputable views, nor `seq`, whose order the chain itself encodes: any reordering,
insertion or removal breaks the links, and gaps in `seq` are checked separately.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from blackbox.recorder.log import events
from blackbox.recorder.log.model import Kind, NewEvent, StoredEvent

_LENGTHS = struct.Struct(">HHH")
_FIXED = struct.Struct(">qqqQ")


def genesis(session_id: str) -> bytes:
    """The hash a session's chain starts from."""
    return hashlib.sha256(b"mcp-blackbox/chain/v1\x00" + session_id.encode()).digest()


class ChainRecord(NamedTuple):
    """The fields of a stored record that verification needs (a light StoredEvent)."""

    session_id: str
    seq: int
    wall_ns: int
    mono_ns: int
    kind: str
    direction: str
    raw: bytes
    raw_size: int | None
    hash: bytes


@lru_cache(maxsize=4096)
def _prefix(session_id: str, kind: str, direction: str) -> bytes:
    sid, k, d = session_id.encode(), kind.encode(), direction.encode()
    return _LENGTHS.pack(len(sid), len(k), len(d)) + sid + k + d


def _header(event: NewEvent | StoredEvent | ChainRecord) -> bytes:
    size = -1 if event.raw_size is None else event.raw_size
    return _prefix(event.session_id, event.kind, event.direction) + _FIXED.pack(
        event.wall_ns, event.mono_ns, size, len(event.raw)
    )


def canonical(event: NewEvent | StoredEvent | ChainRecord) -> bytes:
    """The bytes of a record that the chain covers, length-prefixed so fields cannot bleed."""
    return _header(event) + event.raw


def link_fields(
    prev_hash: bytes,
    session_id: str,
    kind: str,
    direction: str,
    wall_ns: int,
    mono_ns: int,
    raw_size: int | None,
    raw: bytes,
) -> bytes:
    """The chain encoding, the one place it is written: sha256(prev_hash || canonical record),
    from the record's fields as a store row holds them. `link` and every verifier loop call it,
    so a reader that holds rows (not records) builds no record object per row."""
    digest = hashlib.sha256(prev_hash)
    digest.update(
        _prefix(session_id, kind, direction)
        + _FIXED.pack(wall_ns, mono_ns, -1 if raw_size is None else raw_size, len(raw))
    )
    digest.update(raw)
    return digest.digest()


def link(prev_hash: bytes, event: NewEvent | StoredEvent | ChainRecord) -> bytes:
    """The hash of `event` following `prev_hash`: sha256(prev_hash || canonical(event))."""
    return link_fields(
        prev_hash,
        event.session_id,
        event.kind,
        event.direction,
        event.wall_ns,
        event.mono_ns,
        event.raw_size,
        event.raw,
    )


def seal_payload(count: int, head: bytes) -> bytes:
    """The raw document of a seal record: how many records precede it and the chain head."""
    return events.encode(events.SessionSealed(count=count, head=head.hex()))


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong with a session's chain. `problem` is one of modified, missing, inserted,
    reordered, truncated."""

    session_id: str
    seq: int | None
    problem: str
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "session_id": self.session_id,
            "seq": self.seq,
            "problem": self.problem,
            "detail": self.detail,
        }


def intact_summary(session_id: str, rows: Iterable[Sequence]) -> SealSummary | None:
    """The seal summary of a session whose seq runs 1, 2, 3... without a gap and whose every
    record links from the one before it; None as soon as either fails.

    This is the common case, so it is checked in one pass over plain tuples in ChainRecord field
    order, as a driver streams them: no per-record objects, no attribute lookups, no need to hold
    the session in memory. Only a chain that fails here pays for `verify_session`'s diagnosis.
    """
    run = intact_run(session_id, rows, 1, genesis(session_id))
    if run is None:
        return None
    count, seal = run
    return gapless_summary(seal, count)


def intact_run(
    session_id: str,
    rows: Iterable[Sequence],
    first_seq: int,
    prev: bytes,
) -> tuple[int, ChainRecord | None] | None:
    """Check a run of a session's records that should be seq `first_seq`, `first_seq + 1`, ...
    each linking from the one before, the first from `prev` (the stored hash of the record
    before the run, or the genesis). Returns (how many records, the first seal among them), or
    None as soon as a seq or a link is off.

    Every link needs only the stored hash before it, so the runs of one session (`split_runs`)
    can be checked apart, on several cores."""
    sealed = str(Kind.SESSION_SEALED)
    expected = first_seq
    seal: ChainRecord | None = None
    try:
        for row in rows:
            _sid, seq, wall_ns, mono_ns, kind, direction, raw, raw_size, digest = row
            if seq != expected:
                return None
            if link_fields(prev, session_id, kind, direction, wall_ns, mono_ns, raw_size, raw) != (
                digest
            ):
                return None
            if kind == sealed and seal is None:
                seal = ChainRecord._make(row)
            prev, expected = digest, expected + 1
    except (TypeError, ValueError, OverflowError, struct.error):
        return None  # a value of the wrong type (SQLite keeps any): `verify_session` names it
    return expected - first_seq, seal


def split_runs(last_seq: int, parts: int) -> list[tuple[int, int]]:
    """Seq 1..last_seq as up to `parts` consecutive (first, last) runs of near-equal length."""
    parts = max(1, min(parts, last_seq))
    bounds = [1 + last_seq * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(parts)]


@dataclass(frozen=True, slots=True)
class SealSummary:
    """What the seal check needs to know about a session's stored records, so that a store can
    compute it without holding them all: the first seal record (if any), how many records precede
    it, the first seq after it and how many follow, and the records' count and last seq."""

    seal: ChainRecord | None
    before_seal: int
    first_after_seal: int | None
    after_seal: int
    count: int
    last_seq: int | None


def gapless_summary(seal: ChainRecord | None, count: int) -> SealSummary:
    """The seal summary of `count` records numbered 1..count, the first seal among them `seal`."""
    last = count or None
    if seal is None:
        return SealSummary(None, 0, None, 0, count, last)
    after = count - seal.seq
    return SealSummary(seal, seal.seq - 1, seal.seq + 1 if after else None, after, count, last)


def summarise(rows: Sequence[Sequence]) -> SealSummary:
    """The seal summary of a session's records, given in seq order (ChainRecord field order)."""
    seal_at = next((i for i, row in enumerate(rows) if row[4] == Kind.SESSION_SEALED), None)
    if seal_at is None:
        seal, before, after = None, 0, []
    else:
        seal = ChainRecord._make(rows[seal_at])
        before = sum(1 for row in rows if row[1] < seal.seq)
        after = [row[1] for row in rows if row[1] > seal.seq]
    return SealSummary(
        seal,
        before,
        after[0] if after else None,
        len(after),
        len(rows),
        rows[-1][1] if rows else None,
    )


def verify_session(
    session_id: str,
    events: Iterable[StoredEvent | ChainRecord | Sequence],
    sealed_count: int | None = None,
) -> list[Finding]:
    """Check one session's records (in stored seq order) against their chain.

    `sealed_count` is what the store's session projection says was sealed, so that a tail removed
    together with its seal record is still found. A record that does not link is named by how the
    chain resyncs after it:

    - a gap in seq before it: records were removed (`missing`; `truncated` when the gap runs up to
      the seal);
    - the next record links from the previous one and this one links from the next: two records
      swapped (`reordered`); a later one links from the previous: moved (`reordered`);
    - the next record links from the previous one: this one was slipped in (`inserted`);
    - otherwise its content no longer matches its hash (`modified`).
    """
    rows = [_as_chain_record(row) for row in events]
    summary = intact_summary(session_id, rows)
    if summary is not None:
        return check_seal(session_id, summary, sealed_count, chain_broken=False)
    # Something is off: diagnose over named records.
    findings: list[Finding] = []
    prev = genesis(session_id)
    expected_seq = 1
    i, n = 0, len(rows)
    while i < n:
        row = rows[i]
        if row.seq > expected_seq:
            span = (
                f"{expected_seq}"
                if row.seq == expected_seq + 1
                else f"{expected_seq}-{row.seq - 1}"
            )
            if row.kind == Kind.SESSION_SEALED:
                findings.append(
                    Finding(
                        session_id,
                        expected_seq,
                        "truncated",
                        f"seq {span} removed before the seal",
                    )
                )
            else:
                findings.append(Finding(session_id, expected_seq, "missing", f"seq {span} removed"))
            prev, expected_seq, i = row.hash, row.seq + 1, i + 1
            continue
        if link(prev, row) == row.hash:
            prev, expected_seq, i = row.hash, row.seq + 1, i + 1
            continue
        nxt = rows[i + 1] if i + 1 < n else None
        if nxt is not None and link(prev, nxt) == nxt.hash:
            if link(nxt.hash, row) == row.hash:
                findings.append(
                    Finding(
                        session_id,
                        row.seq,
                        "reordered",
                        f"seq {row.seq} and {nxt.seq} swapped",
                    )
                )
                prev, expected_seq, i = row.hash, nxt.seq + 1, i + 2
                continue
            findings.append(
                Finding(
                    session_id,
                    row.seq,
                    "inserted",
                    "record does not belong to the chain",
                )
            )
            expected_seq, i = row.seq + 1, i + 1
            continue
        later = next((j for j in range(i + 2, n) if link(prev, rows[j]) == rows[j].hash), None)
        if later is not None:
            findings.append(
                Finding(
                    session_id,
                    row.seq,
                    "reordered",
                    f"seq {rows[later].seq} belongs before seq {row.seq}",
                )
            )
            return findings  # the order is broken from here on; one precise finding is enough
        findings.append(Finding(session_id, row.seq, "modified", "content does not match its hash"))
        prev, expected_seq, i = row.hash, row.seq + 1, i + 1
    findings.extend(
        check_seal(session_id, summarise(rows), sealed_count, chain_broken=bool(findings))
    )
    return findings


def _as_chain_record(row: StoredEvent | ChainRecord | Sequence) -> ChainRecord:
    if isinstance(row, ChainRecord):
        return _as_stored_types(row)
    if isinstance(row, StoredEvent):
        return _as_stored_types(
            ChainRecord._make(getattr(row, name) for name in ChainRecord._fields)
        )
    return _as_stored_types(ChainRecord._make(row))


def _as_stored_types(rec: ChainRecord) -> ChainRecord:
    """The record with each field of the type the chain hashes. SQLite keeps any value in any
    column, so a row edited behind the store's back can hold raw as TEXT, a time as a float or
    a seq as a string; such a value is read as the bytes or integer it stands for (anything
    unreadable as empty or zero), its link then fails, and the record is named, rather than the
    check stopping on a type error."""
    if (
        type(rec.raw) is bytes
        and type(rec.hash) is bytes
        and type(rec.seq) is int
        and type(rec.wall_ns) is int
        and type(rec.mono_ns) is int
        and (rec.raw_size is None or type(rec.raw_size) is int)
        and type(rec.kind) is str
        and type(rec.direction) is str
    ):
        return rec
    return rec._replace(
        raw=as_bytes(rec.raw),
        hash=as_bytes(rec.hash),
        seq=_as_int64(rec.seq),
        wall_ns=_as_int64(rec.wall_ns),
        mono_ns=_as_int64(rec.mono_ns),
        raw_size=None if rec.raw_size is None else _as_int64(rec.raw_size),
        kind=str(rec.kind),
        direction=str(rec.direction),
    )


def as_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if value is None:
        return b""
    return str(value).encode("utf-8", "surrogateescape")


def _as_int64(value: Any) -> int:  # any value: one int() refuses reads as zero
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return number if -(2**63) <= number < 2**63 else 0


def seal_count(raw: bytes) -> int | None:
    """The record count a seal's document fixes, or None when the document does not decode."""
    seal = events.decode_as(events.SessionSealed, raw)
    return None if seal is None else seal.count


def check_seal(
    session_id: str,
    summary: SealSummary,
    sealed_count: int | None,
    chain_broken: bool,
) -> list[Finding]:
    """Findings about the seal: records gone from before it, records after it, or the seal itself
    gone with the tail (`sealed_count` is the store projection's memory of it)."""
    out: list[Finding] = []
    seal = summary.seal
    if seal is not None:
        count = seal_count(seal.raw)
        if count is not None and summary.before_seal != count and not chain_broken:
            out.append(
                Finding(
                    session_id,
                    seal.seq,
                    "truncated",
                    f"sealed with {count} records, {summary.before_seal} remain before the seal",
                )
            )
        if summary.after_seal:
            out.append(
                Finding(
                    session_id,
                    summary.first_after_seal,
                    "inserted",
                    f"{summary.after_seal} record(s) after the seal",
                )
            )
    elif sealed_count is not None:
        out.append(
            Finding(
                session_id,
                summary.last_seq + 1 if summary.last_seq is not None else 1,
                "truncated",
                f"sealed with {sealed_count} records; the seal and the tail are gone "
                f"({summary.count} remain)",
            )
        )
    return out
