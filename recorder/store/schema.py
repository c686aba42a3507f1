"""The store's tables as SQLAlchemy Core metadata: the one source the migrations are checked
against (a test asserts autogenerate finds no difference)."""

from __future__ import annotations

from blackbox.recorder.store import layout
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# BIGINT primary keys autoincrement on PostgreSQL; SQLite needs INTEGER for its rowid alias.
Position = BigInteger().with_variant(Integer(), "sqlite")

# The log (record format v2, migration 0009; recorder/store/layout.py says how a record's fields
# map to these columns). Readers go through the `event_log` view (`events` below), which shows
# every row as the record it is; only the append, retention's delete and the tree's reads of
# `hash` by position touch this table.
event_rows = Table(
    "events",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=True),
    Column("sid", LargeBinary(16), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("wall_ns", BigInteger, nullable=False),
    Column("mono_ns", BigInteger, nullable=False),
    Column("kind_code", SmallInteger, nullable=True),
    Column("kind_text", String(32), nullable=True),
    Column("direction_code", SmallInteger, nullable=True),
    Column("direction_text", String(3), nullable=True),
    Column("raw", LargeBinary, nullable=False),
    Column("raw_size", BigInteger, nullable=True),
    Column("msg_type_code", SmallInteger, nullable=True),
    Column("method", Text, nullable=True),
    Column("rpc_id", Text, nullable=True),
    Column("rpc_id_type_code", SmallInteger, nullable=True),
    Column("tool", Text, nullable=True),
    Column("is_error", Boolean, nullable=True),
    Column("error_code", BigInteger, nullable=True),
    Column("era", String(16), nullable=True),
    Column("degraded", Text, nullable=True),
    Column("hash", LargeBinary(32), nullable=False),
    # The only index beside the position: (sid, seq) serves every per-session read (show, replay,
    # verify's chains, the UI's timeline page, retention's delete) and makes a re-appended batch
    # a no-op. Everything else reads by position, and analytics reads its Parquet copy; another
    # index would cost every append.
    UniqueConstraint("sid", "seq"),
    # The retention records, wherever they are in the log (`removals.retention_records`, which
    # every `verify` reads): a partial index of the few rows that can be one (migration 0010).
    Index(
        "ix_events_retention",
        "position",
        sqlite_where=text(layout.RETENTION_ROWS),
        postgresql_where=text(layout.RETENTION_ROWS),
    ),
)

# The way back from a record's 16 session-id bytes to the session's id (`layout.sid_bytes` is the
# way there): one row per session ever appended, append-only like the log (migration 0009).
session_ids = Table(
    "session_ids",
    metadata,
    Column("sid", LargeBinary(16), primary_key=True),
    Column("session_id", String(64), nullable=False),
    # `event_log`'s readers look a session up by its text id (per-session reads).
    UniqueConstraint("session_id"),
)

