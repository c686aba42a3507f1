"""Alembic environment: always driven programmatically with a connection handed in by
`blackbox.recorder.store.migrate`, so the store URL logic lives in one place."""

from alembic import context
from blackbox.recorder.store import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
