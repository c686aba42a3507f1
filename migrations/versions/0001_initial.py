"""The event log, the sessions projection, legal holds, retention grants, append-only triggers.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

REFUSAL = "blackbox: the event log is append-only"

SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: UPDATE refused'); END""",
    f"""CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    WHEN NOT EXISTS (SELECT 1 FROM retention_grants g WHERE g.session_id = OLD.session_id)
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE refused'); END""",
]

POSTGRES_TRIGGERS = [
    f"""CREATE FUNCTION blackbox_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' AND EXISTS (
          SELECT 1 FROM retention_grants g WHERE g.session_id = OLD.session_id) THEN
        RETURN OLD;
      END IF;
      RAISE EXCEPTION '{REFUSAL}: % refused', TG_OP USING ERRCODE = 'restrict_violation';
    END $$""",
    """CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION blackbox_refuse_change()""",
    """CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION blackbox_refuse_change()""",
]


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "events",
        sa.Column("position", position, primary_key=True, autoincrement=True),
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
        sa.PrimaryKeyConstraint("position", name=op.f("pk_events")),
        sa.UniqueConstraint("session_id", "seq", name=op.f("uq_events_session_id_seq")),
    )
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("transport", sa.String(16), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("started_ns", sa.BigInteger(), nullable=True),
        sa.Column("ended_ns", sa.BigInteger(), nullable=True),
        sa.Column("last_wall_ns", sa.BigInteger(), nullable=True),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("head_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("frames", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("era", sa.String(16), nullable=True),
        sa.Column("client_info", sa.Text(), nullable=True),
        sa.Column("server_info", sa.Text(), nullable=True),
        sa.Column("replay_of", sa.String(64), nullable=True),
        sa.Column("sealed_count", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_sessions")),
    )
    op.create_index(op.f("ix_sessions_started_ns"), "sessions", ["started_ns"])
    op.create_index(op.f("ix_sessions_name"), "sessions", ["name"])
    op.create_table(
        "holds",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_ns", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_holds")),
    )
    op.create_table(
        "retention_grants",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_retention_grants")),
    )
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_TRIGGERS if dialect == "postgresql" else SQLITE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS events_no_truncate ON events")
        op.execute("DROP TRIGGER IF EXISTS events_append_only ON events")
        op.execute("DROP FUNCTION IF EXISTS blackbox_refuse_change()")
    for table in ("retention_grants", "holds", "sessions", "events"):
        op.drop_table(table)
