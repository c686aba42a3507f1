"""Record format v2: the log's rows in a compact layout, readers served by the `event_log` view.

A record's session id goes from its text (36 characters for a tap's UUID, in the row and again in
the (session_id, seq) index) to 16 bytes (`layout.sid_bytes`), with `session_ids` as the way
back; kind, direction, msg_type and rpc_id_type go from text to small integers (`layout`'s code
tables). The records themselves do not change: their chain hashes, and so the Merkle tree, the
signed checkpoints and the bundles, are computed over the canonical record (text id, kind and
direction), which the view gives back exactly. The triggers that keep the log append-only are
recreated over the new columns, and `session_ids` is append-only too.

PostgreSQL converts the table in place (one `ALTER TABLE` rewrite); SQLite, which cannot change a
column's type, copies the rows into a new table in log order, keeping every position. Either way
the upgrade rewrites the whole log once, in one transaction: a store of 1M records takes about as
long as appending them did.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

import importlib

import sqlalchemy as sa
from alembic import op
from blackbox.recorder.store import layout

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_V1 = importlib.import_module("blackbox.migrations.versions.0003_retention_by_record")

REFUSAL = "blackbox: the event log is append-only"
NOT_RECORDED = _V1.NOT_RECORDED
RETENTION = layout.KIND_CODES["retention_applied"]

# The record's coded columns: (text column, table column, codes).
CODED = [(text, column, codes) for text, (column, codes) in layout.CODED.items()]


def _encode_case(text: str, codes: dict[str, int]) -> str:
    whens = " ".join(f"WHEN '{name}' THEN {number}" for name, number in codes.items())
    return f"CASE {text} {whens} END"


SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: UPDATE refused'); END""",
    f"""CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    WHEN OLD.kind_code = {RETENTION}
      OR NOT EXISTS (SELECT 1 FROM retention_removals g JOIN session_ids m
                     ON m.session_id = g.session_id WHERE m.sid = OLD.sid)
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE refused (not a recorded retention)'); END""",
    f"""CREATE TRIGGER events_whole_sessions BEFORE DELETE ON events
    WHEN EXISTS (SELECT 1 FROM events e WHERE e.sid = OLD.sid AND e.seq < OLD.seq)
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE of part of a session refused'); END""",
    f"""CREATE TRIGGER retention_removals_by_record BEFORE INSERT ON retention_removals
    WHEN NOT EXISTS (
      SELECT 1 FROM events r JOIN session_ids m ON m.sid = r.sid
      WHERE r.position = NEW.removed_by
        AND r.kind_code = {RETENTION}
        AND m.session_id <> NEW.session_id
        AND json_valid(CAST(r.raw AS TEXT))
        AND EXISTS (SELECT 1 FROM json_each(CAST(r.raw AS TEXT), '$.removed') j
                    WHERE j.type = 'text' AND j.value = NEW.session_id))
    BEGIN SELECT RAISE(ABORT, '{NOT_RECORDED}'); END""",
    f"""CREATE TRIGGER session_ids_no_update BEFORE UPDATE ON session_ids
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: UPDATE of a session id refused'); END""",
    f"""CREATE TRIGGER session_ids_no_delete BEFORE DELETE ON session_ids
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE of a session id refused'); END""",
]
SQLITE_EVENTS_TRIGGERS = ("events_no_update", "events_no_delete", "events_whole_sessions")

