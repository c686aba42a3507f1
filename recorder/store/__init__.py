"""The event store: one interface, a SQLAlchemy backend each for SQLite and PostgreSQL.

`open_store(url)` is the only way in: it checks the URL, picks the backend (`sqlite.py`,
`postgres.py`, over what they share in `sql.py`), applies migrations on first use and refuses a
schema newer than this code. Only writers create a store (`create=True`, the default here: taps,
`blackbox ship`, `db upgrade`, decision recording); readers pass `create=False` and get
`StoreMissing` where there is no store, so a mistyped URL is an error rather than a new, empty
store. SQLAlchemy is imported only when a store is opened or a URL checked.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from blackbox.recorder import BadStoreURL
from blackbox.recorder.log import Finding, NewEvent, SessionInfo, StoredEvent

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from blackbox.recorder.log import RetentionApplied
    from blackbox.recorder.store.removals import Authorise, Removal
    from sqlalchemy.engine import Connection
    from sqlalchemy.engine.url import URL


class EventStore(Protocol):
    """What every backend offers. Appends are idempotent per (session, seq) and gapless."""

    url: str

    def append(self, events: Sequence[NewEvent]) -> int:
        """Append records (any sessions, each session's in seq order); returns how many were new.

        A record whose seq is already stored is skipped, so a shipper may retry a batch. A gap in
        seq or an append to a sealed session raises `AppendRefused`. A `session_ended` record is
        followed by a seal record the store adds itself.
        """
        ...

    def head(self, session_id: str) -> tuple[int, bytes]:
        """(last seq, chain head) of a session; (0, genesis) for one not seen yet."""
        ...

    def session(self, session_id: str) -> SessionInfo:
        """One session's projection row; raises `SessionNotFound`."""
        ...

    def list_sessions(
        self,
        limit: int | None = None,
        since_ns: int | None = None,
        name: str | None = None,
    ) -> list[SessionInfo]:
        """Sessions, newest first."""
        ...

    def resolve(self, ref: str) -> str:
        """A full id from a full id, a unique prefix, a short handle (the id's random tail, as
        `blackbox.recorder.query.handles` gives it) or `last` (the newest recorded session with
        traffic: `with_traffic`, not a replay)."""
        ...

    def read_session(self, session_id: str, after_seq: int = 0) -> Iterator[StoredEvent]:
        """A session's records in seq order."""
        ...

    def read_log(self, after_position: int = 0, limit: int | None = None) -> Iterator[StoredEvent]:
        """Every record past a log position, in log order: the feed of incremental readers."""
        ...

    def read_log_rows(
        self, after_position: int = 0, limit: int | None = None, batch_size: int = 5000
    ) -> Iterator[list[tuple]]:
        """`read_log` in batches of plain tuples in `StoredEvent` field order (`is_error` as the
        driver holds it: 0/1 on SQLite): bulk readers skip one object per record."""
        ...

    def max_position(self) -> int:
        """The highest log position stored (0 when empty)."""
        ...

    def verify(
        self, session_id: str | None = None, progress: Callable[[int, int], None] | None = None
    ) -> list[Finding]:
        """Check one session's chain, or every session's; no findings means intact. `progress`
        is told (sessions checked, sessions to check) after each session."""
        ...

    def verify_each(self, session_ids: Sequence[str]) -> dict[str, list[Finding]]:
        """`verify` of each listed session, as one run: its findings by session id (an empty
        list when it is intact). Raises `SessionNotFound` for an id with no session."""
        ...

    def add_hold(self, session_id: str, reason: str) -> None: ...

    def remove_hold(self, session_id: str) -> bool: ...

    def list_holds(self) -> list[tuple[str, str, int]]: ...

    def remove_sessions(
        self,
        session_ids: Sequence[str],
        applied: RetentionApplied | None = None,
        record_session: str | None = None,
        authorise: Authorise | None = None,
    ) -> int:
        """The one sanctioned removal (retention): whole sessions, held ones refused, recorded in
        the same transaction by a `retention_applied` record (`applied`, its ids, counts and
        leaves filled in, signed by `authorise` with the log's key) in a session of its own
        (`record_session`, or a new id) named `retention`; returns how many records were
        removed (`blackbox.recorder.store.removals`)."""
        ...

    def removals(self) -> list[Removal]:
        """Every session retention removed, with the record that says so, oldest first."""
        ...

    def transaction(self, write: bool = False) -> AbstractContextManager[Connection]:
        """A connection (a committed write transaction when `write`) for the store's companion
        modules: the Merkle tree (`blackbox.recorder.store.tree`) and its checkpoints."""
        ...

    def close(self) -> None: ...


# Opening the first store imports SQLAlchemy, a dialect and its driver, and perhaps Alembic. Two
# threads doing that at once can catch a package half imported: the HTTP proxy's shipper process,
# whose shipping and leftovers threads both open the store at start, died of "cannot import name
# 'AdaptedConnection' from partially initialized module 'sqlalchemy.engine'" and shipped nothing.
# So the first open of each backend in a process runs alone; later ones run side by side.
_FIRST_OPEN = threading.RLock()
_opened_backends: set[str] = set()


def normalise_url(url: str) -> URL:
    """Parse a store URL; only SQLite and PostgreSQL (via psycopg 3) are accepted."""
    with _FIRST_OPEN:  # the imports only (see above)
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise BadStoreURL(
            f"malformed store URL {url!r}: use sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise BadStoreURL("an in-memory SQLite store would lose everything: give a file path")
        return parsed
    raise BadStoreURL(f"unsupported store {backend!r} in {url!r}: use sqlite or postgresql")


# Query parameters that may carry a secret (psycopg takes `password`, `sslpassword`, ...): never
# part of a store's public URL nor of its fingerprint.
_SECRET_PARAM = re.compile(r"pass|secret|token|key", re.IGNORECASE)


def storable_text(text: str) -> bool:
    """Whether a filter's text is one a stored name, command or id could hold. A filter typed by
    a user may not be: a lone surrogate (undecodable bytes in argv) no driver can encode, a NUL
    (from a URL's query) that PostgreSQL refuses and SQLite's LIKE and GLOB read as the pattern's
    end (`%` NUL `%` would match every row). Such a filter matches nothing: readers check it
    before the text reaches a query."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def public_url(url: str) -> str:
    """The store's URL in one canonical spelling without credentials: what a journal records
    (`blackbox.recorder.capture.journal.StoreMark`) and compares to know which store it was written
    for. SQLite: the absolute file path; PostgreSQL: user, host, port (5432 when absent), database,
    and the query parameters that select a schema (`options`), never a password."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(str(parsed.database)).expanduser().resolve()
        return f"sqlite:///{path}"
    query = {k: v for k, v in sorted(parsed.query.items()) if not _SECRET_PARAM.search(k)}
    port = parsed.port if parsed.port is not None or not parsed.host else 5432
    # `URL.set` ignores None, hence `_replace` to drop the password.
    public = parsed._replace(password=None, host=parsed.host.lower() if parsed.host else None)
    return public.set(port=port, query=query).render_as_string(hide_password=False)


def open_store(url: str, *, create: bool = True) -> EventStore:
    """Open (and on first use, migrate) the store at `url`: `sqlite:///PATH` or
    `postgresql+psycopg://USER@HOST/DB` (`postgresql://` is taken to mean psycopg).

    With `create=False` (every reader) nothing is created: no directory, no file, no table; a
    missing SQLite file, an empty one, or a database without the schema raises `StoreMissing`.
    A store at an older revision is still brought to head."""
    backend = normalise_url(url).get_backend_name()
    if backend in _opened_backends:
        return _open_backend(backend, url, create)
    with _FIRST_OPEN:
        store = _open_backend(backend, url, create)
        _opened_backends.add(backend)
        return store


def _open_backend(backend: str, url: str, create: bool) -> EventStore:
    # Only the chosen backend's module is imported.
    if backend == "sqlite":
        from blackbox.recorder.store.sqlite import SqliteEventStore

        return SqliteEventStore(url, create=create)
    from blackbox.recorder.store.postgres import PostgresEventStore

    return PostgresEventStore(url, create=create)


def schema_head() -> str:
    """The schema revision this code writes: every store it opens is migrated to it."""
    from blackbox.recorder.store import migrate

    return migrate.head_revision()


__all__ = [
    "EventStore",
    "normalise_url",
    "open_store",
    "public_url",
    "schema_head",
    "storable_text",
]

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING  # noqa: E402

from blackbox.recorder import lazy_face as _lazy_face  # noqa: E402

if _TYPE_CHECKING:
    from blackbox.recorder.store import layout as layout
    from blackbox.recorder.store import removals as removals
    from blackbox.recorder.store import tree as tree
    from blackbox.recorder.store import tree_check as tree_check
    from blackbox.recorder.store.projection import derive as derive
    from blackbox.recorder.store.projection import session_info as session_info
    from blackbox.recorder.store.record_scan import records_of_kinds as records_of_kinds
    from blackbox.recorder.store.schema import HOOK_TRANSPORT as HOOK_TRANSPORT
    from blackbox.recorder.store.schema import events as events
    from blackbox.recorder.store.schema import metadata as metadata
    from blackbox.recorder.store.schema import sessions as sessions
    from blackbox.recorder.store.sql import SqlEventStore as SqlEventStore
    from blackbox.recorder.store.sql_reads import with_traffic as with_traffic

_FACE: dict[str, tuple[str, str | None]] = {
    "HOOK_TRANSPORT": ("blackbox.recorder.store.schema", "HOOK_TRANSPORT"),
    "SqlEventStore": ("blackbox.recorder.store.sql", "SqlEventStore"),
    "derive": ("blackbox.recorder.store.projection", "derive"),
    "events": ("blackbox.recorder.store.schema", "events"),
    "layout": ("blackbox.recorder.store.layout", None),
    "metadata": ("blackbox.recorder.store.schema", "metadata"),
    "records_of_kinds": ("blackbox.recorder.store.record_scan", "records_of_kinds"),
    "removals": ("blackbox.recorder.store.removals", None),
    "session_info": ("blackbox.recorder.store.projection", "session_info"),
    "sessions": ("blackbox.recorder.store.schema", "sessions"),
    "tree": ("blackbox.recorder.store.tree", None),
    "tree_check": ("blackbox.recorder.store.tree_check", None),
    "with_traffic": ("blackbox.recorder.store.sql_reads", "with_traffic"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---
