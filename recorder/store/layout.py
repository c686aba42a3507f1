"""Record format v2: how a record's fields sit in the `events` table, and how they read back.

Why it exists: the record a producer hands in (`NewEvent`) and the record a reader gets
(`StoredEvent`) name their session by its text id and their kind, direction and derived
enumerations by name; the table holds them compactly. The session id is 16 bytes (a UUID's own
bytes, or for any other id the first 16 bytes of a SHA-256 of it), and `session_ids` maps the
bytes back to the text; `kind`, `direction`, `msg_type` and `rpc_id_type` are small integers. The
view `event_log` shows the table as the records are (every reader goes through it), so the
translation lives in two places only: `encode_row` on the way in and `view_sql` on the way out,
both made from the code tables below.

Nothing that is evidence depends on the layout: a record's chain hash (and its Merkle leaf) is
computed over its canonical bytes (`chain.canonical`: the text session id, kind and direction),
so a store upgraded from the text layout (migration 0009) verifies against the checkpoints signed
before, and a bundle is the same whichever layout its store had.

The codes are part of the on-disk format: a code, once given, never changes meaning. A new kind
takes the next free code and needs a migration that recreates the view (`view_sql`);
tests/recorder/test_layout.py checks that every kind, direction and derived value has a code.
Open-ended values stay text: the era (any protocol version a peer names), methods, tools, ids.
"""

from __future__ import annotations

import hashlib
import re

from blackbox.recorder import AppendRefused

# Text → code, per column. Values 0 and 1 cost SQLite no byte at all, so the commonest value of
# each column has one of them: frames, the two directions of a frame, requests and responses,
# numeric ids.
KIND_CODES: dict[str, int] = {
    "frame": 0,
    "session_started": 1,
    "era_detected": 2,
    "session_ended": 3,
    "session_sealed": 4,
    "stderr": 5,
    "fault": 6,
    "decision": 7,
    "http_exchange": 8,
    "replay_step": 9,
    "retention_applied": 10,
    "policy_loaded": 11,
    "session_idle": 12,
    "session_resumed": 13,
    "peer_back": 14,
    "suite_saved": 15,
    "tools_listed": 16,
    "tool_changed": 17,
}
FRAME = 0  # KIND_CODES["frame"], for the append's hot loop
# Each kind's code back to its text, as `event_log` reads it.
KIND_NAMES: dict[int | None, str] = {number: kind for kind, number in KIND_CODES.items()}

# The rows whose kind can read as `retention_applied` through `event_log` (its kind is the code's
# text, else `kind_text`): the predicate of the partial index `removals` finds retention records
# by (migration 0010), so that no read of them scans the log. A query must say it exactly as
# here for the planner to use the index.
RETENTION_ROWS = f"kind_code = {KIND_CODES['retention_applied']} OR kind_text IS NOT NULL"
DIRECTION_CODES: dict[str, int] = {"c2s": 0, "s2c": 1, "-": 2}
MSG_TYPE_CODES: dict[str, int] = {
    "request": 0,
    "response": 1,
    "notification": 2,
    "error": 3,
    "batch": 4,
    "invalid": 5,
}
RPC_ID_TYPE_CODES: dict[str, int] = {
    "number": 0,
    "string": 1,
    "null": 2,
    "boolean": 3,
    "other": 4,
}

# The coded columns: the record's column → (the table's column, its codes). A kind or direction
# with no code (a kind this version does not know, appended through the library) is kept as text
# in `kind_text` / `direction_text`, its code null: the set stays open, and what is known costs a
# byte. The derived columns' values are this code's own (`jsonrpc.derived_columns`), a closed set.
CODED: dict[str, tuple[str, dict[str, int]]] = {
    "kind": ("kind_code", KIND_CODES),
    "direction": ("direction_code", DIRECTION_CODES),
    "msg_type": ("msg_type_code", MSG_TYPE_CODES),
    "rpc_id_type": ("rpc_id_type_code", RPC_ID_TYPE_CODES),
}

SESSION_ID_BYTES = 16
# What a non-UUID session id's bytes are a hash of, after this prefix: the prefix keeps them apart
# from any other SHA-256 this project takes.
SID_HASH_PREFIX = b"blackbox session id\x00"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The same rule in PostgreSQL (migration 0009 converts the text layout in the server).
SID_SQL_POSTGRES = (
    "CASE WHEN {col} ~ '^[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$' "
    "THEN decode(replace({col}, '-', ''), 'hex') "
    "ELSE substring(sha256('\\x{prefix}'::bytea || convert_to({col}, 'UTF8')) FROM 1 FOR 16) END"
)


def sid_bytes(session_id: str) -> bytes:
    """The 16 bytes that stand for `session_id` in the table: a canonical UUID (lowercase, with
    its hyphens, as taps make them) is its own 16 bytes; any other id, the first 16 bytes of
    SHA-256(SID_HASH_PREFIX || its UTF-8). The same id always gives the same bytes, so a writer
    needs no lookup; `session_ids` holds the way back."""
    if len(session_id) == 36 and _UUID.fullmatch(session_id):
        return bytes.fromhex(session_id.replace("-", ""))
    return hashlib.sha256(SID_HASH_PREFIX + session_id.encode()).digest()[:SESSION_ID_BYTES]