POSTGRES_FUNCTIONS = [
    f"""CREATE OR REPLACE FUNCTION blackbox_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        IF OLD.kind_code <> {RETENTION} AND EXISTS (
            SELECT 1 FROM retention_removals g JOIN session_ids m
            ON m.session_id = g.session_id WHERE m.sid = OLD.sid) THEN
          RETURN OLD;
        END IF;
        RAISE EXCEPTION '{REFUSAL}: DELETE refused (not a recorded retention)'
          USING ERRCODE = 'restrict_violation';
      END IF;
      RAISE EXCEPTION '{REFUSAL}: % refused', TG_OP USING ERRCODE = 'restrict_violation';
    END $$""",
    f"""CREATE OR REPLACE FUNCTION blackbox_whole_sessions() RETURNS trigger LANGUAGE plpgsql
    AS $$
    DECLARE
      partial text;
    BEGIN
      SELECT coalesce(m.session_id, encode(d.sid, 'hex')) INTO partial
      FROM (SELECT DISTINCT sid FROM gone) AS d LEFT JOIN session_ids m ON m.sid = d.sid
      WHERE EXISTS (SELECT 1 FROM events e WHERE e.sid = d.sid) LIMIT 1;
      IF partial IS NOT NULL THEN
        RAISE EXCEPTION '{REFUSAL}: DELETE of part of session % refused', partial
          USING ERRCODE = 'restrict_violation';
      END IF;
      RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION blackbox_removal_by_record() RETURNS trigger LANGUAGE plpgsql
    AS $$
    BEGIN
      IF TG_OP = 'INSERT' AND EXISTS (
          SELECT 1 FROM events r JOIN session_ids m ON m.sid = r.sid
          WHERE r.position = NEW.removed_by
            AND r.kind_code = {RETENTION}
            AND m.session_id <> NEW.session_id
            AND jsonb_typeof(convert_from(r.raw, 'UTF8')::jsonb -> 'removed') = 'array'
            AND (convert_from(r.raw, 'UTF8')::jsonb -> 'removed')
                @> jsonb_build_array(NEW.session_id)) THEN
        RETURN NEW;
      END IF;
      IF TG_OP = 'INSERT' THEN
        RAISE EXCEPTION '{NOT_RECORDED}' USING ERRCODE = 'restrict_violation';
      END IF;
      RAISE EXCEPTION '{REFUSAL}: % of a retention removal refused', TG_OP
        USING ERRCODE = 'restrict_violation';
    END $$""",
    f"""CREATE FUNCTION blackbox_refuse_session_id_change() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN
      RAISE EXCEPTION '{REFUSAL}: % of a session id refused', TG_OP
        USING ERRCODE = 'restrict_violation';
    END $$""",
    """CREATE TRIGGER session_ids_append_only BEFORE UPDATE OR DELETE ON session_ids
    FOR EACH ROW EXECUTE FUNCTION blackbox_refuse_session_id_change()""",
    """CREATE TRIGGER session_ids_no_truncate BEFORE TRUNCATE ON session_ids
    FOR EACH STATEMENT EXECUTE FUNCTION blackbox_refuse_session_id_change()""",
]


