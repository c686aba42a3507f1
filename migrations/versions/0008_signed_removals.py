"""Removals bound to their sessions and signed by the log's key.

`tree_removed_leaves.session_id`: the session whose record a kept leaf hash stood for. A kept leaf
is then bound to (retention record, session, leaf index), and `verify` checks the retention record
names that session and that index, instead of accepting a kept leaf that points at any retention
record.

`signed_removals`: one row, the log position from which every `retention_applied` record that
removes sessions must carry the leaves it removes and a signature by the log's key. A store made
at this revision signs from position 1; an older one from its next record, so the retention
records it already holds (made before removals were signed, their kept leaves not bound to a
session) still verify, and are reported as such. Both tables refuse UPDATE and DELETE like the
tree's (migration 0007).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

REFUSAL = "blackbox: the tree tables are append-only"


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    # SQLite cannot add a column under a trigger-guarded table through batch mode (it would copy
    # the table, which the DELETE trigger refuses); a plain ADD COLUMN rewrites nothing.
    op.add_column("tree_removed_leaves", sa.Column("session_id", sa.String(64), nullable=True))
    table = op.create_table(
        "signed_removals",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("from_position", sa.BigInteger(), nullable=False),
    )
    last = bind.execute(sa.text("SELECT MAX(position) FROM events")).scalar()
    op.bulk_insert(table, [{"id": 1, "from_position": int(last or 0) + 1}])
    if postgres:
        op.execute(
            "CREATE TRIGGER signed_removals_append_only BEFORE UPDATE OR DELETE ON signed_removals "
            "FOR EACH ROW EXECUTE FUNCTION blackbox_refuse_tree_change()"
        )
        op.execute(
            "CREATE TRIGGER signed_removals_no_truncate BEFORE TRUNCATE ON signed_removals "
            "FOR EACH STATEMENT EXECUTE FUNCTION blackbox_refuse_tree_change()"
        )
        return
    for verb in ("UPDATE", "DELETE"):
        op.execute(
            f"CREATE TRIGGER signed_removals_no_{verb.lower()} BEFORE {verb} ON signed_removals "
            f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}: {verb} refused'); END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS signed_removals_append_only ON signed_removals")
        op.execute("DROP TRIGGER IF EXISTS signed_removals_no_truncate ON signed_removals")
    else:
        op.execute("DROP TRIGGER IF EXISTS signed_removals_no_update")
        op.execute("DROP TRIGGER IF EXISTS signed_removals_no_delete")
    op.drop_table("signed_removals")
    # SQLite cannot drop a column under trigger-guarded tables without copying them; the
    # column is nullable and unread by 0007, so a downgrade leaves it on SQLite.
    if op.get_bind().dialect.name == "postgresql":
        op.drop_column("tree_removed_leaves", "session_id")
