"""The Merkle tree over the whole log: sequenced leaves, cached subtree hashes, the frontier, and
the signed checkpoints (recorder/store/tree.py). Existing records are sequenced by the first
checkpoint, not here: a migration stays quick on a large store.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "tree_leaves",
        sa.Column("idx", position, autoincrement=False, nullable=False),
        sa.Column("position", position, nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("removed_by", position, nullable=True),
        sa.PrimaryKeyConstraint("idx", name=op.f("pk_tree_leaves")),
    )
    op.create_index(op.f("ix_tree_leaves_position"), "tree_leaves", ["position"])
    op.create_table(
        "tree_nodes",
        sa.Column("level", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
        sa.PrimaryKeyConstraint("level", "idx", name=op.f("pk_tree_nodes")),
    )
    op.create_table(
        "tree_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("watermark", sa.BigInteger(), nullable=False),
        sa.Column("frontier", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tree_state")),
    )
    op.create_table(
        "tree_gaps",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("seen_ns", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_tree_gaps")),
    )
    op.create_table(
        "checkpoints",
        sa.Column("id", position, autoincrement=True, nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_ns", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
    op.drop_table("tree_gaps")
    op.drop_table("tree_state")
    op.drop_table("tree_nodes")
    op.drop_index(op.f("ix_tree_leaves_position"), table_name="tree_leaves")
    op.drop_table("tree_leaves")
