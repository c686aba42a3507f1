"""The log's identity, and the tree's tables append-only like the log.

`log_identity`: one row holding a random id made when the store is created (or upgraded to this
revision). A checkpoint is kept per log, keyed by this id, so any number of stores can share one
data directory and each is checkpointed, verified and exported on its own.

Triggers refuse UPDATE and DELETE (and TRUNCATE on PostgreSQL) on the tables that only ever grow:
the cached tree's nodes, the leaf hashes retention kept, the checkpoints and the identity. The
tree is never trusted for that (verify and signing recompute it), but editing it now takes
dropping a trigger, as editing a record does.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

import time
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


GUARDED = ("tree_nodes", "tree_removed_leaves", "checkpoints", "log_identity")
REFUSAL = "blackbox: the tree tables are append-only"


def upgrade() -> None:
    table = op.create_table(
        "log_identity",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("store_id", sa.String(36), nullable=False),
        sa.Column("created_ns", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "store_id": str(uuid.uuid4()), "created_ns": time.time_ns()}])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"""CREATE FUNCTION blackbox_refuse_tree_change() RETURNS trigger LANGUAGE plpgsql
            AS $$ BEGIN
              RAISE EXCEPTION '{REFUSAL}: % refused', TG_OP USING ERRCODE = 'restrict_violation';
            END $$"""
        )
        for name in GUARDED:
            op.execute(
                f"CREATE TRIGGER {name}_append_only BEFORE UPDATE OR DELETE ON {name} "
                "FOR EACH ROW EXECUTE FUNCTION blackbox_refuse_tree_change()"
            )
            op.execute(
                f"CREATE TRIGGER {name}_no_truncate BEFORE TRUNCATE ON {name} "
                "FOR EACH STATEMENT EXECUTE FUNCTION blackbox_refuse_tree_change()"
            )
        return
    for name in GUARDED:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER {name}_no_{verb.lower()} BEFORE {verb} ON {name} "
                f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}: {verb} refused'); END"
            )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in GUARDED:
        if postgres:
            op.execute(f"DROP TRIGGER IF EXISTS {name}_append_only ON {name}")
            op.execute(f"DROP TRIGGER IF EXISTS {name}_no_truncate ON {name}")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name}_no_update")
            op.execute(f"DROP TRIGGER IF EXISTS {name}_no_delete")
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS blackbox_refuse_tree_change()")
    op.drop_table("log_identity")
