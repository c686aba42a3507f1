"""Run the Alembic migrations against a store, and refuse a schema this code does not know.

Checking is cheap (one SELECT, no Alembic import): every tap and hook opens a store, and most
find it current. Alembic is imported only when there is something to apply.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from blackbox.recorder import SchemaTooNew
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from blackbox import migrations

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = str(Path(migrations.__file__).parent)
# Any constant will do: it names the lock every migrating process takes on PostgreSQL.
_PG_MIGRATION_LOCK = 0x6D6370626C6B  # "mcpblk"
# Alembic runs a migration through process-wide proxies (`alembic.op`, `alembic.context`): two
# threads migrating at once, even two different stores, ran each other's operations on each
# other's connections ("table events already exists"). One migration at a time in a process.
_ALEMBIC_LOCK = threading.Lock()


def head_revision() -> str:
    return migrations.HEAD


def current_revision(connection: Connection) -> str | None:
    """The store's revision, or None for a store never migrated."""
    try:
        with connection.begin_nested():
            row = connection.execute(text("SELECT version_num FROM alembic_version")).first()
    except DBAPIError:
        return None
    return row[0] if row else None


def _refuse_unknown(current: str | None) -> None:
    if current is not None and current not in migrations.REVISIONS:
        raise SchemaTooNew(
            f"the store's schema is at revision {current}, newer than this mcp-blackbox "
            f"knows (head {migrations.HEAD}): upgrade mcp-blackbox"
        )


def is_current(connection: Connection) -> bool:
    """Whether the schema is at head (raises `SchemaTooNew` for an unknown revision)."""
    current = current_revision(connection)
    _refuse_unknown(current)
    return current == migrations.HEAD


def upgrade(connection: Connection) -> bool:
    """Bring the schema to head inside the caller's transaction; True when anything ran.

    Processes that open a new store at the same moment serialise here (SQLite: the caller's
    BEGIN IMMEDIATE; PostgreSQL: a transaction-scoped advisory lock) and re-check under the lock,
    so exactly one of them migrates; threads of one process also take turns (`_ALEMBIC_LOCK`).
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
    if is_current(connection):
        return False
    with _ALEMBIC_LOCK:
        from alembic import command

        command.upgrade(alembic_config(connection), "head")
    return True


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic Config for the migrations directory, bound to `connection` when given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    if connection is not None:
        config.attributes["connection"] = connection
    return config
