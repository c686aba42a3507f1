"""Run the Alembic migrations against a store, and refuse a schema this code does not know."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection

import migrations
from recorder.errors import SchemaTooNew

SCRIPT_LOCATION = str(Path(migrations.__file__).parent)


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection) -> bool:
    """Bring the schema to head inside the caller's transaction; True when anything ran."""
    script = ScriptDirectory.from_config(alembic_config())
    current = current_revision(connection)
    if current is not None:
        try:
            script.get_revision(current)
        except CommandError:
            raise SchemaTooNew(
                f"the store's schema is at revision {current}, newer than this mcp-blackbox "
                f"knows (head {script.get_current_head()}): upgrade mcp-blackbox"
            ) from None
    if current == script.get_current_head():
        return False
    command.upgrade(alembic_config(connection), "head")
    return True
