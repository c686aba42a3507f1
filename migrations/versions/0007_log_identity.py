"""The log's identity: one row holding a random id made when the store is created (or upgraded
to this revision). A checkpoint is kept per log, keyed by this id, so any number of stores can
share one data directory and each is checkpointed, verified and exported on its own.

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


def upgrade() -> None:
    table = op.create_table(
        "log_identity",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("store_id", sa.String(36), nullable=False),
        sa.Column("created_ns", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "store_id": str(uuid.uuid4()), "created_ns": time.time_ns()}])


def downgrade() -> None:
    op.drop_table("log_identity")
