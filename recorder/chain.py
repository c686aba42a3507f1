"""The per-session hash chain: how records are linked, and how a chain is checked.

`hash = sha256(prev_hash || canonical record)`. The canonical record covers what the producer
wrote (session, kind, direction, times, raw bytes and their wire size), not the derived fields,
which are recomputable views, nor `seq`, whose order the chain itself encodes: any reordering,
insertion or removal breaks the links, and gaps in `seq` are checked separately.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from recorder.model import Kind, NewEvent, StoredEvent

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


def link(prev_hash: bytes, event: NewEvent | StoredEvent | ChainRecord) -> bytes:
    """The hash of `event` following `prev_hash`: sha256(prev_hash || canonical(event))."""
    digest = hashlib.sha256(prev_hash)
    digest.update(_header(event))
    digest.update(event.raw)
    return digest.digest()


def seal_payload(count: int, head: bytes) -> bytes:
    """The raw document of a seal record: how many records precede it and the chain head."""
    return json.dumps({"count": count, "head": head.hex()}, separators=(",", ":")).encode()


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


def verify_session(
    session_id: str,
    events: Iterable[StoredEvent | ChainRecord],
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
    rows: Sequence[StoredEvent | ChainRecord] = (
        events if isinstance(events, Sequence) else list(events)
    )
    findings: list[Finding] = []
    prev = genesis(session_id)
    expected_seq = 1
    seal: StoredEvent | ChainRecord | None = None
    i, n = 0, len(rows)
    while i < n:
        row = rows[i]
        if row.kind == Kind.SESSION_SEALED and seal is None:
            seal = row
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
    findings.extend(_check_seal(session_id, rows, seal, sealed_count, findings))
    return findings


def _sealed_count(row: StoredEvent | ChainRecord) -> int | None:
    try:
        return int(json.loads(row.raw)["count"])
    except (ValueError, KeyError, TypeError):
        return None


def _check_seal(
    session_id: str,
    rows: Sequence[StoredEvent | ChainRecord],
    seal: StoredEvent | ChainRecord | None,
    sealed_count: int | None,
    findings: list[Finding],
) -> list[Finding]:
    out: list[Finding] = []
    if seal is not None:
        count = _sealed_count(seal)
        before = sum(1 for r in rows if r.seq < seal.seq)
        after = [r for r in rows if r.seq > seal.seq]
        if count is not None and before != count and not findings:
            out.append(
                Finding(
                    session_id,
                    seal.seq,
                    "truncated",
                    f"sealed with {count} records, {before} remain before the seal",
                )
            )
        if after:
            out.append(
                Finding(
                    session_id,
                    after[0].seq,
                    "inserted",
                    f"{len(after)} record(s) after the seal",
                )
            )
    elif sealed_count is not None:
        out.append(
            Finding(
                session_id,
                rows[-1].seq + 1 if rows else 1,
                "truncated",
                f"sealed with {sealed_count} records; the seal and the tail are gone "
                f"({len(rows)} remain)",
            )
        )
    return out
