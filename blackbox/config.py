"""Where things live: the store URL, the journal directory, the analytics directory.

Precedence: a command-line flag, then the environment (`BLACKBOX_STORE`, `BLACKBOX_HOME`), then
the user's data directory (`$XDG_DATA_HOME/mcp-blackbox`, default `~/.local/share/mcp-blackbox`).
"""

from __future__ import annotations

import os
from pathlib import Path

from blackbox.recorder.trust import keys

STORE_ENV = "BLACKBOX_STORE"
HOME_ENV = "BLACKBOX_HOME"


def data_dir() -> Path:
    """The directory holding the default SQLite store, journals and the analytics copy (the
    rule lives in recorder/trust/keys.py, which the shipper's signing key is found by too)."""
    return keys.data_dir()


def default_store_url() -> str:
    return f"sqlite:///{data_dir() / 'blackbox.db'}"


def store_url(flag: str | None = None) -> str:
    """The store to use: `--store`, else `BLACKBOX_STORE`, else SQLite in the data directory."""
    return flag or os.environ.get(STORE_ENV) or default_store_url()


def journal_dir() -> Path:
    """Where taps keep their write-ahead journals until the shipper has stored them."""
    return data_dir() / "journal"


def analytics_dir() -> Path:
    """Where the Parquet copy of the log lives."""
    return data_dir() / "analytics"


IDLE_AFTER_ENV = "BLACKBOX_IDLE_AFTER"
DEFAULT_IDLE_AFTER = "120min"
RETENTION_ENV = "BLACKBOX_RETENTION"
DEFAULT_RETENTION = "90d"
ARCHIVE_ENV = "BLACKBOX_ARCHIVE"


def idle_after(flag: str | None = None) -> str:
    """How long without a frame marks a session idle: `--idle-after`, else
    `BLACKBOX_IDLE_AFTER`, else 120 minutes (`off` or 0: never)."""
    return flag or os.environ.get(IDLE_AFTER_ENV) or DEFAULT_IDLE_AFTER


def retention(flag: str | None = None) -> str:
    """How old an ended session must be for retention to remove it: the flag, else
    `BLACKBOX_RETENTION`, else 90 days."""
    return flag or os.environ.get(RETENTION_ENV) or DEFAULT_RETENTION


def archive_dir(flag: str | None = None) -> Path:
    """Where retention archives what it removes: the flag, else `BLACKBOX_ARCHIVE`, else
    `archive/` in the data directory."""
    chosen = flag or os.environ.get(ARCHIVE_ENV)
    return Path(chosen).expanduser() if chosen else data_dir() / "archive"
