"""The base every part of the SQL event store builds on: the engine, the hooks a backend fills
in, and the one place driver errors become `blackbox.recorder.errors`.

`SqlEventStore` (`sql.py`) is composed of mixins, one per job (`sql_append`, `sql_reads`,
`sql_verify`); each subclasses `SqlStoreBase` so it can use the engine, the parameter marker and
`_translated` with their types known, without importing the composed class. A backend
(`sqlite.py`, `postgres.py`) supplies what is marked abstract here and overrides the hooks where
its database differs.
"""

from __future__ import annotations

import errno
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from blackbox.recorder import (
    AppendRefused,
    BadStoreURL,
    BlackboxError,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreMissing,
    StoreReadOnly,
    StoreUnavailable,
)
from blackbox.recorder.store import migrate, normalise_url
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.interfaces import DBAPIConnection, DBAPICursor
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import DBAPIError, NoSuchModuleError, SQLAlchemyError


def describe_db_error(exc: BaseException, url: str) -> StoreError:
    """The one place driver errors become messages a user can act on."""
    text = str(getattr(exc, "orig", None) or exc)
    low = text.lower()
    if (
        (isinstance(exc, OSError) and exc.errno == errno.ENOSPC)
        or "disk is full" in low
        or ("no space left" in low)
    ):
        return StoreFull(f"store {url}: the disk is full ({text.splitlines()[0]})")
    if "database is locked" in low or "database table is locked" in low:
        return StoreLocked(f"store {url} is locked by another process; try again")
    if "readonly database" in low or "read-only" in low:
        return StoreReadOnly(f"store {url} is read-only: check the file's permissions")
    if "unable to open database file" in low:
        return StoreUnavailable(
            f"cannot open store {url}: check the directory exists and is writable"
        )
    if "file is not a database" in low:
        return StoreUnavailable(f"store {url} is not a SQLite database")
    # Before "connection failed": psycopg says a missing database or role in the same line, and
    # the server was reached — "unreachable" would send the user to look at the wrong thing.
    missing = re.search(r'(database|role) "([^"]*)" does not exist', text)
    if missing is not None:
        what, name = missing.groups()
        hint = f"create it (createdb {name})" if what == "database" else "check the user name"
        return StoreUnavailable(
            f"store {url}: the server answered, but {what} {name!r} does not exist there: {hint}"
        )
    if "connection refused" in low or "could not connect" in low or "connection failed" in low:
        return StoreUnavailable(f"store {url} is unreachable (is PostgreSQL running there?)")
    if "does not exist" in low and "database" in low:
        return StoreUnavailable(f"store {url}: {text.splitlines()[0]}")
    if "append-only" in low:
        return AppendRefused(f"store {url}: {text.splitlines()[0]}")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return StoreError(f"store {url}: {first}")


class SqlStoreBase(ABC):
    """The store's engine, its connection hooks and error translation; a backend supplies what is
    marked abstract."""

    # The driver's parameter marker, for the statements run on its own cursor (no SQLAlchemy
    # compilation on the bulk paths).
    MARK: str
    # What the driver raises on its own cursor, where SQLAlchemy does not wrap it (the bulk
    # paths): translated like any other database error.
    DRIVER_ERRORS: tuple[type[Exception], ...] = ()

    def __init__(self, url: str, create: bool = True) -> None:
        parsed = normalise_url(url)
        self.url = parsed.render_as_string(hide_password=True)
        if not create:
            self._require_existing(parsed)
        try:
            self.engine = self._create_engine(parsed, create)
        except NoSuchModuleError as exc:
            raise BadStoreURL(f"unsupported store driver in {url!r}: {exc}") from None
        try:
            with self._translated():
                self._migrate(create)
        except StoreMissing:
            self.engine.dispose()
            raise

    def _require_existing(self, parsed: URL) -> None:  # noqa: B027 - a hook, empty by default
        """Raise `StoreMissing` when a reader's store plainly is not there, before anything is
        opened (opening a SQLite file creates it); the schema itself is checked in `_migrate`."""

    def _missing(self, why: str = "") -> StoreMissing:
        hint = "a tap, `blackbox ship` or `blackbox db upgrade` creates one"
        return StoreMissing(f"no store at {self.url}{': ' + why if why else ''} ({hint})")

    def _migrate(self, create: bool = True) -> None:
        # Read the revision without a write lock, so a read-only store or a busy writer does not
        # stop read commands; take the write lock only when there is something to apply.
        with self.engine.connect() as conn:
            if migrate.is_current(conn):
                return
            if not create and migrate.current_revision(conn) is None:
                # A reader never lays a schema down: that would be creating the store.
                raise self._missing("the database holds no mcp-blackbox schema")
        with self.engine.connect() as conn:
            self._begin_write(conn)
            migrate.upgrade(conn)
            conn.commit()

    @abstractmethod
    def _create_engine(self, parsed: URL, create: bool = True) -> Engine:
        """The backend's engine, its connections set up as the store needs them (nothing made
        on disk unless `create`)."""

    def _begin_write(self, conn: Connection) -> None:  # noqa: B027 - a hook, empty by default
        """Prepare `conn` for a transaction that writes (nothing to do unless a backend says)."""

    def _lock_log(self, conn: Connection) -> None:  # noqa: B027 - a hook, empty by default
        """Serialise appends, so log positions become visible in commit order (a backend whose
        write transactions are already serial has nothing to do)."""

    @abstractmethod
    def _insert_events(self, conn: Connection, rows: Iterable[tuple]) -> None:
        """Insert events rows (in INSERT_COLUMNS order) the fastest way the driver offers, taking
        them from `rows` as it goes (they are made as they are taken)."""

    def _cursor(self, driver: DBAPIConnection) -> DBAPICursor:
        """A driver cursor that streams a large result as it is fetched."""
        return driver.cursor()

    def _bytes_cursor(self, driver: DBAPIConnection) -> DBAPICursor:
        """A driver cursor that streams a result holding raw bytes, the cheapest way."""
        return self._cursor(driver)

    @abstractmethod
    def _check_runs(self, session_id: str, runs: list[tuple[int, int]]) -> tuple[bool, int | None]:
        """Check the chain over each run of seq (first, last): whether every one is seq first..last,
        each record linking from the one before, and the seq of the session's first seal (None
        when it has none)."""

    @contextmanager
    def _translated(self) -> Iterator[None]:
        translated: tuple[type[Exception], ...] = (SQLAlchemyError, DBAPIError, OSError)
        try:
            yield
        except BlackboxError:
            raise
        except translated + self.DRIVER_ERRORS as exc:
            raise describe_db_error(exc, self.url) from exc

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Connection]:
        """A connection for the store's companion modules (`blackbox.recorder.store.tree`): a write
        transaction committed on success when `write`, errors translated either way."""
        with self._translated(), self.engine.connect() as conn:
            if write:
                self._begin_write(conn)
            yield conn
            if write:
                conn.commit()

    def close(self) -> None:
        self.engine.dispose()