def sid_sql_postgres(column: str) -> str:
    """`sid_bytes` as a PostgreSQL expression over the text column `column`."""
    return SID_SQL_POSTGRES.format(col=column, prefix=SID_HASH_PREFIX.hex())


def code(column: str, value: str | None) -> int | None:
    """The code of `value` in the coded `column` (None stays None); a value with no code is an
    append refused, never a record stored as something else."""
    if value is None:
        return None
    try:
        return CODED[column][1][value]
    except KeyError:
        raise AppendRefused(
            f"a record's {column} {value[:40]!r} is not one this store knows"
        ) from None


# The table's columns in the order `encode_row` gives them (the log position is the database's).
ROW_COLUMNS = (
    "sid",
    "seq",
    "wall_ns",
    "mono_ns",
    "kind_code",
    "kind_text",
    "direction_code",
    "direction_text",
    "raw",
    "raw_size",
    "msg_type_code",
    "method",
    "rpc_id",
    "rpc_id_type_code",
    "tool",
    "is_error",
    "error_code",
    "era",
    "degraded",
    "hash",
)

# Each column's type, as PostgreSQL's binary COPY names it (`schema.event_rows` declares the same;
# tests/recorder/test_layout.py checks they agree).
COPY_TYPES: dict[str, str] = {
    "sid": "bytea", "seq": "int8", "wall_ns": "int8", "mono_ns": "int8",
    "kind_code": "int2", "kind_text": "text", "direction_code": "int2", "direction_text": "text",
    "raw": "bytea", "raw_size": "int8", "msg_type_code": "int2", "method": "text",
    "rpc_id": "text", "rpc_id_type_code": "int2", "tool": "text", "is_error": "bool",
    "error_code": "int8", "era": "text", "degraded": "text", "hash": "bytea",
}  # fmt: skip

_KIND, _DIRECTION, _MSG, _IDTYPE = KIND_CODES, DIRECTION_CODES, MSG_TYPE_CODES, RPC_ID_TYPE_CODES


def encode_row(row: tuple) -> tuple:
    """A record's row in `StoredEvent` order without its position (`projection.INSERT_COLUMNS`:
    session id, seq, wall_ns, mono_ns, kind, direction, raw, raw_size, msg_type, method, rpc_id,
    rpc_id_type, tool, is_error, error_code, era, degraded, hash) as the table holds it
    (ROW_COLUMNS)."""
    (sid, seq, wall, mono, kind, direction, raw, raw_size, msg_type, method, rpc_id,
     rpc_id_type, tool, is_error, error_code, era, degraded, digest) = row  # fmt: skip
    kind_code, direction_code = _KIND.get(kind), _DIRECTION.get(direction)
    return (
        sid_bytes(sid), seq, wall, mono,
        kind_code, None if kind_code is not None else str(kind),
        direction_code, None if direction_code is not None else str(direction),
        raw, raw_size, code("msg_type", msg_type), method, rpc_id,
        code("rpc_id_type", rpc_id_type), tool, is_error, error_code, era, degraded, digest,
    )  # fmt: skip


def decode_case(column: str, expression: str) -> str:
    """SQL that turns the coded `expression` back into the text of `column`'s values."""
    codes = CODED[column][1]
    whens = " ".join(f"WHEN {number} THEN '{text}'" for text, number in codes.items())
    return f"CASE {expression} {whens} END"


def view_sql() -> str:
    """The `event_log` view: the table's rows as records, in `StoredEvent` order, the session's
    text id taken from `session_ids`, and last the session's 16 bytes, `sid`: a per-session
    read filters on `sid = sid_bytes(id)`, the (sid, seq) index of the table itself, whatever
    the planner knows of the join (PostgreSQL without statistics, after a bulk load or an
    upgrade, would otherwise scan the whole log for each session). The same SQL on SQLite and
    PostgreSQL."""
    return (
        "CREATE VIEW event_log AS SELECT e.position AS position, m.session_id AS session_id, "
        "e.seq AS seq, e.wall_ns AS wall_ns, e.mono_ns AS mono_ns, "
        f"coalesce({decode_case('kind', 'e.kind_code')}, e.kind_text) AS kind, "
        f"coalesce({decode_case('direction', 'e.direction_code')}, e.direction_text) "
        "AS direction, "
        "e.raw AS raw, e.raw_size AS raw_size, "
        f"{decode_case('msg_type', 'e.msg_type_code')} AS msg_type, "
        "e.method AS method, e.rpc_id AS rpc_id, "
        f"{decode_case('rpc_id_type', 'e.rpc_id_type_code')} AS rpc_id_type, "
        "e.tool AS tool, e.is_error AS is_error, e.error_code AS error_code, e.era AS era, "
        "e.degraded AS degraded, e.hash AS hash, e.sid AS sid "
        "FROM events e JOIN session_ids m ON m.sid = e.sid"
    )
