"""An index of the log's retention records, so that `verify` of one session reads no other.

Every `verify` (of one session or all), `verify_each` and the removal notes look up the log's
`retention_applied` records, to tell a removal from a deletion. Without an index that was a scan
of the whole log: 1.4 s warm and 9.3 s cold at 10M records on PostgreSQL, for every call
(docs/performance.md, "PostgreSQL verify to 10M"). This partial index holds only the rows whose
kind can read as `retention_applied` through `event_log`: code 10 (`layout.KIND_CODES`), and any
row that keeps its kind as text (a kind the writing version did not know); `removals` reads the
retention records through it (`layout.RETENTION_ROWS`, which must say the same as `WHERE`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# As this revision wrote it, whatever the code says later (10: `retention_applied`).
WHERE = "kind_code = 10 OR kind_text IS NOT NULL"


def upgrade() -> None:
    where = sa.text(WHERE)
    op.create_index(
        "ix_events_retention", "events", ["position"], sqlite_where=where, postgresql_where=where
    )


def downgrade() -> None:
    op.drop_index("ix_events_retention", table_name="events")
