"""The log's commitment key: per-value commitments in the tree's leaves from here on.

A redacted record in a bundle could not be recomputed, so its visible part was covered by nothing
but the manifest's signature. From this revision each new leaf of the tree is
`SHA256(0x00 || chain hash || C)`, where C commits to the record's header and to every value of
its raw bytes with a salt (recorder/log/commitment.py; docs/trust.md, "Commitments"). The salts
come from a secret kept here: `commitment_keys` holds one row, the 32-byte key and `first_leaf`,
the tree's size when the key was made. Leaves below it keep their input (the chain hash), so an
upgraded store verifies against every checkpoint signed before, and the leaves after it carry
commitments. The table only grows, guarded like the tree's tables (0007).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

import secrets
import time

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

REFUSAL = "blackbox: the tree tables are append-only"


def upgrade() -> None:
    table = op.create_table(
        "commitment_keys",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("key", sa.LargeBinary(), nullable=False),
        sa.Column("first_leaf", sa.BigInteger(), nullable=False),
        sa.Column("created_ns", sa.BigInteger(), nullable=False),
    )
    size = op.get_bind().execute(sa.text("SELECT size FROM tree_state WHERE id = 1")).scalar()
    op.bulk_insert(
        table,
        [
            {
                "id": 1,
                "key": secrets.token_bytes(32),
                "first_leaf": int(size or 0),
                "created_ns": time.time_ns(),
            }
        ],
    )
    if op.get_bind().dialect.name == "postgresql":
        # blackbox_refuse_tree_change() is 0007's.
        op.execute(
            "CREATE TRIGGER commitment_keys_append_only BEFORE UPDATE OR DELETE ON "
            "commitment_keys FOR EACH ROW EXECUTE FUNCTION blackbox_refuse_tree_change()"
        )
        op.execute(
            "CREATE TRIGGER commitment_keys_no_truncate BEFORE TRUNCATE ON commitment_keys "
            "FOR EACH STATEMENT EXECUTE FUNCTION blackbox_refuse_tree_change()"
        )
        return
    for verb in ("UPDATE", "DELETE"):
        op.execute(
            f"CREATE TRIGGER commitment_keys_no_{verb.lower()} BEFORE {verb} ON commitment_keys "
            f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}: {verb} refused'); END"
        )


def downgrade() -> None:
    # The key is what the committed leaves are recomputed from: without it they could never be
    # checked again, and every checkpoint over them would fail. Refused rather than lost.
    bind = op.get_bind()
    size = bind.execute(sa.text("SELECT size FROM tree_state WHERE id = 1")).scalar() or 0
    first = bind.execute(sa.text("SELECT first_leaf FROM commitment_keys WHERE id = 1")).scalar()
    if first is not None and first < size:
        raise RuntimeError(
            f"blackbox: cannot downgrade below 0011: {size - first} leaves of the tree carry "
            "commitments salted from the key this revision keeps, and would no longer verify"
        )
    op.drop_table("commitment_keys")
