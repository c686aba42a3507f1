"""The records of the log: what a tap hands over and what the store gives back.

Raw bytes are the truth; every derived field (method, id, tool, ...) is a view computed from them by
`blackbox.recorder.log.jsonrpc.classify` when the store appends, so two readers can never disagree
on a parse.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from enum import StrEnum


class Direction(StrEnum):
    """Which way a record crossed the tap. Session events travel in no direction."""

    CLIENT_TO_SERVER = "c2s"
    SERVER_TO_CLIENT = "s2c"
    NONE = "-"


class Kind(StrEnum):
    """Kinds of log records. `frame` is a wire message; the rest are session events."""

    FRAME = "frame"
    SESSION_STARTED = "session_started"
    ERA_DETECTED = "era_detected"
    SESSION_ENDED = "session_ended"
    SESSION_SEALED = "session_sealed"
    STDERR = "stderr"
    FAULT = "fault"
    DECISION = "decision"
    HTTP_EXCHANGE = "http_exchange"
    REPLAY_STEP = "replay_step"
    RETENTION_APPLIED = "retention_applied"


@dataclass(frozen=True, slots=True)
class NewEvent:
    """A record as a producer (tap, shipper, replayer) hands it to the store.

    `raw` is exactly the bytes that crossed the wire for a frame, or a JSON document describing a
    session event. `raw_size` is the length on the wire when `raw` holds only a prefix (oversize
    frames); None means `raw` is complete.
    """

    session_id: str
    seq: int
    wall_ns: int
    mono_ns: int
    kind: str
    direction: str
    raw: bytes
    raw_size: int | None = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A record as the store holds it: the producer's fields, its log position, derived fields and
    its link in the session's hash chain."""

    position: int
    session_id: str
    seq: int
    wall_ns: int
    mono_ns: int
    kind: str
    direction: str
    raw: bytes
    raw_size: int | None
    msg_type: str | None
    method: str | None
    rpc_id: str | None
    rpc_id_type: str | None
    tool: str | None
    is_error: bool | None
    error_code: int | None
    era: str | None
    degraded: str | None
    hash: bytes


# The fields of a stored record that are computed from its raw bytes
# (`blackbox.recorder.log.jsonrpc.classify` for a frame,
# `blackbox.recorder.log.events.derived_fields` for a session event), in StoredEvent's order.
# `degraded` names the derived values that had to be fitted to be stored (`jsonrpc.degradation`).
DERIVED = (
    "msg_type",
    "method",
    "rpc_id",
    "rpc_id_type",
    "tool",
    "is_error",
    "error_code",
    "era",
    "degraded",
)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One row of the sessions projection (rebuildable from the log)."""

    session_id: str
    name: str | None
    transport: str | None
    command: str | None
    started_ns: int | None
    ended_ns: int | None
    last_seq: int
    frames: int
    outcome: str | None
    era: str | None
    replay_of: str | None
    sealed: bool


def new_session_id(now_ns: int | None = None) -> str:
    """A UUIDv7: time-ordered, so ids sort by start time and a short prefix narrows by time."""
    ms = (now_ns if now_ns is not None else time.time_ns()) // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 68) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
