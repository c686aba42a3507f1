"""No batch is all-or-nothing across records: when the store refuses a batch, find the record it
refused and store everything else.

Why it exists: the shipper, the store worker and `blackbox ship` append journal records in
batches of thousands, and one record a database cannot take would fail its whole batch again
and again, so nothing after it would ever be stored. `append_salvaging` retries a refused batch
session by session, then record by record; a record still refused is replaced, at its own seq, by a
`fault` record (`store_refused`) that carries its raw bytes in base64 and the reason, so the
session goes on and its bytes are in the log. A record that cannot be stored even so (its session
is sealed) is handed back to the caller, which keeps it in a refused file (`refused_dir`) that
`blackbox where` names, instead of retrying it forever.

A store that is down, locked, read-only, full or too new is not a refusal of a record: those
errors propagate unchanged, and the caller retries later as before.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from blackbox.recorder import (
    BadStoreURL,
    BlackboxError,
    SchemaTooNew,
    StoreFull,
    StoreLocked,
    StoreMissing,
    StoreReadOnly,
    StoreUnavailable,
    create_private,
)
from blackbox.recorder.log import Direction, Kind, NewEvent, events
from blackbox.recorder.store import EventStore

# Errors about the store as a whole: retried later, never blamed on a record.
NOT_A_REFUSAL = (
    StoreUnavailable,
    StoreLocked,
    StoreReadOnly,
    StoreFull,
    SchemaTooNew,
    StoreMissing,
    BadStoreURL,
)
REFUSED_DIR = "refused"


@dataclass
class Salvage:
    """What `append_salvaging` did: records stored as they were, records stored as a
    `store_refused` fault in their place (session, seq, reason), and records not stored at all
    (the record, why)."""

    stored: int = 0
    substituted: list[tuple[str, int, str]] = field(default_factory=list)
    unstored: list[tuple[NewEvent, str]] = field(default_factory=list)

    @property
    def degraded(self) -> bool:
        return bool(self.substituted or self.unstored)

    def summary(self) -> str:
        """One line for the user: what had to be degraded, or an empty string."""
        parts = []
        if self.substituted:
            sid, seq, why = self.substituted[0]
            parts.append(
                f"{len(self.substituted)} record(s) refused by the store were stored as "
                f"store_refused faults with their raw bytes (first: session {sid} seq {seq}: {why})"
            )
        if self.unstored:
            ev, why = self.unstored[0]
            parts.append(
                f"{len(self.unstored)} record(s) could not be stored at all and were kept "
                f"(first: session {ev.session_id} seq {ev.seq}: {why})"
            )
        return "; ".join(parts)


def describe(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, BlackboxError) else f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0][:300] if text else type(exc).__name__


def append_salvaging(store: EventStore, batch: Sequence[NewEvent]) -> Salvage:
    """Append `batch`; when the store refuses it, store all it will take (see the module)."""
    try:
        store.append(batch)
        return Salvage(stored=len(batch))
    except NOT_A_REFUSAL:
        raise
    except Exception:  # a refusal of some record: find it below
        pass
    salvage = Salvage()
    by_session: dict[str, list[NewEvent]] = {}
    for ev in batch:
        by_session.setdefault(ev.session_id, []).append(ev)
    for evs in by_session.values():
        try:
            store.append(evs)
            salvage.stored += len(evs)
            continue
        except NOT_A_REFUSAL:
            raise
        except Exception:
            pass
        for ev in evs:
            _salvage_one(store, ev, salvage)
    return salvage


def _salvage_one(store: EventStore, ev: NewEvent, salvage: Salvage) -> None:
    try:
        store.append([ev])
        salvage.stored += 1
        return
    except NOT_A_REFUSAL:
        raise
    except Exception as exc:
        why = describe(exc)
    try:
        store.append([refused_record(ev, why)])
        salvage.substituted.append((ev.session_id, ev.seq, why))
    except NOT_A_REFUSAL:
        raise
    except Exception as exc:
        salvage.unstored.append((ev, f"{why}; its store_refused fault: {describe(exc)}"))


def refused_record(ev: NewEvent, why: str) -> NewEvent:
    """The `store_refused` fault that takes a refused record's place (same session and seq)."""
    doc = events.Fault(
        fault="store_refused",
        stage="transport",
        detail=f"the store refused this record ({why}); its bytes are kept here in base64",
        seq=ev.seq,
        direction=ev.direction if ev.direction != Direction.NONE else None,
        extra={
            "kind": str(ev.kind),
            "raw_base64": base64.b64encode(ev.raw).decode("ascii"),
            "raw_size": ev.raw_size,
        },
    )
    return NewEvent(
        ev.session_id,
        ev.seq,
        ev.wall_ns,
        ev.mono_ns,
        Kind.FAULT,
        Direction.NONE,
        events.encode(doc),
    )


def keep_unstored(directory: Path, unstored: Sequence[tuple[NewEvent, str]]) -> Path | None:
    """Write records no store would take to a refused file under `directory` (0600, one JSON
    line each with the raw bytes in base64); its path, or None when there is nothing to keep."""
    if not unstored:
        return None
    path = directory / f"refused-{time.time_ns()}-{os.getpid()}.jsonl"
    lines = []
    for ev, why in unstored:
        lines.append(
            json.dumps(
                {
                    "session_id": ev.session_id,
                    "seq": ev.seq,
                    "wall_ns": ev.wall_ns,
                    "mono_ns": ev.mono_ns,
                    "kind": str(ev.kind),
                    "direction": str(ev.direction),
                    "raw_base64": base64.b64encode(ev.raw).decode("ascii"),
                    "raw_size": ev.raw_size,
                    "why": why,
                }
            )
        )
    with os.fdopen(create_private(path), "w") as fh:
        fh.write("\n".join(lines) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return path


def refused_files(directory: Path) -> list[Path]:
    """The refused files kept under `directory`, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob("refused-*.jsonl"))
