"""The write side and the system of record of mcp-blackbox.

Everything else (replay, analytics, the CLI) reads what this package wrote; nothing here imports
them.
"""

__version__ = "0.1.0"

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder.faces import lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder import serving as serving
    from blackbox.recorder.errors import AmbiguousSession as AmbiguousSession
    from blackbox.recorder.errors import AppendRefused as AppendRefused
    from blackbox.recorder.errors import BadStoreURL as BadStoreURL
    from blackbox.recorder.errors import BlackboxError as BlackboxError
    from blackbox.recorder.errors import SchemaTooNew as SchemaTooNew
    from blackbox.recorder.errors import SessionNotFound as SessionNotFound
    from blackbox.recorder.errors import StoreError as StoreError
    from blackbox.recorder.errors import StoreFull as StoreFull
    from blackbox.recorder.errors import StoreLocked as StoreLocked
    from blackbox.recorder.errors import StoreMissing as StoreMissing
    from blackbox.recorder.errors import StoreReadOnly as StoreReadOnly
    from blackbox.recorder.errors import StoreUnavailable as StoreUnavailable
    from blackbox.recorder.private import FILE_MODE as FILE_MODE
    from blackbox.recorder.private import create_private as create_private
    from blackbox.recorder.private import private_dir as private_dir
    from blackbox.recorder.private import private_file as private_file
    from blackbox.recorder.serving import GuardError as GuardError
    from blackbox.recorder.serving import HostGuard as HostGuard
    from blackbox.recorder.serving import is_loopback as is_loopback
    from blackbox.recorder.serving import normalise_allowed_host as normalise_allowed_host
    from blackbox.recorder.serving import split_host as split_host

_FACE: dict[str, tuple[str, str | None]] = {
    "AmbiguousSession": ("blackbox.recorder.errors", "AmbiguousSession"),
    "AppendRefused": ("blackbox.recorder.errors", "AppendRefused"),
    "BadStoreURL": ("blackbox.recorder.errors", "BadStoreURL"),
    "BlackboxError": ("blackbox.recorder.errors", "BlackboxError"),
    "FILE_MODE": ("blackbox.recorder.private", "FILE_MODE"),
    "GuardError": ("blackbox.recorder.serving", "GuardError"),
    "HostGuard": ("blackbox.recorder.serving", "HostGuard"),
    "SchemaTooNew": ("blackbox.recorder.errors", "SchemaTooNew"),
    "SessionNotFound": ("blackbox.recorder.errors", "SessionNotFound"),
    "StoreError": ("blackbox.recorder.errors", "StoreError"),
    "StoreFull": ("blackbox.recorder.errors", "StoreFull"),
    "StoreLocked": ("blackbox.recorder.errors", "StoreLocked"),
    "StoreMissing": ("blackbox.recorder.errors", "StoreMissing"),
    "StoreReadOnly": ("blackbox.recorder.errors", "StoreReadOnly"),
    "StoreUnavailable": ("blackbox.recorder.errors", "StoreUnavailable"),
    "create_private": ("blackbox.recorder.private", "create_private"),
    "is_loopback": ("blackbox.recorder.serving", "is_loopback"),
    "normalise_allowed_host": ("blackbox.recorder.serving", "normalise_allowed_host"),
    "private_dir": ("blackbox.recorder.private", "private_dir"),
    "private_file": ("blackbox.recorder.private", "private_file"),
    "serving": ("blackbox.recorder.serving", None),
    "split_host": ("blackbox.recorder.serving", "split_host"),
}

__getattr__, __dir__ = lazy_face(__name__, _FACE, globals)


# --- end of the public face ---
