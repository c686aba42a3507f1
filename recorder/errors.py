"""The errors the recorder raises on purpose. The CLI turns each into one line and exit status 2."""

from __future__ import annotations


class BlackboxError(Exception):
    """Base of every error a user can meet; the message is one line that says what to do."""


class StoreError(BlackboxError):
    """The store cannot be used as asked."""


class BadStoreURL(StoreError):
    pass


class StoreUnavailable(StoreError):
    pass


class StoreLocked(StoreError):
    pass


class StoreReadOnly(StoreError):
    pass


class StoreFull(StoreError):
    pass


class SchemaTooNew(StoreError):
    pass


class StoreMissing(StoreError):
    """A reader was pointed at a store that does not exist (no file, an empty file, a database
    without the schema): readers never create one, only writers do."""


class AppendRefused(StoreError):
    """An append that would break the log's rules (a gap in seq, a sealed session)."""


class SessionNotFound(BlackboxError):
    pass


class AmbiguousSession(BlackboxError):
    pass