def _session_ids_table() -> None:
    op.create_table(
        "session_ids",
        sa.Column("sid", sa.LargeBinary(16), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("sid", name=op.f("pk_session_ids")),
        sa.UniqueConstraint("session_id", name=op.f("uq_session_ids_session_id")),
    )


def upgrade() -> None:
    bind = op.get_bind()
    _session_ids_table()
    if bind.dialect.name == "postgresql":
        _upgrade_postgres()
    else:
        _upgrade_sqlite(bind)
    op.execute(layout.view_sql())


def _upgrade_postgres() -> None:
    sid = layout.sid_sql_postgres("session_id")
    op.execute(
        f"INSERT INTO session_ids (sid, session_id) SELECT {sid}, session_id FROM "
        "(SELECT session_id FROM events UNION SELECT session_id FROM sessions) AS d"
    )
    op.execute("ALTER TABLE events DROP CONSTRAINT uq_events_session_id_seq")
    # A kind or direction with no code keeps its text beside a null code.
    op.execute(
        "ALTER TABLE events ADD COLUMN kind_text varchar(32), "
        "ADD COLUMN direction_text varchar(3), "
        "ALTER COLUMN kind DROP NOT NULL, ALTER COLUMN direction DROP NOT NULL"
    )
    op.execute("ALTER TABLE events DISABLE TRIGGER USER")
    for text in ("kind", "direction"):
        known = ", ".join(f"'{name}'" for name in layout.CODED[text][1])
        op.execute(f"UPDATE events SET {text}_text = {text} WHERE {text} NOT IN ({known})")
    op.execute("ALTER TABLE events ENABLE TRIGGER USER")
    changes = [f"ALTER COLUMN session_id TYPE bytea USING ({sid})"]
    for text, _column, codes in CODED:
        changes.append(f"ALTER COLUMN {text} TYPE smallint USING ({_encode_case(text, codes)})")
    op.execute(f"ALTER TABLE events {', '.join(changes)}")
    op.execute("ALTER TABLE events RENAME COLUMN session_id TO sid")
    for text, column, _codes in CODED:
        op.execute(f"ALTER TABLE events RENAME COLUMN {text} TO {column}")
    op.execute("ALTER TABLE events ADD CONSTRAINT uq_events_sid_seq UNIQUE (sid, seq)")
    for statement in POSTGRES_FUNCTIONS:
        op.execute(statement)
    # The rewrite leaves the converted columns without statistics: without them the planner
    # misjudges every per-session read until autovacuum gets round to the table.
    op.execute("ANALYZE events")
    op.execute("ANALYZE session_ids")


def _v2_columns() -> list[sa.Column]:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    return [
        sa.Column("position", position, autoincrement=True, nullable=False),
        sa.Column("sid", sa.LargeBinary(16), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("wall_ns", sa.BigInteger(), nullable=False),
        sa.Column("mono_ns", sa.BigInteger(), nullable=False),
        sa.Column("kind_code", sa.SmallInteger(), nullable=True),
        sa.Column("kind_text", sa.String(32), nullable=True),
        sa.Column("direction_code", sa.SmallInteger(), nullable=True),
        sa.Column("direction_text", sa.String(3), nullable=True),
        sa.Column("raw", sa.LargeBinary(), nullable=False),
        sa.Column("raw_size", sa.BigInteger(), nullable=True),
        sa.Column("msg_type_code", sa.SmallInteger(), nullable=True),
        sa.Column("method", sa.Text(), nullable=True),
        sa.Column("rpc_id", sa.Text(), nullable=True),
        sa.Column("rpc_id_type_code", sa.SmallInteger(), nullable=True),
        sa.Column("tool", sa.Text(), nullable=True),
        sa.Column("is_error", sa.Boolean(), nullable=True),
        sa.Column("error_code", sa.BigInteger(), nullable=True),
        sa.Column("era", sa.String(16), nullable=True),
        sa.Column("degraded", sa.Text(), nullable=True),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
    ]


def _upgrade_sqlite(bind: sa.engine.Connection) -> None:
    driver = bind.connection.dbapi_connection
    assert driver is not None  # a connection in use holds its driver's
    driver.create_function("blackbox_sid", 1, layout.sid_bytes, deterministic=True)
    op.execute(
        "INSERT INTO session_ids (sid, session_id) "
        "SELECT blackbox_sid(session_id), session_id FROM "
        "(SELECT session_id FROM events UNION SELECT session_id FROM sessions)"
    )
    op.create_table(
        "events_v2",
        *_v2_columns(),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_events")),
        sa.UniqueConstraint("sid", "seq", name=op.f("uq_events_sid_seq")),
    )
    coded = {text: _encode_case(text, codes) for text, _column, codes in CODED}
    op.execute(
        "INSERT INTO events_v2 (position, sid, seq, wall_ns, mono_ns, kind_code, kind_text, "
        "direction_code, direction_text, raw, raw_size, msg_type_code, method, rpc_id, "
        "rpc_id_type_code, tool, is_error, error_code, era, degraded, hash) "
        "SELECT position, blackbox_sid(session_id), seq, wall_ns, mono_ns, "
        f"{coded['kind']}, CASE WHEN {coded['kind']} IS NULL THEN kind END, "
        f"{coded['direction']}, CASE WHEN {coded['direction']} IS NULL THEN direction END, "
        f"raw, raw_size, {coded['msg_type']}, method, "
        f"rpc_id, {coded['rpc_id_type']}, tool, is_error, error_code, era, degraded, hash "
        "FROM events ORDER BY position"
    )
    for name in (*SQLITE_EVENTS_TRIGGERS, "retention_removals_by_record"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("DROP TABLE events")
    op.execute("ALTER TABLE events_v2 RENAME TO events")
    for statement in SQLITE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    bind = op.get_bind()
    op.execute("DROP VIEW event_log")
    if bind.dialect.name == "postgresql":
        _downgrade_postgres()
    else:
        _downgrade_sqlite()
    op.drop_table("session_ids")


def _decode_case(column: str, codes: dict[str, int]) -> str:
    whens = " ".join(f"WHEN {number} THEN '{name}'" for name, number in codes.items())
    return f"CASE {column} {whens} END"


def _downgrade_postgres() -> None:
    op.execute("DROP TRIGGER IF EXISTS session_ids_append_only ON session_ids")
    op.execute("DROP TRIGGER IF EXISTS session_ids_no_truncate ON session_ids")
    op.execute("DROP FUNCTION IF EXISTS blackbox_refuse_session_id_change()")
    op.execute("ALTER TABLE events DROP CONSTRAINT uq_events_sid_seq")
    op.execute("ALTER TABLE events DISABLE TRIGGER USER")
    op.execute("ALTER TABLE events ADD COLUMN session_id varchar(64)")
    op.execute(
        "UPDATE events e SET session_id = m.session_id FROM session_ids m WHERE m.sid = e.sid"
    )
    op.execute("ALTER TABLE events ENABLE TRIGGER USER")
    op.execute("ALTER TABLE events ALTER COLUMN session_id SET NOT NULL, DROP COLUMN sid")
    lengths = {"kind": 32, "direction": 3, "msg_type": 16, "rpc_id_type": 8}
    changes = []
    for text, column, codes in CODED:
        decoded = _decode_case(column, codes)
        if text in ("kind", "direction"):
            decoded = f"coalesce({decoded}, {text}_text)"
        changes.append(f"ALTER COLUMN {column} TYPE varchar({lengths[text]}) USING ({decoded})")
    op.execute(f"ALTER TABLE events {', '.join(changes)}")
    op.execute(
        "ALTER TABLE events DROP COLUMN kind_text, DROP COLUMN direction_text, "
        "ALTER COLUMN kind_code SET NOT NULL, ALTER COLUMN direction_code SET NOT NULL"
    )
    for text, column, _codes in CODED:
        op.execute(f"ALTER TABLE events RENAME COLUMN {column} TO {text}")
    op.execute(
        "ALTER TABLE events ADD CONSTRAINT uq_events_session_id_seq UNIQUE (session_id, seq)"
    )
    for statement in _V1.POSTGRES_FUNCTIONS:
        op.execute(statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))


def _downgrade_sqlite() -> None:
    for name in (*SQLITE_EVENTS_TRIGGERS, "retention_removals_by_record"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("DROP TRIGGER IF EXISTS session_ids_no_update")
    op.execute("DROP TRIGGER IF EXISTS session_ids_no_delete")
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "events_v1",
        sa.Column("position", position, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("wall_ns", sa.BigInteger(), nullable=False),
        sa.Column("mono_ns", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("direction", sa.String(3), nullable=False),
        sa.Column("raw", sa.LargeBinary(), nullable=False),
        sa.Column("raw_size", sa.BigInteger(), nullable=True),
        sa.Column("msg_type", sa.String(16), nullable=True),
        sa.Column("method", sa.Text(), nullable=True),
        sa.Column("rpc_id", sa.Text(), nullable=True),
        sa.Column("rpc_id_type", sa.String(8), nullable=True),
        sa.Column("tool", sa.Text(), nullable=True),
        sa.Column("is_error", sa.Boolean(), nullable=True),
        sa.Column("error_code", sa.BigInteger(), nullable=True),
        sa.Column("era", sa.String(16), nullable=True),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
        sa.Column("degraded", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_events")),
        sa.UniqueConstraint("session_id", "seq", name=op.f("uq_events_session_id_seq")),
    )
    decoded = {text: _decode_case(f"e.{column}", codes) for text, column, codes in CODED}
    for text in ("kind", "direction"):
        decoded[text] = f"coalesce({decoded[text]}, e.{text}_text)"
    op.execute(
        "INSERT INTO events_v1 (position, session_id, seq, wall_ns, mono_ns, kind, direction, "
        "raw, raw_size, msg_type, method, rpc_id, rpc_id_type, tool, is_error, error_code, era, "
        "hash, degraded) "
        "SELECT e.position, m.session_id, e.seq, e.wall_ns, e.mono_ns, "
        f"{decoded['kind']}, {decoded['direction']}, e.raw, e.raw_size, {decoded['msg_type']}, "
        f"e.method, e.rpc_id, {decoded['rpc_id_type']}, e.tool, e.is_error, e.error_code, "
        "e.era, e.hash, e.degraded FROM events e JOIN session_ids m ON m.sid = e.sid "
        "ORDER BY e.position"
    )
    op.execute("DROP TABLE events")
    op.execute("ALTER TABLE events_v1 RENAME TO events")
    # Revision 0003's triggers on the log and on retention_removals, and 0001's on updates.
    for statement in _V1.SQLITE_TRIGGERS[:3]:
        op.execute(statement)
    op.execute(
        f"""CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: UPDATE refused'); END"""
    )
