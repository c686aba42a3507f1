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


def is_current(connection: Connection) -> bool:
    """Whether the schema is at head (raises `SchemaTooNew` for an unknown revision)."""
    current = current_revision(connection)
    _refuse_unknown(current)
    return current == head_revision()


def _refuse_unknown(current: str | None) -> None:
    if current is None:
        return
    script = ScriptDirectory.from_config(alembic_config())
    try:
        script.get_revision(current)
    except CommandError:
        raise SchemaTooNew(
            f"the store's schema is at revision {current}, newer than this mcp-blackbox "
            f"knows (head {script.get_current_head()}): upgrade mcp-blackbox"
        ) from None


def upgrade(connection: Connection) -> bool:
    """Bring the schema to head inside the caller's transaction; True when anything ran."""
    current = current_revision(connection)
    _refuse_unknown(current)
    if current == head_revision():
        return False
    command.upgrade(alembic_config(connection), "head")
    return True
