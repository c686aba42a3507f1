"""Where things live: the store URL, the journal directory, the analytics directory.

Precedence: a command-line flag, then the environment (`BLACKBOX_STORE`, `BLACKBOX_HOME`), then
the user's configuration (`config.toml` in the data directory: `store = "URL"`), then the user's
data directory (`$XDG_DATA_HOME/mcp-blackbox`, default `~/.local/share/mcp-blackbox`).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from blackbox.recorder import BlackboxError, private_dir
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
    """The store to use: `--store`, else `BLACKBOX_STORE`, else the user's configuration, else
    SQLite in the data directory."""
    return flag or os.environ.get(STORE_ENV) or configured_store() or default_store_url()


def user_config_file() -> Path:
    """The user's configuration. Hosts started from the desktop do not get the shell's
    environment, so this file is how the servers they start find the user's store."""
    return data_dir() / "config.toml"


def configured_store() -> str | None:
    """The `store` of the user's configuration, None when it names none."""
    path = user_config_file()
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxError(f"{path}: cannot read the configuration: {exc}") from None
    try:
        value = tomllib.loads(text).get("store")
    except tomllib.TOMLDecodeError as exc:
        raise BlackboxError(f"{path}: not valid TOML: {exc}") from None
    if value is not None and (not isinstance(value, str) or not value):
        raise BlackboxError(f'{path}: "store" must be a store URL (a non-empty string)')
    return value


def save_store(url: str) -> Path:
    """Make `url` the user's store: the `store` line of the configuration is replaced (or
    added), every other line kept; the file is the user's alone (a URL may hold a password)."""
    path = user_config_file()
    private_dir(path.parent)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        text = ""
    line = f"store = {_toml_string(url)}"
    pattern = re.compile(r"^[ \t]*store[ \t]*=.*$", re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: line, text, count=1)
    else:
        text += ("" if not text or text.endswith("\n") else "\n") + line + "\n"
    try:
        tomllib.loads(text)  # what is written must read back
    except tomllib.TOMLDecodeError as exc:
        raise BlackboxError(f"{path}: not valid TOML: {exc}; fix it, then try again") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)
    return path


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped) + '"'


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
