"""Retention by record: a DELETE on the log is accepted only for a removal the log itself records.

Revision 0001 let a DELETE through for any session listed in `retention_grants`, a table any
writer could INSERT into: one forged row, and a whole session or a sealed session's tail could be
deleted without a trace. This revision drops that table and replaces it with
`retention_removals`, whose rows the database itself refuses unless they point at a
`retention_applied` record of the log that names the session (in another session: a record cannot
authorise the removal of its own session). Such a record is permanent — the triggers never let a
`retention_applied` record be deleted — so whoever removes a session, honestly or not, leaves a
record of it in the log that `verify` reports. Removal takes whole sessions: PostgreSQL checks at
the end of each DELETE statement that no record of a touched session is left; SQLite, which has
no statement triggers, only lets a session's lowest remaining seq go, so a tail cannot be cut
(a head cut is refused by nothing but found by `verify`: a removed session must have no records).

Revision ID: 0003
Revises: 0001
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None

REFUSAL = "blackbox: the event log is append-only"
NOT_RECORDED = (
    f"{REFUSAL}: a removal needs a retention_applied record, in another session, naming the session"
)

SQLITE_TRIGGERS = [
    # Unchanged name, so tools that know revision 0001's triggers find this one.
    f"""CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    WHEN OLD.kind = 'retention_applied'
      OR NOT EXISTS (SELECT 1 FROM retention_removals g WHERE g.session_id = OLD.session_id)
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE refused (not a recorded retention)'); END""",
    # Whole sessions only: the lowest remaining seq first (the store deletes a session by its
    # (session_id, seq) index, in seq order), so what is left is always a tail — never a head
    # with its sealed end cut off.
    f"""CREATE TRIGGER events_whole_sessions BEFORE DELETE ON events
    WHEN EXISTS (SELECT 1 FROM events e
                 WHERE e.session_id = OLD.session_id AND e.seq < OLD.seq)
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE of part of a session refused'); END""",
    f"""CREATE TRIGGER retention_removals_by_record BEFORE INSERT ON retention_removals
    WHEN NOT EXISTS (
      SELECT 1 FROM events r
      WHERE r.position = NEW.removed_by
        AND r.kind = 'retention_applied'
        AND r.session_id <> NEW.session_id
        AND json_valid(CAST(r.raw AS TEXT))
        AND EXISTS (SELECT 1 FROM json_each(CAST(r.raw AS TEXT), '$.removed') j
                    WHERE j.type = 'text' AND j.value = NEW.session_id))
    BEGIN SELECT RAISE(ABORT, '{NOT_RECORDED}'); END""",
    f"""CREATE TRIGGER retention_removals_no_update BEFORE UPDATE ON retention_removals
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: UPDATE of a retention removal refused'); END""",
    f"""CREATE TRIGGER retention_removals_no_delete BEFORE DELETE ON retention_removals
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE of a retention removal refused'); END""",
]

POSTGRES_FUNCTIONS = [
    f"""CREATE OR REPLACE FUNCTION blackbox_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        IF OLD.kind <> 'retention_applied' AND EXISTS (
            SELECT 1 FROM retention_removals g WHERE g.session_id = OLD.session_id) THEN
          RETURN OLD;
        END IF;
        RAISE EXCEPTION '{REFUSAL}: DELETE refused (not a recorded retention)'
          USING ERRCODE = 'restrict_violation';
      END IF;
      RAISE EXCEPTION '{REFUSAL}: % refused', TG_OP USING ERRCODE = 'restrict_violation';
    END $$""",
    f"""CREATE FUNCTION blackbox_whole_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      partial text;
    BEGIN
      SELECT d.session_id INTO partial FROM (SELECT DISTINCT session_id FROM gone) AS d
      WHERE EXISTS (SELECT 1 FROM events e WHERE e.session_id = d.session_id) LIMIT 1;
      IF partial IS NOT NULL THEN
        RAISE EXCEPTION '{REFUSAL}: DELETE of part of session % refused', partial
          USING ERRCODE = 'restrict_violation';
      END IF;
      RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION blackbox_removal_by_record() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' AND EXISTS (
          SELECT 1 FROM events r
          WHERE r.position = NEW.removed_by
            AND r.kind = 'retention_applied'
            AND r.session_id <> NEW.session_id
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
]

POSTGRES_TRIGGERS = [
    """CREATE TRIGGER events_whole_sessions AFTER DELETE ON events
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION blackbox_whole_sessions()""",
    """CREATE TRIGGER retention_removals_by_record BEFORE INSERT OR UPDATE OR DELETE
    ON retention_removals FOR EACH ROW EXECUTE FUNCTION blackbox_removal_by_record()""",
    """CREATE TRIGGER retention_removals_no_truncate BEFORE TRUNCATE ON retention_removals
    FOR EACH STATEMENT EXECUTE FUNCTION blackbox_removal_by_record()""",
]

# Revision 0001's function and trigger, restored by a downgrade.
OLD_POSTGRES_FUNCTION = f"""CREATE OR REPLACE FUNCTION blackbox_refuse_change()
    RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' AND EXISTS (
          SELECT 1 FROM retention_grants g WHERE g.session_id = OLD.session_id) THEN
        RETURN OLD;
      END IF;
      RAISE EXCEPTION '{REFUSAL}: % refused', TG_OP USING ERRCODE = 'restrict_violation';
    END $$"""
OLD_SQLITE_TRIGGER = f"""CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    WHEN NOT EXISTS (SELECT 1 FROM retention_grants g WHERE g.session_id = OLD.session_id)
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE refused'); END"""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_no_delete")
    # Rows of the old table were never checked against anything: they go with it.
    op.drop_table("retention_grants")
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "retention_removals",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("removed_by", position, nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_retention_removals")),
    )
    if dialect == "postgresql":
        for statement in POSTGRES_FUNCTIONS + POSTGRES_TRIGGERS:
            op.execute(statement)
    else:
        for statement in SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS events_whole_sessions ON events")
        op.execute("DROP TRIGGER IF EXISTS retention_removals_no_truncate ON retention_removals")
        op.execute("DROP TRIGGER IF EXISTS retention_removals_by_record ON retention_removals")
        op.execute("DROP FUNCTION IF EXISTS blackbox_whole_sessions()")
        op.execute("DROP FUNCTION IF EXISTS blackbox_removal_by_record()")
        op.execute(OLD_POSTGRES_FUNCTION)
    else:
        for name in (
            "events_no_delete",
            "events_whole_sessions",
            "retention_removals_by_record",
            "retention_removals_no_update",
            "retention_removals_no_delete",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_table("retention_removals")
    op.create_table(
        "retention_grants",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_retention_grants")),
    )
    if dialect == "sqlite":
        op.execute(OLD_SQLITE_TRIGGER)
