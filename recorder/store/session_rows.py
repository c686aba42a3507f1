"""The `sessions` rows an append reads and writes, as driver-level SQL.

Every append reads the chain head of each session in its batch and writes that session's row back.
They are text with the driver's parameter marker, not SQLAlchemy Core statements, which would
be compiled again every batch: as text they go straight to the driver.
The projected values themselves come from `blackbox.recorder.store.projection`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from blackbox.recorder.store.schema import sessions
from sqlalchemy.engine import Connection

# The column names are the schema's: a projection naming any other is a bug, not data.
COLUMNS = frozenset(sessions.c.keys())


class Current(NamedTuple):
    """What an append needs of a session's stored row."""

    session_id: str
    last_seq: int
    head_hash: bytes
    sealed_count: int | None
    era: str | None
    started_ns: int | None


class Appended(NamedTuple):
    """What an append stored of one session, for its row: the row as read before (None for a
    new session), the frames and records it added (seals not counted), the wall time of the
    first, and the projected columns (`blackbox.recorder.store.projection.project`, with the chain's
    head, last seq and last wall time)."""

    session_id: str
    current: Current | None
    frames: int
    stored: int
    first_wall_ns: int
    proj: dict


def write(conn: Connection, mark: str, appended: Appended) -> None:
    """Insert or update a session's row after an append: a stored era stays unless the tap's
    era_detected verdict came in this append, and a stored start time stays."""
    sid, current, frames, _stored, first_wall_ns, proj = appended
    era_detected = proj.pop("era_detected", False)
    if current is None:
        proj.setdefault("started_ns", first_wall_ns)
        insert(conn, mark, sid, frames, proj)
        return
    if current.era is not None and not era_detected:
        proj.pop("era", None)
    if current.started_ns is not None:
        proj.pop("started_ns", None)
    update(conn, mark, sid, frames, proj)


_READ = f"SELECT {', '.join(Current._fields)} FROM sessions WHERE session_id IN "
_CHUNK = 500  # bounded IN lists


def read(conn: Connection, mark: str, session_ids: Sequence[str]) -> dict[str, Current]:
    """The stored rows of `session_ids` that exist, by session id."""
    out: dict[str, Current] = {}
    for start in range(0, len(session_ids), _CHUNK):
        chunk = tuple(session_ids[start : start + _CHUNK])
        sql = f"{_READ}({', '.join([mark] * len(chunk))})"
        for row in conn.exec_driver_sql(sql, chunk):
            current = Current(*row)
            if current.head_hash.__class__ is not bytes:
                current = current._replace(head_hash=bytes(current.head_hash))
            out[current.session_id] = current
    return out


def insert(
    conn: Connection, mark: str, session_id: str, frames: int, proj: Mapping[str, object]
) -> None:
    """A new session's row: its id, its frame count and the projected columns."""
    names = ("session_id", "frames", *_checked(proj))
    sql = f"INSERT INTO sessions ({', '.join(names)}) VALUES ({', '.join([mark] * len(names))})"
    conn.exec_driver_sql(sql, (session_id, frames, *proj.values()))


def update(
    conn: Connection, mark: str, session_id: str, frames: int, proj: Mapping[str, object]
) -> None:
    """A stored session's row: `frames` more frames and the projected columns replaced."""
    sets = "".join(f", {name} = {mark}" for name in _checked(proj))
    sql = f"UPDATE sessions SET frames = frames + {mark}{sets} WHERE session_id = {mark}"
    conn.exec_driver_sql(sql, (frames, *proj.values(), session_id))


def _checked(proj: Mapping[str, object]) -> Mapping[str, object]:
    unknown = proj.keys() - COLUMNS
    if unknown:
        raise ValueError(f"not a sessions column: {sorted(unknown)[0]}")
    return proj
