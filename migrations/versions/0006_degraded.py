"""A derived column that says which of a record's derived values had to be fitted to be stored:
`events.degraded`, "column:reason" notes such as "method:surrogate" or "error_code:out_of_range"
(recorder/log/jsonrpc.py `degradation`). Derived from the raw bytes like the other views, so
`verify` recomputes it; records appended before this revision hold NULL, which `verify` accepts.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("degraded", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("events", "degraded")