# The records as readers know them (`StoredEvent`'s fields): the `event_log` view over the two
# tables above (`layout.view_sql`). Kept out of `metadata`, which holds what Alembic compares
# and creates: the view is made by the migration.
views = MetaData()
events = Table(
    "event_log",
    views,
    Column("position", Position, primary_key=True),
    Column("session_id", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("wall_ns", BigInteger, nullable=False),
    Column("mono_ns", BigInteger, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("direction", String(3), nullable=False),
    Column("raw", LargeBinary, nullable=False),
    Column("raw_size", BigInteger, nullable=True),
    Column("msg_type", String(16), nullable=True),
    Column("method", Text, nullable=True),
    Column("rpc_id", Text, nullable=True),
    Column("rpc_id_type", String(8), nullable=True),
    Column("tool", Text, nullable=True),
    Column("is_error", Boolean, nullable=True),
    Column("error_code", BigInteger, nullable=True),
    Column("era", String(16), nullable=True),
    Column("degraded", Text, nullable=True),
    Column("hash", LargeBinary(32), nullable=False),
    # The session's 16 bytes, for per-session reads (`layout.view_sql`).
    Column("sid", LargeBinary(16), nullable=False),
)

# `sessions.transport` of a host's own decisions (a Claude Code or Cursor hook): such a session
# holds no frame, yet each of its records is a tool call the host allowed or denied.
HOOK_TRANSPORT = "hook"

sessions = Table(
    "sessions",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("name", Text, nullable=True),
    Column("transport", String(16), nullable=True),
    Column("command", Text, nullable=True),
    Column("started_ns", BigInteger, nullable=True),
    Column("ended_ns", BigInteger, nullable=True),
    Column("last_wall_ns", BigInteger, nullable=True),
    Column("last_seq", BigInteger, nullable=False, default=0),
    Column("head_hash", LargeBinary(32), nullable=False),
    Column("frames", BigInteger, nullable=False, default=0),
    Column("outcome", String(32), nullable=True),
    Column("era", String(16), nullable=True),
    Column("client_info", Text, nullable=True),
    Column("server_info", Text, nullable=True),
    Column("replay_of", String(64), nullable=True),
    Column("sealed_count", BigInteger, nullable=True),
    # The listing, newest first (`query.listing`, `sql_reads.list_sessions`: ORDER BY started_ns
    # DESC with a limit, and --since), and a session found by its name (`sessions --name`, a
    # reference that is a name: `sql_reads.resolve`). One row per session, not per record.
    Index(None, "started_ns"),
    Index(None, "name"),
)

# Legal holds: a held session is never removed by retention.
holds = Table(
    "holds",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("created_ns", BigInteger, nullable=False),
)

# The one sanctioned removal path, and its permanent trace: a session listed here was removed by
# retention, on the authority of the `retention_applied` record at log position `removed_by`. The
# database refuses a row whose record is not a `retention_applied` of another session naming the
# session (migration 0003), refuses to change or delete a row, and lets a DELETE on the log through
# only for a session listed here.
retention_removals = Table(
    "retention_removals",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("removed_by", Position, nullable=False),
)

# The Merkle tree over the whole log (RFC 9162; recorder/log/merkle.py, recorder/store/tree.py).
# Everything here is the writer's cache, never evidence: `verify --checkpoint` recomputes every
# leaf from the records' bytes. Leaf `idx` of the tree is the record at log `position`, in the
# order the sequencer took them, and its hash is SHA-256(0x00 || the record's chain hash), which
# the record's row holds. So the tree keeps no row per leaf: `tree_runs` says which record each
# leaf is, a run of leaves [first_idx, first_idx + leaves) being the records at positions
# [first_position, first_position + leaves) (one run while the log has no hole; PostgreSQL's
# late commits and sequence gaps start new ones). A leaf hash per record would repeat what the
# record's row holds, at a cost per record that is a sizeable share of the log's own overhead.
tree_runs = Table(
    "tree_runs",
    metadata,
    Column("first_idx", Position, primary_key=True, autoincrement=False),
    Column("first_position", Position, nullable=False),
    Column("leaves", BigInteger, nullable=False),
    # The run that holds a given log position (`tree._runs_over` by position: a proof for a
    # session's records, retention marking the leaves it removes). One row per run.
    Index(None, "first_position"),
)

# The leaf hashes of the tree's records that are no longer in the log: kept when retention
# removes a record (`removed_by`: the `retention_applied` record's position), so that earlier
# checkpoints still verify. A row whose `removed_by` is not a retention record is reported by
# `verify` as a deletion.
tree_removed_leaves = Table(
    "tree_removed_leaves",
    metadata,
    Column("idx", Position, primary_key=True, autoincrement=False),
    Column("leaf_hash", LargeBinary(32), nullable=False),
    Column("removed_by", Position, nullable=True),
    # The session whose record the leaf stood for (migration 0008): a kept leaf is bound to
    # (retention record, session, idx), and the record must name both. Null on leaves kept
    # before removals were signed.
    Column("session_id", String(64), nullable=True),
)

# Perfect, aligned subtrees at every fourth level (16, 256, 4096, ... leaves): node (level, idx)
# is the hash of leaves [idx * 2**level, (idx + 1) * 2**level). Any subtree a proof asks for is
# then a fold of at most 8 stored hashes, for n/15 rows beside the leaves.
tree_nodes = Table(
    "tree_nodes",
    metadata,
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("hash", LargeBinary(32), nullable=False),
)

# One row: the tree's size, the highest log position sequenced, and the frontier (the compact
# range [0, size), `merkle.Frontier.to_bytes`) the next leaves extend.
tree_state = Table(
    "tree_state",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("size", BigInteger, nullable=False),
    Column("watermark", BigInteger, nullable=False),
    Column("frontier", LargeBinary, nullable=False),
)

# Log positions below the watermark that were not committed when the sequencer passed them: on
# PostgreSQL a transaction can commit a lower position after a higher one. Each sequencing run
# takes in those that have appeared since.
tree_gaps = Table(
    "tree_gaps",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("seen_ns", BigInteger, nullable=False),
)

# The log's identity: one row, a random id made with the store. Checkpoints are kept per log
# (the data directory's checkpoints/<store_id>.txt), so stores sharing a data directory never
# mistake each other's checkpoints for their own.
log_identity = Table(
    "log_identity",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("store_id", String(36), nullable=False),
    Column("created_ns", BigInteger, nullable=False),
)

# One row: the secret the per-value commitments of the tree's leaves are salted from, and the
# first leaf that carries them (the tree's size when the key was made; migration 0011,
# recorder/log/commitment.py). No row (a store made from the metadata) is made on first use.
commitment_keys = Table(
    "commitment_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("key", LargeBinary, nullable=False),
    Column("first_leaf", BigInteger, nullable=False),
    Column("created_ns", BigInteger, nullable=False),
)

# One row: the log position from which a `retention_applied` record that removes sessions must
# name the leaves it removes and carry the log key's signature over them (migration 0008). No row
# (a store made from the metadata) means from position 1.
signed_removals = Table(
    "signed_removals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("from_position", BigInteger, nullable=False),
)

# Every checkpoint signed over this log, as a C2SP signed note. A copy for the writer's own
# consistency checks and for `verify`: only a copy kept elsewhere is evidence.
checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Position, primary_key=True, autoincrement=True),
    Column("size", BigInteger, nullable=False),
    Column("root_hash", LargeBinary(32), nullable=False),
    Column("note", Text, nullable=False),
    Column("created_ns", BigInteger, nullable=False),
)
